// Tests of the mark's anchor: the first server time a journal hears is
// taken at once with the local time it was heard, written with the mark in
// the journal's next change, and never moves after, across restarts; a
// journal kept before anchors anchors at its mark.

package journal

import (
	"path/filepath"
	"testing"
	"time"

	"bcd/internal/proto/agentv1"
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
	// Taken at once, written with the mark in the next change (a
	// Welcome's StatusReport): one commit for the two and the event.
	written := func() (anchor, mark int64) {
		_ = j.db.View(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			anchor, mark = int64(u64(meta.Get(keyAnchor))), int64(u64(meta.Get(keyMark)))
			return nil
		})
		return anchor, mark
	}
	if anchor, heard := j.Anchor(); anchor != 5_000 || heard != 7 {
		t.Fatalf("the anchor taken is %d heard at %d", anchor, heard)
	}
	if anchor, mark := written(); anchor != 0 || mark != 0 || j.Commits() != 0 {
		t.Fatalf("anchor %d and mark %d written in %d commits before the next change", anchor, mark, j.Commits())
	}
	if _, err := j.Append(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_StatusReport{StatusReport: &agentv1.StatusReport{}}}); err != nil {
		t.Fatal(err)
	}
	if anchor, mark := written(); anchor != 5_000 || mark != 5_000 || j.Commits() != 1 {
		t.Fatalf("anchor %d and mark %d written in %d commits with the next change", anchor, mark, j.Commits())
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
	path := filepath.Join(t.TempDir(), "journal.db")
	j := open(t, path, Options{})
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
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = open(t, path, Options{Now: func() time.Time { return time.UnixMilli(90) }})
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
