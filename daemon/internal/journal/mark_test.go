// Tests of the mark's anchor: the first server time a journal hears is
// written at once with the local time it was heard and never moves after,
// across restarts; a journal kept before anchors anchors at its mark.

package journal

import (
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestTheFirstServerTimeIsTheAnchorAndNeverMoves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	now := int64(7)
	j := open(t, path, Options{Now: func() time.Time { return time.UnixMilli(now) }})
	if anchor, heard := j.Anchor(); anchor != 0 || heard != 0 {
		t.Fatalf("a new journal's anchor %d heard at %d", anchor, heard)
	}
	if _, err := j.AdvanceMark(5_000); err != nil {
		t.Fatal(err)
	}
	// Written before AdvanceMark returned, not lazily with the mark.
	var written int64
	_ = j.db.View(func(tx *bolt.Tx) error { written = int64(u64(tx.Bucket(bucketMeta).Get(keyAnchor))); return nil })
	if written != 5_000 {
		t.Fatalf("the anchor written is %d", written)
	}
	now = 8
	if _, err := j.AdvanceMark(9_000); err != nil {
		t.Fatal(err)
	}
	if anchor, heard := j.Anchor(); anchor != 5_000 || heard != 7 || j.Mark() != 9_000 {
		t.Fatalf("anchor %d heard at %d, mark %d after a second server time", anchor, heard, j.Mark())
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = open(t, path, Options{})
	if anchor, heard := j.Anchor(); anchor != 5_000 || heard != 7 || j.Mark() != 9_000 {
		t.Fatalf("after a restart: anchor %d heard at %d, mark %d", anchor, heard, j.Mark())
	}
}

func TestAJournalKeptBeforeAnchorsAnchorsAtItsMark(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{Now: func() time.Time { return time.UnixMilli(90) }})
	// What an older bcd wrote: a mark and when it was heard, no anchor.
	if err := j.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := putU64(meta, keyMark, 3_000); err != nil {
			return err
		}
		return putU64(meta, keyMarkHeard, 40)
	}); err != nil {
		t.Fatal(err)
	}
	if anchor, heard := j.Anchor(); anchor != 3_000 || heard != 40 {
		t.Fatalf("anchor %d heard at %d, want the mark's", anchor, heard)
	}
	if _, err := j.AdvanceMark(4_000); err != nil {
		t.Fatal(err)
	}
	if anchor, heard := j.Anchor(); anchor != 3_000 || heard != 40 || j.Mark() != 4_000 {
		t.Fatalf("anchor %d heard at %d, mark %d: the old mark is the anchor", anchor, heard, j.Mark())
	}
}
