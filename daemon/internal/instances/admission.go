// Host admission and the section's result: a start is admitted only when
// the host's vCPUs and memory (from the inventory, less the host section's
// reserved CPUs, scaled by its overcommit), minus what the
// running domains hold, cover the instance; an instance that does not fit
// stays stopped with a message starting "ResourcesExhausted:", and the
// section is PROGRESSING "Retrying" until a later pass admits it.

package instances

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"bcd/internal/converge"
	"bcd/internal/machine"
	"bcd/internal/proto/agentv1"
	"bcd/internal/runtime"
)

// CapacityOf is the host's capacity from its inventory: a vCPU per core,
// and its memory.
func CapacityOf(m machine.Machine) func() (Capacity, error) {
	return func() (Capacity, error) {
		inv, err := m.Inventory()
		if err != nil {
			return Capacity{}, err
		}
		return Capacity{VCPUs: inv.System.GetCpuCores(), MemoryBytes: inv.System.GetMemoryBytes(), NUMA: inv.System.GetNuma(),
			GPUs: inv.GPUs.GetGpus()}, nil
	}
}

// shaped is the capacity guests may have under the host section: the
// reserved CPUs are the host's own, and the pool's overcommit scales the
// rest (0: 100 %).
func shaped(c Capacity, host *agentv1.HostSection) Capacity {
	scale := func(n uint64, percent uint32) uint64 {
		if percent == 0 {
			return n
		}
		return n * uint64(percent) / 100
	}
	cpus := uint64(c.VCPUs)
	if r := uint64(len(host.GetReservedCpus())); r < cpus {
		cpus -= r
	} else {
		cpus = 0
	}
	c.VCPUs = uint32(scale(cpus, host.GetCpuOvercommitPercent()))
	c.MemoryBytes = scale(c.MemoryBytes, host.GetMemoryOvercommitPercent())
	return c
}

// admit returns why the host cannot start w now, or "".
func (p *pass) admit(w *agentv1.InstanceSpec) string {
	freeCPU := int64(p.capacity.VCPUs) - int64(p.held.VCPUs)
	freeMem := int64(p.capacity.MemoryBytes) - int64(p.held.MemoryBytes)
	if int64(w.GetVcpus()) <= freeCPU && int64(w.GetMemoryBytes()) <= freeMem {
		return ""
	}
	return fmt.Sprintf("%s: this host cannot start %s now: it needs %d vCPUs and %s, %d vCPUs and %s are free",
		ReasonResourcesExhausted, w.GetId(), w.GetVcpus(), bytes(int64(w.GetMemoryBytes())), max(freeCPU, 0), bytes(max(freeMem, 0)))
}

// pinnable says why pinned vCPUs cannot be placed on this host as asked
// (a NUMA node it lacks, a CPU off that node or reserved), or "".
func (p *pass) pinnable(c *agentv1.InstanceCpus) string {
	var node *agentv1.NumaNode
	for _, n := range p.capacity.NUMA {
		if n.GetId() == c.GetNumaNode() {
			node = n
		}
	}
	if node == nil {
		return fmt.Sprintf("pinned on NUMA node %d, which this host lacks", c.GetNumaNode())
	}
	for _, h := range c.GetHostCpus() {
		if !slices.Contains(node.GetCpus(), h) {
			return fmt.Sprintf("host CPU %d is not on NUMA node %d", h, c.GetNumaNode())
		}
		if slices.Contains(p.reserved, h) {
			return fmt.Sprintf("host CPU %d is reserved for the host", h)
		}
	}
	return ""
}

// gpus are the host's GPUs an instance passes through, by index: why not
// (a GPU this host lacks) when one is missing.
func (p *pass) gpus(w *agentv1.InstanceSpec) ([]runtime.GPU, string) {
	var out []runtime.GPU
	for _, index := range w.GetGpuIndexes() {
		i := slices.IndexFunc(p.capacity.GPUs, func(g *agentv1.Gpu) bool { return g.GetIndex() == index })
		if i < 0 || p.capacity.GPUs[i].GetPciBusId() == "" {
			return nil, fmt.Sprintf("%s: instance %s: GPU %d: this host has no GPU %d to pass through", ReasonPlanUnsupported, w.GetId(), index, index)
		}
		// NVML says 00000000:3B:00.0; libvirt's domain is 4 hex digits.
		addr := strings.ToLower(p.capacity.GPUs[i].GetPciBusId())
		if dom, rest, ok := strings.Cut(addr, ":"); ok && len(dom) == 8 && strings.HasPrefix(dom, "0000") {
			addr = dom[4:] + ":" + rest
		}
		out = append(out, runtime.GPU{Index: index, Address: addr})
	}
	return out, ""
}

// bytes says a size for people.
func bytes(n int64) string {
	const gib = 1 << 30
	if n%gib == 0 {
		return fmt.Sprintf("%d GiB", n/gib)
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/gib)
}

// result is the section's status after the pass.
func (p *pass) result() converge.Result {
	if len(p.failed) > 0 {
		var msgs []string
		for _, f := range p.failed {
			msgs = append(msgs, f.message)
		}
		return converge.Result{State: agentv1.SectionState_SECTION_STATE_FAILED, Reason: p.failed[0].reason, Message: strings.Join(msgs, "; ")}
	}
	if len(p.exhausted) > 0 || len(p.retry) > 0 {
		var msgs []string
		if len(p.exhausted) > 0 {
			sort.Strings(p.exhausted)
			msgs = append(msgs, fmt.Sprintf("%s: this host cannot start %s now", ReasonResourcesExhausted, strings.Join(p.exhausted, ", ")))
		}
		for _, r := range p.retry {
			msgs = append(msgs, r.message)
		}
		return converge.Result{State: agentv1.SectionState_SECTION_STATE_PROGRESSING, Reason: ReasonRetrying, Message: strings.Join(msgs, "; ")}
	}
	running := 0
	for _, st := range p.statuses {
		if st.GetState() == StateRunning {
			running++
		}
	}
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_APPLIED, Reason: converge.ReasonApplied,
		Message: fmt.Sprintf("%d instance(s), %d running; %d volume(s)", len(p.wanted), running, len(p.volumes))}
}

// names lists the runtimes this bcd has.
func (r *Reconciler) names() string {
	var names []string
	for n := range r.runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "no runtime"
	}
	return strings.Join(names, ", ")
}

func statFile(path string) (os.FileInfo, error) { return os.Stat(path) }
