// The server-time mark (docs/protocol.md, "The server-time mark"): the
// latest server time heard, which only moves forward and is written lazily
// (the package comment), with the local time it last moved; and its
// anchor: the first server time the journal heard and the local time it
// was heard, never moved after. The anchor is the reference the session
// bounds every later server time by (the anchor plus the local time
// since), so that no run of Welcomes, each a little ahead of the last,
// walks the mark away. It is taken at once and written like the mark, in
// the same transaction as the mark's first move (a Welcome's StatusReport
// follows at once): a crash before that transaction loses both, which is
// the journal as it was before that Welcome, and a mark is never written
// without its anchor.

package journal

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
	j.mu.Lock()
	defer j.mu.Unlock()
	if p := j.pending; p.mark > j.meta.mark {
		return p.mark, p.markHeard
	}
	return j.meta.mark, j.meta.markHeard
}

// AdvanceMark sets the mark to max(mark, serverTimeMs) and returns it; when
// it moves, the local time is kept with it (MarkHeard). The move takes
// effect at once and is written with the journal's next change or
// LazyWriteDelay later (see the package comment).
//
// The first server time a journal takes also becomes its anchor (Anchor),
// at once, and is written with that first move of the mark; a journal
// written before anchors were kept anchors at its mark and when that was
// heard, if it knows both.
func (j *Journal) AdvanceMark(serverTimeMs int64) (int64, error) {
	mark, markHeard := j.MarkHeard()
	if serverTimeMs <= mark {
		return mark, nil
	}
	heard := j.now().UnixMilli()
	stored, _ := j.storedAnchor()
	j.mu.Lock()
	defer j.mu.Unlock()
	if stored == 0 && j.pending.anchor == 0 {
		j.pending.anchor, j.pending.anchorHeard = serverTimeMs, heard
		if mark > 0 && markHeard > 0 {
			j.pending.anchor, j.pending.anchorHeard = mark, markHeard
		}
	}
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
	if p := j.lazy(); p.anchor > 0 {
		return p.anchor, p.anchorHeard
	}
	return j.MarkHeard()
}

// storedAnchor is the anchor written (0 when there is none).
func (j *Journal) storedAnchor() (serverTimeMs, heardAtMs int64) {
	c := j.stored()
	return c.anchor, c.anchorHeard
}
