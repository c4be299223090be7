// The fail-closed release of a Kubernetes hold (docs/protocol.md,
// "Reservations (holds)"): a machine whose pods keep a released hold's
// devices a while (machine.PodRelease; fakehw's
// BCD_FAKEHW_KUBE_POD_RELEASE_MS) has bcd stop offering them at once (the
// CDI spec and env file removed), keep them claimed (a new hold on them
// fails gpu-claimed) and report AllocationReleased only once the pods let
// go. Meanwhile the section is PROGRESSING "PodsReleasing", passed again
// when the first of them is due; the claim is in the journal, so a
// restart keeps it.

package converge

import (
	"fmt"
	"sort"
	"time"

	"bcd/internal/machine"
	"bcd/internal/proto/agentv1"
)

// ReasonPodsReleasing is the holds section waiting for pods to let go of
// a released Kubernetes hold's devices.
const ReasonPodsReleasing = "PodsReleasing"

// podRelease is how long the pods keep a's devices once it is released
// (0: a hold that is not Kubernetes', or a machine without pods).
func (h *holdsReconciler) podRelease(a *Allocation) time.Duration {
	p, ok := h.machine.(machine.PodRelease)
	if !ok || a.Binding != "kubernetes" {
		return 0
	}
	return p.PodReleaseDelay()
}

// releasingLocked are the released holds whose pods still keep their
// devices, by id. The caller holds h.mu.
func (h *holdsReconciler) releasingLocked() []*Allocation {
	var out []*Allocation
	for _, a := range h.allocations {
		if a.ReleaseAtMs > 0 {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// awaitPodsLocked makes an APPLIED res PROGRESSING "PodsReleasing" while
// pods keep released holds' devices, with a re-pass when the first is
// due. The caller holds h.mu.
func (h *holdsReconciler) awaitPodsLocked(res *Result) {
	releasing := h.releasingLocked()
	if len(releasing) == 0 {
		return
	}
	first := releasing[0].ReleaseAtMs
	var ids []string
	for _, a := range releasing {
		first = min(first, a.ReleaseAtMs)
		ids = append(ids, a.ID)
	}
	if res.State == agentv1.SectionState_SECTION_STATE_APPLIED {
		res.State, res.Reason = agentv1.SectionState_SECTION_STATE_PROGRESSING, ReasonPodsReleasing
	}
	res.Message += fmt.Sprintf("; %d released hold(s) still claimed until their pods let go: %v", len(ids), ids)
	res.RequeueAfter = max(time.Duration(first-h.now().UnixMilli())*time.Millisecond, time.Millisecond)
}

// Waiting says whether released holds wait for their pods (Waiter): a
// restart passes the section again, whatever its status.
func (h *holdsReconciler) Waiting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.releasingLocked()) > 0
}
