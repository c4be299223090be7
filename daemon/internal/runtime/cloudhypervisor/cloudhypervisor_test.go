// Tests of the cloud-hypervisor runtime with a stand-in binary (a shell
// loop, so its command line stays its own): the command line, start as a
// process of its own session, stop, and destroy with its taps; a network
// policy sent with the taps, and the helper's refusal of one turned into
// ErrUnsupported or ErrInvalid.

package cloudhypervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"bcd/internal/helper"
	"bcd/internal/runtime"
)

func TestDomainsAreCloudHypervisorProcesses(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "cloud-hypervisor")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var ops []string
	call := func(_ context.Context, _ string, op string, args, _ any) error {
		ops = append(ops, op+" "+args.(helper.DomainArgs).ID)
		return nil
	}
	r := New(Options{Socket: "unused", StateDir: filepath.Join(dir, "state"), Binary: bin, Firmware: "/fw", Call: call})
	ctx := context.Background()
	d := &runtime.Domain{ID: "vm1", VCPUs: 2, MemoryBytes: 2 << 30, NICs: []runtime.NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:01"}},
		Disks: []runtime.Disk{{Path: "/v/data.raw", Serial: "data", ReadOnly: true}}}
	if err := r.Define(ctx, d); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(r.Args(d), " ")
	for _, want := range []string{"--cpus boot=2", "--memory size=2048M", "--kernel /fw", "--disk path=/v/data.raw,readonly=on,serial=data",
		"--net tap=" + runtime.TapName("vm1", 0) + ",mac=52:54:00:00:00:01", "serial_number=ds=nocloud;s=http://169.254.169.254/nocloud/"} {
		if !strings.Contains(args, want) {
			t.Fatalf("the command line lacks %q: %s", want, args)
		}
	}
	if st, _, _ := r.Inspect(ctx, "vm1"); st != runtime.Defined {
		t.Fatalf("defined: %s", st)
	}
	if err := r.Start(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background(), "vm1") })
	if st, _, _ := r.Inspect(ctx, "vm1"); st != runtime.Running {
		t.Fatalf("started: %s", st)
	}
	if err := r.Stop(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := r.Inspect(ctx, "vm1"); st != runtime.Defined {
		t.Fatalf("stopped: %s", st)
	}
	if err := r.Destroy(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := r.Inspect(ctx, "vm1"); st != runtime.Absent {
		t.Fatalf("destroyed: %s", st)
	}
	if !slices.Equal(ops, []string{"ch.taps vm1", "ch.taps vm1", "ch.taps.delete vm1"}) {
		t.Fatalf("ops %v", ops)
	}
}

func TestWhatItDoesNotCarryIsRefusedAndAHostWithoutItLacksIt(t *testing.T) {
	dir := t.TempDir()
	r := New(Options{Socket: "unused", StateDir: dir, Binary: "/nowhere/cloud-hypervisor", Call: func(context.Context, string, string, any, any) error {
		t.Fatal("the helper was asked for a refused domain")
		return nil
	}})
	base := func() *runtime.Domain { return &runtime.Domain{ID: "vm1", VCPUs: 1, MemoryBytes: 1 << 30} }
	for name, edit := range map[string]func(*runtime.Domain){
		"pinning":    func(d *runtime.Domain) { d.CPUs = &runtime.Pinning{HostCPUs: []uint32{1}} },
		"huge pages": func(d *runtime.Domain) { d.HugePageBytes = 2 << 20 },
		"a floor":    func(d *runtime.Domain) { d.MemoryFloorBytes = 512 << 20 },
		"a GPU":      func(d *runtime.Domain) { d.GPUs = []runtime.GPU{{Index: 0, Address: "0000:3b:00.0"}} },
		"tcg":        func(d *runtime.Domain) { d.Accelerator = runtime.AccelTCG },
	} {
		d := base()
		edit(d)
		if err := r.Define(context.Background(), d); !errors.Is(err, runtime.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	if ids, _ := r.List(context.Background()); len(ids) != 0 {
		t.Fatalf("refused domains are recorded: %v", ids)
	}
	if ok, why := Available("/nowhere/cloud-hypervisor", runtime.AccelKVM); ok || !strings.Contains(why, "no /nowhere/cloud-hypervisor binary") {
		t.Fatalf("%v %q", ok, why)
	}
	if ok, why := Available("/bin/sh", runtime.AccelTCG); ok || !strings.Contains(why, "tcg") {
		t.Fatalf("%v %q", ok, why)
	}
}

func TestAPolicyGoesWithTheTaps(t *testing.T) {
	var got []helper.DomainArgs
	refuse := ""
	call := func(_ context.Context, _ string, op string, args, _ any) error {
		if op == helper.OpChTaps {
			got = append(got, args.(helper.DomainArgs))
		}
		if refuse != "" {
			return &helper.Refusal{Code: refuse, Message: refuse + ": no"}
		}
		return nil
	}
	dir := t.TempDir()
	r := New(Options{Socket: "unused", StateDir: dir, Binary: "/bin/sh", Call: call})
	if !runtime.EnforcesPolicy(r) {
		t.Fatal("cloud-hypervisor does not say it enforces policies")
	}
	pol := &runtime.NetworkPolicy{Ingress: []runtime.NetworkRule{{Protocol: "icmp", CIDR: "0.0.0.0/0"}}}
	d := &runtime.Domain{ID: "vm1", VCPUs: 1, MemoryBytes: 1 << 30, NICs: []runtime.NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:01"}}, NetworkPolicy: pol}
	if err := r.Define(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].NetworkPolicy != pol || got[0].NICs[0].Address == "" {
		t.Fatalf("the helper got %+v", got)
	}
	for code, want := range map[string]error{string(helper.CodePlan): runtime.ErrUnsupported, string(helper.CodeArgs): runtime.ErrInvalid} {
		refuse = code
		if err := r.Define(context.Background(), d); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", code, err, want)
		}
	}
	refuse = ""
	bad := &runtime.Domain{ID: "vm2", VCPUs: 1, MemoryBytes: 1 << 30, NetworkPolicy: &runtime.NetworkPolicy{Egress: []runtime.NetworkRule{{Protocol: "udp", CIDR: "::/0", PortMin: 53, PortMax: 53}}}}
	if err := r.Define(context.Background(), bad); !errors.Is(err, runtime.ErrInvalid) || !strings.Contains(err.Error(), "egress rule 0") {
		t.Fatalf("a policy that does not parse, without NICs: %v", err)
	}
}
