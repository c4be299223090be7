// The slots: a directory holding two binaries, bcd-a and bcd-b, and the
// entrypoint bcd, a relative symbolic link to one of them that the
// supervisor (systemd, the harness) executes. "Current" is the slot the
// entrypoint names. Beside them, the records: prepared.json (the release
// whose staged bytes were verified), upgrade.json (a swap waiting for the
// new binary's first Welcome), failed.json (releases rolled back, never
// prepared again) and installed.json (the confirmed release of the highest
// sequence: nothing below it is prepared again, a downgrade refused
// release-rollback). The same code runs in bcd node, when bcd owns its slots,
// and in bcd helper as root, when they are root's (docs/daemon.md,
// "Self-update in bcd" and "bcd helper").

package update

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"bcd/internal/config"
	"bcd/internal/pki"
)

// The names in the slots directory.
const (
	SlotA         = "bcd-a"
	SlotB         = "bcd-b"
	Entrypoint    = "bcd"
	UpgradeFile   = "upgrade.json"
	FailedFile    = "failed.json"
	PreparedFile  = "prepared.json"
	InstalledFile = "installed.json"
)

// DefaultConfirmTimeout is how long a new binary has to get its first Welcome.
const DefaultConfirmTimeout = 60 * time.Second

// Release names a verified release.
type Release struct {
	// Version is the daemon version.
	Version string `json:"version"`
	// Sequence orders releases.
	Sequence uint64 `json:"sequence"`
	// SHA256 is the artifact's digest (lowercase hex).
	SHA256 string `json:"sha256"`
	// Size is the artifact's size.
	Size uint64 `json:"size"`
	// AtMs is when it was prepared, or recorded as failed.
	AtMs int64 `json:"at_ms"`
}

// Record is upgrade.json: a swap waiting for its confirmation.
type Record struct {
	// CommandID is the daemon.upgrade command that swapped ("" when the
	// NodeSpec's daemon section did).
	CommandID string `json:"command_id"`
	// Generation is the NodeSpec generation whose daemon section swapped
	// (0 when a command did).
	Generation uint64 `json:"generation,omitempty"`
	// Version and Sequence are the new release's.
	Version  string `json:"version"`
	Sequence uint64 `json:"sequence"`
	// SHA256 is the new binary's digest.
	SHA256 string `json:"sha256"`
	// Previous is the version that swapped.
	Previous string `json:"previous"`
	// PreviousSlot is the slot the entrypoint named before the swap.
	PreviousSlot string `json:"previous_slot"`
	// Slot is the slot the release went into.
	Slot string `json:"slot"`
	// SwappedAtMs is when the entrypoint moved (wall clock).
	SwappedAtMs int64 `json:"swapped_at_ms"`
	// ConfirmTimeoutMs is how long the new binary has to get a Welcome.
	ConfirmTimeoutMs int64 `json:"confirm_timeout_ms"`
	// RolledBack says the entrypoint names PreviousSlot again.
	RolledBack bool `json:"rolled_back,omitempty"`
}

// Origin names what asked for the upgrade: "command <id>" or "spec
// generation <n>".
func (r *Record) Origin() string {
	if r.CommandID == "" {
		return fmt.Sprintf("spec generation %d", r.Generation)
	}
	return "command " + r.CommandID
}

// Deadline is when the new binary must have had its first Welcome.
func (r *Record) Deadline() time.Time {
	return time.UnixMilli(r.SwappedAtMs + r.ConfirmTimeoutMs)
}

// SwapRequest is what a swap needs besides the prepared release.
type SwapRequest struct {
	// CommandID is the daemon.upgrade command ("" for the daemon section).
	CommandID string `json:"command_id"`
	// Generation is the NodeSpec generation of the daemon section (0 for a command).
	Generation uint64 `json:"generation,omitempty"`
	// Previous is the running version.
	Previous string `json:"previous"`
	// ConfirmTimeoutMs bounds the wait for the new binary's Welcome (0: 60 s).
	ConfirmTimeoutMs int64 `json:"confirm_timeout_ms"`
}

// Store is what self-update needs of the slots: *Slots in bcd's own
// directory, or bcd helper's over its socket.
type Store interface {
	// Current is the slot the entrypoint names.
	Current() (string, error)
	// Entrypoint is the path the supervisor executes.
	Entrypoint() string
	// Pending is upgrade.json (nil when no upgrade waits).
	Pending() (*Record, error)
	// Installed is the confirmed release of the highest sequence (nil
	// before the first confirmed upgrade).
	Installed() (*Release, error)
	// Failed lists the releases recorded as failed (rolled back).
	Failed() ([]Release, error)
	// Prepare verifies a signed manifest with the store's pins and the
	// staged file against its artifact, and records the release as prepared.
	Prepare(manifest *pki.Envelope) (*Release, error)
	// Swap copies the prepared release's staged bytes into the other slot,
	// writes upgrade.json and points the entrypoint at the new slot.
	Swap(req SwapRequest) (*Record, error)
	// Confirm removes upgrade.json once version got its Welcome.
	Confirm(version string) (*Record, error)
	// Rollback points the entrypoint at the previous slot again.
	Rollback() (*Record, error)
	// Settle records a rolled-back release as failed and removes upgrade.json.
	Settle(version string) (*Record, error)
}

// Slots is a slots directory this process may write.
type Slots struct {
	// Dir is the slots directory.
	Dir string
	// Staged is the file a download is staged in.
	Staged string
	// StagedUID is the owner a staged file must have.
	StagedUID uint32
	// Policy pins the releases.
	Policy pki.ReleasePolicy
	// OS and Arch pick the artifact (default: this build's).
	OS, Arch string
	// Now is the wall clock (tests).
	Now func() time.Time
	// Log receives update.* lines.
	Log *slog.Logger
}

var _ Store = (*Slots)(nil)

func (s *Slots) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Slots) log() *slog.Logger { return orDiscard(s.Log) }

func (s *Slots) platform() (string, string) { return platform(s.OS, s.Arch) }

// orDiscard is log, or a logger that discards where it is nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log != nil {
		return log
	}
	return slog.New(slog.DiscardHandler)
}

// platform is goos and arch, each defaulting to this build's.
func platform(goos, arch string) (string, string) {
	if goos == "" {
		goos = runtime.GOOS
	}
	if arch == "" {
		arch = runtime.GOARCH
	}
	return goos, arch
}

func (s *Slots) path(name string) string { return filepath.Join(s.Dir, name) }

// Entrypoint is <dir>/bcd.
func (s *Slots) Entrypoint() string { return s.path(Entrypoint) }

// Current reads the entrypoint: bcd-a or bcd-b (CodeNotInstalled otherwise).
func (s *Slots) Current() (string, error) {
	target, err := os.Readlink(s.Entrypoint())
	if err != nil {
		return "", refuseWith(CodeNotInstalled, err, "the entrypoint %s", s.Entrypoint())
	}
	if filepath.IsAbs(target) && filepath.Dir(target) != filepath.Clean(s.Dir) {
		return "", refuse(CodeNotInstalled, "the entrypoint %s names %s, outside %s", s.Entrypoint(), target, s.Dir)
	}
	slot := filepath.Base(target)
	if slot != SlotA && slot != SlotB {
		return "", refuse(CodeNotInstalled, "the entrypoint %s names %s, not %s or %s", s.Entrypoint(), target, SlotA, SlotB)
	}
	return slot, nil
}

// Other is the slot that is not slot.
func Other(slot string) string {
	if slot == SlotA {
		return SlotB
	}
	return SlotA
}

func readJSON(path string, v any) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(path, append(data, '\n'), 0o644)
}

func removeSynced(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return config.SyncDir(filepath.Dir(path))
}

// Pending reads upgrade.json.
func (s *Slots) Pending() (*Record, error) {
	r := &Record{}
	ok, err := readJSON(s.path(UpgradeFile), r)
	if err != nil || !ok {
		return nil, err
	}
	return r, nil
}

// failedFile is failed.json.
type failedFile struct {
	Releases []Release `json:"releases"`
}

// Failed lists the releases recorded as failed.
func (s *Slots) Failed() ([]Release, error) {
	f := failedFile{}
	if _, err := readJSON(s.path(FailedFile), &f); err != nil {
		return nil, err
	}
	return f.Releases, nil
}

// Installed reads installed.json (nil before the first confirmed upgrade).
func (s *Slots) Installed() (*Release, error) {
	r := &Release{}
	ok, err := readJSON(s.path(InstalledFile), r)
	if err != nil || !ok {
		return nil, err
	}
	return r, nil
}

// policy is the pins with the highest installed sequence.
func (s *Slots) policy() (pki.ReleasePolicy, error) {
	p := s.Policy
	installed, err := s.Installed()
	if err != nil {
		return p, err
	}
	if installed != nil {
		p.InstalledSequence = installed.Sequence
	}
	return p, nil
}

// Prepared reads prepared.json (nil when nothing is prepared).
func (s *Slots) Prepared() (*Release, error) {
	r := &Release{}
	ok, err := readJSON(s.path(PreparedFile), r)
	if err != nil || !ok {
		return nil, err
	}
	return r, nil
}
