// The failure knobs of the fake machine (docs/daemon.md, "Fake hardware"),
// as the reference's FakeDaemon has them, so that failure paths run end to
// end: diag.nvml's NVML init failing, failing GPUs and a diagnosis error,
// a log bundle that cannot be uploaded, CDI spec writes that fail, the
// opt-in fakeGpuReset kind, which is not retry-safe, an older bcd's
// capabilities, and Kubernetes pods that keep a released hold's devices. Each is read from the
// environment of a fakehw bcd (FaultsFromEnv); a host build has none.

package fakehw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"bcd/internal/config"
	"bcd/internal/dispatch"
	"bcd/internal/machine"
)

// The knobs' environment variables.
const (
	EnvNVMLInitFails    = "BCD_FAKEHW_NVML_INIT_FAILS"     // "1": diag.nvml fails nvml-init
	EnvFailGPUs         = "BCD_FAKEHW_FAIL_GPUS"           // "1,5": those GPUs fail the diagnosis
	EnvDiagError        = "BCD_FAKEHW_DIAG_ERROR"          // "1": diag.nvml fails diag-error
	EnvLogsUploadFails  = "BCD_FAKEHW_LOGS_UPLOAD_FAILS"   // "1": logs.collect fails logs-upload
	EnvCDIWriteFailures = "BCD_FAKEHW_CDI_WRITE_FAILURES"  // "N": the next N CDI spec writes fail
	EnvGPUReset         = "BCD_FAKEHW_GPU_RESET"           // "1": the fakeGpuReset kind is registered
	EnvCapabilities     = "BCD_FAKEHW_CAPABILITIES"        // "events.v1,cdi": the Hello's capabilities, replacing bcd's
	EnvKubePodRelease   = "BCD_FAKEHW_KUBE_POD_RELEASE_MS" // "N": pods keep a released Kubernetes hold's devices N ms
	// "1": every execution is counted twice, as a broken bcd that ran each
	// command twice would leave it (the I2 checker's own test).
	EnvExecuteTwice = "BCD_FAKEHW_EXECUTE_TWICE"
)

// KindGPUReset (kinds_gen.go, from proto/kinds.toml) is the opt-in kind
// that resets one GPU; it is not retry-safe: a reset that may have run is
// never run again by itself.

// Faults are the failure knobs.
type Faults struct {
	NVMLInitFails    bool
	FailGPUs         []uint32
	DiagError        bool
	LogsUploadFails  bool
	CDIWriteFailures int
	GPUReset         bool
	ExecuteTwice     bool
	// Capabilities replace what bcd advertises when CapabilitiesSet (an
	// older bcd's set; empty advertises none).
	Capabilities    []string
	CapabilitiesSet bool
	// KubePodRelease is how long the pods keep a released Kubernetes
	// hold's devices (0: they let go at once).
	KubePodRelease time.Duration
}

// FaultsFromEnv reads the knobs; a value it cannot read is named in the
// second result (and ignored).
func FaultsFromEnv(getenv func(string) string) (Faults, []string) {
	var f Faults
	var bad []string
	flag := func(name string, dst *bool) {
		switch v := getenv(name); v {
		case "", "0":
		case "1":
			*dst = true
		default:
			bad = append(bad, name)
		}
	}
	flag(EnvNVMLInitFails, &f.NVMLInitFails)
	flag(EnvDiagError, &f.DiagError)
	flag(EnvLogsUploadFails, &f.LogsUploadFails)
	flag(EnvGPUReset, &f.GPUReset)
	flag(EnvExecuteTwice, &f.ExecuteTwice)
	if v := getenv(EnvFailGPUs); v != "" {
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
			if err != nil {
				bad = append(bad, EnvFailGPUs)
				f.FailGPUs = nil
				break
			}
			f.FailGPUs = append(f.FailGPUs, uint32(n))
		}
	}
	if v := getenv(EnvCDIWriteFailures); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			bad = append(bad, EnvCDIWriteFailures)
		} else {
			f.CDIWriteFailures = n
		}
	}
	if v, set := lookup(getenv, EnvCapabilities); set {
		f.Capabilities, f.CapabilitiesSet = splitList(v), true
	}
	if v := getenv(EnvKubePodRelease); v != "" {
		ms, err := strconv.ParseUint(v, 10, 31)
		if err != nil {
			bad = append(bad, EnvKubePodRelease)
		} else {
			f.KubePodRelease = time.Duration(ms) * time.Millisecond
		}
	}
	return f, bad
}

// lookup reads a knob that may be set to the empty string ("advertise
// none"): getenv cannot tell, so "-" stands for empty.
func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	switch v {
	case "":
		return "", false
	case "-":
		return "", true
	}
	return v, true
}

// splitList is a comma-separated list, blanks dropped.
func splitList(v string) []string {
	out := []string{}
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Active lists the knobs that are set, for the log.
func (f Faults) Active() []string {
	var out []string
	if f.NVMLInitFails {
		out = append(out, EnvNVMLInitFails)
	}
	if len(f.FailGPUs) > 0 {
		out = append(out, EnvFailGPUs)
	}
	if f.DiagError {
		out = append(out, EnvDiagError)
	}
	if f.LogsUploadFails {
		out = append(out, EnvLogsUploadFails)
	}
	if f.CDIWriteFailures > 0 {
		out = append(out, EnvCDIWriteFailures)
	}
	if f.GPUReset {
		out = append(out, EnvGPUReset)
	}
	if f.ExecuteTwice {
		out = append(out, EnvExecuteTwice)
	}
	if f.CapabilitiesSet {
		out = append(out, EnvCapabilities)
	}
	if f.KubePodRelease > 0 {
		out = append(out, EnvKubePodRelease)
	}
	return out
}

// HasNVML is true: the fake GPUs are read through the fake NVML, unless
// the knob makes its init fail (machine.NVML).
func (m *Machine) HasNVML() bool { return !m.knobs().NVMLInitFails }

// Capabilities are the knob's, when it is set (machine.CapabilityOverride).
func (m *Machine) Capabilities() ([]string, bool) {
	f := m.knobs()
	return f.Capabilities, f.CapabilitiesSet
}

// PodReleaseDelay is how long the fake pods keep a released Kubernetes
// hold's devices (machine.PodRelease).
func (m *Machine) PodReleaseDelay() time.Duration { return m.knobs().KubePodRelease }

// faults is the machine's knobs and what is left of the CDI write
// failures.
type faults struct {
	mu        sync.Mutex
	f         Faults
	cdiFailed int
}

// SetFaults sets the knobs (before the agent starts).
func (m *Machine) SetFaults(f Faults) {
	m.faults.mu.Lock()
	defer m.faults.mu.Unlock()
	m.faults.f = f
	m.faults.cdiFailed = 0
}

func (m *Machine) knobs() Faults {
	m.faults.mu.Lock()
	defer m.faults.mu.Unlock()
	return m.faults.f
}

// diagFault is the diagnosis the knobs make of d, or an error.
func (m *Machine) diagFault(d *machine.Diag) (*machine.Diag, error) {
	f := m.knobs()
	switch {
	case f.NVMLInitFails:
		return nil, fmt.Errorf("%s: NVML could not be initialized: Driver Not Loaded", machine.ReasonNVMLInit)
	case f.DiagError:
		return nil, fmt.Errorf("%s: the diagnosis stopped: Unknown Error", machine.ReasonDiagError)
	}
	for _, g := range f.FailGPUs {
		if int(g) < d.GPUs {
			d.Failing = append(d.Failing, g)
		}
	}
	slices.Sort(d.Failing)
	d.Failing = slices.Compact(d.Failing)
	d.Healthy = d.GPUs - len(d.Failing)
	return d, nil
}

// CDIWriteFault fails the next CDI spec writes the knob asks (counted
// down; machine.CDIFaults).
func (m *Machine) CDIWriteFault() error {
	m.faults.mu.Lock()
	defer m.faults.mu.Unlock()
	if m.faults.cdiFailed >= m.faults.f.CDIWriteFailures {
		return nil
	}
	m.faults.cdiFailed++
	return fmt.Errorf("fakehw: CDI write failure %d of %d (%s)", m.faults.cdiFailed, m.faults.f.CDIWriteFailures, EnvCDIWriteFailures)
}

// gpuResetsPath counts the resets of one GPU.
func (m *Machine) gpuResetsPath(gpu uint32) string {
	return filepath.Join(m.root, "var", "lib", "fakehw", "gpu-resets", strconv.FormatUint(uint64(gpu), 10))
}

// GPUResets is how many times a GPU was reset.
func (m *Machine) GPUResets(gpu uint32) int {
	data, err := os.ReadFile(m.gpuResetsPath(gpu))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return n
}

// gpuResetKind is fakeGpuReset: params {"gpu": i}; it counts the reset
// under var/lib/fakehw/gpu-resets/<i> and reports {"gpu", "resets"}.
func (m *Machine) gpuResetKind() dispatch.Kind {
	return dispatch.Kind{Name: KindGPUReset, RetrySafe: false, Run: func(ctx context.Context, call dispatch.Call) ([]byte, error) {
		var p struct {
			GPU *uint32 `json:"gpu"`
		}
		if err := json.Unmarshal(call.Params, &p); err != nil || p.GPU == nil {
			return nil, errors.New(`fakeGpuReset: params are {"gpu": <index>}`)
		}
		gpus := 0
		if m.inventory.GPUs != nil {
			gpus = len(m.inventory.GPUs.GetGpus())
		}
		if int(*p.GPU) >= gpus {
			return nil, fmt.Errorf("fakeGpuReset: GPU %d (this machine has %d)", *p.GPU, gpus)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		path := m.gpuResetsPath(*p.GPU)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		n := m.GPUResets(*p.GPU) + 1
		if err := config.WriteFileAtomic(path, []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"gpu": *p.GPU, "resets": n})
	}}
}
