// The reconciler contract: one Reconciler per NodeSpec section, run in
// Order on every new generation, each returning its own SectionStatus (and,
// when it is not done, a request for another pass).

package converge

import (
	"context"
	"time"

	"bcd/internal/journal"
	"bcd/internal/proto/agentv1"
)

// The NodeSpec sections, by their field names in agent.proto.
const (
	SectionTrust     = "trust"
	SectionHolds     = "holds"
	SectionHost      = "host"
	SectionInstances = "instances"
	SectionTelemetry = "telemetry"
	SectionDaemon    = "daemon"
	SectionAccess    = "access"
)

// Order is the order in which the sections of a spec are reconciled, and
// the only place it is stated: trust first, since a rotation changes what
// verifies the specs after it; then holds; the sections to come have their
// place here already. A reconciler of a section not listed is refused.
var Order = []string{SectionTrust, SectionHolds, SectionHost, SectionInstances, SectionTelemetry, SectionDaemon, SectionAccess}

// Reasons of the built-in sections (SectionStatus.reason, stable CamelCase).
const (
	// ReasonApplied is a section converged to the spec, or with nothing to do.
	ReasonApplied = "Applied"
	// ReasonRotationRefused is a trust bundle that was not taken.
	ReasonRotationRefused = "RotationRefused"
	// ReasonHoldFailed is a hold that could not be bound.
	ReasonHoldFailed = "HoldFailed"
)

// Reconciler applies one NodeSpec section.
type Reconciler interface {
	// Section is the NodeSpec field this reconciler owns (one of Order).
	Section() string
	// Reconcile applies its section of in.Spec and returns its status. It
	// runs once per new generation, in Order, and again when a Result asked
	// for it. An error aborts the pass: nothing of it is persisted or
	// reported (the spec is applied again when it comes again); a section
	// that cannot converge returns a FAILED Result instead.
	Reconcile(ctx context.Context, in Input) (Result, error)
}

// Reporter is a Reconciler that adds standing facts to every StatusReport
// (holds: the node-signed AllocationBound of every bound hold).
type Reporter interface {
	Report(r *agentv1.StatusReport) error
}

// Resumer is a Reconciler whose section lives in the process rather than on
// disk (telemetry: an export schedule). Start hands it the applied spec, so
// a restarted bcd takes up what the last process did without a pass: the
// section's persisted status stands. A Reconcile that follows (a re-pass,
// a new generation) decides as usual.
type Resumer interface {
	Resume(ctx context.Context, spec *agentv1.NodeSpec)
}

// Waiter is a Reconciler with work due later whatever its section's status
// (holds: released Kubernetes holds whose pods keep their devices). Start
// passes it again after a restart when it is waiting.
type Waiter interface {
	Waiting() bool
}

// Input is what a pass gives a reconciler.
type Input struct {
	// Spec is the verified spec being applied.
	Spec *agentv1.NodeSpec
	// Previous is the spec applied when the pass started: the one before
	// Spec on a new generation (nil before the first), Spec itself on a
	// re-pass. A reconciler compares Spec with what it observes or keeps
	// where it can; Previous is for what only the spec can say.
	Previous *agentv1.NodeSpec
	// Envelope is Spec as it came (bcd helper's host.apply verifies it
	// again on host builds).
	Envelope *agentv1.Envelope
	// Signed says a command root signed Spec (it verified under the
	// node's roots with at least one signature); host units are applied
	// only from a signed spec.
	Signed bool
}

// Result is a reconciler's outcome for one pass.
type Result struct {
	// State is APPLIED, PROGRESSING or FAILED (UNSPECIFIED is reported
	// FAILED "InvalidResult").
	State agentv1.SectionState
	// Reason is a stable CamelCase reason ("Applied" when empty and APPLIED).
	Reason string
	// Message is for people; never a secret.
	Message string
	// RequeueAfter asks for another pass of this reconciler (alone, on the
	// same spec) that long from now; 0 asks for none. A new generation
	// cancels it, and its own Results decide again. A PROGRESSING section
	// sets it; after a restart the core passes a PROGRESSING section again.
	RequeueAfter time.Duration
	// Persist writes the section's own state in the transaction that
	// records the pass (with the applied spec and the section statuses).
	Persist func(tx *journal.Tx) error
	// Report adds this pass's one-time facts to the StatusReport that
	// follows it (holds: the released and the failed holds).
	Report func(r *agentv1.StatusReport)
	// Then runs once the pass is persisted and its StatusReport journaled
	// (daemon: the swapped binary handed to the agent, which execs it), so
	// what the next process reads is this pass's.
	Then func()
}

// applied is an APPLIED Result with nothing else to say.
func applied(message string) Result {
	return Result{State: agentv1.SectionState_SECTION_STATE_APPLIED, Reason: ReasonApplied, Message: message}
}
