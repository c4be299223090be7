// The holds section (docs/protocol.md, "Reservations (holds)"): a hold
// becomes a CDI spec file and an env file per allocation (cdi.go) and a node-signed
// NodeStatement{allocation_bound}, reported in every StatusReport; a hold
// the spec no longer lists is released (file removed, AllocationReleased);
// a hold that cannot be bound is reported AllocationFailed and the section
// FAILED "HoldFailed". bcd never drops a hold on its own: the bound holds
// are kept in the journal, and a CDI file that went missing is written
// again at start.

package converge

import (
	"context"
	"crypto"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"bcd/internal/journal"
	"bcd/internal/machine"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// allocationsKey keeps the bound allocations in the journal.
const allocationsKey = "allocations"

// Allocation is a bound hold.
type Allocation struct {
	// ID is the allocation id.
	ID string `json:"id"`
	// GPUs are the GPU indexes.
	GPUs []uint32 `json:"gpus"`
	// Binding is "" or "kubernetes".
	Binding string `json:"binding,omitempty"`
	// Generation is the spec generation that bound it.
	Generation uint64 `json:"generation"`
	// VCPUs and MemoryBytes are the share of the host booked with it.
	VCPUs       uint32 `json:"vcpus,omitempty"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// CgroupParent is the slice a plain hold with a share runs in.
	CgroupParent string `json:"cgroup_parent,omitempty"`
	// Statement is the node-signed AllocationBound (protobuf Envelope).
	Statement []byte `json:"statement"`
	// ReleaseAtMs, when set, is a released Kubernetes hold whose pods keep
	// its devices until then (pods.go): not offered, still claimed.
	ReleaseAtMs int64 `json:"release_at_ms,omitempty"`
}

// holdsReconciler binds and releases holds.
type holdsReconciler struct {
	nodeID  string
	key     crypto.Signer
	machine machine.Machine
	now     func() time.Time
	log     *slog.Logger

	mu          sync.Mutex
	allocations map[string]*Allocation
}

// newHolds loads the bound allocations and rewrites any CDI file that went
// missing: a hold stays until the spec releases it.
func newHolds(cfg Config, log *slog.Logger) (*holdsReconciler, error) {
	h := &holdsReconciler{nodeID: cfg.NodeID, key: cfg.Key, machine: cfg.Machine, now: cfg.Now, log: log, allocations: map[string]*Allocation{}}
	data := cfg.Journal.Get(allocationsKey)
	if data == nil {
		return h, nil
	}
	var list []*Allocation
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("the journal's allocations: %w", err)
	}
	for _, a := range list {
		h.allocations[a.ID] = a
		if a.ReleaseAtMs > 0 {
			continue // its pods keep its devices; nothing is offered again
		}
		_, cdiErr := os.Stat(cdiPath(h.machine.CDIDir(), a.ID))
		if _, envErr := os.Stat(envPath(h.machine.CDIDir(), a.ID)); cdiErr != nil || envErr != nil {
			if err := writeHold(h.machine.CDIDir(), a); err != nil {
				return nil, err
			}
			log.Warn("converge.cdi_restored", "allocation_id", a.ID)
		}
		// A slice lives in /run: a reboot takes it, the hold brings it back.
		if s, ok := h.machine.(machine.Slices); ok && a.CgroupParent != "" {
			if _, err := s.MakeSlice(a.ID, a.VCPUs, a.MemoryBytes); err != nil {
				return nil, fmt.Errorf("allocation %s: its slice: %w", a.ID, err)
			}
		}
	}
	return h, nil
}

// Section is "holds".
func (h *holdsReconciler) Section() string { return SectionHolds }

// Reconcile binds the spec's holds and releases the others.
func (h *holdsReconciler) Reconcile(_ context.Context, in Input) (Result, error) {
	released, failed, err := h.apply(in.Spec)
	if err != nil {
		return Result{}, err
	}
	h.mu.Lock()
	bound := len(h.allocations) - len(h.releasingLocked())
	list, err := json.Marshal(h.sorted())
	res := applied(fmt.Sprintf("%d hold(s) bound", bound))
	h.awaitPodsLocked(&res)
	h.mu.Unlock()
	if err != nil {
		return Result{}, err
	}
	if len(failed) > 0 {
		var why []string
		for _, f := range failed {
			why = append(why, f.GetAllocationId()+": "+f.GetReason())
		}
		res.State, res.Reason = agentv1.SectionState_SECTION_STATE_FAILED, ReasonHoldFailed
		res.Message = fmt.Sprintf("%d hold(s) bound, %d not: %s", bound, len(failed), strings.Join(why, "; "))
	}
	res.Persist = func(tx *journal.Tx) error { return tx.Put(allocationsKey, list) }
	if len(released) > 0 || len(failed) > 0 {
		res.Report = func(r *agentv1.StatusReport) { r.Released, r.Failed = released, failed }
	}
	return res, nil
}

// Report adds the AllocationBound of every bound hold, by allocation id.
func (h *holdsReconciler) Report(r *agentv1.StatusReport) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.sorted() {
		if a.ReleaseAtMs > 0 {
			continue // released: no longer bound, only claimed
		}
		env := &agentv1.Envelope{}
		if err := proto.Unmarshal(a.Statement, env); err != nil {
			return fmt.Errorf("allocation %s: %w", a.ID, err)
		}
		r.Allocations = append(r.Allocations, env)
	}
	return nil
}

// list returns the bound allocations, by id.
func (h *holdsReconciler) list() []*Allocation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sorted()
}

func (h *holdsReconciler) sorted() []*Allocation {
	out := make([]*Allocation, 0, len(h.allocations))
	for _, a := range h.allocations {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// apply releases the holds the spec no longer lists (or lists otherwise)
// and binds the new ones.
func (h *holdsReconciler) apply(spec *agentv1.NodeSpec) ([]*agentv1.AllocationReleased, []*agentv1.AllocationFailed, error) {
	inv, err := h.machine.Inventory()
	if err != nil {
		return nil, nil, err
	}
	gpus := 0
	if inv.GPUs != nil {
		gpus = len(inv.GPUs.GetGpus())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	released, err := h.release(spec)
	if err != nil {
		return nil, nil, err
	}
	used, claimed := map[uint32]string{}, map[uint32]string{}
	for _, a := range h.allocations {
		for _, g := range a.GPUs {
			if a.ReleaseAtMs > 0 {
				claimed[g] = a.ID
			} else {
				used[g] = a.ID
			}
		}
	}
	var failed []*agentv1.AllocationFailed
	for _, hold := range spec.GetHolds() {
		id := hold.GetAllocationId()
		if _, bound := h.allocations[id]; bound {
			continue
		}
		if reason := check(hold, gpus, used, claimed); reason != "" {
			failed = append(failed, &agentv1.AllocationFailed{AllocationId: id, Reason: reason})
			h.log.Warn("converge.hold_failed", "allocation_id", id, "reason", reason)
			continue
		}
		a, reason, err := h.bind(hold, spec.GetGeneration())
		if err != nil {
			return nil, nil, err
		}
		if reason != "" {
			failed = append(failed, &agentv1.AllocationFailed{AllocationId: id, Reason: reason})
			continue
		}
		for _, g := range a.GPUs {
			used[g] = id
		}
	}
	return released, failed, nil
}

// release removes the bound holds the spec does not list as they are; a
// hold listed with other GPUs or another binding is bound again by apply.
// The caller holds h.mu.
func (h *holdsReconciler) release(spec *agentv1.NodeSpec) ([]*agentv1.AllocationReleased, error) {
	wanted := map[string]*agentv1.Hold{}
	for _, hold := range spec.GetHolds() {
		wanted[hold.GetAllocationId()] = hold
	}
	var released []*agentv1.AllocationReleased
	now := h.now()
	for id, a := range h.allocations {
		if a.ReleaseAtMs > 0 {
			if now.UnixMilli() >= a.ReleaseAtMs {
				delete(h.allocations, id)
				released = append(released, &agentv1.AllocationReleased{AllocationId: id})
				h.log.Info("converge.released", "allocation_id", id, "after", "its pods let go")
			}
			continue
		}
		hold, ok := wanted[id]
		if ok && slices.Equal(hold.GetGpuIndexes(), a.GPUs) && hold.GetBinding() == a.Binding &&
			hold.GetVcpus() == a.VCPUs && hold.GetMemoryBytes() == a.MemoryBytes {
			continue
		}
		if delay := h.podRelease(a); !ok && delay > 0 {
			if err := removeHold(h.machine.CDIDir(), id); err != nil {
				return nil, err
			}
			a.ReleaseAtMs = now.Add(delay).UnixMilli()
			h.log.Info("converge.releasing", "allocation_id", id, "pods_release_ms", delay.Milliseconds())
			continue
		}
		if err := removeHold(h.machine.CDIDir(), id); err != nil {
			return nil, err
		}
		if s, slice := h.machine.(machine.Slices); slice && a.CgroupParent != "" {
			if err := s.RemoveSlice(id); err != nil {
				return nil, err
			}
		}
		delete(h.allocations, id)
		if !ok {
			released = append(released, &agentv1.AllocationReleased{AllocationId: id})
			h.log.Info("converge.released", "allocation_id", id)
		}
	}
	return released, nil
}

// bind writes a checked hold's CDI file and signs its AllocationBound; a
// CDI file that cannot be written is a failure reason, a signature that
// cannot be made an error. The caller holds h.mu.
func (h *holdsReconciler) bind(hold *agentv1.Hold, generation uint64) (*Allocation, string, error) {
	id := hold.GetAllocationId()
	a := &Allocation{ID: id, GPUs: slices.Clone(hold.GetGpuIndexes()), Binding: hold.GetBinding(), Generation: generation,
		VCPUs: hold.GetVcpus(), MemoryBytes: hold.GetMemoryBytes()}
	// A plain hold's share runs in its slice; a kubernetes hold's share is
	// the kubelet's to enforce.
	if s, ok := h.machine.(machine.Slices); ok && a.Binding == "" && (a.VCPUs > 0 || a.MemoryBytes > 0) {
		name, err := s.MakeSlice(id, a.VCPUs, a.MemoryBytes)
		if err != nil {
			return nil, ReasonSliceFailed + ": " + err.Error(), nil
		}
		a.CgroupParent = name
	}
	err := error(nil)
	if f, ok := h.machine.(machine.CDIFaults); ok {
		err = f.CDIWriteFault()
	}
	if err == nil {
		err = writeHold(h.machine.CDIDir(), a)
	}
	if err != nil {
		_ = removeHold(h.machine.CDIDir(), id)
		if s, ok := h.machine.(machine.Slices); ok && a.CgroupParent != "" {
			_ = s.RemoveSlice(id)
		}
		return nil, ReasonCDIWrite + ": " + err.Error(), nil
	}
	stmt := &agentv1.NodeStatement{
		NodeId: h.nodeID, BootId: h.machine.BootID(), AtMs: h.now().UnixMilli(),
		Body: &agentv1.NodeStatement_AllocationBound{AllocationBound: &agentv1.AllocationBound{
			AllocationId: id, GpuIndexes: a.GPUs, CdiDevices: []string{CDIKind + "=" + id}, Generation: a.Generation,
			CgroupParent: a.CgroupParent, Vcpus: a.VCPUs, MemoryBytes: a.MemoryBytes, Binding: a.Binding}},
	}
	env, err := pki.SignStatement(rand.Reader, h.key, stmt)
	if err != nil {
		return nil, "", err
	}
	if a.Statement, err = proto.Marshal(env.Proto()); err != nil {
		return nil, "", err
	}
	h.allocations[id] = a
	h.log.Info("converge.bound", "allocation_id", id, "gpus", fmt.Sprint(a.GPUs), "generation", a.Generation, "cgroup_parent", a.CgroupParent)
	return a, "", nil
}

// check returns why a hold cannot be bound, or "": a GPU bound to
// another allocation (used) or still claimed by a released one whose pods
// have not let go (claimed).
func check(h *agentv1.Hold, gpus int, used, claimed map[uint32]string) string {
	id := h.GetAllocationId()
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return fmt.Sprintf("%s: %q", ReasonInvalidAllocationID, id)
	}
	if len(h.GetGpuIndexes()) == 0 {
		return ReasonNoGPUs + ": the hold names no GPU"
	}
	seen := map[uint32]bool{}
	for _, g := range h.GetGpuIndexes() {
		if int(g) >= gpus {
			return fmt.Sprintf("%s: GPU %d (this node has %d)", ReasonGPUUnknown, g, gpus)
		}
		if seen[g] {
			return fmt.Sprintf("%s: GPU %d", ReasonGPURepeated, g)
		}
		seen[g] = true
		if other, ok := used[g]; ok {
			return fmt.Sprintf("%s: GPU %d is held by %s", ReasonGPUHeld, g, other)
		}
		if other, ok := claimed[g]; ok {
			return fmt.Sprintf("%s: GPU %d is still claimed by %s, whose pods have not let it go", ReasonGPUClaimed, g, other)
		}
	}
	return ""
}
