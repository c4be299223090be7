// The server-time mark (docs/protocol.md, "The server-time mark"): the
// latest server time heard, which only moves forward and is written lazily
// (the package comment), with the local time it last moved; and its
// anchor: the first server time the journal heard and the local time it
// was heard, written at once, in its own transaction, and never moved
// after. The anchor is the reference the session bounds every later server
// time by (the anchor plus the local time since), so that no run of
// Welcomes, each a little ahead of the last, walks the mark away.

package journal

import (
	bolt "go.etcd.io/bbolt"
)

var (
	keyAnchor      = []byte("server_time_anchor_ms")
	keyAnchorHeard = []byte("server_time_anchor_heard_ms")
)

// Mark returns the server-time mark (0 before any Welcome).
func (j *Journal) Mark() int64 {
	mark, _ := j.MarkHeard()
	return mark
}

// MarkHeard returns the mark and when, on the local clock, it last moved
// (Unix ms; 0 when unknown: before any Welcome, or a journal written before
// this was kept).
func (j *Journal) MarkHeard() (mark, heardAtMs int64) {
	_ = j.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		mark, heardAtMs = int64(u64(meta.Get(keyMark))), int64(u64(meta.Get(keyMarkHeard)))
		return nil
	})
	if p := j.lazy(); p.mark > mark {
		return p.mark, p.markHeard
	}
	return mark, heardAtMs
}

// AdvanceMark sets the mark to max(mark, serverTimeMs) and returns it; when
// it moves, the local time is kept with it (MarkHeard). The move takes
// effect at once and is written with the journal's next change or
// LazyWriteDelay later (see the package comment).
//
// The first server time a journal takes also becomes its anchor (Anchor),
// written before AdvanceMark returns; a journal written before anchors
// were kept anchors at its mark and when that was heard, if it knows both.
func (j *Journal) AdvanceMark(serverTimeMs int64) (int64, error) {
	mark, markHeard := j.MarkHeard()
	if serverTimeMs <= mark {
		return mark, nil
	}
	heard := j.now().UnixMilli()
	if anchor, _ := j.storedAnchor(); anchor == 0 {
		first, firstHeard := serverTimeMs, heard
		if mark > 0 && markHeard > 0 {
			first, firstHeard = mark, markHeard
		}
		if err := j.anchorAt(first, firstHeard); err != nil {
			return mark, err
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if serverTimeMs > j.pending.mark {
		j.pending.mark, j.pending.markHeard = serverTimeMs, heard
		j.writeLater()
	}
	return j.pending.mark, nil
}

// Anchor returns the first server time this journal heard and when, on
// the local clock (Unix ms), it was heard; both 0 before any. Unlike the
// mark it never moves once written. A journal written before anchors were
// kept, and not yet moved since, answers its mark and when that was heard.
func (j *Journal) Anchor() (serverTimeMs, heardAtMs int64) {
	if anchor, heard := j.storedAnchor(); anchor > 0 {
		return anchor, heard
	}
	return j.MarkHeard()
}

// storedAnchor reads the anchor's keys (0 when there are none).
func (j *Journal) storedAnchor() (serverTimeMs, heardAtMs int64) {
	_ = j.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		serverTimeMs, heardAtMs = int64(u64(meta.Get(keyAnchor))), int64(u64(meta.Get(keyAnchorHeard)))
		return nil
	})
	return serverTimeMs, heardAtMs
}

// anchorAt writes the anchor, unless one is written already.
func (j *Journal) anchorAt(serverTimeMs, heardAtMs int64) error {
	return j.Update(func(t *Tx) error {
		meta := t.tx.Bucket(bucketMeta)
		if meta.Get(keyAnchor) != nil {
			return errUnchanged
		}
		if err := putU64(meta, keyAnchorHeard, uint64(max(heardAtMs, 0))); err != nil {
			return err
		}
		return putU64(meta, keyAnchor, uint64(serverTimeMs))
	})
}
