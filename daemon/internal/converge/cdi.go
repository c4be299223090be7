// The CDI spec of a bound hold: one file per allocation,
// <cdi dir>/bcd-alloc-<id>.json, of kind bcd.dev/alloc, naming the GPUs'
// device nodes (and NVIDIA_VISIBLE_DEVICES, or the kubernetes binding's
// annotations: bcd.dev/binding, and the booked bcd.dev/vcpus and
// bcd.dev/memory-bytes); and beside it the hold's env file,
// bcd-alloc-<id>.env, what a unit or a runtime that does not read CDI
// takes as its EnvironmentFile (docs/protocol.md, "Reservations (holds)").

package converge

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"bcd/internal/config"
)

// CDIKind is the CDI kind of bcd's allocation devices.
const CDIKind = "bcd.dev/alloc"

// cdiPath is the CDI spec file of an allocation.
func cdiPath(dir, id string) string {
	return filepath.Join(dir, "bcd-alloc-"+id+".json")
}

// envPath is the env file of an allocation, beside its CDI spec (CDI reads
// only .json and .yaml files there).
func envPath(dir, id string) string {
	return filepath.Join(dir, "bcd-alloc-"+id+".env")
}

// writeHold writes the allocation's CDI spec, then its env file.
func writeHold(dir string, a *Allocation) error {
	if err := writeCDI(dir, a); err != nil {
		return err
	}
	return config.WriteFileAtomic(envPath(dir, a.ID), envFile(a), 0o644)
}

// removeHold removes the allocation's CDI spec and env file.
func removeHold(dir, id string) error {
	for _, path := range []string{cdiPath(dir, id), envPath(dir, id)} {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// envFile is the hold's environment, one KEY=value a line (systemd's
// EnvironmentFile, docker's --env-file): its id, its CDI device, its GPUs
// (and NVIDIA_VISIBLE_DEVICES for a plain hold, as its CDI spec), the
// booked share, the slice and the binding when it has them. Every value is
// an id bcd checked or a number, so none needs quoting.
func envFile(a *Allocation) []byte {
	var b strings.Builder
	line := func(k, v string) { b.WriteString(k + "=" + v + "\n") }
	indexes := make([]string, 0, len(a.GPUs))
	for _, g := range a.GPUs {
		indexes = append(indexes, strconv.Itoa(int(g)))
	}
	line("BCD_ALLOCATION_ID", a.ID)
	line("BCD_CDI_DEVICE", CDIKind+"="+a.ID)
	line("BCD_GPU_INDEXES", strings.Join(indexes, ","))
	if a.Binding == "" {
		line("NVIDIA_VISIBLE_DEVICES", strings.Join(indexes, ","))
	} else {
		line("BCD_BINDING", a.Binding)
	}
	if a.VCPUs > 0 {
		line("BCD_VCPUS", strconv.FormatUint(uint64(a.VCPUs), 10))
	}
	if a.MemoryBytes > 0 {
		line("BCD_MEMORY_BYTES", strconv.FormatUint(a.MemoryBytes, 10))
	}
	if a.CgroupParent != "" {
		line("BCD_CGROUP_PARENT", a.CgroupParent)
	}
	return []byte(b.String())
}

// writeCDI writes the allocation's CDI spec into dir.
func writeCDI(dir string, a *Allocation) error {
	type deviceNode struct {
		Path string `json:"path"`
	}
	type edits struct {
		Env         []string     `json:"env,omitempty"`
		DeviceNodes []deviceNode `json:"deviceNodes,omitempty"`
	}
	type device struct {
		Name           string            `json:"name"`
		Annotations    map[string]string `json:"annotations,omitempty"`
		ContainerEdits edits             `json:"containerEdits"`
	}
	var nodes []deviceNode
	var indexes []string
	for _, g := range a.GPUs {
		nodes = append(nodes, deviceNode{Path: "/dev/nvidia" + strconv.Itoa(int(g))})
		indexes = append(indexes, strconv.Itoa(int(g)))
	}
	d := device{Name: a.ID, ContainerEdits: edits{DeviceNodes: nodes}}
	if a.Binding == "kubernetes" {
		// The kubelet enforces the booked share: it reads the limits here.
		d.Annotations = map[string]string{"bcd.dev/binding": "kubernetes"}
		if a.VCPUs > 0 {
			d.Annotations["bcd.dev/vcpus"] = strconv.FormatUint(uint64(a.VCPUs), 10)
		}
		if a.MemoryBytes > 0 {
			d.Annotations["bcd.dev/memory-bytes"] = strconv.FormatUint(a.MemoryBytes, 10)
		}
	} else {
		d.ContainerEdits.Env = []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(indexes, ",")}
	}
	spec := map[string]any{
		"cdiVersion":     "0.6.0",
		"kind":           CDIKind,
		"devices":        []device{d},
		"containerEdits": edits{DeviceNodes: []deviceNode{{Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm"}}},
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return config.WriteFileAtomic(cdiPath(dir, a.ID), append(data, '\n'), 0o644)
}
