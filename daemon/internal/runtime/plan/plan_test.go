// Tests of the domain XML: the elements and their order, the checks, and
// (when virt-xml-validate is installed) libvirt's own schema, over these
// plans and FuzzPlan's seed corpus (fuzz_test.go).

package plan

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/runtime"
)

func domain() *runtime.Domain {
	d := &runtime.Domain{ID: "vm1", VCPUs: 2, MemoryBytes: 1 << 30,
		NICs:  []runtime.NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:01"}, {Bridge: "bcbr0"}},
		Disks: []runtime.Disk{{VolumeID: "data", Path: "/var/lib/bcd/volumes/data.raw", Serial: "data"}, {VolumeID: "ro", Path: "/var/lib/bcd/volumes/ro.raw", ReadOnly: true}}}
	return d.WithTaps()
}

func TestRenderHasEveryElement(t *testing.T) {
	data, err := Render(domain())
	if err != nil {
		t.Fatal(err)
	}
	xml := string(data)
	for _, want := range []string{
		`<domain type="kvm">`, `<name>bcd-vm1</name>`, `<memory unit="KiB">1048576</memory>`, `<vcpu placement="static">2</vcpu>`,
		`<entry name="serial">ds=nocloud;s=http://169.254.169.254/nocloud/</entry>`, `<smbios mode="sysinfo">`,
		`<source file="/var/lib/bcd/volumes/data.raw">`, `<target dev="vda" bus="virtio">`, `<serial>data</serial>`,
		`<target dev="vdb" bus="virtio">`, `<readonly>`, `<interface type="ethernet">`, `<mac address="52:54:00:00:00:01">`,
		`<target dev="` + runtime.TapName("vm1", 1) + `" managed="no">`, `<console type="pty">`,
	} {
		if !strings.Contains(xml, want) {
			t.Errorf("the XML lacks %s:\n%s", want, xml)
		}
	}
	again, _ := Render(domain())
	if string(again) != xml {
		t.Fatal("the XML is not stable")
	}
}

// placed is a pinned huge-page domain: vCPUs 0 and 1 on host CPUs 34 and
// 35 of NUMA node 1, its memory in 2 MiB pages.
func placed() *runtime.Domain {
	d := domain()
	d.CPUs = &runtime.Pinning{Node: 1, HostCPUs: []uint32{34, 35}}
	d.HugePageBytes = HugePage2Mi
	return d
}

func TestAPinnedHugePageDomainIsPlacedAndUnballooned(t *testing.T) {
	data, err := Render(placed())
	if err != nil {
		t.Fatal(err)
	}
	xml := string(data)
	for _, want := range []string{
		`<vcpu placement="static" cpuset="34,35">2</vcpu>`, `<vcpupin vcpu="0" cpuset="34"></vcpupin>`, `<vcpupin vcpu="1" cpuset="35"></vcpupin>`,
		`<memory mode="strict" nodeset="1"></memory>`, `<page size="2048" unit="KiB"></page>`, `<memballoon model="none"></memballoon>`,
	} {
		if !strings.Contains(xml, want) {
			t.Errorf("the XML lacks %s:\n%s", want, xml)
		}
	}
	if strings.Contains(xml, "<locked>") {
		t.Errorf("huge pages need no locked memory:\n%s", xml)
	}
	plain, _ := Render(domain())
	for _, absent := range []string{"cputune", "numatune", "memoryBacking", `model="none"`, "hostdev", "<kernel>", "backingStore", "<log "} {
		if strings.Contains(string(plain), absent) {
			t.Errorf("a floating domain has %s", absent)
		}
	}
}

// booted is a domain that boots: an image through its overlay, its seed
// disk, the host's kernel, its console log, a GPU, a balloon floor and a
// guest address, under TCG.
func booted() *runtime.Domain {
	d := domain()
	d.Accelerator = runtime.AccelTCG
	d.MemoryFloorBytes = 512 << 20
	d.NICs[0].Address = "169.254.10.2"
	d.GPUs = []runtime.GPU{{Index: 3, Address: "0000:3b:00.0"}}
	d.Image = &runtime.Image{Digest: "sha256:" + strings.Repeat("ab", 32), Base: "/var/lib/bcd/images/" + strings.Repeat("ab", 32) + ".raw", Format: FormatRaw}
	d.Local = runtime.Local{Overlay: "/var/lib/bcd-helper/overlays/bcd-vm1.qcow2", SeedDisk: "/var/lib/bcd-helper/seeds/bcd-vm1.img",
		ConsoleLog: "/var/lib/bcd-helper/consoles/bcd-vm1.log",
		Kernel:     &runtime.DirectBoot{Kernel: "/boot/vmlinux", Initrd: "/boot/initrd.gz", Cmdline: "console=ttyS0 root=/dev/vda rw"}}
	return d
}

func TestABootingDomainHasItsDisksKernelAndDevices(t *testing.T) {
	d := booted()
	if err := Check(d, []string{"bcbr0"}); err != nil {
		t.Fatal(err)
	}
	data, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	xml := string(data)
	for _, want := range []string{
		`<domain type="qemu">`, `<kernel>/boot/vmlinux</kernel>`, `<initrd>/boot/initrd.gz</initrd>`, `<cmdline>console=ttyS0 root=/dev/vda rw</cmdline>`,
		`<driver name="qemu" type="qcow2">`, `<source file="/var/lib/bcd-helper/overlays/bcd-vm1.qcow2">`,
		`<backingStore type="file">`, `<format type="raw">`, `<source file="/var/lib/bcd/images/` + strings.Repeat("ab", 32) + `.raw">`, `<backingStore></backingStore>`,
		`<serial>cidata</serial>`,
		`<hostdev mode="subsystem" type="pci" managed="yes">`, `<address domain="0x0000" bus="0x3b" slot="0x00" function="0x0">`,
		`<log file="/var/lib/bcd-helper/consoles/bcd-vm1.log" append="off">`, `<stats period="5">`, `<rom enabled="no">`,
	} {
		if !strings.Contains(xml, want) {
			t.Errorf("the XML lacks %s:\n%s", want, xml)
		}
	}
	// The boot disk is vda, the volumes follow, the seed disk is last.
	order := []string{"overlays/bcd-vm1.qcow2", `dev="vda"`, "volumes/data.raw", `dev="vdb"`, "volumes/ro.raw", `dev="vdc"`, "seeds/bcd-vm1.img", `dev="vdd"`}
	for i := 1; i < len(order); i++ {
		if strings.Index(xml, order[i-1]) > strings.Index(xml, order[i]) {
			t.Errorf("%s comes after %s:\n%s", order[i-1], order[i], xml)
		}
	}
	if strings.Contains(xml, "host-passthrough") {
		t.Errorf("a TCG domain passes the host CPU through:\n%s", xml)
	}
}

func TestCheckRefusesWhatLibvirtWould(t *testing.T) {
	bridges := []string{"bcbr0"}
	if err := Check(booted(), bridges); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*runtime.Domain){
		"zero vCPUs":    func(d *runtime.Domain) { d.VCPUs = 0 },
		"no memory":     func(d *runtime.Domain) { d.MemoryBytes = 4096 },
		"bad id":        func(d *runtime.Domain) { d.ID = "../etc" },
		"bad MAC":       func(d *runtime.Domain) { d.NICs[0].MAC = "01:00:00:00:00:01" },
		"mgmt bridge":   func(d *runtime.Domain) { d.NICs[1].Bridge = "br-mgmt" },
		"pins":          func(d *runtime.Domain) { d.CPUs = &runtime.Pinning{HostCPUs: []uint32{3}} },
		"pin twice":     func(d *runtime.Domain) { d.CPUs = &runtime.Pinning{HostCPUs: []uint32{3, 3}} },
		"page size":     func(d *runtime.Domain) { d.HugePageBytes = 4096 },
		"page count":    func(d *runtime.Domain) { d.HugePageBytes, d.MemoryBytes = HugePage1Gi, 3<<29 },
		"another's tap": func(d *runtime.Domain) { d.NICs[0].Tap = runtime.TapName("vm2", 0) },
		"no disk path":  func(d *runtime.Domain) { d.Disks[0].Path = "" },
		"a .. element":  func(d *runtime.Domain) { d.Disks[0].Path = "/var/lib/bcd/volumes/../../../etc/shadow" },
		"unclean":       func(d *runtime.Domain) { d.Disks[0].Path = "/var/lib/bcd/volumes//data.raw" },
		// encoding/xml would write U+FFFD: the XML would name another file.
		"a control character": func(d *runtime.Domain) { d.Disks[0].Path = "/var/lib/bcd/volumes/a\x01.raw" },
		"a non-character":     func(d *runtime.Domain) { d.Disks[0].Path = "/var/lib/bcd/volumes/a\uffff.raw" },
		"not UTF-8":           func(d *runtime.Domain) { d.Disks[0].Path = "/var/lib/bcd/volumes/a\xff.raw" },
		"accelerator":         func(d *runtime.Domain) { d.Accelerator = "hvf" },
		"floor at memory":     func(d *runtime.Domain) { d.MemoryFloorBytes = d.MemoryBytes },
		"floor of pages":      func(d *runtime.Domain) { d.HugePageBytes = HugePage2Mi },
		"GPU address":         func(d *runtime.Domain) { d.GPUs[0].Address = "3b:00.0" },
		"GPU twice":           func(d *runtime.Domain) { d.GPUs = append(d.GPUs, d.GPUs[0]) },
		"image digest":        func(d *runtime.Domain) { d.Image.Digest = "sha256:AB" },
		"image format":        func(d *runtime.Domain) { d.Image.Format = "vmdk" },
		"image path":          func(d *runtime.Domain) { d.Image.Base = "/var/lib/bcd/images/../x.raw" },
		"no overlay":          func(d *runtime.Domain) { d.Local.Overlay = "" },
		"overlay, no image":   func(d *runtime.Domain) { d.Image = nil },
		"metadata address":    func(d *runtime.Domain) { d.NICs[0].Address = MetadataAddress },
		"outside link-local":  func(d *runtime.Domain) { d.NICs[0].Address = "10.0.0.2" },
		"first /24":           func(d *runtime.Domain) { d.NICs[0].Address = "169.254.0.9" },
		"address, no MAC":     func(d *runtime.Domain) { d.NICs[1].Address = "169.254.10.3" },
		"address twice":       func(d *runtime.Domain) { d.NICs[1].MAC, d.NICs[1].Address = "52:54:00:00:00:02", "169.254.10.2" },
		"console log path":    func(d *runtime.Domain) { d.Local.ConsoleLog = "relative/../x" },
		"cmdline newline":     func(d *runtime.Domain) { d.Local.Kernel.Cmdline = "quiet\ninit=/bin/sh" },
		"too many disks": func(d *runtime.Domain) {
			for len(d.Disks) < MaxDisks-1 {
				d.Disks = append(d.Disks, runtime.Disk{Path: "/var/lib/bcd/volumes/x.raw"})
			}
		},
	} {
		d := booted()
		edit(d)
		if err := Check(d, bridges); !errors.Is(err, runtime.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	d := booted()
	d.NICs[1].Bridge = "br-mgmt"
	if err := Check(d, bridges); !strings.Contains(err.Error(), `domain: bridge "br-mgmt" is not an instance network`) {
		t.Fatalf("%v", err)
	}
}

func TestCheckDisksTakesOnlyFilesDirectlyUnderTheDirectories(t *testing.T) {
	dirs := []string{"/var/lib/bcd/volumes", "relative/volumes"}
	for path, want := range map[string]bool{
		"/var/lib/bcd/volumes/data.raw":                    true,
		"/var/lib/bcd/volumes":                             false,
		"/var/lib/bcd/volumes/sub/data.raw":                false,
		"/var/lib/bcd/volumes/../volumes/data.raw":         false,
		"/var/lib/bcd/volumes-other/data.raw":              false,
		"/var/lib/bcd/data.raw":                            false,
		"relative/volumes/data.raw":                        false,
		"/var/lib/bcd/volumes/.":                           false,
		"/var/lib/bcd/volumes/..data.raw":                  true,
		"/var/lib/bcd/volumes/" + strings.Repeat("x", 300): true,
	} {
		d := domain()
		d.Disks = []runtime.Disk{{Path: path}}
		if got := CheckDisks(d, dirs) == nil; got != want {
			t.Errorf("%q: accepted %v, want %v", path, got, want)
		}
		if got := DiskUnder(path, dirs); got != want {
			t.Errorf("DiskUnder(%q) = %v, want %v", path, got, want)
		}
	}
	if err := CheckDisks(domain(), dirs); err != nil {
		t.Fatal(err)
	}
}

// TestLibvirtSchemaAcceptsThePlan runs virt-xml-validate (Debian's
// libvirt-clients) over the plans here and every plan of FuzzPlan's seed
// corpus that Check accepts; without it the test is skipped, and fails
// under CI=true.
func TestLibvirtSchemaAcceptsThePlan(t *testing.T) {
	validate, err := exec.LookPath("virt-xml-validate")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("virt-xml-validate is not installed (libvirt-clients), and CI=true")
		}
		t.Skip("virt-xml-validate is not installed (libvirt-clients)")
	}
	plans := []*runtime.Domain{domain(), placed(), booted(), {ID: "bare", VCPUs: 1, MemoryBytes: 1 << 28}}
	seeds, err := seedCorpus(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		if d, ok := accepted(seed); ok {
			plans = append(plans, d)
		}
	}
	if len(plans) < 4+len(seedDomains()) {
		t.Fatalf("%d plans: the seeds must be accepted", len(plans))
	}
	for i, d := range plans {
		data, err := Render(d)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), fmt.Sprintf("%d-%s.xml", i, d.ID))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(validate, path, "domain").CombinedOutput(); err != nil {
			t.Fatalf("virt-xml-validate refuses the plan: %v\n%s\n%s", err, out, data)
		}
	}
}
