// The fake root as a host for host units (a hostconfig.System): units go to
// etc/systemd/system, and starting one runs its ExecStart= commands against
// a fake kernel: /usr/bin/tee writes StandardInputText= into kernel files
// (huge pages: the machine-wide nr_hugepages of a size and each NUMA
// node's, the kernel spreading a machine-wide count evenly with node 0
// taking the remainder), and modprobe records modules in proc/modules.
// Anything else fails as a missing program would. A hold's booked share
// runs in its slice (machine.Slices): a unit under run/systemd/system and
// its cgroup under sys/fs/cgroup/bcd.slice/bcd-alloc.slice.

package fakehw

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"bcd/internal/config"
	"bcd/internal/hostconfig/unitfile"
	"bcd/internal/machine"
	"bcd/internal/proto/agentv1"
)

// KernelModules are the modules the fake kernel has (modprobe of another
// fails as on a kernel without it).
var KernelModules = []string{"br_netfilter", "kvm", "kvm_amd", "kvm_intel", "nvidia", "nvidia_uvm", "overlay", "tun", "vfio", "vfio_iommu_type1", "vfio_pci", "vhost_net", "vhost_vsock"}

// The huge page sizes, by their sysfs names.
const (
	HugePages2Mi = "hugepages-2048kB"
	HugePages1Gi = "hugepages-1048576kB"
)

// UnitDir is etc/systemd/system under the fake root.
func (m *Machine) UnitDir() string { return filepath.Join(m.root, "etc", "systemd", "system") }

// Install writes the units and removes the bcd-* units not among them
// (the envelope is for a helper; the fake root trusts the converge core).
func (m *Machine) Install(_ context.Context, _ *agentv1.Envelope, units []*agentv1.HostUnit) error {
	dir := m.UnitDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, u := range units {
		if err := config.WriteFileAtomic(filepath.Join(dir, u.GetName()), u.GetContent(), 0o644); err != nil {
			return err
		}
		keep[u.GetName()] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if unitfile.NamePattern.MatchString(e.Name()) && !keep[e.Name()] {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Start runs an installed unit's commands, in order; the first that fails
// fails the unit.
func (m *Machine) Start(ctx context.Context, name string) error {
	data, err := os.ReadFile(filepath.Join(m.UnitDir(), name))
	if err != nil {
		return fmt.Errorf("unit %s not found", name)
	}
	u, err := unitfile.Parse(data)
	if err != nil {
		return err
	}
	cmds, err := u.ExecStart()
	if err != nil {
		return err
	}
	for _, argv := range cmds {
		if err := ctx.Err(); err != nil {
			return err
		}
		switch filepath.Base(argv[0]) {
		case "tee":
			err = m.tee(argv[1:], u.StdinText())
		case "modprobe":
			err = m.modprobe(argv[1:])
		default:
			err = fmt.Errorf("%s: no such program on the fakehw host", argv[0])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// The kernel files tee may write.
var (
	machinePages = regexp.MustCompile(`^/sys/kernel/mm/hugepages/(hugepages-2048kB|hugepages-1048576kB)/nr_hugepages$`)
	nodePages    = regexp.MustCompile(`^/sys/devices/system/node/node([0-9]+)/hugepages/(hugepages-2048kB|hugepages-1048576kB)/nr_hugepages$`)
)

// tee writes text into each kernel file named.
func (m *Machine) tee(paths []string, text string) error {
	if len(paths) == 0 {
		return errors.New("tee: no file named")
	}
	for _, p := range paths {
		n, err := strconv.ParseUint(strings.TrimSpace(text), 10, 32)
		if err != nil {
			return fmt.Errorf("tee: %s: write error: Invalid argument", p)
		}
		if g := machinePages.FindStringSubmatch(p); g != nil {
			err = m.reservePages(g[1], -1, n)
		} else if g := nodePages.FindStringSubmatch(p); g != nil {
			node, _ := strconv.Atoi(g[1])
			if node >= int(m.inventory.System.GetNumaNodes()) {
				return fmt.Errorf("tee: %s: No such file or directory", p)
			}
			err = m.reservePages(g[2], node, n)
		} else {
			return fmt.Errorf("tee: %s: Permission denied (not a file the fakehw kernel has)", p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// reservePages sets the huge pages of size on one node (node >= 0) or
// machine-wide (node < 0: spread evenly, node 0 taking the remainder), and
// keeps the machine-wide count the sum of the nodes', as the kernel does.
func (m *Machine) reservePages(size string, node int, n uint64) error {
	nodes := int(m.inventory.System.GetNumaNodes())
	counts := make([]uint64, nodes)
	machineWide := m.machinePages(size)
	for i := range counts {
		counts[i] = m.nodePages(size, i, machineWide)
	}
	if node >= 0 {
		counts[node] = n
	} else {
		for i := range counts {
			counts[i] = n / uint64(nodes)
		}
		counts[0] += n % uint64(nodes)
	}
	var total uint64
	for i, c := range counts {
		if err := m.writeKernel(nodePagesPath(i, size), c); err != nil {
			return err
		}
		total += c
	}
	return m.writeKernel(filepath.Join("sys", "kernel", "mm", "hugepages", size, "nr_hugepages"), total)
}

func nodePagesPath(node int, size string) string {
	return filepath.Join("sys", "devices", "system", "node", fmt.Sprintf("node%d", node), "hugepages", size, "nr_hugepages")
}

func (m *Machine) writeKernel(rel string, n uint64) error {
	path := filepath.Join(m.root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return config.WriteFileAtomic(path, []byte(strconv.FormatUint(n, 10)+"\n"), 0o644)
}

// readKernel reads a count from a kernel file (ok false without the file).
func (m *Machine) readKernel(rel string) (uint64, bool) {
	data, err := os.ReadFile(filepath.Join(m.root, rel))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n, err == nil
}

// machinePages is the machine-wide count of size reserved now.
func (m *Machine) machinePages(size string) uint64 {
	n, _ := m.readKernel(filepath.Join("sys", "kernel", "mm", "hugepages", size, "nr_hugepages"))
	return n
}

// nodePages is a node's count of size: its own file, or an even share of
// total, the machine-wide count (node 0 taking the remainder).
func (m *Machine) nodePages(size string, node int, total uint64) uint64 {
	if n, ok := m.readKernel(nodePagesPath(node, size)); ok {
		return n
	}
	nodes := uint64(m.inventory.System.GetNumaNodes())
	share := total / nodes
	if node == 0 {
		share += total % nodes
	}
	return share
}

// modprobe records modules as loaded in proc/modules (-a: several; a
// single name otherwise).
func (m *Machine) modprobe(args []string) error {
	var mods []string
	all := false
	for _, a := range args {
		switch {
		case a == "-a" || a == "--all":
			all = true
		case strings.HasPrefix(a, "-"):
			return fmt.Errorf("modprobe: option %s is not supported on the fakehw host", a)
		default:
			mods = append(mods, a)
		}
	}
	if len(mods) == 0 || (!all && len(mods) > 1) {
		return errors.New("modprobe: name one module, or several with -a")
	}
	loaded := m.LoadedModules()
	for _, mod := range mods {
		mod = strings.ReplaceAll(mod, "-", "_")
		if !slices.Contains(KernelModules, mod) {
			return fmt.Errorf("modprobe: FATAL: Module %s not found in directory /lib/modules/%s", mod, m.inventory.System.GetKernel())
		}
		if !slices.Contains(loaded, mod) {
			loaded = append(loaded, mod)
		}
	}
	var b strings.Builder
	for _, mod := range loaded {
		fmt.Fprintf(&b, "%s 16384 0 - Live 0x0000000000000000\n", mod)
	}
	return config.WriteFileAtomic(filepath.Join(m.root, "proc", "modules"), []byte(b.String()), 0o644)
}

// LoadedModules are the modules proc/modules lists, in load order.
func (m *Machine) LoadedModules() []string {
	data, err := os.ReadFile(filepath.Join(m.root, "proc", "modules"))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, f[0])
		}
	}
	return out
}

// sliceDir is the cgroup (v2) of an allocation's slice under the fake
// root: bcd-alloc-<id>.slice nests in bcd-alloc.slice, in bcd.slice.
func (m *Machine) sliceDir(id string) string {
	return filepath.Join(m.root, "sys", "fs", "cgroup", "bcd.slice", "bcd-alloc.slice", machine.SliceName(id))
}

// SliceUnitPath is where an allocation's slice unit is (a runtime unit,
// run/systemd/system, gone at a reboot as the cgroup is).
func (m *Machine) SliceUnitPath(id string) string {
	return filepath.Join(m.root, "run", "systemd", "system", machine.SliceName(id))
}

// MakeSlice writes the slice unit (CPUQuota, MemoryMax) and its cgroup's
// cpu.max and memory.max.
func (m *Machine) MakeSlice(id string, vcpus uint32, memoryBytes uint64) (string, error) {
	name := machine.SliceName(id)
	quota, cpuMax, memMax := "", "max 100000", "max"
	if vcpus > 0 {
		quota = fmt.Sprintf("CPUQuota=%d%%\n", vcpus*100)
		cpuMax = fmt.Sprintf("%d 100000", uint64(vcpus)*100000)
	}
	if memoryBytes > 0 {
		memMax = strconv.FormatUint(memoryBytes, 10)
		quota += "MemoryMax=" + memMax + "\n"
	}
	unit := fmt.Sprintf("[Unit]\nDescription=bcd: allocation %s\n\n[Slice]\n%s", id, quota)
	if err := os.MkdirAll(filepath.Dir(m.SliceUnitPath(id)), 0o755); err != nil {
		return "", err
	}
	if err := config.WriteFileAtomic(m.SliceUnitPath(id), []byte(unit), 0o644); err != nil {
		return "", err
	}
	dir := m.sliceDir(id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for file, value := range map[string]string{"cpu.max": cpuMax, "memory.max": memMax} {
		if err := config.WriteFileAtomic(filepath.Join(dir, file), []byte(value+"\n"), 0o644); err != nil {
			return "", err
		}
	}
	return name, nil
}

// RemoveSlice removes the slice's cgroup and unit.
func (m *Machine) RemoveSlice(id string) error {
	if err := os.RemoveAll(m.sliceDir(id)); err != nil {
		return err
	}
	if err := os.Remove(m.SliceUnitPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Pressure reads proc/pressure/{memory,cpu} under the fake root (PSI's
// "some avg10="; a missing file is no pressure): a test writes them to
// simulate a pressed host.
func (m *Machine) Pressure() (*agentv1.HostPressure, error) {
	read := func(name string) uint32 {
		data, err := os.ReadFile(filepath.Join(m.root, "proc", "pressure", name))
		if err != nil {
			return 0
		}
		return machine.ParsePSI(string(data))
	}
	return &agentv1.HostPressure{MemoryPercent: read("memory"), CpuPercent: read("cpu")}, nil
}
