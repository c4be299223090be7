// Preparing a release in the slots: the staged file opened only when it is
// a regular file (no symbolic link) owned by StagedUID, the signed manifest
// verified with the pins and the highest installed sequence, a release
// recorded as failed refused, and the staged bytes checked against this
// platform's artifact before prepared.json is written.

package update

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"bcd/internal/pki"
)

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
