// Tests of one connection's steps, each driven on its own over the
// in-process gateway (the rig of session_test.go, its session not run):
// handshake (Hello, Welcome, the 5-minute rule, no Welcome), resume (the
// Welcome's ack against the journal, the resend) and each arm of the loop.

package session

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"bcd/internal/journal"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"bcd/internal/testgw"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// await takes the next value of ch, failing the test after wait.
func await[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatal("nothing came")
	}
	var zero T
	return zero
}

// dial opens a connection of r's session, closed at the end of the test.
func (r *rig) dial(t *testing.T) *conn {
	t.Helper()
	c, err := r.session.dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// handshake runs c's handshake under ctx: the gateway takes the stream and
// its Hello, then answer answers it.
func (r *rig) handshake(t *testing.T, ctx context.Context, c *conn, answer func(*testgw.Session)) (*testgw.Session, *agentv1.Hello, error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.handshake(ctx) }()
	s := r.next(t)
	hello := recv(t, s).GetHello()
	answer(s)
	return s, hello, await(t, done)
}

// answerWelcome answers with a Welcome at server time now, heartbeats every
// interval ms and acked_seq acked.
func answerWelcome(now time.Time, interval uint32, acked uint64) func(*testgw.Session) {
	return func(s *testgw.Session) { s.Send(welcome(now, interval, acked)) }
}

// connected dials, handshakes with a Welcome of now, interval and acked,
// and resumes.
func (r *rig) connected(t *testing.T, interval uint32, acked uint64) (*conn, *testgw.Session) {
	t.Helper()
	c := r.dial(t)
	s, _, err := r.handshake(t, context.Background(), c, answerWelcome(time.Now(), interval, acked))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.resume(); err != nil {
		t.Fatal(err)
	}
	return c, s
}

func appendReports(n uint64) func(*journal.Journal) {
	return func(j *journal.Journal) {
		for g := uint64(1); g <= n; g++ {
			j.Append(report(g))
		}
	}
}

func TestHandshakeSendsTheHelloAndTakesTheWelcome(t *testing.T) {
	r := setup(t, func(j *journal.Journal) {
		appendReports(2)(j)
		j.Ack(1)
		j.AdvanceMark(1234)
	})
	c := r.dial(t)
	now := time.Now()
	s, hello, err := r.handshake(t, context.Background(), c, answerWelcome(now, 100, 0))
	if err != nil {
		t.Fatal(err)
	}
	if hello.GetNodeId() != s.NodeID || hello.GetBootId() != "boot_1" || hello.GetJournalId() != r.journal.ID() ||
		hello.GetServerTimeMarkMs() != 1234 || hello.GetLastAckedSeq() != 1 {
		t.Fatalf("hello %v", hello)
	}
	if c.welcome.GetSessionEpoch() != 3 || c.interval != 100*time.Millisecond || c.baseMs != now.UnixMilli() {
		t.Fatalf("welcome %v, interval %s, base %d", c.welcome, c.interval, c.baseMs)
	}
	if r.journal.Mark() != now.UnixMilli() {
		t.Fatalf("mark %d after the Welcome", r.journal.Mark())
	}
	// The rest is resume's: not connected yet, the Handler not told.
	if info := r.session.Info(); info.State != Disconnected || len(r.handler.welcomes) != 0 || c.sentUpTo != 0 {
		t.Fatalf("after the handshake: %+v, %d welcomes, sent up to %d", info, len(r.handler.welcomes), c.sentUpTo)
	}
}

func TestHandshakeRefusesAWelcomeMoreThanFiveMinutesBeforeTheMark(t *testing.T) {
	mark := time.Now()
	r := setup(t, func(j *journal.Journal) { j.AdvanceMark(mark.UnixMilli()) })
	c := r.dial(t)
	s, _, err := r.handshake(t, context.Background(), c, answerWelcome(mark.Add(-5*time.Minute-time.Second), 1000, 0))
	if !errors.Is(err, ErrServerTimeBackwards) {
		t.Fatalf("handshake: %v", err)
	}
	ended(t, s)
	if r.journal.Mark() != mark.UnixMilli() || c.welcome != nil {
		t.Fatal("a refused Welcome was taken")
	}
	// Within 5 minutes it is taken, the mark stays, and its Pings are
	// bounded by its clock.
	c = r.dial(t)
	if _, _, err := r.handshake(t, context.Background(), c, answerWelcome(mark.Add(-4*time.Minute), 1000, 0)); err != nil {
		t.Fatal(err)
	}
	if r.journal.Mark() != mark.UnixMilli() || c.baseMs != mark.Add(-4*time.Minute).UnixMilli() {
		t.Fatalf("mark %d, base %d after a Welcome 4 minutes back", r.journal.Mark(), c.baseMs)
	}
}

func TestHandshakeEndsWithoutAWelcome(t *testing.T) {
	r := setup(t, nil)
	// handshake runs a handshake the gateway answers with answer, and
	// returns its error; no Welcome may be taken.
	handshake := func(t *testing.T, ctx context.Context, timeout time.Duration, answer func(*testgw.Session)) error {
		t.Helper()
		r.session.cfg.WelcomeTimeout = timeout
		c := r.dial(t)
		_, _, err := r.handshake(t, ctx, c, answer)
		if c.welcome != nil {
			t.Fatal("a Welcome was taken")
		}
		return err
	}
	bg := context.Background()
	t.Run("a Ping first", func(t *testing.T) {
		err := handshake(t, bg, wait, func(s *testgw.Session) {
			s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Ping{Ping: &agentv1.Ping{Nonce: 1}}})
		})
		if !errors.Is(err, ErrNoWelcome) || strings.Contains(err.Error(), "none within") {
			t.Fatalf("handshake: %v", err)
		}
	})
	t.Run("none in time", func(t *testing.T) {
		err := handshake(t, bg, 50*time.Millisecond, func(*testgw.Session) {})
		if !errors.Is(err, ErrNoWelcome) || !strings.Contains(err.Error(), "none within 50ms") {
			t.Fatalf("handshake: %v", err)
		}
	})
	t.Run("the stream fails", func(t *testing.T) {
		err := handshake(t, bg, wait, func(s *testgw.Session) { s.End(status.Error(codes.Unavailable, "gone")) })
		if status.Code(errors.Unwrap(err)) != codes.Unavailable || !strings.HasPrefix(err.Error(), "before the Welcome") {
			t.Fatalf("handshake: %v", err)
		}
	})
	t.Run("the certificate is revoked", func(t *testing.T) {
		err := handshake(t, bg, wait, func(s *testgw.Session) {
			s.End(refusal.Status(refusal.CodeCertRevoked, "node %s was revoked", s.NodeID))
		})
		if !errors.Is(err, ErrRevoked) {
			t.Fatalf("handshake: %v", err)
		}
	})
	t.Run("bcd shuts down", func(t *testing.T) {
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		var gw *testgw.Session
		err := handshake(t, ctx, wait, func(s *testgw.Session) { gw = s; cancel() })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handshake: %v", err)
		}
		ended(t, gw)
	})
}

func TestResumeResendsWhatIsUnacked(t *testing.T) {
	r := setup(t, appendReports(3))
	c := r.dial(t)
	s, _, err := r.handshake(t, context.Background(), c, answerWelcome(time.Now(), 1000, 1))
	if err != nil {
		t.Fatal(err)
	}
	r.session.SendControl(report(9)) // for an earlier connection: stale
	if err := c.resume(); err != nil {
		t.Fatal(err)
	}
	for want := uint64(2); want <= 3; want++ {
		if f := recv(t, s); f.GetSeq() != want {
			t.Fatalf("resent %v, want seq %d", f, want)
		}
	}
	if r.journal.LastAcked() != 1 || c.sentUpTo != 3 {
		t.Fatalf("acked %d, sent up to %d", r.journal.LastAcked(), c.sentUpTo)
	}
	if info := r.session.Info(); info.State != Connected || info.Epoch != 3 || info.Transport != "grpc" {
		t.Fatalf("info %+v", info)
	}
	if len(r.handler.welcomes) != 1 || len(r.session.control) != 0 {
		t.Fatalf("%d welcomes handled, %d control frames left", len(r.handler.welcomes), len(r.session.control))
	}
}

func TestResumeIgnoresAWelcomeAckBeyondTheJournal(t *testing.T) {
	r := setup(t, func(j *journal.Journal) {
		appendReports(3)(j)
		j.Ack(1)
	})
	c := r.dial(t)
	s, _, err := r.handshake(t, context.Background(), c, answerWelcome(time.Now(), 1000, 1<<60))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.resume(); err != nil {
		t.Fatal(err)
	}
	for want := uint64(2); want <= 3; want++ {
		if f := recv(t, s); f.GetSeq() != want {
			t.Fatalf("sent %v, want seq %d", f, want)
		}
	}
	if r.journal.LastAcked() != 1 || c.sentUpTo != 3 {
		t.Fatalf("acked %d, sent up to %d after acked_seq 2^60", r.journal.LastAcked(), c.sentUpTo)
	}
	// With everything acked, the journal's ack is what counts as sent, and
	// nothing is sent (the next frame is the heartbeat).
	if err := r.journal.Ack(3); err != nil {
		t.Fatal(err)
	}
	c, s = r.connected(t, 1000, 1<<60)
	if err := c.onHeartbeat(); err != nil {
		t.Fatal(err)
	}
	if f := recv(t, s); f.GetHeartbeat() == nil || c.sentUpTo != 3 {
		t.Fatalf("sent %v, sent up to %d with everything acked", f, c.sentUpTo)
	}
}

func TestOnFrameHearsTheGatewayAndEndsOnADrain(t *testing.T) {
	r := setup(t, appendReports(2))
	c, s := r.connected(t, 1000, 0)
	recv(t, s)
	recv(t, s)
	c.lastHeard = time.Time{}
	// A Ping is heard and answered; its server time is bounded by the
	// Welcome's clock.
	ahead := time.Now().Add(time.Minute).UnixMilli()
	if err := c.onFrame(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Ping{Ping: &agentv1.Ping{Nonce: 5, ServerTimeMs: ahead}}}); err != nil {
		t.Fatal(err)
	}
	if pong := recv(t, s); pong.GetPong().GetNonce() != 5 || c.lastHeard.IsZero() || r.journal.Mark() != ahead {
		t.Fatalf("pong %v, last heard %s, mark %d", pong, c.lastHeard, r.journal.Mark())
	}
	if err := c.onFrame(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Ping{Ping: &agentv1.Ping{
		Nonce: 6, ServerTimeMs: time.Now().Add(8 * time.Minute).UnixMilli()}}}); err != nil {
		t.Fatal(err)
	}
	if pong := recv(t, s); pong.GetPong().GetNonce() != 6 || r.journal.Mark() != ahead {
		t.Fatalf("pong %v, mark %d after a Ping 8 minutes ahead", pong, r.journal.Mark())
	}
	// An ack of what this connection sent is taken.
	if err := c.onFrame(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_EventAck{EventAck: &agentv1.EventAck{UpToSeq: 2}}}); err != nil {
		t.Fatal(err)
	}
	if r.journal.LastAcked() != 2 {
		t.Fatalf("acked %d", r.journal.LastAcked())
	}
	// A Drain ends the connection and closes the stream.
	err := c.onFrame(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Drain{Drain: &agentv1.Drain{RetryAfterMs: 300}}})
	var d *drained
	if !errors.As(err, &d) || d.retryAfter != 300*time.Millisecond {
		t.Fatalf("a Drain ended with %v", err)
	}
	ended(t, s)
}

func TestOnNotifySendsNewEventsOnce(t *testing.T) {
	r := setup(t, nil)
	c, s := r.connected(t, 1000, 0)
	r.journal.Append(report(1))
	r.journal.Append(report(2))
	if err := c.onNotify(); err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); want <= 2; want++ {
		if f := recv(t, s); f.GetSeq() != want {
			t.Fatalf("sent %v, want seq %d", f, want)
		}
	}
	// Nothing new: nothing is sent again (the next frame is the heartbeat).
	if err := c.onNotify(); err != nil {
		t.Fatal(err)
	}
	if err := c.onHeartbeat(); err != nil {
		t.Fatal(err)
	}
	if f := recv(t, s); f.GetHeartbeat() == nil || c.sentUpTo != 2 {
		t.Fatalf("after a second notify: %v, sent up to %d", f, c.sentUpTo)
	}
}

func TestOnControlSendsTheFrame(t *testing.T) {
	r := setup(t, nil)
	c, s := r.connected(t, 1000, 0)
	if err := c.onControl(report(9)); err != nil {
		t.Fatal(err)
	}
	if f := recv(t, s); f.GetSeq() != 0 || f.GetStatusReport().GetAppliedGeneration() != 9 {
		t.Fatalf("control frame %v", f)
	}
}

func TestOnHeartbeatSendsTheAppliedGeneration(t *testing.T) {
	r := setup(t, nil)
	c, s := r.connected(t, 1000, 0)
	before := time.Now().UnixMilli()
	if err := c.onHeartbeat(); err != nil {
		t.Fatal(err)
	}
	hb := recv(t, s)
	if hb.GetSeq() != 0 || hb.GetHeartbeat().GetAppliedGeneration() != 7 || hb.GetHeartbeat().GetAtMs() < before {
		t.Fatalf("heartbeat %v", hb)
	}
}

func TestOnLivenessWaitsForThreeSilentIntervals(t *testing.T) {
	r := setup(t, nil)
	c, s := r.connected(t, 100, 0)
	c.liveness = time.NewTimer(time.Hour)
	defer c.liveness.Stop()
	// Heard within 3 intervals: the timer is set again for the rest.
	c.lastHeard = time.Now()
	if err := c.onLiveness(); err != nil {
		t.Fatal(err)
	}
	await(t, c.liveness.C)
	// Silent for 3 intervals: the stream is dropped.
	c.lastHeard = time.Now().Add(-3 * c.interval)
	if err := c.onLiveness(); !errors.Is(err, ErrLiveness) {
		t.Fatalf("after 3 silent intervals: %v", err)
	}
	ended(t, s)
}

func TestOnDoneClosesTheStream(t *testing.T) {
	r := setup(t, nil)
	c, s := r.connected(t, 1000, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.onDone(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("done: %v", err)
	}
	ended(t, s)
}

func TestOnRecvErrSaysHowTheStreamEnded(t *testing.T) {
	r := setup(t, nil)
	revoked := func(s *testgw.Session) error {
		return refusal.Status(refusal.CodeCertRevoked, "node %s was revoked", s.NodeID)
	}
	for _, tc := range []struct {
		name string
		end  func(*testgw.Session) error
		want func(error) bool
	}{
		{"revoked", revoked, func(err error) bool { return errors.Is(err, ErrRevoked) }},
		{"closed", func(*testgw.Session) error { return nil },
			func(err error) bool { return err != nil && err.Error() == "the gateway closed the stream" }},
		{"failed", func(*testgw.Session) error { return status.Error(codes.Unavailable, "gone") },
			func(err error) bool { return status.Code(err) == codes.Unavailable }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := r.connected(t, 1000, 0)
			s.End(tc.end(s))
			rerr := await(t, c.recvErr)
			if tc.name == "closed" && !errors.Is(rerr, io.EOF) {
				t.Fatalf("a clean end received as %v", rerr)
			}
			if err := c.onRecvErr(rerr); !tc.want(err) {
				t.Fatalf("%v became %v", rerr, err)
			}
		})
	}
}

func TestLoopEndsWithTheArmThatEnds(t *testing.T) {
	r := setup(t, nil)
	c, s := r.connected(t, 100, 0)
	done := make(chan error, 1)
	go func() { done <- c.loop(context.Background()) }()
	recvWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetHeartbeat() != nil })
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_RevocationNotice{RevocationNotice: &agentv1.RevocationNotice{Reason: "stolen"}}})
	if err := await(t, done); !errors.Is(err, ErrRevoked) {
		t.Fatalf("loop: %v", err)
	}
	ended(t, s)
}
