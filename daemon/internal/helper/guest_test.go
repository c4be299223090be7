// Tests of what the helper makes and checks for a guest, against fake
// programs: the base image bound read-only and an overlay of root's over
// it (kept across a redefinition over the same image), the seed disk, the
// direct-boot kernel, the host checks of a plan (instance-plan), the
// balloon held between its floor and its memory, domstats read, and a
// tap guarded on the instance network (nft, route, neighbour).

package helper

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/runtime"
)

// booting is vm1 booting the image at base, with its seed.
func booting(base string) DomainArgs {
	return DomainArgs{ID: "vm1", VCPUs: 1, MemoryBytes: 1 << 30, MemoryFloorBytes: 256 << 20, Accelerator: runtime.AccelTCG,
		NICs:  []NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:01", Tap: TapName("vm1", 0), Address: "169.254.10.2"}},
		Image: &runtime.Image{Digest: "sha256:" + strings.Repeat("ab", 32), Base: base, Format: "raw"},
		Seed:  &SeedArgs{MetaData: "instance-id: vm1\n", NetworkConfig: "version: 2\n"}}
}

func TestADomainBootsItsImageThroughAnOverlayOfRoots(t *testing.T) {
	r := newRig(t, nil)
	base := writeVolume(t, r.images, strings.Repeat("ab", 32)+".raw")
	vm := booting(base)
	if err := Call(context.Background(), r.socket, OpDomainDefine, vm, nil); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(r.dir, "state")
	bound, overlay, seed := filepath.Join(state, "disks", "bcd-vm1", "base"), filepath.Join(state, "overlays", "bcd-vm1.qcow2"), filepath.Join(state, "seeds", "bcd-vm1.img")
	if got := r.binder.binds(); got[bound] != inode(t, base) || !r.binder.readOnly[bound] {
		t.Fatalf("binds %v (read-only %v), want %s read-only at %s", got, r.binder.readOnly, base, bound)
	}
	calls := r.callLog(t)
	for _, want := range []string{
		"qemu-img create -q -f qcow2 -F raw -b " + bound + " " + overlay, "mkfs.vfat -n CIDATA -C ",
		"/meta-data ::meta-data", "/network-config ::network-config", "virsh define ",
	} {
		if !strings.Contains(calls, want) {
			t.Fatalf("the calls lack %q:\n%s", want, calls)
		}
	}
	xml, _ := os.ReadFile(filepath.Join(state, "domains", "bcd-vm1.xml"))
	for _, want := range []string{`<domain type="qemu">`, `<source file="` + overlay + `">`, `<source file="` + bound + `">`,
		`<source file="` + seed + `">`, `<kernel>/boot/vmlinux</kernel>`, `<cmdline>console=ttyS0 root=/dev/vda rw</cmdline>`,
		`<log file="` + filepath.Join(state, "consoles", "bcd-vm1.log") + `" append="off">`} {
		if !strings.Contains(string(xml), want) {
			t.Fatalf("the XML lacks %s:\n%s", want, xml)
		}
	}
	if strings.Contains(string(xml), base) {
		t.Fatalf("the XML names the node's base:\n%s", xml)
	}
	// Defined again over the same image: the guest's overlay is kept.
	os.Remove(r.calls)
	if err := Call(context.Background(), r.socket, OpDomainDefine, vm, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.callLog(t), "qemu-img") {
		t.Fatalf("the overlay was made again:\n%s", r.callLog(t))
	}
	// A base outside [helper] image_dirs, or a link, is refused before anything runs.
	os.Remove(r.calls)
	outside := booting(writeVolume(t, r.vols, "base.raw"))
	wantRefused(t, Call(context.Background(), r.socket, OpDomainDefine, outside, nil), string(CodeArgs))
	link := filepath.Join(r.images, strings.Repeat("cd", 32)+".raw")
	os.Symlink("/etc/shadow", link)
	wantRefused(t, Call(context.Background(), r.socket, OpDomainDefine, booting(link), nil), string(CodeDisk))
	if r.callLog(t) != "" {
		t.Fatalf("programs ran for refused domains:\n%s", r.callLog(t))
	}
	// Undefined: the overlay, its stamp, the seed disk and the binds go.
	if err := Call(context.Background(), r.socket, OpDomainUndefine, DomainArgs{ID: "vm1"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{overlay, overlay[:len(overlay)-len(".qcow2")] + ".digest", seed, bound} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s remains", p)
		}
	}
}

func TestAFieldTheHostCannotApplyIsRefused(t *testing.T) {
	r := newRig(t, nil)
	write := func(rel, content string) {
		path := filepath.Join(r.sys, rel)
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/system/node/node0/cpulist", "0-1\n")
	write("devices/system/cpu/cpu1/online", "1\n")
	write("kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0\n")
	write("bus/pci/devices/0000:3b:00.0/class", "0x030200\n")
	write("bus/pci/devices/0000:19:00.0/class", "0x020700\n")
	vm := DomainArgs{ID: "vm1", VCPUs: 1, MemoryBytes: 1 << 30}
	for name, c := range map[string]struct {
		edit func(*DomainArgs)
		want string
	}{
		"a NUMA node it lacks": {func(a *DomainArgs) { a.CPUs = &runtime.Pinning{Node: 1, HostCPUs: []uint32{1}} }, "NUMA node 1"},
		"a CPU it lacks":       {func(a *DomainArgs) { a.CPUs = &runtime.Pinning{Node: 0, HostCPUs: []uint32{7}} }, "host CPU 7"},
		"no huge pages":        {func(a *DomainArgs) { a.HugePageBytes = 2 << 20 }, "reserved none"},
		"a NIC, not a GPU":     {func(a *DomainArgs) { a.GPUs = []runtime.GPU{{Index: 0, Address: "0000:19:00.0"}} }, "not a display controller"},
		"no IOMMU group":       {func(a *DomainArgs) { a.GPUs = []runtime.GPU{{Index: 0, Address: "0000:3b:00.0"}} }, "no IOMMU group"},
		"no such device":       {func(a *DomainArgs) { a.GPUs = []runtime.GPU{{Index: 0, Address: "0000:99:00.0"}} }, "no PCI device"},
	} {
		a := vm
		c.edit(&a)
		err := Call(context.Background(), r.socket, OpDomainDefine, a, nil)
		wantRefused(t, err, string(CodePlan))
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if r.callLog(t) != "" {
		t.Fatalf("programs ran for refused domains:\n%s", r.callLog(t))
	}
	// What the host has is taken.
	os.MkdirAll(filepath.Join(r.sys, "kernel/iommu_groups/7"), 0o755)
	os.Symlink(filepath.Join(r.sys, "kernel/iommu_groups/7"), filepath.Join(r.sys, "bus/pci/devices/0000:3b:00.0/iommu_group"))
	a := vm
	a.CPUs = &runtime.Pinning{Node: 0, HostCPUs: []uint32{1}}
	a.GPUs = []runtime.GPU{{Index: 0, Address: "0000:3b:00.0"}}
	if err := Call(context.Background(), r.socket, OpDomainDefine, a, nil); err != nil {
		t.Fatal(err)
	}
}

func TestTheBalloonStaysBetweenItsFloorAndItsMemory(t *testing.T) {
	r := newRig(t, nil)
	vm := DomainArgs{ID: "vm1", VCPUs: 1, MemoryBytes: 1 << 30, MemoryFloorBytes: 256 << 20}
	if err := Call(context.Background(), r.socket, OpDomainDefine, vm, nil); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, Call(context.Background(), r.socket, OpDomainSetMem, SetMemArgs{ID: "vm1", MemoryBytes: 128 << 20}, nil), string(CodePlan))
	wantRefused(t, Call(context.Background(), r.socket, OpDomainSetMem, SetMemArgs{ID: "vm1", MemoryBytes: 2 << 30}, nil), string(CodePlan))
	if err := Call(context.Background(), r.socket, OpDomainSetMem, SetMemArgs{ID: "vm1", MemoryBytes: 256 << 20}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.callLog(t), "virsh setmem bcd-vm1 262144 --live\n") {
		t.Fatalf("virsh calls:\n%s", r.callLog(t))
	}
	wantRefused(t, Call(context.Background(), r.socket, OpDomainSetMem, SetMemArgs{ID: "vm2", MemoryBytes: 256 << 20}, nil), string(CodePlan))
	got := ParseDomstats("Domain: 'bcd-vm1'\n  cpu.time=3852590000\n  balloon.current=262144\n  balloon.maximum=1048576\n" +
		"  balloon.unused=178920\n  balloon.available=210736\n  balloon.rss=177196\n  net.count=1\n  net.0.name=tap1\n  net.0.rx.bytes=946\n" +
		"  net.0.tx.bytes=516\n  block.count=2\n  block.0.rd.bytes=1990656\n  block.1.rd.bytes=4096\n  block.0.wr.bytes=512\n  block.0.rd.reqs=43\n")
	want := StatsResult{CPUTimeNs: 3852590000, BalloonCurrentBytes: 256 << 20, BalloonMaximumBytes: 1 << 30, UnusedBytes: 178920 << 10,
		AvailableBytes: 210736 << 10, RSSBytes: 177196 << 10, DiskReadBytes: 1994752, DiskWriteBytes: 512, NetRxBytes: 946, NetTxBytes: 516}
	if *got != want {
		t.Fatalf("%+v\nwant %+v", *got, want)
	}
}

func TestATapIsGuardedOnTheInstanceNetwork(t *testing.T) {
	r := newRig(t, nil)
	nic := NIC{Bridge: "bcbr0", MAC: "52:54:00:00:00:01", Address: "169.254.10.2"}
	if err := Call(context.Background(), r.socket, OpChTaps, DomainArgs{ID: "vm1", NICs: []NIC{nic}}, nil); err != nil {
		t.Fatal(err)
	}
	tap := TapName("vm1", 0)
	for _, want := range []string{"nft -f ", "ip route replace 169.254.10.2/32 dev bcbr0",
		"ip neigh replace 169.254.10.2 lladdr 52:54:00:00:00:01 dev bcbr0 nud permanent"} {
		if !strings.Contains(r.callLog(t), want) {
			t.Fatalf("calls lack %q:\n%s", want, r.callLog(t))
		}
	}
	script := guardScript(tap, nic.MAC, nic.Address, nil)
	for _, want := range []string{"table bridge bcd_" + tap, "ether saddr != 52:54:00:00:00:01 drop",
		"ip saddr != 169.254.10.2 ip saddr 169.254.0.0/16 drop", "arp saddr ip != 169.254.10.2 arp saddr ip 169.254.0.0/16 drop",
		`iifname "` + tap + `" jump guard`} {
		if !strings.Contains(script, want) {
			t.Fatalf("the guard lacks %q:\n%s", want, script)
		}
	}
	// Another instance may not take the address; a bad one is refused.
	wantRefused(t, Call(context.Background(), r.socket, OpChTaps, DomainArgs{ID: "vm2", NICs: []NIC{nic}}, nil), string(CodeArgs))
	bad := nic
	bad.Address = "169.254.169.254"
	wantRefused(t, Call(context.Background(), r.socket, OpChTaps, DomainArgs{ID: "vm3", NICs: []NIC{bad}}, nil), string(CodeArgs))
	os.Remove(r.calls)
	// The fake ip fails "link delete": the taps go before their guards, so
	// a failed deletion keeps the guard recorded for the retry.
	wantRefused(t, Call(context.Background(), r.socket, OpChTapsDelete, DomainArgs{ID: "vm1"}, nil), string(CodeCommand))
	if _, err := os.Stat(filepath.Join(r.dir, "state", "taps", tap+".json")); err != nil {
		t.Fatal("a failed deletion dropped the guard's record")
	}
}
