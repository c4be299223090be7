// Tests of what plugs into the agent: a kind that only the machine
// contributes runs end to end through the session, and every StatusReport
// carries the section statuses of the applied spec, across a restart.

package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"bcd/internal/config"
	"bcd/internal/dispatch"
	"bcd/internal/fakehw"
	"bcd/internal/join"
	"bcd/internal/machine"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
	"bcd/internal/testlog"
)

func TestAKindTheMachineContributesRunsThroughTheSession(t *testing.T) {
	g := testgw.Start(t, testgw.Options{SignedIntent: true})
	g.AddToken(token)
	path := g.WriteConfig(t, t.TempDir())
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	if _, err := join.Join(context.Background(), join.Options{ConfigPath: path, Token: token, Log: log}); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := fakehw.New(c.DataDir, "41", fakehw.VariantHGXH100)
	if err != nil {
		t.Fatal(err)
	}
	m.AddKinds(dispatch.Kind{Name: "test.echo", RetrySafe: true, Run: func(_ context.Context, call dispatch.Call) ([]byte, error) {
		return call.Params, nil
	}})
	n := runNode(t, path, Options{Machine: m, Version: "test", NoStatusSocket: true, Log: log})
	t.Cleanup(n.cancel)
	s := next(t, g)
	s.Send(welcome())
	s.Send(commandFrame(t, g.Keys.CommandRoot, &agentv1.Command{Id: "cmd_echo", NodeId: n.cfg.NodeID, Kind: "test.echo",
		Params: []byte(`{"hello":"world"}`), NotAfterMs: time.Now().Add(time.Minute).UnixMilli()}))
	u := frameWhere(t, s, update("cmd_echo", agentv1.CommandState_SUCCEEDED)).GetCommandUpdate()
	stmt, err := pki.VerifyStatement(pki.EnvelopeFromProto(u.GetResult()), s.NodeKey, n.cfg.NodeID)
	if err != nil || string(stmt.GetCommandResult().GetOutput()) != `{"hello":"world"}` {
		t.Fatalf("result %v, %v", stmt, err)
	}
	if n, _ := m.Executions("cmd_echo"); n != 1 {
		t.Fatalf("%d executions", n)
	}
}

func TestEveryStatusReportCarriesTheSections(t *testing.T) {
	g := testgw.Start(t, testgw.Options{SignedIntent: true})
	g.AddToken(token)
	path := g.WriteConfig(t, t.TempDir())
	logs := &testlog.Buffer{}
	if _, err := join.Join(context.Background(), join.Options{ConfigPath: path, Token: token, Log: slog.New(slog.NewTextHandler(logs, nil))}); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, g, path, logs)
	s := next(t, g)
	s.Send(welcome())
	if first := frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetStatusReport() != nil }).GetStatusReport(); len(first.GetSections()) != 0 {
		t.Fatalf("sections before any spec: %v", first.GetSections())
	}
	spec := &agentv1.NodeSpec{NodeId: n.cfg.NodeID, Generation: 1, Holds: []*agentv1.Hold{{AllocationId: "alloc_1", GpuIndexes: []uint32{9}}}}
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_DesiredState{DesiredState: &agentv1.DesiredState{Spec: signed(t, g.Keys.CommandRoot, pki.PayloadTypeNodeSpec, spec)}}})
	want := func(r *agentv1.StatusReport) bool {
		secs := r.GetSections()
		return len(secs) == 6 && secs[0].GetSection() == "trust" && secs[0].GetState() == agentv1.SectionState_SECTION_STATE_APPLIED &&
			secs[1].GetSection() == "holds" && secs[1].GetState() == agentv1.SectionState_SECTION_STATE_FAILED &&
			secs[1].GetReason() == "HoldFailed" && secs[1].GetGeneration() == 1 &&
			secs[2].GetSection() == "host" && secs[2].GetState() == agentv1.SectionState_SECTION_STATE_APPLIED &&
			secs[3].GetSection() == "telemetry" && secs[3].GetState() == agentv1.SectionState_SECTION_STATE_APPLIED &&
			secs[4].GetSection() == "daemon" && secs[4].GetState() == agentv1.SectionState_SECTION_STATE_APPLIED &&
			secs[5].GetSection() == "access" && secs[5].GetState() == agentv1.SectionState_SECTION_STATE_APPLIED
	}
	frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return want(f.GetStatusReport()) })
	n.cancel()
	<-n.done

	// The next process's first report, after its Welcome, carries them too.
	again := startNode(t, g, path, logs)
	s = next(t, g)
	s.Send(welcome())
	report := frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetStatusReport() != nil }).GetStatusReport()
	if !want(report) {
		t.Fatalf("sections after a restart: %v", report.GetSections())
	}
	if fresh, err := again.agent.converger.Report(); err != nil || !want(fresh) {
		t.Fatalf("the restarted agent's report: %v, %v", fresh.GetSections(), err)
	}
}

// TestEveryRegisteredKindIsListed holds what bcd registers to
// proto/kinds.toml (dispatch.Known, generated), the list the dev stack
// checks a command against: every kind a fakehw or host agent registers
// is listed, and every listed kind is one of them.
func TestEveryRegisteredKindIsListed(t *testing.T) {
	m, err := fakehw.New(t.TempDir(), "41", fakehw.VariantHGXH100)
	if err != nil {
		t.Fatal(err)
	}
	m.SetFaults(fakehw.Faults{GPUReset: true})
	kinds := append(m.Kinds(machine.KindEnv{}), machine.NewHost().Kinds(machine.KindEnv{})...)
	kinds = append(kinds, machine.InventoryRefreshKind(nil), (&Agent{}).upgradeKind())
	listed := map[string]bool{}
	for _, k := range dispatch.Known {
		listed[k.Name] = true
	}
	registered := map[string]bool{}
	for _, k := range kinds {
		registered[k.Name] = true
		if !listed[k.Name] {
			t.Errorf("bcd registers %q, which proto/kinds.toml does not list", k.Name)
		}
	}
	for _, k := range dispatch.Known {
		if !registered[k.Name] {
			t.Errorf("proto/kinds.toml lists %q, which no bcd registers", k.Name)
		}
	}
}
