// Tests of the meta values the journal keeps in memory: what it answers
// without a transaction is what was committed, after each kind of change
// and after a restart.

package journal

import (
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestTheMetaValuesKeptInMemoryAreTheCommittedOnes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j := open(t, path, Options{Now: func() time.Time { return time.UnixMilli(11) }})
	read := func() (v metaValues) {
		_ = j.db.View(func(tx *bolt.Tx) error { v = readCommitted(tx); return nil })
		return v
	}
	check := func(when string) {
		t.Helper()
		kept, fresh := j.stored(), read()
		kept.txid, fresh.txid = 0, 0
		if kept != fresh {
			t.Fatalf("%s: kept %+v, committed %+v", when, kept, fresh)
		}
	}
	check("opened")
	if _, err := j.AdvanceMark(2_000); err != nil {
		t.Fatal(err)
	}
	seq, err := j.Append(heartbeat(1))
	if err != nil {
		t.Fatal(err)
	}
	check("an append with the mark")
	if err := j.Ack(seq); err != nil {
		t.Fatal(err)
	}
	if err := j.Update(func(tx *Tx) error { return tx.SetApplied(3, []byte("spec")) }); err != nil {
		t.Fatal(err)
	}
	check("an ack and a spec")
	if j.LastSeq() != seq || j.LastAcked() != seq || j.AppliedGeneration() != 3 || j.Mark() != 2_000 {
		t.Fatalf("last seq %d, acked %d, generation %d, mark %d", j.LastSeq(), j.LastAcked(), j.AppliedGeneration(), j.Mark())
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = open(t, path, Options{})
	check("reopened")
	if j.LastSeq() != seq || j.LastAcked() != seq || j.AppliedGeneration() != 3 || j.Mark() != 2_000 {
		t.Fatalf("reopened: last seq %d, acked %d, generation %d, mark %d", j.LastSeq(), j.LastAcked(), j.AppliedGeneration(), j.Mark())
	}
}
