// Tests of desired state: generations applied once and persisted, holds
// bound to CDI files with node-signed AllocationBound and released on the
// spec's word only, the signedSpecs policies, and trust rotations taken
// only when the current approvers signed them.

package converge

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/fakehw"
	"bcd/internal/intent"
	"bcd/internal/journal"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

const nodeID = "node_1"

var (
	root      = pki.DeriveEd25519("converge-test", "command-root/0")
	approvers = []ed25519.PrivateKey{pki.DeriveEd25519("converge-test", "approver/0"), pki.DeriveEd25519("converge-test", "approver/1")}
	strangers = []ed25519.PrivateKey{pki.DeriveEd25519("converge-test", "stranger/0"), pki.DeriveEd25519("converge-test", "stranger/1")}
	nodeKey   = pki.DeriveP256("converge-test", "node/0")
)

func pub(k crypto.Signer) *pki.PublicKey {
	p, _ := pki.NewPublicKey(k.Public())
	return p
}

func bundle(seq uint64) *agentv1.TrustBundle {
	return &agentv1.TrustBundle{
		TrustDomain: "test.local", Sequence: seq, CommandRoots: []*agentv1.PublicKey{pub(root).Proto()},
		Quorum: &agentv1.Quorum{Approvers: []*agentv1.PublicKey{pub(approvers[0]).Proto(), pub(approvers[1]).Proto()}, Threshold: 2},
	}
}

type rig struct {
	c       *Converger
	j       *journal.Journal
	m       *fakehw.Machine
	trust   *intent.Trust
	logs    *bytes.Buffer
	applied []uint64
	notify  chan struct{}
}

func newRig(t *testing.T, dir string, signed bool, policy string) *rig {
	t.Helper()
	return newRigWith(t, dir, signed, policy)
}

// newRigWith is newRig with more reconcilers.
func newRigWith(t *testing.T, dir string, signed bool, policy string, extra ...Reconciler) *rig {
	t.Helper()
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	m, _ := fakehw.New(dir, "41", fakehw.VariantHGXH100)
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	var roots []*pki.PublicKey
	var b *agentv1.TrustBundle
	if signed {
		roots, b = []*pki.PublicKey{pub(root)}, bundle(1)
	}
	trust, err := intent.New(j, roots, b, "test.local", policy, log)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{j: j, m: m, trust: trust, logs: logs, notify: make(chan struct{}, 1)}
	r.c, err = New(Config{NodeID: nodeID, Key: nodeKey, Journal: j, Machine: m, Trust: trust, Log: log, Reconcilers: extra,
		Notify: func() {
			select {
			case r.notify <- struct{}{}:
			default:
			}
		},
		Applied: func(g uint64) { r.applied = append(r.applied, g) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.c.Stop) // before the journal closes
	return r
}

func spec(gen uint64, holds ...*agentv1.Hold) *agentv1.NodeSpec {
	return &agentv1.NodeSpec{NodeId: nodeID, Generation: gen, Holds: holds}
}

func hold(id string, gpus ...uint32) *agentv1.Hold {
	return &agentv1.Hold{AllocationId: id, GpuIndexes: gpus}
}

func desired(s *agentv1.NodeSpec, signers ...ed25519.PrivateKey) *agentv1.DesiredState {
	payload, _ := proto.Marshal(s)
	env := &pki.Envelope{PayloadType: pki.PayloadTypeNodeSpec, Payload: payload}
	for _, k := range signers {
		one, _ := pki.SignEnvelope(nil, pki.PayloadTypeNodeSpec, payload, k)
		env.Signatures = append(env.Signatures, one.Signatures...)
	}
	return &agentv1.DesiredState{Spec: env.Proto()}
}

func (r *rig) lastReport(t *testing.T) *agentv1.StatusReport {
	t.Helper()
	events, _ := r.j.Unacked(0)
	for i := len(events) - 1; i >= 0; i-- {
		if rep := events[i].GetStatusReport(); rep != nil {
			return rep
		}
	}
	t.Fatal("no status report")
	return nil
}

func TestAHoldIsBoundAndReleasedOnlyByTheSpec(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, false, "")
	if ok, err := r.c.Apply(desired(spec(1, hold("alloc_1", 0, 1)))); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	cdi := filepath.Join(r.m.CDIDir(), "bcd-alloc-alloc_1.json")
	data, err := os.ReadFile(cdi)
	if err != nil || !strings.Contains(string(data), "NVIDIA_VISIBLE_DEVICES=0,1") {
		t.Fatalf("CDI spec %s, %v", data, err)
	}
	// Beside the CDI spec, the hold's env file.
	env := filepath.Join(r.m.CDIDir(), "bcd-alloc-alloc_1.env")
	want := "BCD_ALLOCATION_ID=alloc_1\nBCD_CDI_DEVICE=bcd.dev/alloc=alloc_1\nBCD_GPU_INDEXES=0,1\nNVIDIA_VISIBLE_DEVICES=0,1\n"
	if data, err := os.ReadFile(env); err != nil || string(data) != want {
		t.Fatalf("env file %q, %v", data, err)
	}
	rep := r.lastReport(t)
	if rep.AppliedGeneration != 1 || len(rep.Allocations) != 1 || len(rep.Inventory) != 3 {
		t.Fatalf("report %v", rep)
	}
	stmt, err := pki.VerifyStatement(pki.EnvelopeFromProto(rep.Allocations[0]), pub(nodeKey), nodeID)
	if err != nil {
		t.Fatal(err)
	}
	if b := stmt.GetAllocationBound(); b.GetAllocationId() != "alloc_1" || len(b.GetGpuIndexes()) != 2 || b.GetCdiDevices()[0] != "bcd.dev/alloc=alloc_1" || b.GetGeneration() != 1 {
		t.Fatalf("statement %v", stmt)
	}
	if gen, _ := r.j.Applied(); gen != 1 || len(r.applied) != 1 {
		t.Fatalf("applied generation %d, callbacks %v", gen, r.applied)
	}

	// A restart keeps the hold, and restores a CDI file and an env file
	// that went missing.
	os.Remove(cdi)
	os.Remove(env)
	r.j.Close()
	r = newRig(t, dir, false, "")
	if _, err := os.Stat(cdi); err != nil {
		t.Fatal("a hold was dropped on bcd's own")
	}
	if data, err := os.ReadFile(env); err != nil || string(data) != want {
		t.Fatalf("env file after the restart %q, %v", data, err)
	}
	// The same generation again changes nothing; an older one neither.
	if ok, _ := r.c.Apply(desired(spec(1))); ok {
		t.Fatal("generation 1 applied twice")
	}
	if _, err := os.Stat(cdi); err != nil {
		t.Fatal("a stale spec released a hold")
	}
	if ok, _ := r.c.Apply(desired(spec(2))); !ok {
		t.Fatal("generation 2 not applied")
	}
	if _, err := os.Stat(cdi); !os.IsNotExist(err) {
		t.Fatal("the released hold's CDI file is still there")
	}
	if _, err := os.Stat(env); !os.IsNotExist(err) {
		t.Fatal("the released hold's env file is still there")
	}
	rep = r.lastReport(t)
	if len(rep.Released) != 1 || rep.Released[0].AllocationId != "alloc_1" || len(rep.Allocations) != 0 || rep.AppliedGeneration != 2 {
		t.Fatalf("report %v", rep)
	}
}

func TestAHoldThatCannotBeBoundFails(t *testing.T) {
	r := newRig(t, t.TempDir(), false, "")
	r.c.Apply(desired(spec(1, hold("a", 0), hold("b", 0, 1), hold("c", 8))))
	rep := r.lastReport(t)
	if len(rep.Allocations) != 1 || len(rep.Failed) != 2 {
		t.Fatalf("report %v", rep)
	}
	for _, f := range rep.Failed {
		if f.AllocationId == "b" && !strings.HasPrefix(f.Reason, "gpu-held") || f.AllocationId == "c" && !strings.HasPrefix(f.Reason, "gpu-unknown") {
			t.Fatalf("failure %v", f)
		}
	}
}

func TestSpecsMustBeSignedWithRootsUnderAlways(t *testing.T) {
	r := newRig(t, t.TempDir(), true, "")
	if _, err := r.c.Apply(desired(spec(1))); !errors.Is(err, ErrSpecRefused) || pki.CodeOf(err) != pki.CodeDSSEUnsigned {
		t.Fatalf("unsigned: %v", err)
	}
	if _, err := r.c.Apply(desired(spec(1), strangers[0])); pki.CodeOf(err) != pki.CodeDSSEUnknownKey {
		t.Fatalf("signed by another key: %v", err)
	}
	if ok, err := r.c.Apply(desired(spec(1), root)); !ok || err != nil {
		t.Fatalf("signed: %v %v", ok, err)
	}
	other := spec(2)
	other.NodeId = "node_2"
	if _, err := r.c.Apply(desired(other, root)); pki.CodeOf(err) != pki.CodeSpecWrongNode {
		t.Fatalf("another node's: %v", err)
	}
}

func TestUnderAccessOnlyAccessChangesMustBeSigned(t *testing.T) {
	r := newRig(t, t.TempDir(), true, "access")
	if ok, err := r.c.Apply(desired(spec(1))); !ok || err != nil {
		t.Fatalf("unsigned without access: %v %v", ok, err)
	}
	s := spec(2)
	s.Access = &agentv1.AccessSection{Accounts: []*agentv1.SshAccount{{Name: "root", Principals: []string{"root"}}}}
	if _, err := r.c.Apply(desired(s)); pki.CodeOf(err) != pki.CodeSpecUnsignedAccess {
		t.Fatalf("unsigned access change: %v", err)
	}
	if ok, _ := r.c.Apply(desired(s, root)); !ok {
		t.Fatal("a signed access change was refused")
	}
}

func TestATrustRotationNeedsTheCurrentApprovers(t *testing.T) {
	r := newRig(t, t.TempDir(), true, "")
	next := bundle(2)
	next.Quorum.UnbatchedPerHour = 5
	payload, _ := proto.Marshal(next)
	signed := func(keys ...ed25519.PrivateKey) *agentv1.Envelope {
		env := &pki.Envelope{PayloadType: pki.PayloadTypeTrustBundle, Payload: payload}
		for _, k := range keys {
			one, _ := pki.SignEnvelope(nil, pki.PayloadTypeTrustBundle, payload, k)
			env.Signatures = append(env.Signatures, one.Signatures...)
		}
		return env.Proto()
	}
	s := spec(1)
	s.Trust = &agentv1.TrustSection{TrustBundle: signed(strangers...)}
	if ok, _ := r.c.Apply(desired(s, root)); !ok {
		t.Fatal("the spec itself should still apply")
	}
	if r.trust.Bundle().GetSequence() != 1 || !strings.Contains(r.logs.String(), "trust.ignored") {
		t.Fatalf("a bundle signed by strangers was taken (sequence %d)", r.trust.Bundle().GetSequence())
	}
	s = spec(2)
	s.Trust = &agentv1.TrustSection{TrustBundle: signed(approvers...)}
	r.c.Apply(desired(s, root))
	if r.trust.Bundle().GetSequence() != 2 {
		t.Fatal("a bundle signed by the current approvers was ignored")
	}
	// It survives a restart.
	again, _ := intent.New(r.j, []*pki.PublicKey{pub(root)}, bundle(1), "test.local", "", nil)
	if again.Bundle().GetSequence() != 2 {
		t.Fatal("the rotation was not persisted")
	}
}

func TestAnApprovedTrustBundleWithABadKeyIsRefusedAndTheNodeStillStarts(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, true, "")
	// Well-formed-looking, properly approved, but a command root whose
	// SPKI does not parse (its keyid is a pin all the same).
	next := bundle(2)
	garbage := []byte("not a SubjectPublicKeyInfo")
	next.CommandRoots = append(next.CommandRoots, &agentv1.PublicKey{Keyid: pki.PinSPKI(garbage), SpkiDer: garbage})
	payload, _ := proto.Marshal(next)
	env := &pki.Envelope{PayloadType: pki.PayloadTypeTrustBundle, Payload: payload}
	for _, k := range approvers {
		one, _ := pki.SignEnvelope(nil, pki.PayloadTypeTrustBundle, payload, k)
		env.Signatures = append(env.Signatures, one.Signatures...)
	}
	s := spec(1)
	s.Trust = &agentv1.TrustSection{TrustBundle: env.Proto()}
	if ok, _ := r.c.Apply(desired(s, root)); !ok {
		t.Fatal("the spec itself should still apply")
	}
	if r.trust.Bundle().GetSequence() != 1 || !strings.Contains(r.logs.String(), "bad-public-key") {
		t.Fatalf("a bundle with a bad key was taken (sequence %d): %s", r.trust.Bundle().GetSequence(), r.logs.String())
	}
	status := r.lastReport(t).GetSections()[0]
	if status.GetSection() != SectionTrust || status.GetReason() != ReasonRotationRefused || !strings.HasPrefix(status.GetMessage(), "bad-public-key: ") {
		t.Fatalf("trust status %v", status)
	}
	if r.j.Get("trust_bundle") != nil {
		t.Fatal("the refused bundle was kept in the journal")
	}
	// A journal that holds such a bundle (written before every key was
	// checked) does not stop the node from starting: it is dropped.
	data, _ := proto.Marshal(next)
	r.j.Put("trust_bundle", data)
	again, err := intent.New(r.j, []*pki.PublicKey{pub(root)}, bundle(1), "test.local", "", nil)
	if err != nil {
		t.Fatalf("restart on a journal with a bad bundle: %v", err)
	}
	if again.Bundle().GetSequence() != 1 || r.j.Get("trust_bundle") != nil {
		t.Fatalf("restart kept the bad bundle (sequence %d)", again.Bundle().GetSequence())
	}
}

func TestCheckQuorumRefusesAnApproverWhoseKeyDoesNotParse(t *testing.T) {
	b := bundle(2)
	b.Quorum.Approvers[1] = &agentv1.PublicKey{Keyid: "sha256:00", SpkiDer: []byte{1, 2, 3}}
	if err := pki.CheckQuorum(b); pki.CodeOf(err) != pki.CodeBadPublicKey {
		t.Fatalf("CheckQuorum: %v", err)
	}
}

func TestAHoldWithABookedShareRunsInItsSliceUntilReleased(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, false, "")
	share := &agentv1.Hold{AllocationId: "alloc_s", GpuIndexes: []uint32{2}, Vcpus: 8, MemoryBytes: 64 << 30}
	k8s := &agentv1.Hold{AllocationId: "alloc_k", GpuIndexes: []uint32{3}, Vcpus: 8, MemoryBytes: 64 << 30, Binding: "kubernetes"}
	if ok, err := r.c.Apply(desired(spec(1, share, k8s))); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	slice := filepath.Join(r.m.Root(), "sys/fs/cgroup/bcd.slice/bcd-alloc.slice/bcd-alloc-alloc_s.slice")
	if data, err := os.ReadFile(filepath.Join(slice, "cpu.max")); err != nil || string(data) != "800000 100000\n" {
		t.Fatalf("cpu.max %q, %v", data, err)
	}
	if data, err := os.ReadFile(filepath.Join(slice, "memory.max")); err != nil || string(data) != "68719476736\n" {
		t.Fatalf("memory.max %q, %v", data, err)
	}
	unit, err := os.ReadFile(r.m.SliceUnitPath("alloc_s"))
	if err != nil || !strings.Contains(string(unit), "CPUQuota=800%\nMemoryMax=68719476736\n") {
		t.Fatalf("unit %s, %v", unit, err)
	}
	if _, err := os.Stat(r.m.SliceUnitPath("alloc_k")); !os.IsNotExist(err) {
		t.Fatal("a kubernetes hold got a slice")
	}
	parents := map[string]string{}
	for _, env := range r.lastReport(t).Allocations {
		stmt, err := pki.VerifyStatement(pki.EnvelopeFromProto(env), pub(nodeKey), nodeID)
		if err != nil {
			t.Fatal(err)
		}
		b := stmt.GetAllocationBound()
		parents[b.GetAllocationId()] = b.GetCgroupParent()
		if b.GetVcpus() != 8 || b.GetMemoryBytes() != 64<<30 {
			t.Fatalf("statement %v", b)
		}
	}
	if parents["alloc_s"] != "bcd-alloc-alloc_s.slice" || parents["alloc_k"] != "" {
		t.Fatalf("cgroup parents %v", parents)
	}
	// Their env files: the share and the slice; the kubernetes binding
	// without NVIDIA_VISIBLE_DEVICES, as its CDI spec.
	envs := map[string]string{
		"alloc_s": "BCD_ALLOCATION_ID=alloc_s\nBCD_CDI_DEVICE=bcd.dev/alloc=alloc_s\nBCD_GPU_INDEXES=2\nNVIDIA_VISIBLE_DEVICES=2\n" +
			"BCD_VCPUS=8\nBCD_MEMORY_BYTES=68719476736\nBCD_CGROUP_PARENT=bcd-alloc-alloc_s.slice\n",
		"alloc_k": "BCD_ALLOCATION_ID=alloc_k\nBCD_CDI_DEVICE=bcd.dev/alloc=alloc_k\nBCD_GPU_INDEXES=3\nBCD_BINDING=kubernetes\n" +
			"BCD_VCPUS=8\nBCD_MEMORY_BYTES=68719476736\n",
	}
	for id, want := range envs {
		if data, err := os.ReadFile(filepath.Join(r.m.CDIDir(), "bcd-alloc-"+id+".env")); err != nil || string(data) != want {
			t.Fatalf("%s env file %q, %v", id, data, err)
		}
	}
	// A reboot clears run/: the restarted bcd makes the slice again.
	if err := r.m.Reboot(); err != nil {
		t.Fatal(err)
	}
	r.j.Close()
	r = newRig(t, dir, false, "")
	if _, err := os.Stat(r.m.SliceUnitPath("alloc_s")); err != nil {
		t.Fatalf("the slice was not restored: %v", err)
	}
	if ok, _ := r.c.Apply(desired(spec(2))); !ok {
		t.Fatal("generation 2 not applied")
	}
	for _, gone := range []string{slice, r.m.SliceUnitPath("alloc_s")} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Fatalf("%s left after the release", gone)
		}
	}
}

func TestTheAppliedSpecSentAgainIsTakenAsAppliedWithoutAnotherVerify(t *testing.T) {
	dir := t.TempDir()
	unsigned := desired(spec(1))
	r := newRig(t, dir, false, "")
	if ok, err := r.c.Apply(unsigned); !ok || err != nil {
		t.Fatalf("applied: %v %v", ok, err)
	}
	r.c.Stop()
	r.j.Close()
	// The same node with command roots: the spec it applied, byte for
	// byte, is in effect and not verified again; any other bytes are.
	r = newRig(t, dir, true, "")
	before, _ := r.j.Unacked(0)
	if ok, err := r.c.Apply(unsigned); ok || err != nil {
		t.Fatalf("the applied spec again: %v %v", ok, err)
	}
	if after, _ := r.j.Unacked(0); len(after) != len(before) {
		t.Fatalf("%d events journaled for the applied spec", len(after)-len(before))
	}
	other := spec(1)
	other.Holds = []*agentv1.Hold{hold("a", 0)}
	if _, err := r.c.Apply(desired(other)); pki.CodeOf(err) != pki.CodeDSSEUnsigned {
		t.Fatalf("another spec of the applied generation: %v", err)
	}
}
