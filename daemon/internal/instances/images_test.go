// Tests of an instance's image and of the plan fields its host cannot
// apply: an image not in the store waits (ImageUnknown, retried), one in
// it boots through an overlay the plan names, one whose file does not
// hash to its digest fails (ImageInvalid), and a GPU the host lacks fails
// the instance (PlanUnsupported) rather than run it without.

package instances

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/images"
	"bcd/internal/proto/agentv1"
)

func TestAnInstanceBootsItsImageOnceTheStoreHasIt(t *testing.T) {
	g := newRig(t)
	store := images.New(filepath.Join(g.dir, "root", "var/lib/bcd/images"))
	g.r.cfg.Images = store
	data := []byte("a base disk")
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	w := vm("vm1", 2, 4)
	w.Image = digest
	res := g.pass(section(w))
	if st := g.status("vm1"); st.GetState() != StatePending || !strings.HasPrefix(st.GetMessage(), ReasonImageUnknown+": ") ||
		res.State != agentv1.SectionState_SECTION_STATE_PROGRESSING || res.RequeueAfter == 0 {
		t.Fatalf("%v %+v", st, res)
	}
	os.MkdirAll(store.Dir, 0o755)
	if err := os.WriteFile(store.Path(digest, "raw"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := g.pass(section(w)); res.State != agentv1.SectionState_SECTION_STATE_APPLIED || g.status("vm1").GetState() != StateRunning {
		t.Fatalf("%+v %v", res, g.status("vm1"))
	}
	plan, _ := os.ReadFile(g.rt.PlanPath("vm1"))
	for _, want := range []string{"overlays/vm1.qcow2", `<source file="` + store.Path(digest, "raw") + `">`, "seeds/vm1/cidata.img", `<serial>cidata</serial>`} {
		if !strings.Contains(string(plan), want) {
			t.Fatalf("the plan lacks %s:\n%s", want, plan)
		}
	}
	nc, _ := os.ReadFile(filepath.Join(g.rt.SeedsDir(), "vm1", "network-config"))
	if !strings.Contains(string(nc), "169.254.") {
		t.Fatalf("network-config %q", nc)
	}
	// The image's file changes: a new definition is refused for good.
	if err := os.WriteFile(store.Path(digest, "raw"), []byte("another disk!"), 0o644); err != nil {
		t.Fatal(err)
	}
	w2 := vm("vm2", 1, 1)
	w2.Image = digest
	res = g.pass(section(w, w2))
	if st := g.status("vm2"); st.GetState() != StateFailed || !strings.HasPrefix(st.GetMessage(), ReasonImageInvalid+": ") ||
		res.State != agentv1.SectionState_SECTION_STATE_FAILED {
		t.Fatalf("%v %+v", st, res)
	}
	// Deleted: the overlay goes with the instance.
	g.pass(section())
	if _, err := os.Stat(filepath.Join(g.rt.OverlaysDir(), "vm1.qcow2")); !os.IsNotExist(err) {
		t.Fatal("the overlay remains")
	}
}

func TestAGPUTheHostLacksFailsTheInstance(t *testing.T) {
	g := newRig(t)
	w := vm("vm1", 2, 4)
	w.GpuIndexes = []uint32{3}
	res := g.pass(section(w))
	st := g.status("vm1")
	if st.GetState() != StateFailed || st.GetMessage() != ReasonPlanUnsupported+": instance vm1: GPU 3: this host has no GPU 3 to pass through" ||
		res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonInstanceFailed {
		t.Fatalf("%v %+v", st, res)
	}
	if _, err := os.Stat(g.rt.PlanPath("vm1")); !os.IsNotExist(err) {
		t.Fatal("a plan was written without its GPU")
	}
	g.r.cfg.Capacity = func() (Capacity, error) {
		return Capacity{VCPUs: 32, MemoryBytes: 128 << 30, GPUs: []*agentv1.Gpu{{Index: 3, PciBusId: "00000000:3B:00.0"}}}, nil
	}
	if g.pass(section(w)); g.status("vm1").GetState() != StateRunning {
		t.Fatalf("%v", g.status("vm1"))
	}
	plan, _ := os.ReadFile(g.rt.PlanPath("vm1"))
	if !strings.Contains(string(plan), `<address domain="0x0000" bus="0x3b" slot="0x00" function="0x0">`) {
		t.Fatalf("the plan lacks the GPU:\n%s", plan)
	}
}
