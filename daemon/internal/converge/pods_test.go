// The fail-closed release of a Kubernetes hold whose pods keep its
// devices: not offered at once, still claimed (gpu-claimed), released
// once the pods let go, across a restart too.

package converge

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bcd/internal/fakehw"
	"bcd/internal/proto/agentv1"
)

func kubeHold(id string, gpus ...uint32) *agentv1.Hold {
	h := hold(id, gpus...)
	h.Binding = "kubernetes"
	return h
}

// released waits for a report that releases id.
func (r *rig) released(t *testing.T, id string) *agentv1.StatusReport {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, rel := range r.lastReport(t).GetReleased() {
			if rel.GetAllocationId() == id {
				return r.lastReport(t)
			}
		}
		select {
		case <-r.notify:
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s was never reported released", id)
	return nil
}

func TestAReleasedKubernetesHoldStaysClaimedUntilItsPodsLetGo(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, false, "")
	r.m.SetFaults(fakehw.Faults{KubePodRelease: 700 * time.Millisecond})
	if ok, err := r.c.Apply(desired(spec(1, kubeHold("alloc_k", 3), hold("alloc_p", 4)))); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	cdi := filepath.Join(r.m.CDIDir(), "bcd-alloc-alloc_k.json")
	if _, err := os.Stat(cdi); err != nil {
		t.Fatal(err)
	}
	// Released: not offered at once, not reported released, still claimed.
	if ok, _ := r.c.Apply(desired(spec(2, hold("alloc_p", 4)))); !ok {
		t.Fatal("generation 2 not applied")
	}
	for _, gone := range []string{cdi, filepath.Join(r.m.CDIDir(), "bcd-alloc-alloc_k.env")} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Fatalf("%s still offered", gone)
		}
	}
	rep := r.lastReport(t)
	if len(rep.GetReleased()) != 0 || len(rep.GetAllocations()) != 1 {
		t.Fatalf("report after the release: released %v, %d bound", rep.GetReleased(), len(rep.GetAllocations()))
	}
	st := r.c.Sections()[1]
	if st.GetSection() != SectionHolds || st.GetState() != agentv1.SectionState_SECTION_STATE_PROGRESSING || st.GetReason() != ReasonPodsReleasing {
		t.Fatalf("holds %v", st)
	}
	// A new hold on the claimed GPU fails; one beside it binds.
	if ok, _ := r.c.Apply(desired(spec(3, hold("alloc_p", 4), hold("alloc_n", 3), hold("alloc_o", 5)))); !ok {
		t.Fatal("generation 3 not applied")
	}
	rep = r.lastReport(t)
	if len(rep.GetFailed()) != 1 || !strings.HasPrefix(rep.GetFailed()[0].GetReason(), ReasonGPUClaimed+": GPU 3 is still claimed by alloc_k") {
		t.Fatalf("failed %v", rep.GetFailed())
	}
	// A restart keeps the claim and lets go at the same time.
	r.c.Stop()
	r.j.Close()
	r = newRig(t, dir, false, "")
	r.m.SetFaults(fakehw.Faults{KubePodRelease: 700 * time.Millisecond})
	if _, err := os.Stat(cdi); !os.IsNotExist(err) {
		t.Fatal("the restart offered the released hold again")
	}
	r.c.Start()
	r.released(t, "alloc_k")
	if ok, _ := r.c.Apply(desired(spec(4, hold("alloc_p", 4), hold("alloc_o", 5), hold("alloc_m", 3)))); !ok {
		t.Fatal("generation 4 not applied")
	}
	if rep := r.lastReport(t); len(rep.GetFailed()) != 0 || len(rep.GetAllocations()) != 3 {
		t.Fatalf("after the pods let go: failed %v, %d bound", rep.GetFailed(), len(rep.GetAllocations()))
	}
	if st := r.c.Sections()[1]; st.GetState() != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatalf("holds %v", st)
	}
}
