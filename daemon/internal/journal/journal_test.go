// Tests of the journal rules: seqs and acks, the caps on unacked events,
// done results kept 7 days, the server-time mark that only moves forward,
// and a journal id that survives a restart.

package journal

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"bcd/internal/proto/agentv1"
	bolt "go.etcd.io/bbolt"
)

func open(t *testing.T, path string, opts Options) *Journal {
	t.Helper()
	j, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func heartbeat(at int64) *agentv1.NodeFrame {
	return &agentv1.NodeFrame{Frame: &agentv1.NodeFrame_StatusReport{StatusReport: &agentv1.StatusReport{AppliedGeneration: uint64(at)}}}
}

func TestSeqsIncreaseAndAcksDropEvents(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{})
	for i := 1; i <= 5; i++ {
		seq, err := j.Append(heartbeat(int64(i)))
		if err != nil || seq != uint64(i) {
			t.Fatalf("append %d: seq %d, %v", i, seq, err)
		}
	}
	if err := j.Ack(3); err != nil {
		t.Fatal(err)
	}
	events, _ := j.Unacked(0)
	if len(events) != 2 || events[0].Seq != 4 || events[1].Seq != 5 {
		t.Fatalf("unacked after ack 3: %v", events)
	}
	events, _ = j.Unacked(4)
	if len(events) != 1 || events[0].Seq != 5 {
		t.Fatalf("unacked after 4: %v", events)
	}
	if n, _ := j.EventStats(); n != 2 {
		t.Fatalf("count %d", n)
	}
	// Acks never renumber: the next event continues the sequence.
	if seq, _ := j.Append(heartbeat(6)); seq != 6 {
		t.Fatalf("seq %d after acks", seq)
	}
}

func TestJournalIDAndEventsSurviveARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := j.ID()
	j.Append(heartbeat(1))
	j.Close()
	j = open(t, path, Options{})
	if j.ID() != id || !strings.HasPrefix(id, "jrn_") {
		t.Fatalf("journal id %q, then %q", id, j.ID())
	}
	if events, _ := j.Unacked(0); len(events) != 1 {
		t.Fatalf("%d events after a restart", len(events))
	}
	if seq, _ := j.Append(heartbeat(2)); seq != 2 {
		t.Fatalf("seq %d after a restart", seq)
	}
}

func TestTheAppliedSpecAndGenerationSurviveARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j := open(t, path, Options{})
	if g := j.AppliedGeneration(); g != 0 || j.IsApplied(nil) {
		t.Fatalf("a new journal's applied generation is %d", g)
	}
	if err := j.Update(func(tx *Tx) error { return tx.SetApplied(7, []byte("spec 7")) }); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, path, Options{})
	if g, spec := j.Applied(); g != 7 || string(spec) != "spec 7" || j.AppliedGeneration() != 7 {
		t.Fatalf("applied %d %q, generation %d", g, spec, j.AppliedGeneration())
	}
	if !j.IsApplied([]byte("spec 7")) || j.IsApplied([]byte("spec 8")) {
		t.Fatal("IsApplied does not compare with the applied spec")
	}
}

func TestASecondOpenIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	open(t, path, Options{})
	if _, err := Open(path, Options{LockTimeout: 20 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
}

func TestUnackedEventsAreCappedByCount(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{MaxEvents: 3})
	for i := 1; i <= 5; i++ {
		j.Append(heartbeat(int64(i)))
	}
	events, _ := j.Unacked(0)
	if len(events) != 3 || events[0].Seq != 3 {
		t.Fatalf("kept %v", events)
	}
	if n, _ := j.EventStats(); n != 3 {
		t.Fatalf("count %d", n)
	}
}

func TestUnackedEventsAreCappedByBytes(t *testing.T) {
	big := func() *agentv1.NodeFrame {
		return &agentv1.NodeFrame{Frame: &agentv1.NodeFrame_StatusReport{StatusReport: &agentv1.StatusReport{
			Inventory: []*agentv1.InventorySection{{Name: "x", Content: make([]byte, 1000)}}}}}
	}
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{MaxBytes: 2500})
	for i := 0; i < 4; i++ {
		j.Append(big())
	}
	n, size := j.EventStats()
	if n != 2 || size > 2500 {
		t.Fatalf("kept %d events, %d bytes", n, size)
	}
}

func TestTheDefaultCapsAreTheDesignsLimits(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{})
	if j.maxEvents != 10_000 || j.maxBytes != 64<<20 {
		t.Fatalf("caps %d events, %d bytes", j.maxEvents, j.maxBytes)
	}
}

func TestDoneResultsAreKeptSevenDays(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{Now: func() time.Time { return now }})
	day := 24 * time.Hour
	recs := []*CommandRecord{
		{ID: "old", State: Done, DoneAtMs: now.Add(-7*day - time.Minute).UnixMilli()},
		{ID: "recent", State: Done, DoneAtMs: now.Add(-7*day + time.Minute).UnixMilli()},
		{ID: "running", State: Running, AcceptedAtMs: now.Add(-30 * day).UnixMilli()},
	}
	for _, r := range recs {
		if err := j.PutCommand(r); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := j.Sweep(); n != 1 || err != nil {
		t.Fatalf("swept %d, %v", n, err)
	}
	for id, want := range map[string]bool{"old": false, "recent": true, "running": true} {
		rec, _ := j.Command(id)
		if (rec != nil) != want {
			t.Errorf("%s kept=%v, want %v", id, rec != nil, want)
		}
	}
}

func TestTheMarkOnlyMovesForward(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, _ := Open(path, Options{})
	for _, step := range []struct{ in, want int64 }{{1000, 1000}, {500, 1000}, {2000, 2000}, {0, 2000}} {
		if got, err := j.AdvanceMark(step.in); got != step.want || err != nil {
			t.Fatalf("advance %d: %d, %v", step.in, got, err)
		}
	}
	j.Close()
	j = open(t, path, Options{})
	if j.Mark() != 2000 {
		t.Fatalf("mark %d after a restart", j.Mark())
	}
}

func TestATransactionIsAllOrNothing(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{})
	boom := errors.New("boom")
	err := j.Update(func(tx *Tx) error {
		tx.PutCommand(&CommandRecord{ID: "c", State: Done})
		tx.Append(heartbeat(1))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if rec, _ := j.Command("c"); rec != nil {
		t.Fatal("the record survived a failed transaction")
	}
	if j.LastSeq() != 0 {
		t.Fatal("the event survived a failed transaction")
	}
}

func TestAnAckBeyondTheLastEventChangesNothing(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{})
	for i := 1; i <= 3; i++ {
		j.Append(heartbeat(int64(i)))
	}
	if err := j.Ack(1 << 60); !errors.Is(err, ErrAckBeyond) {
		t.Fatalf("ack of 2^60: %v", err)
	}
	if err := j.Ack(4); !errors.Is(err, ErrAckBeyond) {
		t.Fatalf("ack of the next seq: %v", err)
	}
	if n, _ := j.EventStats(); n != 3 || j.LastAcked() != 0 {
		t.Fatalf("%d events kept, last acked %d", n, j.LastAcked())
	}
	if err := j.Ack(3); err != nil {
		t.Fatal(err)
	}
	if n, _ := j.EventStats(); n != 0 {
		t.Fatalf("%d events kept after ack 3", n)
	}
}

func TestTheMarkKeepsWhenItWasHeard(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{Now: func() time.Time { return now }})
	if mark, at := j.MarkHeard(); mark != 0 || at != 0 {
		t.Fatalf("fresh journal: mark %d heard at %d", mark, at)
	}
	j.AdvanceMark(5000)
	now = now.Add(time.Minute)
	j.AdvanceMark(4000) // does not move: the time is kept
	if mark, at := j.MarkHeard(); mark != 5000 || at != 1_700_000_000_000 {
		t.Fatalf("mark %d heard at %d", mark, at)
	}
}

// committed is the id of the journal's last written transaction.
func committed(t *testing.T, j *Journal) (id int, lastAcked uint64) {
	t.Helper()
	if err := j.db.View(func(tx *bolt.Tx) error {
		id, lastAcked = tx.ID(), u64(tx.Bucket(bucketMeta).Get(keyLastAcked))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return id, lastAcked
}

func TestAnAckIsSeenAtOnceAndWrittenWithTheNextChange(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{})
	for i := 1; i <= 5; i++ {
		if _, err := j.Append(heartbeat(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := committed(t, j)
	if err := j.Ack(3); err != nil {
		t.Fatal(err)
	}
	events, err := j.Unacked(0)
	if n, _ := j.EventStats(); err != nil || len(events) != 2 || events[0].GetSeq() != 4 || n != 2 || j.LastAcked() != 3 {
		t.Fatalf("after the ack: %d events from %v, %d counted, last acked %d (%v)", len(events), events, n, j.LastAcked(), err)
	}
	if id, acked := committed(t, j); id != before || acked != 0 {
		t.Fatalf("the ack had a transaction of its own: tx %d → %d, written ack %d", before, id, acked)
	}
	if _, err := j.Append(heartbeat(6)); err != nil {
		t.Fatal(err)
	}
	if id, acked := committed(t, j); id != before+1 || acked != 3 {
		t.Fatalf("the next change did not carry the ack: tx %d → %d, written ack %d", before, id, acked)
	}
}

func TestAnAckWithNoChangeAfterItIsWrittenOnItsOwn(t *testing.T) {
	const delay = 20 * time.Millisecond
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{LazyWriteDelay: delay})
	if _, err := j.Append(heartbeat(1)); err != nil {
		t.Fatal(err)
	}
	if err := j.Ack(1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(100 * delay)
	for _, acked := committed(t, j); acked != 1; _, acked = committed(t, j) {
		if time.Now().After(deadline) {
			t.Fatalf("the ack was not written within %v", 100*delay)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAnAckPendingAtCloseIsKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := j.Append(heartbeat(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Ack(1); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = open(t, path, Options{})
	if events, _ := j.Unacked(0); j.LastAcked() != 1 || len(events) != 1 {
		t.Fatalf("after a reopen: last acked %d, %d unacked", j.LastAcked(), len(events))
	}
}

func TestATransactionThatChangesNothingIsNotWritten(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{})
	if _, err := j.AdvanceMark(1_000); err != nil {
		t.Fatal(err)
	}
	if err := j.writeLazy(); err != nil {
		t.Fatal(err)
	}
	before, _ := committed(t, j)
	if mark, err := j.AdvanceMark(500); err != nil || mark != 1_000 {
		t.Fatalf("mark %d, %v", mark, err)
	}
	if n, err := j.Sweep(); err != nil || n != 0 {
		t.Fatalf("swept %d, %v", n, err)
	}
	if err := j.Ack(0); err != nil {
		t.Fatal(err)
	}
	if id, _ := committed(t, j); id != before {
		t.Fatalf("unchanged journal written: tx %d → %d", before, id)
	}
}

func TestAMarkIsSeenAtOnceAndWrittenWithTheNextChange(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "journal.db"), Options{Now: func() time.Time { return time.UnixMilli(7) }})
	// The first server time is the anchor (mark_test.go); it and every move
	// of the mark are written with the next change.
	if _, err := j.AdvanceMark(1_000); err != nil {
		t.Fatal(err)
	}
	before, _ := committed(t, j)
	if mark, err := j.AdvanceMark(5_000); err != nil || mark != 5_000 {
		t.Fatalf("mark %d, %v", mark, err)
	}
	if mark, heard := j.MarkHeard(); mark != 5_000 || heard != 7 {
		t.Fatalf("after the move: mark %d heard at %d", mark, heard)
	}
	if id, _ := committed(t, j); id != before {
		t.Fatalf("the mark had a transaction of its own: tx %d → %d", before, id)
	}
	if _, err := j.Append(heartbeat(1)); err != nil {
		t.Fatal(err)
	}
	var written int64
	_ = j.db.View(func(tx *bolt.Tx) error { written = int64(u64(tx.Bucket(bucketMeta).Get(keyMark))); return nil })
	if id, _ := committed(t, j); id != before+1 || written != 5_000 {
		t.Fatalf("the next change did not carry the mark: tx %d → %d, written mark %d", before, id, written)
	}
}

// BenchmarkAgentJournal is what a bcd sim agent's journal does in its first
// minute: it opens, takes six events, a spec and four command records.
// TMPDIR=/dev/shm leaves the disk's fsync out of it: 370 µs with bbolt's
// first map of 32 KiB, 300 µs with initialMmapBytes.
func BenchmarkAgentJournal(b *testing.B) {
	dir := b.TempDir()
	payload := strings.Repeat("x", 4000)
	for i := range b.N {
		j, err := Open(filepath.Join(dir, strconv.Itoa(i)), Options{})
		if err != nil {
			b.Fatal(err)
		}
		for range 6 {
			if _, err := j.Append(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_Hello{Hello: &agentv1.Hello{NodeId: payload}}}); err != nil {
				b.Fatal(err)
			}
		}
		if err := j.Put("spec", []byte(payload)); err != nil {
			b.Fatal(err)
		}
		for k := range 4 {
			rec := &CommandRecord{ID: "cmd-" + strconv.Itoa(k), Kind: "node.inventory.refresh", State: Done,
				Update: []byte(payload[:500]), Delivery: []byte(payload[:1500])}
			if err := j.PutCommand(rec); err != nil {
				b.Fatal(err)
			}
		}
		if err := j.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
