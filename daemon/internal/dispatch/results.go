// Command updates and node-signed results: update builds a CommandUpdate
// frame, a terminal one carrying a NodeStatement{command_result} signed by
// the node key; emit appends a non-terminal one; finish journals a terminal
// one together with the done record (refuse before acceptance, Settle for
// a command settled after its process ended).

package dispatch

import (
	"crypto/rand"
	"fmt"

	"bcd/internal/journal"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// update builds a CommandUpdate frame; terminal states carry a node-signed
// result.
func (d *Dispatcher) update(id, kind string, state agentv1.CommandState, reason string, output []byte) (*agentv1.NodeFrame, error) {
	now := d.cfg.Now().UnixMilli()
	u := &agentv1.CommandUpdate{CommandId: id, State: state, Reason: reason, AtMs: now}
	if terminal(state) {
		stmt := &agentv1.NodeStatement{
			NodeId: d.cfg.NodeID,
			BootId: d.cfg.Machine.BootID(),
			AtMs:   now,
			Body: &agentv1.NodeStatement_CommandResult{CommandResult: &agentv1.CommandResult{
				CommandId: id, Kind: kind, State: state, Reason: reason, Output: output}},
		}
		env, err := pki.SignStatement(rand.Reader, d.cfg.Key, stmt)
		if err != nil {
			return nil, fmt.Errorf("signing the result of %s: %w", id, err)
		}
		u.Result = env.Proto()
	}
	return &agentv1.NodeFrame{Frame: &agentv1.NodeFrame_CommandUpdate{CommandUpdate: u}}, nil
}

func terminal(s agentv1.CommandState) bool {
	switch s {
	case agentv1.CommandState_SUCCEEDED, agentv1.CommandState_FAILED, agentv1.CommandState_EXPIRED, agentv1.CommandState_UNSUPPORTED:
		return true
	}
	return false
}

// emit appends a non-terminal update (ACCEPTED again, RUNNING, BUSY).
func (d *Dispatcher) emit(id, kind string, state agentv1.CommandState, reason string) {
	f, err := d.update(id, kind, state, reason, nil)
	if err == nil {
		_, err = d.cfg.Journal.Append(f)
	}
	if err != nil {
		d.log.Error("dispatch.journal_failed", "command_id", id, "err", err)
		return
	}
	d.cfg.Notify()
}

// refuse ends a command before acceptance; with record, the result is
// kept so that a duplicate delivery gets it again.
func (d *Dispatcher) refuse(cmd *agentv1.Command, state agentv1.CommandState, reason string, record bool) {
	d.log.Info("dispatch.refused", "command_id", cmd.GetId(), "kind", cmd.GetKind(), "state", state.String(), "reason", reason)
	rec := &journal.CommandRecord{ID: cmd.GetId(), Kind: cmd.GetKind(), AcceptedAtMs: d.cfg.Now().UnixMilli()}
	if err := d.finish(rec, state, reason, nil, record); err != nil {
		d.log.Error("dispatch.journal_failed", "command_id", cmd.GetId(), "err", err)
	}
}

// finish journals a terminal update; with record, together with the done
// record.
func (d *Dispatcher) finish(rec *journal.CommandRecord, state agentv1.CommandState, reason string, output []byte, record bool) error {
	f, err := d.update(rec.ID, rec.Kind, state, reason, output)
	if err != nil {
		return err
	}
	data, err := proto.Marshal(f.GetCommandUpdate())
	if err != nil {
		return err
	}
	err = d.cfg.Journal.Update(func(tx *journal.Tx) error {
		if record {
			rec.State, rec.Update, rec.DoneAtMs, rec.Delivery = journal.Done, data, d.cfg.Now().UnixMilli(), nil
			if err := tx.PutCommand(rec); err != nil {
				return err
			}
		}
		_, err := tx.Append(f)
		return err
	})
	if err != nil {
		return err
	}
	d.cfg.Notify()
	return nil
}

// Settle ends a journaled command that is not done with a node-signed
// result: a daemon.upgrade confirmed by the new binary's first Welcome, or
// failed after its rollback. A done command is left alone.
func (d *Dispatcher) Settle(id, kind string, state agentv1.CommandState, reason string, output []byte) error {
	rec, err := d.cfg.Journal.Command(id)
	if err != nil {
		return err
	}
	if rec == nil {
		rec = &journal.CommandRecord{ID: id, Kind: kind, AcceptedAtMs: d.cfg.Now().UnixMilli()}
	}
	if rec.State == journal.Done {
		return nil
	}
	if err := d.finish(rec, state, reason, output, true); err != nil {
		return err
	}
	d.log.Info("dispatch.done", "command_id", id, "kind", rec.Kind, "state", state.String(), "reason", reason)
	return nil
}
