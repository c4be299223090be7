// Self-update in the agent: the daemon.upgrade kind and the daemon
// section's reconciler hand the new binary to Run, which closes everything
// and execs it; a starting agent reports a rolled-back upgrade FAILED (a
// command's; the section reports its own), or confirms its own upgrade on
// the first Welcome (settling the command, or passing the section again)
// and rolls it back when the Welcome does not come in time.

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"bcd/internal/converge"
	"bcd/internal/dispatch"
	"bcd/internal/proto/agentv1"
	selfupdate "bcd/internal/update"
)

// upgradeKind is daemon.upgrade (registered only with an Updater): it runs
// the Updater and, after a swap, hands the entrypoint to Run and leaves the
// command running until the new binary's first Welcome (confirmUpgrade).
func (a *Agent) upgradeKind() dispatch.Kind {
	return dispatch.Kind{Name: selfupdate.Kind, RetrySafe: true, SelfTerminating: true,
		Run: func(ctx context.Context, call dispatch.Call) ([]byte, error) {
			out, err := a.opts.Updater.Upgrade(ctx, call.ID, call.Params)
			if err != nil {
				return nil, err
			}
			if out.Exec == "" {
				return out.Output, nil
			}
			a.requestExec(out.Exec)
			return nil, dispatch.ErrProcessEnding
		}}
}

// resumeUpgrade reads upgrade.json before the session starts.
func (a *Agent) resumeUpgrade(ctx context.Context) error {
	if a.opts.Updater == nil {
		return nil
	}
	res, err := a.opts.Updater.Resume()
	if err != nil {
		return fmt.Errorf("resuming the pending upgrade: %w", err)
	}
	if r := res.Failed; r != nil {
		a.log.Warn("update.failed", "command_id", r.CommandID, "generation", r.Generation, "version", r.Version, "reason", res.Reason)
		if r.CommandID == "" {
			return nil // the daemon section's, left PROGRESSING: Start passes it again, and it reads failed.json
		}
		return a.dispatcher.Settle(r.CommandID, selfupdate.Kind, agentv1.CommandState_FAILED, res.Reason, nil)
	}
	if res.Await == nil {
		return nil
	}
	a.watch = res.Await
	go func() {
		timer := time.NewTimer(time.Until(a.watch.Deadline()))
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		path, err := a.watch.Expire()
		if err != nil {
			a.log.Error("update.rollback_failed", "err", err)
			return
		}
		if path != "" {
			a.requestExec(path)
		}
	}()
	return nil
}

// confirmUpgrade confirms this version's pending upgrade on a Welcome.
func (a *Agent) confirmUpgrade() {
	if a.watch == nil {
		return
	}
	output, err := a.watch.Welcomed()
	if err != nil {
		a.log.Error("update.confirm_failed", "err", err)
		return
	}
	if output == nil {
		return
	}
	r := a.watch.Record()
	if r.CommandID == "" {
		a.converger.Repass(converge.SectionDaemon)
		return
	}
	if err := a.dispatcher.Settle(r.CommandID, selfupdate.Kind, agentv1.CommandState_SUCCEEDED, "", output); err != nil {
		a.log.Error("update.report_failed", "command_id", r.CommandID, "err", err)
	}
}

// daemonReconciler is the daemon section's (selfupdate.SectionReconciler):
// the Updater's steps (none without [update]), the swapped entrypoint
// handed to Run, and a pass again when a download ends.
func (a *Agent) daemonReconciler() converge.Reconciler {
	return selfupdate.NewSection(selfupdate.SectionConfig{Updater: a.opts.Updater, Version: a.opts.Version, Log: a.log,
		Exec: a.requestExec, Wake: func() { a.converger.Repass(converge.SectionDaemon) }})
}

// requestExec asks Run to exec path once everything is closed.
func (a *Agent) requestExec(path string) {
	select {
	case a.exec <- path:
	default:
	}
}

// execute replaces the process with path once everything is closed; when
// that fails the entrypoint names the previous slot again, and the
// supervisor's restart reports the upgrade FAILED.
func (a *Agent) execute(path string) (int, error) {
	a.log.Info("node.exec", "path", path)
	err := fmt.Errorf("no exec in this process")
	if a.opts.Exec != nil {
		if err = a.opts.Exec(path); err == nil {
			return ExitOK, nil // bcd node execs last, in main; a test's Exec only records

		}
	}
	if _, rerr := a.opts.Updater.Store.Rollback(); rerr != nil && !errors.Is(rerr, selfupdate.CodeNotPending) {
		a.log.Error("update.rollback_failed", "err", rerr)
	}
	return ExitError, fmt.Errorf("exec %s: %w", path, err)
}
