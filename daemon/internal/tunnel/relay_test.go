// Tests of whole tunnels: a Manager opens them against a real gRPC
// Gateway.Tunnel on loopback, where the test plays the caller, and the
// shell is a real /bin/sh on a real pseudo-terminal. The output asserted
// on is what the shell computed (hi-42 from hi-$((6*7)), stty's size),
// never an echo of the input.

package tunnel

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"bcd/internal/proto/agentv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// wait is how long a test waits for anything.
const wait = 10 * time.Second

// caller is the gateway side of the test: each Tunnel call is handed to the
// test, and ends when the test says so.
type caller struct {
	agentv1.UnimplementedGatewayServer
	calls chan *call
}

// call is one Tunnel stream seen from the gateway.
type call struct {
	stream agentv1.Gateway_TunnelServer
	frames chan *agentv1.TunnelFrame
	end    chan struct{}
}

func (c *caller) Tunnel(stream agentv1.Gateway_TunnelServer) error {
	cl := &call{stream: stream, frames: make(chan *agentv1.TunnelFrame, 64), end: make(chan struct{})}
	go func() {
		defer close(cl.frames)
		for {
			f, err := stream.Recv()
			if err != nil {
				return
			}
			cl.frames <- f
		}
	}()
	c.calls <- cl
	select {
	case <-cl.end:
	case <-stream.Context().Done():
	}
	return nil
}

// serve starts the gateway on loopback and returns it with a Dialer of it.
func serve(t *testing.T) (*caller, Dialer) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw := &caller{calls: make(chan *call, 4)}
	srv := grpc.NewServer()
	agentv1.RegisterGatewayServer(srv, gw)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	dial := func(ctx context.Context) (Stream, func(), error) {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		stream, err := agentv1.NewGatewayClient(conn).Tunnel(ctx)
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return stream, func() { conn.Close() }, nil
	}
	return gw, dial
}

func (c *caller) next(t *testing.T) *call {
	t.Helper()
	select {
	case cl := <-c.calls:
		return cl
	case <-time.After(wait):
		t.Fatal("bcd did not dial Tunnel")
		return nil
	}
}

// frame is the next frame bcd sent.
func (cl *call) frame(t *testing.T) *agentv1.TunnelFrame {
	t.Helper()
	select {
	case f, ok := <-cl.frames:
		if !ok {
			t.Fatal("bcd ended the stream")
		}
		return f
	case <-time.After(wait):
		t.Fatal("no frame from bcd")
		return nil
	}
}

// awaitOutput reads data frames until their bytes contain want.
func (cl *call) awaitOutput(t *testing.T, want string) string {
	t.Helper()
	var out bytes.Buffer
	deadline := time.After(wait)
	for !strings.Contains(out.String(), want) {
		select {
		case f, ok := <-cl.frames:
			if !ok {
				t.Fatalf("the stream ended before %q; output %q", want, out.String())
			}
			out.Write(f.GetData())
		case <-deadline:
			t.Fatalf("no %q in the output %q", want, out.String())
		}
	}
	return out.String()
}

// awaitEnd reads frames until the last one (an exit code or a close
// reason) and returns it.
func (cl *call) awaitEnd(t *testing.T) *agentv1.TunnelFrame {
	t.Helper()
	for {
		f := cl.frame(t)
		if f.GetData() == nil {
			return f
		}
	}
}

func (cl *call) send(t *testing.T, f *agentv1.TunnelFrame) {
	t.Helper()
	if err := cl.stream.Send(f); err != nil {
		t.Fatal(err)
	}
}

func (cl *call) typed(t *testing.T, line string) {
	cl.send(t, &agentv1.TunnelFrame{Frame: &agentv1.TunnelFrame_Data{Data: []byte(line)}})
}

// fixture is a Manager with a real shell counted by started.
type fixture struct {
	iss     *issuer
	gw      *caller
	m       *Manager
	started atomic.Int32
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	gw, dial := serve(t)
	f := &fixture{iss: newIssuer(t), gw: gw}
	dir := t.TempDir()
	shell := Shell{Path: DefaultShell, Dir: dir, Home: dir, Started: func() error { f.started.Add(1); return nil }}
	f.m = New(Config{NodeID: testNode, Trust: f.iss, Journal: tempJournal(t), Dial: dial, Shell: shell})
	t.Cleanup(f.m.Stop)
	return f
}

func (f *fixture) open(id, ticket string, rows, cols uint32) {
	open := &agentv1.OpenTunnel{TunnelId: id, Ticket: ticket, Size: &agentv1.TerminalSize{Rows: rows, Cols: cols}, Term: "xterm"}
	f.m.Frame(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_OpenTunnel{OpenTunnel: open}})
}

func TestAConsoleRunsARealShellOnAPseudoTerminal(t *testing.T) {
	f := newFixture(t)
	ticket := sign(t, f.iss.key, claims(time.Now(), "t-console"))
	f.open("tun_1", ticket, 40, 120)
	cl := f.gw.next(t)
	first := cl.frame(t)
	if first.GetTunnelId() != "tun_1" || first.GetTicket() != ticket {
		t.Fatalf("the first frame is %v, want the ticket of tun_1", first)
	}
	cl.typed(t, "echo hi-$((6*7))\n")
	cl.awaitOutput(t, "hi-42")
	cl.typed(t, "stty size; echo TERM=$TERM\n")
	if out := cl.awaitOutput(t, "TERM=xterm"); !strings.Contains(out, "40 120") {
		t.Fatalf("stty size printed no 40 120: %q", out)
	}
	cl.send(t, &agentv1.TunnelFrame{Frame: &agentv1.TunnelFrame_Resize{Resize: &agentv1.TerminalSize{Rows: 50, Cols: 132}}})
	cl.typed(t, "stty size\n")
	cl.awaitOutput(t, "50 132")
	cl.typed(t, "exit 5\n")
	end := cl.awaitEnd(t)
	if x, ok := end.GetFrame().(*agentv1.TunnelFrame_ExitCode); !ok || x.ExitCode != 5 {
		t.Fatalf("the last frame is %v, want exit code 5", end)
	}
	close(cl.end)
	if n := f.started.Load(); n != 1 {
		t.Errorf("%d shells started, want 1", n)
	}
}

func TestARefusedTicketStartsNothingAndIsReportedAsTheCloseReason(t *testing.T) {
	f := newFixture(t)
	c := claims(time.Now(), "t-other")
	c.Aud = "bcd:node_2"
	f.open("tun_2", sign(t, f.iss.key, c), 24, 80)
	cl := f.gw.next(t)
	first := cl.frame(t)
	reason := first.GetCloseReason()
	if first.GetTunnelId() != "tun_2" || !strings.HasPrefix(reason, "token-audience: ") {
		t.Fatalf("the first frame is %v, want close_reason token-audience: …", first)
	}
	close(cl.end)
	f.m.Stop()
	if n := f.started.Load(); n != 0 {
		t.Errorf("%d shells started for a refused ticket", n)
	}
}

func TestAShellIsHungUpWhenTheCallerGoesAway(t *testing.T) {
	f := newFixture(t)
	f.open("tun_3", sign(t, f.iss.key, claims(time.Now(), "t-gone")), 24, 80)
	cl := f.gw.next(t)
	cl.frame(t)
	cl.typed(t, "echo up-$((1+1))\n")
	cl.awaitOutput(t, "up-2")
	close(cl.end) // the caller goes away: the gateway ends the stream
	stopped := make(chan struct{})
	go func() { f.m.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(killGrace + closeGrace + time.Second):
		t.Fatal("the tunnel did not end after its caller went away")
	}
}

func TestStoppingBcdClosesOpenTunnelsWithAReason(t *testing.T) {
	f := newFixture(t)
	f.open("tun_4", sign(t, f.iss.key, claims(time.Now(), "t-stop")), 24, 80)
	cl := f.gw.next(t)
	cl.frame(t)
	cl.typed(t, "echo ready-$((2*3))\n")
	cl.awaitOutput(t, "ready-6")
	go f.m.Stop()
	end := cl.awaitEnd(t)
	if !strings.HasPrefix(end.GetCloseReason(), "tunnel-gone: bcd is stopping") {
		t.Fatalf("the last frame is %v, want close_reason tunnel-gone: bcd is stopping", end)
	}
	close(cl.end)
}
