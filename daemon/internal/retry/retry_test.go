// Tests of the retry policy: what is transient, the hint, full jitter
// under the cap, and Unary's stops (success, refusal, budget, context).
package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestTransientAndRefusals(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.New("error reading server preface: use of closed network connection"), true},
		{status.Error(codes.Unavailable, "connection-limit: retry after 1000 ms"), true},
		{status.Error(codes.ResourceExhausted, "busy"), true},
		{status.Error(codes.DeadlineExceeded, "request-timeout: late"), true},
		{fmt.Errorf("wrapped: %w", status.Error(codes.Unavailable, "x")), true},
		{status.Error(codes.PermissionDenied, "token-exhausted: no use left"), false},
		{status.Error(codes.InvalidArgument, "message-malformed: x"), false},
		{status.Error(codes.FailedPrecondition, "x"), false},
		{status.Error(codes.Unauthenticated, "x"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestHint(t *testing.T) {
	if h := Hint(metadata.Pairs(HintKey, "1500")); h != 1500*time.Millisecond {
		t.Fatal(h)
	}
	if h := Hint(nil, metadata.Pairs(HintKey, "20")); h != 20*time.Millisecond {
		t.Fatal("the header is read when the trailer has none:", h)
	}
	if h := Hint(metadata.Pairs(HintKey, "soon")); h != 0 {
		t.Fatal(h)
	}
	if h := Hint(metadata.Pairs(HintKey, "4000000")); h != MaxHint {
		t.Fatal("held to MaxHint:", h)
	}
}

func TestWaitIsFullJitterUnderTheCap(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Cap: time.Second}
	var sawSmall, sawLarge bool
	for i := 0; i < 2000; i++ {
		for attempt := 0; attempt < 40; attempt++ {
			ceiling := min(p.Base<<min(attempt, 20), p.Cap)
			w := p.Wait(attempt, 0)
			if w < 0 || w > ceiling {
				t.Fatalf("attempt %d: %v outside [0, %v]", attempt, w, ceiling)
			}
			if attempt > 10 && w < 100*time.Millisecond {
				sawSmall = true
			}
			if attempt > 10 && w > 900*time.Millisecond {
				sawLarge = true
			}
		}
	}
	if !sawSmall || !sawLarge {
		t.Fatal("the waits are spread over [0, cap]", sawSmall, sawLarge)
	}
	if w := p.Wait(0, 5*time.Second); w != 5*time.Second {
		t.Fatal("never shorter than the hint:", w)
	}
}

// fake is a call that fails with errs in turn, then succeeds.
type fake struct {
	errs  []error
	calls int
	hint  string
}

func (f *fake) call(_ context.Context, opts ...grpc.CallOption) (string, error) {
	f.calls++
	for _, o := range opts {
		if tr, ok := o.(grpc.TrailerCallOption); ok && f.hint != "" {
			*tr.TrailerAddr = metadata.Pairs(HintKey, f.hint)
		}
	}
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return "", err
	}
	return "ok", nil
}

func recordSleeps(p *Policy) *[]time.Duration {
	var waits []time.Duration
	p.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	return &waits
}

func TestUnaryRetriesTransientFailuresThenSucceeds(t *testing.T) {
	f := &fake{errs: []error{errors.New("connection reset"), status.Error(codes.Unavailable, "connection-limit: x")}, hint: "700"}
	p := Policy{Base: time.Millisecond, Cap: 2 * time.Millisecond}
	waits := recordSleeps(&p)
	heard := 0
	p.OnRetry = func(int, error, time.Duration) { heard++ }
	got, err := Unary(context.Background(), p, f.call)
	if err != nil || got != "ok" || f.calls != 3 || heard != 2 {
		t.Fatal(got, err, f.calls, heard)
	}
	for _, w := range *waits {
		if w != 700*time.Millisecond {
			t.Fatal("the gateway's hint is honoured:", *waits)
		}
	}
}

func TestUnaryNeverRetriesARefusal(t *testing.T) {
	refused := status.Error(codes.PermissionDenied, "token-csr-mismatch: x")
	f := &fake{errs: []error{refused, refused}}
	p := Policy{}
	waits := recordSleeps(&p)
	_, err := Unary(context.Background(), p, f.call)
	if status.Code(err) != codes.PermissionDenied || f.calls != 1 || len(*waits) != 0 {
		t.Fatal(err, f.calls, *waits)
	}
}

func TestUnaryStopsWhenTheBudgetIsSpent(t *testing.T) {
	down := status.Error(codes.Unavailable, "down")
	f := &fake{errs: []error{down, down, down, down, down}, hint: "400"}
	p := Policy{Budget: time.Second}
	// A fake clock the fake sleep advances.
	clock := time.Unix(0, 0)
	p.now = func() time.Time { return clock }
	p.sleep = func(_ context.Context, d time.Duration) error { clock = clock.Add(d); return nil }
	_, err := Unary(context.Background(), p, f.call)
	if !errors.Is(err, ErrBudget) || status.Code(err) != codes.Unavailable || f.calls != 3 {
		t.Fatal(err, f.calls)
	}
}

func TestUnaryStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fake{errs: []error{status.Error(codes.Unavailable, "down")}}
	p := Policy{}
	p.sleep = func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() }
	_, err := Unary(ctx, p, f.call)
	if !errors.Is(err, context.Canceled) || f.calls != 1 {
		t.Fatal(err, f.calls)
	}
}

func TestUnaryStopsOnWhatThePolicyCallsPermanent(t *testing.T) {
	pin := status.Error(codes.Unavailable, "transport: authentication handshake failed: serving-ca-pin: x")
	f := &fake{errs: []error{pin, pin}}
	p := Policy{Permanent: func(err error) bool { return status.Code(err) == codes.Unavailable }}
	recordSleeps(&p)
	if _, err := Unary(context.Background(), p, f.call); err != pin || f.calls != 1 {
		t.Fatal(err, f.calls)
	}
}
