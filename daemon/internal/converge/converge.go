// Package converge applies desired state (docs/protocol.md, "Desired state
// and adoption"). The core verifies a DesiredState's NodeSpec under the
// signedSpecs policy, and applies a newer generation by running one
// Reconciler per NodeSpec section in Order (reconciler.go): trust
// (trust.go), then holds (holds.go); the sections to come plug in the same
// way (Config.Reconcilers). The applied spec, each section's own state and
// every section's SectionStatus are persisted in one journal transaction,
// then a StatusReport is journaled.
//
// Every StatusReport carries the latest SectionStatus of every reconciler
// (none before the first spec): a section the spec does not set, or with
// nothing to do, is reported APPLIED "Applied", never omitted, so the
// report also says which sections this bcd reconciles. A reconciler that
// is not done (PROGRESSING) asks for another pass with Result.RequeueAfter;
// the core runs it again, alone on the same spec, persists and reports its
// new status, and cancels the request when a new generation comes. After a
// restart Start passes again every section left PROGRESSING, or with no
// status for the applied generation (a section an upgrade added).
package converge

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"bcd/internal/intent"
	"bcd/internal/journal"
	"bcd/internal/machine"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// ErrSpecRefused means a spec did not verify.
var ErrSpecRefused = errors.New("spec refused")

// ErrSection is a reconciler of an unknown or already reconciled section.
var ErrSection = errors.New("reconciler section")

// Config wires a converger.
type Config struct {
	// NodeID is this node.
	NodeID string
	// Key signs AllocationBound statements.
	Key crypto.Signer
	// Journal persists the applied spec, the section statuses and the
	// sections' own state.
	Journal *journal.Journal
	// Machine gives the inventory, the boot id and the CDI directory.
	Machine machine.Machine
	// Trust verifies specs and takes rotations.
	Trust *intent.Trust
	// Reconcilers are the sections beyond trust and holds (each one of
	// Order, once); they run in Order with the built-in ones.
	Reconcilers []Reconciler
	// Notify says the journal has new events.
	Notify func()
	// Applied is called after a new generation is applied.
	Applied func(generation uint64)
	// Now is the local clock (tests).
	Now func() time.Time
	// Log receives converge.* lines.
	Log *slog.Logger
}

// Converger applies specs.
type Converger struct {
	cfg         Config
	log         *slog.Logger
	holds       *holdsReconciler
	reconcilers []Reconciler // in Order
	ctx         context.Context
	cancel      context.CancelFunc

	// pass serializes passes: Apply and re-passes.
	pass sync.Mutex

	mu       sync.Mutex
	statuses map[string]*agentv1.SectionStatus
	requeues map[string]*requeue
	stopped  bool
	wg       sync.WaitGroup
}

// New loads the section statuses and the holds (rewriting any CDI file that
// went missing) and orders the reconcilers.
func New(cfg Config) (*Converger, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Notify == nil {
		cfg.Notify = func() {}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	holds, err := newHolds(cfg, log)
	if err != nil {
		return nil, err
	}
	ordered, err := inOrder(append([]Reconciler{&trustReconciler{trust: cfg.Trust}, holds}, cfg.Reconcilers...))
	if err != nil {
		return nil, err
	}
	statuses, err := loadStatuses(cfg.Journal)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Converger{cfg: cfg, log: log, holds: holds, reconcilers: ordered, ctx: ctx, cancel: cancel,
		statuses: statuses, requeues: map[string]*requeue{}}, nil
}

// inOrder sorts reconcilers by Order, refusing an unknown or repeated section.
func inOrder(list []Reconciler) ([]Reconciler, error) {
	bySection := map[string]Reconciler{}
	for _, r := range list {
		s := r.Section()
		if _, dup := bySection[s]; dup {
			return nil, fmt.Errorf("%w: %q has two reconcilers", ErrSection, s)
		}
		bySection[s] = r
	}
	out := make([]Reconciler, 0, len(list))
	for _, s := range Order {
		if r, ok := bySection[s]; ok {
			out = append(out, r)
			delete(bySection, s)
		}
	}
	for s := range bySection {
		return nil, fmt.Errorf("%w: %q is not a NodeSpec section (converge.Order)", ErrSection, s)
	}
	return out, nil
}

// Start resumes the sections that live in the process (Resumer) on the
// applied spec, then passes again, in the background, every section left
// PROGRESSING or without a status for the applied generation, and every
// Waiter that waits.
func (c *Converger) Start() {
	generation := c.AppliedGeneration()
	if generation == 0 {
		return
	}
	if spec := c.appliedSpec(); spec != nil {
		for _, r := range c.reconcilers {
			if resumer, ok := r.(Resumer); ok {
				resumer.Resume(c.ctx, spec)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reconcilers {
		st := c.statuses[r.Section()]
		waiter, ok := r.(Waiter)
		if st == nil || st.GetGeneration() != generation || st.GetState() == agentv1.SectionState_SECTION_STATE_PROGRESSING ||
			ok && waiter.Waiting() {
			c.armLocked(r.Section(), generation, 0)
		}
	}
}

// Stop cancels the pending re-passes and waits for one that is running.
// Nothing runs after it; call it before closing the journal.
func (c *Converger) Stop() {
	c.mu.Lock()
	c.stopped = true
	for _, q := range c.requeues {
		q.timer.Stop()
	}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// Repass asks for a pass of section now, alone on the applied spec (a
// reconciler whose world changed outside the spec: instances after a
// restart or a reboot, a secret that came). Nothing happens before the
// first spec, or for a section without a reconciler.
func (c *Converger) Repass(section string) {
	generation := c.AppliedGeneration()
	if generation == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reconcilers {
		if r.Section() == section {
			c.armLocked(section, generation, 0)
		}
	}
}

// AppliedGeneration is the generation applied last.
func (c *Converger) AppliedGeneration() uint64 {
	return c.cfg.Journal.AppliedGeneration()
}

// Allocations returns the bound allocations, by id.
func (c *Converger) Allocations() []*Allocation { return c.holds.list() }

// Sections returns the latest status of each section, in Order.
func (c *Converger) Sections() []*agentv1.SectionStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*agentv1.SectionStatus
	for _, r := range c.reconcilers {
		if st := c.statuses[r.Section()]; st != nil {
			out = append(out, proto.CloneOf(st))
		}
	}
	return out
}

// Report builds a StatusReport: the inventory, the applied generation, the
// section statuses and what the reconcilers report every time (the bound
// allocations).
func (c *Converger) Report() (*agentv1.StatusReport, error) {
	inv, err := c.cfg.Machine.Inventory()
	if err != nil {
		return nil, err
	}
	sections, err := inv.Sections()
	if err != nil {
		return nil, err
	}
	r := &agentv1.StatusReport{Inventory: sections, AppliedGeneration: c.AppliedGeneration(), Sections: c.Sections()}
	if ps, ok := c.cfg.Machine.(machine.PressureSource); ok {
		if r.Pressure, err = ps.Pressure(); err != nil {
			return nil, err
		}
	}
	for _, rec := range c.reconcilers {
		if rep, ok := rec.(Reporter); ok {
			if err := rep.Report(r); err != nil {
				return nil, fmt.Errorf("section %s: %w", rec.Section(), err)
			}
		}
	}
	return r, nil
}

// appliedSpec is the spec applied now (nil for none).
func (c *Converger) appliedSpec() *agentv1.NodeSpec {
	_, data := c.cfg.Journal.Applied()
	if data == nil {
		return nil
	}
	env := &agentv1.Envelope{}
	spec := &agentv1.NodeSpec{}
	if proto.Unmarshal(data, env) != nil || proto.Unmarshal(env.GetPayload(), spec) != nil {
		return nil
	}
	return spec
}

// appliedEnvelope is the envelope of the spec applied now (nil for none).
func (c *Converger) appliedEnvelope() *agentv1.Envelope {
	_, data := c.cfg.Journal.Applied()
	env := &agentv1.Envelope{}
	if data == nil || proto.Unmarshal(data, env) != nil {
		return nil
	}
	return env
}

// signed says whether env, a spec that verified, carries a command root's
// signature: with roots, verify checked every signature it has.
func (c *Converger) signed(env *agentv1.Envelope) bool {
	return env != nil && len(env.GetSignatures()) > 0 && len(c.cfg.Trust.Roots()) > 0
}

// verify checks a spec under the policy: with command roots it must be
// signed (or, under "access", unsigned only when access is unchanged);
// without roots an unsigned spec is taken.
func (c *Converger) verify(msg *agentv1.Envelope) (*agentv1.NodeSpec, error) {
	env := pki.EnvelopeFromProto(msg)
	if roots := c.cfg.Trust.Roots(); len(roots) > 0 {
		return pki.VerifySpec(env, roots, c.cfg.NodeID, c.cfg.Trust.Policy(), c.appliedSpec().GetAccess())
	}
	if env.PayloadType != pki.PayloadTypeNodeSpec {
		return nil, fmt.Errorf("payload type %q", env.PayloadType)
	}
	spec := &agentv1.NodeSpec{}
	if err := proto.Unmarshal(env.Payload, spec); err != nil {
		return nil, err
	}
	if spec.GetNodeId() != c.cfg.NodeID {
		return nil, fmt.Errorf("%s: spec for node %q", pki.CodeSpecWrongNode, spec.GetNodeId())
	}
	return spec, nil
}

// Apply applies a DesiredState and reports whether a new generation was
// applied. A refused or stale spec changes nothing.
func (c *Converger) Apply(ds *agentv1.DesiredState) (bool, error) {
	c.pass.Lock()
	generation, err := c.apply(ds)
	c.pass.Unlock()
	if err != nil || generation == 0 {
		return false, err
	}
	if c.cfg.Applied != nil {
		c.cfg.Applied(generation)
	}
	return true, nil
}
