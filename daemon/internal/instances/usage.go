// Per-instance usage, for telemetry (the OTLP exporter reads it through
// UsageSource): what each instance of the applied spec holds, since when
// it runs, and what its runtime says it used (runtime.UsageReader).

package instances

import (
	"context"
	"fmt"
	"sort"
	"time"

	"bcd/internal/runtime"
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
	// Live is what the running domain used since it started, as its
	// runtime reads it (zero when it does not run, or its runtime cannot
	// read usage).
	Live runtime.Usage
}

// UsageSource is what telemetry reads the instances' usage through.
type UsageSource interface {
	// InstanceUsage returns every instance's usage, by id.
	InstanceUsage(ctx context.Context) ([]Usage, error)
}

var _ UsageSource = (*Reconciler)(nil)

// InstanceUsage returns every instance's usage, by id; the live counters
// of running instances come from their runtimes.
func (r *Reconciler) InstanceUsage(ctx context.Context) ([]Usage, error) {
	r.mu.Lock()
	out := make([]Usage, 0, len(r.statuses))
	for id, st := range r.statuses {
		out = append(out, Usage{ID: id, Runtime: st.GetRuntime(), State: st.GetState(), VCPUs: st.GetVcpus(),
			MemoryBytes: st.GetMemoryBytes(), RunningSince: r.started[id]})
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	for i := range out {
		reader, ok := r.runtimes[out[i].Runtime].(runtime.UsageReader)
		if !ok || out[i].State != StateRunning {
			continue
		}
		live, err := reader.Usage(ctx, out[i].ID)
		if err != nil {
			return nil, fmt.Errorf("instance %s: %w", out[i].ID, err)
		}
		out[i].Live = live
	}
	return out, nil
}
