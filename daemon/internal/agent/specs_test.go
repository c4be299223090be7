// The spec queue: handing a desired state over never waits for a
// reconcile, and a newer one replaces the one waiting.

package agent

import (
	"context"
	"testing"
	"time"

	"bcd/internal/proto/agentv1"
)

func TestASpecHandedOverWhileOneAppliesWaitsAndTheNewestWins(t *testing.T) {
	q := newSpecQueue()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	applied := make(chan string, 4)
	release := make(chan struct{})
	go q.run(ctx, func(ds *agentv1.DesiredState) {
		applied <- string(ds.GetSpec().GetPayload())
		if string(ds.GetSpec().GetPayload()) == "1" {
			<-release // a slow reconcile
		}
	})
	spec := func(p string) *agentv1.DesiredState {
		return &agentv1.DesiredState{Spec: &agentv1.Envelope{Payload: []byte(p)}}
	}
	q.put(spec("1"))
	if got := <-applied; got != "1" {
		t.Fatalf("applied %q first", got)
	}
	handed := make(chan struct{})
	go func() {
		q.put(spec("2"))
		q.put(spec("3"))
		close(handed)
	}()
	select {
	case <-handed:
	case <-time.After(5 * time.Second):
		t.Fatal("handing a spec over waited for the reconcile under way")
	}
	close(release)
	if got := <-applied; got != "3" {
		t.Fatalf("applied %q after the slow one; the newest is 3", got)
	}
	// The next one applied is the next one handed over: the replaced 2 never is.
	q.put(spec("4"))
	if got := <-applied; got != "4" {
		t.Fatalf("%q applied: a replaced spec is not applied", got)
	}
}
