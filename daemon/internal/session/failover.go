// Failover between several gateways (docs/protocol.md, "Several
// gateways"): the session holds a list of gateways, each a URL and its
// Dialer, and dials the one it was last welcomed on (at start the first).
// Every end of a connection but shutdown and revocation (a failed dial, a
// session that ended before its Welcome, a welcomed stream that dropped,
// a Drain, a session-fenced refusal) moves it to the next gateway of the
// list, round the end to the first, logged session.failover once with
// from, to and reason; Run then waits its usual full-jitter backoff, whose
// ceiling doubles once per round of the list (every gateway failed in a
// row), not per gateway, or, after a Drain, random(0, retry_after_ms),
// since the next gateway is not the one draining. A Welcome resets the
// backoff, and the gateway that welcomed is where the next dial goes until
// it fails. With one gateway nothing moves and a Drain waits exactly
// retry_after_ms.
//
// Each gateway's Dialer is whole: with [websocket] url too, the agent
// makes it Fallback(gRPC to that gateway, the one WebSocket), so the
// WebSocket, a single URL, is tried after each gateway's gRPC dial.

package session

import (
	"errors"
	"math/rand/v2"
	"time"

	"bcd/internal/refusal"
)

// Gateway is one gateway of the session's list.
type Gateway struct {
	// URL names it in logs and in Info.
	URL string
	// Dial opens its streams.
	Dial Dialer
}

// The reasons of a session.failover line.
const (
	// ReasonDial: the dial failed.
	ReasonDial = "dial-failed"
	// ReasonNoWelcome: the session ended before a Welcome was accepted.
	ReasonNoWelcome = "no-welcome"
	// ReasonDropped: a welcomed stream ended (EOF, reset, an error).
	ReasonDropped = "dropped"
	// ReasonLiveness: nothing was heard for 3 heartbeat intervals.
	ReasonLiveness = string(refusal.CodeLiveness)
	// ReasonDrain: the gateway sent Drain.
	ReasonDrain = "drain"
	// ReasonFenced: the gateway refused the session session-fenced (a
	// newer session of the node, on another gateway, replaced it).
	ReasonFenced = string(refusal.CodeSessionFenced)
)

// dialError is a connection that failed at its dial.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// failover is the session's place in its gateway list; only Run moves it.
type failover struct {
	gateways []Gateway
	current  int
}

// gateway is the one the next dial goes to.
func (f *failover) gateway() Gateway { return f.gateways[f.current] }

// size is how many gateways the list holds.
func (f *failover) size() int { return len(f.gateways) }

// several says whether there is another gateway to move to.
func (f *failover) several() bool { return len(f.gateways) > 1 }

// move makes the next gateway of the list (round the end) the current
// one and returns the one left and the one taken.
func (f *failover) move() (from, to Gateway) {
	from = f.gateway()
	f.current = (f.current + 1) % len(f.gateways)
	return from, f.gateway()
}

// failoverReason names why a connection that ended with err (not a
// revocation, not shutdown) moves the session on.
func failoverReason(err error, welcomed bool) string {
	var d *drained
	var dial *dialError
	switch {
	case errors.As(err, &d):
		return ReasonDrain
	case refusal.CodeOfStatus(err) == refusal.CodeSessionFenced:
		return ReasonFenced
	case errors.As(err, &dial):
		return ReasonDial
	case !welcomed:
		return ReasonNoWelcome
	case errors.Is(err, ErrLiveness):
		return ReasonLiveness
	}
	return ReasonDropped
}

// drainJitter is the wait after a Drain when the session moves to another
// gateway: random(0, wait), wait already held to MaxDrainRetryWait.
func drainJitter(wait time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(wait) + 1))
}
