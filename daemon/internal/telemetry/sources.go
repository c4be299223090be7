// Where the numbers come from: the machine's GPUs (machine.GPUTelemetry)
// and, on a VPS host, the instances' usage (InstanceSource).

package telemetry

import "time"

// InstanceUsage is one VM instance's configuration and usage so far.
type InstanceUsage struct {
	// ID is the instance's id (InstanceSpec.id).
	ID string
	// VCPUs and MemoryBytes are its configured size.
	VCPUs       uint32
	MemoryBytes uint64
	// StartedAt is when its cumulative counters started (zero: unknown,
	// the schedule's start is used).
	StartedAt time.Time
	// CPUTime is the CPU time it used.
	CPUTime time.Duration
	// MemoryUsedBytes is the guest memory in use.
	MemoryUsedBytes uint64
	// DiskReadBytes and DiskWriteBytes are its block I/O so far.
	DiskReadBytes, DiskWriteBytes uint64
	// NetRxBytes and NetTxBytes are its network I/O so far.
	NetRxBytes, NetTxBytes uint64
}

// InstanceSource gives the usage of the instances a VPS host runs. The
// instances' owner implements it (fakehw instances included); bcd passes
// none on a host that runs no instances, and then no instance metric, not
// even bcd.instances, is exported.
type InstanceSource interface {
	// InstanceUsage is every instance's usage now, in a stable order.
	InstanceUsage() ([]InstanceUsage, error)
}
