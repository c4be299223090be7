// Tests of a refusal's retry-after-ms hint (hint.go): a refused Session
// whose trailer carries it is dialed again after exactly that long, and
// the hint reads through the refusal's wrapping.

package session

import (
	"fmt"
	"io"
	"testing"
	"time"

	"bcd/internal/refusal"
	"google.golang.org/grpc/metadata"
)

// A refused Session whose trailer carries retry-after-ms is dialed again
// after exactly that long, not after the (here 5 ms) jitter; one without
// the hint backs off as usual.
func TestARefusalsRetryAfterHintIsHonouredExactly(t *testing.T) {
	r := start(t, nil)
	s := r.next(t)
	recv(t, s)
	s.SetTrailer(metadata.Pairs("retry-after-ms", "400"))
	refused := time.Now()
	s.End(refusal.Status(refusal.CodeConnectionLimit, "the gateway holds as many connections as it allows"))
	s = r.next(t)
	if waited := time.Since(refused); waited < 400*time.Millisecond {
		t.Fatalf("redialed after %s, the hint said 400ms", waited)
	}
	recv(t, s)
	refused = time.Now()
	s.End(refusal.Status(refusal.CodeConnectionLimit, "no hint this time"))
	s = r.next(t)
	if waited := time.Since(refused); waited > 300*time.Millisecond {
		t.Fatalf("without a hint the redial waited %s (backoff cap 5ms)", waited)
	}
	recv(t, s)
	if r.session.Info().Refused != "" && r.session.Info().Refused != refusal.CodeConnectionLimit {
		t.Fatalf("refused %q", r.session.Info().Refused)
	}
}

func TestHintOfReadsOnlyAHintedRefusal(t *testing.T) {
	st := refusal.Status(refusal.CodeConnectionLimit, "busy")
	h := &hintedRefusal{err: fmt.Errorf("before the Welcome: %w", st), after: time.Second}
	if got := hintOf(fmt.Errorf("wrapped: %w", h)); got != time.Second {
		t.Fatalf("hint %s", got)
	}
	if refusal.CodeOfStatus(h) != refusal.CodeConnectionLimit {
		t.Fatalf("code %q through the hint", refusal.CodeOfStatus(h))
	}
	if hintOf(st) != 0 || withHint(nil, io.EOF) != io.EOF {
		t.Fatal("a refusal without a hint has one")
	}
}
