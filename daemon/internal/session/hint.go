// A gateway's retry pushback on a refused Session (docs/daemon.md,
// "Session behaviour"): a refusal whose trailer carries the retry-after-ms
// hint (a gateway at its connection limit sends 1000) is retried after
// exactly that long, held to retry.MaxHint, instead of the full-jitter
// backoff; a Drain's retry_after_ms is the frame's, not this.

package session

import (
	"errors"
	"io"
	"time"

	"bcd/internal/retry"
	"google.golang.org/grpc/status"
)

// hintSource is a Stream that can read the gateway's retry-after hint
// once its Recv failed (the gRPC stream: its trailer).
type hintSource interface {
	RetryAfter() time.Duration
}

// RetryAfter reads the retry-after-ms hint of the stream's trailer; it is
// called only after Recv returned an error, when the trailer is there.
func (g grpcStream) RetryAfter() time.Duration { return retry.Hint(g.Trailer()) }

// hintedRefusal is a refusal of the Session that carried a retry hint. It
// is its refusal's status as it is (GRPCStatus), so codes and revocation
// read through it.
type hintedRefusal struct {
	err   error
	after time.Duration
}

func (h *hintedRefusal) Error() string { return h.err.Error() }
func (h *hintedRefusal) Unwrap() error { return h.err }
func (h *hintedRefusal) GRPCStatus() *status.Status {
	var inner interface{ GRPCStatus() *status.Status }
	if errors.As(h.err, &inner) {
		return inner.GRPCStatus()
	}
	return status.Convert(h.err)
}

// withHint wraps a failed Recv's refusal with the stream's hint, when it
// has one; any other error is returned as it is.
func withHint(stream Stream, err error) error {
	src, ok := stream.(hintSource)
	if !ok || errors.Is(err, io.EOF) {
		return err
	}
	if _, refused := status.FromError(err); !refused {
		return err
	}
	if after := src.RetryAfter(); after > 0 {
		return &hintedRefusal{err: err, after: after}
	}
	return err
}

// hintOf is the retry hint an attempt's error carried (0: none).
func hintOf(err error) time.Duration {
	var h *hintedRefusal
	if errors.As(err, &h) {
		return h.after
	}
	return 0
}
