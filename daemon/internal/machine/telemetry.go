// GPU telemetry: what a machine that can sample its GPUs gives the
// telemetry exporter (docs/protocol.md, "Telemetry"). It is optional: a
// Machine that does not implement GPUTelemetry (Host: no NVML in this
// tree) exports no GPU metrics.

package machine

// GPUSample is one GPU at one sample.
type GPUSample struct {
	// Index and UUID are the GPU's, as in the inventory.
	Index uint32
	UUID  string
	// Utilization is the busy fraction, 0 to 1.
	Utilization float64
	// MemoryUsedBytes is the device memory in use.
	MemoryUsedBytes uint64
	// TemperatureC is the core temperature in °C.
	TemperatureC float64
	// PowerW is the board power draw in W.
	PowerW float64
	// ActiveXIDs is how many XID errors are active (not yet cleared).
	ActiveXIDs int64
}

// GPUTelemetry is a machine that samples its GPUs.
type GPUTelemetry interface {
	// SampleGPUs samples every visible GPU; n counts the samples of the
	// caller's schedule (0 first), so a fake machine can be deterministic.
	SampleGPUs(n uint64) ([]GPUSample, error)
}

// HostSample is the host itself at one sample: its CPU time by state, its
// memory, and each NIC's bytes, all counters since boot but the memory.
type HostSample struct {
	// CPUSeconds is the CPU time of all cores by state (user, system,
	// idle, iowait), cumulative.
	CPUSeconds map[string]float64
	// MemoryTotalBytes and MemoryAvailableBytes are the memory and what
	// of it can be had without swapping (MemAvailable).
	MemoryTotalBytes, MemoryAvailableBytes uint64
	// NICs are each network device's counters.
	NICs []NICSample
}

// NICSample is one network device's byte counters.
type NICSample struct {
	Device           string
	RxBytes, TxBytes uint64
}

// HostTelemetry is a machine that samples itself (a host reads /proc; a
// fakehw machine is synthetic).
type HostTelemetry interface {
	// SampleHost samples the host; n counts the samples of the caller's
	// schedule, as SampleGPUs's.
	SampleHost(n uint64) (*HostSample, error)
}
