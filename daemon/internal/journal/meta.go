// The meta bucket's small values as last committed, kept in memory: the
// journal file is one process's (bbolt's lock), so nothing but this
// journal's own transactions changes them, and reading them needs no
// transaction. A read-only bbolt transaction allocates a kilobyte or so,
// and the next seq, the last ack, the mark, its anchor and the applied
// generation are read several times in each Welcome, ack, heartbeat and
// report (in bcd sim, bbolt's read transactions were a twelfth of its CPU
// while a fleet reconnected).

package journal

import (
	bolt "go.etcd.io/bbolt"
)

// metaValues are the meta bucket's small values after a transaction.
type metaValues struct {
	txid                           uint64 // the transaction that wrote them (bbolt's, increasing)
	nextSeq, lastAcked, generation uint64
	mark, markHeard                int64
	anchor, anchorHeard            int64
}

// readCommitted reads them in tx.
func readCommitted(tx *bolt.Tx) metaValues {
	meta := tx.Bucket(bucketMeta)
	return metaValues{
		txid:        uint64(tx.ID()),
		nextSeq:     u64(meta.Get(keyNextSeq)),
		lastAcked:   u64(meta.Get(keyLastAcked)),
		generation:  u64(meta.Get(keyGeneration)),
		mark:        int64(u64(meta.Get(keyMark))),
		markHeard:   int64(u64(meta.Get(keyMarkHeard))),
		anchor:      int64(u64(meta.Get(keyAnchor))),
		anchorHeard: int64(u64(meta.Get(keyAnchorHeard))),
	}
}

// wrote takes the values a committed transaction read before its commit,
// unless a later transaction's are there already (two commits that return
// in the other order).
func (j *Journal) wrote(c metaValues) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if c.txid >= j.meta.txid {
		j.meta = c
	}
}

// stored is what was last committed.
func (j *Journal) stored() metaValues {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.meta
}
