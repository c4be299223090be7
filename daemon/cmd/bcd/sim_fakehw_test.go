//go:build fakehw

// A test of bcd sim (fakehw builds): one token with N uses joins N agents
// with distinct keys and machines, each runs its session, and the token is
// never printed.

package main

import (
	"context"
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
