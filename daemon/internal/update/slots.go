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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
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
	// CommandID is the daemon.upgrade command that swapped.
	CommandID string `json:"command_id"`
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

// Deadline is when the new binary must have had its first Welcome.
func (r *Record) Deadline() time.Time {
	return time.UnixMilli(r.SwappedAtMs + r.ConfirmTimeoutMs)
}

// SwapRequest is what a swap needs besides the prepared release.
type SwapRequest struct {
	// CommandID is the daemon.upgrade command.
	CommandID string `json:"command_id"`
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

// openStaged opens the staged file after checking that it is a regular
// file (not a symbolic link) owned by StagedUID.
func (s *Slots) openStaged() (*os.File, error) {
	fi, err := os.Lstat(s.Staged)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, refuse(CodeNothingStaged, "no file at %s", s.Staged)
	}
	if err != nil {
		return nil, refuseWith(CodeNothingStaged, err, "%s", s.Staged)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, refuse(CodeStagedSymlink, "%s is a symbolic link", s.Staged)
	}
	if !fi.Mode().IsRegular() {
		return nil, refuse(CodeStagedNotFile, "%s is not a regular file", s.Staged)
	}
	f, err := os.OpenFile(s.Staged, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, refuse(CodeStagedSymlink, "%s is a symbolic link", s.Staged)
	}
	if err != nil {
		return nil, refuseWith(CodeNothingStaged, err, "%s", s.Staged)
	}
	opened, err := f.Stat()
	if err != nil || !os.SameFile(fi, opened) {
		f.Close()
		return nil, refuse(CodeStagedNotFile, "%s changed while it was opened", s.Staged)
	}
	if st, ok := opened.Sys().(*syscall.Stat_t); !ok || st.Uid != s.StagedUID {
		f.Close()
		owner := -1
		if ok {
			owner = int(st.Uid)
		}
		return nil, refuse(CodeStagedOwner, "%s is owned by uid %d, not %d", s.Staged, owner, s.StagedUID)
	}
	return f, nil
}

// readStaged reads at most limit+1 bytes of the staged file.
func (s *Slots) readStaged(limit uint64) ([]byte, error) {
	f, err := s.openStaged()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, refuseWith(CodeNothingStaged, err, "reading %s", s.Staged)
	}
	return data, nil
}

// Prepare verifies the manifest (pki's order: signatures, threshold,
// JSON, sequence, the installed sequence, expiry at the wall clock),
// refuses a release recorded as failed, picks this platform's artifact,
// checks the staged bytes (size, digest) and writes prepared.json.
func (s *Slots) Prepare(manifest *pki.Envelope) (*Release, error) {
	policy, err := s.policy()
	if err != nil {
		return nil, err
	}
	m, err := pki.VerifyManifest(manifest, policy, s.now())
	if err != nil {
		return nil, err
	}
	failed, err := s.Failed()
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(failed, func(r Release) bool { return r.Version == m.Version }) {
		return nil, refuse(CodeReleaseFailed, "release %s (sequence %d) was rolled back before", m.Version, m.Sequence)
	}
	artifact, err := m.Artifact(s.platform())
	if err != nil {
		return nil, err
	}
	data, err := s.readStaged(artifact.Size)
	if err != nil {
		return nil, err
	}
	if err := artifact.Check(data); err != nil {
		return nil, err
	}
	r := &Release{Version: m.Version, Sequence: m.Sequence, SHA256: hex.EncodeToString(sha256Of(data)), Size: artifact.Size, AtMs: s.now().UnixMilli()}
	if err := writeJSON(s.path(PreparedFile), r); err != nil {
		return nil, err
	}
	s.log().Info("update.prepared", "version", r.Version, "sequence", r.Sequence, "sha256", r.SHA256)
	return r, nil
}

func sha256Of(data []byte) []byte {
	sum := sha256.Sum256(data)
	return sum[:]
}

// Swap copies the staged bytes of the prepared release into the other
// slot (checked again after the copy: the staged file is not this
// process's), writes upgrade.json, then moves the entrypoint. A refusal
// leaves the entrypoint where it was.
func (s *Slots) Swap(req SwapRequest) (*Record, error) {
	if pending, err := s.Pending(); err != nil {
		return nil, err
	} else if pending != nil {
		return nil, refuse(CodePending, "upgrade to %s (command %s) waits for its confirmation", pending.Version, pending.CommandID)
	}
	prepared, err := s.Prepared()
	if err != nil {
		return nil, err
	}
	if prepared == nil {
		return nil, refuse(CodeNothingPrepared, "no release is prepared")
	}
	current, err := s.Current()
	if err != nil {
		return nil, err
	}
	slot := Other(current)
	if err := s.copyStaged(prepared, slot); err != nil {
		return nil, err
	}
	timeout := req.ConfirmTimeoutMs
	if timeout <= 0 {
		timeout = DefaultConfirmTimeout.Milliseconds()
	}
	r := &Record{
		CommandID: req.CommandID, Version: prepared.Version, Sequence: prepared.Sequence, SHA256: prepared.SHA256,
		Previous: req.Previous, PreviousSlot: current, Slot: slot, SwappedAtMs: s.now().UnixMilli(), ConfirmTimeoutMs: timeout,
	}
	if err := writeJSON(s.path(UpgradeFile), r); err != nil {
		return nil, err
	}
	if err := s.point(slot); err != nil {
		_ = removeSynced(s.path(UpgradeFile))
		return nil, err
	}
	if err := removeSynced(s.path(PreparedFile)); err != nil {
		s.log().Warn("update.prepared_not_removed", "err", err)
	}
	s.log().Info("update.swapped", "version", r.Version, "sequence", r.Sequence, "slot", slot, "previous_slot", current,
		"command_id", r.CommandID, "confirm_timeout_ms", r.ConfirmTimeoutMs)
	return r, nil
}

// copyStaged copies the staged file into slot through a temporary file,
// hashing the copy, and renames it into place only when it is the
// prepared release's bytes.
func (s *Slots) copyStaged(prepared *Release, slot string) error {
	src, err := s.openStaged()
	if err != nil {
		return err
	}
	defer src.Close()
	return config.WriteFileAtomicFrom(s.path(slot), 0o755, func(w io.Writer) error {
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(src, int64(prepared.Size)+1))
		if err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); uint64(n) != prepared.Size || got != prepared.SHA256 {
			return refuse(CodeStagedBytes, "%s holds %d bytes with sha256 %s, the prepared release %s has %d bytes with sha256 %s",
				s.Staged, n, got, prepared.Version, prepared.Size, prepared.SHA256)
		}
		return nil
	})
}

// point moves the entrypoint to slot atomically (a new link renamed over it).
func (s *Slots) point(slot string) error {
	tmp := s.path("." + Entrypoint + ".new")
	_ = os.Remove(tmp)
	if err := os.Symlink(slot, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.Entrypoint()); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return config.SyncDir(s.Dir)
}

// pendingFor reads upgrade.json and checks that it is version's.
func (s *Slots) pendingFor(version string) (*Record, error) {
	r, err := s.Pending()
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, refuse(CodeNotPending, "no upgrade waits")
	}
	if r.Version != version {
		return nil, refuse(CodeVersion, "the pending upgrade is to %s, not %s", r.Version, version)
	}
	return r, nil
}

// Confirm removes upgrade.json: version got its Welcome.
func (s *Slots) Confirm(version string) (*Record, error) {
	r, err := s.pendingFor(version)
	if err != nil {
		return nil, err
	}
	if r.RolledBack {
		return nil, refuse(CodeRolledBack, "the upgrade to %s was rolled back", version)
	}
	if current, err := s.Current(); err != nil {
		return nil, err
	} else if current != r.Slot {
		return nil, refuse(CodeRolledBack, "the entrypoint names %s, not %s", current, r.Slot)
	}
	if err := s.recordInstalled(r); err != nil {
		return nil, err
	}
	if err := removeSynced(s.path(UpgradeFile)); err != nil {
		return nil, err
	}
	s.log().Info("update.confirmed", "version", r.Version, "sequence", r.Sequence, "slot", r.Slot, "command_id", r.CommandID)
	return r, nil
}

// recordInstalled writes installed.json for a confirmed upgrade when its
// sequence is the highest installed (before upgrade.json goes: a crash in
// between confirms again, which writes the same).
func (s *Slots) recordInstalled(r *Record) error {
	installed, err := s.Installed()
	if err != nil {
		return err
	}
	if installed != nil && installed.Sequence >= r.Sequence {
		return nil
	}
	return writeJSON(s.path(InstalledFile), &Release{Version: r.Version, Sequence: r.Sequence, SHA256: r.SHA256, AtMs: s.now().UnixMilli()})
}

// Rollback points the entrypoint at the previous slot and marks upgrade.json.
func (s *Slots) Rollback() (*Record, error) {
	r, err := s.Pending()
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, refuse(CodeNotPending, "no upgrade waits")
	}
	if err := s.point(r.PreviousSlot); err != nil {
		return nil, err
	}
	if !r.RolledBack {
		r.RolledBack = true
		if err := writeJSON(s.path(UpgradeFile), r); err != nil {
			return nil, err
		}
	}
	s.log().Warn("update.rolled_back", "version", r.Version, "slot", r.PreviousSlot, "command_id", r.CommandID)
	return r, nil
}

// Settle records the rolled-back release as failed and removes upgrade.json.
func (s *Slots) Settle(version string) (*Record, error) {
	r, err := s.pendingFor(version)
	if err != nil {
		return nil, err
	}
	if !r.RolledBack {
		return nil, refuse(CodeNotRolledBack, "the upgrade to %s was not rolled back", version)
	}
	failed, err := s.Failed()
	if err != nil {
		return nil, err
	}
	failed = append(failed, Release{Version: r.Version, Sequence: r.Sequence, SHA256: r.SHA256, AtMs: s.now().UnixMilli()})
	if err := writeJSON(s.path(FailedFile), failedFile{Releases: failed}); err != nil {
		return nil, err
	}
	if err := removeSynced(s.path(UpgradeFile)); err != nil {
		return nil, err
	}
	s.log().Warn("update.settled", "version", r.Version, "sequence", r.Sequence, "recorded", "failed", "command_id", r.CommandID)
	return r, nil
}

// Install lays out a slots directory: binary copied into bcd-a (0755) and
// the entrypoint naming it. The install script does the same in shell;
// tests and the harness use this.
func Install(dir, binary string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	if err := config.WriteFileAtomic(filepath.Join(dir, SlotA), data, 0o755); err != nil {
		return err
	}
	s := &Slots{Dir: dir}
	return s.point(SlotA)
}

// NotInstalled is the Store of a bcd that has [update] but does not run
// behind an entrypoint: nothing is pending, and every change is refused
// with Err (update-not-installed).
type NotInstalled struct {
	// Err says why.
	Err error
}

var _ Store = NotInstalled{}

func (n NotInstalled) refusal() error {
	if n.Err != nil {
		return n.Err
	}
	return refuse(CodeNotInstalled, "bcd does not run behind an entrypoint")
}

// Current refuses.
func (n NotInstalled) Current() (string, error) { return "", n.refusal() }

// Entrypoint is empty.
func (n NotInstalled) Entrypoint() string { return "" }

// Pending is nothing.
func (n NotInstalled) Pending() (*Record, error) { return nil, nil }

// Installed is nothing.
func (n NotInstalled) Installed() (*Release, error) { return nil, nil }

// Prepare refuses.
func (n NotInstalled) Prepare(*pki.Envelope) (*Release, error) { return nil, n.refusal() }

// Swap refuses.
func (n NotInstalled) Swap(SwapRequest) (*Record, error) { return nil, n.refusal() }

// Confirm refuses.
func (n NotInstalled) Confirm(string) (*Record, error) { return nil, n.refusal() }

// Rollback refuses.
func (n NotInstalled) Rollback() (*Record, error) { return nil, n.refusal() }

// Settle refuses.
func (n NotInstalled) Settle(string) (*Record, error) { return nil, n.refusal() }
