// Package plan renders a runtime.Domain as the libvirt domain XML a host
// defines with `virsh define` (bcd helper's domain.define) and that fakehw
// writes to <data_dir>/fakehw-plans/<id>.xml: one renderer for both
// (render.go). The document is built one element at a time, one function
// per element of the domain (name, uuid, memory, huge-page backing, vcpu,
// cputune, numatune, sysinfo, os, features, cpu, clock, the lifecycle
// actions, and the devices: disks, interfaces, GPU hostdevs, console, rng,
// balloon). Check says, before anything is rendered, why libvirt or the
// host would refuse a domain (and refuses what the XML could not say as
// it is), CheckDisks whether its volumes are under the allowed directories
// and CheckImage whether its base image is.
//
// The guest finds its NoCloud seed through SMBIOS: the system serial is
// "ds=nocloud;s=http://169.254.169.254/nocloud/", which cloud-init reads
// as a seed URL on the metadata address (docs/daemon.md, "Instances"); a
// booting guest also has its seed disk (label CIDATA: meta-data and the
// network-config that gives it its address on the instance network).
package plan

import (
	"fmt"
	"net/netip"
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

// MetadataAddress is the metadata endpoint's address on an instance bridge.
const MetadataAddress = "169.254.169.254"

// Limits of a domain (libvirt's and the helper's).
const (
	MaxVCPUs    = 512
	MinMemory   = 1 << 20
	MaxNICs     = 8
	MaxDisks    = 16
	MaxGPUs     = 16
	MaxCmdline  = 1024
	diskLetters = "abcdefghijklmnop"
)

// The huge page sizes a domain may be backed by.
const (
	HugePage2Mi = 2 << 20
	HugePage1Gi = 1 << 30
)

// The formats a base image may have.
const (
	FormatRaw   = "raw"
	FormatQcow2 = "qcow2"
)

var (
	// macAddr is a unicast MAC address.
	macAddr = regexp.MustCompile(`^[0-9a-f][02468ace](:[0-9a-f]{2}){5}$`)
	// serialPattern is what a disk serial may be (libvirt: at most 20
	// characters of these).
	serialPattern = regexp.MustCompile(`^[A-Za-z0-9_.+-]{0,20}$`)
	// pciAddress is a PCI device address, domain:bus:slot.function.
	pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$`)
	// digestPattern is an image digest.
	digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// IsDigest says whether s is an image digest: "sha256:" and 64 lowercase
// hex digits.
func IsDigest(s string) bool { return digestPattern.MatchString(s) }

// IsPCIAddress says whether s is a PCI address ("0000:3b:00.0").
func IsPCIAddress(s string) bool { return pciAddress.MatchString(s) }

// GuestAddress says whether s is an address a guest may have on the
// instance network: 169.254.1.0 to 169.254.254.255 (RFC 3927 keeps the
// first and last /24), not the metadata address.
func GuestAddress(s string) bool {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() || a.String() != s {
		return false
	}
	b := a.As4()
	return b[0] == 169 && b[1] == 254 && b[2] >= 1 && b[2] <= 254 && s != MetadataAddress
}

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
	if d.Accelerator != "" && d.Accelerator != runtime.AccelKVM && d.Accelerator != runtime.AccelTCG {
		return invalid("domain %s: accelerator %q (kvm or tcg)", d.ID, d.Accelerator)
	}
	for _, check := range []func(*runtime.Domain, []string) string{checkNICs, checkDisks, checkPlacement, checkGPUs, checkLocal} {
		if why := check(d, bridges); why != "" {
			return invalid("%s", why)
		}
	}
	return nil
}

// checkNICs: at most MaxNICs, unicast MACs, the instance's own taps, on
// instance bridges, distinct guest addresses (each with its MAC: the
// host's filter holds the two together).
func checkNICs(d *runtime.Domain, bridges []string) string {
	if len(d.NICs) > MaxNICs {
		return fmt.Sprintf("domain %s: %d NICs, at most %d", d.ID, len(d.NICs), MaxNICs)
	}
	seen := map[string]bool{}
	for i, n := range d.NICs {
		if n.MAC != "" && !macAddr.MatchString(n.MAC) {
			return fmt.Sprintf("domain %s: MAC %q", d.ID, n.MAC)
		}
		if n.Tap != "" && n.Tap != runtime.TapName(d.ID, i) {
			return fmt.Sprintf("domain %s: NIC %d: tap %q is not the instance's (%s)", d.ID, i, n.Tap, runtime.TapName(d.ID, i))
		}
		if !slices.Contains(bridges, n.Bridge) {
			return fmt.Sprintf("domain: bridge %q is not an instance network", n.Bridge)
		}
		if n.Address != "" && (!GuestAddress(n.Address) || n.MAC == "" || seen[n.Address]) {
			return fmt.Sprintf("domain %s: NIC %d: address %q (a guest address of 169.254.0.0/16, with a MAC, once)", d.ID, i, n.Address)
		}
		seen[n.Address] = true
	}
	return ""
}

// checkDisks: at most MaxDisks with the boot and seed disks, plain paths,
// libvirt's serials, a base image by digest in a known format.
func checkDisks(d *runtime.Domain, _ []string) string {
	count := len(d.Disks)
	if d.Image != nil {
		count++
	}
	if d.Local.SeedDisk != "" {
		count++
	}
	if count > MaxDisks {
		return fmt.Sprintf("domain %s: %d disks with its boot and seed disks, at most %d", d.ID, count, MaxDisks)
	}
	for _, disk := range d.Disks {
		if !plainPath(disk.Path) || !serialPattern.MatchString(disk.Serial) {
			return fmt.Sprintf("domain %s: disk %q (serial %q)", d.ID, disk.Path, disk.Serial)
		}
	}
	if im := d.Image; im != nil {
		if !IsDigest(im.Digest) || !plainPath(im.Base) || (im.Format != FormatRaw && im.Format != FormatQcow2) {
			return fmt.Sprintf("domain %s: image %q at %q (format %q: raw or qcow2)", d.ID, im.Digest, im.Base, im.Format)
		}
	}
	if (d.Local.Overlay != "") != (d.Image != nil) {
		return fmt.Sprintf("domain %s: an image goes with its overlay (image %v, overlay %q)", d.ID, d.Image != nil, d.Local.Overlay)
	}
	return ""
}

// checkPlacement: pins one per vCPU, each host CPU once; huge pages of a
// size libvirt backs, a whole number of them; a balloon floor below the
// memory of a domain that is not huge-page backed.
func checkPlacement(d *runtime.Domain, _ []string) string {
	if c := d.CPUs; c != nil {
		if len(c.HostCPUs) != int(d.VCPUs) {
			return fmt.Sprintf("domain %s: %d vCPUs pinned to %d host CPUs", d.ID, d.VCPUs, len(c.HostCPUs))
		}
		seen := map[uint32]bool{}
		for _, h := range c.HostCPUs {
			if seen[h] {
				return fmt.Sprintf("domain %s: host CPU %d pinned twice", d.ID, h)
			}
			seen[h] = true
		}
	}
	switch d.HugePageBytes {
	case 0:
	case HugePage2Mi, HugePage1Gi:
		if d.MemoryBytes%d.HugePageBytes != 0 {
			return fmt.Sprintf("domain %s: %d bytes of memory are not a whole number of %d-byte huge pages", d.ID, d.MemoryBytes, d.HugePageBytes)
		}
	default:
		return fmt.Sprintf("domain %s: huge pages of %d bytes (2 MiB or 1 GiB)", d.ID, d.HugePageBytes)
	}
	if f := d.MemoryFloorBytes; f != 0 && (f < MinMemory || f >= d.MemoryBytes || d.HugePageBytes != 0) {
		return fmt.Sprintf("domain %s: a memory floor of %d bytes (at least %d, below its %d bytes, and no huge pages)", d.ID, f, MinMemory, d.MemoryBytes)
	}
	return ""
}

// checkGPUs: at most MaxGPUs, PCI addresses, each once.
func checkGPUs(d *runtime.Domain, _ []string) string {
	if len(d.GPUs) > MaxGPUs {
		return fmt.Sprintf("domain %s: %d GPUs, at most %d", d.ID, len(d.GPUs), MaxGPUs)
	}
	seen := map[string]bool{}
	for _, g := range d.GPUs {
		if !pciAddress.MatchString(g.Address) || seen[g.Address] {
			return fmt.Sprintf("domain %s: GPU %d at %q (a PCI address, once)", d.ID, g.Index, g.Address)
		}
		seen[g.Address] = true
	}
	return ""
}

// checkLocal: the runtime's own files are plain paths, the kernel's
// command line printable and short.
func checkLocal(d *runtime.Domain, _ []string) string {
	l := d.Local
	for _, p := range []string{l.Overlay, l.SeedDisk, l.ConsoleLog} {
		if p != "" && !plainPath(p) {
			return fmt.Sprintf("domain %s: file %q", d.ID, p)
		}
	}
	if k := l.Kernel; k != nil {
		if !plainPath(k.Kernel) || (k.Initrd != "" && !plainPath(k.Initrd)) || len(k.Cmdline) > MaxCmdline ||
			strings.IndexFunc(k.Cmdline, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 || !utf8.ValidString(k.Cmdline) {
			return fmt.Sprintf("domain %s: direct boot %q %q %q", d.ID, k.Kernel, k.Initrd, k.Cmdline)
		}
	}
	return ""
}

// plainPath says whether a path is one the XML says as it is: not empty,
// clean, no ".." element, valid UTF-8 without control characters or the
// two non-characters XML cannot carry (encoding/xml would write U+FFFD for
// them: libvirt would open another path than the one checked).
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
// ([helper] volume_dirs, image_dirs). It says nothing of what the path is
// on disk.
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

// CheckDisks returns why a volume of d is not directly under one of dirs
// (wrapping runtime.ErrInvalid), or nil.
func CheckDisks(d *runtime.Domain, dirs []string) error {
	for _, disk := range d.Disks {
		if !DiskUnder(disk.Path, dirs) {
			return fmt.Errorf("%w: domain %s: disk %q is not a file directly under %v", runtime.ErrInvalid, d.ID, disk.Path, dirs)
		}
	}
	return nil
}

// CheckImage returns why d's base image is not directly under one of
// dirs (wrapping runtime.ErrInvalid), or nil (also without an image).
func CheckImage(d *runtime.Domain, dirs []string) error {
	if d.Image != nil && !DiskUnder(d.Image.Base, dirs) {
		return fmt.Errorf("%w: domain %s: image %q is not a file directly under %v", runtime.ErrInvalid, d.ID, d.Image.Base, dirs)
	}
	return nil
}

// DomainName is the libvirt name of an instance's domain.
func DomainName(id string) string { return "bcd-" + id }

// DiskDev is the guest device of the i-th disk: vda, vdb, … (i below MaxDisks).
func DiskDev(i int) string { return "vd" + string(diskLetters[i]) }
