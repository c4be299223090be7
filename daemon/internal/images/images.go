// Package images is a host's image store (docs/daemon.md, "Images"): the
// base disks instances boot from, named by the SHA-256 of their bytes,
// <dir>/<hex>.raw or <dir>/<hex>.qcow2. Resolve finds an image by its
// digest and checks that the file hashes to it before an instance is
// defined over it, hashing a file once per version (its device, inode,
// size, modification and change times): an image that changed is hashed
// again. The store never writes an image: each instance boots a qcow2
// overlay of its own over the base.
package images

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"bcd/internal/runtime"
	"bcd/internal/runtime/plan"
)

var (
	// ErrUnknown is a digest the store has no image of.
	ErrUnknown = errors.New("not in the image store")
	// ErrMismatch is an image whose file does not hash to its digest.
	ErrMismatch = errors.New("does not hash to its digest")
)

// Store is the image store in Dir.
type Store struct {
	Dir string

	mu       sync.Mutex
	verified map[string]stamp
}

// stamp is the version of a file that was hashed.
type stamp struct {
	dev, ino, size       uint64
	mtimeNs, ctimeNs     int64
	digest, path, format string
}

// New returns the store in dir.
func New(dir string) *Store { return &Store{Dir: dir, verified: map[string]stamp{}} }

// Path is where an image of digest and format is (or would be).
func (s *Store) Path(digest, format string) string {
	return filepath.Join(s.Dir, strings.TrimPrefix(digest, "sha256:")+"."+format)
}

// Resolve returns the image of digest: its file and format, checked to
// hash to digest. ErrUnknown when the store has none, ErrMismatch when its
// file hashes to something else.
func (s *Store) Resolve(digest string) (*runtime.Image, error) {
	if !plan.IsDigest(digest) {
		return nil, fmt.Errorf("%w: %q is not an image digest", runtime.ErrInvalid, digest)
	}
	for _, format := range []string{plan.FormatRaw, plan.FormatQcow2} {
		path := s.Path(digest, format)
		st, err := stampOf(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		st.digest, st.path, st.format = digest, path, format
		if err := s.verify(st); err != nil {
			return nil, err
		}
		return &runtime.Image{Digest: digest, Base: path, Format: format}, nil
	}
	return nil, fmt.Errorf("image %s: %w (%s)", digest, ErrUnknown, s.Dir)
}

// verify hashes the file unless this version of it was hashed already.
func (s *Store) verify(st stamp) error {
	s.mu.Lock()
	known, ok := s.verified[st.path]
	s.mu.Unlock()
	if ok && known == st {
		return nil
	}
	f, err := os.Open(st.path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != st.digest {
		return fmt.Errorf("image %s: %s %w: it hashes to %s", st.digest, st.path, ErrMismatch, got)
	}
	s.mu.Lock()
	s.verified[st.path] = st
	s.mu.Unlock()
	return nil
}

// stampOf is a regular file's version.
func stampOf(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	if !fi.Mode().IsRegular() {
		return stamp{}, fmt.Errorf("image %s is not a regular file", path)
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{}, fmt.Errorf("image %s: no stat", path)
	}
	return stamp{dev: uint64(sys.Dev), ino: sys.Ino, size: uint64(sys.Size),
		mtimeNs: sys.Mtim.Nano(), ctimeNs: sys.Ctim.Nano()}, nil
}
