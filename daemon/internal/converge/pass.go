// One pass of the core: run reconcilers in Order, persist what they did
// with their statuses (and, on a new generation, the applied spec) in one
// journal transaction, journal the StatusReport that follows, and arm the
// re-passes they asked for. Also the persisted statuses.

package converge

import (
	"fmt"
	"strings"
	"time"

	"bcd/internal/journal"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// sectionsKey keeps the section statuses in the journal (a StatusReport
// holding only sections, protobuf).
const sectionsKey = "section_status"

// repassRetry is when a re-pass that failed with an error is tried again,
// when it had asked for no delay.
const repassRetry = time.Second

// outcome is one reconciler's Result in a pass.
type outcome struct {
	r   Reconciler
	res Result
}

// requeue is a pending re-pass of one section.
type requeue struct {
	timer *time.Timer
	delay time.Duration
}

// apply runs a new generation through every reconciler; it returns the
// applied generation (0: nothing applied). The caller holds c.pass.
func (c *Converger) apply(ds *agentv1.DesiredState) (uint64, error) {
	envBytes, err := proto.Marshal(ds.GetSpec())
	if err != nil {
		return 0, err
	}
	// The gateway sends the latest desired state after every Welcome: the
	// spec applied now verified when it was applied, so it is not verified
	// (an Ed25519 signature) again.
	if c.cfg.Journal.IsApplied(envBytes) {
		return 0, nil
	}
	spec, err := c.verify(ds.GetSpec())
	if err != nil {
		c.log.Warn("converge.spec_refused", "code", string(pki.CodeOf(err)), "reason", err.Error())
		return 0, fmt.Errorf("%w: %w", ErrSpecRefused, err)
	}
	applied := c.AppliedGeneration()
	if spec.GetGeneration() <= applied {
		if spec.GetGeneration() < applied {
			c.log.Info("converge.stale", "generation", spec.GetGeneration(), "applied_generation", applied)
		}
		return 0, nil
	}
	c.cancelRequeues()
	in := Input{Spec: spec, Previous: c.appliedSpec(), Envelope: ds.GetSpec(), Signed: c.signed(ds.GetSpec())}
	var outcomes []outcome
	for _, r := range c.reconcilers {
		res, err := r.Reconcile(c.ctx, in)
		if err != nil {
			return 0, fmt.Errorf("section %s: %w", r.Section(), err)
		}
		outcomes = append(outcomes, outcome{r, res})
	}
	if err := c.commit(spec.GetGeneration(), envBytes, outcomes); err != nil {
		return 0, err
	}
	c.log.Info("converge.applied", "generation", spec.GetGeneration(), "holds", len(spec.GetHolds()), "sections", summary(outcomes))
	return spec.GetGeneration(), nil
}

// commit persists a pass (with env, the applied spec of a new generation),
// journals its StatusReport and arms the re-passes asked for. A re-pass
// that changed no status and has nothing to report journals no report.
func (c *Converger) commit(generation uint64, env []byte, outcomes []outcome) error {
	statuses, changed := c.withStatuses(generation, outcomes)
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(&agentv1.StatusReport{Sections: statuses.list(c.reconcilers)})
	if err != nil {
		return err
	}
	err = c.cfg.Journal.Update(func(tx *journal.Tx) error {
		if env != nil {
			if err := tx.SetApplied(generation, env); err != nil {
				return err
			}
		}
		for _, o := range outcomes {
			if o.res.Persist != nil {
				if err := o.res.Persist(tx); err != nil {
					return fmt.Errorf("section %s: %w", o.r.Section(), err)
				}
			}
		}
		return tx.Put(sectionsKey, data)
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.statuses = statuses
	c.mu.Unlock()
	if err := c.report(env != nil || changed, outcomes); err != nil {
		return err
	}
	c.mu.Lock()
	for _, o := range outcomes {
		if o.res.RequeueAfter > 0 {
			c.armLocked(o.r.Section(), generation, o.res.RequeueAfter)
		}
	}
	c.mu.Unlock()
	for _, o := range outcomes {
		if o.res.Then != nil {
			o.res.Then()
		}
	}
	return nil
}

// report journals the StatusReport after a pass, with the pass's one-time
// facts; without them and unless always, only when there are some.
func (c *Converger) report(always bool, outcomes []outcome) error {
	for _, o := range outcomes {
		always = always || o.res.Report != nil
	}
	if !always {
		return nil
	}
	report, err := c.Report()
	if err != nil {
		return err
	}
	for _, o := range outcomes {
		if o.res.Report != nil {
			o.res.Report(report)
		}
	}
	if _, err := c.cfg.Journal.Append(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_StatusReport{StatusReport: report}}); err != nil {
		return err
	}
	c.cfg.Notify()
	return nil
}

// statusMap holds the latest status of each section.
type statusMap map[string]*agentv1.SectionStatus

// list is the statuses in the reconcilers' order.
func (m statusMap) list(order []Reconciler) []*agentv1.SectionStatus {
	var out []*agentv1.SectionStatus
	for _, r := range order {
		if st := m[r.Section()]; st != nil {
			out = append(out, st)
		}
	}
	return out
}

// withStatuses is the current statuses with those of outcomes, and
// whether any of those differs from the current one.
func (c *Converger) withStatuses(generation uint64, outcomes []outcome) (statusMap, bool) {
	c.mu.Lock()
	next := make(statusMap, len(c.statuses)+len(outcomes))
	for s, st := range c.statuses {
		next[s] = st
	}
	c.mu.Unlock()
	changed := false
	for _, o := range outcomes {
		st := status(o.r.Section(), generation, o.res)
		changed = changed || !proto.Equal(st, next[o.r.Section()])
		next[o.r.Section()] = st
	}
	return next, changed
}

// status is a Result as a SectionStatus.
func status(section string, generation uint64, res Result) *agentv1.SectionStatus {
	st := &agentv1.SectionStatus{Section: section, State: res.State, Reason: res.Reason, Message: res.Message, Generation: generation}
	switch {
	case st.State == agentv1.SectionState_SECTION_STATE_UNSPECIFIED:
		st.State, st.Reason = agentv1.SectionState_SECTION_STATE_FAILED, "InvalidResult"
		st.Message = "the reconciler returned no state"
	case st.State == agentv1.SectionState_SECTION_STATE_APPLIED && st.Reason == "":
		st.Reason = ReasonApplied
	}
	return st
}

// summary is "trust=Applied holds=HoldFailed" for the log.
func summary(outcomes []outcome) string {
	parts := make([]string, 0, len(outcomes))
	for _, o := range outcomes {
		parts = append(parts, o.r.Section()+"="+status(o.r.Section(), 0, o.res).GetReason())
	}
	return strings.Join(parts, " ")
}

// loadStatuses reads the persisted section statuses.
func loadStatuses(j *journal.Journal) (statusMap, error) {
	m := statusMap{}
	data := j.Get(sectionsKey)
	if data == nil {
		return m, nil
	}
	stored := &agentv1.StatusReport{}
	if err := proto.Unmarshal(data, stored); err != nil {
		return nil, fmt.Errorf("the journal's section statuses: %w", err)
	}
	for _, st := range stored.GetSections() {
		m[st.GetSection()] = st
	}
	return m, nil
}

// armLocked schedules a re-pass of section on generation after delay,
// replacing one pending. The caller holds c.mu.
func (c *Converger) armLocked(section string, generation uint64, delay time.Duration) {
	if c.stopped {
		return
	}
	if q := c.requeues[section]; q != nil {
		q.timer.Stop()
	}
	q := &requeue{delay: delay}
	q.timer = time.AfterFunc(delay, func() {
		c.mu.Lock()
		if c.stopped || c.requeues[section] != q {
			c.mu.Unlock()
			return
		}
		delete(c.requeues, section)
		c.wg.Add(1)
		c.mu.Unlock()
		defer c.wg.Done()
		c.repass(section, generation, delay)
	})
	c.requeues[section] = q
}

// cancelRequeues drops every pending re-pass (a new generation decides
// again).
func (c *Converger) cancelRequeues() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, q := range c.requeues {
		q.timer.Stop()
		delete(c.requeues, s)
	}
}

// repass runs one section again on the applied spec, if it is still
// generation, and commits it; an error is logged and tried again.
func (c *Converger) repass(section string, generation uint64, delay time.Duration) {
	c.pass.Lock()
	defer c.pass.Unlock()
	if c.ctx.Err() != nil || c.AppliedGeneration() != generation {
		return
	}
	var r Reconciler
	for _, rec := range c.reconcilers {
		if rec.Section() == section {
			r = rec
		}
	}
	spec, env := c.appliedSpec(), c.appliedEnvelope()
	if r == nil || spec == nil {
		return
	}
	res, err := r.Reconcile(c.ctx, Input{Spec: spec, Previous: spec, Envelope: env, Signed: c.signed(env)})
	if err == nil {
		err = c.commit(generation, nil, []outcome{{r, res}})
	}
	if err == nil {
		c.log.Info("converge.repassed", "section", section, "generation", generation, "state", status(section, generation, res).GetState().String())
		return
	}
	if c.ctx.Err() != nil {
		return // stopping: Start passes it again after the restart
	}
	if delay <= 0 {
		delay = repassRetry
	}
	c.log.Warn("converge.repass_failed", "section", section, "generation", generation, "err", err, "retry_in_ms", delay.Milliseconds())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked(section, generation, delay)
}
