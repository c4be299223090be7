// Package tunnel is bcd's side of the node console (docs/protocol.md,
// "Tunnels"). On an OpenTunnel the Manager checks the exec ticket before
// anything else (ticket.go: the tunnels issuer of the current trust
// bundle, this node, op console, exp on bcd's clock with Leeway, a jti
// never seen before), then dials Gateway.Tunnel over the node's mTLS
// identity (dial.go), presents the ticket, starts the shell on a real
// pseudo-terminal (shell.go) and relays bytes both ways (relay.go); the
// shell's exit status closes the tunnel. A refused ticket opens nothing:
// bcd dials Tunnel only to send the refusal as the close_reason
// "<code>: <detail>". Neither the ticket nor a byte of the console is ever
// logged.
package tunnel

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"bcd/internal/journal"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
)

// The terminal size when the OpenTunnel names none.
const (
	DefaultRows = 24
	DefaultCols = 80
)

// Config configures a Manager.
type Config struct {
	// NodeID is this node.
	NodeID string
	// Trust is the node's trust (the tunnels issuer, the trust domain).
	Trust Trust
	// Journal keeps the seen tickets.
	Journal *journal.Journal
	// Dial opens Tunnel streams.
	Dial Dialer
	// Shell is how consoles start their shell.
	Shell Shell
	// Now is bcd's clock (default time.Now).
	Now func() time.Time
	// Log receives tunnel.* lines.
	Log *slog.Logger
}

// Manager opens and runs a node's tunnels.
type Manager struct {
	cfg     Config
	checker *Checker
	log     *slog.Logger

	mu      sync.Mutex
	stopped bool
	stop    chan struct{}
	running sync.WaitGroup
}

// New returns a Manager; Frame hands it OpenTunnels, Stop ends its tunnels.
func New(cfg Config) *Manager {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		cfg:     cfg,
		checker: &Checker{NodeID: cfg.NodeID, Trust: cfg.Trust, Journal: cfg.Journal, Now: cfg.Now},
		log:     log,
		stop:    make(chan struct{}),
	}
}

// Frame takes an OpenTunnel (and reports true), opening it in the
// background; it leaves every other frame (false).
func (m *Manager) Frame(f *agentv1.GatewayFrame) bool {
	open := f.GetOpenTunnel()
	if open == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		m.log.Warn("tunnel.refused", "tunnel_id", open.GetTunnelId(), "reason", "bcd is stopping")
		return true
	}
	m.running.Add(1)
	go func() {
		defer m.running.Done()
		m.open(open)
	}()
	return true
}

// Stop hangs up every open tunnel and waits for them to end.
func (m *Manager) Stop() {
	m.mu.Lock()
	if !m.stopped {
		m.stopped = true
		close(m.stop)
	}
	m.mu.Unlock()
	m.running.Wait()
}

// open checks the ticket, then opens and relays the tunnel, or reports the
// refusal.
func (m *Manager) open(open *agentv1.OpenTunnel) {
	id := open.GetTunnelId()
	log := m.log.With("tunnel_id", id)
	ticket, err := m.checker.Check(open.GetTicket())
	if err != nil {
		log.Warn("tunnel.refused", "code", string(refusal.CodeOf(err)), "reason", err.Error())
		m.report(id, err.Error(), log)
		return
	}
	log.Info("tunnel.opening", "sub", ticket.Sub, "jti", ticket.Jti)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, closeConn, err := m.cfg.Dial(ctx)
	if err != nil {
		log.Warn("tunnel.dial_failed", "err", err)
		return
	}
	defer closeConn()
	first := &agentv1.TunnelFrame{TunnelId: id, Frame: &agentv1.TunnelFrame_Ticket{Ticket: open.GetTicket()}}
	if err := stream.Send(first); err != nil {
		log.Warn("tunnel.dial_failed", "err", err)
		return
	}
	rows, cols := size(open.GetSize())
	sh, err := m.cfg.Shell.start(open.GetTerm(), rows, cols)
	if err != nil {
		log.Error("tunnel.shell_failed", "code", string(refusal.CodeOf(err)), "reason", err.Error())
		closeWith(stream, id, err.Error())
		return
	}
	log.Info("tunnel.opened", "sub", ticket.Sub, "pid", sh.cmd.Process.Pid, "rows", rows, "cols", cols)
	out := newRelay(id, stream, sh).run(m.stop)
	if out.exited {
		log.Info("tunnel.closed", "exit_code", out.code)
		return
	}
	log.Info("tunnel.closed", "reason", out.reason)
}

// report dials Tunnel only to send why the tunnel was refused.
func (m *Manager) report(id, reason string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace+time.Second)
	defer cancel()
	stream, closeConn, err := m.cfg.Dial(ctx)
	if err != nil {
		log.Warn("tunnel.dial_failed", "err", err)
		return
	}
	defer closeConn()
	closeWith(stream, id, reason)
}

// closeWith sends a close_reason as the tunnel's last frame and waits
// (closeGrace at most) for the gateway to end the stream.
func closeWith(stream Stream, id, reason string) {
	if err := stream.Send(&agentv1.TunnelFrame{TunnelId: id, Frame: &agentv1.TunnelFrame_CloseReason{CloseReason: reason}}); err != nil {
		return
	}
	_ = stream.CloseSend()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	select {
	case <-ended:
	case <-time.After(closeGrace):
	}
}

// size is the OpenTunnel's terminal size, or 24 × 80.
func size(s *agentv1.TerminalSize) (rows, cols uint16) {
	rows, cols = DefaultRows, DefaultCols
	if s.GetRows() > 0 {
		rows = dimension(s.GetRows())
	}
	if s.GetCols() > 0 {
		cols = dimension(s.GetCols())
	}
	return rows, cols
}
