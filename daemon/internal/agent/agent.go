// Package agent is one node agent (`bcd node`, and each agent of `bcd
// sim`): it loads the identity (re-verifying the JoinResponse), opens the
// journal, and wires the session (gRPC, the WebSocket, or gRPC falling back
// to the WebSocket: dialer) to the dispatcher
// (commands, cancel; the kinds it runs are registered in kinds.go), the
// converger (desired state, one reconciler per NodeSpec section: telemetry,
// access (access.go), daemon (upgrade.go), and the instances section on a
// VPS host, vps.go), the consoles
// (tunnels.go: OpenTunnel through the frame handlers) and the status
// socket. It ends on its
// context (exit 0), after a self-terminating command (exit 0: the
// supervisor starts it again) or on revocation (exit 3). With an Updater
// it runs daemon.upgrade, execs the new binary (Options.Exec), and at start
// confirms a pending upgrade on the first Welcome or rolls it back at its
// deadline (docs/daemon.md, "Self-update in bcd").
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"bcd/internal/broker"
	"bcd/internal/config"
	"bcd/internal/converge"
	"bcd/internal/dispatch"
	"bcd/internal/hostconfig"
	"bcd/internal/identity"
	"bcd/internal/instances"
	"bcd/internal/intent"
	"bcd/internal/journal"
	"bcd/internal/machine"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/session"
	"bcd/internal/status"
	"bcd/internal/telemetry"
	"bcd/internal/tpm"
	"bcd/internal/tunnel"
	selfupdate "bcd/internal/update"
)

// JournalFile is the journal's file in the data dir.
const JournalFile = "journal.db"

// Exit codes of `bcd node`.
const (
	ExitOK      = 0
	ExitError   = 1
	ExitRevoked = 3
)

// Options configure an agent.
type Options struct {
	// Config is the node's configuration.
	Config *config.Config
	// Machine is the hardware.
	Machine machine.Machine
	// Version is bcd's version.
	Version string
	// AllowH2C permits dev_insecure_h2c (fakehw builds).
	AllowH2C bool
	// BackoffCap lowers the reconnect cap (0: the contract's 30 s).
	BackoffCap time.Duration
	// NoStatusSocket skips the status socket (tests).
	NoStatusSocket bool
	// Log receives the agent's lines.
	Log *slog.Logger
	// Updater runs daemon.upgrade and resumes a pending upgrade at start
	// (nil: no [update], daemon.upgrade is UNSUPPORTED).
	Updater *selfupdate.Updater
	// Exec replaces the process with the binary at path, after the agent
	// has closed everything (bcd node: syscall.Exec with the same arguments).
	Exec func(path string) error
	// NeverConnect makes every dial fail (the never-connecting fakehw build).
	NeverConnect bool
	// TPM opens the TPM when node.key refers to a key in it (the caller
	// closes it after Run).
	TPM func() (*tpm.TPM, error)
	// RenewAfter renews each certificate this long after taking it into
	// use instead of at 2/3 of its validity (BCD_RENEW_AFTER; 0: the latter).
	RenewAfter time.Duration
	// VPS makes the node a VPS host (vps.go; nil: no instances section).
	VPS *VPS
	// Identity is the identity this process just joined with and wrote
	// (join.Result.Identity), taken as it is; nil: the data dir's, read
	// and verified again (identity.Open).
	Identity *identity.Identity
}

// ErrNeverConnects is every dial's error in the never-connecting build.
var ErrNeverConnects = errors.New("this build never connects (fakehw, -X main.neverConnect=true)")

// Agent is one running node.
type Agent struct {
	opts       Options
	log        *slog.Logger
	id         *identity.Identity
	signing    *pki.PublicKey
	journal    *journal.Journal
	trust      *intent.Trust
	dispatcher *dispatch.Dispatcher
	converger  *converge.Converger
	specs      *specQueue // the desired states the session handed over (specs.go)
	telemetry  *telemetry.Reconciler
	session    *session.Session
	reboot     chan string
	exec       chan string
	watch      *selfupdate.Watch
	tunnels    *tunnel.Manager
	frames     []FrameHandler
	broker     *broker.Broker
	instances  *instances.Reconciler
	closeOnce  sync.Once
}

// New loads everything an agent needs; Close releases it when Run is not called.
func New(opts Options) (*Agent, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := opts.Config
	if c.NodeID == "" {
		return nil, identity.ErrNotJoined
	}
	signing, err := identity.JoinSigningKey(c)
	if err != nil {
		return nil, err
	}
	id := opts.Identity
	if id == nil {
		if id, err = identity.Open(c.DataDir, signing, identity.Options{TPM: opts.TPM}); err != nil {
			return nil, err
		}
	}
	if id.NodeID != c.NodeID {
		return nil, fmt.Errorf("%s names node %q, the identity in %s is %q", c.Path, c.NodeID, c.DataDir, id.NodeID)
	}
	j, err := journal.Open(filepath.Join(c.DataDir, JournalFile), journal.Options{Log: log})
	if err != nil {
		return nil, err
	}
	a := &Agent{opts: opts, log: log, id: id, signing: signing, journal: j, reboot: make(chan string, 1), exec: make(chan string, 1),
		specs: newSpecQueue()}
	if _, err := j.Sweep(); err != nil {
		log.Warn("journal.sweep_failed", "err", err)
	}
	a.trust, err = intent.New(j, id.Roots, id.TrustBundle, id.Response.GetTrustDomain(), c.SignedSpecs, log)
	if err != nil {
		j.Close()
		return nil, err
	}
	a.tunnels = a.newTunnels()
	a.frames = []FrameHandler{a.tunnels}
	a.session = session.New(session.Config{
		Gateways:   a.gateways(),
		Journal:    j,
		Handler:    a,
		BackoffCap: opts.BackoffCap,
		Log:        log,
	})
	if a.instances, err = a.newVPS(); err != nil {
		j.Close()
		return nil, err
	}
	var reconcilers []converge.Reconciler
	if system, ok := opts.Machine.(hostconfig.System); ok {
		reconcilers = append(reconcilers, hostconfig.New(system))
	}
	// An https endpoint is the control plane's receiver: pinned by the
	// serving CA, and the node's certificate is what authenticates it
	// (docs/protocol.md, "Telemetry").
	exporter := identity.HTTPSClient(c, id)
	exporter.Timeout = telemetry.ExportTimeout
	if a.broker == nil {
		a.broker = a.newBroker()
	}
	a.frames = append(a.frames, a.broker)
	tcfg := telemetry.Config{NodeID: id.NodeID, Version: opts.Version, Machine: opts.Machine, Log: log, Client: exporter, Secrets: a.broker}
	if a.instances != nil {
		reconcilers = append(reconcilers, a.instances)
		tcfg.Instances = a.instances
	}
	a.telemetry = telemetry.New(tcfg)
	a.broker.OnSecret(func() { a.converger.Repass(converge.SectionTelemetry) })
	reconcilers = append(reconcilers, a.telemetry)
	if r := a.accessReconciler(); r != nil {
		reconcilers = append(reconcilers, r)
	}
	reconcilers = append(reconcilers, a.daemonReconciler())
	a.converger, err = converge.New(converge.Config{
		NodeID: id.NodeID, Key: id.Key, Journal: j, Machine: opts.Machine, Trust: a.trust,
		Notify: a.session.Notify, Log: log, Reconcilers: reconcilers,
		Applied: func(generation uint64) { a.dispatcher.GenerationApplied(generation) },
	})
	if err != nil {
		j.Close()
		return nil, err
	}
	kinds, err := a.kinds()
	if err != nil {
		a.Close()
		return nil, err
	}
	a.dispatcher = dispatch.New(dispatch.Config{
		NodeID: id.NodeID, Key: id.Key, Journal: j, Machine: opts.Machine, Kinds: kinds, Trust: a.trust,
		Applied:     a.converger.AppliedGeneration,
		ServerNow:   a.session.ServerNow,
		Notify:      a.session.Notify,
		SendControl: a.session.SendControl,
		Log:         log,
	})
	return a, nil
}

// newBroker is the secret broker of a node that is no VPS host (a VPS
// host's is made with its instances, vps.go): the telemetry section's
// headers come through it.
func (a *Agent) newBroker() *broker.Broker {
	return broker.New(broker.Config{NodeID: a.id.NodeID, Key: a.id.Key, BootID: a.opts.Machine.BootID,
		Send: a.session.SendControl, Log: a.log})
}

// NodeID is the agent's node id.
func (a *Agent) NodeID() string { return a.id.NodeID }

// Close hangs up the consoles, stops the converger's re-passes and
// releases the journal.
func (a *Agent) Close() {
	a.closeOnce.Do(func() {
		if a.tunnels != nil {
			a.tunnels.Stop()
		}
		if a.converger != nil {
			a.converger.Stop()
		}
		a.telemetry.Stop()
		a.journal.Close()
	})
}

// FallbackConnectTimeout is how long the gRPC dial may take before the
// session falls back to the WebSocket, or, with several gateways, moves
// on to the next.
const FallbackConnectTimeout = 10 * time.Second

// gateways are the session's: one per gateway of the configuration's list
// (gateway_url, gateway_urls), each dialed over gRPC and, with [websocket]
// url too, falling back to the WebSocket (the one URL for every gateway);
// without gateway_url the WebSocket alone; in the never-connecting build
// one that always fails. With one gRPC gateway and no WebSocket the dial
// is left to grpc-go as it always was; with several, a dial that cannot
// connect within FallbackConnectTimeout fails so the session moves on.
func (a *Agent) gateways() []session.Gateway {
	c := a.opts.Config
	if a.opts.NeverConnect {
		never := func(context.Context) (session.Stream, func(), error) { return nil, nil, ErrNeverConnects }
		return []session.Gateway{{URL: gatewayName(c), Dial: never}}
	}
	if !c.UsesGRPC() {
		return []session.Gateway{{URL: c.Websocket.URL, Dial: session.WebsocketDialer(c, a.id)}}
	}
	urls := failoverOrder(c.Gateways(), rand.Shuffle)
	opts := session.DialOptions{AllowH2C: a.opts.AllowH2C}
	if c.UsesWebsocket() || len(urls) > 1 {
		opts.ConnectTimeout = FallbackConnectTimeout
	}
	gateways := make([]session.Gateway, 0, len(urls))
	for _, u := range urls {
		dial := session.GRPCDialer(c.ForGateway(u), a.id, opts)
		if c.UsesWebsocket() {
			dial = session.Fallback(a.log,
				session.Transport{Name: "grpc", Dial: dial},
				session.Transport{Name: "websocket", Dial: session.WebsocketDialer(c, a.id)})
		}
		gateways = append(gateways, session.Gateway{URL: u, Dial: dial})
	}
	return gateways
}

// gatewayName names the gateway in logs and status: gateway_url, else the
// WebSocket's url.
func gatewayName(c *config.Config) string {
	if c.UsesGRPC() {
		return c.GatewayURL
	}
	return c.Websocket.URL
}

// Run runs the agent until ctx ends, a self-terminating command ran, or the
// node is revoked, and returns the exit code.
func (a *Agent) Run(ctx context.Context) (int, error) {
	defer a.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !a.opts.NoStatusSocket {
		stopStatus, err := status.Serve(ctx, status.Path(a.opts.Config.DataDir), a.Status)
		if err != nil {
			return ExitError, fmt.Errorf("the status socket: %w", err)
		}
		// Closed before Run returns: the next life (a restart in bcd sim)
		// finds the socket free.
		defer stopStatus()
	}
	if s, ok := a.opts.Machine.(machine.Starts); ok {
		if err := s.Started(); err != nil {
			a.log.Warn("node.start_unrecorded", "err", err)
		}
	}
	if err := a.resumeUpgrade(ctx); err != nil {
		return ExitError, err
	}
	a.converger.Start()
	specsDone := make(chan struct{})
	go func() {
		defer close(specsDone)
		a.specs.run(ctx, func(ds *agentv1.DesiredState) { _, _ = a.converger.Apply(ds) })
	}()
	// The spec applier ends before the journal closes (a.Close).
	stopSpecs := func() {
		cancel()
		<-specsDone
	}
	defer stopSpecs()
	if err := a.startVPS(ctx); err != nil {
		return ExitError, fmt.Errorf("the instances: %w", err)
	}
	a.log.Info("node.starting", "node_id", a.id.NodeID, "boot_id", a.opts.Machine.BootID(), "journal_id", a.journal.ID(),
		"version", a.opts.Version, "gateway", a.opts.Config.GatewayURL, "gateways", len(a.opts.Config.Gateways()),
		"command_roots", len(a.trust.Roots()))
	done := make(chan error, 1)
	go func() { done <- a.session.Run(ctx) }()
	stopRenewal := a.startRenewal(ctx, cancel)
	defer stopRenewal()
	// The journal's sweep (done results past their 7 days) runs from this
	// wait, not from a goroutine of its own: bcd sim runs thousands of agents.
	sweep := time.NewTicker(JournalSweepEvery)
	defer sweep.Stop()
	var code int
	var err error
wait:
	for {
		select {
		case <-sweep.C:
			_, _ = a.journal.Sweep()
		case err = <-done:
			if errors.Is(err, session.ErrRevoked) {
				code, err = ExitRevoked, nil
				a.log.Warn("node.revoked", "node_id", a.id.NodeID)
			}
			break wait
		case path := <-a.exec:
			cancel()
			<-done
			stopSpecs()
			stopRenewal()
			a.dispatcher.Stop()
			a.Close()
			return a.execute(path)
		case id := <-a.reboot:
			a.log.Info("node.rebooting", "command_id", id)
			a.flushEvents(rebootFlushTimeout)
			if rerr := a.opts.Machine.Reboot(); rerr != nil {
				a.log.Error("node.reboot_failed", "err", rerr)
			}
			cancel()
			<-done
			break wait
		}
	}
	a.dispatcher.Stop()
	a.log.Info("node.stopped", "node_id", a.id.NodeID, "exit", code)
	return code, err
}

// JournalSweepEvery is how often a running agent sweeps its journal.
const JournalSweepEvery = time.Hour

// rebootFlushTimeout bounds how long a reboot waits for the gateway to ack
// the events journaled before it.
const rebootFlushTimeout = 2 * time.Second

// flushEvents waits, at most timeout and only while the session is
// connected, until the gateway acked every event journaled so far (a
// reboot's RUNNING among them), so the control plane hears of them before
// the node goes away. Whatever is not acked by then stays in the journal and
// is sent again from the next boot.
func (a *Agent) flushEvents(timeout time.Duration) {
	target := a.journal.LastSeq()
	deadline := time.Now().Add(timeout)
	for a.journal.LastAcked() < target && a.session.Info().State == session.Connected && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// Hello is the node's part of the Hello.
func (a *Agent) Hello() *agentv1.Hello {
	hello := &agentv1.Hello{
		NodeId:            a.id.NodeID,
		BootId:            a.opts.Machine.BootID(),
		DaemonVersion:     a.opts.Version,
		Capabilities:      CapabilitiesWith(a.opts.Machine, a.instances != nil && a.instances.EnforcesNetworkPolicy()),
		AppliedGeneration: a.converger.AppliedGeneration(),
	}
	if a.instances != nil {
		hello.Drivers = a.instances.Drivers()
	}
	return hello
}

// Welcomed takes the lane credits and appends the status report.
func (a *Agent) Welcomed(w *agentv1.Welcome) {
	a.dispatcher.SetCredits(w.GetLaneCredits())
	a.confirmUpgrade()
	if _, err := a.statusReport(); err != nil {
		a.log.Error("status.report_failed", "err", err)
	}
}

// statusReport appends a StatusReport event and returns its sections.
func (a *Agent) statusReport() ([]*agentv1.InventorySection, error) {
	report, err := a.converger.Report()
	if err != nil {
		return nil, err
	}
	if _, err := a.journal.Append(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_StatusReport{StatusReport: report}}); err != nil {
		return nil, err
	}
	a.session.Notify()
	return report.GetInventory(), nil
}

// Frame handles commands, desired state and cancels, and hands any other
// frame to the frame handlers (tunnels.go).
func (a *Agent) Frame(f *agentv1.GatewayFrame) {
	switch x := f.GetFrame().(type) {
	case *agentv1.GatewayFrame_Command:
		a.dispatcher.Deliver(x.Command)
	case *agentv1.GatewayFrame_DesiredState:
		a.specs.put(x.DesiredState)
	case *agentv1.GatewayFrame_Cancel:
		a.dispatcher.Cancel(x.Cancel.GetCommandId())
	default:
		for _, h := range a.frames {
			if h.Frame(f) {
				return
			}
		}
		a.log.Info("session.unhandled_frame", "frame", fmt.Sprintf("%T", x))
	}
}

// AppliedGeneration is what heartbeats report.
func (a *Agent) AppliedGeneration() uint64 { return a.converger.AppliedGeneration() }

// Status is what `bcd status --json` prints.
func (a *Agent) Status() *status.Status {
	info := a.session.Info()
	done := 0
	if recs, err := a.journal.Commands(); err == nil {
		for _, r := range recs {
			if r.State == journal.Done {
				done++
			}
		}
	}
	return &status.Status{
		NodeID:            a.id.NodeID,
		DaemonVersion:     a.opts.Version,
		BootID:            a.opts.Machine.BootID(),
		JournalID:         a.journal.ID(),
		Session:           status.Session{State: string(info.State), Epoch: info.Epoch, Gateway: info.Gateway, ConnectedAtMs: info.ConnectedAtMs, Transport: info.Transport, Refused: string(info.Refused)},
		AppliedGeneration: a.converger.AppliedGeneration(),
		Commands:          status.Commands{Running: a.dispatcher.Running(), Done: done},
	}
}
