// Package libvirt is the libvirt-kvm runtime of host builds: an
// unprivileged bcd defines, starts, stops and destroys libvirt domains
// through bcd helper (docs/daemon.md, "bcd helper": domain.define, which
// renders the XML with runtime/plan, domain.start, domain.destroy,
// domain.undefine, domain.state), and its NICs are taps the helper makes
// for it (ch.taps, removed with ch.taps.delete) that the domain uses
// unmanaged. bcd keeps its own record and the seed of each domain
// (runtime/hostfiles).
package libvirt

import (
	"context"
	"errors"
	"fmt"

	"bcd/internal/helper"
	"bcd/internal/runtime"
	"bcd/internal/runtime/hostfiles"
)

// Caller sends one request to bcd helper (helper.Call; tests replace it).
type Caller func(ctx context.Context, socket, op string, args, result any) error

// Options configure the runtime.
type Options struct {
	// Socket is bcd helper's socket.
	Socket string
	// StateDir keeps the records and the seeds.
	StateDir string
	// Call reaches the helper (default helper.Call).
	Call Caller
}

// Runtime is libvirt-kvm through bcd helper.
type Runtime struct {
	opts  Options
	files *hostfiles.Files
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns the runtime.
func New(opts Options) *Runtime {
	if opts.Call == nil {
		opts.Call = helper.Call
	}
	return &Runtime{opts: opts, files: hostfiles.New(opts.StateDir, runtime.NameLibvirtKVM)}
}

// Name is libvirt-kvm.
func (r *Runtime) Name() string { return runtime.NameLibvirtKVM }

// Version is what the Hello says: the helper's libvirt.
func (r *Runtime) Version() string { return "virsh" }

func (r *Runtime) call(ctx context.Context, op string, args, result any) error {
	return r.opts.Call(ctx, r.opts.Socket, op, args, result)
}

// args are the helper's arguments of a domain.
func args(d *runtime.Domain) helper.DomainArgs {
	a := helper.DomainArgs{ID: d.ID, VCPUs: d.VCPUs, MemoryBytes: d.MemoryBytes}
	for _, n := range d.NICs {
		a.NICs = append(a.NICs, helper.NIC{Bridge: n.Bridge, MAC: n.MAC, Tap: n.Tap})
	}
	for _, disk := range d.Disks {
		a.Disks = append(a.Disks, helper.Disk{Path: disk.Path, Serial: disk.Serial, ReadOnly: disk.ReadOnly})
	}
	return a
}

// invalid turns the helper's refusal of a domain into runtime.ErrInvalid.
func invalid(err error) error {
	if errors.Is(err, helper.CodeBridge) || errors.Is(err, helper.CodeArgs) || errors.Is(err, helper.CodeDisk) {
		return fmt.Errorf("%w: %s", runtime.ErrInvalid, err)
	}
	return err
}

// Define writes the seed, has the helper make the taps and define the
// domain, and records it; a refused domain leaves nothing.
func (r *Runtime) Define(ctx context.Context, d *runtime.Domain) error {
	d.WithTaps()
	if err := r.files.WriteSeed(d); err != nil {
		return err
	}
	a := args(d)
	err := r.call(ctx, helper.OpChTaps, a, nil)
	if err == nil {
		err = r.call(ctx, helper.OpDomainDefine, a, nil)
	}
	if err != nil {
		_ = r.call(ctx, helper.OpChTapsDelete, helper.DomainArgs{ID: d.ID}, nil)
		_ = r.files.Remove(d.ID)
		return invalid(err)
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
	if err := r.call(ctx, helper.OpChTaps, args(&rec.Domain), nil); err != nil {
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

// Destroy powers the domain off, undefines it, and removes its taps,
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
