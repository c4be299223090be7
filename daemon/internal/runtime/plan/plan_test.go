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
		`<memory mode="strict" nodeset="1"></memory>`, `<page size="2048" unit="KiB"></page>`, `<locked></locked>`, `<memballoon model="none"></memballoon>`,
	} {
		if !strings.Contains(xml, want) {
			t.Errorf("the XML lacks %s:\n%s", want, xml)
		}
	}
	plain, _ := Render(domain())
	for _, absent := range []string{"cputune", "numatune", "memoryBacking", `model="none"`} {
		if strings.Contains(string(plain), absent) {
			t.Errorf("a floating domain has %s", absent)
		}
	}
}

func TestCheckRefusesWhatLibvirtWould(t *testing.T) {
	bridges := []string{"bcbr0"}
	if err := Check(domain(), bridges); err != nil {
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
	} {
		d := domain()
		edit(d)
		if err := Check(d, bridges); !errors.Is(err, runtime.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	d := domain()
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
	plans := []*runtime.Domain{domain(), placed(), {ID: "bare", VCPUs: 1, MemoryBytes: 1 << 28}}
	seeds, err := seedCorpus(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		if d, ok := accepted(seed); ok {
			plans = append(plans, d)
		}
	}
	if len(plans) < 3+len(seedDomains()) {
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
