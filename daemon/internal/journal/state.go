// The journal's state besides events, commands and the server-time mark
// (mark.go): the applied generation and spec, and the state bucket's
// values (the trust bundle, the allocations, the unbatched-command times).

package journal

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// Applied returns the applied generation and the applied spec's envelope
// (protobuf Envelope bytes; nil before the first spec).
func (j *Journal) Applied() (generation uint64, spec []byte) {
	_ = j.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		generation = u64(meta.Get(keyGeneration))
		if s := meta.Get(keySpec); s != nil {
			spec = append([]byte(nil), s...)
		}
		return nil
	})
	return generation, spec
}

// IsApplied says whether spec is, byte for byte, the applied spec (compared
// in place, without a copy).
func (j *Journal) IsApplied(spec []byte) (same bool) {
	_ = j.db.View(func(tx *bolt.Tx) error {
		applied := tx.Bucket(bucketMeta).Get(keySpec)
		same = applied != nil && bytes.Equal(applied, spec)
		return nil
	})
	return same
}

// AppliedGeneration is Applied's generation alone, without a copy of the
// spec (a Hello, a heartbeat and each report read it).
func (j *Journal) AppliedGeneration() (generation uint64) {
	return j.stored().generation
}

// SetApplied records the applied generation and its spec.
func (t *Tx) SetApplied(generation uint64, spec []byte) error {
	meta := t.tx.Bucket(bucketMeta)
	if err := putU64(meta, keyGeneration, generation); err != nil {
		return err
	}
	return meta.Put(keySpec, spec)
}

// Get returns a value of the state bucket (nil when absent): the trust
// bundle, the allocations, the unbatched-command times.
func (t *Tx) Get(key string) []byte {
	v := t.tx.Bucket(bucketState).Get([]byte(key))
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

// Put sets a value of the state bucket (nil deletes it).
func (t *Tx) Put(key string, value []byte) error {
	if value == nil {
		return t.tx.Bucket(bucketState).Delete([]byte(key))
	}
	return t.tx.Bucket(bucketState).Put([]byte(key), value)
}

// Get reads one value of the state bucket.
func (j *Journal) Get(key string) []byte {
	var v []byte
	_ = j.View(func(t *Tx) error { v = t.Get(key); return nil })
	return v
}

// Put writes one value of the state bucket in its own transaction.
func (j *Journal) Put(key string, value []byte) error {
	return j.Update(func(t *Tx) error { return t.Put(key, value) })
}
