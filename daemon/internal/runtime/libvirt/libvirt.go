// Package libvirt is the libvirt-kvm runtime of host builds: an
// unprivileged bcd defines, starts, stops and destroys libvirt domains
// through bcd helper (docs/daemon.md, "bcd helper": domain.define, which
// renders the XML with runtime/plan, domain.start, domain.destroy,
// domain.undefine, domain.state), and its NICs are taps the helper makes
// for it (ch.taps, removed with ch.taps.delete) that the domain uses
// unmanaged, each NIC with its address on the instance network
// (runtime/guestnet) that the helper's guard holds it to. Every field of
// the plan goes to the helper (pinning, huge pages, the balloon floor,
// GPUs, the image, the seed disk's files, the accelerator), which applies
// it or refuses it (instance-plan: runtime.ErrUnsupported), and so does
// the network policy, which the helper adds to each tap's guard (this
// runtime is a runtime.PolicyEnforcer); a running guest is ballooned with
// domain.setmem and its usage read with domain.stats. bcd keeps its own
// record and the seed of each domain (runtime/hostfiles).
package libvirt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"bcd/internal/helper"
	"bcd/internal/runtime"
	"bcd/internal/runtime/guestnet"
	"bcd/internal/runtime/hostfiles"
)

// Caller sends one request to bcd helper (helper.Call; tests replace it).
type Caller func(ctx context.Context, socket, op string, args, result any) error

// Options configure the runtime.
type Options struct {
	// Socket is bcd helper's socket.
	Socket string
	// StateDir keeps the records, the seeds and the addresses.
	StateDir string
	// Call reaches the helper (default helper.Call).
	Call Caller
}

// Runtime is libvirt-kvm through bcd helper.
type Runtime struct {
	opts  Options
	files *hostfiles.Files
}

var (
	_ runtime.Runtime        = (*Runtime)(nil)
	_ runtime.Ballooner      = (*Runtime)(nil)
	_ runtime.UsageReader    = (*Runtime)(nil)
	_ runtime.PolicyEnforcer = (*Runtime)(nil)
)

// New returns the runtime.
func New(opts Options) *Runtime {
	if opts.Call == nil {
		opts.Call = helper.Call
	}
	return &Runtime{opts: opts, files: hostfiles.New(opts.StateDir, runtime.NameLibvirtKVM)}
}

// Name is libvirt-kvm.
func (r *Runtime) Name() string { return runtime.NameLibvirtKVM }

// EnforcesNetworkPolicy is true: every NIC is on a tap the helper guards,
// with the domain's policy.
func (r *Runtime) EnforcesNetworkPolicy() bool { return true }

// Version is what the Hello says: the helper's libvirt.
func (r *Runtime) Version() string { return "virsh" }

func (r *Runtime) call(ctx context.Context, op string, args, result any) error {
	return r.opts.Call(ctx, r.opts.Socket, op, args, result)
}

// Args are the helper's arguments of a domain: every field of its plan.
func Args(d *runtime.Domain) helper.DomainArgs {
	a := helper.DomainArgs{ID: d.ID, VCPUs: d.VCPUs, MemoryBytes: d.MemoryBytes, CPUs: d.CPUs, HugePageBytes: d.HugePageBytes,
		MemoryFloorBytes: d.MemoryFloorBytes, GPUs: d.GPUs, Image: d.Image, Accelerator: d.Accelerator,
		NetworkPolicy: d.NetworkPolicy}
	for _, n := range d.NICs {
		a.NICs = append(a.NICs, helper.NIC{Bridge: n.Bridge, MAC: n.MAC, Tap: n.Tap, Address: n.Address})
	}
	for _, disk := range d.Disks {
		a.Disks = append(a.Disks, helper.Disk{Path: disk.Path, Serial: disk.Serial, ReadOnly: disk.ReadOnly})
	}
	if d.Image != nil {
		a.Seed = &helper.SeedArgs{MetaData: string(d.Seed.MetaData), NetworkConfig: string(d.Seed.NetworkConfig)}
	}
	return a
}

// refusal turns the helper's refusal of a domain into runtime.ErrInvalid
// (what libvirt would refuse) or runtime.ErrUnsupported (what this host
// cannot apply).
func refusal(err error) error {
	switch {
	case errors.Is(err, helper.CodePlan):
		return fmt.Errorf("%w: %s", runtime.ErrUnsupported, err)
	case errors.Is(err, helper.CodeBridge) || errors.Is(err, helper.CodeArgs) || errors.Is(err, helper.CodeDisk):
		return fmt.Errorf("%w: %s", runtime.ErrInvalid, err)
	}
	return err
}

// Define gives the NICs their addresses, writes the seed, has the helper
// make the taps and define the domain, and records it; a refused domain
// leaves nothing (an earlier definition keeps its addresses).
func (r *Runtime) Define(ctx context.Context, d *runtime.Domain) error {
	d.WithTaps()
	if err := d.NetworkPolicy.Validate(); err != nil {
		return err
	}
	had, err := r.files.Read(d.ID)
	if err != nil {
		return err
	}
	err = hostfiles.Addresses(r.opts.StateDir).AssignAll(d)
	if err == nil {
		err = runtime.CheckPolicyGuarded(d, true)
	}
	if err == nil {
		d.Seed.NetworkConfig = guestnet.NetworkConfig(d)
		err = r.files.WriteSeed(d)
	}
	a := Args(d)
	if err == nil {
		err = r.call(ctx, helper.OpChTaps, a, nil)
	}
	if err == nil {
		err = r.call(ctx, helper.OpDomainDefine, a, nil)
	}
	if err != nil {
		if had == nil {
			_ = r.call(ctx, helper.OpChTapsDelete, helper.DomainArgs{ID: d.ID}, nil)
			_ = r.files.Remove(d.ID)
			_ = hostfiles.Addresses(r.opts.StateDir).Release(d.ID)
		}
		return refusal(err)
	}
	return r.files.Write(d)
}

// Start makes the taps again (a reboot took them) and starts the domain.
func (r *Runtime) Start(ctx context.Context, id string) error {
	rec, err := r.files.Read(id)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("libvirt: domain bcd-%s is not defined", id)
	}
	if err := r.call(ctx, helper.OpChTaps, Args(&rec.Domain), nil); err != nil {
		return err
	}
	return r.call(ctx, helper.OpDomainStart, helper.DomainArgs{ID: id}, nil)
}

// Stop powers the domain off.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	state, err := r.state(ctx, id)
	if err != nil || state != runtime.Running {
		return err
	}
	return r.call(ctx, helper.OpDomainDestroy, helper.DomainArgs{ID: id}, nil)
}

// Destroy powers the domain off, undefines it (the helper removes its
// overlay, seed disk and console log), and removes its taps, addresses,
// record and seed.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	state, err := r.state(ctx, id)
	if err != nil {
		return err
	}
	if state == runtime.Running {
		if err := r.call(ctx, helper.OpDomainDestroy, helper.DomainArgs{ID: id}, nil); err != nil {
			return err
		}
	}
	if state != runtime.Absent {
		if err := r.call(ctx, helper.OpDomainUndefine, helper.DomainArgs{ID: id}, nil); err != nil {
			return err
		}
	}
	if err := r.call(ctx, helper.OpChTapsDelete, helper.DomainArgs{ID: id}, nil); err != nil {
		return err
	}
	if err := hostfiles.Addresses(r.opts.StateDir).Release(id); err != nil {
		return err
	}
	return r.files.Remove(id)
}

func (r *Runtime) state(ctx context.Context, id string) (runtime.State, error) {
	res := &helper.StateResult{}
	if err := r.call(ctx, helper.OpDomainState, helper.DomainArgs{ID: id}, res); err != nil {
		return "", err
	}
	return runtime.State(res.State), nil
}

// Inspect asks the helper for the domain's state; the fingerprint is bcd's
// record's.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtime.State, string, error) {
	rec, err := r.files.Read(id)
	if err != nil || rec == nil {
		return runtime.Absent, "", err
	}
	state, err := r.state(ctx, id)
	if err != nil {
		return "", "", err
	}
	if state == runtime.Absent {
		return runtime.Absent, "", nil
	}
	return state, rec.Fingerprint, nil
}

// List returns the domains bcd recorded.
func (r *Runtime) List(context.Context) ([]string, error) { return r.files.List() }

// Seed reads an instance's seed (the metadata endpoint's).
func (r *Runtime) Seed(id string) ([]byte, []byte, error) { return r.files.Seed(id) }

// stats asks the helper for a running guest's domstats.
func (r *Runtime) stats(ctx context.Context, id string) (*helper.StatsResult, error) {
	res := &helper.StatsResult{}
	return res, r.call(ctx, helper.OpDomainStats, helper.DomainArgs{ID: id}, res)
}

// Balloon is what the running guest has now (domstats' balloon.current).
func (r *Runtime) Balloon(ctx context.Context, id string) (uint64, error) {
	st, err := r.stats(ctx, id)
	if err != nil {
		return 0, err
	}
	return st.BalloonCurrentBytes, nil
}

// SetBalloon sets what it has (virsh setmem --live through the helper,
// which holds it between the floor and the memory).
func (r *Runtime) SetBalloon(ctx context.Context, id string, bytes uint64) error {
	return r.call(ctx, helper.OpDomainSetMem, helper.SetMemArgs{ID: id, MemoryBytes: bytes}, nil)
}

// Usage is what virsh domstats says the running guest used: its CPU time,
// its memory in use (what its balloon driver reports available less
// unused, or QEMU's resident memory before it reported), its disk and
// network bytes.
func (r *Runtime) Usage(ctx context.Context, id string) (runtime.Usage, error) {
	st, err := r.stats(ctx, id)
	if err != nil {
		return runtime.Usage{}, err
	}
	used := st.RSSBytes
	if st.AvailableBytes > 0 && st.UnusedBytes <= st.AvailableBytes {
		used = st.AvailableBytes - st.UnusedBytes
	}
	return runtime.Usage{CPUTime: time.Duration(st.CPUTimeNs), MemoryUsedBytes: used, DiskReadBytes: st.DiskReadBytes,
		DiskWriteBytes: st.DiskWriteBytes, NetRxBytes: st.NetRxBytes, NetTxBytes: st.NetTxBytes}, nil
}
