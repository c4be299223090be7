// An end-to-end test of one agent against the in-process gateway over real
// mTLS and signed intent: join, Hello, the status report after the
// Welcome, a signed diag.nvml with its node-signed result, an unsigned
// command refused BAD_SIGNATURE, desired state with a hold, status, a
// node.reboot completed from the next boot, and no secret in any log.

package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bcd/internal/config"
	"bcd/internal/fakehw"
	"bcd/internal/join"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
	"bcd/internal/testlog"
	"google.golang.org/protobuf/proto"
)

const token = "bc_jt_agent_test_secret_42"

type node struct {
	cfg    *config.Config
	agent  *Agent
	done   chan int
	cancel context.CancelFunc
}

func startNode(t *testing.T, g *testgw.Gateway, path string, logs *testlog.Buffer) *node {
	t.Helper()
	n := runNode(t, path, Options{Version: "test", NoStatusSocket: true, Log: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(n.cancel)
	return n
}

// runNode runs an agent of opts on the joined node of the config at path
// (a fake HGX H100, serial 41, unless opts has a machine); Run's exit code
// goes to done.
func runNode(t *testing.T, path string, opts Options) *node {
	t.Helper()
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Machine == nil {
		m, err := fakehw.New(c.DataDir, "41", fakehw.VariantHGXH100)
		if err != nil {
			t.Fatal(err)
		}
		opts.Machine = m
	}
	opts.Config = c
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{cfg: c, agent: a, done: make(chan int, 1), cancel: cancel}
	go func() {
		code, err := a.Run(ctx)
		if err != nil {
			t.Error(err)
		}
		n.done <- code
	}()
	return n
}

func next(t *testing.T, g *testgw.Gateway) *testgw.Session {
	t.Helper()
	select {
	case s := <-g.Sessions:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no session")
	}
	return nil
}

func frameWhere(t *testing.T, s *testgw.Session, match func(*agentv1.NodeFrame) bool) *agentv1.NodeFrame {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case f, ok := <-s.Frames:
			if !ok {
				t.Fatal("the stream ended")
			}
			if f.GetSeq() > 0 {
				s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_EventAck{EventAck: &agentv1.EventAck{UpToSeq: f.GetSeq()}}})
			}
			if match(f) {
				return f
			}
		case <-deadline:
			t.Fatal("no such frame")
		}
	}
}

func update(id string, state agentv1.CommandState) func(*agentv1.NodeFrame) bool {
	return func(f *agentv1.NodeFrame) bool {
		u := f.GetCommandUpdate()
		return u.GetCommandId() == id && u.GetState() == state
	}
}

func welcome() *agentv1.GatewayFrame {
	return &agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Welcome{Welcome: &agentv1.Welcome{
		SessionEpoch: 1, ServerTimeMs: time.Now().UnixMilli(), HeartbeatIntervalMs: 1000, LaneCredits: 4}}}
}

func signed(t *testing.T, key ed25519.PrivateKey, payloadType string, m proto.Message) *agentv1.Envelope {
	t.Helper()
	payload, _ := proto.Marshal(m)
	if key == nil {
		return &agentv1.Envelope{PayloadType: payloadType, Payload: payload}
	}
	env, err := pki.SignEnvelope(nil, payloadType, payload, key)
	if err != nil {
		t.Fatal(err)
	}
	return env.Proto()
}

func commandFrame(t *testing.T, key ed25519.PrivateKey, c *agentv1.Command) *agentv1.GatewayFrame {
	return &agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Command{Command: &agentv1.CommandDelivery{
		Command: signed(t, key, pki.PayloadTypeCommand, c)}}}
}

func TestANodeEndToEnd(t *testing.T) {
	g := testgw.Start(t, testgw.Options{SignedIntent: true})
	g.AddToken(token)
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	logs := &testlog.Buffer{}
	if _, err := join.Join(context.Background(), join.Options{ConfigPath: path, Token: token, Log: slog.New(slog.NewTextHandler(logs, nil))}); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, g, path, logs)
	s := next(t, g)
	hello := frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetHello() != nil }).GetHello()
	if hello.NodeId != n.cfg.NodeID || hello.BootId == "" || hello.JournalId == "" {
		t.Fatalf("hello %v", hello)
	}
	s.Send(welcome())
	report := frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetStatusReport() != nil }).GetStatusReport()
	if len(report.Inventory) != 3 {
		t.Fatalf("report %v", report)
	}
	inv, _ := fakehw.GenerateInventory("41", fakehw.VariantHGXH100)
	want, _ := inv.Sections()
	for i := range want {
		if report.Inventory[i].Sha256 != want[i].Sha256 {
			t.Fatalf("section %s hash %s, golden %s", want[i].Name, report.Inventory[i].Sha256, want[i].Sha256)
		}
	}

	// A signed diag.nvml succeeds with a node-signed result.
	s.Send(commandFrame(t, g.Keys.CommandRoot, &agentv1.Command{Id: "cmd_diag", NodeId: n.cfg.NodeID, Kind: "diag.nvml", NotAfterMs: time.Now().Add(time.Minute).UnixMilli()}))
	u := frameWhere(t, s, update("cmd_diag", agentv1.CommandState_SUCCEEDED)).GetCommandUpdate()
	stmt, err := pki.VerifyStatement(pki.EnvelopeFromProto(u.GetResult()), s.NodeKey, n.cfg.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	json.Unmarshal(stmt.GetCommandResult().GetOutput(), &out)
	if out["gpus"] != 8.0 {
		t.Fatalf("diag output %v", out)
	}

	// An unsigned command is refused.
	s.Send(commandFrame(t, nil, &agentv1.Command{Id: "cmd_unsigned", NodeId: n.cfg.NodeID, Kind: "diag.nvml"}))
	if u := frameWhere(t, s, update("cmd_unsigned", agentv1.CommandState_FAILED)).GetCommandUpdate(); u.GetReason() != "BAD_SIGNATURE: dsse-unsigned" {
		t.Fatalf("reason %q", u.GetReason())
	}

	// Desired state with a 2-GPU hold.
	spec := &agentv1.NodeSpec{NodeId: n.cfg.NodeID, Generation: 1, Holds: []*agentv1.Hold{{AllocationId: "alloc_1", GpuIndexes: []uint32{0, 1}}}}
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_DesiredState{DesiredState: &agentv1.DesiredState{Spec: signed(t, g.Keys.CommandRoot, pki.PayloadTypeNodeSpec, spec)}}})
	bound := frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return len(f.GetStatusReport().GetAllocations()) == 1 }).GetStatusReport()
	if bound.AppliedGeneration != 1 {
		t.Fatalf("applied generation %d", bound.AppliedGeneration)
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, fakehw.RootName, "etc", "cdi", "bcd-alloc-alloc_1.json")); err != nil {
		t.Fatal(err)
	}
	hb := frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetHeartbeat() != nil })
	if hb.GetHeartbeat().AppliedGeneration != 1 {
		t.Fatalf("heartbeat %v", hb)
	}
	st := n.agent.Status()
	if st.NodeID != n.cfg.NodeID || st.Session.State != "connected" || st.AppliedGeneration != 1 || st.Commands.Done != 1 {
		t.Fatalf("status %+v", st)
	}

	// node.reboot: the process ends with 0, and the next boot completes it.
	bootBefore := hello.BootId
	reboot := &agentv1.Command{Id: "cmd_reboot", NodeId: n.cfg.NodeID, Kind: "node.reboot", NotAfterMs: time.Now().Add(time.Minute).UnixMilli()}
	s.Send(commandFrame(t, g.Keys.CommandRoot, reboot))
	frameWhere(t, s, update("cmd_reboot", agentv1.CommandState_RUNNING))
	select {
	case code := <-n.done:
		if code != 0 {
			t.Fatalf("exit %d after a reboot", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("bcd did not exit for the reboot")
	}
	n = startNode(t, g, path, logs)
	s = next(t, g)
	hello = frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetHello() != nil }).GetHello()
	if hello.BootId == bootBefore || hello.AppliedGeneration != 1 {
		t.Fatalf("after the reboot: %v", hello)
	}
	s.Send(welcome())
	s.Send(commandFrame(t, g.Keys.CommandRoot, reboot))
	u = frameWhere(t, s, update("cmd_reboot", agentv1.CommandState_SUCCEEDED)).GetCommandUpdate()
	if u.GetReason() != "rebooted" {
		t.Fatalf("reason %q", u.GetReason())
	}
	n.cancel()
	if code := <-n.done; code != 0 {
		t.Fatalf("exit %d on shutdown", code)
	}

	// No secret in any log line.
	keyPEM, _ := os.ReadFile(filepath.Join(n.cfg.DataDir, "node.key"))
	text := logs.String()
	for what, secret := range map[string]string{"the token": token, "the node key": strings.Split(string(keyPEM), "\n")[1]} {
		if strings.Contains(text, secret) {
			t.Errorf("%s is in the log", what)
		}
	}
	for _, line := range []string{"session.connected", "dispatch.accepted", "converge.applied", "node.rebooting"} {
		if !strings.Contains(text, line) {
			t.Errorf("no %s line in the log", line)
		}
	}
}
