// Package instances reconciles the NodeSpec instances section
// (docs/daemon.md, "Instances"): it defines, starts, stops and destroys
// domains through the runtimes (internal/runtime), creates, grows and
// destroys the section's volumes (internal/volumes), admits a start only
// when the host has the vCPUs and memory for it (admission.go), fetches
// secret user data through the secret broker (internal/broker), and
// reports an InstanceStatus per instance, the volume store's usage and
// its own SectionStatus in every StatusReport.
//
// A pass, in order: the volumes listed are created or grown; domains the
// spec no longer lists are destroyed and instances to stop are stopped
// (stops before starts: a volume handed from one instance to another is
// closed before it is opened again); volumes no longer listed and no
// longer open are destroyed; then each listed instance is defined (only
// when its fingerprint changed) and, when it should run, admitted and
// started. The section is FAILED for an instance that cannot converge as
// specified (RuntimeUnknown, InstanceFailed: among them a field of its
// plan its runtime cannot apply, PlanUnsupported, a network policy on a
// runtime that does not enforce one among them, and never Applied for
// what was not applied), PROGRESSING "Retrying" for one that may later
// (ResourcesExhausted, a secret on its way, a volume busy, an image not
// in the store yet), with a re-pass requested, and APPLIED otherwise.
package instances

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"bcd/internal/converge"
	"bcd/internal/images"
	"bcd/internal/journal"
	"bcd/internal/proto/agentv1"
	"bcd/internal/runtime"
	"bcd/internal/volumes"
	"google.golang.org/protobuf/proto"
)

// The InstanceStatus states bcd reports.
const (
	StatePending  = "pending"
	StateStarting = "starting"
	StateRunning  = "running"
	StateStopped  = "stopped"
	StateFailed   = "failed"
)

// The section's own reasons beside the codes of refusals_gen.go.
const (
	// ReasonRetrying is a section that is not converged yet and is tried
	// again.
	ReasonRetrying = "Retrying"
	// ReasonInstanceFailed is an instance that cannot converge as specified.
	ReasonInstanceFailed = "InstanceFailed"
)

// DefaultRetry is when a pass that could not start everything runs again.
const DefaultRetry = 2 * time.Second

// statusKey keeps the last instance statuses in the journal, so the first
// StatusReport after a restart already carries them.
const statusKey = "instances_status"

// Secrets is where secret user data comes from (the broker).
type Secrets interface {
	// Secret returns the plaintext of a reference, broker.ErrPending while
	// it is on its way, or the broker's refusal.
	Secret(ref string) ([]byte, error)
	// Forget drops the plaintext once it is written.
	Forget(ref string)
}

// Capacity is what the host has for instances.
type Capacity struct {
	VCPUs       uint32
	MemoryBytes uint64
	// NUMA are the host's NUMA nodes (their CPUs), for pinned instances.
	NUMA []*agentv1.NumaNode
	// GPUs are the host's GPUs (their PCI addresses), for passed-through ones.
	GPUs []*agentv1.Gpu
}

// Config wires a reconciler.
type Config struct {
	// Runtimes are the runtimes this bcd has, each under its own name.
	Runtimes []runtime.Runtime
	// Volumes is the volume store (nil: none; a listed volume fails).
	Volumes *volumes.Store
	// Images is the image store (nil: none; an instance with an image fails).
	Images *images.Store
	// Accelerator is what the domains run under: runtime.AccelKVM ("")
	// or runtime.AccelTCG (config.toml's [instances] accelerator).
	Accelerator string
	// Capacity is the host's vCPUs and memory (from the inventory).
	Capacity func() (Capacity, error)
	// Secrets fetches secret user data (nil: a secret fails the instance).
	Secrets Secrets
	// Journal persists the statuses (Open reads them back).
	Journal *journal.Journal
	// Retry is the re-pass delay of a section not converged (DefaultRetry).
	Retry time.Duration
	// Pressure says how hard the host is pressed (nil: never pressed):
	// guests with a memory floor are ballooned by it (balloon.go).
	Pressure func() (*agentv1.HostPressure, error)
	// Now is the clock (tests).
	Now func() time.Time
	// Log receives instances.* lines (never user data).
	Log *slog.Logger
}

// Reconciler is the instances section's.
type Reconciler struct {
	cfg      Config
	log      *slog.Logger
	runtimes map[string]runtime.Runtime

	mu       sync.Mutex
	statuses map[string]*agentv1.InstanceStatus
	vols     []*agentv1.VolumeStatus
	usage    volumes.Usage
	started  map[string]time.Time
	// balloonable says whether a running guest can give memory back
	// (balloon.go); balloonChanged is closed, and replaced, when that changes.
	balloonable    bool
	balloonChanged chan struct{}
}

var (
	_ converge.Reconciler = (*Reconciler)(nil)
	_ converge.Reporter   = (*Reconciler)(nil)
)

// New returns the reconciler with the statuses the journal kept.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reconciler{cfg: cfg, log: log, runtimes: map[string]runtime.Runtime{},
		statuses: map[string]*agentv1.InstanceStatus{}, started: map[string]time.Time{},
		balloonChanged: make(chan struct{})}
	for _, rt := range cfg.Runtimes {
		if _, dup := r.runtimes[rt.Name()]; dup {
			return nil, fmt.Errorf("two runtimes named %q", rt.Name())
		}
		r.runtimes[rt.Name()] = rt
	}
	if cfg.Journal != nil {
		if data := cfg.Journal.Get(statusKey); data != nil {
			stored := &agentv1.StatusReport{}
			if err := proto.Unmarshal(data, stored); err != nil {
				return nil, fmt.Errorf("the journal's instance statuses: %w", err)
			}
			for _, st := range stored.GetInstances() {
				r.statuses[st.GetId()] = st
			}
			r.vols = stored.GetVolumes()
		}
	}
	if cfg.Volumes != nil {
		if u, err := cfg.Volumes.Usage(); err == nil {
			r.usage = u
		}
	}
	return r, nil
}

// EnforcesNetworkPolicy says whether a runtime of this bcd enforces an
// instance's network policy (runtime.PolicyEnforcer): bcd then advertises
// instance.network-policy.
func (r *Reconciler) EnforcesNetworkPolicy() bool {
	for _, rt := range r.cfg.Runtimes {
		if runtime.EnforcesPolicy(rt) {
			return true
		}
	}
	return false
}

// Section is "instances".
func (r *Reconciler) Section() string { return converge.SectionInstances }

// Drivers are the Hello's DriverManifests of the runtimes, by name.
func (r *Reconciler) Drivers() []*agentv1.DriverManifest {
	var out []*agentv1.DriverManifest
	for _, rt := range r.cfg.Runtimes {
		out = append(out, &agentv1.DriverManifest{Name: rt.Name(), Kind: runtime.DriverKind, Version: rt.Version()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Reconcile converges the section (see the package comment).
func (r *Reconciler) Reconcile(ctx context.Context, in converge.Input) (converge.Result, error) {
	p, err := r.newPass(ctx, in.Spec)
	if err != nil {
		return converge.Result{}, err
	}
	p.ensureVolumes()
	if err := p.removeAndStop(); err != nil {
		return converge.Result{}, err
	}
	p.destroyVolumes()
	for _, id := range p.order {
		if err := p.converge(id); err != nil {
			return converge.Result{}, err
		}
	}
	if err := p.balloon(); err != nil {
		return converge.Result{}, err
	}
	return r.finish(p)
}

// finish keeps the pass's statuses and turns them into the section's result.
func (r *Reconciler) finish(p *pass) (converge.Result, error) {
	usage := volumes.Usage{}
	if r.cfg.Volumes != nil {
		u, err := r.cfg.Volumes.Usage()
		if err != nil {
			return converge.Result{}, err
		}
		usage = u
	}
	list, vols := p.statusList(), p.volumeList()
	data, err := proto.Marshal(&agentv1.StatusReport{Instances: list, Volumes: vols})
	if err != nil {
		return converge.Result{}, err
	}
	r.mu.Lock()
	changed := len(r.statuses) != len(p.statuses) || r.usage != usage || len(r.vols) != len(vols)
	for id, st := range p.statuses {
		changed = changed || !proto.Equal(st, r.statuses[id])
	}
	for i := range vols {
		changed = changed || i >= len(r.vols) || !proto.Equal(vols[i], r.vols[i])
	}
	r.statuses, r.usage, r.vols = p.statuses, usage, vols
	for id := range r.started {
		if st := p.statuses[id]; st == nil || st.GetState() != StateRunning {
			delete(r.started, id)
		}
	}
	for id, st := range p.statuses {
		if _, ok := r.started[id]; !ok && st.GetState() == StateRunning {
			r.started[id] = r.cfg.Now()
		}
	}
	if b := p.balloonable(); b != r.balloonable {
		r.balloonable = b
		close(r.balloonChanged)
		r.balloonChanged = make(chan struct{})
	}
	r.mu.Unlock()
	res := p.result()
	if len(p.retry) > 0 || len(p.exhausted) > 0 {
		// Something may converge later (admission, a secret, room): pass
		// again. A section FAILED only by what the spec says is not.
		res.RequeueAfter = r.cfg.Retry
	}
	res.Persist = func(tx *journal.Tx) error { return tx.Put(statusKey, data) }
	if changed {
		// The statuses are in every report (Report); a change is worth one.
		res.Report = func(*agentv1.StatusReport) {}
	}
	return res, nil
}

// Report adds every instance's status, every volume's and the volume
// store's usage.
func (r *Reconciler) Report(rep *agentv1.StatusReport) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.statuses))
	for id := range r.statuses {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		rep.Instances = append(rep.Instances, proto.CloneOf(r.statuses[id]))
	}
	for _, v := range r.vols {
		rep.Volumes = append(rep.Volumes, proto.CloneOf(v))
	}
	if r.cfg.Volumes != nil {
		rep.VolumeStorage = &agentv1.VolumeStorage{TotalBytes: r.usage.Total, AvailableBytes: r.usage.Available,
			ReservedBytes: r.usage.Reserved, CommittedBytes: r.usage.Committed}
	}
	return nil
}

// Balloonable says whether a running guest of the applied spec can give
// memory back under pressure (a memory floor, not huge-page backed), and
// returns a channel closed when that changes: the host's pressure is worth
// reading only while it is true (a fleet of agents with no such guest reads
// nothing).
func (r *Reconciler) Balloonable() (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.balloonable, r.balloonChanged
}

// Running says whether an instance of the applied spec runs now (the
// metadata endpoint answers only for those).
func (r *Reconciler) Running(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.statuses[id]
	return st != nil && st.GetState() == StateRunning
}
