// Running an accepted command, journal first: start runs it in its own
// goroutine, cancellable; begin journals running{boot_id} (unless the
// acceptance did, in the same transaction: dispatch.go) and counts the
// execution before RUNNING goes out; run calls the kind and journals the
// terminal update. Cancel ends a running command (FAILED cancelled) or
// forgets a deferred one; Stop leaves the running ones running in the
// journal, to be settled on their next delivery.

package dispatch

import (
	"context"
	"errors"
	"time"

	"bcd/internal/journal"
	"bcd/internal/proto/agentv1"
)

// errShutdown cancels running commands when bcd stops: they stay running
// in the journal and are settled on their next delivery.
var errShutdown = errors.New("shutting down")

// errCancelled cancels a command on a Cancel frame.
var errCancelled = errors.New(ReasonCancelled)

// Running is the number of commands running in this process.
func (d *Dispatcher) Running() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.running)
}

// Stop cancels the running commands, which stay running in the journal,
// and waits for their goroutines.
func (d *Dispatcher) Stop() {
	d.mu.Lock()
	d.stopped = true
	for _, cancel := range d.running {
		cancel(errShutdown)
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// Wait waits for every running command to end (tests).
func (d *Dispatcher) Wait() { d.wg.Wait() }

// slot is a command's place among the running ones: its context, which
// Stop and Cancel end.
type slot struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// take registers a command about to run (false while bcd stops: nothing
// starts then, and the gateway delivers it again next session).
func (d *Dispatcher) take(id string) (slot, bool) {
	ctx, cancel := context.WithCancelCause(context.Background())
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		cancel(errShutdown)
		return slot{}, false
	}
	d.running[id] = cancel
	d.wg.Add(1)
	return slot{ctx, cancel}, true
}

// release ends a command's slot.
func (d *Dispatcher) release(id string, s slot) {
	d.mu.Lock()
	delete(d.running, id)
	d.mu.Unlock()
	s.cancel(nil)
	d.wg.Done()
}

// start runs a journaled command (accepted or running in an earlier
// process) in its own goroutine.
func (d *Dispatcher) start(rec *journal.CommandRecord, cmd *agentv1.Command) {
	if s, ok := d.take(rec.ID); ok {
		d.launch(s, rec, cmd, false)
	}
}

// launch runs a command in its slot's goroutine; begun says its acceptance
// journaled it running already and counted its execution.
func (d *Dispatcher) launch(s slot, rec *journal.CommandRecord, cmd *agentv1.Command, begun bool) {
	go func() {
		defer d.release(rec.ID, s)
		d.run(s.ctx, rec, cmd, begun)
	}()
}

// run executes one command: running{boot_id}, the work, the terminal update.
func (d *Dispatcher) run(ctx context.Context, rec *journal.CommandRecord, cmd *agentv1.Command, begun bool) {
	kind, known := d.cfg.Kinds.Lookup(rec.Kind)
	if !known { // accepted by a process that registered it, run by one that does not
		if err := d.finish(rec, agentv1.CommandState_FAILED, unsupported(rec.Kind), nil, true); err != nil {
			d.log.Error("dispatch.journal_failed", "command_id", rec.ID, "err", err)
		}
		return
	}
	if !d.begin(ctx, rec, cmd, begun) {
		return
	}
	var output []byte
	var err error
	if ctx.Err() == nil {
		output, err = kind.Run(ctx, Call{ID: rec.ID, Params: cmd.GetParams()})
		if errors.Is(err, ErrProcessEnding) && kind.SelfTerminating {
			d.log.Info("dispatch.self_terminating", "command_id", rec.ID, "kind", rec.Kind)
			return
		}
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errShutdown):
		d.log.Info("dispatch.interrupted", "command_id", rec.ID, "reason", "shutting down")
		return
	case errors.Is(cause, errCancelled):
		err, output = errCancelled, nil
	}
	state, reason := agentv1.CommandState_SUCCEEDED, ""
	if err != nil {
		state, reason = agentv1.CommandState_FAILED, err.Error()
	}
	if err := d.finish(rec, state, reason, output, true); err != nil {
		d.log.Error("dispatch.journal_failed", "command_id", rec.ID, "err", err)
		return
	}
	d.log.Info("dispatch.done", "command_id", rec.ID, "kind", rec.Kind, "state", state.String(), "reason", reason)
}

// begin journals running{boot_id} and counts the execution, unless the
// acceptance did both (begun), and waits out fakehw's hold; false means the
// journal failed and the command stays as it was.
func (d *Dispatcher) begin(ctx context.Context, rec *journal.CommandRecord, cmd *agentv1.Command, begun bool) bool {
	if !begun {
		boot := d.cfg.Machine.BootID()
		running, err := d.update(rec.ID, rec.Kind, agentv1.CommandState_RUNNING, "", nil)
		if err != nil {
			return false
		}
		rec.State, rec.BootID = journal.Running, boot
		err = d.cfg.Journal.Update(func(tx *journal.Tx) error {
			if err := tx.PutCommand(rec); err != nil {
				return err
			}
			_, err := tx.Append(running)
			return err
		})
		if err != nil {
			d.log.Error("dispatch.journal_failed", "command_id", rec.ID, "err", err)
			return false
		}
		d.begun(rec)
	}
	if hold := d.cfg.Machine.Hold(cmd.GetParams()); hold > 0 {
		timer := time.NewTimer(hold)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}
	return true
}

// begun counts the execution of a command journaled running and lets its
// events go out: the count first (fakehw fsyncs its counter), so whoever
// sees RUNNING sees the count too.
func (d *Dispatcher) begun(rec *journal.CommandRecord) {
	if err := d.cfg.Machine.Executed(rec.ID); err != nil {
		d.log.Error("dispatch.counter_failed", "command_id", rec.ID, "err", err)
	}
	d.cfg.Notify()
	d.log.Info("dispatch.running", "command_id", rec.ID, "kind", rec.Kind, "boot_id", rec.BootID)
}

// Cancel ends a running command FAILED "cancelled" (self-terminating ones
// cannot be cancelled), or forgets a deferred one.
func (d *Dispatcher) Cancel(id string) {
	d.mu.Lock()
	cancel, ok := d.running[id]
	_, deferred := d.deferred[id]
	delete(d.deferred, id)
	d.mu.Unlock()
	rec, _ := d.cfg.Journal.Command(id)
	switch {
	case ok && rec != nil && rec.SelfTerminating:
		d.log.Info("dispatch.cancel_ignored", "command_id", id, "reason", "a self-terminating command cannot be cancelled")
	case ok:
		d.log.Info("dispatch.cancel", "command_id", id)
		cancel(errCancelled)
	case deferred:
		d.log.Info("dispatch.cancel", "command_id", id, "deferred", true)
	default:
		d.log.Info("dispatch.cancel_ignored", "command_id", id, "reason", "not running")
	}
}
