// Tests of failover between test gateways that share one set of keys (as
// the dev stack's gateways on one store do): a node moves to the next
// gateway when its gateway is killed, drains, fences its session or
// fails before a Welcome, or cannot be dialed; it stays on the gateway
// that welcomed it, goes on in the list's order round the end, and a
// revocation on any gateway still ends it. Nothing sleeps: each step
// awaits a session, a frame, or a condition polled with a deadline.

package session

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bcd/internal/config"
	"bcd/internal/fakehw"
	"bcd/internal/identity"
	"bcd/internal/join"
	"bcd/internal/journal"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"bcd/internal/testgw"
	"bcd/internal/testlog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cluster is a node whose configuration lists n test gateways, joined on
// the first, its session running.
type cluster struct {
	gws     []*testgw.Gateway
	journal *journal.Journal
	handler *handler
	session *Session
	logs    *testlog.Buffer
	done    chan error
}

func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	first := testgw.Start(t, testgw.Options{})
	gws := []*testgw.Gateway{first}
	urls := []string{first.URL}
	for range n - 1 {
		g := testgw.Start(t, testgw.Options{Keys: first.Keys})
		gws, urls = append(gws, g), append(urls, g.URL)
	}
	first.AddToken("tok")
	dir := t.TempDir()
	path := first.WriteConfig(t, dir)
	if err := config.SetEncoded(path, map[string]string{"gateway_urls": config.QuoteArray(urls)}, nil); err != nil {
		t.Fatal(err)
	}
	m, _ := fakehw.New(filepath.Join(dir, "data"), "41", fakehw.VariantCPU)
	if _, err := join.Join(context.Background(), join.Options{ConfigPath: path, Token: "tok", Machine: m}); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
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
	var gateways []Gateway
	for _, u := range c.Gateways() {
		gateways = append(gateways, Gateway{URL: u, Dial: GRPCDialer(c.ForGateway(u), id, DialOptions{ConnectTimeout: wait})})
	}
	if len(gateways) != n {
		t.Fatalf("the configuration lists %d gateways, want %d", len(gateways), n)
	}
	logs := &testlog.Buffer{}
	h := &handler{nodeID: id.NodeID, frames: make(chan *agentv1.GatewayFrame, 16), welcomed: make(chan struct{}, 16)}
	s := New(Config{
		Gateways: gateways, Journal: j, Handler: h,
		BackoffBase: time.Millisecond, BackoffCap: 5 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(logs, nil)),
	})
	cl := &cluster{gws: gws, journal: j, handler: h, session: s, logs: logs, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { cl.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-cl.done
	})
	return cl
}

// welcomedOn takes the next session on gateway i, its Hello, and welcomes
// it, then waits until the node says it is connected there.
func (cl *cluster) welcomedOn(t *testing.T, i int) *testgw.Session {
	t.Helper()
	s := sessionOn(t, cl.gws[i])
	if recv(t, s).GetHello() == nil {
		t.Fatal("the first frame is not a Hello")
	}
	s.Send(welcome(time.Now(), 1000, 0))
	cl.awaitInfo(t, func(info Info) bool { return info.State == Connected && info.Gateway == cl.gws[i].URL })
	return s
}

// sessionOn awaits the next session on g.
func sessionOn(t *testing.T, g *testgw.Gateway) *testgw.Session {
	t.Helper()
	select {
	case s := <-g.Sessions:
		return s
	case <-time.After(wait):
		t.Fatalf("no session on %s", g.URL)
	}
	return nil
}

// awaitInfo polls the session's Info until ok, for at most wait.
func (cl *cluster) awaitInfo(t *testing.T, ok func(Info) bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for info := cl.session.Info(); !ok(info); info = cl.session.Info() {
		if time.Now().After(deadline) {
			t.Fatalf("info %+v", info)
		}
		time.Sleep(time.Millisecond)
	}
}

// failovers are the session.failover lines logged so far, as
// "from>to:reason" with the gateways' indices.
func (cl *cluster) failovers() []string {
	index := map[string]int{}
	for i, g := range cl.gws {
		index[g.URL] = i
	}
	var moves []string
	for _, line := range strings.Split(cl.logs.String(), "\n") {
		if !strings.Contains(line, "msg=session.failover") {
			continue
		}
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		moves = append(moves, fmt.Sprintf("%d>%d:%s", index[fields["from"]], index[fields["to"]], fields["reason"]))
	}
	return moves
}

func (cl *cluster) wantFailovers(t *testing.T, want ...string) {
	t.Helper()
	if got := cl.failovers(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("failovers %q, want %q", got, want)
	}
}

func TestANodeMovesToTheNextGatewayWhenItsGatewayIsKilled(t *testing.T) {
	cl := startCluster(t, 2)
	if info := cl.session.Info(); info.Gateway != cl.gws[0].URL {
		t.Fatalf("before any dial: gateway %q, want the first", info.Gateway)
	}
	cl.welcomedOn(t, 0)
	cl.gws[0].Stop()
	s := cl.welcomedOn(t, 1)
	pingAt(t, s, 1, time.Now().UnixMilli())
	cl.wantFailovers(t, "0>1:dropped")
	if info := cl.session.Info(); info.Epoch != 3 || info.Transport != "grpc" {
		t.Fatalf("info %+v", info)
	}
}

func TestADrainMovesTheNodeToTheNextGateway(t *testing.T) {
	cl := startCluster(t, 2)
	s := cl.welcomedOn(t, 0)
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Drain{Drain: &agentv1.Drain{Reason: "restart", RetryAfterMs: 200}}})
	ended(t, s)
	cl.welcomedOn(t, 1)
	cl.wantFailovers(t, "0>1:drain")
	if !strings.Contains(cl.logs.String(), "msg=session.drained") {
		t.Fatal("no session.drained line")
	}
}

func TestASessionFencedRefusalMovesTheNode(t *testing.T) {
	cl := startCluster(t, 2)
	s := cl.welcomedOn(t, 0)
	s.End(refusal.Status(refusal.CodeSessionFenced, "epoch 3 is not the node's (4)"))
	cl.welcomedOn(t, 1)
	cl.wantFailovers(t, "0>1:session-fenced")
}

func TestASessionThatEndsBeforeItsWelcomeMovesTheNode(t *testing.T) {
	cl := startCluster(t, 2)
	s := sessionOn(t, cl.gws[0])
	recv(t, s)
	s.End(status.Error(codes.Unavailable, "going away"))
	cl.welcomedOn(t, 1)
	cl.wantFailovers(t, "0>1:no-welcome")
}

// After A comes back the node stays on B, the gateway that welcomed it,
// until B fails; then it goes on in the list's order, round the end.
func TestTheNodeStaysOnTheGatewayThatWelcomedIt(t *testing.T) {
	cl := startCluster(t, 2)
	cl.welcomedOn(t, 0)
	cl.gws[0].Stop()
	s := cl.welcomedOn(t, 1)
	cl.gws[0].Restart(t)
	pingAt(t, s, 1, time.Now().UnixMilli())
	select {
	case <-cl.gws[0].Sessions:
		t.Fatal("the node went back to the first gateway while the second held it")
	default:
	}
	if info := cl.session.Info(); info.State != Connected || info.Gateway != cl.gws[1].URL {
		t.Fatalf("info %+v", info)
	}
	s.End(status.Error(codes.Unavailable, "restart"))
	cl.welcomedOn(t, 0)
	cl.wantFailovers(t, "0>1:dropped", "1>0:dropped")
}

func TestTheNodeGoesOnInTheListsOrderPastAGatewayItCannotDial(t *testing.T) {
	cl := startCluster(t, 3)
	s := cl.welcomedOn(t, 0)
	cl.gws[1].Stop()
	s.End(status.Error(codes.Unavailable, "restart"))
	// B cannot be dialed: C is next.
	s = cl.welcomedOn(t, 2)
	cl.gws[1].Restart(t)
	// Round the end: A, not B, which the node passed.
	s.End(status.Error(codes.Unavailable, "restart"))
	s = cl.welcomedOn(t, 0)
	s.End(status.Error(codes.Unavailable, "restart"))
	cl.welcomedOn(t, 1)
	cl.wantFailovers(t, "0>1:dropped", "1>2:dial-failed", "2>0:dropped", "0>1:dropped")
}

func TestLivenessMovesTheNode(t *testing.T) {
	cl := startCluster(t, 2)
	s := sessionOn(t, cl.gws[0])
	recv(t, s)
	s.Send(welcome(time.Now(), 100, 0)) // no Pings: 300 ms of silence
	ended(t, s)
	cl.welcomedOn(t, 1)
	cl.wantFailovers(t, "0>1:liveness")
}

func TestARevocationOnAnyGatewayEndsTheNode(t *testing.T) {
	cl := startCluster(t, 2)
	cl.welcomedOn(t, 0)
	cl.gws[0].Stop()
	s := cl.welcomedOn(t, 1)
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_RevocationNotice{RevocationNotice: &agentv1.RevocationNotice{Reason: "stolen"}}})
	select {
	case err := <-cl.done:
		if err != ErrRevoked {
			t.Fatalf("run: %v", err)
		}
		cl.done <- err
	case <-time.After(wait):
		t.Fatal("the session kept running")
	}
	if info := cl.session.Info(); info.State != Revoked {
		t.Fatalf("info %+v", info)
	}
	cl.wantFailovers(t, "0>1:dropped")
}

func TestACertRevokedRefusalOnTheNextGatewayEndsTheNode(t *testing.T) {
	cl := startCluster(t, 2)
	s := cl.welcomedOn(t, 0)
	cl.gws[1].Revoke(s.NodeID)
	s.End(status.Error(codes.Unavailable, "restart"))
	select {
	case err := <-cl.done:
		if err != ErrRevoked {
			t.Fatalf("run: %v", err)
		}
		cl.done <- err
	case <-time.After(wait):
		t.Fatal("the session kept running")
	}
}

func TestAfterADrainWithSeveralGatewaysTheWaitIsJittered(t *testing.T) {
	ceiling := DrainWait(300)
	below := 0
	for range 200 {
		d := drainJitter(ceiling)
		if d < 0 || d > ceiling {
			t.Fatalf("%s outside [0, %s]", d, ceiling)
		}
		if d < ceiling/2 {
			below++
		}
	}
	if below == 0 || below == 200 {
		t.Fatalf("%d of 200 waits below half of %s", below, ceiling)
	}
	if d := drainJitter(DrainWait(49 * 24 * 3600 * 1000)); d > MaxDrainRetryWait {
		t.Fatalf("%s above the cap", d)
	}
}

func TestWithOneGatewayNothingMoves(t *testing.T) {
	r := start(t, nil)
	s := r.welcomed(t, 1000)
	s.End(status.Error(codes.Unavailable, "restart"))
	r.welcomed(t, 1000)
	if info := r.session.Info(); info.Gateway != r.gw.URL {
		t.Fatalf("gateway %q", info.Gateway)
	}
}
