// The fake GPUs' telemetry: synthetic samples that are a pure function of
// the seed, the variant, the GPU index and the sample counter (never the
// clock), so tests can assert them (docs/daemon.md, "Fake hardware").

package fakehw

import (
	"encoding/binary"
	"fmt"

	"bcd/internal/machine"
)

var _ machine.GPUTelemetry = (*Machine)(nil)

// SampleGPUs samples every visible GPU at sample n.
func (m *Machine) SampleGPUs(n uint64) ([]machine.GPUSample, error) {
	var out []machine.GPUSample
	for _, gpu := range m.inventory.GPUs.GetGpus() {
		out = append(out, GPUSample(m.seed, m.variant, gpu.GetIndex(), gpu.GetUuid(), gpu.GetMemoryBytes(), n))
	}
	return out, nil
}

// GPUSample is GPU index's sample n: from
// SHA-256("bcd-fakehw/v1\0" + seed + "\0" + variant + "\0gpu-sample/<index>/<n>"),
// utilization is bytes 0–1 over 65535, memory used bytes 2–3 over 65535 of
// the GPU's memory, temperature 30 + byte 4 mod 50 plus byte 5 over 256 °C,
// power 60 + bytes 6–7 mod 640 W, and one XID is active when byte 8 is
// below 16.
func GPUSample(seed, variant string, index uint32, uuid string, memoryBytes uint64, n uint64) machine.GPUSample {
	h := derive(seed, variant, fmt.Sprintf("gpu-sample/%d/%d", index, n))
	u16 := func(i int) uint64 { return uint64(binary.BigEndian.Uint16(h[i:])) }
	xids := int64(0)
	if h[8] < 16 {
		xids = 1
	}
	return machine.GPUSample{
		Index:           index,
		UUID:            uuid,
		Utilization:     float64(u16(0)) / 65535,
		MemoryUsedBytes: memoryBytes / 65535 * u16(2),
		TemperatureC:    30 + float64(h[4]%50) + float64(h[5])/256,
		PowerW:          60 + float64(u16(6)%640),
		ActiveXIDs:      xids,
	}
}

var _ machine.HostTelemetry = (*Machine)(nil)

// SampleHost is the fake host at sample n, a pure function of the seed,
// the variant and n: every core spends each sample 3 s busy (2 user, 1
// system) and 7 s idle, so the counters grow by 10 s a core; MemAvailable
// is the memory less 1/16 of it and less SHA-256(…"host-sample/<n>")'s
// byte 0 times 1/4096 of it; each NIC of the inventory has received 1 MiB + bytes 1–2 and
// sent 512 KiB + bytes 3–4 per sample so far.
func (m *Machine) SampleHost(n uint64) (*machine.HostSample, error) {
	cores := float64(m.inventory.System.GetCpuCores())
	k := float64(n + 1)
	h := derive(m.seed, m.variant, fmt.Sprintf("host-sample/%d", n))
	total := m.inventory.System.GetMemoryBytes()
	s := &machine.HostSample{
		CPUSeconds:           map[string]float64{"user": 2 * k * cores, "system": k * cores, "idle": 7 * k * cores, "iowait": 0},
		MemoryTotalBytes:     total,
		MemoryAvailableBytes: total - total/16 - uint64(h[0])*(total>>12),
	}
	for _, nic := range m.inventory.Network.GetNics() {
		s.NICs = append(s.NICs, machine.NICSample{Device: nic.GetName(),
			RxBytes: (n + 1) * (1<<20 + uint64(binary.BigEndian.Uint16(h[1:]))),
			TxBytes: (n + 1) * (512<<10 + uint64(binary.BigEndian.Uint16(h[3:])))})
	}
	return s, nil
}
