// Package fakehw is the fake hardware of fakehw builds (docs/daemon.md, "Fake hardware"): four
// machine variants whose inventory is a pure function of a seed and the
// variant (the same seed gives the same section bytes and hashes, which the
// Go-to-Rust golden pins), and a fake root under data_dir/fakehw-root with
// the boot id, /run, CDI specs and the execution counters tests read.
//
// This file holds the variants and the inventory they generate.
package fakehw

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"bcd/internal/machine"
	"bcd/internal/proto/agentv1"
)

// The variants.
const (
	VariantHGXH100           = "hgx-h100"
	VariantHGXH100GPUMissing = "hgx-h100-gpu-missing"
	VariantL40S              = "l40s"
	VariantCPU               = "cpu"
)

// Variants lists every variant, the default first.
var Variants = []string{VariantHGXH100, VariantHGXH100GPUMissing, VariantL40S, VariantCPU}

// The defaults of the knobs.
const (
	DefaultSeed    = "41"
	DefaultVariant = VariantHGXH100
)

// ErrUnknownVariant marks a variant that is not one of Variants.
var ErrUnknownVariant = errors.New("unknown fakehw variant")

const gib = uint64(1) << 30

// The fake driver.
const (
	driverVersion = "550.90.07"
	cudaVersion   = "12.4"
)

// board is one variant's fixed shape.
type board struct {
	product, cpuModel string
	cpuCores          uint32
	memoryBytes       uint64
	numaNodes         uint32
	gpuModel, fabric  string
	gpuMemory         uint64
	gpuBuses          []string
	missing           int // index into gpuBuses of a GPU that is not visible, or -1
	nics              []nicShape
}

type nicShape struct {
	name  string
	speed uint64
	bus   string
}

func boardOf(variant string) (*board, error) {
	hgx := &board{
		product: "HGX H100 8-GPU (fakehw)", cpuModel: "Intel(R) Xeon(R) Platinum 8480+", cpuCores: 112,
		memoryBytes: 2048 * gib, numaNodes: 2,
		gpuModel: "NVIDIA H100 80GB HBM3", fabric: "nvswitch", gpuMemory: 80 * gib,
		gpuBuses: []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
			"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"},
		missing: -1,
		nics: []nicShape{{"eth0", 25_000, "0000:0d:00.0"}, {"ib0", 400_000, "0000:19:00.0"}, {"ib1", 400_000, "0000:3b:00.0"},
			{"ib2", 400_000, "0000:4c:00.0"}, {"ib3", 400_000, "0000:5e:00.0"}, {"ib4", 400_000, "0000:9b:00.0"},
			{"ib5", 400_000, "0000:bb:00.0"}, {"ib6", 400_000, "0000:cc:00.0"}, {"ib7", 400_000, "0000:dc:00.0"}},
	}
	switch variant {
	case VariantHGXH100:
		return hgx, nil
	case VariantHGXH100GPUMissing:
		hgx.missing = 3
		return hgx, nil
	case VariantL40S:
		return &board{
			product: "L40S PCIe server (fakehw)", cpuModel: "AMD EPYC 9354 32-Core Processor", cpuCores: 64,
			memoryBytes: 768 * gib, numaNodes: 2,
			gpuModel: "NVIDIA L40S", fabric: "pcie", gpuMemory: 48 * gib,
			gpuBuses: []string{"0000:01:00.0", "0000:41:00.0", "0000:81:00.0", "0000:c1:00.0"},
			missing:  -1,
			nics:     []nicShape{{"eth0", 100_000, "0000:21:00.0"}, {"eth1", 100_000, "0000:a1:00.0"}},
		}, nil
	case VariantCPU:
		return &board{
			product: "1U CPU server (fakehw)", cpuModel: "AMD EPYC 7313P 16-Core Processor", cpuCores: 32,
			memoryBytes: 128 * gib, numaNodes: 1, missing: -1,
			nics: []nicShape{{"eth0", 10_000, "0000:41:00.0"}},
		}, nil
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownVariant, variant, strings.Join(Variants, ", "))
}

// derive returns 32 bytes that depend only on the seed, the variant and label.
func derive(seed, variant, label string) []byte {
	sum := sha256.Sum256([]byte("bcd-fakehw/v1\x00" + seed + "\x00" + variant + "\x00" + label))
	return sum[:]
}

// GenerateInventory returns the inventory of a machine of variant with seed:
// a pure function of both.
func GenerateInventory(seed, variant string) (*machine.Inventory, error) {
	b, err := boardOf(variant)
	if err != nil {
		return nil, err
	}
	serial := strings.ToUpper(hex.EncodeToString(derive(seed, variant, "serial")[:6]))
	inv := &machine.Inventory{
		System: &agentv1.SystemInventory{
			Hostname:    Hostname(seed),
			Product:     b.product,
			Serial:      "FKH" + serial,
			CpuModel:    b.cpuModel,
			CpuCores:    b.cpuCores,
			MemoryBytes: b.memoryBytes,
			NumaNodes:   b.numaNodes,
			Kernel:      "6.8.0-fakehw",
			Os:          "Ubuntu 24.04 LTS (fakehw)",
		},
		Network: &agentv1.NetworkInventory{},
	}
	inv.System.Numa = numaOf(b)
	if len(b.gpuBuses) > 0 {
		gpus := &agentv1.GpuInventory{DriverVersion: driverVersion, CudaVersion: cudaVersion, Fabric: b.fabric}
		index := uint32(0)
		for slot, bus := range b.gpuBuses {
			if slot == b.missing {
				continue
			}
			h := derive(seed, variant, fmt.Sprintf("gpu/%d", slot))
			gpus.Gpus = append(gpus.Gpus, &agentv1.Gpu{
				Index:       index,
				Uuid:        uuid(h),
				Model:       b.gpuModel,
				MemoryBytes: b.gpuMemory,
				PciBusId:    bus,
				NumaNode:    uint32(slot * int(b.numaNodes) / len(b.gpuBuses)),
				Serial:      fmt.Sprintf("1654%09d", binary.BigEndian.Uint64(h[16:24])%1_000_000_000),
			})
			index++
		}
		inv.GPUs = gpus
	}
	for i, nic := range b.nics {
		h := derive(seed, variant, fmt.Sprintf("nic/%d", i))
		mac := fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", h[0], h[1], h[2], h[3], h[4])
		inv.Network.Nics = append(inv.Network.Nics, &agentv1.Nic{Name: nic.name, Mac: mac, SpeedMbps: nic.speed, PciBusId: nic.bus})
	}
	return inv, nil
}

// numaOf splits a board into its NUMA nodes as Linux numbers them without
// SMT: node i has the i-th run of cpuCores/numaNodes CPUs and an even share
// of the memory (node 0 taking the remainders). Huge pages are what the
// fake root holds, read when the inventory is taken (Machine.Inventory).
func numaOf(b *board) []*agentv1.NumaNode {
	n := b.numaNodes
	per, mem := b.cpuCores/n, b.memoryBytes/uint64(n)
	nodes := make([]*agentv1.NumaNode, 0, n)
	next := uint32(0)
	for i := uint32(0); i < n; i++ {
		node := &agentv1.NumaNode{Id: i, MemoryBytes: mem}
		count := per
		if i == 0 {
			count += b.cpuCores % n
			node.MemoryBytes += b.memoryBytes % uint64(n)
		}
		for c := uint32(0); c < count; c++ {
			node.Cpus = append(node.Cpus, next)
			next++
		}
		nodes = append(nodes, node)
	}
	return nodes
}

// Hostname is the fake machine's name for seed.
func Hostname(seed string) string { return "fakehw-" + seed }

// uuid formats 16 bytes of h as an NVML GPU UUID.
func uuid(h []byte) string {
	x := hex.EncodeToString(h[:16])
	return "GPU-" + x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}
