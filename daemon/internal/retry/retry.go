// Package retry is how bcd retries a unary call to the gateway that failed
// for a transient reason (docs/daemon.md, "Retries"): a transport error,
// Unavailable (a connection-limit refusal included, whose retry-after-ms
// hint is honoured), ResourceExhausted or DeadlineExceeded. A refusal
// (PermissionDenied, InvalidArgument, FailedPrecondition, …) is never
// retried. The waits are full jitter, random(0, min(cap, base·2^attempt)),
// never shorter than the gateway's hint, within an optional total budget.
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// HintKey is the metadata key of the gateway's retry-after hint (ms).
const HintKey = "retry-after-ms"

// MaxHint bounds a hint a gateway gives (a larger one is held to it).
const MaxHint = time.Minute

// Policy shapes the retries of one call.
type Policy struct {
	// Base is the first attempt's ceiling (default 250 ms).
	Base time.Duration
	// Cap is the largest ceiling (default 10 s).
	Cap time.Duration
	// Budget bounds the time spent waiting and calling in total; 0 retries
	// until the context ends.
	Budget time.Duration
	// Permanent, when set, marks a transient-looking error as final (bcd
	// refusing the gateway's certificate reads as Unavailable).
	Permanent func(error) bool
	// OnRetry, when set, hears each transient failure and the wait after it.
	OnRetry func(attempt int, err error, wait time.Duration)
	// sleep waits (tests replace it); nil waits on a timer or ctx.
	sleep func(ctx context.Context, d time.Duration) error
	// now reads the clock (tests replace it); nil is time.Now.
	now func() time.Time
}

// ErrBudget wraps the last transient error when the budget is spent.
var ErrBudget = errors.New("retry budget spent")

// Transient reports whether err is worth another attempt: not a gRPC status
// (a transport or dial error), or Unavailable, ResourceExhausted,
// DeadlineExceeded, Aborted. A context the caller ended is not.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return !errors.Is(err, context.DeadlineExceeded)
	}
	switch st.Code() {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// Hint reads the retry-after-ms hint from a call's trailer or header (0
// when there is none or it is not a number), held to MaxHint.
func Hint(mds ...metadata.MD) time.Duration {
	for _, md := range mds {
		for _, v := range md.Get(HintKey) {
			if ms, err := strconv.ParseUint(v, 10, 32); err == nil {
				return min(time.Duration(ms)*time.Millisecond, MaxHint)
			}
		}
	}
	return 0
}

// Wait is attempt's full-jitter wait, never shorter than hint.
func (p Policy) Wait(attempt int, hint time.Duration) time.Duration {
	base, ceiling := p.base(), p.cap()
	if attempt < 30 {
		if d := base << attempt; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return max(time.Duration(rand.Int64N(int64(ceiling)+1)), hint)
}

func (p Policy) base() time.Duration {
	if p.Base <= 0 {
		return 250 * time.Millisecond
	}
	return p.Base
}

func (p Policy) cap() time.Duration {
	if p.Cap <= 0 {
		return 10 * time.Second
	}
	return max(p.Cap, p.base())
}

// Unary calls call until it succeeds, fails for a reason that is not
// transient, the context ends or the budget is spent. call gets the call
// options that capture the hint; it must send the same request each time
// (a JoinRequest retried byte for byte is answered the same node).
func Unary[T any](ctx context.Context, p Policy, call func(ctx context.Context, opts ...grpc.CallOption) (T, error)) (T, error) {
	sleep, now := p.sleep, p.now
	if sleep == nil {
		sleep = sleepCtx
	}
	if now == nil {
		now = time.Now
	}
	start := now()
	for attempt := 0; ; attempt++ {
		var header, trailer metadata.MD
		reply, err := call(ctx, grpc.Header(&header), grpc.Trailer(&trailer))
		if err == nil || !Transient(err) || ctx.Err() != nil || (p.Permanent != nil && p.Permanent(err)) {
			return reply, err
		}
		wait := p.Wait(attempt, Hint(trailer, header))
		if p.Budget > 0 && now().Sub(start)+wait > p.Budget {
			var zero T
			return zero, errors.Join(ErrBudget, err)
		}
		if p.OnRetry != nil {
			p.OnRetry(attempt+1, err, wait)
		}
		if serr := sleep(ctx, wait); serr != nil {
			var zero T
			return zero, errors.Join(err, serr)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
