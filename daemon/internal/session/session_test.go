// Tests of the session against the in-process gateway over real mTLS:
// Hello and Welcome, heartbeats and Pong, acks and the resend of unacked
// events, the server-time rule, Drain, revocation and liveness.

package session

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"bcd/internal/config"
	"bcd/internal/fakehw"
	"bcd/internal/identity"
	"bcd/internal/join"
	"bcd/internal/journal"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"bcd/internal/testgw"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type handler struct {
	nodeID   string
	mu       sync.Mutex
	welcomes []*agentv1.Welcome
	frames   chan *agentv1.GatewayFrame
	welcomed chan struct{}
}

func (h *handler) Hello() *agentv1.Hello {
	return &agentv1.Hello{NodeId: h.nodeID, BootId: "boot_1", DaemonVersion: "test", AppliedGeneration: 7}
}
func (h *handler) Welcomed(w *agentv1.Welcome) {
	h.mu.Lock()
	h.welcomes = append(h.welcomes, w)
	h.mu.Unlock()
	h.welcomed <- struct{}{}
}
func (h *handler) Frame(f *agentv1.GatewayFrame) { h.frames <- f }
func (h *handler) AppliedGeneration() uint64     { return 7 }

type rig struct {
	gw      *testgw.Gateway
	journal *journal.Journal
	handler *handler
	session *Session
	done    chan error
	cancel  context.CancelFunc
}

// start joins a node to a test gateway and runs its session.
func start(t *testing.T, prepare func(*journal.Journal)) *rig {
	t.Helper()
	r := setup(t, prepare)
	ctx, cancel := context.WithCancel(context.Background())
	r.done, r.cancel = make(chan error, 1), cancel
	go func() { r.done <- r.session.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// setup joins a node to a test gateway and makes its session, not run
// (done and cancel are start's).
func setup(t *testing.T, prepare func(*journal.Journal)) *rig {
	t.Helper()
	g := testgw.Start(t, testgw.Options{})
	g.AddToken("tok")
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	m, _ := fakehw.New(filepath.Join(dir, "data"), "41", fakehw.VariantCPU)
	if _, err := join.Join(context.Background(), join.Options{ConfigPath: path, Token: "tok", Machine: m}); err != nil {
		t.Fatal(err)
	}
	c, _ := config.Load(path)
	signing, _ := identity.JoinSigningKey(c)
	id, err := identity.Load(c.DataDir, signing)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(filepath.Join(c.DataDir, "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	if prepare != nil {
		prepare(j)
	}
	h := &handler{nodeID: id.NodeID, frames: make(chan *agentv1.GatewayFrame, 16), welcomed: make(chan struct{}, 16)}
	s := New(Config{
		Dial:    GRPCDialer(c, id, DialOptions{}),
		Gateway: g.URL, Journal: j, Handler: h,
		BackoffBase: time.Millisecond, BackoffCap: 5 * time.Millisecond,
	})
	return &rig{gw: g, journal: j, handler: h, session: s}
}

const wait = 5 * time.Second

func (r *rig) next(t *testing.T) *testgw.Session {
	t.Helper()
	select {
	case s := <-r.gw.Sessions:
		return s
	case <-time.After(wait):
		t.Fatal("no session")
	}
	return nil
}

func recv(t *testing.T, s *testgw.Session) *agentv1.NodeFrame {
	t.Helper()
	select {
	case f, ok := <-s.Frames:
		if !ok {
			t.Fatal("the stream ended")
		}
		return f
	case <-time.After(wait):
		t.Fatal("no frame")
	}
	return nil
}

// recvWhere skips frames until one matches.
func recvWhere(t *testing.T, s *testgw.Session, match func(*agentv1.NodeFrame) bool) *agentv1.NodeFrame {
	t.Helper()
	for {
		if f := recv(t, s); match(f) {
			return f
		}
	}
}

func isEvent(f *agentv1.NodeFrame) bool { return f.GetSeq() > 0 }

func welcome(server time.Time, interval uint32, acked uint64) *agentv1.GatewayFrame {
	return &agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Welcome{Welcome: &agentv1.Welcome{
		SessionEpoch: 3, ServerTimeMs: server.UnixMilli(), HeartbeatIntervalMs: interval, LaneCredits: 2, AckedSeq: acked}}}
}

// welcomed takes the next session, its Hello, and welcomes it now with
// heartbeats every interval ms.
func (r *rig) welcomed(t *testing.T, interval uint32) *testgw.Session {
	t.Helper()
	s := r.next(t)
	recv(t, s)
	s.Send(welcome(time.Now(), interval, 0))
	return s
}

// wantRevoked waits for Run to end with ErrRevoked (and leaves its error
// for the cleanup).
func (r *rig) wantRevoked(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.done:
		if !errors.Is(err, ErrRevoked) {
			t.Fatalf("run: %v", err)
		}
		r.done <- err
	case <-time.After(wait):
		t.Fatal("the session kept running")
	}
}

func ended(t *testing.T, s *testgw.Session) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-s.Frames:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the node did not close the stream")
		}
	}
}

func report(gen uint64) *agentv1.NodeFrame {
	return &agentv1.NodeFrame{Frame: &agentv1.NodeFrame_StatusReport{StatusReport: &agentv1.StatusReport{AppliedGeneration: gen}}}
}

func TestHelloWelcomeHeartbeatsAndPong(t *testing.T) {
	r := start(t, func(j *journal.Journal) { j.AdvanceMark(1234) })
	s := r.next(t)
	hello := recv(t, s).GetHello()
	if hello == nil || hello.NodeId != s.NodeID || hello.JournalId != r.journal.ID() || hello.ServerTimeMarkMs != 1234 ||
		hello.BootId != "boot_1" || hello.AppliedGeneration != 7 {
		t.Fatalf("hello %v", hello)
	}
	now := time.Now()
	s.Send(welcome(now, 100, 0))
	hb := recvWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetHeartbeat() != nil })
	if hb.Seq != 0 || hb.GetHeartbeat().AppliedGeneration != 7 {
		t.Fatalf("heartbeat %v", hb)
	}
	if info := r.session.Info(); info.State != Connected || info.Epoch != 3 || info.ConnectedAtMs == 0 {
		t.Fatalf("info %+v", info)
	}
	if r.journal.Mark() != now.UnixMilli() {
		t.Fatalf("mark %d after the Welcome", r.journal.Mark())
	}
	later := now.Add(time.Minute).UnixMilli()
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Ping{Ping: &agentv1.Ping{Nonce: 99, ServerTimeMs: later}}})
	pong := recvWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetPong() != nil })
	if pong.GetPong().Nonce != 99 {
		t.Fatalf("pong %v", pong)
	}
	if r.journal.Mark() != later {
		t.Fatalf("mark %d after a Ping", r.journal.Mark())
	}
	if d := r.session.ServerNow().UnixMilli() - later; d < 0 || d > 2000 {
		t.Fatalf("server clock off by %d ms", d)
	}
	// A Ping from the past never moves the mark back.
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Ping{Ping: &agentv1.Ping{Nonce: 100, ServerTimeMs: 5}}})
	recvWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetPong().GetNonce() == 100 })
	if r.journal.Mark() != later {
		t.Fatalf("mark %d after a Ping from the past", r.journal.Mark())
	}
	// Other frames go to the handler, and frames with a seq are acked.
	s.Send(&agentv1.GatewayFrame{Seq: 4, Frame: &agentv1.GatewayFrame_Cancel{Cancel: &agentv1.Cancel{CommandId: "c"}}})
	select {
	case f := <-r.handler.frames:
		if f.GetCancel().GetCommandId() != "c" {
			t.Fatalf("frame %v", f)
		}
	case <-time.After(wait):
		t.Fatal("the handler got nothing")
	}
	ack := recvWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetEventAck() != nil })
	if ack.GetEventAck().UpToSeq != 4 {
		t.Fatalf("ack %v", ack)
	}
}

func TestUnackedEventsAreResentAfterTheWelcome(t *testing.T) {
	r := start(t, func(j *journal.Journal) {
		for g := uint64(1); g <= 3; g++ {
			j.Append(report(g))
		}
	})
	s := r.next(t)
	recv(t, s) // Hello
	s.Send(welcome(time.Now(), 1000, 1))
	for want := uint64(2); want <= 3; want++ {
		f := recvWhere(t, s, isEvent)
		if f.Seq != want {
			t.Fatalf("resent seq %d, want %d", f.Seq, want)
		}
	}
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_EventAck{EventAck: &agentv1.EventAck{UpToSeq: 3}}})
	// A new event goes out at once.
	r.journal.Append(report(4))
	r.session.Notify()
	if f := recvWhere(t, s, isEvent); f.Seq != 4 {
		t.Fatalf("new event seq %d", f.Seq)
	}
	// The gateway recorded 4 but the ack was lost: the next Welcome says so,
	// and nothing is sent twice.
	s.End(status.Error(codes.Unavailable, "gone"))
	s = r.next(t)
	if hello := recv(t, s).GetHello(); hello.LastAckedSeq != 3 {
		t.Fatalf("hello last_acked_seq %d", hello.LastAckedSeq)
	}
	s.Send(welcome(time.Now(), 1000, 4))
	r.journal.Append(report(5))
	r.session.Notify()
	if f := recvWhere(t, s, isEvent); f.Seq != 5 {
		t.Fatalf("after the redial: seq %d", f.Seq)
	}
	if n, _ := r.journal.EventStats(); n != 1 {
		t.Fatalf("%d events kept after acked_seq 4", n)
	}
}

func TestAWelcomeMoreThanFiveMinutesBeforeTheMarkIsRefused(t *testing.T) {
	mark := time.Now()
	r := start(t, func(j *journal.Journal) { j.AdvanceMark(mark.UnixMilli()) })
	s := r.next(t)
	recv(t, s)
	s.Send(welcome(mark.Add(-5*time.Minute-time.Second), 1000, 0))
	ended(t, s)
	if r.journal.Mark() != mark.UnixMilli() {
		t.Fatal("a refused Welcome moved the mark")
	}
	if len(r.handler.welcomes) != 0 {
		t.Fatal("a refused Welcome reached the handler")
	}
	// Within 5 minutes it is taken, and the mark stays where it was.
	s = r.next(t)
	recv(t, s)
	s.Send(welcome(mark.Add(-4*time.Minute), 1000, 0))
	select {
	case <-r.handler.welcomed:
	case <-time.After(wait):
		t.Fatal("a Welcome within 5 minutes was refused")
	}
	if r.journal.Mark() != mark.UnixMilli() {
		t.Fatal("an earlier Welcome moved the mark back")
	}
}

func TestDrainRedialsAfterExactlyRetryAfter(t *testing.T) {
	r := start(t, nil)
	s := r.welcomed(t, 1000)
	sent := time.Now()
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Drain{Drain: &agentv1.Drain{Reason: "restart", RetryAfterMs: 300}}})
	ended(t, s)
	s = r.next(t)
	if waited := time.Since(sent); waited < 300*time.Millisecond {
		t.Fatalf("redialed after %s", waited)
	}
	recv(t, s)
}

func TestARevocationNoticeEndsTheSession(t *testing.T) {
	r := start(t, nil)
	s := r.welcomed(t, 1000)
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_RevocationNotice{RevocationNotice: &agentv1.RevocationNotice{Reason: "stolen"}}})
	r.wantRevoked(t)
	if r.session.Info().State != Revoked {
		t.Fatalf("state %s", r.session.Info().State)
	}
}

func TestARevokedCertificateEndsTheSession(t *testing.T) {
	r := start(t, nil)
	s := r.next(t)
	r.gw.Revoke(s.NodeID)
	s.End(status.Error(codes.Unavailable, "restart"))
	r.wantRevoked(t)
}

func TestSilenceForThreeIntervalsDropsTheStream(t *testing.T) {
	r := start(t, nil)
	s := r.welcomed(t, 100)
	ended(t, s) // no pings: the node gives up after 300 ms
	s = r.next(t)
	recv(t, s)
}

func TestBackoffIsFullJitterUnderTheCap(t *testing.T) {
	s := New(Config{})
	for attempt := 0; attempt < 40; attempt++ {
		ceiling := min(DefaultBackoffCap, DefaultBackoffBase<<min(attempt, 20))
		for i := 0; i < 20; i++ {
			if d := s.backoff(attempt); d < 0 || d > ceiling {
				t.Fatalf("attempt %d: %s above %s", attempt, d, ceiling)
			}
		}
	}
}

func TestTheBackoffGrowsOncePerRoundOfTheGatewayList(t *testing.T) {
	dial := func(context.Context) (Stream, func(), error) { return nil, nil, errors.New("unused") }
	gateways := []Gateway{{URL: "https://a", Dial: dial}, {URL: "https://b", Dial: dial}, {URL: "https://c", Dial: dial}}
	s := New(Config{Gateways: gateways})
	for attempt := 0; attempt < 12; attempt++ {
		ceiling := DefaultBackoffBase << (attempt / 3)
		for i := 0; i < 50; i++ {
			if d := s.retryWait(attempt); d < 0 || d > ceiling {
				t.Fatalf("failure %d in a row: %s above %s, the ceiling of round %d", attempt, d, ceiling, attempt/3)
			}
		}
	}
}

// pingAt sends a Ping of server time at and waits for its Pong.
func pingAt(t *testing.T, s *testgw.Session, nonce uint64, at int64) {
	t.Helper()
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Ping{Ping: &agentv1.Ping{Nonce: nonce, ServerTimeMs: at}}})
	recvWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetPong().GetNonce() == nonce })
}

// awaitWelcomed waits for the handler to take a Welcome.
func (r *rig) awaitWelcomed(t *testing.T) {
	t.Helper()
	select {
	case <-r.handler.welcomed:
	case <-time.After(wait):
		t.Fatal("the Welcome was refused")
	}
}

const tenYears = 10 * 365 * 24 * time.Hour

func TestAFarFuturePingDoesNotCutTheNodeOff(t *testing.T) {
	r := start(t, nil)
	s := r.welcomed(t, 1000)
	r.awaitWelcomed(t)
	mark := r.journal.Mark()
	pingAt(t, s, 1, time.Now().Add(tenYears).UnixMilli())
	if r.journal.Mark() != mark {
		t.Fatalf("a Ping 10 years ahead moved the mark from %d to %d", mark, r.journal.Mark())
	}
	if d := r.session.ServerNow().Sub(time.Now()); d > time.Minute {
		t.Fatalf("the estimate of the gateway's clock moved %s ahead", d)
	}
	// Within the tolerance a Ping still moves the mark.
	ahead := time.Now().Add(4 * time.Minute).UnixMilli()
	pingAt(t, s, 2, ahead)
	if r.journal.Mark() != ahead {
		t.Fatalf("mark %d after a Ping 4 minutes ahead", r.journal.Mark())
	}
	// Pings cannot walk the mark away step by step: each is bounded by the
	// Welcome's clock, not by the last Ping.
	pingAt(t, s, 3, time.Now().Add(8*time.Minute).UnixMilli())
	if r.journal.Mark() != ahead {
		t.Fatal("a second Ping moved the mark 8 minutes ahead")
	}
	// The next honest Welcome is taken.
	s.End(status.Error(codes.Unavailable, "restart"))
	s = r.next(t)
	recv(t, s)
	s.Send(welcome(time.Now(), 1000, 0))
	r.awaitWelcomed(t)
}

func TestAFarFutureWelcomeDoesNotMoveTheMark(t *testing.T) {
	r := start(t, nil)
	r.welcomed(t, 1000).End(status.Error(codes.Unavailable, "restart"))
	r.awaitWelcomed(t)
	mark := r.journal.Mark()
	// A Welcome 10 years ahead is not refused (it is not before the mark),
	// but it is not heard either.
	s := r.next(t)
	recv(t, s)
	s.Send(welcome(time.Now().Add(tenYears), 1000, 0))
	r.awaitWelcomed(t)
	if r.journal.Mark() != mark {
		t.Fatalf("a Welcome 10 years ahead moved the mark from %d to %d", mark, r.journal.Mark())
	}
	// Its Pings are bounded by bcd's expectation, not by that Welcome.
	pingAt(t, s, 1, time.Now().Add(tenYears).UnixMilli())
	if r.journal.Mark() != mark {
		t.Fatal("a Ping after a far-future Welcome moved the mark")
	}
	s.End(status.Error(codes.Unavailable, "restart"))
	s = r.next(t)
	recv(t, s)
	s.Send(welcome(time.Now(), 1000, 0))
	r.awaitWelcomed(t)
}

func TestTheMarkFollowsAControlPlaneWhoseClockIsFarFromBcds(t *testing.T) {
	// A simulated control plane three years ahead: its first Welcome sets
	// the mark, and its clock moving on from there is heard.
	r := start(t, nil)
	offset := 3 * 365 * 24 * time.Hour
	s := r.next(t)
	recv(t, s)
	first := time.Now().Add(offset)
	s.Send(welcome(first, 1000, 0))
	r.awaitWelcomed(t)
	if r.journal.Mark() != first.UnixMilli() {
		t.Fatalf("mark %d, want the first Welcome's %d", r.journal.Mark(), first.UnixMilli())
	}
	later := time.Now().Add(offset + time.Minute).UnixMilli()
	pingAt(t, s, 1, later)
	if r.journal.Mark() != later {
		t.Fatalf("mark %d after the simulated clock moved a minute", r.journal.Mark())
	}
	s.End(status.Error(codes.Unavailable, "restart"))
	s = r.next(t)
	recv(t, s)
	again := time.Now().Add(offset + 2*time.Minute).UnixMilli()
	s.Send(welcome(time.UnixMilli(again), 1000, 0))
	r.awaitWelcomed(t)
	if r.journal.Mark() != again {
		t.Fatalf("mark %d after the next Welcome of the simulated clock", r.journal.Mark())
	}
}

func TestAnAckForEventsNeverSentDropsNothing(t *testing.T) {
	r := start(t, func(j *journal.Journal) {
		for g := uint64(1); g <= 3; g++ {
			j.Append(report(g))
		}
	})
	s := r.next(t)
	recv(t, s)
	// A Welcome acking far beyond the journal is not believed: everything
	// unacked is sent.
	s.Send(welcome(time.Now(), 1000, 1<<60))
	for want := uint64(1); want <= 3; want++ {
		if f := recvWhere(t, s, isEvent); f.Seq != want {
			t.Fatalf("sent seq %d, want %d", f.Seq, want)
		}
	}
	// An ack beyond what was sent drops nothing, not even events appended
	// and not sent yet.
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_EventAck{EventAck: &agentv1.EventAck{UpToSeq: 1 << 60}}})
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Ping{Ping: &agentv1.Ping{Nonce: 7}}})
	recvWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetPong().GetNonce() == 7 })
	if n, _ := r.journal.EventStats(); n != 3 {
		t.Fatalf("%d events kept after an ack of 2^60", n)
	}
	// An ack of what was sent still drops it.
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_EventAck{EventAck: &agentv1.EventAck{UpToSeq: 2}}})
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Ping{Ping: &agentv1.Ping{Nonce: 8}}})
	recvWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetPong().GetNonce() == 8 })
	if n, _ := r.journal.EventStats(); n != 1 {
		t.Fatalf("%d events kept after an ack of 2", n)
	}
}

func TestAHeartbeatIntervalOfOneMillisecondIsHeldToTheMinimum(t *testing.T) {
	if Heartbeat(1) != MinHeartbeat || Heartbeat(0) != DefaultHeartbeat || Heartbeat(1<<31) != MaxHeartbeat {
		t.Fatalf("Heartbeat(1) %s, (0) %s, (2^31) %s", Heartbeat(1), Heartbeat(0), Heartbeat(1<<31))
	}
	r := start(t, nil)
	s := r.welcomed(t, 1)
	start := time.Now()
	recvWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetHeartbeat() != nil })
	heartbeats := 1
	for time.Since(start) < 250*time.Millisecond {
		if recv(t, s).GetHeartbeat() != nil {
			heartbeats++
		}
	}
	if heartbeats > 4 {
		t.Fatalf("%d heartbeats in %s at heartbeat_interval_ms 1", heartbeats, time.Since(start))
	}
}

func TestADrainRetryAfterOf49DaysIsHeldToTheMaximum(t *testing.T) {
	if DrainWait(49*24*3600*1000) != MaxDrainRetryWait || DrainWait(300) != 300*time.Millisecond {
		t.Fatalf("DrainWait(49 days) %s, (300) %s", DrainWait(49*24*3600*1000), DrainWait(300))
	}
}

// Defect 15 (a foreign client certificate failed at the TLS handshake with
// no code a node can act on): the gateway's cert-unknown and cert-validity
// refusals reach bcd as their codes, shown in the session's Info (bcd
// status) until a Welcome is accepted.
func TestACertificateRefusalIsSurfacedWithItsCode(t *testing.T) {
	r := start(t, nil)
	for _, code := range []refusal.Code{refusal.CodeCertUnknown, pki.CodeCertValidity} {
		s := r.next(t)
		recv(t, s)
		s.End(refusal.Status(code, "the gateway does not take this certificate"))
		deadline := time.Now().Add(wait)
		for r.session.Info().Refused != code {
			if time.Now().After(deadline) {
				t.Fatalf("refused %q, want %q", r.session.Info().Refused, code)
			}
			time.Sleep(time.Millisecond)
		}
	}
	s := r.welcomed(t, 1000)
	<-r.handler.welcomed
	deadline := time.Now().Add(wait)
	for info := r.session.Info(); info.State != Connected || info.Refused != ""; info = r.session.Info() {
		if time.Now().After(deadline) {
			t.Fatalf("after a Welcome: %+v", info)
		}
		time.Sleep(time.Millisecond)
	}
	_ = s
}
