// Native fuzz target of the domain plan: a runtime.Domain (its JSON) that
// Check, CheckDisks and CheckImage accept renders, the same bytes every
// time, to well-formed XML (read back token by token, strictly, and into
// the elements it is made of) that says exactly what was checked: its
// type, name, memory, vCPUs and pins, the boot disk (its overlay, and its
// base directly under the image directories, ending the chain), each
// volume's source (directly under the allowed directories, no ".."
// element), device, serial and read-only flag, the seed disk (read-only,
// last), each NIC's bridge (an allowed one), MAC and tap (the instance's
// own), each GPU's PCI address, and no file attribute anywhere but the
// disks' and the console log's. A domain refused is refused with
// runtime.ErrInvalid. The seed corpus is also what
// TestLibvirtSchemaAcceptsThePlan validates with virt-xml-validate.

package plan

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"bcd/internal/runtime"
)

// What the fuzzed plans may name.
var (
	fuzzBridges   = []string{"bcbr0", "bcbr1"}
	fuzzDirs      = []string{"/var/lib/bcd/volumes", "/srv/bcd volumes"}
	fuzzImageDirs = []string{"/var/lib/bcd/images"}
)

// seedDomains are the seed corpus: the plans of plan_test.go and the
// edges (every disk and NIC a domain may have, 1 GiB pages, a directory
// with a space, NICs on bridges without taps).
func seedDomains() []*runtime.Domain {
	big := &runtime.Domain{ID: "big-0", VCPUs: 4, MemoryBytes: 4 << 30, HugePageBytes: HugePage1Gi,
		CPUs: &runtime.Pinning{Node: 0, HostCPUs: []uint32{7, 1, 3, 5}}}
	for i := range MaxDisks {
		big.Disks = append(big.Disks, runtime.Disk{Path: fmt.Sprintf("/srv/bcd volumes/d%02d.raw", i), Serial: "A_b.c+d-" + strconv.Itoa(i), ReadOnly: i%2 == 1})
	}
	for i := range MaxNICs {
		big.NICs = append(big.NICs, runtime.NIC{Bridge: fuzzBridges[i%2], MAC: fmt.Sprintf("52:54:00:00:00:%02x", i)})
	}
	big.WithTaps()
	bridged := &runtime.Domain{ID: "bridged", VCPUs: 1, MemoryBytes: MinMemory, NICs: []runtime.NIC{{Bridge: "bcbr1"}, {Bridge: "bcbr0", MAC: "02:00:00:00:00:01"}},
		Disks: []runtime.Disk{{Path: "/var/lib/bcd/volumes/é & <x>.raw", Serial: ""}}}
	return []*runtime.Domain{domain(), placed(), booted(), {ID: "bare", VCPUs: 1, MemoryBytes: 1 << 28}, big, bridged}
}

// seedCorpus is the JSON of seedDomains and every input under
// testdata/fuzz/FuzzPlan (the ones a run once found).
func seedCorpus(t testing.TB) ([][]byte, error) {
	var out [][]byte
	for _, d := range seedDomains() {
		data, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzPlan", "*"))
	for _, file := range files {
		data, err := readCorpusFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, data)
	}
	return out, nil
}

// readCorpusFile reads the one []byte of a "go test fuzz v1" file.
func readCorpusFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() || lines.Text() != "go test fuzz v1" || !lines.Scan() {
		return nil, errors.New("not a go test fuzz v1 file")
	}
	quoted, ok := strings.CutPrefix(lines.Text(), "[]byte(")
	if quoted, ok = strings.CutSuffix(quoted, ")"); !ok {
		return nil, errors.New("not a []byte")
	}
	s, err := strconv.Unquote(quoted)
	return []byte(s), err
}

// accepted is the domain of data if Check and CheckDisks take it.
func accepted(data []byte) (*runtime.Domain, bool) {
	d := &runtime.Domain{}
	if json.Unmarshal(data, d) != nil || Check(d, fuzzBridges) != nil || CheckDisks(d, fuzzDirs) != nil || CheckImage(d, fuzzImageDirs) != nil {
		return nil, false
	}
	return d, true
}

func FuzzPlan(f *testing.F) {
	seeds, err := seedCorpus(f)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := &runtime.Domain{}
		if json.Unmarshal(data, d) != nil {
			return
		}
		err := Check(d, fuzzBridges)
		if err == nil {
			err = CheckDisks(d, fuzzDirs)
		}
		if err == nil {
			err = CheckImage(d, fuzzImageDirs)
		}
		if err != nil {
			if !errors.Is(err, runtime.ErrInvalid) {
				t.Fatalf("refused without ErrInvalid: %v", err)
			}
			return
		}
		out, err := Render(d)
		if err != nil {
			t.Fatalf("an accepted domain does not render: %v", err)
		}
		if again, _ := Render(d); !bytes.Equal(again, out) {
			t.Fatal("the rendering is not stable")
		}
		saysWhatWasChecked(t, d, out)
	})
}

// parsed is what the XML is read back into.
type parsed struct {
	XMLName xml.Name `xml:"domain"`
	Type    string   `xml:"type,attr"`
	Name    string   `xml:"name"`
	Memory  string   `xml:"memory"`
	VCPU    string   `xml:"vcpu"`
	Pins    []struct {
		VCPU   string `xml:"vcpu,attr"`
		CPUSet string `xml:"cpuset,attr"`
	} `xml:"cputune>vcpupin"`
	Kernel string `xml:"os>kernel"`
	Disks  []struct {
		Source struct {
			File string `xml:"file,attr"`
		} `xml:"source"`
		Backing *struct {
			Format struct {
				Type string `xml:"type,attr"`
			} `xml:"format"`
			Source struct {
				File string `xml:"file,attr"`
			} `xml:"source"`
			End *struct{} `xml:"backingStore"`
		} `xml:"backingStore"`
		Target struct {
			Dev string `xml:"dev,attr"`
		} `xml:"target"`
		Serial   string    `xml:"serial"`
		ReadOnly *struct{} `xml:"readonly"`
	} `xml:"devices>disk"`
	Hostdevs []struct {
		Address struct {
			Domain   string `xml:"domain,attr"`
			Bus      string `xml:"bus,attr"`
			Slot     string `xml:"slot,attr"`
			Function string `xml:"function,attr"`
		} `xml:"source>address"`
	} `xml:"devices>hostdev"`
	NICs []struct {
		Type   string `xml:"type,attr"`
		Source *struct {
			Bridge string `xml:"bridge,attr"`
		} `xml:"source"`
		MAC struct {
			Address string `xml:"address,attr"`
		} `xml:"mac"`
		Target *struct {
			Dev     string `xml:"dev,attr"`
			Managed string `xml:"managed,attr"`
		} `xml:"target"`
	} `xml:"devices>interface"`
}

// saysWhatWasChecked reads the XML back and holds it to d.
func saysWhatWasChecked(t *testing.T, d *runtime.Domain, out []byte) {
	t.Helper()
	// One strict pass: the root element, then nothing but white space.
	dec := xml.NewDecoder(bytes.NewReader(out))
	dec.Strict = true
	p := parsed{}
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("the XML does not read back: %v\n%s", err, out)
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if text, ok := tok.(xml.CharData); err != nil || !ok || len(bytes.TrimSpace(text)) > 0 {
			t.Fatalf("after the domain: %v %v\n%s", tok, err, out)
		}
	}
	// encoding/xml escapes a quote in text, so file=" is an attribute.
	boot, files, disks := 0, len(d.Disks), len(d.Disks)
	if d.Image != nil {
		boot, files, disks = 1, files+2, disks+1
	}
	if d.Local.SeedDisk != "" {
		files, disks = files+1, disks+1
	}
	if d.Local.ConsoleLog != "" {
		files++
	}
	if n := bytes.Count(out, []byte(` file="`)); n != files || len(p.Disks) != disks {
		t.Fatalf("%d file attributes and %d disks in the XML, the domain has %d and %d", n, len(p.Disks), files, disks)
	}
	wantType := "kvm"
	if d.Accelerator == runtime.AccelTCG {
		wantType = "qemu"
	}
	if p.Type != wantType || p.Name != DomainName(d.ID) || p.Memory != fmt.Sprint(d.MemoryBytes/1024) || p.VCPU != fmt.Sprint(d.VCPUs) {
		t.Fatalf("domain %+v reads back as %q %q, %s KiB, %s vCPUs", d, p.Type, p.Name, p.Memory, p.VCPU)
	}
	var pins []string
	if d.CPUs != nil {
		for _, h := range d.CPUs.HostCPUs {
			pins = append(pins, fmt.Sprint(h))
		}
	}
	if len(p.Pins) != len(pins) {
		t.Fatalf("%d pins, want %d", len(p.Pins), len(pins))
	}
	for i, pin := range p.Pins {
		if pin.VCPU != fmt.Sprint(i) || pin.CPUSet != pins[i] {
			t.Fatalf("pin %d: %+v, want %s", i, pin, pins[i])
		}
	}
	for i, disk := range p.Disks {
		switch {
		case i < boot:
			b := disk.Backing
			if disk.Source.File != d.Local.Overlay || b == nil || b.Source.File != d.Image.Base || !DiskUnder(b.Source.File, fuzzImageDirs) ||
				b.Format.Type != d.Image.Format || b.End == nil || disk.Target.Dev != DiskDev(i) || disk.ReadOnly != nil {
				t.Fatalf("the boot disk reads back as %+v, want %+v over %+v", disk, d.Local.Overlay, d.Image)
			}
		case i < boot+len(d.Disks):
			w := d.Disks[i-boot]
			if disk.Source.File != w.Path || !DiskUnder(disk.Source.File, fuzzDirs) || !plainPath(disk.Source.File) || disk.Backing != nil ||
				disk.Target.Dev != DiskDev(i) || disk.Serial != w.Serial || (disk.ReadOnly != nil) != w.ReadOnly {
				t.Fatalf("disk %d reads back as %+v, want %+v", i, disk, w)
			}
		default:
			if disk.Source.File != d.Local.SeedDisk || disk.ReadOnly == nil || disk.Target.Dev != DiskDev(i) || disk.Backing != nil {
				t.Fatalf("the seed disk reads back as %+v, want %q", disk, d.Local.SeedDisk)
			}
		}
	}
	if len(p.Hostdevs) != len(d.GPUs) {
		t.Fatalf("%d hostdevs, want %d", len(p.Hostdevs), len(d.GPUs))
	}
	for i, h := range p.Hostdevs {
		a := h.Address
		if got := fmt.Sprintf("%s:%s:%s.%s", strings.TrimPrefix(a.Domain, "0x"), strings.TrimPrefix(a.Bus, "0x"), strings.TrimPrefix(a.Slot, "0x"), strings.TrimPrefix(a.Function, "0x")); got != d.GPUs[i].Address {
			t.Fatalf("hostdev %d is %s, want %s", i, got, d.GPUs[i].Address)
		}
	}
	if (d.Local.Kernel == nil) != (p.Kernel == "") || (d.Local.Kernel != nil && p.Kernel != d.Local.Kernel.Kernel) {
		t.Fatalf("kernel %q, want %+v", p.Kernel, d.Local.Kernel)
	}
	if len(p.NICs) != len(d.NICs) {
		t.Fatalf("%d interfaces, want %d", len(p.NICs), len(d.NICs))
	}
	for i, nic := range p.NICs {
		w := d.NICs[i]
		if nic.MAC.Address != w.MAC {
			t.Fatalf("NIC %d: MAC %q, want %q", i, nic.MAC.Address, w.MAC)
		}
		if w.Tap != "" {
			if nic.Type != "ethernet" || nic.Source != nil || nic.Target == nil || nic.Target.Dev != runtime.TapName(d.ID, i) || nic.Target.Managed != "no" {
				t.Fatalf("NIC %d on tap %s reads back as %+v", i, w.Tap, nic)
			}
		} else if nic.Type != "bridge" || nic.Source == nil || nic.Source.Bridge != w.Bridge || !slices.Contains(fuzzBridges, nic.Source.Bridge) || nic.Target != nil {
			t.Fatalf("NIC %d on bridge %s reads back as %+v", i, w.Bridge, nic)
		}
	}
}

// The seeds are accepted and hold to the properties.
func TestTheSeedPlansSayWhatWasChecked(t *testing.T) {
	seeds, err := seedCorpus(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seeds[:len(seedDomains())] {
		d, ok := accepted(s)
		if !ok {
			t.Fatalf("a seed is refused: %s", s)
		}
		out, err := Render(d)
		if err != nil {
			t.Fatal(err)
		}
		saysWhatWasChecked(t, d, out)
	}
}
