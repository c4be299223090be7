// Tests of daemon.upgrade in the dispatcher: unsupported unless
// registered, journaled running before the upgrade runs, left running
// when the process is about to exec the new binary, settled later by the
// new binary's Welcome (or after a rollback), and a refusal as FAILED.

package dispatch_test

import (
	"context"
	"errors"
	"testing"

	"bcd/internal/dispatch"
	"bcd/internal/journal"
	"bcd/internal/proto/agentv1"
	selfupdate "bcd/internal/update"
)

// UpgradeKind is the kind under test.
const UpgradeKind = selfupdate.Kind

// upgrade registers daemon.upgrade as the agent does (self-terminating,
// retry-safe) with run as its work.
func (r *rig) upgrade(run func(ctx context.Context, call dispatch.Call) ([]byte, error)) {
	r.t.Helper()
	if err := r.kinds.Register(dispatch.Kind{Name: UpgradeKind, RetrySafe: true, SelfTerminating: true, Run: run}); err != nil {
		r.t.Fatal(err)
	}
}

func TestDaemonUpgradeIsUnsupportedWithoutUpdate(t *testing.T) {
	r := newRig(t, false)
	r.deliver(command("up-1", UpgradeKind))
	us := r.await("up-1", agentv1.CommandState_UNSUPPORTED)
	if us[0].GetReason() != `kind-unsupported: "daemon.upgrade"` {
		t.Fatalf("reason %q", us[0].GetReason())
	}
}

func TestDaemonUpgradeStaysRunningAcrossTheExecAndIsSettledLater(t *testing.T) {
	r := newRig(t, false)
	called := make(chan string, 1)
	r.upgrade(func(ctx context.Context, call dispatch.Call) ([]byte, error) {
		rec, err := r.j.Command(call.ID)
		if err != nil || rec.State != journal.Running || rec.BootID != r.m.BootID() || !rec.SelfTerminating {
			t.Errorf("the upgrade ran before running{boot_id} was journaled: %+v %v", rec, err)
		}
		called <- string(call.Params)
		return nil, dispatch.ErrProcessEnding
	})
	r.deliver(command("up-1", UpgradeKind, params(`{"manifest":{}}`), retrySafe()))
	if got := <-called; got != `{"manifest":{}}` {
		t.Fatalf("params %s", got)
	}
	r.d.Wait()
	if got := states(r.updates("up-1")); got != "ACCEPTED,RUNNING" {
		t.Fatalf("updates %s before the exec", got)
	}
	// The new binary, after its first Welcome.
	r = r.restart(false)
	out := []byte(`{"version":"0.9.0","sequence":7,"previous":"0.1.0","slot":"bcd-b"}`)
	if err := r.d.Settle("up-1", UpgradeKind, agentv1.CommandState_SUCCEEDED, "", out); err != nil {
		t.Fatal(err)
	}
	us := r.await("up-1", agentv1.CommandState_SUCCEEDED)
	if res := r.result(us[len(us)-1]); string(res.GetOutput()) != string(out) || res.GetKind() != UpgradeKind {
		t.Fatalf("result %v", res)
	}
	// Settling again, or a redelivery, changes nothing: the stored result.
	if err := r.d.Settle("up-1", UpgradeKind, agentv1.CommandState_FAILED, "rollback: x", nil); err != nil {
		t.Fatal(err)
	}
	r.deliver(command("up-1", UpgradeKind, params(`{"manifest":{}}`), retrySafe()))
	us = r.await("up-1", agentv1.CommandState_SUCCEEDED)
	if got := states(us); got != "ACCEPTED,RUNNING,SUCCEEDED,SUCCEEDED" {
		t.Fatalf("updates %s", got)
	}
}

func TestARefusedDaemonUpgradeFails(t *testing.T) {
	r := newRig(t, false)
	r.upgrade(func(context.Context, dispatch.Call) ([]byte, error) {
		return nil, errors.New("release-threshold: release signed by 1 pinned key(s), 2 required")
	})
	r.deliver(command("up-1", UpgradeKind, retrySafe()))
	us := r.await("up-1", agentv1.CommandState_FAILED)
	if res := r.result(us[len(us)-1]); res.GetReason() != "release-threshold: release signed by 1 pinned key(s), 2 required" {
		t.Fatalf("reason %q", res.GetReason())
	}
}

func TestTheRunningVersionSucceedsAtOnce(t *testing.T) {
	r := newRig(t, false)
	r.upgrade(func(context.Context, dispatch.Call) ([]byte, error) {
		return []byte(`{"version":"0.1.0"}`), nil
	})
	r.deliver(command("up-1", UpgradeKind, retrySafe()))
	us := r.await("up-1", agentv1.CommandState_SUCCEEDED)
	if res := r.result(us[len(us)-1]); string(res.GetOutput()) != `{"version":"0.1.0"}` {
		t.Fatalf("output %s", res.GetOutput())
	}
}

func TestSettlingAnUnknownCommandReportsIt(t *testing.T) {
	r := newRig(t, false)
	if err := r.d.Settle("up-9", UpgradeKind, agentv1.CommandState_FAILED, "rollback: 0.9.0 never connected", nil); err != nil {
		t.Fatal(err)
	}
	us := r.await("up-9", agentv1.CommandState_FAILED)
	if res := r.result(us[0]); res.GetKind() != UpgradeKind {
		t.Fatalf("result %v", res)
	}
}
