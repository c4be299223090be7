// Package cloudhypervisor is the cloud-hypervisor runtime of host builds:
// bcd runs one cloud-hypervisor process per running domain, as its own
// user in a session of its own (so it outlives a restart of bcd), on taps
// bcd helper makes for it (ch.taps: owned by bcd's user and enslaved to
// their bridge; ch.taps.delete removes them). A domain is its record and
// seed (runtime/hostfiles); it runs while the process of its pid file is
// that cloud-hypervisor. The guest finds its NoCloud seed through the
// SMBIOS serial, as in a libvirt domain (runtime/plan.SeedURL). Its NICs
// have their addresses on the instance network, guarded by the helper as
// a libvirt domain's are, with the domain's network policy (so this
// runtime is a runtime.PolicyEnforcer). What this runtime does not carry yet (pinning,
// huge pages, a balloon floor, GPUs, a boot image, TCG) it refuses with
// runtime.ErrUnsupported rather than run the guest without it; and a host
// whose cloud-hypervisor binary or working KVM is missing does not have
// the runtime at all (Available).
package cloudhypervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"bcd/internal/config"
	"bcd/internal/helper"
	"bcd/internal/runtime"
	"bcd/internal/runtime/guestnet"
	"bcd/internal/runtime/hostfiles"
	"bcd/internal/runtime/libvirt"
	"bcd/internal/runtime/plan"
)

// Options configure the runtime.
type Options struct {
	// Socket is bcd helper's socket (for the taps).
	Socket string
	// StateDir keeps the records, seeds, API sockets, pid files and logs.
	StateDir string
	// Binary is cloud-hypervisor; Firmware what it boots.
	Binary, Firmware string
	// Call reaches the helper (default helper.Call).
	Call libvirt.Caller
}

// Runtime is cloud-hypervisor.
type Runtime struct {
	opts  Options
	files *hostfiles.Files
}

var (
	_ runtime.Runtime        = (*Runtime)(nil)
	_ runtime.PolicyEnforcer = (*Runtime)(nil)
)

// New returns the runtime.
func New(opts Options) *Runtime {
	if opts.Call == nil {
		opts.Call = helper.Call
	}
	return &Runtime{opts: opts, files: hostfiles.New(opts.StateDir, runtime.NameCloudHypervisor)}
}

// Name is cloud-hypervisor.
func (r *Runtime) Name() string { return runtime.NameCloudHypervisor }

// EnforcesNetworkPolicy is true: every NIC is on a tap the helper guards,
// with the domain's policy.
func (r *Runtime) EnforcesNetworkPolicy() bool { return true }

// Version is the binary's name (its --version needs no KVM, but a Hello
// should not wait for it).
func (r *Runtime) Version() string { return filepath.Base(r.opts.Binary) }

func (r *Runtime) path(id, ext string) string { return filepath.Join(r.files.Dir(), id+ext) }

// Define checks the domain (libvirt's checks; the bridges are the
// helper's to check), has the helper make its taps (a NIC on a bridge that
// is not an instance bridge is refused there), writes its seed and
// records it. The taps are made again at each start.
func (r *Runtime) Define(ctx context.Context, d *runtime.Domain) error {
	var bridges []string
	for _, n := range d.NICs {
		bridges = append(bridges, n.Bridge)
	}
	if err := plan.Check(d, bridges); err != nil {
		return err
	}
	if err := d.NetworkPolicy.Validate(); err != nil {
		return err
	}
	if why := unsupported(d); why != "" {
		return fmt.Errorf("%w: cloud-hypervisor: domain %s: %s", runtime.ErrUnsupported, d.ID, why)
	}
	d.WithTaps()
	if err := hostfiles.Addresses(r.opts.StateDir).AssignAll(d); err != nil {
		return err
	}
	if err := runtime.CheckPolicyGuarded(d, false); err != nil {
		return err
	}
	if err := r.taps(ctx, d); err != nil {
		switch {
		case errors.Is(err, helper.CodePlan):
			return fmt.Errorf("%w: %s", runtime.ErrUnsupported, err)
		case errors.Is(err, helper.CodeBridge) || errors.Is(err, helper.CodeArgs):
			return fmt.Errorf("%w: %s", runtime.ErrInvalid, err)
		}
		return err
	}
	d.Seed.NetworkConfig = guestnet.NetworkConfig(d)
	if err := r.files.WriteSeed(d); err != nil {
		return err
	}
	return r.files.Write(d)
}

// unsupported says which field of d this runtime does not carry ("": none).
func unsupported(d *runtime.Domain) string {
	switch {
	case d.CPUs != nil:
		return "pinned vCPUs are not carried by this runtime"
	case d.HugePageBytes != 0:
		return "huge-page backing is not carried by this runtime"
	case d.MemoryFloorBytes != 0:
		return "a balloon floor is not carried by this runtime (it does not balloon)"
	case len(d.GPUs) > 0:
		return "GPU passthrough is not carried by this runtime"
	case d.Image != nil:
		return "a boot image is not carried by this runtime"
	case d.Accelerator == runtime.AccelTCG:
		return "it runs on KVM only, and this host's accelerator is tcg"
	}
	return ""
}

// taps has the helper make the domain's taps, each NIC held to its address
// and to the domain's network policy.
func (r *Runtime) taps(ctx context.Context, d *runtime.Domain) error {
	if len(d.NICs) == 0 {
		return nil
	}
	a := helper.DomainArgs{ID: d.ID, NetworkPolicy: d.NetworkPolicy}
	for _, n := range d.NICs {
		a.NICs = append(a.NICs, helper.NIC{Bridge: n.Bridge, MAC: n.MAC, Address: n.Address})
	}
	return r.opts.Call(ctx, r.opts.Socket, helper.OpChTaps, a, nil)
}

// Args is the command line of a domain.
func (r *Runtime) Args(d *runtime.Domain) []string {
	args := []string{
		"--api-socket", "path=" + r.path(d.ID, ".sock"),
		"--cpus", "boot=" + strconv.FormatUint(uint64(d.VCPUs), 10),
		"--memory", "size=" + strconv.FormatUint(d.MemoryBytes/(1<<20), 10) + "M",
		"--kernel", r.opts.Firmware,
		"--platform", "serial_number=ds=nocloud;s=" + plan.SeedURL,
		"--serial", "tty", "--console", "off",
	}
	for _, disk := range d.Disks {
		spec := "path=" + disk.Path
		if disk.ReadOnly {
			spec += ",readonly=on"
		}
		if disk.Serial != "" {
			spec += ",serial=" + disk.Serial
		}
		args = append(args, "--disk", spec)
	}
	for _, n := range d.NICs {
		spec := "tap=" + n.Tap
		if n.MAC != "" {
			spec += ",mac=" + n.MAC
		}
		args = append(args, "--net", spec)
	}
	return args
}

// Start has the helper make the taps and starts cloud-hypervisor.
func (r *Runtime) Start(ctx context.Context, id string) error {
	rec, err := r.files.Read(id)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("cloud-hypervisor: domain %s is not defined", id)
	}
	if r.pid(id) > 0 {
		return nil
	}
	if err := r.taps(ctx, &rec.Domain); err != nil {
		return err
	}
	logf, err := os.OpenFile(r.path(id, ".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	_ = os.Remove(r.path(id, ".sock"))
	cmd := exec.Command(r.opts.Binary, r.Args(&rec.Domain)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return config.WriteFileAtomic(r.path(id, ".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600)
}

// pid is the running cloud-hypervisor of a domain (0: none): the pid
// file's process, if it is this domain's (its command line names the
// domain's API socket).
func (r *Runtime) pid(id string) int {
	data, err := os.ReadFile(r.path(id, ".pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "path="+r.path(id, ".sock")) {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return 0
		}
	}
	return pid
}

// Stop ends cloud-hypervisor (SIGTERM, SIGKILL after 10 s).
func (r *Runtime) Stop(ctx context.Context, id string) error {
	pid := r.pid(id)
	if pid == 0 {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for r.pid(id) != 0 {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = os.Remove(r.path(id, ".pid"))
	return nil
}

// Destroy stops the domain and removes its taps, record, seed and files.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	if !runtime.IDPattern.MatchString(id) {
		return fmt.Errorf("%w: instance id %q", runtime.ErrInvalid, id)
	}
	if err := r.Stop(ctx, id); err != nil {
		return err
	}
	if err := r.opts.Call(ctx, r.opts.Socket, helper.OpChTapsDelete, helper.DomainArgs{ID: id}, nil); err != nil {
		return err
	}
	if err := hostfiles.Addresses(r.opts.StateDir).Release(id); err != nil {
		return err
	}
	for _, ext := range []string{".sock", ".pid", ".log"} {
		if err := os.Remove(r.path(id, ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return r.files.Remove(id)
}

// Inspect says whether the domain is recorded and runs.
func (r *Runtime) Inspect(_ context.Context, id string) (runtime.State, string, error) {
	rec, err := r.files.Read(id)
	if err != nil || rec == nil {
		return runtime.Absent, "", err
	}
	if r.pid(id) > 0 {
		return runtime.Running, rec.Fingerprint, nil
	}
	return runtime.Defined, rec.Fingerprint, nil
}

// List returns the recorded domains.
func (r *Runtime) List(context.Context) ([]string, error) { return r.files.List() }

// Seed reads an instance's seed.
func (r *Runtime) Seed(id string) ([]byte, []byte, error) { return r.files.Seed(id) }
