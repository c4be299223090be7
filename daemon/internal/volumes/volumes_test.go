// Tests of the volume store: the reserve, room, growth in place, no
// shrinking, sparse files, destroy, and the sharing rule.

package volumes

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

func store(t *testing.T, total uint64) *Store {
	return New(t.TempDir(), func() (uint64, error) { return total, nil })
}

func TestReserveIsFivePercentWithATwoGiBFloor(t *testing.T) {
	for total, want := range map[uint64]uint64{100 << 30: 5 << 30, 10 << 30: 2 << 30, 1 << 30: 1 << 30, 1 << 40: (1 << 40) / 100 * 5} {
		if got := Reserve(total); got != want {
			t.Errorf("Reserve(%d) = %d, want %d", total, got, want)
		}
	}
}

func TestVolumesAreCreatedAndGrownOnlyWithRoomAndNeverShrunk(t *testing.T) {
	s := store(t, 10<<30) // 2 GiB reserved, 8 GiB for volumes
	if changed, err := s.Ensure("a", 6<<30); err != nil || !changed {
		t.Fatal(changed, err)
	}
	u, _ := s.Usage()
	if u != (Usage{Total: 10 << 30, Reserved: 2 << 30, Committed: 6 << 30, Available: 2 << 30}) {
		t.Fatalf("usage %+v", u)
	}
	if _, err := s.Ensure("b", 3<<30); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("a volume beyond the room: %v", err)
	}
	if _, err := os.Stat(s.Path("b")); !os.IsNotExist(err) {
		t.Fatal("a refused volume left a file")
	}
	if changed, err := s.Ensure("a", 8<<30); err != nil || !changed {
		t.Fatalf("growing within the room: %v", err)
	}
	if _, err := s.Ensure("a", 8<<30+1); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("growing beyond the room: %v", err)
	}
	if _, err := s.Ensure("a", 1<<30); !errors.Is(err, ErrShrink) {
		t.Fatalf("shrinking: %v", err)
	}
	if changed, err := s.Ensure("a", 8<<30); err != nil || changed {
		t.Fatalf("the same size again: %v %v", changed, err)
	}
	info, _ := os.Stat(s.Path("a"))
	if st := info.Sys().(*syscall.Stat_t); info.Size() != 8<<30 || st.Blocks*512 >= 1<<20 {
		t.Fatalf("not a sparse file of 8 GiB: size %d, %d blocks", info.Size(), st.Blocks)
	}
	if err := s.Destroy("a"); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Fatalf("left %v", list)
	}
	if _, err := s.Ensure("../x", 1); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
}

func TestOneWriterReadersOnlyWithReaders(t *testing.T) {
	rw := func(i string) Open { return Open{Instance: i} }
	ro := func(i string) Open { return Open{Instance: i, ReadOnly: true} }
	for _, c := range []struct {
		opens []Open
		want  Open
		ok    bool
	}{
		{nil, rw("a"), true},
		{[]Open{rw("a")}, rw("b"), false},
		{[]Open{rw("a")}, ro("b"), false},
		{[]Open{ro("a")}, rw("b"), false},
		{[]Open{ro("a"), ro("c")}, ro("b"), true},
		{[]Open{rw("a")}, rw("a"), true},
	} {
		if err := Share(c.opens, c.want); (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrBusy)) {
			t.Errorf("Share(%v, %v) = %v", c.opens, c.want, err)
		}
	}
}
