// Tests of the dispatch rules, one per rule: the acceptance order, accepted
// before any side effect, running{boot_id} before a self-terminating
// command, node-signed terminal results, duplicate delivery in its four
// cases, cancel, lane credits and the destructive-command quorum.

package dispatch_test

import (
	"crypto"
	"crypto/ed25519"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"bcd/internal/dispatch"
	"bcd/internal/fakehw"
	"bcd/internal/journal"
	"bcd/internal/machine"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

const nodeID = "node_1"

var (
	rootKey   = pki.DeriveEd25519("dispatch-test", "command-root/0")
	otherKey  = pki.DeriveEd25519("dispatch-test", "command-root/other")
	approvers = []ed25519.PrivateKey{pki.DeriveEd25519("dispatch-test", "approver/0"), pki.DeriveEd25519("dispatch-test", "approver/1")}
	nodeKey   = pki.DeriveP256("dispatch-test", "node/0")
)

type trust struct {
	roots  []*pki.PublicKey
	quorum *agentv1.Quorum
}

func (t *trust) Roots() []*pki.PublicKey           { return t.roots }
func (t *trust) Quorum() (*agentv1.Quorum, string) { return t.quorum, "test.local" }

func pub(k crypto.Signer) *pki.PublicKey {
	p, err := pki.NewPublicKey(k.Public())
	if err != nil {
		panic(err)
	}
	return p
}

// machineHook wraps the fake machine to observe the first side effect.
type machineHook struct {
	*fakehw.Machine
	onExecuted func(id string)
}

func (m *machineHook) Executed(id string) error {
	if m.onExecuted != nil {
		m.onExecuted(id)
	}
	return m.Machine.Executed(id)
}

type rig struct {
	t        *testing.T
	d        *dispatch.Dispatcher
	kinds    *dispatch.Registry
	j        *journal.Journal
	m        *machineHook
	trust    *trust
	notify   chan struct{}
	control  chan *agentv1.NodeFrame
	applied  uint64
	now      time.Time
	rebooted chan string
	mu       sync.Mutex
	dir      string
}

func newRig(t *testing.T, signed bool) *rig {
	t.Helper()
	dir := t.TempDir()
	return openRig(t, dir, signed)
}

// openRig opens a dispatcher over dir (a second call is a restart).
func openRig(t *testing.T, dir string, signed bool) *rig {
	t.Helper()
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fm, err := fakehw.New(dir, "41", fakehw.VariantHGXH100)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, j: j, m: &machineHook{Machine: fm}, trust: &trust{}, notify: make(chan struct{}, 1000),
		control: make(chan *agentv1.NodeFrame, 10), now: time.UnixMilli(1_800_000_000_000), rebooted: make(chan string, 1), dir: dir}
	if signed {
		r.trust.roots = []*pki.PublicKey{pub(rootKey)}
		r.trust.quorum = &agentv1.Quorum{Approvers: []*agentv1.PublicKey{pub(approvers[0]).Proto(), pub(approvers[1]).Proto()}, Threshold: 2, UnbatchedPerHour: 1}
	}
	r.kinds, err = dispatch.NewRegistry(fm.Kinds(machine.KindEnv{Reboot: func(id string) { r.rebooted <- id }})...)
	if err != nil {
		t.Fatal(err)
	}
	err = r.kinds.Register(machine.InventoryRefreshKind(func() ([]*agentv1.InventorySection, error) {
		inv, _ := fm.Inventory()
		return inv.Sections()
	}))
	if err != nil {
		t.Fatal(err)
	}
	r.d = dispatch.New(dispatch.Config{
		NodeID: nodeID, Key: nodeKey, Journal: j, Machine: r.m, Kinds: r.kinds, Trust: r.trust,
		Applied:     func() uint64 { r.mu.Lock(); defer r.mu.Unlock(); return r.applied },
		ServerNow:   func() time.Time { return r.now },
		Now:         func() time.Time { return r.now },
		Notify:      func() { r.notify <- struct{}{} },
		SendControl: func(f *agentv1.NodeFrame) { r.control <- f },
	})
	r.d.SetCredits(4)
	t.Cleanup(func() { r.d.Stop(); j.Close() })
	return r
}

// restart simulates a crash: the process's goroutines stop, the journal stays.
func (r *rig) restart(signed bool) *rig {
	r.d.Stop()
	r.j.Close()
	return openRig(r.t, r.dir, signed)
}

type opt func(*agentv1.Command)

func command(id, kind string, opts ...opt) *agentv1.Command {
	c := &agentv1.Command{Id: id, NodeId: nodeID, Kind: kind, NotAfterMs: 1_800_000_060_000}
	for _, o := range opts {
		o(c)
	}
	return c
}

func params(p string) opt   { return func(c *agentv1.Command) { c.Params = []byte(p) } }
func retrySafe() opt        { return func(c *agentv1.Command) { c.RetrySafe = true } }
func destructive() opt      { return func(c *agentv1.Command) { c.Destructive = true; c.Batch = "batch_1" } }
func minGen(g uint64) opt   { return func(c *agentv1.Command) { c.MinGeneration = g } }
func notAfter(ms int64) opt { return func(c *agentv1.Command) { c.NotAfterMs = ms } }
func node(n string) opt     { return func(c *agentv1.Command) { c.NodeId = n } }

func envelope(c *agentv1.Command, signers ...ed25519.PrivateKey) *pki.Envelope {
	payload, _ := proto.Marshal(c)
	if len(signers) == 0 {
		return &pki.Envelope{PayloadType: pki.PayloadTypeCommand, Payload: payload}
	}
	env, err := pki.SignEnvelope(nil, pki.PayloadTypeCommand, payload, signers[0])
	if err != nil {
		panic(err)
	}
	for _, s := range signers[1:] {
		more, _ := pki.SignEnvelope(nil, pki.PayloadTypeCommand, payload, s)
		env.Signatures = append(env.Signatures, more.Signatures...)
	}
	return env
}

func (r *rig) deliver(c *agentv1.Command, signers ...ed25519.PrivateKey) {
	r.d.Deliver(&agentv1.CommandDelivery{Command: envelope(c, signers...).Proto()})
}

// updates returns the journaled updates of a command, in order.
func (r *rig) updates(id string) []*agentv1.CommandUpdate {
	events, err := r.j.Unacked(0)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []*agentv1.CommandUpdate
	for _, e := range events {
		if u := e.GetCommandUpdate(); u != nil && u.GetCommandId() == id {
			out = append(out, u)
		}
	}
	return out
}

func states(us []*agentv1.CommandUpdate) string {
	var s []string
	for _, u := range us {
		s = append(s, u.GetState().String())
	}
	return strings.Join(s, ",")
}

// await waits until the command's updates end in state.
func (r *rig) await(id string, state agentv1.CommandState) []*agentv1.CommandUpdate {
	r.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		us := r.updates(id)
		if len(us) > 0 && us[len(us)-1].GetState() == state {
			return us
		}
		select {
		case <-r.notify:
		case <-deadline:
			r.t.Fatalf("%s: updates %s, waiting for %s", id, states(us), state)
		}
	}
}

// result verifies a terminal update's node-signed result.
func (r *rig) result(u *agentv1.CommandUpdate) *agentv1.CommandResult {
	r.t.Helper()
	s, err := pki.VerifyStatement(pki.EnvelopeFromProto(u.GetResult()), pub(nodeKey), nodeID)
	if err != nil {
		r.t.Fatalf("result of %s: %v", u.GetCommandId(), err)
	}
	res := s.GetCommandResult()
	if res.GetCommandId() != u.GetCommandId() || res.GetState() != u.GetState() || res.GetReason() != u.GetReason() || s.GetBootId() != r.m.BootID() {
		r.t.Fatalf("result %v does not match update %v", res, u)
	}
	return res
}

func (r *rig) executions(id string) int {
	n, err := r.m.Executions(id)
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

func TestASucceededCommandCarriesANodeSignedResult(t *testing.T) {
	r := newRig(t, false)
	r.deliver(command("c1", "diag.nvml"))
	us := r.await("c1", agentv1.CommandState_SUCCEEDED)
	if states(us) != "ACCEPTED,RUNNING,SUCCEEDED" {
		t.Fatalf("updates %s", states(us))
	}
	var out map[string]any
	if err := json.Unmarshal(r.result(us[2]).GetOutput(), &out); err != nil || out["gpus"] != 8.0 || out["healthy"] != 8.0 || out["driver"] == "" {
		t.Fatalf("output %v, %v", out, err)
	}
	if us[0].GetResult() != nil || us[1].GetResult() != nil {
		t.Fatal("a non-terminal update carries a result")
	}
	// Two commits: accepted and running with their events, then done.
	if got := r.j.Commits(); got != 2 {
		t.Fatalf("a command cost %d journal commits", got)
	}
}

func TestACommandDeliveredWhileBcdStopsIsNotJournaled(t *testing.T) {
	r := newRig(t, false)
	r.d.Stop()
	r.deliver(command("c1", "logs.collect"))
	if rec, err := r.j.Command("c1"); rec != nil || err != nil || r.executions("c1") != 0 {
		t.Fatalf("record %+v (%v), %d executions", rec, err, r.executions("c1"))
	}
}

func TestInventoryRefreshAndLogsCollect(t *testing.T) {
	r := newRig(t, false)
	r.deliver(command("inv", "inventory.refresh"))
	r.deliver(command("logs", "logs.collect"))
	out := string(r.result(r.await("inv", agentv1.CommandState_SUCCEEDED)[2]).GetOutput())
	if !strings.Contains(out, `"name":"system"`) || !strings.Contains(out, `"name":"gpus"`) {
		t.Fatalf("inventory.refresh output %s", out)
	}
	r.await("logs", agentv1.CommandState_SUCCEEDED)
}

func TestAcceptedIsJournaledBeforeAnySideEffect(t *testing.T) {
	r := newRig(t, false)
	checked := make(chan string, 1)
	r.m.onExecuted = func(id string) {
		rec, _ := r.j.Command(id)
		us := r.updates(id)
		if rec == nil || rec.State == "" || len(us) == 0 || us[0].GetState() != agentv1.CommandState_ACCEPTED {
			checked <- "no accepted record before the side effect"
			return
		}
		checked <- ""
	}
	r.deliver(command("c1", "logs.collect"))
	if msg := <-checked; msg != "" {
		t.Fatal(msg)
	}
}

func TestRunningWithTheBootIDIsJournaledBeforeASelfTerminatingCommand(t *testing.T) {
	r := newRig(t, false)
	r.deliver(command("reboot", "node.reboot"))
	select {
	case id := <-r.rebooted:
		rec, _ := r.j.Command(id)
		if rec == nil || rec.State != journal.Running || rec.BootID != r.m.BootID() || !rec.SelfTerminating {
			t.Fatalf("record before the reboot: %+v", rec)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reboot")
	}
	if got := states(r.updates("reboot")); got != "ACCEPTED,RUNNING" {
		t.Fatalf("updates %s", got)
	}
}

func TestASelfTerminatingCommandAcrossARebootSucceedsRebooted(t *testing.T) {
	r := newRig(t, false)
	c := command("reboot", "node.reboot")
	r.deliver(c)
	<-r.rebooted
	if err := r.m.Reboot(); err != nil {
		t.Fatal(err)
	}
	r = r.restart(false)
	r.deliver(c)
	us := r.await("reboot", agentv1.CommandState_SUCCEEDED)
	if last := us[len(us)-1]; last.GetReason() != dispatch.ReasonRebooted {
		t.Fatalf("reason %q", last.GetReason())
	} else {
		r.result(last)
	}
	if r.executions("reboot") != 1 {
		t.Fatalf("%d executions", r.executions("reboot"))
	}
}

func TestADoneCommandDeliveredAgainGetsTheStoredResult(t *testing.T) {
	r := newRig(t, false)
	c := command("c1", "diag.nvml")
	r.deliver(c)
	first := r.await("c1", agentv1.CommandState_SUCCEEDED)[2]
	r = r.restart(false)
	r.deliver(c)
	us := r.await("c1", agentv1.CommandState_SUCCEEDED)
	again := us[len(us)-1]
	if !proto.Equal(first, again) {
		t.Fatal("the stored result differs")
	}
	if r.executions("c1") != 1 {
		t.Fatalf("%d executions", r.executions("c1"))
	}
}

func TestARunningCommandDeliveredAgainIsReattached(t *testing.T) {
	r := newRig(t, false)
	c := command("c1", "logs.collect", params(`{"hold_ms":300}`))
	r.deliver(c)
	r.await("c1", agentv1.CommandState_RUNNING)
	r.deliver(c)
	us := r.await("c1", agentv1.CommandState_SUCCEEDED)
	if states(us) != "ACCEPTED,RUNNING,RUNNING,SUCCEEDED" {
		t.Fatalf("updates %s", states(us))
	}
	if r.executions("c1") != 1 {
		t.Fatalf("%d executions", r.executions("c1"))
	}
}

func TestAnInterruptedCommandIsReExecutedWhenRetrySafe(t *testing.T) {
	r := newRig(t, false)
	c := command("c1", "logs.collect", params(`{"hold_ms":60000}`), retrySafe())
	r.deliver(c)
	r.await("c1", agentv1.CommandState_RUNNING)
	r = r.restart(false) // a crash mid-command
	c.Params = nil
	r.deliver(c)
	r.await("c1", agentv1.CommandState_SUCCEEDED)
	if n := r.executions("c1"); n != 2 {
		t.Fatalf("%d executions, want exactly one more", n)
	}
}

func TestAnInterruptedCommandFailsWhenNotRetrySafe(t *testing.T) {
	r := newRig(t, false)
	c := command("c1", "logs.collect", params(`{"hold_ms":60000}`))
	r.deliver(c)
	r.await("c1", agentv1.CommandState_RUNNING)
	r = r.restart(false)
	r.deliver(c)
	us := r.await("c1", agentv1.CommandState_FAILED)
	if last := us[len(us)-1]; last.GetReason() != dispatch.ReasonInterrupted {
		t.Fatalf("reason %q", last.GetReason())
	} else {
		r.result(last)
	}
	if n := r.executions("c1"); n != 1 {
		t.Fatalf("%d executions, never twice", n)
	}
	// And it stays done: a further delivery gets the stored result.
	r.deliver(c)
	if n := r.executions("c1"); n != 1 {
		t.Fatalf("%d executions", n)
	}
}

func TestAnUnsignedCommandIsRefusedWithRoots(t *testing.T) {
	r := newRig(t, true)
	r.deliver(command("c1", "diag.nvml"))
	us := r.await("c1", agentv1.CommandState_FAILED)
	if us[0].GetReason() != "BAD_SIGNATURE: dsse-unsigned" {
		t.Fatalf("reason %q", us[0].GetReason())
	}
	r.result(us[0])
	r.deliver(command("c2", "diag.nvml"), otherKey)
	if us := r.await("c2", agentv1.CommandState_FAILED); us[0].GetReason() != "BAD_SIGNATURE: dsse-unknown-key" {
		t.Fatalf("reason %q", us[0].GetReason())
	}
	// A bad signature by the root itself.
	env := envelope(command("c3", "diag.nvml"), rootKey)
	env.Signatures[0].Sig[0] ^= 1
	r.d.Deliver(&agentv1.CommandDelivery{Command: env.Proto()})
	if us := r.await("c3", agentv1.CommandState_FAILED); us[0].GetReason() != "BAD_SIGNATURE: dsse-bad-signature" {
		t.Fatalf("reason %q", us[0].GetReason())
	}
	if r.executions("c1")+r.executions("c2")+r.executions("c3") != 0 {
		t.Fatal("a refused command ran")
	}
	// The unverified id is not remembered: the signed command still runs.
	r.deliver(command("c1", "diag.nvml"), rootKey)
	r.await("c1", agentv1.CommandState_SUCCEEDED)
}

func TestABadSignatureComesBeforeUnsupported(t *testing.T) {
	r := newRig(t, true)
	r.deliver(command("c1", "gpu.melt", node("node_2")))
	if us := r.await("c1", agentv1.CommandState_FAILED); !strings.HasPrefix(us[0].GetReason(), "BAD_SIGNATURE") {
		t.Fatalf("reason %q", us[0].GetReason())
	}
}

func TestAnotherNodesCommandOrAnUnknownKindIsUnsupported(t *testing.T) {
	r := newRig(t, true)
	r.deliver(command("c1", "diag.nvml", node("node_2"), notAfter(1)), rootKey)
	if us := r.await("c1", agentv1.CommandState_UNSUPPORTED); !strings.HasPrefix(us[0].GetReason(), "command-wrong-node") {
		t.Fatalf("reason %q", us[0].GetReason())
	}
	r.deliver(command("c2", "gpu.melt", minGen(5)), rootKey)
	if us := r.await("c2", agentv1.CommandState_UNSUPPORTED); !strings.HasPrefix(us[0].GetReason(), "kind-unsupported") {
		t.Fatalf("reason %q", us[0].GetReason())
	} else {
		r.result(us[0])
	}
}

func TestAMinGenerationAboveTheAppliedSpecIsDeferred(t *testing.T) {
	r := newRig(t, false)
	r.deliver(command("c1", "diag.nvml", minGen(2), notAfter(1)))
	select {
	case f := <-r.control:
		if f.GetSpecRequest().GetMinGeneration() != 2 || f.GetSeq() != 0 {
			t.Fatalf("control %v", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no SpecRequest")
	}
	if len(r.updates("c1")) != 0 || r.d.Deferred() != 1 {
		t.Fatal("a deferred command was answered")
	}
	r.mu.Lock()
	r.applied = 2
	r.mu.Unlock()
	r.d.GenerationApplied(2)
	// Deferral comes before expiry: once the spec is there, it is EXPIRED.
	r.await("c1", agentv1.CommandState_EXPIRED)
}

func TestACommandPastNotAfterIsExpired(t *testing.T) {
	r := newRig(t, false)
	r.d.SetCredits(0)
	r.deliver(command("c1", "diag.nvml", notAfter(r.now.UnixMilli()-1)))
	us := r.await("c1", agentv1.CommandState_EXPIRED)
	if !strings.HasPrefix(us[0].GetReason(), "command-expired") {
		t.Fatalf("reason %q", us[0].GetReason())
	}
	r.result(us[0])
	// not_after 0 means no expiry.
	r.d.SetCredits(1)
	r.deliver(command("c2", "diag.nvml", notAfter(0)))
	r.await("c2", agentv1.CommandState_SUCCEEDED)
}

func TestNoFreeLaneCreditIsBusy(t *testing.T) {
	r := newRig(t, false)
	r.d.SetCredits(1)
	r.deliver(command("c1", "logs.collect", params(`{"hold_ms":60000}`)))
	r.await("c1", agentv1.CommandState_RUNNING)
	c2 := command("c2", "diag.nvml")
	r.deliver(c2)
	us := r.await("c2", agentv1.CommandState_BUSY)
	if us[0].GetResult() != nil {
		t.Fatal("BUSY is not terminal but carries a result")
	}
	if rec, _ := r.j.Command("c2"); rec != nil {
		t.Fatal("a BUSY command was journaled")
	}
	r.d.Cancel("c1")
	if us := r.await("c1", agentv1.CommandState_FAILED); us[len(us)-1].GetReason() != dispatch.ReasonCancelled {
		t.Fatalf("cancel: %s", states(us))
	}
	r.d.Wait()
	r.deliver(c2)
	r.await("c2", agentv1.CommandState_SUCCEEDED)
}

func approval(c *agentv1.Command, signers ...ed25519.PrivateKey) *agentv1.Envelope {
	b := &agentv1.BatchApproval{BatchId: c.GetBatch(), TrustDomain: "test.local", CommandDigests: [][]byte{pki.CommandDigest(envelope(c, rootKey))}}
	payload, _ := proto.Marshal(b)
	env := &pki.Envelope{PayloadType: pki.PayloadTypeBatchApproval, Payload: payload}
	for _, s := range signers {
		one, _ := pki.SignEnvelope(nil, pki.PayloadTypeBatchApproval, payload, s)
		env.Signatures = append(env.Signatures, one.Signatures...)
	}
	return env.Proto()
}

func TestDestructiveCommandsNeedAnApprovedBatchOrRoomUnderTheHourlyLimit(t *testing.T) {
	r := newRig(t, true)
	batched := command("c1", "logs.collect", destructive())
	r.d.Deliver(&agentv1.CommandDelivery{Command: envelope(batched, rootKey).Proto(), BatchApproval: approval(batched, approvers...)})
	r.await("c1", agentv1.CommandState_SUCCEEDED)

	underApproved := command("c2", "logs.collect", destructive())
	r.d.Deliver(&agentv1.CommandDelivery{Command: envelope(underApproved, rootKey).Proto(), BatchApproval: approval(underApproved, approvers[0])})
	if us := r.await("c2", agentv1.CommandState_FAILED); us[0].GetReason() != "BATCH_UNAPPROVED: batch-unapproved" {
		t.Fatalf("reason %q", us[0].GetReason())
	}

	// One unbatched destructive command an hour.
	r.deliver(command("c3", "logs.collect", destructive()), rootKey)
	r.await("c3", agentv1.CommandState_SUCCEEDED)
	r.deliver(command("c4", "logs.collect", destructive()), rootKey)
	if us := r.await("c4", agentv1.CommandState_FAILED); !strings.HasPrefix(us[0].GetReason(), "UNBATCHED_LIMIT") {
		t.Fatalf("reason %q", us[0].GetReason())
	}
	r.now = r.now.Add(time.Hour + time.Second)
	r.deliver(command("c5", "logs.collect", destructive(), notAfter(0)), rootKey)
	r.await("c5", agentv1.CommandState_SUCCEEDED)
	if r.executions("c2")+r.executions("c4") != 0 {
		t.Fatal("a refused destructive command ran")
	}
}

func TestBusyComesBeforeTheQuorum(t *testing.T) {
	r := newRig(t, true)
	r.d.SetCredits(0)
	r.deliver(command("c1", "logs.collect", destructive()), rootKey)
	r.await("c1", agentv1.CommandState_BUSY)
}

func TestACancelledCommandFails(t *testing.T) {
	r := newRig(t, false)
	r.deliver(command("c1", "diag.nvml", params(`{"hold_ms":60000}`)))
	r.await("c1", agentv1.CommandState_RUNNING)
	r.d.Cancel("c1")
	us := r.await("c1", agentv1.CommandState_FAILED)
	if last := us[len(us)-1]; last.GetReason() != dispatch.ReasonCancelled {
		t.Fatalf("reason %q", last.GetReason())
	}
}
