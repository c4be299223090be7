// Package plan renders a runtime.Domain as the libvirt domain XML a host
// defines with `virsh define` (bcd helper's domain.define) and that fakehw
// writes to <data_dir>/fakehw-plans/<id>.xml: one renderer for both. The
// document is built one element at a time, one function per element of
// the domain (name, uuid, memory, vcpu, sysinfo, os, features, cpu, clock,
// the lifecycle actions, and the devices: disks, interfaces, console, rng,
// balloon), so that later elements (pinned NUMA-affine vCPUs in cputune
// and numatune, huge pages in memoryBacking, GPU hostdevs) are one more
// function each. Check says, before anything is rendered, why libvirt or
// the host would refuse a domain (and refuses what the XML could not say
// as it is), CheckDisks whether its disks are under the allowed
// directories.
//
// The guest finds its NoCloud seed through SMBIOS: the system serial is
// "ds=nocloud;s=http://169.254.169.254/nocloud/", which cloud-init reads
// as a seed URL on the metadata address (docs/daemon.md, "Instances").
package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/xml"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"bcd/internal/runtime"
)

// SeedURL is where the guest's cloud-init finds its NoCloud seed.
const SeedURL = "http://169.254.169.254/nocloud/"

// Limits of a domain (libvirt's and the helper's).
const (
	MaxVCPUs    = 512
	MinMemory   = 1 << 20
	MaxNICs     = 8
	MaxDisks    = 16
	diskLetters = "abcdefghijklmnop"
)

// macAddr is a unicast MAC address.
var macAddr = regexp.MustCompile(`^[0-9a-f][02468ace](:[0-9a-f]{2}){5}$`)

// serialPattern is what a disk serial may be (libvirt: at most 20
// characters of these).
var serialPattern = regexp.MustCompile(`^[A-Za-z0-9_.+-]{0,20}$`)

// Check returns why the domain would be refused (wrapping
// runtime.ErrInvalid), or nil. bridges are the host's instance bridges.
func Check(d *runtime.Domain, bridges []string) error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", runtime.ErrInvalid, fmt.Sprintf(format, args...))
	}
	if !runtime.IDPattern.MatchString(d.ID) {
		return invalid("instance id %q", d.ID)
	}
	if d.VCPUs == 0 || d.VCPUs > MaxVCPUs {
		return invalid("domain %s: %d vCPUs (1 to %d)", d.ID, d.VCPUs, MaxVCPUs)
	}
	if d.MemoryBytes < MinMemory {
		return invalid("domain %s: %d bytes of memory (at least %d)", d.ID, d.MemoryBytes, MinMemory)
	}
	if len(d.NICs) > MaxNICs {
		return invalid("domain %s: %d NICs, at most %d", d.ID, len(d.NICs), MaxNICs)
	}
	for i, n := range d.NICs {
		if n.MAC != "" && !macAddr.MatchString(n.MAC) {
			return invalid("domain %s: MAC %q", d.ID, n.MAC)
		}
		if n.Tap != "" && n.Tap != runtime.TapName(d.ID, i) {
			return invalid("domain %s: NIC %d: tap %q is not the instance's (%s)", d.ID, i, n.Tap, runtime.TapName(d.ID, i))
		}
		if !slices.Contains(bridges, n.Bridge) {
			return invalid("domain: bridge %q is not an instance network", n.Bridge)
		}
	}
	if len(d.Disks) > MaxDisks {
		return invalid("domain %s: %d disks, at most %d", d.ID, len(d.Disks), MaxDisks)
	}
	for _, disk := range d.Disks {
		if !plainPath(disk.Path) || !serialPattern.MatchString(disk.Serial) {
			return invalid("domain %s: disk %q (serial %q)", d.ID, disk.Path, disk.Serial)
		}
	}
	if c := d.CPUs; c != nil {
		if len(c.HostCPUs) != int(d.VCPUs) {
			return invalid("domain %s: %d vCPUs pinned to %d host CPUs", d.ID, d.VCPUs, len(c.HostCPUs))
		}
		seen := map[uint32]bool{}
		for _, h := range c.HostCPUs {
			if seen[h] {
				return invalid("domain %s: host CPU %d pinned twice", d.ID, h)
			}
			seen[h] = true
		}
	}
	switch d.HugePageBytes {
	case 0:
	case HugePage2Mi, HugePage1Gi:
		if d.MemoryBytes%d.HugePageBytes != 0 {
			return invalid("domain %s: %d bytes of memory are not a whole number of %d-byte huge pages", d.ID, d.MemoryBytes, d.HugePageBytes)
		}
	default:
		return invalid("domain %s: huge pages of %d bytes (2 MiB or 1 GiB)", d.ID, d.HugePageBytes)
	}
	return nil
}

// plainPath says whether a disk path is one the XML says as it is: not
// empty, clean, no ".." element, valid UTF-8 without control characters
// or the two non-characters XML cannot carry (encoding/xml would write
// U+FFFD for them: libvirt would open another path than the one checked).
func plainPath(path string) bool {
	if path == "" || filepath.Clean(path) != path || !utf8.ValidString(path) {
		return false
	}
	for _, element := range strings.Split(path, "/") {
		if element == ".." {
			return false
		}
	}
	return strings.IndexFunc(path, func(r rune) bool { return unicode.IsControl(r) || r == 0xFFFE || r == 0xFFFF }) < 0
}

// DiskUnder says whether path is an absolute path, clean, directly under
// one of dirs (absolute and clean themselves): the disks bcd helper takes
// ([helper] volume_dirs). It says nothing of what the path is on disk.
func DiskUnder(path string, dirs []string) bool {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return false
	}
	for _, dir := range dirs {
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			continue
		}
		if rel, err := filepath.Rel(dir, path); err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") && !strings.Contains(rel, "/") {
			return true
		}
	}
	return false
}

// CheckDisks returns why a disk of d is not directly under one of dirs
// (wrapping runtime.ErrInvalid), or nil.
func CheckDisks(d *runtime.Domain, dirs []string) error {
	for _, disk := range d.Disks {
		if !DiskUnder(disk.Path, dirs) {
			return fmt.Errorf("%w: domain %s: disk %q is not a file directly under %v", runtime.ErrInvalid, d.ID, disk.Path, dirs)
		}
	}
	return nil
}

// The huge page sizes a domain may be backed by.
const (
	HugePage2Mi = 2 << 20
	HugePage1Gi = 1 << 30
)

// Render returns the domain XML of d (Check it first).
func Render(d *runtime.Domain) ([]byte, error) {
	doc := &element{XMLName: xml.Name{Local: "domain"}, Attrs: attrs("type", "kvm")}
	for _, part := range []func(*runtime.Domain) []*element{
		name, uuid, memory, memoryBacking, vcpu, cputune, numatune, sysinfo, osElement, features, cpu, clock, lifecycle, devices,
	} {
		doc.Children = append(doc.Children, part(d)...)
	}
	var buf bytes.Buffer
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// DomainName is the libvirt name of an instance's domain.
func DomainName(id string) string { return "bcd-" + id }

func name(d *runtime.Domain) []*element { return []*element{text("name", DomainName(d.ID))} }

// uuid derives the domain's UUID from its id, so that a redefinition keeps it.
func uuid(d *runtime.Domain) []*element {
	sum := sha256.Sum256([]byte("bcd-domain/v1\x00" + d.ID))
	sum[6] = sum[6]&0x0f | 0x50 // version 5 style: name-based
	sum[8] = sum[8]&0x3f | 0x80
	u := fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	return []*element{text("uuid", u)}
}

func memory(d *runtime.Domain) []*element {
	kib := fmt.Sprint(d.MemoryBytes / 1024)
	return []*element{
		text("memory", kib, "unit", "KiB"),
		text("currentMemory", kib, "unit", "KiB"),
	}
}

// memoryBacking backs a huge-page domain with locked pages of its size.
func memoryBacking(d *runtime.Domain) []*element {
	if d.HugePageBytes == 0 {
		return nil
	}
	page := node("page", attrs("size", fmt.Sprint(d.HugePageBytes/1024), "unit", "KiB"))
	return []*element{node("memoryBacking", nil, node("hugepages", nil, page), node("locked", nil))}
}

func vcpu(d *runtime.Domain) []*element {
	a := []string{"placement", "static"}
	if d.CPUs != nil {
		a = append(a, "cpuset", cpuList(d.CPUs.HostCPUs))
	}
	return []*element{text("vcpu", fmt.Sprint(d.VCPUs), a...)}
}

// cputune pins vCPU i to its host CPU.
func cputune(d *runtime.Domain) []*element {
	if d.CPUs == nil {
		return nil
	}
	tune := node("cputune", nil)
	for i, h := range d.CPUs.HostCPUs {
		tune.Children = append(tune.Children, node("vcpupin", attrs("vcpu", fmt.Sprint(i), "cpuset", fmt.Sprint(h))))
	}
	return []*element{tune}
}

// numatune takes a pinned domain's memory strictly from its NUMA node.
func numatune(d *runtime.Domain) []*element {
	if d.CPUs == nil {
		return nil
	}
	return []*element{node("numatune", nil, node("memory", attrs("mode", "strict", "nodeset", fmt.Sprint(d.CPUs.Node))))}
}

// cpuList is libvirt's cpuset list of cpus ("3,4,9").
func cpuList(cpus []uint32) string {
	sorted := slices.Clone(cpus)
	slices.Sort(sorted)
	var b bytes.Buffer
	for i, c := range sorted {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, c)
	}
	return b.String()
}

// sysinfo carries the NoCloud seed URL as the SMBIOS system serial.
func sysinfo(d *runtime.Domain) []*element {
	entry := text("entry", "ds=nocloud;s="+SeedURL, "name", "serial")
	return []*element{node("sysinfo", attrs("type", "smbios"), node("system", nil, entry))}
}

func osElement(d *runtime.Domain) []*element {
	return []*element{node("os", nil,
		text("type", "hvm", "arch", "x86_64", "machine", "q35"),
		node("boot", attrs("dev", "hd")),
		node("smbios", attrs("mode", "sysinfo")),
	)}
}

func features(d *runtime.Domain) []*element {
	return []*element{node("features", nil, node("acpi", nil), node("apic", nil))}
}

func cpu(d *runtime.Domain) []*element {
	return []*element{node("cpu", attrs("mode", "host-passthrough", "check", "none"))}
}

func clock(d *runtime.Domain) []*element {
	return []*element{node("clock", attrs("offset", "utc"))}
}

func lifecycle(d *runtime.Domain) []*element {
	return []*element{text("on_poweroff", "destroy"), text("on_reboot", "restart"), text("on_crash", "destroy")}
}

func devices(d *runtime.Domain) []*element {
	dev := node("devices", nil)
	for _, part := range []func(*runtime.Domain) []*element{disks, interfaces, console, rng, balloon} {
		dev.Children = append(dev.Children, part(d)...)
	}
	return []*element{dev}
}

// DiskDev is the guest device of the i-th disk: vda, vdb, … (i below MaxDisks).
func DiskDev(i int) string { return "vd" + string(diskLetters[i]) }

// disks are the volumes as virtio disks vda, vdb, … in order.
func disks(d *runtime.Domain) []*element {
	var out []*element
	for i, disk := range d.Disks {
		e := node("disk", attrs("type", "file", "device", "disk"),
			node("driver", attrs("name", "qemu", "type", "raw", "cache", "none", "io", "native")),
			node("source", attrs("file", disk.Path)),
			node("target", attrs("dev", DiskDev(i), "bus", "virtio")),
		)
		if disk.ReadOnly {
			e.Children = append(e.Children, node("readonly", nil))
		}
		if disk.Serial != "" {
			e.Children = append(e.Children, text("serial", disk.Serial))
		}
		out = append(out, e)
	}
	return out
}

// interfaces are the NICs: the instance's own tap (made by bcd helper and
// enslaved to its bridge), unmanaged by libvirt; a NIC without a tap joins
// its bridge through a tap libvirt makes.
func interfaces(d *runtime.Domain) []*element {
	var out []*element
	for _, n := range d.NICs {
		var e *element
		if n.Tap != "" {
			e = node("interface", attrs("type", "ethernet"))
		} else {
			e = node("interface", attrs("type", "bridge"), node("source", attrs("bridge", n.Bridge)))
		}
		if n.MAC != "" {
			e.Children = append(e.Children, node("mac", attrs("address", n.MAC)))
		}
		if n.Tap != "" {
			e.Children = append(e.Children, node("target", attrs("dev", n.Tap, "managed", "no")))
		}
		e.Children = append(e.Children, node("model", attrs("type", "virtio")))
		out = append(out, e)
	}
	return out
}

// console is a serial console on a pty (what a console tunnel attaches to).
func console(d *runtime.Domain) []*element {
	return []*element{
		node("serial", attrs("type", "pty"), node("target", attrs("port", "0"))),
		node("console", attrs("type", "pty"), node("target", attrs("type", "serial", "port", "0"))),
	}
}

func rng(d *runtime.Domain) []*element {
	return []*element{node("rng", attrs("model", "virtio"), text("backend", "/dev/urandom", "model", "random"))}
}

// balloon is the virtio memory balloon; a huge-page domain has none (its
// locked pages cannot be given back).
func balloon(d *runtime.Domain) []*element {
	if d.HugePageBytes != 0 {
		return []*element{node("memballoon", attrs("model", "none"))}
	}
	return []*element{node("memballoon", attrs("model", "virtio"))}
}

// element is one XML element: attributes, text or children.
type element struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",attr"`
	Text     string     `xml:",chardata"`
	Children []*element
}

func attrs(kv ...string) []xml.Attr {
	out := make([]xml.Attr, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, xml.Attr{Name: xml.Name{Local: kv[i]}, Value: kv[i+1]})
	}
	return out
}

func node(name string, a []xml.Attr, children ...*element) *element {
	return &element{XMLName: xml.Name{Local: name}, Attrs: a, Children: children}
}

func text(name, value string, kv ...string) *element {
	return &element{XMLName: xml.Name{Local: name}, Attrs: attrs(kv...), Text: value}
}
