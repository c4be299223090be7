// Tests of the kind registry: a made-up kind plugs in with one
// registration and runs end to end through Deliver; a kind declared not
// retry-safe never runs twice; a kind that is not self-terminating cannot
// leave its command running; registration refuses duplicates and halves.

package dispatch_test

import (
	"context"
	"errors"
	"testing"

	"bcd/internal/dispatch"
	"bcd/internal/proto/agentv1"
)

// echo is a kind no build has: it returns its params.
func echo(retrySafe bool) dispatch.Kind {
	return dispatch.Kind{Name: "test.echo", RetrySafe: retrySafe, Run: func(ctx context.Context, call dispatch.Call) ([]byte, error) {
		return append([]byte(`{"id":"`+call.ID+`","params":`), append(call.Params, '}')...), ctx.Err()
	}}
}

func TestAMadeUpKindRunsEndToEndWithOneRegistration(t *testing.T) {
	r := newRig(t, true)
	r.deliver(command("e1", "test.echo", params(`{"x":1}`)), rootKey)
	if us := r.await("e1", agentv1.CommandState_UNSUPPORTED); us[0].GetReason() != `kind-unsupported: "test.echo"` {
		t.Fatalf("before registration: reason %q", us[0].GetReason())
	}
	if err := r.kinds.Register(echo(true)); err != nil {
		t.Fatal(err)
	}
	r.deliver(command("e2", "test.echo", params(`{"x":1}`)), rootKey)
	us := r.await("e2", agentv1.CommandState_SUCCEEDED)
	if states(us) != "ACCEPTED,RUNNING,SUCCEEDED" {
		t.Fatalf("updates %s", states(us))
	}
	if res := r.result(us[2]); string(res.GetOutput()) != `{"id":"e2","params":{"x":1}}` || res.GetKind() != "test.echo" {
		t.Fatalf("result %v", res)
	}
	if r.executions("e2") != 1 {
		t.Fatalf("%d executions", r.executions("e2"))
	}
}

func TestAKindThatIsNotRetrySafeIsNeverReExecuted(t *testing.T) {
	r := newRig(t, false)
	if err := r.kinds.Register(echo(false)); err != nil {
		t.Fatal(err)
	}
	c := command("e1", "test.echo", params(`{"hold_ms":60000}`), retrySafe())
	r.deliver(c)
	r.await("e1", agentv1.CommandState_RUNNING)
	r = r.restart(false) // a crash mid-command
	if err := r.kinds.Register(echo(false)); err != nil {
		t.Fatal(err)
	}
	r.deliver(c)
	us := r.await("e1", agentv1.CommandState_FAILED)
	if last := us[len(us)-1]; last.GetReason() != dispatch.ReasonInterrupted {
		t.Fatalf("reason %q", last.GetReason())
	}
	if n := r.executions("e1"); n != 1 {
		t.Fatalf("%d executions, the command said retry_safe but its kind did not", n)
	}
}

func TestOnlyASelfTerminatingKindMayLeaveItsCommandRunning(t *testing.T) {
	r := newRig(t, false)
	err := r.kinds.Register(dispatch.Kind{Name: "test.exit", Run: func(context.Context, dispatch.Call) ([]byte, error) {
		return nil, dispatch.ErrProcessEnding
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.deliver(command("x1", "test.exit"))
	us := r.await("x1", agentv1.CommandState_FAILED)
	if last := us[len(us)-1]; last.GetReason() != dispatch.ErrProcessEnding.Error() {
		t.Fatalf("reason %q", last.GetReason())
	}
}

func TestRegistrationRefusesDuplicatesAndHalfKinds(t *testing.T) {
	reg, err := dispatch.NewRegistry(echo(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(echo(false)); !errors.Is(err, dispatch.ErrKindRegistered) {
		t.Fatalf("a second test.echo: %v", err)
	}
	other := echo(true)
	other.Name = "test.other"
	if err := reg.Register(other, other); !errors.Is(err, dispatch.ErrKindRegistered) {
		t.Fatalf("the same kind twice in one call: %v", err)
	}
	if _, ok := reg.Lookup("test.other"); ok {
		t.Fatal("a refused registration added a kind")
	}
	if err := reg.Register(dispatch.Kind{Name: "test.norun"}); !errors.Is(err, dispatch.ErrKindInvalid) {
		t.Fatalf("a kind without Run: %v", err)
	}
	if err := reg.Register(dispatch.Kind{Run: echo(true).Run}); !errors.Is(err, dispatch.ErrKindInvalid) {
		t.Fatalf("a kind without a name: %v", err)
	}
	if names := reg.Names(); len(names) != 1 || names[0] != "test.echo" {
		t.Fatalf("names %v", names)
	}
}
