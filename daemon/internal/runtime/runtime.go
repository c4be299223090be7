// Package runtime is the one interface every VPS runtime of bcd sits
// behind (docs/daemon.md, "Instances"): define, start, stop and destroy a
// domain, and say what state it is in. The instances reconciler
// (internal/instances) drives it; the runtimes are runtime/fakehw (the
// file-backed libvirt-kvm of fakehw builds), runtime/libvirt (virsh
// through bcd helper) and runtime/cloudhypervisor (cloud-hypervisor with
// taps from bcd helper). What a domain is made of is a Domain, which
// runtime/plan renders as the libvirt domain XML.
package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The runtime names of the instances section (InstanceSpec.runtime), which
// a node advertises as DriverManifest{name, kind: "runtime"} in its Hello.
const (
	NameLibvirtKVM      = "libvirt-kvm"
	NameCloudHypervisor = "cloud-hypervisor"
)

// DriverKind is the DriverManifest kind of a runtime.
const DriverKind = "runtime"

// ErrInvalid marks a domain the runtime refuses before it changes anything
// (libvirt would refuse its XML, a NIC is on a bridge that is not an
// instance network). Its text says why.
var ErrInvalid = errors.New("invalid domain")

// ErrUnsupported marks a field of a domain that this runtime, or this
// host, cannot apply (GPUs it lacks, huge pages of a size it has none of,
// a balloon floor a runtime does not carry): the domain is not defined
// rather than run without it. Its text says which field and why.
var ErrUnsupported = errors.New("unsupported by this runtime")

// Why is an ErrInvalid or ErrUnsupported error's text without the
// sentinel's own words in front: what a status or a refusal code goes in
// front of instead.
func Why(err error) string {
	text := err.Error()
	for _, sentinel := range []error{ErrInvalid, ErrUnsupported} {
		text = strings.TrimPrefix(text, sentinel.Error()+": ")
	}
	return text
}

// The accelerators a domain runs under: KVM (the default, and a
// production host's), or QEMU's TCG emulation where KVM cannot run a
// guest (a nested host; libvirt's type "qemu").
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// IDPattern is what an instance id may look like (it names files, a
// libvirt domain bcd-<id> and taps).
var IDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// State is a domain's state as the runtime sees it.
type State string

// The states.
const (
	// Absent is a domain the runtime does not have.
	Absent State = "absent"
	// Defined is a domain that is defined and not running (shut off, or
	// not started since a reboot).
	Defined State = "defined"
	// Running is a running domain.
	Running State = "running"
)

// Domain is what a runtime defines for one instance.
type Domain struct {
	// ID is the instance id; the libvirt domain is bcd-<id>.
	ID string `json:"id"`
	// VCPUs and MemoryBytes size it.
	VCPUs       uint32 `json:"vcpus"`
	MemoryBytes uint64 `json:"memory_bytes"`
	// NICs are its network interfaces, in order.
	NICs []NIC `json:"nics,omitempty"`
	// Disks are its volumes, in order (vda, vdb, …).
	Disks []Disk `json:"disks,omitempty"`
	// CPUs pins its vCPUs on one NUMA node, whose memory strictly backs
	// the guest (nil: floating vCPUs).
	CPUs *Pinning `json:"cpus,omitempty"`
	// HugePageBytes backs its memory with locked huge pages of that size
	// (2 MiB or 1 GiB), without a balloon (0: ordinary memory).
	HugePageBytes uint64 `json:"hugepage_bytes,omitempty"`
	// MemoryFloorBytes is the least its balloon may leave it (0: never
	// ballooned).
	MemoryFloorBytes uint64 `json:"memory_floor_bytes,omitempty"`
	// GPUs are the host's GPUs passed through to it, in order.
	GPUs []GPU `json:"gpus,omitempty"`
	// Image is the base disk it boots from, through an overlay of its own
	// (nil: no boot disk).
	Image *Image `json:"image,omitempty"`
	// Accelerator is AccelKVM ("" too) or AccelTCG.
	Accelerator string `json:"accelerator,omitempty"`
	// SeedID names the seed's user data without holding it:
	// "sha256:<hex>" of plain user data, "secret:<reference>" of a secret.
	SeedID string `json:"seed_id,omitempty"`
	// NetworkPolicy holds its NICs to the flows it allows (nil: no
	// policy, every flow passes). Only a runtime that enforces it
	// (PolicyEnforcer) defines a domain with one; a changed policy is a
	// changed fingerprint, so the domain is defined again.
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
	// Seed is the instance's NoCloud seed: what its metadata endpoint
	// serves as user-data and meta-data (written by the runtime with the
	// domain, removed with it). It is not part of the fingerprint: SeedID
	// and the meta data are.
	Seed Seed `json:"-"`
	// Local is what the runtime chose on this host for the domain: not
	// part of its definition, so not of its fingerprint.
	Local Local `json:"local,omitzero"`
}

// GPU is a host GPU passed through to a guest: its index in the
// inventory and its PCI address ("0000:3b:00.0").
type GPU struct {
	Index   uint32 `json:"index"`
	Address string `json:"address"`
}

// Image is the base disk a domain boots from, by digest.
type Image struct {
	// Digest is "sha256:<hex>" of the base disk's bytes.
	Digest string `json:"digest"`
	// Base is the base disk's file (in the image store); Format is its
	// format, "raw" or "qcow2". The base is never written: the guest
	// writes a qcow2 overlay of its own.
	Base   string `json:"base"`
	Format string `json:"format"`
}

// Local is what a runtime chose for a domain on this host: where its
// overlay, seed disk and console log are, the kernel it boots directly
// (the host's choice), and each NIC's address on the instance network.
type Local struct {
	// Overlay is the boot disk's copy-on-write overlay over Image.Base.
	Overlay string `json:"overlay,omitempty"`
	// SeedDisk is the NoCloud seed disk (label CIDATA: meta-data and
	// network-config), attached read-only.
	SeedDisk string `json:"seed_disk,omitempty"`
	// ConsoleLog is where the serial console is written.
	ConsoleLog string `json:"console_log,omitempty"`
	// Kernel boots the domain directly (nil: the firmware boots its disk).
	Kernel *DirectBoot `json:"kernel,omitempty"`
}

// DirectBoot is a kernel, its initrd and its command line.
type DirectBoot struct {
	Kernel  string `json:"kernel"`
	Initrd  string `json:"initrd,omitempty"`
	Cmdline string `json:"cmdline,omitempty"`
}

// Pinning is vCPU i on host CPU HostCPUs[i], every one on NUMA node Node.
type Pinning struct {
	Node     uint32   `json:"node"`
	HostCPUs []uint32 `json:"host_cpus"`
}

// NIC is a network interface on a host bridge, through a tap.
type NIC struct {
	// Bridge is the host bridge it joins.
	Bridge string `json:"bridge"`
	// MAC is its address ("" lets the runtime choose).
	MAC string `json:"mac,omitempty"`
	// Tap is the tap device the runtime made for it (set by the runtime).
	Tap string `json:"tap,omitempty"`
	// Address is the guest's link-local IPv4 address on the instance
	// network (169.254.0.0/16), the one its metadata requests come from
	// and the only one its tap lets through there (the runtime's choice,
	// like Local: not part of the fingerprint).
	Address string `json:"address,omitempty"`
}

// Disk is a volume attached as a virtio disk.
type Disk struct {
	// VolumeID is the volume's id.
	VolumeID string `json:"volume_id"`
	// Path is the volume's file.
	Path string `json:"path"`
	// Serial is the serial the guest sees.
	Serial string `json:"serial,omitempty"`
	// ReadOnly attaches it read-only.
	ReadOnly bool `json:"read_only,omitempty"`
}

// Seed is the NoCloud seed of an instance. UserData may be a secret: it
// is never logged, and the runtime writes it 0600. NetworkConfig is the
// runtime's (it says the NICs' addresses).
type Seed struct {
	UserData      []byte
	MetaData      []byte
	NetworkConfig []byte
}

// Fingerprint identifies a domain's definition (everything but the seed's
// user data, which may be secret: SeedID stands for it, and but what the
// runtime chose on this host, Local and the NICs' addresses): a domain
// defined with the same fingerprint is not defined again, so a secret is
// fetched only for a new definition. A domain without a network policy
// has the fingerprint it had before policies were (the field is omitted).
func (d *Domain) Fingerprint() string {
	def := *d
	def.Local = Local{}
	def.NICs = slices.Clone(d.NICs)
	for i := range def.NICs {
		def.NICs[i].Address = ""
	}
	data, _ := json.Marshal(&def)
	sum := sha256.Sum256(append(data, d.Seed.MetaData...))
	return hex.EncodeToString(sum[:])
}

// Runtime defines, starts, stops and destroys domains. Every method is
// idempotent: defining a domain already defined with the same fingerprint,
// starting a running one, stopping a stopped one or destroying an absent
// one changes nothing and succeeds.
type Runtime interface {
	// Name is the runtime's name (NameLibvirtKVM, …).
	Name() string
	// Version is what the Hello's DriverManifest says.
	Version() string
	// Define creates (or redefines) the domain with its seed and taps;
	// ErrInvalid when the runtime would refuse it (nothing is left then).
	Define(ctx context.Context, d *Domain) error
	// Start starts a defined domain (its taps made again if a reboot took
	// them).
	Start(ctx context.Context, id string) error
	// Stop powers a domain off and keeps it defined.
	Stop(ctx context.Context, id string) error
	// Destroy stops the domain if needed and removes it: its definition,
	// its seed and its taps.
	Destroy(ctx context.Context, id string) error
	// Inspect says what the runtime has of a domain: its state and the
	// fingerprint it was defined with ("" when absent).
	Inspect(ctx context.Context, id string) (State, string, error)
	// List returns the ids of every domain the runtime has.
	List(ctx context.Context) ([]string, error)
}

// TapName is the tap of an instance's i-th NIC: bcdt<8 hex of
// SHA-256(id)>n<i>, at most 15 bytes (an interface name). bcd helper makes
// taps of this name only (ch.taps).
func TapName(id string, i int) string {
	sum := sha256.Sum256([]byte(id))
	return "bcdt" + hex.EncodeToString(sum[:4]) + "n" + itoa(i)
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// WithTaps sets each NIC's tap to TapName(d.ID, i).
func (d *Domain) WithTaps() *Domain {
	for i := range d.NICs {
		d.NICs[i].Tap = TapName(d.ID, i)
	}
	return d
}

// MACFor is the MAC address of an instance's i-th NIC when the spec names
// none: 52:54:00 (QEMU's prefix) and three bytes of SHA-256(id, i), so a
// redefinition keeps it and the host knows it before the guest runs.
func MACFor(id string, i int) string {
	sum := sha256.Sum256([]byte("bcd-mac/v1\x00" + id + "\x00" + itoa(i)))
	return "52:54:00:" + hex.EncodeToString(sum[0:1]) + ":" + hex.EncodeToString(sum[1:2]) + ":" + hex.EncodeToString(sum[2:3])
}

// Usage is what a running domain has used since it started: the live
// counters telemetry exports (docs/protocol.md, "Telemetry").
type Usage struct {
	// CPUTime is the CPU time the guest used.
	CPUTime time.Duration
	// MemoryUsedBytes is the guest memory in use.
	MemoryUsedBytes uint64
	// DiskReadBytes and DiskWriteBytes are its block I/O so far.
	DiskReadBytes, DiskWriteBytes uint64
	// NetRxBytes and NetTxBytes are its network I/O so far.
	NetRxBytes, NetTxBytes uint64
}

// UsageReader is a runtime that can read a running domain's usage. A
// runtime without it reports none (the instance is still counted, with
// its configured size).
type UsageReader interface {
	// Usage reads the usage of the running domain bcd-<id>.
	Usage(ctx context.Context, id string) (Usage, error)
}

// Ballooner is a runtime whose running guests can be ballooned: given
// back memory down to a floor under host pressure, and deflated again.
type Ballooner interface {
	// Balloon is what the running guest has now (its full memory unless
	// ballooned).
	Balloon(ctx context.Context, id string) (uint64, error)
	// SetBalloon sets what it has (its full memory deflates the balloon).
	SetBalloon(ctx context.Context, id string, bytes uint64) error
}
