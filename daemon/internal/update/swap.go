// Moving the entrypoint: Swap copies the prepared release's staged bytes
// into the other slot (checked again after the copy) and writes upgrade.json
// before pointing the entrypoint at it; Confirm records the release as
// installed and removes upgrade.json; Rollback points the entrypoint back;
// Settle records a rolled-back release as failed. Install lays out a new
// slots directory.

package update

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"

	"bcd/internal/config"
)

// Swap copies the staged bytes of the prepared release into the other
// slot (checked again after the copy: the staged file is not this
// process's), writes upgrade.json, then moves the entrypoint. A refusal
// leaves the entrypoint where it was.
func (s *Slots) Swap(req SwapRequest) (*Record, error) {
	if pending, err := s.Pending(); err != nil {
		return nil, err
	} else if pending != nil {
		return nil, refuse(CodePending, "upgrade to %s (%s) waits for its confirmation", pending.Version, pending.Origin())
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
		CommandID: req.CommandID, Generation: req.Generation, Version: prepared.Version, Sequence: prepared.Sequence, SHA256: prepared.SHA256,
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
		"command_id", r.CommandID, "generation", r.Generation, "confirm_timeout_ms", r.ConfirmTimeoutMs)
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
