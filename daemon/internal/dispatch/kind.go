// The command-kind registry: a Kind declares its name, what it is (retry
// safe, self-terminating, destructive) and how it runs; the dispatcher
// runs only the kinds registered with it and knows no kind by name.
// Registration is what allows a kind: an unregistered kind is UNSUPPORTED
// "kind-unsupported: <kind>".

package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// ErrProcessEnding is what a self-terminating kind's Run returns once it
// has arranged for the process to end (a reboot, the exec of a new
// binary): the command stays running in the journal and is settled after
// the process (a redelivery after the reboot, see Dispatcher.Settle).
// Returned by a kind that is not SelfTerminating it is a failure like any
// other error.
var ErrProcessEnding = errors.New("the process is about to end")

// Errors of Register.
var (
	// ErrKindInvalid is a kind without a name or without Run.
	ErrKindInvalid = errors.New("invalid command kind")
	// ErrKindRegistered is a second kind of the same name.
	ErrKindRegistered = errors.New("command kind already registered")
)

// Call is one execution of a command, as its kind sees it.
type Call struct {
	// ID is the command id.
	ID string
	// Params are the command's params, as sent (JSON for today's kinds).
	Params []byte
}

// Kind is one command kind.
type Kind struct {
	// Name is the kind string of Command.kind ("diag.nvml", …).
	Name string
	// RetrySafe says the kind may run again after a crash interrupted it.
	// A command is re-executed only when it says retry_safe and its kind is
	// RetrySafe; otherwise it ends FAILED "interrupted".
	RetrySafe bool
	// SelfTerminating says the kind ends the process (Run returns
	// ErrProcessEnding); across a reboot it ends SUCCEEDED "rebooted", and
	// it cannot be cancelled.
	SelfTerminating bool
	// Destructive says the kind is destructive by nature. Informational:
	// the command's destructive flag is what the quorum checks.
	Destructive bool
	// Run does the work once the command is journaled running and returns
	// its output (SUCCEEDED) or an error (FAILED with err's text as the
	// reason, so refusals read "<code>: <detail>"). ctx ends on Cancel and
	// when bcd stops.
	Run func(ctx context.Context, call Call) ([]byte, error)
}

// Registry holds the kinds a node runs. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	kinds map[string]Kind
}

// NewRegistry returns a registry holding kinds (see Register).
func NewRegistry(kinds ...Kind) (*Registry, error) {
	r := &Registry{kinds: map[string]Kind{}}
	if err := r.Register(kinds...); err != nil {
		return nil, err
	}
	return r, nil
}

// Register adds kinds; it refuses (and adds none of them) a kind without a
// name or Run, or a name already registered.
func (r *Registry) Register(kinds ...Kind) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, k := range kinds {
		if k.Name == "" || k.Run == nil {
			return fmt.Errorf("%w: %q (a kind needs a name and Run)", ErrKindInvalid, k.Name)
		}
		if _, dup := r.kinds[k.Name]; dup || seen[k.Name] {
			return fmt.Errorf("%w: %q", ErrKindRegistered, k.Name)
		}
		seen[k.Name] = true
	}
	for _, k := range kinds {
		r.kinds[k.Name] = k
	}
	return nil
}

// Lookup returns the kind of that name.
func (r *Registry) Lookup(name string) (Kind, bool) {
	if r == nil {
		return Kind{}, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	k, ok := r.kinds[name]
	return k, ok
}

// Names lists the registered kinds, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.kinds))
	for name := range r.kinds {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// unsupported is the refusal reason of a kind that is not registered.
func unsupported(kind string) string { return fmt.Sprintf("%s: %q", ReasonKindUnsupported, kind) }
