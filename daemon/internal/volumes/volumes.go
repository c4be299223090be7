// Package volumes is the host's volume store (docs/daemon.md, "Volumes"):
// one sparse file per volume, <dir>/<id>.raw, in a store of a known total
// size, of which 5 % (at least 2 GiB) is kept in reserve. A volume is
// created, or grown in place, only when the store has room for it; it is
// never shrunk, and it is destroyed only when asked (the instances
// reconciler does it once the spec no longer lists it and no instance has
// it open). Who may open a volume at once is Share's rule: one writer at a
// time, read-only opens shared only with other readers.
package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// The reserve: 5 % of the store, at least 2 GiB (never more than the store).
const (
	ReservePercent = 5
	ReserveFloor   = 2 << 30
)

// Errors of the store; each wraps into a reason of the instances section.
var (
	// ErrStoreFull is a volume the store has no room to create or grow.
	ErrStoreFull = errors.New("the volume store has no room")
	// ErrShrink is a volume asked smaller than it is.
	ErrShrink = errors.New("volumes are never shrunk")
	// ErrBusy is an open that Share refuses.
	ErrBusy = errors.New("the volume is open by another instance")
	// ErrInvalid is a volume id that cannot name a file, or a zero size.
	ErrInvalid = errors.New("invalid volume")
)

// idPattern is what a volume id may look like.
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Usage is what StatusReport.volume_storage reports.
type Usage struct {
	Total, Available, Reserved, Committed uint64
}

// Volume is one volume of the store.
type Volume struct {
	ID   string
	Size uint64
}

// Store is a directory of volumes.
type Store struct {
	dir      string
	capacity func() (uint64, error)
	mu       sync.Mutex
}

// New returns the store in dir whose total size capacity says (fakehw:
// BCD_FAKEHW_VOLUME_STORE_BYTES; a host: the file system's size).
func New(dir string, capacity func() (uint64, error)) *Store {
	return &Store{dir: dir, capacity: capacity}
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path is a volume's file.
func (s *Store) Path(id string) string { return filepath.Join(s.dir, id+".raw") }

// Reserve is the reserve of a store of total bytes.
func Reserve(total uint64) uint64 {
	r := total / 100 * ReservePercent
	if r < ReserveFloor {
		r = ReserveFloor
	}
	return min(r, total)
}

// Usage reads the store.
func (s *Store) Usage() (Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage()
}

func (s *Store) usage() (Usage, error) {
	total, err := s.capacity()
	if err != nil {
		return Usage{}, err
	}
	list, err := s.list()
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Total: total, Reserved: Reserve(total)}
	for _, v := range list {
		u.Committed += v.Size
	}
	if used := u.Reserved + u.Committed; used < total {
		u.Available = total - used
	}
	return u, nil
}

// List returns the volumes, by id.
func (s *Store) List() ([]Volume, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list()
}

func (s *Store) list() ([]Volume, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Volume
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".raw")
		if !ok || e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		out = append(out, Volume{ID: id, Size: uint64(info.Size())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Ensure creates the volume (a sparse file of size bytes) or grows it in
// place to size; it reports whether it changed anything. ErrStoreFull
// when the store lacks room for the new bytes, ErrShrink when the volume
// is larger: nothing changes then.
func (s *Store) Ensure(id string, size uint64) (bool, error) {
	if !idPattern.MatchString(id) || size == 0 {
		return false, fmt.Errorf("%w: volume %q of %d bytes", ErrInvalid, id, size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var current uint64
	info, err := os.Stat(s.Path(id))
	switch {
	case err == nil:
		current = uint64(info.Size())
	case !errors.Is(err, os.ErrNotExist):
		return false, err
	}
	if size == current && err == nil {
		return false, nil
	}
	if size < current {
		return false, fmt.Errorf("%w: volume %s is %d bytes, the spec says %d", ErrShrink, id, current, size)
	}
	u, err := s.usage()
	if err != nil {
		return false, err
	}
	if grow := size - current; grow > u.Available {
		return false, fmt.Errorf("%w: volume %s needs %d more bytes, %d available (%d total, %d reserved, %d committed)",
			ErrStoreFull, id, grow, u.Available, u.Total, u.Reserved, u.Committed)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return false, err
	}
	f, err := os.OpenFile(s.Path(id), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, err
	}
	err = f.Truncate(int64(size))
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return true, err
}

// Destroy removes a volume (nothing when it is gone already).
func (s *Store) Destroy(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: volume %q", ErrInvalid, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.Remove(s.Path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Open is one instance's open of a volume.
type Open struct {
	Instance string
	ReadOnly bool
}

// Share says whether want may open a volume that opens already have: a
// writer only alone, a reader only beside readers (ErrBusy otherwise).
func Share(opens []Open, want Open) error {
	for _, o := range opens {
		if o.Instance == want.Instance {
			continue
		}
		if !want.ReadOnly || !o.ReadOnly {
			mode := "read-write"
			if o.ReadOnly {
				mode = "read-only"
			}
			return fmt.Errorf("%w: %s has it open %s", ErrBusy, o.Instance, mode)
		}
	}
	return nil
}
