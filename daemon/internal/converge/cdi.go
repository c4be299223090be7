// The CDI spec of a bound hold: one file per allocation,
// <cdi dir>/bcd-alloc-<id>.json, of kind bcd.dev/alloc, naming the GPUs'
// device nodes (and NVIDIA_VISIBLE_DEVICES, or the kubernetes binding's
// annotations: bcd.dev/binding, and the booked bcd.dev/vcpus and
// bcd.dev/memory-bytes).

package converge

import (
	"encoding/json"
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
