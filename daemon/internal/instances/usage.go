// Per-instance usage, for telemetry (the OTLP exporter reads it through
// UsageSource): what each instance of the applied spec holds and since
// when it runs.

package instances

import (
	"sort"
	"time"
)

// Usage is one instance's use of the host.
type Usage struct {
	// ID, Runtime and State are the instance's (State as InstanceStatus).
	ID, Runtime, State string
	// VCPUs and MemoryBytes are what it holds while it runs.
	VCPUs       uint32
	MemoryBytes uint64
	// RunningSince is when bcd saw it start running (zero unless running).
	RunningSince time.Time
}

// UsageSource is what telemetry reads the instances' usage through.
type UsageSource interface {
	// InstanceUsage returns every instance's usage, by id.
	InstanceUsage() []Usage
}

var _ UsageSource = (*Reconciler)(nil)

// InstanceUsage returns every instance's usage, by id.
func (r *Reconciler) InstanceUsage() []Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Usage, 0, len(r.statuses))
	for id, st := range r.statuses {
		out = append(out, Usage{ID: id, Runtime: st.GetRuntime(), State: st.GetState(), VCPUs: st.GetVcpus(),
			MemoryBytes: st.GetMemoryBytes(), RunningSince: r.started[id]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
