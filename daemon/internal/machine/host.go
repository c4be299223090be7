// Host is the machine of a build without fakehw: it reads the running
// system (host_linux.go) and has no GPUs, since this tree has no NVML
// binding (the nonvml tag is the only GPU backend).

package machine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"bcd/internal/dispatch"
)

// Host is the real machine bcd runs on.
type Host struct {
	cdiDir string
}

// NewHost returns the running host; CDI specs go to /etc/cdi.
func NewHost() *Host { return &Host{cdiDir: "/etc/cdi"} }

// BootID is the kernel's boot id.
func (h *Host) BootID() string { return bootID() }

// Hostname is os.Hostname.
func (h *Host) Hostname() string {
	name, _ := os.Hostname()
	return name
}

// HardwareID hashes the machine id.
func (h *Host) HardwareID() string {
	id, _ := os.ReadFile("/etc/machine-id")
	sum := sha256.Sum256(id)
	return "host-" + hex.EncodeToString(sum[:8])
}

// Inventory reads the system and the network; there are no GPUs without NVML.
func (h *Host) Inventory() (*Inventory, error) {
	return &Inventory{System: systemInventory(h.Hostname()), Network: networkInventory()}, nil
}

// Diag reports no GPUs: this build has no NVML.
func (h *Host) Diag(context.Context) (*Diag, error) {
	return nil, fmt.Errorf("diag.nvml: %w (built without NVML)", ErrUnsupported)
}

// CollectLogs names the journal files it would upload.
func (h *Host) CollectLogs(context.Context) ([]byte, error) {
	files, _ := filepath.Glob("/var/log/*.log")
	return json.Marshal(map[string]any{"files": len(files)})
}

// Reboot is not done by this build.
func (h *Host) Reboot() error { return fmt.Errorf("node.reboot: %w", ErrUnsupported) }

// CDIDir is /etc/cdi.
func (h *Host) CDIDir() string { return h.cdiDir }

// Kinds are what a host build runs itself: diag.nvml and logs.collect (no
// node.reboot: this build does not reboot).
func (h *Host) Kinds(KindEnv) []dispatch.Kind { return []dispatch.Kind{DiagKind(h), LogsKind(h)} }

// Executed does nothing on a real host.
func (h *Host) Executed(string) error { return nil }

// Hold is always zero on a real host.
func (h *Host) Hold([]byte) time.Duration { return 0 }
