// Package journal is bcd's durable memory (docs/daemon.md, "The journal"): the journal id,
// the event log (node frames with a per-journal seq, kept until the gateway
// acks them, capped at 64 MiB and 10,000 events), the command records that
// make duplicate delivery safe (accepted before any side effect, running
// with the boot id, done results kept 7 days), the server-time mark that
// only moves forward, and the applied spec. It is one bbolt file: every
// change is a transaction that is fsynced before it returns, so nothing a
// caller was told is written is lost on a crash. The exceptions are an ack
// and a move of the mark, its anchor included (mark.go): each takes effect
// at once for every reader but is written with the next change (for a
// Welcome, its StatusReport), or LazyWriteDelay after it came. An ack lost
// in a crash drops nothing that is needed (the next Welcome names the
// gateway's acked seq again); a mark lost in a crash is at most that much
// older, far inside the 5 minutes the mark's rules allow, and an anchor
// lost goes with its mark (both were taken from the same first Welcome),
// as if that Welcome never came. A transaction that changes nothing is not
// written at all.
package journal

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
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

	commits atomic.Uint64 // transactions written (Commits)
	meta    metaValues    // the meta bucket's values last committed (meta.go), guarded by mu
}

// lazy is what the journal has taken but not yet written (zero: nothing).
type lazy struct {
	ack                 uint64 // the highest seq acked
	mark, markHeard     int64  // the mark and when it moved (Unix ms)
	anchor, anchorHeard int64  // the first server time and when it was heard (mark.go)
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
		} else {
			j.id = newID("jrn_")
			if err := meta.Put(keyJournalID, []byte(j.id)); err != nil {
				return err
			}
		}
		j.meta = readCommitted(tx)
		return nil
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
	var after metaValues
	err := j.db.Update(func(tx *bolt.Tx) error {
		t := &Tx{j: j, tx: tx}
		if err := t.writeLazy(pending); err != nil {
			return err
		}
		if err := fn(t); err != nil && (!errors.Is(err, errUnchanged) || pending == (lazy{})) {
			return err
		}
		dropped = t.dropped
		after = readCommitted(tx)
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	} else if err == nil {
		j.commits.Add(1)
		j.wrote(after)
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

// Commits is how many transactions this journal wrote since it was opened
// (each one fsynced): what the contract's durability costs, which tests
// and benchmarks count.
func (j *Journal) Commits() uint64 { return j.commits.Load() }

// View runs fn in a read-only transaction.
func (j *Journal) View(fn func(*Tx) error) error {
	return j.db.View(func(tx *bolt.Tx) error { return fn(&Tx{j: j, tx: tx}) })
}

// writeLazy writes what was pending when the transaction began: the ack
// (at most the last seq appended), the anchor (unless one is written) and
// the mark, each only forward; the anchor before the mark, in the same
// transaction, so no mark is ever written without its anchor.
func (t *Tx) writeLazy(p lazy) error {
	if p.ack > 0 {
		if err := t.ack(p.ack); err != nil {
			return err
		}
	}
	meta := t.tx.Bucket(bucketMeta)
	if p.anchor > 0 && meta.Get(keyAnchor) == nil {
		if err := putU64(meta, keyAnchorHeard, uint64(max(p.anchorHeard, 0))); err != nil {
			return err
		}
		if err := putU64(meta, keyAnchor, uint64(p.anchor)); err != nil {
			return err
		}
	}
	if p.mark <= int64(u64(meta.Get(keyMark))) {
		return nil
	}
	if err := putU64(meta, keyMarkHeard, uint64(max(p.markHeard, 0))); err != nil {
		return err
	}
	return putU64(meta, keyMark, uint64(p.mark))
}
