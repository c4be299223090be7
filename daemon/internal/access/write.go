// DirWriter puts the access files under a root as sshd requires them
// (StrictModes): regular files 0644 and directories 0755, none group- or
// world-writable, owned by the writing process (root on a host; the fakehw
// root's owner in a fakehw build), never through a symbolic link. A file
// is written (replaced by a rename) only when its bytes change; the account files of
// accounts no longer listed are removed, and a section that is gone takes
// every file with it.

package access

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"bcd/internal/proto/agentv1"
)

// Writer puts an applied section's files where sshd reads them (env is the
// spec as it came, for a writer that verifies it again: bcd helper).
type Writer interface {
	Write(ctx context.Context, env *agentv1.Envelope, files *Files) error
}

// DirWriter writes under Root.
type DirWriter struct {
	Root string
}

// Write writes files and removes what they no longer hold.
func (w DirWriter) Write(_ context.Context, _ *agentv1.Envelope, files *Files) error {
	for _, dir := range []string{"etc", "etc/ssh", "etc/ssh/sshd_config.d", Dir, AuthorizedKeys, Principals} {
		if err := w.checkDir(dir, len(files.Files) > 0); err != nil {
			return err
		}
	}
	for path, data := range files.Files {
		full := filepath.Join(w.Root, path)
		if old, err := os.ReadFile(full); err == nil && bytes.Equal(old, data) {
			continue
		}
		if err := replace(full, data); err != nil {
			return err
		}
	}
	return w.prune(files)
}

// checkDir makes dir (0755) when make says so, and refuses one that is a
// symbolic link, not a directory, or group- or world-writable.
func (w DirWriter) checkDir(dir string, mk bool) error {
	full := filepath.Join(w.Root, dir)
	fi, err := os.Lstat(full)
	switch {
	case errors.Is(err, os.ErrNotExist) && mk:
		if err := os.Mkdir(full, 0o755); err != nil {
			return err
		}
		return os.Chmod(full, 0o755)
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir():
		return fmt.Errorf("%s is not a directory (a symbolic link is not followed)", full)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is group- or world-writable: sshd would refuse what is under it", full)
	}
	return nil
}

// replace writes data to a temporary file beside path (0644) and renames
// it over path: sshd sees the old file or the new one, never half of it.
// It is not fsynced: the files are derived from the applied spec, and bcd
// passes the section again at every start (Reconciler.Waiting), which
// writes again whatever a crash lost, so a fleet's access files cost no
// fsync (a bcd sim of 10,000 agents writes six each).
func replace(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bcd-access-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// prune removes the files of the access directory the plan does not hold.
func (w DirWriter) prune(files *Files) error {
	for _, dir := range []string{AuthorizedKeys, Principals, Dir} {
		entries, err := os.ReadDir(filepath.Join(w.Root, dir))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			path := dir + "/" + e.Name()
			if _, keep := files.Files[path]; keep || e.IsDir() {
				continue
			}
			if err := os.Remove(filepath.Join(w.Root, path)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	if _, keep := files.Files[DropIn]; !keep {
		if err := os.Remove(filepath.Join(w.Root, DropIn)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
