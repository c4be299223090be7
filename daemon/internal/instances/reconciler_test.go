// Tests of the instances reconciler over the fakehw runtime: define and
// start with seed, taps and plan; no second define after a restart; a
// reboot started again; admission; an unknown runtime; a refused plan;
// volumes and their sharing; secret user data through a broker.

package instances

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"bcd/internal/broker"
	"bcd/internal/converge"
	"bcd/internal/journal"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"bcd/internal/runtime"
	"bcd/internal/runtime/fakehw"
	"bcd/internal/volumes"
)

type rig struct {
	t      *testing.T
	dir    string
	boot   string
	rt     *fakehw.Runtime
	store  *volumes.Store
	r      *Reconciler
	gen    uint64
	secret *fakeSecrets
}

type fakeSecrets struct {
	mu     sync.Mutex
	values map[string][]byte
	asked  int
}

func (f *fakeSecrets) Secret(ref string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	v, ok := f.values[ref]
	if !ok {
		return nil, broker.ErrPending
	}
	if v == nil {
		return nil, &refusal.Error{Code: "secret-unknown", Reason: "no such secret"}
	}
	return append([]byte{}, v...), nil
}

func (f *fakeSecrets) Forget(string) {}

func newRig(t *testing.T) *rig {
	g := &rig{t: t, dir: t.TempDir(), boot: "boot-1", secret: &fakeSecrets{values: map[string][]byte{}}}
	g.open()
	return g
}

// open makes the runtime and a reconciler over the rig's directory (a
// bcd start).
func (g *rig) open() {
	g.rt = fakehw.New(fakehw.Options{Root: filepath.Join(g.dir, "root"), PlansDir: filepath.Join(g.dir, "plans"),
		BootID: func() string { return g.boot }, Bridges: []string{"bcbr0"}})
	g.store = volumes.New(filepath.Join(g.dir, "root", "var/lib/bcd/volumes"), func() (uint64, error) { return 100 << 30, nil })
	r, err := New(Config{Runtimes: []runtime.Runtime{g.rt}, Volumes: g.store, Secrets: g.secret,
		Capacity: func() (Capacity, error) { return Capacity{VCPUs: 32, MemoryBytes: 128 << 30}, nil }})
	if err != nil {
		g.t.Fatal(err)
	}
	g.r = r
}

func (g *rig) pass(section *agentv1.InstancesSection) converge.Result {
	g.t.Helper()
	g.gen++
	spec := &agentv1.NodeSpec{NodeId: "node_1", Generation: g.gen, Instances: section}
	res, err := g.r.Reconcile(context.Background(), converge.Input{Spec: spec})
	if err != nil {
		g.t.Fatal(err)
	}
	return res
}

func (g *rig) status(id string) *agentv1.InstanceStatus {
	rep := &agentv1.StatusReport{}
	_ = g.r.Report(rep)
	for _, st := range rep.GetInstances() {
		if st.GetId() == id {
			return st
		}
	}
	return nil
}

func vm(id string, vcpus uint32, gib uint64) *agentv1.InstanceSpec {
	return &agentv1.InstanceSpec{Id: id, Runtime: runtime.NameLibvirtKVM, Vcpus: vcpus, MemoryBytes: gib << 30, State: StateRunning,
		UserData: []byte("#cloud-config\n"), Nics: []*agentv1.InstanceNic{{Bridge: "bcbr0", Mac: "52:54:00:00:00:01"}}}
}

func section(instances ...*agentv1.InstanceSpec) *agentv1.InstancesSection {
	return &agentv1.InstancesSection{Instances: instances}
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func TestDefineStartRestartRebootAndDestroy(t *testing.T) {
	g := newRig(t)
	res := g.pass(section(vm("vm1", 2, 4)))
	if res.State != agentv1.SectionState_SECTION_STATE_APPLIED || g.status("vm1").GetState() != StateRunning {
		t.Fatalf("%+v %v", res, g.status("vm1"))
	}
	seed := filepath.Join(g.rt.SeedsDir(), "vm1")
	tap := filepath.Join(g.rt.TapsDir(), runtime.TapName("vm1", 0))
	for _, p := range []string{g.rt.PlanPath("vm1"), filepath.Join(seed, "user-data"), filepath.Join(seed, "meta-data"), tap} {
		if !exists(p) {
			t.Fatalf("%s is missing", p)
		}
	}
	if info, _ := os.Stat(filepath.Join(seed, "user-data")); info.Mode().Perm() != 0o600 {
		t.Fatalf("user-data mode %v", info.Mode())
	}
	// A restart: the same spec again changes nothing.
	g.open()
	if g.status("vm1") != nil {
		t.Fatal("no journal: a restart starts without statuses")
	}
	g.pass(section(vm("vm1", 2, 4)))
	rec, _ := g.rt.Read("vm1")
	if rec.Defines != 1 || rec.Starts != 1 || g.status("vm1").GetState() != StateRunning {
		t.Fatalf("after a restart: %+v", rec)
	}
	// A reboot: every domain is off and the taps are gone; the pass starts it again.
	g.boot = "boot-2"
	os.RemoveAll(filepath.Join(g.dir, "root", "run"))
	if st, _, _ := g.rt.Inspect(context.Background(), "vm1"); st != runtime.Defined {
		t.Fatalf("after a reboot the domain is %s", st)
	}
	g.pass(section(vm("vm1", 2, 4)))
	rec, _ = g.rt.Read("vm1")
	if rec.Defines != 1 || rec.Starts != 2 || !exists(tap) || g.status("vm1").GetState() != StateRunning {
		t.Fatalf("after a reboot: %+v", rec)
	}
	// Unlisted: destroyed with its plan, seed and taps.
	if res := g.pass(section()); res.State != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatalf("%+v", res)
	}
	for _, p := range []string{g.rt.PlanPath("vm1"), seed, tap, filepath.Join(g.rt.DomainsDir(), "vm1.json")} {
		if exists(p) {
			t.Fatalf("%s remains", p)
		}
	}
	if g.status("vm1") != nil {
		t.Fatal("a destroyed instance is still reported")
	}
}

func TestAdmissionLeavesWhatDoesNotFitStoppedUntilThereIsRoom(t *testing.T) {
	g := newRig(t)
	g.pass(section(vm("big1", 20, 64)))
	res := g.pass(section(vm("big1", 20, 64), vm("big2", 20, 64)))
	st := g.status("big2")
	if res.State != agentv1.SectionState_SECTION_STATE_PROGRESSING || res.Reason != ReasonRetrying ||
		res.Message != "ResourcesExhausted: this host cannot start big2 now" || res.RequeueAfter == 0 {
		t.Fatalf("%+v", res)
	}
	if st.GetState() != StateStopped || !strings.HasPrefix(st.GetMessage(), "ResourcesExhausted: ") {
		t.Fatalf("%v", st)
	}
	// The first goes: the same pass stops it before it starts the second.
	res = g.pass(section(vm("big2", 20, 64)))
	if res.State != agentv1.SectionState_SECTION_STATE_APPLIED || g.status("big2").GetState() != StateRunning {
		t.Fatalf("%+v %v", res, g.status("big2"))
	}
}

func TestUnknownRuntimeAndRefusedPlansFailTheSection(t *testing.T) {
	g := newRig(t)
	odd := vm("odd", 1, 1)
	odd.Runtime = "firecracker"
	res := g.pass(section(odd, vm("ok", 1, 1)))
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonRuntimeUnknown ||
		!strings.Contains(res.Message, `RuntimeUnknown: instance odd names runtime "firecracker"; this bcd has libvirt-kvm`) {
		t.Fatalf("%+v", res)
	}
	if g.status("ok").GetState() != StateRunning {
		t.Fatal("the other instance did not start")
	}
	zero := vm("zero", 0, 1)
	mgmt := vm("mgmt", 1, 1)
	mgmt.Nics[0].Bridge = "br-mgmt"
	res = g.pass(section(zero, mgmt))
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonInstanceFailed {
		t.Fatalf("%+v", res)
	}
	for id, want := range map[string]string{"zero": "0 vCPUs", "mgmt": `bridge "br-mgmt" is not an instance network`} {
		data, err := os.ReadFile(g.rt.ErrorPath(id))
		if err != nil || !strings.Contains(string(data), want) || exists(g.rt.PlanPath(id)) {
			t.Fatalf("%s: %q %v", id, data, err)
		}
		if st := g.status(id); st.GetState() != StateFailed || !strings.HasPrefix(st.GetMessage(), "InstanceInvalid: ") {
			t.Fatalf("%v", st)
		}
	}
	g.pass(section())
	for _, id := range []string{"zero", "mgmt", "ok"} {
		if exists(g.rt.ErrorPath(id)) || exists(g.rt.PlanPath(id)) {
			t.Fatalf("%s left a plan or an error", id)
		}
	}
}

func TestVolumesOneWriterAndDestroyedOnceUnlisted(t *testing.T) {
	g := newRig(t)
	a, b := vm("a", 1, 1), vm("b", 1, 1)
	a.Volumes = []*agentv1.VolumeAttachment{{VolumeId: "data", Serial: "data"}}
	b.Volumes = []*agentv1.VolumeAttachment{{VolumeId: "data", Serial: "data"}}
	vols := []*agentv1.VolumeSpec{{Id: "data", SizeBytes: 1 << 30}}
	g.pass(&agentv1.InstancesSection{Instances: []*agentv1.InstanceSpec{a}, Volumes: vols})
	if !exists(g.store.Path("data")) || g.status("a").GetState() != StateRunning {
		t.Fatal("the volume or its writer is missing")
	}
	res := g.pass(&agentv1.InstancesSection{Instances: []*agentv1.InstanceSpec{a, b}, Volumes: vols})
	if st := g.status("b"); st.GetState() != StateStopped || !strings.HasPrefix(st.GetMessage(), "VolumeBusy: ") || res.State != agentv1.SectionState_SECTION_STATE_PROGRESSING {
		t.Fatalf("a second writer: %v %+v", st, res)
	}
	// Handed over in one pass: a stops before b starts.
	a.State = StateStopped
	g.pass(&agentv1.InstancesSection{Instances: []*agentv1.InstanceSpec{a, b}, Volumes: vols})
	if g.status("a").GetState() != StateStopped || g.status("b").GetState() != StateRunning {
		t.Fatalf("hand-over: %v %v", g.status("a"), g.status("b"))
	}
	// Grown in place, never shrunk.
	vols[0].SizeBytes = 2 << 30
	g.pass(&agentv1.InstancesSection{Instances: []*agentv1.InstanceSpec{b}, Volumes: vols})
	if info, _ := os.Stat(g.store.Path("data")); info.Size() != 2<<30 {
		t.Fatalf("size %d", info.Size())
	}
	res = g.pass(&agentv1.InstancesSection{Instances: []*agentv1.InstanceSpec{b}, Volumes: []*agentv1.VolumeSpec{{Id: "data", SizeBytes: 1 << 30}}})
	if res.Reason != ReasonVolumeFailed || !strings.Contains(res.Message, "VolumeShrink: ") {
		t.Fatalf("%+v", res)
	}
	// Unlisted while b has it open: kept; once b is gone: destroyed.
	g.pass(&agentv1.InstancesSection{Instances: []*agentv1.InstanceSpec{b}, Volumes: vols})
	g.pass(section())
	if exists(g.store.Path("data")) {
		t.Fatal("the volume remains")
	}
	rep := &agentv1.StatusReport{}
	_ = g.r.Report(rep)
	if u := rep.GetVolumeStorage(); u.GetTotalBytes() != 100<<30 || u.GetReservedBytes() != 5<<30 || u.GetCommittedBytes() != 0 {
		t.Fatalf("%v", u)
	}
}

func TestSecretUserDataComesThroughTheBroker(t *testing.T) {
	g := newRig(t)
	s := vm("sec", 1, 1)
	s.UserData, s.UserDataSecret = nil, "secret_abc"
	res := g.pass(section(s))
	if res.State != agentv1.SectionState_SECTION_STATE_PROGRESSING || g.status("sec").GetState() != StatePending ||
		!strings.HasPrefix(g.status("sec").GetMessage(), "SecretPending: ") {
		t.Fatalf("%+v %v", res, g.status("sec"))
	}
	g.secret.values["secret_abc"] = []byte("#cloud-config\npassword: hunter2\n")
	g.pass(section(s))
	data, _ := os.ReadFile(filepath.Join(g.rt.SeedsDir(), "sec", "user-data"))
	if string(data) != "#cloud-config\npassword: hunter2\n" || g.status("sec").GetState() != StateRunning {
		t.Fatalf("%q %v", data, g.status("sec"))
	}
	asked := g.secret.asked
	g.open()
	g.pass(section(s))
	if g.secret.asked != asked {
		t.Fatal("a restart asked for the secret again")
	}
	plan, _ := os.ReadFile(g.rt.PlanPath("sec"))
	if strings.Contains(string(plan), "hunter2") {
		t.Fatal("the plan holds the secret")
	}
	refused := vm("nope", 1, 1)
	refused.UserDataSecret = "secret_none"
	g.secret.values["secret_none"] = nil
	res = g.pass(section(s, refused))
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || !strings.HasPrefix(g.status("nope").GetMessage(), "SecretRefused: secret-unknown") {
		t.Fatalf("%+v %v", res, g.status("nope"))
	}
}

func TestStatusesSurviveARestartThroughTheJournal(t *testing.T) {
	g := newRig(t)
	j, err := journal.Open(filepath.Join(g.dir, "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	g.r.cfg.Journal = j
	res := g.pass(section(vm("vm1", 1, 1)))
	if err := j.Update(res.Persist); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Runtimes: []runtime.Runtime{g.rt}, Journal: j,
		Capacity: func() (Capacity, error) { return Capacity{VCPUs: 1, MemoryBytes: 1 << 30}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	rep := &agentv1.StatusReport{}
	_ = r.Report(rep)
	if len(rep.GetInstances()) != 1 || rep.GetInstances()[0].GetState() != StateRunning || !r.Running("vm1") {
		t.Fatalf("after a restart: %v", rep.GetInstances())
	}
	u, err := r.InstanceUsage(context.Background())
	if err != nil || len(u) != 1 || u[0].VCPUs != 1 || u[0].Runtime != runtime.NameLibvirtKVM {
		t.Fatalf("usage %+v, %v", u, err)
	}
	// fakehw's synthetic live usage: a CPU second per boot, half the memory.
	if u[0].Live.CPUTime != time.Second || u[0].Live.MemoryUsedBytes != u[0].MemoryBytes/2 {
		t.Fatalf("live usage %+v", u[0].Live)
	}
	if d := r.Drivers(); len(d) != 1 || d[0].GetName() != "libvirt-kvm" || d[0].GetKind() != "runtime" {
		t.Fatalf("drivers %v", d)
	}
}

func TestPressureBands(t *testing.T) {
	for pct, band := range map[uint32]int{0: 0, 19: 0, 20: 1, 49: 1, 50: 2, 100: 2} {
		if got := PressureBand(pct); got != band {
			t.Errorf("%d%%: band %d, want %d", pct, got, band)
		}
	}
}

func TestBalloonableOnlyWhileARunningGuestHasAFloor(t *testing.T) {
	g := newRig(t)
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if b, _ := g.r.Balloonable(); b {
		t.Fatal("balloonable with no guest")
	}
	g.pass(section(vm("i-plain", 2, 4)))
	b, changed := g.r.Balloonable()
	if b {
		t.Fatal("balloonable with a guest that has no floor")
	}
	floored := vm("i-floored", 2, 4)
	floored.MemoryFloorBytes = 1 << 30
	g.pass(section(vm("i-plain", 2, 4), floored))
	if !closed(changed) {
		t.Fatal("a guest with a floor running: the change is signalled")
	}
	b, changed = g.r.Balloonable()
	if !b {
		t.Fatal("not balloonable with a running guest that has a floor")
	}
	g.pass(section(vm("i-plain", 2, 4), floored))
	if closed(changed) {
		t.Fatal("signalled without a change")
	}
	floored.State = StateStopped
	g.pass(section(vm("i-plain", 2, 4), floored))
	if b, _ := g.r.Balloonable(); b || !closed(changed) {
		t.Fatal("a stopped guest does not balloon: the change is signalled")
	}
}
