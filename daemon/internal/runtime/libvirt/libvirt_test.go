// Tests of the host libvirt-kvm runtime against a fake helper: the
// operations it asks for, in order, a refusal turned into ErrInvalid with
// nothing left, the record and seed removed by Destroy, and a network
// policy sent with the taps and the definition (and again at each start).

package libvirt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bcd/internal/helper"
	"bcd/internal/runtime"
	"bcd/internal/runtime/hostfiles"
)

// fakeHelper answers like bcd helper with a libvirt that keeps states; it
// refuses GPUs as a host without them does, and keeps the last define.
type fakeHelper struct {
	ops     []string
	states  map[string]string
	defined helper.DomainArgs
	taps    helper.DomainArgs
	setmem  uint64
}

func (f *fakeHelper) call(_ context.Context, _ string, op string, args, result any) error {
	switch op {
	case helper.OpDomainSetMem:
		f.setmem = args.(helper.SetMemArgs).MemoryBytes
		return nil
	case helper.OpDomainStats:
		*result.(*helper.StatsResult) = *helper.ParseDomstats("cpu.time=2000000000\nballoon.current=524288\nballoon.available=400000\nballoon.unused=100000\n")
		return nil
	}
	a := args.(helper.DomainArgs)
	f.ops = append(f.ops, op+" "+a.ID)
	if op == helper.OpDomainDefine && len(a.GPUs) > 0 {
		return &helper.Refusal{Code: string(helper.CodePlan), Message: "instance-plan: GPU 0: no PCI device 0000:3b:00.0 on this host"}
	}
	for _, n := range a.NICs {
		if n.Bridge != "bcbr0" {
			return &helper.Refusal{Code: string(helper.CodeBridge), Message: fmt.Sprintf("instance-bridge: domain: bridge %q is not an instance network", n.Bridge)}
		}
	}
	switch op {
	case helper.OpChTaps:
		f.taps = a
	case helper.OpDomainDefine:
		f.states[a.ID], f.defined = "defined", a
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

func TestEveryPlanFieldGoesToTheHelperOrIsRefused(t *testing.T) {
	f := &fakeHelper{states: map[string]string{}}
	dir := t.TempDir()
	r := New(Options{Socket: "unused", StateDir: dir, Call: f.call})
	ctx := context.Background()
	d := &runtime.Domain{ID: "vm1", VCPUs: 1, MemoryBytes: 1 << 30, MemoryFloorBytes: 256 << 20, HugePageBytes: 0, Accelerator: runtime.AccelTCG,
		CPUs: &runtime.Pinning{Node: 0, HostCPUs: []uint32{1}}, NICs: []runtime.NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:01"}},
		Image: &runtime.Image{Digest: "sha256:" + strings.Repeat("ab", 32), Base: "/var/lib/bcd/images/x.raw", Format: "raw"},
		Seed:  runtime.Seed{MetaData: []byte("instance-id: vm1\n")}}
	if err := r.Define(ctx, d); err != nil {
		t.Fatal(err)
	}
	a := f.defined
	if a.CPUs == nil || a.MemoryFloorBytes != 256<<20 || a.Accelerator != "tcg" || a.Image == nil || a.Seed == nil ||
		a.NICs[0].Address == "" || !strings.Contains(a.Seed.NetworkConfig, a.NICs[0].Address+"/16") || a.Seed.MetaData != "instance-id: vm1\n" {
		t.Fatalf("the helper got %+v (seed %+v)", a, a.Seed)
	}
	if owner, _ := hostfiles.Addresses(dir).Owner(a.NICs[0].Address); owner != "vm1" {
		t.Fatalf("the address %s is %q's", a.NICs[0].Address, owner)
	}
	// The running guest: ballooned through domain.setmem, its usage from domain.stats.
	if err := r.SetBalloon(ctx, "vm1", 256<<20); err != nil || f.setmem != 256<<20 {
		t.Fatalf("%v %d", err, f.setmem)
	}
	if b, _ := r.Balloon(ctx, "vm1"); b != 512<<20 {
		t.Fatalf("balloon %d", b)
	}
	if u, _ := r.Usage(ctx, "vm1"); u.CPUTime != 2*time.Second || u.MemoryUsedBytes != 300000<<10 {
		t.Fatalf("usage %+v", u)
	}
	// A field the host cannot apply: unsupported, nothing left behind.
	gpu := &runtime.Domain{ID: "vm2", VCPUs: 1, MemoryBytes: 1 << 30, NICs: []runtime.NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:02"}},
		GPUs: []runtime.GPU{{Index: 0, Address: "0000:3b:00.0"}}}
	if err := r.Define(ctx, gpu); !errors.Is(err, runtime.ErrUnsupported) || !strings.Contains(err.Error(), "instance-plan") {
		t.Fatalf("%v", err)
	}
	if ids, _ := r.List(ctx); len(ids) != 1 {
		t.Fatalf("the refused domain is recorded: %v", ids)
	}
	if held, _ := os.ReadDir(filepath.Join(dir, "addresses")); len(held) != 1 {
		t.Fatalf("the refused domain holds an address: %v", held)
	}
}

func TestAPolicyGoesWithTheTapsAndTheDefinition(t *testing.T) {
	f := &fakeHelper{states: map[string]string{}}
	dir := t.TempDir()
	r := New(Options{Socket: "unused", StateDir: dir, Call: f.call})
	if !runtime.EnforcesPolicy(r) {
		t.Fatal("libvirt-kvm does not say it enforces policies")
	}
	ctx := context.Background()
	pol := &runtime.NetworkPolicy{Egress: []runtime.NetworkRule{{Protocol: "tcp", CIDR: "10.0.0.0/8", PortMin: 443, PortMax: 443}}}
	d := &runtime.Domain{ID: "vm1", VCPUs: 1, MemoryBytes: 1 << 30, NICs: []runtime.NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:01"}}, NetworkPolicy: pol}
	if err := r.Define(ctx, d); err != nil {
		t.Fatal(err)
	}
	if f.taps.NetworkPolicy != pol || f.defined.NetworkPolicy != pol || f.taps.NICs[0].Address == "" || f.defined.NICs[0].Tap != runtime.TapName("vm1", 0) {
		t.Fatalf("the helper got taps %+v, define %+v", f.taps, f.defined)
	}
	f.taps = helper.DomainArgs{}
	if err := r.Start(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if p := f.taps.NetworkPolicy; p == nil || len(p.Egress) != 1 || p.Egress[0] != pol.Egress[0] {
		t.Fatalf("the start's taps lack the policy: %+v", f.taps)
	}
	// A policy that does not parse is refused before the helper is asked.
	f.ops = nil
	bad := &runtime.Domain{ID: "vm2", VCPUs: 1, MemoryBytes: 1 << 30, NICs: []runtime.NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:02"}},
		NetworkPolicy: &runtime.NetworkPolicy{Egress: []runtime.NetworkRule{{Protocol: "tcp; flush ruleset", CIDR: "10.0.0.0/8", PortMin: 1, PortMax: 1}}}}
	if err := r.Define(ctx, bad); !errors.Is(err, runtime.ErrInvalid) || !strings.Contains(err.Error(), "network_policy: egress rule 0: protocol") || len(f.ops) != 0 {
		t.Fatalf("%v %v", err, f.ops)
	}
}
