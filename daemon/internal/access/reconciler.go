// Package access is the NodeSpec access section's reconciler
// (docs/daemon.md, "Access"): the section planned into sshd's files
// (plan.go: authorized keys and certificate principals per account, the
// trusted user CAs, the KRL of krl.go, the sandbox CAs, the sshd drop-in)
// and written by a Writer: under the fake root in a fakehw build
// (DirWriter), through bcd helper's access.apply on a host. Whether a
// change of access had to be signed is the converge core's
// (signedSpecs = "access").
package access

import (
	"context"
	"fmt"
	"log/slog"

	"bcd/internal/converge"
	"bcd/internal/proto/agentv1"
)

// Reconciler applies the access section.
type Reconciler struct {
	w   Writer
	log *slog.Logger
}

// New returns the reconciler writing through w.
func New(w Writer, log *slog.Logger) *Reconciler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{w: w, log: log}
}

// Section is "access".
func (r *Reconciler) Section() string { return converge.SectionAccess }

// Reconcile plans and writes the section: FAILED AccessInvalid for a
// section it refuses (nothing written), AccessWriteFailed when the files
// could not be written.
func (r *Reconciler) Reconcile(ctx context.Context, in converge.Input) (converge.Result, error) {
	section := in.Spec.GetAccess()
	files, err := Plan(section, in.Spec.GetGeneration())
	if err != nil {
		r.log.Warn("access.refused", "generation", in.Spec.GetGeneration(), "reason", err.Error())
		return failed(ReasonAccessInvalid, err), nil
	}
	if err := r.w.Write(ctx, in.Envelope, files); err != nil {
		r.log.Error("access.write_failed", "generation", in.Spec.GetGeneration(), "err", err)
		return failed(ReasonAccessWriteFailed, err), nil
	}
	if section == nil {
		return converge.Result{State: agentv1.SectionState_SECTION_STATE_APPLIED, Message: "no access section"}, nil
	}
	r.log.Info("access.applied", "generation", in.Spec.GetGeneration(), "accounts", len(files.Accounts),
		"trusted_cas", len(section.GetTrustedUserCaKeys()), "revoked_keys", len(section.GetRevokedKeys()))
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_APPLIED, Message: fmt.Sprintf(
		"%d account(s) %v, %d trusted user CA(s), %d sandbox CA(s), %d revoked key(s), serials of %d CA(s)",
		len(files.Accounts), files.Accounts, len(section.GetTrustedUserCaKeys()), len(section.GetSandboxUserCaKeys()),
		len(section.GetRevokedKeys()), len(section.GetRevokedSerials()))}, nil
}

// Waiting is always true (converge.Waiter): bcd passes the section again
// at every start, so files a crash lost (they are not fsynced) or someone
// changed are written again.
func (r *Reconciler) Waiting() bool { return true }

func failed(reason string, err error) converge.Result {
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_FAILED, Reason: reason, Message: err.Error()}
}
