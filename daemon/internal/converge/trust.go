// The trust section: a spec's trust bundle is taken when the current
// approvers signed it for a higher sequence (intent.Trust.Rotate, which
// persists it). A bundle that is not taken leaves the spec applied and the
// current trust in place, and the section FAILED "RotationRefused".

package converge

import (
	"context"
	"fmt"

	"bcd/internal/intent"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// trustReconciler rotates the node's trust.
type trustReconciler struct {
	trust *intent.Trust
}

// Section is "trust".
func (t *trustReconciler) Section() string { return SectionTrust }

// Reconcile offers the spec's bundle to the node's trust.
func (t *trustReconciler) Reconcile(_ context.Context, in Input) (Result, error) {
	env := in.Spec.GetTrust().GetTrustBundle()
	if env == nil {
		return applied("no trust bundle in the spec"), nil
	}
	current := t.trust.Bundle()
	if t.trust.Rotate(env) {
		return applied(fmt.Sprintf("rotated to trust bundle sequence %d", t.trust.Bundle().GetSequence())), nil
	}
	failed := Result{State: agentv1.SectionState_SECTION_STATE_FAILED, Reason: ReasonRotationRefused}
	if current == nil {
		failed.Message = string(pki.CodeTrustQuorum) + ": no current trust bundle, so no approvers"
		return failed, nil
	}
	// Rotate logged why; this says it again in the section's terms.
	next, err := pki.AcceptTrustBundle(current, pki.EnvelopeFromProto(env))
	switch {
	case err != nil:
		failed.Message = err.Error()
	case proto.Equal(next, current):
		return applied(fmt.Sprintf("trust bundle sequence %d is current", current.GetSequence())), nil
	default:
		failed.Message = fmt.Sprintf("trust bundle sequence %d was accepted but not kept (see trust.persist_failed)", next.GetSequence())
	}
	return failed, nil
}
