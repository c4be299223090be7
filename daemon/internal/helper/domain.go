// Instances: libvirt domains through virsh (domain.define renders the
// domain XML itself from a few fields with runtime/plan, the renderer
// fakehw's plans come from too, never taking XML from the node, and
// refuses a NIC on a bridge outside [helper] instance_bridges, a disk
// outside [helper] volume_dirs, a base image outside [helper] image_dirs,
// or a field this host cannot apply (guest.go), before the domain exists;
// the disks it names are the node's volumes and base image checked and
// bound at paths of root's, disks.go, the boot disk an overlay of root's
// over the base and the seed disk one it makes, guest.go; start, destroy,
// undefine and state by name; setmem and stats of a running guest,
// guest.go), and taps made with ip tuntap, owned by the node's user,
// enslaved only to an instance bridge and let send from the guest's own
// address only (ch.taps, netguard.go), deleted by ch.taps.delete.

package helper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"bcd/internal/config"
	"bcd/internal/runtime"
	"bcd/internal/runtime/plan"
)

// NIC is an instance's network interface.
type NIC struct {
	// Bridge is the bridge it joins.
	Bridge string `json:"bridge"`
	// MAC is its address (optional).
	MAC string `json:"mac,omitempty"`
	// Tap, when set, is the instance's own tap for this NIC (made by
	// ch.taps: it must be TapName(id, i)); the domain then uses it
	// unmanaged instead of a tap libvirt makes on the bridge.
	Tap string `json:"tap,omitempty"`
	// Address is the guest's address on the instance network (with MAC):
	// ch.taps lets the tap send from it only there, and routes it.
	Address string `json:"address,omitempty"`
}

// Disk is a volume of the node attached to a domain.
type Disk struct {
	// Path is the volume's file, under one of [helper] volume_dirs.
	Path string `json:"path"`
	// Serial is what the guest sees.
	Serial string `json:"serial,omitempty"`
	// ReadOnly attaches it read-only.
	ReadOnly bool `json:"read_only,omitempty"`
}

// DomainArgs are the domain.* arguments.
type DomainArgs struct {
	// ID is the instance id; the domain is bcd-<id>.
	ID string `json:"id"`
	// VCPUs and MemoryBytes size it (domain.define).
	VCPUs       uint32 `json:"vcpus,omitempty"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// NICs are its interfaces (domain.define, ch.taps).
	NICs []NIC `json:"nics,omitempty"`
	// Disks are its volumes (domain.define).
	Disks []Disk `json:"disks,omitempty"`
	// CPUs pins its vCPUs on a NUMA node; HugePageBytes backs its memory
	// with huge pages; MemoryFloorBytes is the least domain.setmem leaves
	// it; GPUs are passed through (domain.define).
	CPUs             *runtime.Pinning `json:"cpus,omitempty"`
	HugePageBytes    uint64           `json:"hugepage_bytes,omitempty"`
	MemoryFloorBytes uint64           `json:"memory_floor_bytes,omitempty"`
	GPUs             []runtime.GPU    `json:"gpus,omitempty"`
	// Image is the base disk it boots from (under [helper] image_dirs),
	// through an overlay the helper makes (domain.define).
	Image *runtime.Image `json:"image,omitempty"`
	// Seed is what its seed disk holds (domain.define, with Image).
	Seed *SeedArgs `json:"seed,omitempty"`
	// Accelerator is "kvm" ("") or "tcg" (domain.define).
	Accelerator string `json:"accelerator,omitempty"`
	// NetworkPolicy holds the NICs to the flows it allows (ch.taps adds
	// it to each tap's guard, netguard.go; nil: no policy). Checked again
	// here (runtime.NetworkPolicy.Parse) and rendered from the parsed
	// values only; with one, every NIC must have an address on the
	// instance network (and, for domain.define, its own tap).
	NetworkPolicy *runtime.NetworkPolicy `json:"network_policy,omitempty"`
}

// SeedArgs are the NoCloud seed disk's files.
type SeedArgs struct {
	MetaData      string `json:"meta_data"`
	NetworkConfig string `json:"network_config,omitempty"`
}

// MaxSeedFile bounds each file of a seed disk.
const MaxSeedFile = 64 << 10

// StateResult is domain.state's result: "absent", "defined" or "running".
type StateResult struct {
	State string `json:"state"`
}

// domainOf is the runtime.Domain the helper renders from the arguments
// (with what the helper chooses itself, Local, from localOf).
func domainOf(a *DomainArgs) *runtime.Domain {
	d := &runtime.Domain{ID: a.ID, VCPUs: a.VCPUs, MemoryBytes: a.MemoryBytes, CPUs: a.CPUs, HugePageBytes: a.HugePageBytes,
		MemoryFloorBytes: a.MemoryFloorBytes, GPUs: a.GPUs, Image: a.Image, Accelerator: a.Accelerator,
		NetworkPolicy: a.NetworkPolicy}
	for _, n := range a.NICs {
		d.NICs = append(d.NICs, runtime.NIC{Bridge: n.Bridge, MAC: n.MAC, Tap: n.Tap, Address: n.Address})
	}
	for _, disk := range a.Disks {
		d.Disks = append(d.Disks, runtime.Disk{Path: disk.Path, Serial: disk.Serial, ReadOnly: disk.ReadOnly})
	}
	return d
}

func (s *Server) checkInstance(a *DomainArgs, define bool) error {
	if !runtime.IDPattern.MatchString(a.ID) {
		return refuse(CodeArgs, "instance id %q", a.ID)
	}
	if len(a.NICs) > plan.MaxNICs {
		return refuse(CodeArgs, "%d NICs, at most %d", len(a.NICs), plan.MaxNICs)
	}
	for i, n := range a.NICs {
		if n.MAC != "" && !macAddr.MatchString(n.MAC) {
			return refuse(CodeArgs, "MAC %q", n.MAC)
		}
		if n.Tap != "" && n.Tap != TapName(a.ID, i) {
			return refuse(CodeArgs, "NIC %d: tap %q is not the instance's (%s)", i, n.Tap, TapName(a.ID, i))
		}
		if !slices.Contains(s.cfg.Helper.InstanceBridges, n.Bridge) {
			if define {
				return refuse(CodeBridge, "domain: bridge %q is not an instance network", n.Bridge)
			}
			return refuse(CodeBridge, "ch.taps: %q is not an instance bridge of this host ([helper] instance_bridges)", n.Bridge)
		}
	}
	for _, disk := range a.Disks {
		if !s.volumePath(disk.Path) {
			return refuse(CodeArgs, "disk %q is not a file under [helper] volume_dirs %v", disk.Path, s.cfg.Helper.VolumeDirs)
		}
	}
	if _, err := policyOf(a); err != nil {
		return err
	}
	if err := runtime.CheckPolicyGuarded(domainOf(a), define); err != nil {
		return refuse(CodePlan, "%s", runtime.Why(err))
	}
	if !define {
		return nil
	}
	if a.Image != nil && !plan.DiskUnder(a.Image.Base, s.cfg.Helper.ImageDirs) {
		return refuse(CodeArgs, "image %q is not a file under [helper] image_dirs %v", a.Image.Base, s.cfg.Helper.ImageDirs)
	}
	if seed := a.Seed; seed != nil && (a.Image == nil || len(seed.MetaData) > MaxSeedFile || len(seed.NetworkConfig) > MaxSeedFile) {
		return refuse(CodeArgs, "a seed disk goes with an image, its files at most %d bytes each", MaxSeedFile)
	}
	if err := plan.Check(s.localOf(domainOf(a), a.Seed != nil), s.cfg.Helper.InstanceBridges); err != nil {
		return refuse(CodeArgs, "%s", runtime.Why(err))
	}
	return s.checkHost(a)
}

// volumePath says whether path is a clean absolute path directly under
// one of the volume directories (lexically: openVolume opens it).
func (s *Server) volumePath(path string) bool {
	return plan.DiskUnder(path, s.cfg.Helper.VolumeDirs)
}

// policyOf is the arguments' network policy parsed (nil: none), or the
// CodeArgs refusal of it.
func policyOf(a *DomainArgs) (*runtime.Policy, error) {
	pol, err := a.NetworkPolicy.Parse()
	if err != nil {
		return nil, refuse(CodeArgs, "%s", runtime.Why(err))
	}
	return pol, nil
}

// macAddr is a unicast MAC address.
var macAddr = regexp.MustCompile(`^[0-9a-f][02468ace](:[0-9a-f]{2}){5}$`)

// run runs a program (never a shell) and turns a failure into CodeCommand.
func run(ctx context.Context, program string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, program, args...).CombinedOutput()
	if err != nil {
		return "", &Error{Code: CodeCommand, Reason: fmt.Sprintf("%s %s: %s", program, strings.Join(args, " "), strings.TrimSpace(string(out))), Err: err}
	}
	return string(out), nil
}

func (s *Server) domain(ctx context.Context, req Request) (any, error) {
	var a DomainArgs
	if err := decode(req, &a); err != nil {
		return nil, err
	}
	if err := s.checkInstance(&a, req.Op == OpDomainDefine); err != nil {
		return nil, err
	}
	name := "bcd-" + a.ID
	virsh := s.cfg.Helper.Virsh
	switch req.Op {
	case OpDomainDefine:
		if err := s.define(ctx, &a); err != nil {
			return nil, err
		}
	case OpDomainStart:
		if err := s.rebindDisks(a.ID); err != nil {
			return nil, err
		}
		if _, err := run(ctx, virsh, "start", name); err != nil {
			return nil, err
		}
	case OpDomainDestroy:
		if _, err := run(ctx, virsh, "destroy", name); err != nil {
			return nil, err
		}
	case OpDomainUndefine:
		if _, err := run(ctx, virsh, "undefine", name); err != nil {
			return nil, err
		}
		if err := s.removeDisks(a.ID); err != nil {
			return nil, err
		}
		if err := s.removeGuestFiles(a.ID); err != nil {
			return nil, err
		}
		_ = os.Remove(filepath.Join(s.cfg.Helper.StateDir, "domains", name+".xml"))
	case OpDomainState:
		return s.domainState(ctx, name)
	}
	s.log.Info("domain.done", "op", req.Op, "domain", name)
	return map[string]string{"domain": name}, nil
}

// define checks and binds the disks and the base image (disks.go), makes
// the overlay and the seed disk (guest.go), renders the domain XML with
// the bound paths in place of the node's, and runs virsh define; a
// refused or failed define leaves no bind.
func (s *Server) define(ctx context.Context, a *DomainArgs) error {
	dir := filepath.Join(s.cfg.Helper.StateDir, "domains")
	if err := os.MkdirAll(s.cfg.Helper.StateDir, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	bound, err := s.bindDisks(a)
	if err != nil {
		return err
	}
	d := s.localOf(domainOf(a), a.Seed != nil)
	if err := s.guestDir("consoles"); err != nil {
		_ = s.removeDisks(a.ID)
		return err
	}
	for i := range d.Disks {
		d.Disks[i].Path = bound.volumes[i]
	}
	created := false
	if d.Image != nil {
		d.Image.Base = bound.base
		created, err = s.makeOverlay(ctx, a, d)
	}
	if err == nil && a.Seed != nil {
		err = s.makeSeedDisk(ctx, a.Seed, d.Local.SeedDisk)
	}
	var data []byte
	if err == nil {
		data, err = plan.Render(d)
	}
	if err == nil {
		path := filepath.Join(dir, plan.DomainName(a.ID)+".xml")
		if err = config.WriteFileAtomic(path, data, 0o600); err == nil {
			_, err = run(ctx, s.cfg.Helper.Virsh, "define", path)
		}
	}
	if err != nil {
		_ = s.removeDisks(a.ID)
		if created { // an overlay an earlier define made holds the guest's disk
			_ = os.Remove(d.Local.Overlay)
		}
		return err
	}
	return nil
}

// TapName is the tap of an instance's i-th NIC: bcdt<8 hex of SHA-256(id)>n<i>.
func TapName(id string, i int) string { return runtime.TapName(id, i) }

// domainState asks virsh for the domain's state: "absent" when virsh does
// not know it, "running", else "defined".
func (s *Server) domainState(ctx context.Context, name string) (any, error) {
	out, err := run(ctx, s.cfg.Helper.Virsh, "domstate", name)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && strings.Contains(e.Reason, "failed to get domain") {
			return &StateResult{State: string(runtime.Absent)}, nil
		}
		return nil, err
	}
	if strings.TrimSpace(out) == "running" {
		return &StateResult{State: string(runtime.Running)}, nil
	}
	return &StateResult{State: string(runtime.Defined)}, nil
}

// TapsResult is ch.taps' result.
type TapsResult struct {
	Taps []string `json:"taps"`
}

func (s *Server) chTaps(ctx context.Context, req Request) (any, error) {
	var a DomainArgs
	if err := decode(req, &a); err != nil {
		return nil, err
	}
	if err := s.checkInstance(&a, false); err != nil {
		return nil, err
	}
	pol, err := policyOf(&a)
	if err != nil {
		return nil, err
	}
	ip := s.cfg.Helper.IP
	res := &TapsResult{Taps: []string{}}
	for _, n := range a.NICs {
		if n.Address == "" {
			continue
		}
		if !plan.GuestAddress(n.Address) || !macAddr.MatchString(n.MAC) {
			return nil, refuse(CodeArgs, "address %q with MAC %q (a guest address of 169.254.0.0/16, with its MAC)", n.Address, n.MAC)
		}
		if err := s.checkAddress(a.ID, n); err != nil {
			return nil, err
		}
	}
	for i, n := range a.NICs {
		tap := TapName(a.ID, i)
		_, _ = run(ctx, ip, "link", "delete", tap) // a tap of an earlier start
		steps := [][]string{
			{"tuntap", "add", "dev", tap, "mode", "tap", "user", strconv.FormatUint(uint64(s.uid), 10), "group", strconv.FormatUint(uint64(s.gid), 10)},
			{"link", "set", "dev", tap, "master", n.Bridge},
			{"link", "set", "dev", tap, "up"},
		}
		for _, args := range steps {
			if _, err := run(ctx, ip, args...); err != nil {
				_, _ = run(ctx, ip, "link", "delete", tap)
				return nil, err
			}
		}
		if n.Address != "" {
			if err := s.guard(ctx, a.ID, tap, n, a.NetworkPolicy, pol); err != nil {
				_ = s.unguard(ctx, tap)
				_, _ = run(ctx, ip, "link", "delete", tap)
				return nil, err
			}
		}
		res.Taps = append(res.Taps, tap)
	}
	s.log.Info("ch.taps", "instance", a.ID, "taps", res.Taps)
	return res, nil
}

func (s *Server) chTapsDelete(ctx context.Context, req Request) (any, error) {
	var a DomainArgs
	if err := decode(req, &a); err != nil {
		return nil, err
	}
	if !runtime.IDPattern.MatchString(a.ID) {
		return nil, refuse(CodeArgs, "instance id %q", a.ID)
	}
	out, err := run(ctx, s.cfg.Helper.IP, "-o", "link", "show")
	if err != nil {
		return nil, err
	}
	prefix := strings.TrimSuffix(TapName(a.ID, 0), "0")
	res := &TapsResult{Taps: []string{}}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(fields[1], ":"), "@")
		if strings.HasPrefix(name, prefix) {
			if _, err := run(ctx, s.cfg.Helper.IP, "link", "delete", name); err != nil {
				return nil, err
			}
			res.Taps = append(res.Taps, name)
		}
	}
	// The guards of the instance's taps, also of taps a reboot took.
	records, _ := filepath.Glob(filepath.Join(s.cfg.Helper.StateDir, "taps", prefix+"*.json"))
	for _, rec := range records {
		if err := s.unguard(ctx, strings.TrimSuffix(filepath.Base(rec), ".json")); err != nil {
			return nil, err
		}
	}
	s.log.Info("ch.taps_deleted", "instance", a.ID, "taps", res.Taps)
	return res, nil
}
