// Tests of the host libvirt-kvm runtime against a fake helper: the
// operations it asks for, in order, a refusal turned into ErrInvalid with
// nothing left, and the record and seed removed by Destroy.

package libvirt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/helper"
	"bcd/internal/runtime"
)

// fakeHelper answers like bcd helper with a libvirt that keeps states.
type fakeHelper struct {
	ops    []string
	states map[string]string
}

func (f *fakeHelper) call(_ context.Context, _ string, op string, args, result any) error {
	a := args.(helper.DomainArgs)
	f.ops = append(f.ops, op+" "+a.ID)
	for _, n := range a.NICs {
		if n.Bridge != "bcbr0" {
			return &helper.Refusal{Code: string(helper.CodeBridge), Message: fmt.Sprintf("instance-bridge: domain: bridge %q is not an instance network", n.Bridge)}
		}
	}
	switch op {
	case helper.OpDomainDefine:
		f.states[a.ID] = "defined"
	case helper.OpDomainStart:
		f.states[a.ID] = "running"
	case helper.OpDomainDestroy:
		f.states[a.ID] = "defined"
	case helper.OpDomainUndefine:
		delete(f.states, a.ID)
	case helper.OpDomainState:
		st := f.states[a.ID]
		if st == "" {
			st = "absent"
		}
		result.(*helper.StateResult).State = st
	}
	return nil
}

func TestDomainsGoThroughTheHelper(t *testing.T) {
	f := &fakeHelper{states: map[string]string{}}
	dir := t.TempDir()
	r := New(Options{Socket: "unused", StateDir: dir, Call: f.call})
	ctx := context.Background()
	d := &runtime.Domain{ID: "vm1", VCPUs: 1, MemoryBytes: 1 << 30, NICs: []runtime.NIC{{Bridge: "bcbr0"}},
		Seed: runtime.Seed{UserData: []byte("#cloud-config\n"), MetaData: []byte("instance-id: vm1\n")}}
	if err := r.Define(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if st, fp, _ := r.Inspect(ctx, "vm1"); st != runtime.Running || fp != d.Fingerprint() {
		t.Fatalf("%s %s", st, fp)
	}
	if ids, _ := r.List(ctx); len(ids) != 1 || ids[0] != "vm1" {
		t.Fatalf("%v", ids)
	}
	if ud, _, err := r.Seed("vm1"); err != nil || string(ud) != "#cloud-config\n" {
		t.Fatalf("%q %v", ud, err)
	}
	if err := r.Destroy(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	want := "ch.taps vm1,domain.define vm1,ch.taps vm1,domain.start vm1,domain.state vm1,domain.state vm1,domain.destroy vm1,domain.undefine vm1,ch.taps.delete vm1"
	if got := strings.Join(f.ops, ","); got != want {
		t.Fatalf("ops:\n%s\nwant:\n%s", got, want)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "seeds")); len(entries) != 0 {
		t.Fatal("the seed remains")
	}
	bad := &runtime.Domain{ID: "vm2", VCPUs: 1, MemoryBytes: 1 << 30, NICs: []runtime.NIC{{Bridge: "br-mgmt"}}}
	if err := r.Define(ctx, bad); !errors.Is(err, runtime.ErrInvalid) || !strings.Contains(err.Error(), "not an instance network") {
		t.Fatalf("%v", err)
	}
	if ids, _ := r.List(ctx); len(ids) != 0 {
		t.Fatalf("a refused domain is recorded: %v", ids)
	}
	if _, err := os.Stat(filepath.Join(dir, "seeds", "vm2")); !os.IsNotExist(err) {
		t.Fatal("a refused domain left its seed")
	}
}
