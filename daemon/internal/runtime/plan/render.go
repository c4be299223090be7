// The domain XML of a checked runtime.Domain, one function per element:
// the top-level elements in libvirt's order, then the devices (the boot
// disk over its base, the volumes, the seed disk, the NICs, the GPUs, the
// console, the rng and the balloon).

package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/xml"
	"fmt"
	"slices"
	"strings"

	"bcd/internal/runtime"
)

// Render returns the domain XML of d (Check it first).
func Render(d *runtime.Domain) ([]byte, error) {
	doc := &element{XMLName: xml.Name{Local: "domain"}, Attrs: attrs("type", domainType(d))}
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

// domainType is libvirt's name of the accelerator: kvm, or qemu for TCG.
func domainType(d *runtime.Domain) string {
	if d.Accelerator == runtime.AccelTCG {
		return "qemu"
	}
	return "kvm"
}

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

// memoryBacking backs a huge-page domain with pages of its size (hugetlbfs
// pages are never swapped, so there is no <locked/>: it would lift the
// whole process's memlock limit, which a host may not allow).
func memoryBacking(d *runtime.Domain) []*element {
	if d.HugePageBytes == 0 {
		return nil
	}
	page := node("page", attrs("size", fmt.Sprint(d.HugePageBytes/1024), "unit", "KiB"))
	return []*element{node("memoryBacking", nil, node("hugepages", nil, page))}
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
	var parts []string
	for _, c := range sorted {
		parts = append(parts, fmt.Sprint(c))
	}
	return strings.Join(parts, ",")
}

// sysinfo carries the NoCloud seed URL as the SMBIOS system serial.
func sysinfo(d *runtime.Domain) []*element {
	entry := text("entry", "ds=nocloud;s="+SeedURL, "name", "serial")
	return []*element{node("sysinfo", attrs("type", "smbios"), node("system", nil, entry))}
}

// osElement boots the disk through the firmware, or the host's kernel
// directly when the runtime chose one (Local.Kernel).
func osElement(d *runtime.Domain) []*element {
	os := node("os", nil, text("type", "hvm", "arch", "x86_64", "machine", "q35"))
	if k := d.Local.Kernel; k != nil {
		os.Children = append(os.Children, text("kernel", k.Kernel))
		if k.Initrd != "" {
			os.Children = append(os.Children, text("initrd", k.Initrd))
		}
		if k.Cmdline != "" {
			os.Children = append(os.Children, text("cmdline", k.Cmdline))
		}
	}
	os.Children = append(os.Children, node("boot", attrs("dev", "hd")), node("smbios", attrs("mode", "sysinfo")))
	return []*element{os}
}

func features(d *runtime.Domain) []*element {
	return []*element{node("features", nil, node("acpi", nil), node("apic", nil))}
}

// cpu passes the host's CPU through under KVM; under TCG QEMU emulates
// its default model.
func cpu(d *runtime.Domain) []*element {
	if d.Accelerator == runtime.AccelTCG {
		return nil
	}
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
	for _, part := range []func(*runtime.Domain) []*element{disks, interfaces, hostdevs, console, rng, balloon} {
		dev.Children = append(dev.Children, part(d)...)
	}
	return []*element{dev}
}

// disks are, in guest order (vda, vdb, …): the boot disk (the overlay
// over its base, the chain said in full so that libvirt and QEMU read no
// backing file name from an image), the volumes, then the seed disk.
func disks(d *runtime.Domain) []*element {
	var out []*element
	dev := func() string { return DiskDev(len(out)) }
	if im := d.Image; im != nil {
		base := node("backingStore", attrs("type", "file"), node("format", attrs("type", im.Format)),
			node("source", attrs("file", im.Base)), node("backingStore", nil))
		out = append(out, node("disk", attrs("type", "file", "device", "disk"),
			node("driver", attrs("name", "qemu", "type", FormatQcow2)),
			node("source", attrs("file", d.Local.Overlay)), base,
			node("target", attrs("dev", dev(), "bus", "virtio")),
		))
	}
	for _, disk := range d.Disks {
		e := node("disk", attrs("type", "file", "device", "disk"),
			node("driver", attrs("name", "qemu", "type", "raw", "cache", "none", "io", "native")),
			node("source", attrs("file", disk.Path)),
			node("target", attrs("dev", dev(), "bus", "virtio")),
		)
		if disk.ReadOnly {
			e.Children = append(e.Children, node("readonly", nil))
		}
		if disk.Serial != "" {
			e.Children = append(e.Children, text("serial", disk.Serial))
		}
		out = append(out, e)
	}
	if seed := d.Local.SeedDisk; seed != "" {
		out = append(out, node("disk", attrs("type", "file", "device", "disk"),
			node("driver", attrs("name", "qemu", "type", "raw")),
			node("source", attrs("file", seed)),
			node("target", attrs("dev", dev(), "bus", "virtio")),
			node("readonly", nil), text("serial", "cidata"),
		))
	}
	return out
}

// interfaces are the NICs: the instance's own tap (made by bcd helper and
// enslaved to its bridge), unmanaged by libvirt; a NIC without a tap joins
// its bridge through a tap libvirt makes. No option ROM: the guest boots
// from its disk, never from the network.
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
		e.Children = append(e.Children, node("model", attrs("type", "virtio")), node("rom", attrs("enabled", "no")))
		out = append(out, e)
	}
	return out
}

// hostdevs pass each GPU's PCI function through (VFIO, libvirt managing
// the driver binding).
func hostdevs(d *runtime.Domain) []*element {
	var out []*element
	for _, g := range d.GPUs {
		// IsPCIAddress: dddd:bb:ss.f.
		dom, bus, slot, fn := g.Address[0:4], g.Address[5:7], g.Address[8:10], g.Address[11:12]
		addr := node("address", attrs("domain", "0x"+dom, "bus", "0x"+bus, "slot", "0x"+slot, "function", "0x"+fn))
		out = append(out, node("hostdev", attrs("mode", "subsystem", "type", "pci", "managed", "yes"), node("source", nil, addr)))
	}
	return out
}

// console is a serial console on a pty (what a console tunnel attaches
// to), written to the runtime's console log when it chose one.
func console(d *runtime.Domain) []*element {
	serial := node("serial", attrs("type", "pty"))
	if d.Local.ConsoleLog != "" {
		serial.Children = append(serial.Children, node("log", attrs("file", d.Local.ConsoleLog, "append", "off")))
	}
	serial.Children = append(serial.Children, node("target", attrs("port", "0")))
	return []*element{
		serial,
		node("console", attrs("type", "pty"), node("target", attrs("type", "serial", "port", "0"))),
	}
}

func rng(d *runtime.Domain) []*element {
	return []*element{node("rng", attrs("model", "virtio"), text("backend", "/dev/urandom", "model", "random"))}
}

// BalloonStatsPeriod is how often (seconds) the guest's balloon driver
// reports its memory statistics (what `virsh domstats --balloon` reads).
const BalloonStatsPeriod = 5

// balloon is the virtio memory balloon, reporting its statistics; a
// huge-page domain has none (its pages cannot be given back).
func balloon(d *runtime.Domain) []*element {
	if d.HugePageBytes != 0 {
		return []*element{node("memballoon", attrs("model", "none"))}
	}
	return []*element{node("memballoon", attrs("model", "virtio"), node("stats", attrs("period", fmt.Sprint(BalloonStatsPeriod))))}
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
