// The event log: node frames appended with a per-journal seq (the oldest
// unacked dropped over the caps, never the one just written), acks that
// drop what the gateway has (taken at once, written lazily), and the
// reads of what is still unacked.

package journal

import (
	"errors"
	"fmt"

	"bcd/internal/proto/agentv1"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// ErrAckBeyond means an ack names a seq this journal never appended: it
// changes nothing (an ack for events never sent must not drop the unsent
// ones).
var ErrAckBeyond = errors.New("ack beyond the last event appended")

// Append stores frame as the next event, setting its seq, and drops the
// oldest unacked events while the log is over its caps.
func (t *Tx) Append(frame *agentv1.NodeFrame) (uint64, error) {
	meta, events := t.tx.Bucket(bucketMeta), t.tx.Bucket(bucketEvents)
	seq := u64(meta.Get(keyNextSeq))
	if seq == 0 {
		seq = 1
	}
	frame.Seq = seq
	data, err := proto.Marshal(frame)
	if err != nil {
		return 0, err
	}
	if err := events.Put(seqKey(seq), data); err != nil {
		return 0, err
	}
	count := u64(meta.Get(keyEventCount)) + 1
	size := u64(meta.Get(keyEventBytes)) + uint64(len(data))
	c := events.Cursor()
	for k, v := c.First(); k != nil && (count > uint64(t.j.maxEvents) || size > uint64(t.j.maxBytes)); k, v = c.First() {
		if u64(k) == seq {
			break // never drop the event just written
		}
		count--
		size -= uint64(len(v))
		if err := c.Delete(); err != nil {
			return 0, err
		}
		t.dropped++
	}
	if err := putU64(meta, keyNextSeq, seq+1); err != nil {
		return 0, err
	}
	if err := putU64(meta, keyEventCount, count); err != nil {
		return 0, err
	}
	return seq, putU64(meta, keyEventBytes, size)
}

// Append stores one event in its own transaction.
func (j *Journal) Append(frame *agentv1.NodeFrame) (uint64, error) {
	var seq uint64
	err := j.Update(func(t *Tx) error {
		var err error
		seq, err = t.Append(frame)
		return err
	})
	return seq, err
}

// Ack drops every event with seq ≤ upTo: at once for every reader, in the
// file with the journal's next change or LazyWriteDelay later (see the
// package comment). An upTo beyond the last event appended is ErrAckBeyond
// and changes nothing.
func (j *Journal) Ack(upTo uint64) error {
	if last := j.LastSeq(); upTo > last {
		return fmt.Errorf("%w: ack of %d, last event %d", ErrAckBeyond, upTo, last)
	}
	if upTo <= j.LastAcked() {
		return nil // the events up to it are gone already
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pending.ack = max(j.pending.ack, upTo)
	j.writeLater()
	return nil
}

// ack drops the events with seq ≤ upTo and records upTo as the last acked
// seq; upTo is at most the last seq appended.
func (t *Tx) ack(upTo uint64) error {
	meta, events := t.tx.Bucket(bucketMeta), t.tx.Bucket(bucketEvents)
	count, size := u64(meta.Get(keyEventCount)), u64(meta.Get(keyEventBytes))
	c := events.Cursor()
	for k, v := c.First(); k != nil && u64(k) <= upTo; k, v = c.First() {
		count--
		size -= uint64(len(v))
		if err := c.Delete(); err != nil {
			return err
		}
	}
	if err := putU64(meta, keyEventCount, count); err != nil {
		return err
	}
	if upTo > u64(meta.Get(keyLastAcked)) {
		if err := putU64(meta, keyLastAcked, upTo); err != nil {
			return err
		}
	}
	return putU64(meta, keyEventBytes, size)
}

// acked is the ack taken but not yet written (0 for none).
func (j *Journal) acked() uint64 { return j.lazy().ack }

// LastAcked is the highest seq the gateway acked (0 for none).
func (j *Journal) LastAcked() uint64 {
	return max(j.stored().lastAcked, j.acked())
}

// Unacked returns the stored events with seq > after, in seq order.
func (j *Journal) Unacked(after uint64) ([]*agentv1.NodeFrame, error) {
	after = max(after, j.acked())
	var out []*agentv1.NodeFrame
	err := j.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEvents).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil; k, v = c.Next() {
			f := &agentv1.NodeFrame{}
			if err := proto.Unmarshal(v, f); err != nil {
				return fmt.Errorf("journal event %d: %w", u64(k), err)
			}
			out = append(out, f)
		}
		return nil
	})
	return out, err
}

// EventStats returns the number and total size of unacked events.
func (j *Journal) EventStats() (count int, size int64) {
	acked := j.acked()
	_ = j.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		count, size = int(u64(meta.Get(keyEventCount))), int64(u64(meta.Get(keyEventBytes)))
		c := tx.Bucket(bucketEvents).Cursor()
		for k, v := c.First(); k != nil && u64(k) <= acked; k, v = c.Next() {
			count--
			size -= int64(len(v))
		}
		return nil
	})
	return count, size
}

// LastSeq is the seq of the last event appended (0 for none).
func (j *Journal) LastSeq() uint64 {
	if next := j.stored().nextSeq; next > 0 {
		return next - 1
	}
	return 0
}
