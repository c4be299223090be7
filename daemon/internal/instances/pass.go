// One pass of the instances reconciler: what it observed of the runtimes,
// the removals and stops, and each listed instance's define, admission
// and start (the order is the package comment's).

package instances

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"

	"bcd/internal/broker"
	"bcd/internal/images"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"bcd/internal/runtime"
	"bcd/internal/volumes"
)

// ReasonVolumeFailed is a listed volume the store cannot make as specified.
const ReasonVolumeFailed = "VolumeFailed"

// VolumeReady is a VolumeStatus of a volume the store holds.
const VolumeReady = "ready"

// observed is a domain a runtime has.
type observed struct {
	rt    runtime.Runtime
	state runtime.State
	fp    string
}

// problem is one reason a section is not APPLIED.
type problem struct {
	reason, message string
}

// pass is one Reconcile.
type pass struct {
	r          *Reconciler
	ctx        context.Context
	generation uint64
	wanted     map[string]*agentv1.InstanceSpec
	order      []string
	volumes    map[string]*agentv1.VolumeSpec
	volErr     map[string]string // a listed volume that does not exist, and why
	seen       map[string][]*observed
	statuses   map[string]*agentv1.InstanceStatus
	volStatus  map[string]*agentv1.VolumeStatus
	capacity   Capacity
	held       Capacity
	reserved   []uint32 // the host section's reserved CPUs
	opens      map[string][]volumes.Open
	failed     []problem
	retry      []problem
	exhausted  []string
}

func (r *Reconciler) newPass(ctx context.Context, spec *agentv1.NodeSpec) (*pass, error) {
	capacity, err := r.cfg.Capacity()
	if err != nil {
		return nil, err
	}
	p := &pass{r: r, ctx: ctx, generation: spec.GetGeneration(), wanted: map[string]*agentv1.InstanceSpec{},
		volumes: map[string]*agentv1.VolumeSpec{}, volErr: map[string]string{}, seen: map[string][]*observed{},
		statuses: map[string]*agentv1.InstanceStatus{}, volStatus: map[string]*agentv1.VolumeStatus{}, capacity: capacity,
		opens: map[string][]volumes.Open{}, reserved: spec.GetHost().GetReservedCpus()}
	p.capacity = shaped(capacity, spec.GetHost())
	section := spec.GetInstances()
	for _, v := range section.GetVolumes() {
		p.volumes[v.GetId()] = v
	}
	for _, inst := range section.GetInstances() {
		if _, dup := p.wanted[inst.GetId()]; dup {
			p.fail(inst.GetId(), ReasonInstanceFailed, fmt.Sprintf("%s: instance %q is listed twice", ReasonInstanceInvalid, inst.GetId()))
			continue
		}
		p.wanted[inst.GetId()] = inst
		p.order = append(p.order, inst.GetId())
	}
	sort.Strings(p.order)
	for _, rt := range r.cfg.Runtimes {
		ids, err := rt.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("runtime %s: %w", rt.Name(), err)
		}
		for _, id := range ids {
			state, fp, err := rt.Inspect(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("runtime %s: domain %s: %w", rt.Name(), id, err)
			}
			p.seen[id] = append(p.seen[id], &observed{rt: rt, state: state, fp: fp})
		}
	}
	return p, nil
}

// status is a fresh status of a listed instance.
func (p *pass) status(inst *agentv1.InstanceSpec, state, message string) *agentv1.InstanceStatus {
	st := &agentv1.InstanceStatus{Id: inst.GetId(), State: state, Message: message, Generation: p.generation,
		Runtime: inst.GetRuntime(), Vcpus: inst.GetVcpus(), MemoryBytes: inst.GetMemoryBytes()}
	p.statuses[inst.GetId()] = st
	return st
}

// fail records an instance that cannot converge as specified.
func (p *pass) fail(id, reason, message string) {
	p.failed = append(p.failed, problem{reason, message})
	p.r.log.Warn("instances.failed", "instance", id, "reason", reason, "message", message)
}

// again records an instance that may converge on a later pass.
func (p *pass) again(id, message string) {
	p.retry = append(p.retry, problem{ReasonRetrying, message})
	p.r.log.Info("instances.retrying", "instance", id, "message", message)
}

// ensureVolumes creates or grows every listed volume.
func (p *pass) ensureVolumes() {
	ids := make([]string, 0, len(p.volumes))
	for id := range p.volumes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		v := p.volumes[id]
		store := p.r.cfg.Volumes
		if store == nil {
			p.volErr[id] = ReasonVolumeStoreFull + ": this host has no volume store"
			p.fail(id, ReasonVolumeFailed, p.volErr[id])
			continue
		}
		changed, err := store.Ensure(id, v.GetSizeBytes())
		var msg string
		switch {
		case err == nil:
			if changed {
				p.r.log.Info("instances.volume_ready", "volume", id, "size_bytes", v.GetSizeBytes())
			}
		case errors.Is(err, volumes.ErrStoreFull):
			msg = ReasonVolumeStoreFull + ": " + err.Error()
			p.again(id, msg)
		case errors.Is(err, volumes.ErrShrink):
			msg = ReasonVolumeShrink + ": " + err.Error()
			p.fail(id, ReasonVolumeFailed, msg)
		default:
			msg = err.Error()
			p.fail(id, ReasonVolumeFailed, msg)
		}
		info, serr := statFile(store.Path(id))
		switch {
		case serr != nil:
			p.volErr[id] = msg
			p.volStatus[id] = &agentv1.VolumeStatus{Id: id, State: StateFailed, Message: msg}
		default:
			p.volStatus[id] = &agentv1.VolumeStatus{Id: id, State: VolumeReady, SizeBytes: uint64(info.Size()), Message: msg}
		}
	}
}

// removeAndStop destroys the domains the spec no longer lists (or lists
// under another runtime), and those it had reported before, then stops
// the instances to stop; it then counts what the running domains hold.
func (p *pass) removeAndStop() error {
	gone := map[string]bool{}
	for id := range p.seen {
		gone[id] = true
	}
	p.r.mu.Lock()
	for id := range p.r.statuses {
		gone[id] = true
	}
	p.r.mu.Unlock()
	for id := range gone {
		if err := p.remove(id); err != nil {
			return err
		}
	}
	for _, id := range p.order {
		w := p.wanted[id]
		for _, o := range p.seen[id] {
			if o.rt.Name() != w.GetRuntime() || w.GetState() != StateStopped || o.state != runtime.Running {
				continue
			}
			if err := o.rt.Stop(p.ctx, id); err != nil {
				p.again(id, fmt.Sprintf("%s: stopping %s: %v", ReasonRuntimeFailed, id, err))
				continue
			}
			o.state = runtime.Defined
			p.r.log.Info("instances.stopped", "instance", id, "runtime", o.rt.Name())
		}
	}
	for _, id := range p.order {
		if o := p.domainOf(id); o != nil && o.state == runtime.Running {
			p.hold(p.wanted[id])
		}
	}
	return nil
}

// remove destroys an id's domains in every runtime but the one the spec
// names for it; a failure keeps it reported (failed) and is retried.
func (p *pass) remove(id string) error {
	w := p.wanted[id]
	for _, rt := range p.r.cfg.Runtimes {
		if w != nil && rt.Name() == w.GetRuntime() {
			continue
		}
		if !runtime.IDPattern.MatchString(id) {
			continue
		}
		if err := rt.Destroy(p.ctx, id); err != nil {
			p.statuses[id] = &agentv1.InstanceStatus{Id: id, State: StateFailed, Generation: p.generation, Runtime: rt.Name(),
				Message: fmt.Sprintf("%s: destroying %s: %v", ReasonRuntimeFailed, id, err)}
			p.again(id, p.statuses[id].GetMessage())
			continue
		}
		if p.had(id, rt) {
			p.r.log.Info("instances.destroyed", "instance", id, "runtime", rt.Name())
		}
	}
	var kept []*observed
	for _, o := range p.seen[id] {
		if w != nil && o.rt.Name() == w.GetRuntime() {
			kept = append(kept, o)
		}
	}
	p.seen[id] = kept
	return nil
}

// had says whether rt had the domain when the pass began.
func (p *pass) had(id string, rt runtime.Runtime) bool {
	for _, o := range p.seen[id] {
		if o.rt == rt {
			return true
		}
	}
	return false
}

// domainOf is what the instance's own runtime has of it (nil: nothing).
func (p *pass) domainOf(id string) *observed {
	for _, o := range p.seen[id] {
		if o.rt.Name() == p.wanted[id].GetRuntime() {
			return o
		}
	}
	return nil
}

// hold counts a running instance's vCPUs, memory and volume opens.
func (p *pass) hold(w *agentv1.InstanceSpec) {
	p.held.VCPUs += w.GetVcpus()
	p.held.MemoryBytes += w.GetMemoryBytes()
	for _, a := range w.GetVolumes() {
		p.opens[a.GetVolumeId()] = append(p.opens[a.GetVolumeId()], volumes.Open{Instance: w.GetId(), ReadOnly: a.GetReadOnly()})
	}
}

// unhold takes back what hold counted of an instance stopped in the pass.
func (p *pass) unhold(w *agentv1.InstanceSpec) {
	p.held.VCPUs -= w.GetVcpus()
	p.held.MemoryBytes -= w.GetMemoryBytes()
	for _, a := range w.GetVolumes() {
		p.opens[a.GetVolumeId()] = slices.DeleteFunc(p.opens[a.GetVolumeId()], func(o volumes.Open) bool { return o.Instance == w.GetId() })
	}
}

// destroyVolumes removes the volumes no longer listed that no listed
// instance attaches and no running domain has open.
func (p *pass) destroyVolumes() {
	store := p.r.cfg.Volumes
	if store == nil {
		return
	}
	list, err := store.List()
	if err != nil {
		p.again("", fmt.Sprintf("%s: listing the volumes: %v", ReasonRuntimeFailed, err))
		return
	}
	attached := map[string]bool{}
	for _, w := range p.wanted {
		for _, a := range w.GetVolumes() {
			attached[a.GetVolumeId()] = true
		}
	}
	for _, v := range list {
		if _, listed := p.volumes[v.ID]; listed {
			continue
		}
		if attached[v.ID] || len(p.opens[v.ID]) > 0 {
			p.volStatus[v.ID] = &agentv1.VolumeStatus{Id: v.ID, State: VolumeReady, SizeBytes: v.Size,
				Message: "no longer listed; kept while an instance has it"}
			continue
		}
		if err := store.Destroy(v.ID); err != nil {
			p.again(v.ID, fmt.Sprintf("%s: destroying volume %s: %v", ReasonRuntimeFailed, v.ID, err))
			continue
		}
		p.r.log.Info("instances.volume_destroyed", "volume", v.ID)
	}
}

// converge defines, admits and starts one listed instance.
func (p *pass) converge(id string) error {
	w := p.wanted[id]
	rt := p.r.runtimes[w.GetRuntime()]
	if rt == nil {
		msg := fmt.Sprintf("%s: instance %s names runtime %q; this bcd has %s", ReasonRuntimeUnknown, id, w.GetRuntime(), p.r.names())
		p.status(w, StateFailed, msg)
		p.failed = append([]problem{{ReasonRuntimeUnknown, msg}}, p.failed...)
		p.r.log.Warn("instances.failed", "instance", id, "reason", ReasonRuntimeUnknown, "runtime", w.GetRuntime())
		return nil
	}
	dom, msg, final := p.domain(w)
	if msg != "" {
		p.settle(w, StatePending, msg, final)
		return nil
	}
	if err := runtime.CheckPolicy(rt, dom); err != nil {
		// Never run, nor reported applied, without its policy.
		p.settle(w, StateFailed, ReasonPlanUnsupported+": "+runtime.Why(err), true)
		return nil
	}
	o := p.domainOf(id)
	if o != nil && o.fp != dom.Fingerprint() && o.state == runtime.Running {
		// A changed definition (a new policy, a new size) is defined only
		// powered off, then started: defining makes its taps anew, which a
		// running guest would lose, and it would keep running the old one.
		if err := rt.Stop(p.ctx, id); err != nil {
			p.again(id, fmt.Sprintf("%s: stopping %s to define it again: %v", ReasonRuntimeFailed, id, err))
			return nil
		}
		o.state = runtime.Defined
		p.unhold(w)
		p.r.log.Info("instances.redefining", "instance", id, "runtime", rt.Name())
	}
	if o == nil || o.fp != dom.Fingerprint() {
		ok, err := p.define(rt, w, dom)
		if !ok || err != nil {
			return err
		}
		state, fp, err := rt.Inspect(p.ctx, id)
		if err != nil {
			return err
		}
		if o == nil {
			o = &observed{rt: rt}
			p.seen[id] = append(p.seen[id], o)
		}
		o.state, o.fp = state, fp
	}
	switch {
	case w.GetState() == StateStopped:
		p.status(w, StateStopped, "")
	case o.state == runtime.Running:
		p.status(w, StateRunning, "")
	default:
		return p.start(rt, w, o)
	}
	return nil
}

// settle records a status whose message says why; final is FAILED.
func (p *pass) settle(w *agentv1.InstanceSpec, state, msg string, final bool) {
	if final {
		p.status(w, StateFailed, msg)
		p.fail(w.GetId(), ReasonInstanceFailed, msg)
		return
	}
	p.status(w, state, msg)
	p.again(w.GetId(), msg)
}

// define fetches the seed's user data and defines the domain; false when
// it could not (the status says why).
func (p *pass) define(rt runtime.Runtime, w *agentv1.InstanceSpec, dom *runtime.Domain) (bool, error) {
	ref := w.GetUserDataSecret()
	if ref != "" {
		data, msg, final := p.secret(ref)
		if msg != "" {
			p.settle(w, StatePending, msg, final)
			return false, nil
		}
		dom.Seed.UserData = data
	}
	err := rt.Define(p.ctx, dom)
	if ref != "" {
		p.r.cfg.Secrets.Forget(ref)
		clear(dom.Seed.UserData)
	}
	switch {
	case errors.Is(err, runtime.ErrInvalid):
		p.settle(w, StateFailed, ReasonInstanceInvalid+": "+runtime.Why(err), true)
		return false, nil
	case errors.Is(err, runtime.ErrUnsupported):
		p.settle(w, StateFailed, ReasonPlanUnsupported+": "+runtime.Why(err), true)
		return false, nil
	case err != nil:
		p.settle(w, StateFailed, fmt.Sprintf("%s: defining %s: %v", ReasonRuntimeFailed, w.GetId(), err), false)
		return false, nil
	}
	p.r.log.Info("instances.defined", "instance", w.GetId(), "runtime", rt.Name(), "vcpus", w.GetVcpus(), "memory_bytes", w.GetMemoryBytes())
	return true, nil
}

// secret asks the broker for a secret's plaintext: the data, or why not
// and whether that is final.
func (p *pass) secret(ref string) ([]byte, string, bool) {
	if p.r.cfg.Secrets == nil {
		return nil, ReasonSecretRefused + ": this bcd has no secret broker", true
	}
	data, err := p.r.cfg.Secrets.Secret(ref)
	switch {
	case err == nil:
		return data, "", false
	case errors.Is(err, broker.ErrPending):
		return nil, fmt.Sprintf("%s: waiting for the secret user data %s", ReasonSecretPending, ref), false
	case refusal.CodeOf(err) != "":
		return nil, ReasonSecretRefused + ": " + err.Error(), true
	}
	return nil, fmt.Sprintf("%s: %v", ReasonSecretPending, err), false
}

// start admits and starts a defined instance.
func (p *pass) start(rt runtime.Runtime, w *agentv1.InstanceSpec, o *observed) error {
	id := w.GetId()
	for _, a := range w.GetVolumes() {
		if err := volumes.Share(p.opens[a.GetVolumeId()], volumes.Open{Instance: id, ReadOnly: a.GetReadOnly()}); err != nil {
			p.settle(w, StateStopped, fmt.Sprintf("%s: volume %s: %v", ReasonVolumeBusy, a.GetVolumeId(), err), false)
			return nil
		}
	}
	if msg := p.admit(w); msg != "" {
		p.status(w, StateStopped, msg)
		p.exhausted = append(p.exhausted, id)
		p.r.log.Info("instances.not_admitted", "instance", id, "message", msg)
		return nil
	}
	if err := rt.Start(p.ctx, id); err != nil {
		p.settle(w, StateStopped, fmt.Sprintf("%s: starting %s: %v", ReasonRuntimeFailed, id, err), false)
		return nil
	}
	p.hold(w)
	state, _, err := rt.Inspect(p.ctx, id)
	if err != nil {
		return err
	}
	o.state = state
	if state == runtime.Running {
		p.status(w, StateRunning, "")
	} else {
		p.status(w, StateStarting, "")
	}
	p.r.log.Info("instances.started", "instance", id, "runtime", rt.Name())
	return nil
}

// domain builds an instance's domain: its network policy (checked),
// placement, balloon floor, GPUs, image, NICs (a MAC of its own when the
// spec names none) and taps, its volumes, its seed (without secret user
// data, which define fetches). A message says why it cannot be built yet,
// final when it never will as specified.
func (p *pass) domain(w *agentv1.InstanceSpec) (*runtime.Domain, string, bool) {
	d := &runtime.Domain{ID: w.GetId(), VCPUs: w.GetVcpus(), MemoryBytes: w.GetMemoryBytes(), HugePageBytes: w.GetHugepageBytes(),
		MemoryFloorBytes: w.GetMemoryFloorBytes(), Accelerator: p.r.cfg.Accelerator, NetworkPolicy: networkPolicy(w.GetNetworkPolicy())}
	if err := d.NetworkPolicy.Validate(); err != nil {
		return nil, fmt.Sprintf("%s: instance %s: %s", ReasonInstanceInvalid, w.GetId(), runtime.Why(err)), true
	}
	if c := w.GetCpus(); c != nil {
		if why := p.pinnable(c); why != "" {
			return nil, fmt.Sprintf("%s: instance %s: %s", ReasonPlacementInvalid, w.GetId(), why), true
		}
		d.CPUs = &runtime.Pinning{Node: c.GetNumaNode(), HostCPUs: slices.Clone(c.GetHostCpus())}
	}
	gpus, why := p.gpus(w)
	if why != "" {
		return nil, why, true
	}
	d.GPUs = gpus
	if digest := w.GetImage(); digest != "" {
		im, msg, final := p.image(w.GetId(), digest)
		if msg != "" {
			return nil, msg, final
		}
		d.Image = im
	}
	for i, n := range w.GetNics() {
		mac := n.GetMac()
		if mac == "" {
			mac = runtime.MACFor(w.GetId(), i)
		}
		d.NICs = append(d.NICs, runtime.NIC{Bridge: n.GetBridge(), MAC: mac})
	}
	d.WithTaps()
	for _, a := range w.GetVolumes() {
		vid := a.GetVolumeId()
		if _, listed := p.volumes[vid]; !listed {
			return nil, fmt.Sprintf("%s: instance %s attaches volume %q, which the section does not list", ReasonVolumeUnknown, w.GetId(), vid), true
		}
		if why := p.volErr[vid]; why != "" {
			return nil, fmt.Sprintf("volume %s: %s", vid, why), false
		}
		d.Disks = append(d.Disks, runtime.Disk{VolumeID: vid, Path: p.r.cfg.Volumes.Path(vid), Serial: a.GetSerial(), ReadOnly: a.GetReadOnly()})
	}
	d.Seed.MetaData = []byte(fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", w.GetId(), w.GetId()))
	if ref := w.GetUserDataSecret(); ref != "" {
		d.SeedID = "secret:" + ref
	} else {
		sum := sha256.Sum256(w.GetUserData())
		d.SeedID = "sha256:" + hex.EncodeToString(sum[:])
		d.Seed.UserData = w.GetUserData()
	}
	return d, "", false
}

// networkPolicy is the spec's network policy as the runtimes take it (nil:
// none; an empty one allows no flow).
func networkPolicy(np *agentv1.NetworkPolicy) *runtime.NetworkPolicy {
	if np == nil {
		return nil
	}
	rules := func(in []*agentv1.NetworkRule) []runtime.NetworkRule {
		var out []runtime.NetworkRule
		for _, r := range in {
			out = append(out, runtime.NetworkRule{Protocol: r.GetProtocol(), CIDR: r.GetCidr(), PortMin: r.GetPortMin(), PortMax: r.GetPortMax()})
		}
		return out
	}
	return &runtime.NetworkPolicy{Ingress: rules(np.GetIngress()), Egress: rules(np.GetEgress())}
}

// image finds an instance's image in the store: why not, and whether that
// is final (a file that does not hash to its digest), or will pass once
// the image is in the store.
func (p *pass) image(id, digest string) (*runtime.Image, string, bool) {
	if p.r.cfg.Images == nil {
		return nil, fmt.Sprintf("%s: instance %s boots %s: this host has no image store", ReasonPlanUnsupported, id, digest), true
	}
	im, err := p.r.cfg.Images.Resolve(digest)
	switch {
	case err == nil:
		return im, "", false
	case errors.Is(err, images.ErrUnknown):
		return nil, fmt.Sprintf("%s: instance %s: %v", ReasonImageUnknown, id, err), false
	case errors.Is(err, images.ErrMismatch):
		return nil, fmt.Sprintf("%s: instance %s: %v", ReasonImageInvalid, id, err), true
	case errors.Is(err, runtime.ErrInvalid):
		return nil, fmt.Sprintf("%s: instance %s: %s", ReasonInstanceInvalid, id, runtime.Why(err)), true
	}
	return nil, fmt.Sprintf("%s: instance %s: image %s: %v", ReasonRuntimeFailed, id, digest, err), false
}

// statusList is the pass's statuses by id.
func (p *pass) statusList() []*agentv1.InstanceStatus {
	ids := make([]string, 0, len(p.statuses))
	for id := range p.statuses {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]*agentv1.InstanceStatus, 0, len(ids))
	for _, id := range ids {
		out = append(out, p.statuses[id])
	}
	return out
}

// volumeList is the pass's volume statuses by id.
func (p *pass) volumeList() []*agentv1.VolumeStatus {
	out := make([]*agentv1.VolumeStatus, 0, len(p.volStatus))
	for _, v := range p.volStatus {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}
