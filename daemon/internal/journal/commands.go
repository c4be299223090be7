// The command records that make duplicate delivery safe: accepted before
// any side effect, running with the boot id, done with the terminal update,
// and swept DoneRetention after they were done.

package journal

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
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
