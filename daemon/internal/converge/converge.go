// Package converge applies desired state (ARCHITECTURE.md, "Desired state
// and adoption"): a DesiredState's NodeSpec is verified under the
// signedSpecs policy, a newer generation is applied (a trust rotation, the
// holds) and persisted with its status report in one journal transaction.
// A hold becomes a CDI spec file per allocation (bcd-alloc-<id>.json) and a
// node-signed NodeStatement{allocation_bound}; a hold the spec no longer
// lists is released (file removed, AllocationReleased); a hold that cannot
// be bound is reported AllocationFailed. bcd never drops a hold on its own.
package converge

import (
	"crypto"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"bcd/internal/config"
	"bcd/internal/intent"
	"bcd/internal/journal"
	"bcd/internal/machine"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// CDIKind is the CDI kind of bcd's allocation devices.
const CDIKind = "bcd.dev/alloc"

// allocationsKey keeps the bound allocations in the journal.
const allocationsKey = "allocations"

// ErrSpecRefused means a spec did not verify.
var ErrSpecRefused = errors.New("spec refused")

// Allocation is a bound hold.
type Allocation struct {
	// ID is the allocation id.
	ID string `json:"id"`
	// GPUs are the GPU indexes.
	GPUs []uint32 `json:"gpus"`
	// Binding is "" or "kubernetes".
	Binding string `json:"binding,omitempty"`
	// Generation is the spec generation that bound it.
	Generation uint64 `json:"generation"`
	// Statement is the node-signed AllocationBound (protobuf Envelope).
	Statement []byte `json:"statement"`
}

// Config wires a converger.
type Config struct {
	// NodeID is this node.
	NodeID string
	// Key signs AllocationBound statements.
	Key crypto.Signer
	// Journal persists the applied spec and the allocations.
	Journal *journal.Journal
	// Machine gives the inventory, the boot id and the CDI directory.
	Machine machine.Machine
	// Trust verifies specs and takes rotations.
	Trust *intent.Trust
	// Notify says the journal has new events.
	Notify func()
	// Applied is called after a new generation is applied.
	Applied func(generation uint64)
	// Now is the local clock (tests).
	Now func() time.Time
	// Log receives converge.* lines.
	Log *slog.Logger
}

// Converger applies specs.
type Converger struct {
	cfg Config
	log *slog.Logger

	mu          sync.Mutex
	allocations map[string]*Allocation
}

// New loads the bound allocations and rewrites any CDI file that went
// missing: a hold stays until the spec releases it.
func New(cfg Config) (*Converger, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Notify == nil {
		cfg.Notify = func() {}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Converger{cfg: cfg, log: log, allocations: map[string]*Allocation{}}
	if data := cfg.Journal.Get(allocationsKey); data != nil {
		var list []*Allocation
		if err := json.Unmarshal(data, &list); err != nil {
			return nil, fmt.Errorf("the journal's allocations: %w", err)
		}
		for _, a := range list {
			c.allocations[a.ID] = a
			if _, err := os.Stat(c.cdiPath(a.ID)); err != nil {
				if err := c.writeCDI(a); err != nil {
					return nil, err
				}
				log.Warn("converge.cdi_restored", "allocation_id", a.ID)
			}
		}
	}
	return c, nil
}

// AppliedGeneration is the generation applied last.
func (c *Converger) AppliedGeneration() uint64 {
	g, _ := c.cfg.Journal.Applied()
	return g
}

// Allocations returns the bound allocations, by id.
func (c *Converger) Allocations() []*Allocation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sorted()
}

func (c *Converger) sorted() []*Allocation {
	out := make([]*Allocation, 0, len(c.allocations))
	for _, a := range c.allocations {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Report builds a StatusReport: the inventory, the bound allocations, the
// given releases and failures, and the applied generation.
func (c *Converger) Report(released []*agentv1.AllocationReleased, failed []*agentv1.AllocationFailed) (*agentv1.StatusReport, error) {
	inv, err := c.cfg.Machine.Inventory()
	if err != nil {
		return nil, err
	}
	sections, err := inv.Sections()
	if err != nil {
		return nil, err
	}
	r := &agentv1.StatusReport{Inventory: sections, Released: released, Failed: failed, AppliedGeneration: c.AppliedGeneration()}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.sorted() {
		env := &agentv1.Envelope{}
		if err := proto.Unmarshal(a.Statement, env); err != nil {
			return nil, fmt.Errorf("allocation %s: %w", a.ID, err)
		}
		r.Allocations = append(r.Allocations, env)
	}
	return r, nil
}

// appliedAccess is the access section of the spec applied now (nil for none).
func (c *Converger) appliedAccess() *agentv1.AccessSection {
	_, data := c.cfg.Journal.Applied()
	if data == nil {
		return nil
	}
	env := &agentv1.Envelope{}
	spec := &agentv1.NodeSpec{}
	if proto.Unmarshal(data, env) != nil || proto.Unmarshal(env.GetPayload(), spec) != nil {
		return nil
	}
	return spec.GetAccess()
}

// verify checks a spec under the policy: with command roots it must be
// signed (or, under "access", unsigned only when access is unchanged);
// without roots an unsigned spec is taken.
func (c *Converger) verify(msg *agentv1.Envelope) (*agentv1.NodeSpec, error) {
	env := pki.EnvelopeFromProto(msg)
	if roots := c.cfg.Trust.Roots(); len(roots) > 0 {
		return pki.VerifySpec(env, roots, c.cfg.NodeID, c.cfg.Trust.Policy(), c.appliedAccess())
	}
	if env.PayloadType != pki.PayloadTypeNodeSpec {
		return nil, fmt.Errorf("payload type %q", env.PayloadType)
	}
	spec := &agentv1.NodeSpec{}
	if err := proto.Unmarshal(env.Payload, spec); err != nil {
		return nil, err
	}
	if spec.GetNodeId() != c.cfg.NodeID {
		return nil, fmt.Errorf("%s: spec for node %q", pki.CodeSpecWrongNode, spec.GetNodeId())
	}
	return spec, nil
}

// Apply applies a DesiredState and reports whether a new generation was
// applied. A refused or stale spec changes nothing.
func (c *Converger) Apply(ds *agentv1.DesiredState) (bool, error) {
	spec, err := c.verify(ds.GetSpec())
	if err != nil {
		c.log.Warn("converge.spec_refused", "code", string(pki.CodeOf(err)), "reason", err.Error())
		return false, fmt.Errorf("%w: %w", ErrSpecRefused, err)
	}
	applied := c.AppliedGeneration()
	if spec.GetGeneration() <= applied {
		if spec.GetGeneration() < applied {
			c.log.Info("converge.stale", "generation", spec.GetGeneration(), "applied_generation", applied)
		}
		return false, nil
	}
	if tb := spec.GetTrust().GetTrustBundle(); tb != nil {
		c.cfg.Trust.Rotate(tb)
	}
	released, failed, err := c.holds(spec)
	if err != nil {
		return false, err
	}
	envBytes, err := proto.Marshal(ds.GetSpec())
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	list, err := json.Marshal(c.sorted())
	c.mu.Unlock()
	if err != nil {
		return false, err
	}
	err = c.cfg.Journal.Update(func(tx *journal.Tx) error {
		if err := tx.SetApplied(spec.GetGeneration(), envBytes); err != nil {
			return err
		}
		return tx.Put(allocationsKey, list)
	})
	if err != nil {
		return false, err
	}
	report, err := c.Report(released, failed)
	if err != nil {
		return false, err
	}
	if _, err := c.cfg.Journal.Append(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_StatusReport{StatusReport: report}}); err != nil {
		return false, err
	}
	c.log.Info("converge.applied", "generation", spec.GetGeneration(), "holds", len(spec.GetHolds()),
		"released", len(released), "failed", len(failed))
	c.cfg.Notify()
	if c.cfg.Applied != nil {
		c.cfg.Applied(spec.GetGeneration())
	}
	return true, nil
}

// holds binds the spec's holds and releases the others.
func (c *Converger) holds(spec *agentv1.NodeSpec) ([]*agentv1.AllocationReleased, []*agentv1.AllocationFailed, error) {
	inv, err := c.cfg.Machine.Inventory()
	if err != nil {
		return nil, nil, err
	}
	gpus := 0
	if inv.GPUs != nil {
		gpus = len(inv.GPUs.GetGpus())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var released []*agentv1.AllocationReleased
	var failed []*agentv1.AllocationFailed
	wanted := map[string]*agentv1.Hold{}
	for _, h := range spec.GetHolds() {
		wanted[h.GetAllocationId()] = h
	}
	for id := range c.allocations {
		h, ok := wanted[id]
		if ok && slices.Equal(h.GetGpuIndexes(), c.allocations[id].GPUs) && h.GetBinding() == c.allocations[id].Binding {
			continue
		}
		if err := os.Remove(c.cdiPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, err
		}
		delete(c.allocations, id)
		if !ok {
			released = append(released, &agentv1.AllocationReleased{AllocationId: id})
			c.log.Info("converge.released", "allocation_id", id)
		}
	}
	used := map[uint32]string{}
	for _, a := range c.allocations {
		for _, g := range a.GPUs {
			used[g] = a.ID
		}
	}
	for _, h := range spec.GetHolds() {
		id := h.GetAllocationId()
		if _, bound := c.allocations[id]; bound {
			continue
		}
		if reason := check(h, gpus, used); reason != "" {
			failed = append(failed, &agentv1.AllocationFailed{AllocationId: id, Reason: reason})
			c.log.Warn("converge.hold_failed", "allocation_id", id, "reason", reason)
			continue
		}
		a := &Allocation{ID: id, GPUs: slices.Clone(h.GetGpuIndexes()), Binding: h.GetBinding(), Generation: spec.GetGeneration()}
		if err := c.writeCDI(a); err != nil {
			failed = append(failed, &agentv1.AllocationFailed{AllocationId: id, Reason: ReasonCDIWrite + ": " + err.Error()})
			continue
		}
		stmt := &agentv1.NodeStatement{
			NodeId: c.cfg.NodeID, BootId: c.cfg.Machine.BootID(), AtMs: c.cfg.Now().UnixMilli(),
			Body: &agentv1.NodeStatement_AllocationBound{AllocationBound: &agentv1.AllocationBound{
				AllocationId: id, GpuIndexes: a.GPUs, CdiDevices: []string{CDIKind + "=" + id}, Generation: a.Generation}},
		}
		env, err := pki.SignStatement(rand.Reader, c.cfg.Key, stmt)
		if err != nil {
			return nil, nil, err
		}
		if a.Statement, err = proto.Marshal(env.Proto()); err != nil {
			return nil, nil, err
		}
		c.allocations[id] = a
		for _, g := range a.GPUs {
			used[g] = id
		}
		c.log.Info("converge.bound", "allocation_id", id, "gpus", fmt.Sprint(a.GPUs), "generation", a.Generation)
	}
	return released, failed, nil
}

// check returns why a hold cannot be bound, or "".
func check(h *agentv1.Hold, gpus int, used map[uint32]string) string {
	id := h.GetAllocationId()
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return fmt.Sprintf("%s: %q", ReasonInvalidAllocationID, id)
	}
	if len(h.GetGpuIndexes()) == 0 {
		return ReasonNoGPUs + ": the hold names no GPU"
	}
	seen := map[uint32]bool{}
	for _, g := range h.GetGpuIndexes() {
		if int(g) >= gpus {
			return fmt.Sprintf("%s: GPU %d (this node has %d)", ReasonGPUUnknown, g, gpus)
		}
		if seen[g] {
			return fmt.Sprintf("%s: GPU %d", ReasonGPURepeated, g)
		}
		seen[g] = true
		if other, ok := used[g]; ok {
			return fmt.Sprintf("%s: GPU %d is held by %s", ReasonGPUHeld, g, other)
		}
	}
	return ""
}

func (c *Converger) cdiPath(id string) string {
	return filepath.Join(c.cfg.Machine.CDIDir(), "bcd-alloc-"+id+".json")
}

// writeCDI writes the allocation's CDI spec.
func (c *Converger) writeCDI(a *Allocation) error {
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
		d.Annotations = map[string]string{"bcd.dev/binding": "kubernetes"}
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
	if err := os.MkdirAll(c.cfg.Machine.CDIDir(), 0o755); err != nil {
		return err
	}
	return config.WriteFileAtomic(c.cdiPath(a.ID), append(data, '\n'), 0o644)
}
