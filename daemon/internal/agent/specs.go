// Desired states applied off the session's loop: the session hands each
// DesiredState over and goes on with its heartbeats, pings and commands,
// so a reconcile that takes long (a real guest's domain destroyed under
// TCG, an image copied) never silences the node, which the gateway would
// judge dead after three intervals. One spec is applied at a time; one
// that arrives meanwhile waits, and a newer one replaces it (the converger
// only ever moves to the newest generation). The gateway sends the latest
// spec again after every Welcome, so a spec waiting here when bcd stops
// is not lost.

package agent

import (
	"context"
	"sync"

	"bcd/internal/proto/agentv1"
)

// specQueue holds the next desired state to apply.
type specQueue struct {
	mu   sync.Mutex
	next *agentv1.DesiredState
	wake chan struct{}
}

func newSpecQueue() *specQueue {
	return &specQueue{wake: make(chan struct{}, 1)}
}

// put hands ds over (replacing one not applied yet) and returns at once.
func (q *specQueue) put(ds *agentv1.DesiredState) {
	q.mu.Lock()
	q.next = ds
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the waiting desired state, if any.
func (q *specQueue) take() *agentv1.DesiredState {
	q.mu.Lock()
	defer q.mu.Unlock()
	ds := q.next
	q.next = nil
	return ds
}

// run applies each desired state handed over until ctx ends.
func (q *specQueue) run(ctx context.Context, apply func(*agentv1.DesiredState)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
			if ds := q.take(); ds != nil {
				apply(ds)
			}
		}
	}
}
