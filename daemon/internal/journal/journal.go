// Package journal is bcd's durable memory (docs/daemon.md, "The journal"): the journal id,
// the event log (node frames with a per-journal seq, kept until the gateway
// acks them, capped at 64 MiB and 10,000 events), the command records that
// make duplicate delivery safe (accepted before any side effect, running
// with the boot id, done results kept 7 days), the server-time mark that
// only moves forward, and the applied spec. It is one bbolt file: every
// change is a transaction that is fsynced before it returns, so nothing a
// caller was told is written is lost on a crash. The exceptions are an ack
// and a move of the mark (but its first, which also writes its anchor:
// mark.go): each takes effect at once for every reader but is
// written with the next change, or LazyWriteDelay after it came. An ack
// lost in a crash drops nothing that is needed (the next Welcome names the
// gateway's acked seq again); a mark lost in a crash is at most that much
// older, far inside the 5 minutes the mark's rules allow. A transaction
// that changes nothing is not written at all.
package journal

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"bcd/internal/proto/agentv1"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// The limits of docs/daemon.md, "The journal".
const (
	// MaxUnackedEvents is the most unacked events kept; older ones are dropped.
	MaxUnackedEvents = 10_000
	// MaxUnackedBytes is the most bytes of unacked events kept.
	MaxUnackedBytes = 64 << 20
	// DoneRetention is how long a done command's result is kept.
	DoneRetention = 7 * 24 * time.Hour
	// LazyWriteDelay is the longest an ack or a move of the mark waits in
	// memory for the journal's next change before it is written on its own:
	// a gateway acks every event and sends its time in every Welcome and
	// Ping (every 5 s), and a commit of its own for each was half of the
	// journal's commits while a fleet joined. At 30 s a quiet node writes
	// its Pings' mark once in six Pings, and a mark lost in a crash is
	// still far inside the 5 minutes of the mark's rules. (It was 1 s: the
	// commits it left were a twentieth of bcd sim's time.)
	LazyWriteDelay = 30 * time.Second
)

// initialMmapBytes is the journal's first mapping. bbolt maps 32 KiB at
// first and maps the file again, doubling, each time it outgrows the map; a
// new agent's journal did so three or four times in its first minute, each a
// munmap and mmap (a fifth of its journal time: BenchmarkAgentJournal). The
// map is address space, not memory: pages count only once read.
const initialMmapBytes = 1 << 20

// errUnchanged, returned by an Update's function, ends the transaction
// without writing it (it changed nothing); Update then returns nil.
var errUnchanged = errors.New("journal: nothing changed")

// ErrLocked means another process holds the journal.
var ErrLocked = errors.New("journal is locked by another process (is another bcd running on this data dir?)")

// ErrAckBeyond means an ack names a seq this journal never appended: it
// changes nothing (an ack for events never sent must not drop the unsent
// ones).
var ErrAckBeyond = errors.New("ack beyond the last event appended")

var (
	bucketMeta     = []byte("meta")
	bucketEvents   = []byte("events")
	bucketCommands = []byte("commands")
	bucketState    = []byte("state")

	keyJournalID  = []byte("journal_id")
	keyNextSeq    = []byte("next_seq")
	keyEventCount = []byte("event_count")
	keyEventBytes = []byte("event_bytes")
	keyMark       = []byte("server_time_mark_ms")
	keyMarkHeard  = []byte("server_time_mark_heard_ms")
	keyGeneration = []byte("applied_generation")
	keySpec       = []byte("applied_spec")
	keyLastAcked  = []byte("last_acked_seq")
)

// CommandState is how far a command got on this node.
type CommandState string

const (
	// Accepted is written before any side effect of the command.
	Accepted CommandState = "accepted"
	// Running is written right before execution, with the boot id.
	Running CommandState = "running"
	// Done holds the terminal update.
	Done CommandState = "done"
)

// CommandRecord is what the journal knows of one command id.
type CommandRecord struct {
	// ID is the command id.
	ID string `json:"id"`
	// Kind is the command kind.
	Kind string `json:"kind"`
	// State is accepted, running or done.
	State CommandState `json:"state"`
	// RetrySafe says the command may run again after a crash.
	RetrySafe bool `json:"retrySafe"`
	// SelfTerminating says executing it ends the process (node.reboot).
	SelfTerminating bool `json:"selfTerminating"`
	// BootID is the boot the command was running in.
	BootID string `json:"bootId,omitempty"`
	// AcceptedAtMs is when it was accepted (local clock).
	AcceptedAtMs int64 `json:"acceptedAtMs"`
	// DoneAtMs is when it finished (local clock).
	DoneAtMs int64 `json:"doneAtMs,omitempty"`
	// Update is the terminal CommandUpdate (protobuf) once done.
	Update []byte `json:"update,omitempty"`
	// Delivery is the CommandDelivery (protobuf) it was accepted from, so a
	// retry-safe command can run again after a crash.
	Delivery []byte `json:"delivery,omitempty"`
}

// Options tune a journal; zero values take the defaults.
type Options struct {
	// MaxEvents overrides MaxUnackedEvents (tests).
	MaxEvents int
	// MaxBytes overrides MaxUnackedBytes (tests).
	MaxBytes int64
	// Now is the local clock (tests).
	Now func() time.Time
	// Log receives journal.* lines.
	Log *slog.Logger
	// LockTimeout bounds the wait for another process's lock (default 1 s).
	LockTimeout time.Duration
	// LazyWriteDelay overrides LazyWriteDelay (tests).
	LazyWriteDelay time.Duration
}

// Journal is an open journal file.
type Journal struct {
	db        *bolt.DB
	id        string
	maxEvents int
	maxBytes  int64
	now       func() time.Time
	log       *slog.Logger
	lazyDelay time.Duration // LazyWriteDelay, or the Options' own

	// mu guards what is taken but not yet written.
	mu      sync.Mutex
	pending lazy
	flush   *time.Timer // writes pending when no change came first
}

// lazy is what the journal has taken but not yet written (zero: nothing).
type lazy struct {
	ack             uint64 // the highest seq acked
	mark, markHeard int64  // the mark and when it moved (Unix ms)
}

// Open opens (or creates) the journal at path. A new journal gets a fresh
// random journal id.
func Open(path string, opts Options) (*Journal, error) {
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = time.Second
	}
	// The free-page list is not written at each commit but rebuilt from the
	// tree when the journal opens (etcd's settings): a commit still syncs
	// its pages and meta, so nothing committed is lost on a crash, and it
	// writes a page fewer (the list was a sixth of a commit's time).
	// The first map is initialMmapBytes.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType, InitialMmapSize: initialMmapBytes})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("opening the journal %s: %w", path, err)
	}
	j := &Journal{db: db, maxEvents: opts.MaxEvents, maxBytes: opts.MaxBytes, now: opts.Now, log: opts.Log,
		lazyDelay: cmp.Or(opts.LazyWriteDelay, LazyWriteDelay)}
	if j.maxEvents <= 0 {
		j.maxEvents = MaxUnackedEvents
	}
	if j.maxBytes <= 0 {
		j.maxBytes = MaxUnackedBytes
	}
	if j.now == nil {
		j.now = time.Now
	}
	if j.log == nil {
		j.log = slog.New(slog.DiscardHandler)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketEvents, bucketCommands, bucketState} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if id := meta.Get(keyJournalID); id != nil {
			j.id = string(id)
			return nil
		}
		j.id = newID("jrn_")
		return meta.Put(keyJournalID, []byte(j.id))
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return j, nil
}

// newID returns prefix + 16 random bytes in hex.
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Close writes what is pending (an ack, a mark) and closes the file.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.flush != nil {
		j.flush.Stop()
		j.flush = nil
	}
	j.mu.Unlock()
	flushErr := j.writeLazy()
	if err := j.db.Close(); err != nil {
		return err
	}
	return flushErr
}

// writeLazy writes what is pending, if anything, in a transaction of its own.
func (j *Journal) writeLazy() error {
	if j.lazy() == (lazy{}) {
		return nil
	}
	return j.Update(func(*Tx) error { return errUnchanged })
}

// lazy is what is taken but not yet written.
func (j *Journal) lazy() lazy {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.pending
}

// writeLater makes sure what is pending is written within LazyWriteDelay
// (mu held).
func (j *Journal) writeLater() {
	if j.flush == nil {
		j.flush = time.AfterFunc(j.lazyDelay, func() {
			j.mu.Lock()
			j.flush = nil
			j.mu.Unlock()
			if err := j.writeLazy(); err != nil && !errors.Is(err, bolt.ErrDatabaseNotOpen) {
				j.log.Error("journal.write_failed", "err", err)
			}
		})
	}
}

// ID is the journal id, which the Hello carries.
func (j *Journal) ID() string { return j.id }

func u64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func putU64(b *bolt.Bucket, key []byte, v uint64) error {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], v)
	return b.Put(key, buf[:])
}

func seqKey(seq uint64) []byte {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], seq)
	return buf[:]
}

// Tx is one journal transaction: the changes made through it are written
// together or not at all.
type Tx struct {
	j       *Journal
	tx      *bolt.Tx
	dropped int
}

// Update runs fn in one transaction, fsynced before Update returns; what
// is pending (an ack, a mark) is written in it first. A transaction that
// changes nothing (fn returned errUnchanged and nothing was pending) is not
// written.
func (j *Journal) Update(fn func(*Tx) error) error {
	pending := j.lazy()
	var dropped int
	err := j.db.Update(func(tx *bolt.Tx) error {
		t := &Tx{j: j, tx: tx}
		if err := t.writeLazy(pending); err != nil {
			return err
		}
		if err := fn(t); err != nil && (!errors.Is(err, errUnchanged) || pending == (lazy{})) {
			return err
		}
		dropped = t.dropped
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	if err == nil && pending != (lazy{}) {
		j.mu.Lock()
		if j.pending == pending { // else a later change came meanwhile: it stays pending
			j.pending = lazy{}
			if j.flush != nil {
				j.flush.Stop()
				j.flush = nil
			}
		}
		j.mu.Unlock()
	}
	if err == nil && dropped > 0 {
		j.log.Warn("journal.dropped", "events", dropped, "reason", "unacked events over the cap")
	}
	return err
}

// View runs fn in a read-only transaction.
func (j *Journal) View(fn func(*Tx) error) error {
	return j.db.View(func(tx *bolt.Tx) error { return fn(&Tx{j: j, tx: tx}) })
}

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

// writeLazy writes what was pending when the transaction began: the ack
// (at most the last seq appended) and the mark, each only forward.
func (t *Tx) writeLazy(p lazy) error {
	if p.ack > 0 {
		if err := t.ack(p.ack); err != nil {
			return err
		}
	}
	meta := t.tx.Bucket(bucketMeta)
	if p.mark <= int64(u64(meta.Get(keyMark))) {
		return nil
	}
	if err := putU64(meta, keyMarkHeard, uint64(max(p.markHeard, 0))); err != nil {
		return err
	}
	return putU64(meta, keyMark, uint64(p.mark))
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
	var seq uint64
	_ = j.db.View(func(tx *bolt.Tx) error {
		seq = u64(tx.Bucket(bucketMeta).Get(keyLastAcked))
		return nil
	})
	return max(seq, j.acked())
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
	var seq uint64
	_ = j.db.View(func(tx *bolt.Tx) error {
		if next := u64(tx.Bucket(bucketMeta).Get(keyNextSeq)); next > 0 {
			seq = next - 1
		}
		return nil
	})
	return seq
}

// Command returns the record of a command id, if any.
func (t *Tx) Command(id string) (*CommandRecord, error) {
	data := t.tx.Bucket(bucketCommands).Get([]byte(id))
	if data == nil {
		return nil, nil
	}
	rec := &CommandRecord{}
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, fmt.Errorf("journal command %s: %w", id, err)
	}
	return rec, nil
}

// PutCommand stores a command record.
func (t *Tx) PutCommand(rec *CommandRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return t.tx.Bucket(bucketCommands).Put([]byte(rec.ID), data)
}

// Command returns the record of a command id, if any.
func (j *Journal) Command(id string) (*CommandRecord, error) {
	var rec *CommandRecord
	err := j.View(func(t *Tx) error {
		var err error
		rec, err = t.Command(id)
		return err
	})
	return rec, err
}

// PutCommand stores a command record in its own transaction.
func (j *Journal) PutCommand(rec *CommandRecord) error {
	return j.Update(func(t *Tx) error { return t.PutCommand(rec) })
}

// Commands returns every command record.
func (j *Journal) Commands() ([]*CommandRecord, error) {
	var out []*CommandRecord
	err := j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCommands).ForEach(func(k, v []byte) error {
			rec := &CommandRecord{}
			if err := json.Unmarshal(v, rec); err != nil {
				return fmt.Errorf("journal command %s: %w", k, err)
			}
			out = append(out, rec)
			return nil
		})
	})
	return out, err
}

// Sweep removes done commands whose result is older than DoneRetention and
// returns how many it removed.
func (j *Journal) Sweep() (int, error) {
	cutoff := j.now().Add(-DoneRetention).UnixMilli()
	removed := 0
	err := j.Update(func(t *Tx) error {
		c := t.tx.Bucket(bucketCommands).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			rec := &CommandRecord{}
			if json.Unmarshal(v, rec) != nil {
				continue
			}
			if rec.State == Done && rec.DoneAtMs < cutoff {
				if err := c.Delete(); err != nil {
					return err
				}
				removed++
			}
		}
		if removed == 0 {
			return errUnchanged
		}
		return nil
	})
	if removed > 0 {
		j.log.Info("journal.swept", "commands", removed)
	}
	return removed, err
}

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
	_ = j.db.View(func(tx *bolt.Tx) error {
		generation = u64(tx.Bucket(bucketMeta).Get(keyGeneration))
		return nil
	})
	return generation
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
