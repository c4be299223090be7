// Package hostconfig reconciles the NodeSpec host section (docs/daemon.md,
// "Host units"): the systemd units a pool's policy became (huge pages,
// kernel modules), installed and started through a System (the fake root
// of fakehw builds; systemd through bcd helper's host.apply and
// host.start on a host, cmd/bcd's hostSystem).
// Units come only from a spec a command root signed; a unit whose name or
// content bcd does not read fails the section before anything is
// installed, and a unit whose start fails is reported with its reason
// while the others still run.
package hostconfig

import (
	"context"
	"fmt"
	"strings"

	"bcd/internal/converge"
	"bcd/internal/hostconfig/unitfile"
	"bcd/internal/proto/agentv1"
)

// System is where host units run.
type System interface {
	// Install writes units (bcd-*) into the unit directory and removes
	// the bcd-* units there that are not among them. envelope is the
	// signed NodeSpec the units are from, as it came (the converge core
	// verified it): a host build hands it to bcd helper's host.apply,
	// which verifies it again; the fake root ignores it.
	Install(ctx context.Context, envelope *agentv1.Envelope, units []*agentv1.HostUnit) error
	// Start starts one installed unit; its error is the reason it failed.
	Start(ctx context.Context, name string) error
}

// Reconciler applies the host section.
type Reconciler struct {
	system System
}

var _ converge.Reconciler = (*Reconciler)(nil)

// New is the host reconciler over system.
func New(system System) *Reconciler { return &Reconciler{system: system} }

// Section is "host".
func (r *Reconciler) Section() string { return converge.SectionHost }

// Reconcile installs and starts the section's units.
func (r *Reconciler) Reconcile(ctx context.Context, in converge.Input) (converge.Result, error) {
	units := in.Spec.GetHost().GetUnits()
	if len(units) > 0 && !in.Signed {
		return failed(ReasonHostUnsigned, "%d host unit(s) in a spec no command root signed: none is applied", len(units)), nil
	}
	seen := map[string]bool{}
	for _, u := range units {
		if !unitfile.NamePattern.MatchString(u.GetName()) {
			return failed(ReasonUnitInvalid, "%q is not a host unit name (bcd-<name>.service, .mount, .timer, …)", u.GetName()), nil
		}
		if seen[u.GetName()] {
			return failed(ReasonUnitInvalid, "%s is named twice", u.GetName()), nil
		}
		seen[u.GetName()] = true
		parsed, err := unitfile.Parse(u.GetContent())
		if err == nil {
			_, err = parsed.ExecStart()
		}
		if err != nil {
			return failed(ReasonUnitInvalid, "%s: %v", u.GetName(), err), nil
		}
	}
	if err := r.system.Install(ctx, in.Envelope, units); err != nil {
		return failed(ReasonUnitFailed, "installing the units: %v", err), nil
	}
	var failures []string
	for _, u := range units {
		if err := r.system.Start(ctx, u.GetName()); err != nil {
			if ctx.Err() != nil {
				return converge.Result{}, ctx.Err()
			}
			failures = append(failures, fmt.Sprintf("%s: %v", u.GetName(), err))
		}
	}
	if len(failures) > 0 {
		return failed(ReasonUnitFailed, "%d of %d unit(s) failed: %s", len(failures), len(units), strings.Join(failures, "; ")), nil
	}
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_APPLIED, Reason: converge.ReasonApplied,
		Message: fmt.Sprintf("%d host unit(s) started", len(units))}, nil
}

func failed(reason, format string, args ...any) converge.Result {
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_FAILED, Reason: reason, Message: fmt.Sprintf(format, args...)}
}
