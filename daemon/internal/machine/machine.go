// Package machine is what bcd needs from the hardware it runs on: the boot
// id, the inventory (and its canonical sections), a GPU diagnosis, logs, a
// reboot, where CDI specs go, and the command kinds it runs (kinds.go).
// The fakehw build plugs in internal/fakehw; other builds use Host.
package machine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"bcd/internal/dispatch"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// ErrUnsupported marks an operation this machine cannot do.
var ErrUnsupported = errors.New("not supported on this machine")

// The inventory section names (docs/protocol.md, "Inventory").
const (
	SectionSystem  = "system"
	SectionGPUs    = "gpus"
	SectionNetwork = "network"
)

// Machine is the hardware under bcd.
type Machine interface {
	// BootID identifies the current boot.
	BootID() string
	// Hostname is the machine's name.
	Hostname() string
	// HardwareID identifies the machine across reinstalls (a claim, not trusted).
	HardwareID() string
	// Inventory reads the hardware.
	Inventory() (*Inventory, error)
	// Diag runs the GPU diagnosis.
	Diag(ctx context.Context) (*Diag, error)
	// CollectLogs gathers the logs and says what it gathered (JSON).
	CollectLogs(ctx context.Context) ([]byte, error)
	// Reboot reboots: when it returns nil, the process must exit at once.
	Reboot() error
	// CDIDir is where CDI specs are written.
	CDIDir() string
	// Kinds are the command kinds this machine runs, for the dispatcher's
	// registry (what it does not list is UNSUPPORTED).
	Kinds(env KindEnv) []dispatch.Kind
	// Executed records one real execution of a command (fakehw counts them).
	Executed(commandID string) error
	// Hold is how long a command with these params stays RUNNING before
	// its work (fakehw's "hold_ms"; zero elsewhere).
	Hold(params []byte) time.Duration
}

// Starts is a machine that records each start of its agent (fakehw: the
// I2 checker's ground truth of restarts). The agent tells it as it starts.
type Starts interface {
	Started() error
}

// Slices is a machine that runs a hold's booked share of the host (vCPUs,
// memory) in a slice of its own, bcd-alloc-<id>.slice (docs/daemon.md,
// "Hold slices"). A machine without it binds such a hold without a slice.
type Slices interface {
	// MakeSlice makes the allocation's slice limited to vcpus and
	// memoryBytes (0: no limit of that kind) and returns its unit name.
	MakeSlice(id string, vcpus uint32, memoryBytes uint64) (string, error)
	// RemoveSlice removes the allocation's slice (none is no error).
	RemoveSlice(id string) error
}

// SliceName is the slice unit of an allocation: bcd-alloc-<id>.slice, a
// '-' of the id escaped as systemd does (\x2d), so the slice nests
// under bcd-alloc.slice only.
func SliceName(id string) string {
	return "bcd-alloc-" + strings.ReplaceAll(id, "-", `\x2d`) + ".slice"
}

// NVML is a machine whose GPUs are read through NVML (fakehw's fake one;
// a host build has no NVML binding). HasNVML says whether it can be used
// now.
type NVML interface {
	HasNVML() bool
}

// CapabilityOverride is a machine that replaces the capabilities bcd
// advertises (fakehw's BCD_FAKEHW_CAPABILITIES: an older bcd's set, say);
// set says whether it does.
type CapabilityOverride interface {
	Capabilities() (list []string, set bool)
}

// PodRelease is a machine whose Kubernetes pods keep a released
// Kubernetes hold's devices a while (fakehw's
// BCD_FAKEHW_KUBE_POD_RELEASE_MS): bcd stops offering them at once and
// reports the hold released only once the pods let go.
type PodRelease interface {
	PodReleaseDelay() time.Duration
}

// PressureSource is a machine that says how hard it is pressed (Linux's
// pressure stall information: the share of the last 10 s some task
// stalled on memory, on CPU).
type PressureSource interface {
	Pressure() (*agentv1.HostPressure, error)
}

// ParsePSI reads the "some avg10=<percent>" of a /proc/pressure file
// (rounded down; 0 when it has none).
func ParsePSI(text string) uint32 {
	for _, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "some" {
			continue
		}
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, "avg10="); ok {
				if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 && n <= 100 {
					return uint32(n)
				}
			}
		}
	}
	return 0
}

// Diag is the result of diag.nvml.
type Diag struct {
	// GPUs is the number of visible GPUs.
	GPUs int `json:"gpus"`
	// Healthy is how many of them passed.
	Healthy int `json:"healthy"`
	// Driver is the driver version ("" without GPUs).
	Driver string `json:"driver"`
	// Failing are the indexes of the GPUs that failed it.
	Failing []uint32 `json:"failing,omitempty"`
}

// CDIFaults is a machine whose CDI spec writes may fail on purpose (the
// fakehw knob): CDIWriteFault is asked before each write.
type CDIFaults interface {
	CDIWriteFault() error
}

// Inventory is the hardware's description.
type Inventory struct {
	// System is the machine itself.
	System *agentv1.SystemInventory
	// GPUs is nil on a machine without GPUs.
	GPUs *agentv1.GpuInventory
	// Network lists the NICs.
	Network *agentv1.NetworkInventory
}

// Section encodes one message as an inventory section: its deterministic
// protobuf encoding and the lowercase hex SHA-256 of those bytes.
func Section(name string, m proto.Message) (*agentv1.InventorySection, error) {
	content, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(content)
	return &agentv1.InventorySection{Name: name, Content: content, Sha256: hex.EncodeToString(sum[:])}, nil
}

// Sections returns the sections system, gpus (when there are GPUs) and
// network, in that order.
func (inv *Inventory) Sections() ([]*agentv1.InventorySection, error) {
	type named struct {
		name string
		msg  proto.Message
	}
	parts := []named{{SectionSystem, inv.System}}
	if inv.GPUs != nil {
		parts = append(parts, named{SectionGPUs, inv.GPUs})
	}
	parts = append(parts, named{SectionNetwork, inv.Network})
	out := make([]*agentv1.InventorySection, 0, len(parts))
	for _, p := range parts {
		s, err := Section(p.name, p.msg)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
