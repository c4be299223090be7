//go:build fakehw

// A test of bcd sim (fakehw builds): one token with N uses joins N agents
// with distinct keys and machines, each runs its session, and the token is
// never printed; the control socket's faults restart one agent; the
// power-on spread.

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
	"bcd/internal/testlog"
)

func TestSimJoinsDistinctNodesWithOneToken(t *testing.T) {
	g := testgw.Start(t, testgw.Options{TokenUses: 3})
	g.AddToken(cliToken)
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	var out, errOut testlog.Buffer
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"sim", "--config", path, "--nodes", "3", "--seed", "100"}, cliEnv(ctx, cliToken, &out, &errOut))
	}()
	nodes, keys, hosts := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for len(nodes) < 3 {
		select {
		case s := <-g.Sessions:
			nodes[s.NodeID], keys[s.NodeKey.Pin()] = true, true
			<-s.Frames // Hello
			s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Welcome{Welcome: &agentv1.Welcome{
				SessionEpoch: 1, ServerTimeMs: time.Now().UnixMilli(), HeartbeatIntervalMs: 1000, LaneCredits: 1}}})
			for f := range s.Frames {
				if r := f.GetStatusReport(); r != nil {
					hosts[string(r.GetInventory()[0].GetContent())] = true
					break
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d session(s); stderr %s", len(nodes), errOut.String())
		}
	}
	if len(keys) != 3 || len(hosts) != 3 {
		t.Fatalf("%d keys, %d machines", len(keys), len(hosts))
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("sim: exit %d: %s", code, errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), cliToken) {
		t.Fatal("the token was printed")
	}
	// A second run needs no token: every agent has joined.
	ctx2, stop2 := context.WithCancel(context.Background())
	go func() {
		done <- run([]string{"sim", "--config", path, "--nodes", "3", "--seed", "100"}, cliEnv(ctx2, "", &out, &errOut))
	}()
	select {
	case <-g.Sessions:
	case <-time.After(10 * time.Second):
		t.Fatalf("no session on the second run: %s", errOut.String())
	}
	stop2()
	if code := <-done; code != 0 {
		t.Fatalf("second sim: exit %d", code)
	}
}

func TestSimRetriesABusyGatewayAndARefusedJoinLeavesTheOthersRunning(t *testing.T) {
	// Three uses for four agents, and the first five Join calls shed.
	g := testgw.Start(t, testgw.Options{TokenUses: 3, Shed: 5, ShedHintMs: 10})
	g.AddToken(cliToken)
	path := g.WriteConfig(t, t.TempDir())
	var out, errOut testlog.Buffer
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"sim", "--config", path, "--nodes", "4", "--join-concurrency", "2"}, cliEnv(ctx, cliToken, &out, &errOut))
	}()
	nodes := map[string]bool{}
	for len(nodes) < 3 {
		select {
		case s := <-g.Sessions:
			nodes[s.NodeID] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("%d session(s); stderr %s", len(nodes), errOut.String())
		}
	}
	// The fourth agent is refused once the three uses are spent; the others run on.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errOut.String(), "token-exhausted") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal: %s", errOut.String())
		}
		select {
		case <-g.Sessions:
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if code := <-done; code != 1 {
		t.Fatalf("sim: exit %d (1: a join was refused): %s", code, errOut.String())
	}
	if n := strings.Count(errOut.String(), "join.retry"); n != 5 {
		t.Fatalf("%d retries logged for 5 shed calls", n)
	}
	if !strings.Contains(out.String(), "3 agent(s) ran, 1 join(s) failed") {
		t.Fatal(out.String())
	}
}

// welcomeHello reads a new session's Hello and welcomes it.
func welcomeHello(t *testing.T, s *testgw.Session) *agentv1.Hello {
	t.Helper()
	f := <-s.Frames
	hello := f.GetHello()
	if hello == nil {
		t.Fatalf("the first frame is %v", f)
	}
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Welcome{Welcome: &agentv1.Welcome{
		SessionEpoch: 1, ServerTimeMs: time.Now().UnixMilli(), HeartbeatIntervalMs: 1000, LaneCredits: 1}}})
	return hello
}

func TestSimFaultsRestartOneAgentAfterACrashARebootOrAJournalLoss(t *testing.T) {
	g := testgw.Start(t, testgw.Options{TokenUses: 2})
	g.AddToken(cliToken)
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	control := filepath.Join(dir, "sim.sock")
	var out, errOut testlog.Buffer
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		args := []string{"sim", "--config", path, "--nodes", "2", "--seed", "100", "--control", control}
		done <- run(args, cliEnv(ctx, cliToken, &out, &errOut))
	}()
	hellos := map[string]*agentv1.Hello{}
	next := func() (string, *agentv1.Hello) {
		t.Helper()
		select {
		case s := <-g.Sessions:
			return s.NodeID, welcomeHello(t, s)
		case <-time.After(15 * time.Second):
			t.Fatalf("no session; stderr %s", errOut.String())
		}
		return "", nil
	}
	for len(hellos) < 2 {
		id, h := next()
		hellos[id] = h
	}
	info, err := os.Stat(control)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the control socket: %v %v", info, err)
	}
	conn, err := net.Dial("unix", control)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	answers := bufio.NewReader(conn)
	ask := func(line string) string {
		t.Helper()
		fmt.Fprintln(conn, line)
		answer, err := answers.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(answer)
	}
	for _, bad := range []string{"crash 7", "melt 0", "crash", "crash -1"} {
		if answer := ask(bad); !strings.HasPrefix(answer, "error: ") {
			t.Fatalf("%q answered %q", bad, answer)
		}
	}
	for _, fault := range []string{"reboot", "lose-journal"} {
		// Agent 0 is the first agent's node: its config names it.
		agentDir := filepath.Join(dir, "data", "sim", "0")
		if answer := ask(fault + " 0"); answer != "ok" {
			t.Fatalf("%s: %q", fault, answer)
		}
		id, h := next()
		before := hellos[id]
		switch {
		case before == nil:
			t.Fatalf("a session of an unknown node %s", id)
		case fault == "reboot" && h.GetBootId() == before.GetBootId():
			t.Fatalf("a reboot kept the boot id %s", h.GetBootId())
		case fault == "lose-journal" && h.GetJournalId() == before.GetJournalId():
			t.Fatalf("a journal loss kept the journal %s", h.GetJournalId())
		}
		hellos[id] = h
		starts, err := os.ReadFile(filepath.Join(agentDir, "fakehw-root", "var", "lib", "fakehw", "starts"))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(strings.Fields(string(starts))); n < 2 {
			t.Fatalf("%d start(s) recorded after a %s", n, fault)
		}
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("sim: exit %d: %s", code, errOut.String())
	}
}

func TestAnAgentsPowerOnDelayIsItsOwnAndWithinTheSpread(t *testing.T) {
	if d := powerOnDelay("s", 3, 0); d != 0 {
		t.Fatalf("no spread, a delay of %s", d)
	}
	spread := 30 * time.Second
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		d := powerOnDelay("s", i, spread)
		if d < 0 || d >= spread || d != powerOnDelay("s", i, spread) {
			t.Fatalf("agent %d: %s", i, d)
		}
		seen[d] = true
	}
	if len(seen) < 45 || powerOnDelay("s", 1, spread) == powerOnDelay("t", 1, spread) {
		t.Fatal("the delays do not spread")
	}
}
