// One connection of a session, as conn (one per dial): dial opens the
// stream and starts receiving from it; handshake sends the Hello and takes
// the Welcome (the 5-minute rule, the server time that bounds this
// connection's Pings); resume squares the Welcome's ack with the journal,
// marks the session connected and resends what is unacked; loop serves
// the stream, one method per select arm (onDone, onRecvErr, onLiveness,
// onHeartbeat, onNotify, onControl, onFrame); close releases it. It is
// the shape of the Rust gateway's session (devstack/src/gateway/session.rs:
// open, serve, on_frame, close). Session.frame gives a frame after the
// Welcome its effect.

package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"google.golang.org/grpc/status"
)

// conn is one dialed stream of a session and what it learnt: the Welcome,
// the server time its Pings are bounded by, how far it sent the journal,
// when the gateway was last heard.
type conn struct {
	s       *Session
	stream  Stream
	release func() // closes the connection and stops the receiver

	inbound chan *agentv1.GatewayFrame
	recvErr chan error

	// Set by handshake.
	welcome  *agentv1.Welcome
	interval time.Duration // the heartbeat interval (Heartbeat of the Welcome's)
	base     time.Time     // when the Welcome was heard
	baseMs   int64         // the server time at base Pings are bounded from (0: none)

	// Set by resume, moved by flush: the last seq sent on this connection.
	sentUpTo uint64

	// The loop's.
	lastHeard time.Time
	heartbeat *time.Ticker
	liveness  *time.Timer
}

// connect runs one connection; welcomed says whether a Welcome was accepted.
func (s *Session) connect(ctx context.Context) (welcomed bool, err error) {
	c, err := s.dial(ctx)
	if err != nil {
		return false, err
	}
	defer c.close()
	if err := c.handshake(ctx); err != nil {
		return false, err
	}
	if err := c.resume(); err != nil {
		return true, err
	}
	return true, c.loop(ctx)
}

// dial opens a stream with the session's Dialer and starts receiving from
// it; the connection lasts until close (or ctx ends).
func (s *Session) dial(ctx context.Context) (*conn, error) {
	cctx, cancel := context.WithCancel(ctx)
	stream, closeConn, err := s.route.gateway().Dial(cctx)
	if err != nil {
		cancel()
		return nil, &dialError{err}
	}
	c := &conn{
		s:       s,
		stream:  stream,
		release: func() { closeConn(); cancel() },
		inbound: make(chan *agentv1.GatewayFrame, 16),
		recvErr: make(chan error, 1),
	}
	go c.receive(cctx)
	return c, nil
}

// close releases the connection.
func (c *conn) close() { c.release() }

// receive hands the stream's frames to inbound until it fails (the error
// goes to recvErr) or ctx ends.
func (c *conn) receive(ctx context.Context) {
	for {
		f, err := c.stream.Recv()
		if err != nil {
			c.recvErr <- withHint(c.stream, err)
			return
		}
		select {
		case c.inbound <- f:
		case <-ctx.Done():
			return
		}
	}
}

// isRevocation reports whether err is the gateway refusing a revoked certificate.
func isRevocation(err error) bool {
	st, ok := status.FromError(err)
	return ok && strings.HasPrefix(st.Message(), string(refusal.CodeCertRevoked))
}

// revokedBy is the ErrRevoked of a revocation refusal.
func revokedBy(err error) error {
	return fmt.Errorf("%w: %s", ErrRevoked, status.Convert(err).Message())
}

// failed turns a failed Send into the stream's real status: gRPC reports
// io.EOF on Send and the status on Recv.
func (c *conn) failed(err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	select {
	case rerr := <-c.recvErr:
		c.recvErr <- rerr
		if isRevocation(rerr) {
			return revokedBy(rerr)
		}
		return rerr
	case <-time.After(time.Second):
		return err
	}
}

// send sends a frame; its error is the stream's (failed).
func (c *conn) send(f *agentv1.NodeFrame) error {
	if err := c.stream.Send(f); err != nil {
		return c.failed(err)
	}
	return nil
}

// handshake sends the Hello (the Handler's, with the journal's id, mark
// and last ack) and awaits the Welcome for at most WelcomeTimeout. A
// Welcome more than MaxWelcomeRewind before the mark is refused
// (ErrServerTimeBackwards); one taken sets the connection's heartbeat
// interval and, when its server time is heard, the base of its Pings.
func (c *conn) handshake(ctx context.Context) error {
	s, j := c.s, c.s.cfg.Journal
	hello := s.cfg.Handler.Hello()
	hello.JournalId = j.ID()
	hello.ServerTimeMarkMs = j.Mark()
	hello.LastAckedSeq = j.LastAcked()
	if err := c.send(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_Hello{Hello: hello}}); err != nil {
		return err
	}

	var w *agentv1.Welcome
	timeout := time.NewTimer(s.cfg.WelcomeTimeout)
	defer timeout.Stop()
	select {
	case <-ctx.Done():
		_ = c.stream.CloseSend()
		return ctx.Err()
	case err := <-c.recvErr:
		if isRevocation(err) {
			return revokedBy(err)
		}
		return fmt.Errorf("before the Welcome: %w", err)
	case <-timeout.C:
		return fmt.Errorf("%w: none within %s", ErrNoWelcome, s.cfg.WelcomeTimeout)
	case f := <-c.inbound:
		if w = f.GetWelcome(); w == nil {
			return ErrNoWelcome
		}
	}

	mark := j.Mark()
	if mark > 0 && w.GetServerTimeMs() < mark-MaxWelcomeRewind.Milliseconds() {
		s.log.Warn("session.refused", "reason", "server time went backwards",
			"server_time_ms", w.GetServerTimeMs(), "mark_ms", mark, "epoch", w.GetSessionEpoch())
		_ = c.stream.CloseSend()
		return fmt.Errorf("%w: Welcome at %d, mark %d", ErrServerTimeBackwards, w.GetServerTimeMs(), mark)
	}
	// Pings of this connection are bounded by the Welcome's clock (or, for
	// a Welcome not heard, by what bcd expected), so that no run of Pings
	// can walk the mark away from the gateway's clock.
	c.base = time.Now()
	c.baseMs = s.expected()
	if s.heardServerTime("Welcome", w.GetServerTimeMs(), c.baseMs) {
		c.baseMs = w.GetServerTimeMs()
	}
	c.welcome = w
	c.interval = Heartbeat(w.GetHeartbeatIntervalMs())
	return nil
}

// pingExpected is what a Ping's server time is bounded by: the base plus
// the time since (0, no bound, when there is no base).
func (c *conn) pingExpected() int64 {
	if c.baseMs <= 0 {
		return 0
	}
	return c.baseMs + time.Since(c.base).Milliseconds()
}

// resume takes the Welcome's acked_seq into the journal (one beyond the
// journal's last event is logged session.ack_ignored and the journal's
// own ack kept), marks the session connected, drops control frames
// queued for an earlier connection, runs the Handler's Welcomed and sends
// every event after the ack.
func (c *conn) resume() error {
	s, j, w := c.s, c.s.cfg.Journal, c.welcome
	acked := w.GetAckedSeq()
	if last := j.LastSeq(); acked > last {
		s.log.Warn("session.ack_ignored", "frame", "Welcome", "acked_seq", acked, "last_seq", last)
		acked = j.LastAcked()
	}
	if err := j.Ack(acked); err != nil {
		return err
	}
	s.setState(Connected, w.GetSessionEpoch(), time.Now().UnixMilli())
	transport := "unnamed"
	if t, ok := c.stream.(namedTransport); ok {
		transport = t.Transport()
	}
	s.mu.Lock()
	s.connections++
	s.info.Transport = transport
	s.mu.Unlock()
	resumed := false
	if r, ok := c.stream.(resumable); ok {
		resumed = r.Resumed()
	}
	s.log.Info("session.connected", "epoch", w.GetSessionEpoch(), "gateway", s.route.gateway().URL, "transport", transport,
		"resumed", resumed, "heartbeat_ms", c.interval.Milliseconds(), "lane_credits", w.GetLaneCredits(), "acked_seq", w.GetAckedSeq())

	// Control frames queued for an earlier connection are stale.
	for len(s.control) > 0 {
		<-s.control
	}
	s.cfg.Handler.Welcomed(w)
	c.sentUpTo = acked
	return c.flush()
}

// flush sends the journal's events after sentUpTo, moving it with each.
func (c *conn) flush() error {
	events, err := c.s.cfg.Journal.Unacked(c.sentUpTo)
	if err != nil {
		return err
	}
	for _, e := range events {
		if err := c.send(e); err != nil {
			return err
		}
		c.sentUpTo = e.GetSeq()
	}
	return nil
}

// loop serves the connection until an arm ends it, heartbeating every
// interval and dropping it after 3 intervals with nothing heard.
func (c *conn) loop(ctx context.Context) error {
	c.heartbeat = time.NewTicker(c.interval)
	defer c.heartbeat.Stop()
	c.lastHeard = time.Now()
	c.liveness = time.NewTimer(3 * c.interval)
	defer c.liveness.Stop()
	for {
		var end error
		select {
		case <-ctx.Done():
			end = c.onDone(ctx)
		case err := <-c.recvErr:
			end = c.onRecvErr(err)
		case <-c.liveness.C:
			end = c.onLiveness()
		case <-c.heartbeat.C:
			end = c.onHeartbeat()
		case <-c.s.notify:
			end = c.onNotify()
		case f := <-c.s.control:
			end = c.onControl(f)
		case f := <-c.inbound:
			end = c.onFrame(f)
		}
		if end != nil {
			return end
		}
	}
}

// onDone closes the stream as bcd shuts down: it ends with ctx's error.
func (c *conn) onDone(ctx context.Context) error {
	_ = c.stream.CloseSend()
	c.s.log.Info("session.closed", "epoch", c.welcome.GetSessionEpoch(), "reason", "shutting down")
	return ctx.Err()
}

// onRecvErr ends the connection with the stream's error: ErrRevoked for a
// revocation refusal, a closed stream for io.EOF.
func (c *conn) onRecvErr(err error) error {
	if isRevocation(err) {
		return revokedBy(err)
	}
	if errors.Is(err, io.EOF) {
		return errors.New("the gateway closed the stream")
	}
	return err
}

// onLiveness re-arms the liveness timer when something was heard within 3
// intervals, and otherwise closes the stream (ErrLiveness).
func (c *conn) onLiveness() error {
	if wait := time.Until(c.lastHeard.Add(3 * c.interval)); wait > 0 {
		c.liveness.Reset(wait)
		return nil
	}
	c.s.log.Warn("session.liveness", "epoch", c.welcome.GetSessionEpoch(), "silent_ms", time.Since(c.lastHeard).Milliseconds())
	_ = c.stream.CloseSend()
	return ErrLiveness
}

// onHeartbeat sends a Heartbeat with the Handler's applied generation.
func (c *conn) onHeartbeat() error {
	hb := &agentv1.Heartbeat{AtMs: time.Now().UnixMilli(), AppliedGeneration: c.s.cfg.Handler.AppliedGeneration()}
	return c.send(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_Heartbeat{Heartbeat: hb}})
}

// onNotify sends the journal's new events (Notify).
func (c *conn) onNotify() error { return c.flush() }

// onControl sends a control frame (SendControl).
func (c *conn) onControl(f *agentv1.NodeFrame) error { return c.send(f) }

// onFrame hears a gateway frame and gives it its effect (Session.frame);
// a frame that ends the connection (Drain, RevocationNotice) or fails
// closes the stream.
func (c *conn) onFrame(f *agentv1.GatewayFrame) error {
	c.lastHeard = time.Now()
	end, err := c.s.frame(c.send, f, c.pingExpected(), c.sentUpTo)
	if end == nil && err == nil {
		return nil
	}
	_ = c.stream.CloseSend()
	if end == nil {
		end = err
	}
	return end
}

// frame handles one gateway frame after the Welcome; a non-nil end closes
// the connection (Drain, RevocationNotice). expected bounds a Ping's server
// time; an ack beyond sentUpTo (events never sent on this connection) is
// logged session.ack_ignored and changes nothing.
func (s *Session) frame(send func(*agentv1.NodeFrame) error, f *agentv1.GatewayFrame, expected int64, sentUpTo uint64) (end, err error) {
	switch x := f.GetFrame().(type) {
	case *agentv1.GatewayFrame_Ping:
		s.heardServerTime("Ping", x.Ping.GetServerTimeMs(), expected)
		pong := &agentv1.NodeFrame{Frame: &agentv1.NodeFrame_Pong{Pong: &agentv1.Pong{Nonce: x.Ping.GetNonce()}}}
		return nil, send(pong)
	case *agentv1.GatewayFrame_EventAck:
		if upTo := x.EventAck.GetUpToSeq(); upTo > sentUpTo {
			s.log.Warn("session.ack_ignored", "frame", "EventAck", "up_to_seq", upTo, "sent_up_to", sentUpTo)
			return nil, nil
		}
		return nil, s.cfg.Journal.Ack(x.EventAck.GetUpToSeq())
	case *agentv1.GatewayFrame_Drain:
		wait := DrainWait(x.Drain.GetRetryAfterMs())
		s.log.Info("session.drain", "reason", x.Drain.GetReason(), "retry_after_ms", x.Drain.GetRetryAfterMs(), "wait_ms", wait.Milliseconds())
		return &drained{retryAfter: wait}, nil
	case *agentv1.GatewayFrame_RevocationNotice:
		s.log.Warn("session.revocation_notice", "reason", x.RevocationNotice.GetReason())
		return fmt.Errorf("%w: %s", ErrRevoked, x.RevocationNotice.GetReason()), nil
	case *agentv1.GatewayFrame_Welcome:
		s.log.Warn("session.unexpected_frame", "frame", "Welcome")
		return nil, nil
	}
	s.cfg.Handler.Frame(f)
	if f.GetSeq() > 0 {
		ack := &agentv1.NodeFrame{Frame: &agentv1.NodeFrame_EventAck{EventAck: &agentv1.EventAck{UpToSeq: f.GetSeq()}}}
		return nil, send(ack)
	}
	return nil, nil
}
