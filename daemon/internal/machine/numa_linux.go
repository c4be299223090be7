// The host's NUMA nodes and huge pages, from /sys (what placement pins
// and books against), and its pressure, from /proc/pressure: the Linux
// half of Host that VPS hosts read.

package machine

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"bcd/internal/proto/agentv1"
)

// The huge page sizes' directories under /sys.
const (
	hugePages2Mi = "hugepages-2048kB"
	hugePages1Gi = "hugepages-1048576kB"
)

// readCount is a number in a sysfs file (0 when it cannot be read).
func readCount(path string) uint64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// ParseCPUList reads a kernel CPU list ("0-3,8,10-11").
func ParseCPUList(text string) []uint32 {
	var out []uint32
	for _, part := range strings.Split(strings.TrimSpace(text), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 32)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 32); err != nil || b < a {
				continue
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, uint32(c))
		}
	}
	return out
}

// numaNodes reads the NUMA nodes under sys (/sys): each node's CPUs,
// memory and huge pages.
func numaNodes(sys string) []*agentv1.NumaNode {
	dirs, _ := filepath.Glob(filepath.Join(sys, "devices", "system", "node", "node[0-9]*"))
	var out []*agentv1.NumaNode
	for _, dir := range dirs {
		id, err := strconv.ParseUint(strings.TrimPrefix(filepath.Base(dir), "node"), 10, 32)
		if err != nil {
			continue
		}
		n := &agentv1.NumaNode{Id: uint32(id)}
		if data, err := os.ReadFile(filepath.Join(dir, "cpulist")); err == nil {
			n.Cpus = ParseCPUList(string(data))
		}
		if data, err := os.ReadFile(filepath.Join(dir, "meminfo")); err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if f := strings.Fields(line); len(f) >= 4 && f[2] == "MemTotal:" {
					kb, _ := strconv.ParseUint(f[3], 10, 64)
					n.MemoryBytes = kb * 1024
				}
			}
		}
		n.Hugepages_2Mi = readCount(filepath.Join(dir, "hugepages", hugePages2Mi, "nr_hugepages"))
		n.Hugepages_1Gi = readCount(filepath.Join(dir, "hugepages", hugePages1Gi, "nr_hugepages"))
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}

// placementInventory adds the NUMA nodes and the machine-wide huge pages
// under sys to s.
func placementInventory(s *agentv1.SystemInventory, sys string) {
	s.Numa = numaNodes(sys)
	if len(s.Numa) > 0 {
		s.NumaNodes = uint32(len(s.Numa))
	}
	s.Hugepages_2Mi = readCount(filepath.Join(sys, "kernel", "mm", "hugepages", hugePages2Mi, "nr_hugepages"))
	s.Hugepages_1Gi = readCount(filepath.Join(sys, "kernel", "mm", "hugepages", hugePages1Gi, "nr_hugepages"))
}

// Pressure reads /proc/pressure/{memory,cpu} (PSI's "some avg10="): what
// a VPS host balloons its guests by.
func (h *Host) Pressure() (*agentv1.HostPressure, error) {
	read := func(name string) (uint32, error) {
		data, err := os.ReadFile(filepath.Join("/proc", "pressure", name))
		if err != nil {
			return 0, err
		}
		return ParsePSI(string(data)), nil
	}
	memory, err := read("memory")
	if err != nil {
		return nil, err
	}
	cpu, err := read("cpu")
	if err != nil {
		return nil, err
	}
	return &agentv1.HostPressure{MemoryPercent: memory, CpuPercent: cpu}, nil
}
