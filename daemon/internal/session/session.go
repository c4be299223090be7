// Package session runs bcd's side of Gateway.Session (docs/protocol.md,
// "Session"): Hello from the journal, the Welcome and its 5-minute rule,
// the server-time mark that only moves forward (on Welcome and Ping) and
// never by a time too far ahead of what bcd expects (the later of its own
// clock and the journal's anchor plus the local time since, however many
// Welcomes came), acks (only of events
// sent) and the resend of unacked events, heartbeats at the Welcome's
// interval (held to MinHeartbeat–MaxHeartbeat), Pong, liveness (3 silent
// intervals drop the stream), full-jitter reconnect, Drain (redial after
// exactly retry_after_ms, at most MaxDrainRetryWait), failover between
// several gateways (failover.go) and revocation.
// What the frames mean (commands, desired state, cancel) is the Handler's.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"bcd/internal/journal"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
)

// MaxWelcomeRewind is how far before the mark a Welcome's server time may be.
const MaxWelcomeRewind = 5 * time.Minute

// MaxServerTimeAhead is how far a server time may be ahead of the later of
// bcd's own clock and what it expects of the gateway's (the journal's
// anchor, its first server time, plus the local time since it was heard)
// and still be heard. It equals MaxWelcomeRewind, so no server time bcd
// takes, nor any run of them, can put an honest Welcome on either clock
// more than 5 minutes before the mark.
const MaxServerTimeAhead = MaxWelcomeRewind

// The bounds bcd holds a Welcome's heartbeat interval and a Drain's
// retry_after_ms to (docs/daemon.md, "Session behaviour").
const (
	DefaultHeartbeat  = 5 * time.Second
	MinHeartbeat      = 100 * time.Millisecond
	MaxHeartbeat      = 5 * time.Minute
	MaxDrainRetryWait = 5 * time.Minute
)

// The reconnect backoff of the contract.
const (
	DefaultBackoffBase = 200 * time.Millisecond
	DefaultBackoffCap  = 30 * time.Second
)

// Errors a session ends or drops with.
var (
	// ErrRevoked means the node's certificate was revoked: bcd node exits 3.
	ErrRevoked = errors.New("revoked")
	// ErrServerTimeBackwards means a Welcome came more than 5 minutes
	// before the mark.
	ErrServerTimeBackwards = errors.New("server time went backwards")
	// ErrLiveness means nothing was heard for 3 heartbeat intervals.
	ErrLiveness = errors.New(string(refusal.CodeLiveness) + ": nothing heard for 3 intervals")
	// ErrNoWelcome means the first frame was not a Welcome.
	ErrNoWelcome = errors.New("the gateway's first frame is not a Welcome")
)

// Stream is the client side of Gateway.Session.
type Stream interface {
	Send(*agentv1.NodeFrame) error
	Recv() (*agentv1.GatewayFrame, error)
	CloseSend() error
}

// Transports name themselves (Info.Transport): a Stream may say which it is.
type namedTransport interface{ Transport() string }

// A Stream over TLS may say whether its connection resumed a session.
type resumable interface{ Resumed() bool }

// Dialer opens a Session stream; close releases its connection. GRPCDialer
// (grpc.go) is the gRPC one over the node's mTLS identity.
type Dialer func(ctx context.Context) (stream Stream, close func(), err error)

// Handler gives frames their meaning.
type Handler interface {
	// Hello fills the node's part of the Hello (node id, boot id, version,
	// capabilities, applied generation); the session adds the journal's.
	Hello() *agentv1.Hello
	// Welcomed runs after each accepted Welcome, before the resend (it
	// appends the StatusReport).
	Welcomed(w *agentv1.Welcome)
	// Frame handles a Command, DesiredState, Cancel or another frame the
	// session does not handle itself.
	Frame(f *agentv1.GatewayFrame)
	// AppliedGeneration is what heartbeats report.
	AppliedGeneration() uint64
}

// State is the session's state for bcd status.
type State string

// The states.
const (
	Connecting   State = "connecting"
	Connected    State = "connected"
	Disconnected State = "disconnected"
	Revoked      State = "revoked"
)

// Info is what bcd status shows of the session.
type Info struct {
	State         State
	Epoch         uint64
	Gateway       string
	ConnectedAtMs int64
	// Refused is the code of the gateway's refusal that ended the last
	// attempt (cert-unknown and cert-validity: the node's certificate is
	// not one the gateway takes, so only a new join helps), "" once a
	// Welcome was accepted or when the attempt ended otherwise.
	Refused refusal.Code
	// Transport is the connected stream's ("grpc", "websocket").
	Transport string
}

// Config configures a session.
type Config struct {
	// Dial opens streams.
	Dial Dialer
	// Gateway names the gateway in logs and status.
	Gateway string
	// Gateways, when set, are the gateways to fail over between, in
	// order (failover.go); Dial and Gateway are then not used. Without it
	// the list is the one gateway of Dial and Gateway.
	Gateways []Gateway
	// Journal holds the events, the acks and the mark.
	Journal *journal.Journal
	// Handler handles frames.
	Handler Handler
	// BackoffBase and BackoffCap shape the full-jitter reconnect (defaults
	// 200 ms and 30 s).
	BackoffBase, BackoffCap time.Duration
	// WelcomeTimeout bounds the wait for the Welcome (default 30 s).
	WelcomeTimeout time.Duration
	// Log receives session.* lines.
	Log *slog.Logger
}

// Session is one node's session with its gateway, across reconnects.
type Session struct {
	cfg     Config
	log     *slog.Logger
	notify  chan struct{}
	control chan *agentv1.NodeFrame
	route   failover // Run's alone

	mu          sync.Mutex
	info        Info
	serverMs    int64     // the last server time heard
	serverAt    time.Time // when it was heard (monotonic)
	connections int
}

// New returns a session; Run starts it.
func New(cfg Config) *Session {
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffCap <= 0 {
		cfg.BackoffCap = DefaultBackoffCap
	}
	if cfg.WelcomeTimeout <= 0 {
		cfg.WelcomeTimeout = 30 * time.Second
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	gateways := cfg.Gateways
	if len(gateways) == 0 {
		gateways = []Gateway{{URL: cfg.Gateway, Dial: cfg.Dial}}
	}
	return &Session{
		cfg:     cfg,
		log:     log,
		notify:  make(chan struct{}, 1),
		control: make(chan *agentv1.NodeFrame, 64),
		route:   failover{gateways: slices.Clone(gateways)},
		info:    Info{State: Disconnected, Gateway: gateways[0].URL},
	}
}

// Notify says that the journal has new events to send.
func (s *Session) Notify() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// SendControl queues a control frame (seq 0) for the current connection;
// it is dropped when there is none, or too many are queued.
func (s *Session) SendControl(f *agentv1.NodeFrame) {
	f.Seq = 0
	select {
	case s.control <- f:
	default:
		s.log.Warn("session.control_dropped", "reason", "queue full")
	}
}

// Info returns the state for bcd status.
func (s *Session) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

// ServerNow estimates the gateway's clock: the last server time heard plus
// the time since, never before the mark. Before any Welcome it is the local
// clock, or the mark when that is later.
func (s *Session) ServerNow() time.Time {
	mark := s.cfg.Journal.Mark()
	s.mu.Lock()
	ms, at := s.serverMs, s.serverAt
	s.mu.Unlock()
	now := time.Now().UnixMilli()
	if !at.IsZero() {
		now = ms + time.Since(at).Milliseconds()
	}
	return time.UnixMilli(max(now, mark))
}

// expected is what bcd expects of the gateway's clock now: the journal's
// anchor (the first server time it heard, never moved) plus the local time
// since it was heard; 0 when it has no expectation (before any server
// time, or an anchor kept without its local time). It is not the mark plus
// the time since the mark moved: each Welcome taken moves the mark, and a
// bound that moved with it let a run of Welcomes, each a little ahead,
// walk the mark as far as it liked.
func (s *Session) expected() int64 {
	anchor, heardAt := s.cfg.Journal.Anchor()
	if anchor <= 0 || heardAt <= 0 {
		return 0
	}
	return anchor + max(time.Now().UnixMilli()-heardAt, 0)
}

// plausible says whether a server time may be heard: it is at most
// MaxServerTimeAhead after the later of bcd's own clock and expected (an
// expectation of 0 bounds nothing). Both are references bcd trusts and
// neither moves with what it heard, so no run of server times walks the
// bound away: the mark stays within MaxServerTimeAhead of the later of
// them. A server time behind is always plausible: the mark is not clamped
// to bcd's clock, so a control plane whose clock is far behind (a
// simulated one) is followed, one far ahead is followed from its first
// server time (the anchor), and one whose clock is put right again is
// followed as soon as it is within the tolerance of bcd's own.
func plausible(ms, expected int64) bool {
	if expected <= 0 {
		return true
	}
	return ms <= max(time.Now().UnixMilli(), expected)+MaxServerTimeAhead.Milliseconds()
}

// heardServerTime takes a server time into the mark and the estimate of
// the gateway's clock, unless it is too far ahead of expected (then it is
// logged session.server_time_ignored and changes nothing); it reports
// whether it was taken.
func (s *Session) heardServerTime(frame string, ms, expected int64) bool {
	if ms <= 0 {
		return false
	}
	if !plausible(ms, expected) {
		s.log.Warn("session.server_time_ignored", "frame", frame, "server_time_ms", ms, "expected_ms", expected,
			"tolerance_ms", MaxServerTimeAhead.Milliseconds())
		return false
	}
	if _, err := s.cfg.Journal.AdvanceMark(ms); err != nil {
		s.log.Error("session.mark_failed", "err", err)
	}
	s.mu.Lock()
	s.serverMs, s.serverAt = ms, time.Now()
	s.mu.Unlock()
	return true
}

// Heartbeat is the interval a Welcome's heartbeat_interval_ms asks for,
// held to [MinHeartbeat, MaxHeartbeat] (DefaultHeartbeat for 0).
func Heartbeat(ms uint32) time.Duration {
	if ms == 0 {
		return DefaultHeartbeat
	}
	return min(max(time.Duration(ms)*time.Millisecond, MinHeartbeat), MaxHeartbeat)
}

// DrainWait is how long a Drain's retry_after_ms makes bcd wait, held to
// at most MaxDrainRetryWait.
func DrainWait(ms uint32) time.Duration {
	return min(time.Duration(ms)*time.Millisecond, MaxDrainRetryWait)
}

func (s *Session) setState(state State, epoch uint64, connectedAt int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.State = state
	if state == Connected {
		s.info.Epoch, s.info.ConnectedAtMs = epoch, connectedAt
		s.info.Refused = ""
	} else {
		s.info.Transport = ""
	}
}

// setRefused records the refusal code an attempt ended with ("" for none).
func (s *Session) setRefused(code refusal.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.Refused = code
}

// drained is a clean end that asks for a redial after exactly retryAfter.
type drained struct{ retryAfter time.Duration }

func (d *drained) Error() string { return fmt.Sprintf("drained (retry after %s)", d.retryAfter) }

// Run keeps the session up until ctx ends (nil) or the node is revoked
// (ErrRevoked).
func (s *Session) Run(ctx context.Context) error {
	attempt := 0
	for {
		s.setState(Connecting, 0, 0)
		gateway := s.route.gateway().URL
		welcomed, err := s.connect(ctx)
		if ctx.Err() != nil {
			s.setState(Disconnected, 0, 0)
			return nil
		}
		if errors.Is(err, ErrRevoked) {
			s.setState(Revoked, 0, 0)
			s.log.Warn("session.revoked", "gateway", gateway, "err", err)
			return ErrRevoked
		}
		s.setState(Disconnected, 0, 0)
		if welcomed {
			attempt = 0
		}
		var wait time.Duration
		var d *drained
		if errors.As(err, &d) {
			wait = d.retryAfter
			if s.route.several() {
				wait = drainJitter(wait)
			}
			attempt = 0
			s.log.Info("session.drained", "gateway", gateway, "retry_after_ms", d.retryAfter.Milliseconds(), "retry_in_ms", wait.Milliseconds())
		} else {
			// The backoff grows once per round of the gateway list, not per
			// gateway: a dead gateway (refused at once) or a busy one moves
			// the session to the next after the base jitter, and the waits
			// grow only once every gateway has failed in a row.
			wait = s.retryWait(attempt)
			attempt++
			if after := hintOf(err); after > 0 {
				// The gateway said when to come back (hint.go): exactly
				// then, or, moving to another gateway, up to then.
				wait = after
				if s.route.several() {
					wait = drainJitter(after)
				}
			}
			code := refusal.CodeOfStatus(err)
			s.setRefused(code)
			switch code {
			case refusal.CodeCertUnknown, pki.CodeCertValidity:
				s.log.Error("session.certificate_refused", "gateway", gateway, "code", string(code), "err", err,
					"retry_in_ms", wait.Milliseconds())
			default:
				s.log.Warn("session.dropped", "gateway", gateway, "code", string(code), "err", err,
					"retry_in_ms", wait.Milliseconds())
			}
		}
		if s.route.several() {
			s.moveOn(failoverReason(err, welcomed))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}

// moveOn moves the session to the next gateway of its list, for reason.
func (s *Session) moveOn(reason string) {
	from, to := s.route.move()
	s.mu.Lock()
	s.info.Gateway = to.URL
	s.mu.Unlock()
	s.log.Warn("session.failover", "from", from.URL, "to", to.URL, "reason", reason)
}

// retryWait is the wait after the attempt-th failure in a row: the
// backoff of the round of the gateway list it falls in.
func (s *Session) retryWait(attempt int) time.Duration {
	return s.backoff(attempt / s.route.size())
}

// backoff is full jitter: random(0, min(cap, base·2^attempt)).
func (s *Session) backoff(attempt int) time.Duration {
	ceiling := s.cfg.BackoffCap
	if attempt < 30 {
		if d := s.cfg.BackoffBase << attempt; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}
