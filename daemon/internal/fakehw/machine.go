// The fake machine: a machine.Machine over a fake root (data_dir/fakehw-root)
// holding the boot id (proc/sys/kernel/random/boot_id), /run, CDI specs
// (etc/cdi) and one execution counter per command id
// (var/lib/fakehw/executions/<command-id>), every write fsynced; and the
// kinds it runs (the machine's own, and any a test adds).

package fakehw

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"bcd/internal/config"
	"bcd/internal/dispatch"
	"bcd/internal/machine"
	"google.golang.org/protobuf/proto"
)

// RootName is the fake root's directory under the data dir.
const RootName = "fakehw-root"

// Machine is a fake machine.
type Machine struct {
	root, seed, variant string
	inventory           *machine.Inventory
	bootID              string

	mu    sync.Mutex
	extra []dispatch.Kind

	faults faults // faults.go
}

var _ machine.Machine = (*Machine)(nil)

// New opens (or creates) the fake machine of seed and variant under
// dataDir/fakehw-root. A first start writes a boot id.
func New(dataDir, seed, variant string) (*Machine, error) {
	inv, err := GenerateInventory(seed, variant)
	if err != nil {
		return nil, err
	}
	m := &Machine{root: filepath.Join(dataDir, RootName), seed: seed, variant: variant, inventory: inv}
	if err := mkdirTree(m.root, rootDirs); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(m.bootIDPath())
	switch {
	case err == nil && len(strings.TrimSpace(string(data))) > 0:
		m.bootID = strings.TrimSpace(string(data))
	case err == nil || errors.Is(err, os.ErrNotExist):
		if err := m.newBoot(); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	return m, nil
}

// rootDirs are the fake root's directories, each after its parent.
var rootDirs = []string{"run", "etc", "etc/cdi", "var", "var/lib", "var/lib/fakehw", "var/lib/fakehw/executions",
	"var/log", "proc", "proc/sys", "proc/sys/kernel", "proc/sys/kernel/random"}

// mkdirTree creates root (and its parents) and dirs under it, each listed
// after its parent; a directory that exists is left as it is, anything else
// there is an error (as with os.MkdirAll). Hand-written rather than
// os.MkdirAll per directory, which stats every path and its parents before
// it creates one: a bcd sim creates 10,000 such trees.
func mkdirTree(root string, dirs []string) error {
	err := os.Mkdir(root, 0o755)
	if errors.Is(err, os.ErrNotExist) {
		err = os.MkdirAll(root, 0o755)
	}
	if err := existingDir(root, err); err != nil {
		return err
	}
	for _, dir := range dirs {
		path := filepath.Join(root, dir)
		if err := existingDir(path, os.Mkdir(path, 0o755)); err != nil {
			return err
		}
	}
	return nil
}

// existingDir is the error of a mkdir of path: none when it made the
// directory or one was there already.
func existingDir(path string, err error) error {
	if !errors.Is(err, os.ErrExist) {
		return err
	}
	if fi, serr := os.Stat(path); serr != nil || !fi.IsDir() {
		return fmt.Errorf("mkdir %s: not a directory", path)
	}
	return nil
}

func (m *Machine) bootIDPath() string {
	return filepath.Join(m.root, "proc", "sys", "kernel", "random", "boot_id")
}

func (m *Machine) newBoot() error {
	var b [16]byte
	_, _ = rand.Read(b[:])
	x := hex.EncodeToString(b[:])
	id := x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
	if err := config.WriteFileAtomic(m.bootIDPath(), []byte(id+"\n"), 0o644); err != nil {
		return err
	}
	m.bootID = id
	return appendTime(m.BootsPath())
}

// BootsPath is the file of the machine's boots: one line each, Unix ms
// (its first is when it powered on).
func (m *Machine) BootsPath() string {
	return filepath.Join(m.root, "var", "lib", "fakehw", "boots")
}

// appendTime appends now (Unix ms) as a line of path, fsynced.
func appendTime(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d\n", time.Now().UnixMilli())
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// Root is the fake root.
func (m *Machine) Root() string { return m.root }

// Seed is the machine's seed.
func (m *Machine) Seed() string { return m.seed }

// Variant is the machine's variant.
func (m *Machine) Variant() string { return m.variant }

// BootID is the current boot's id.
func (m *Machine) BootID() string { return m.bootID }

// Hostname is fakehw-<seed>.
func (m *Machine) Hostname() string { return Hostname(m.seed) }

// HardwareID is derived from the seed and the variant.
func (m *Machine) HardwareID() string {
	return "fakehw-" + hex.EncodeToString(derive(m.seed, m.variant, "hardware-id")[:8])
}

// Inventory is the generated inventory with the huge pages the fake root
// holds now (host.go): machine-wide, and per NUMA node its own file or an
// even share (node 0 taking the remainder).
func (m *Machine) Inventory() (*machine.Inventory, error) {
	sys := proto.CloneOf(m.inventory.System)
	sys.Hugepages_2Mi = m.machinePages(HugePages2Mi)
	sys.Hugepages_1Gi = m.machinePages(HugePages1Gi)
	for i, node := range sys.GetNuma() {
		node.Hugepages_2Mi = m.nodePages(HugePages2Mi, i, sys.Hugepages_2Mi)
		node.Hugepages_1Gi = m.nodePages(HugePages1Gi, i, sys.Hugepages_1Gi)
	}
	return &machine.Inventory{System: sys, GPUs: m.inventory.GPUs, Network: m.inventory.Network}, nil
}

// Generated is the inventory of the seed and the variant alone (no fake
// root read): what the golden files pin.
func (m *Machine) Generated() *machine.Inventory { return m.inventory }

// Diag reports every visible GPU healthy, unless a knob says otherwise
// (faults.go).
func (m *Machine) Diag(ctx context.Context) (*machine.Diag, error) {
	d := &machine.Diag{}
	if g := m.inventory.GPUs; g != nil {
		d.GPUs, d.Healthy, d.Driver = len(g.Gpus), len(g.Gpus), g.DriverVersion
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return m.diagFault(d)
}

// CollectLogs writes a small log bundle under var/log and describes it.
func (m *Machine) CollectLogs(ctx context.Context) ([]byte, error) {
	text := fmt.Sprintf("fakehw %s seed %s boot %s\n", m.variant, m.seed, m.bootID)
	path := filepath.Join(m.root, "var", "log", "bcd-logs.txt")
	if err := config.WriteFileAtomic(path, []byte(text), 0o644); err != nil {
		return nil, err
	}
	if m.knobs().LogsUploadFails {
		return nil, fmt.Errorf("%s: the log bundle (%d bytes) was collected but the upload failed: connection refused", machine.ReasonLogsUpload, len(text))
	}
	return json.Marshal(map[string]any{"files": 1, "bytes": len(text)})
}

// Reboot writes a new boot id and clears run/; the caller then exits so
// that its supervisor starts it again, as after a real reboot.
func (m *Machine) Reboot() error {
	run := filepath.Join(m.root, "run")
	if err := os.RemoveAll(run); err != nil {
		return err
	}
	if err := os.MkdirAll(run, 0o755); err != nil {
		return err
	}
	return m.newBoot()
}

// CDIDir is etc/cdi under the fake root.
func (m *Machine) CDIDir() string { return filepath.Join(m.root, "etc", "cdi") }

// Kinds are the kinds a fakehw machine runs itself: diag.nvml,
// logs.collect, node.reboot, fakeGpuReset when its knob asks, and those
// added with AddKinds.
func (m *Machine) Kinds(env machine.KindEnv) []dispatch.Kind {
	m.mu.Lock()
	defer m.mu.Unlock()
	kinds := []dispatch.Kind{machine.DiagKind(m), machine.LogsKind(m), machine.RebootKind(env)}
	if m.knobs().GPUReset {
		kinds = append(kinds, m.gpuResetKind())
	}
	return append(kinds, m.extra...)
}

// AddKinds gives this machine more kinds (tests: a kind made up to prove
// that a kind plugs in with one registration). Agents made afterwards run them.
func (m *Machine) AddKinds(kinds ...dispatch.Kind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.extra = append(m.extra, kinds...)
}

// ExecutionsPath is the counter file of a command id.
func (m *Machine) ExecutionsPath(commandID string) string {
	return filepath.Join(m.root, "var", "lib", "fakehw", "executions", commandID)
}

// Executed increments the command's execution counter, fsynced (by two
// with BCD_FAKEHW_EXECUTE_TWICE: a deliberately broken machine).
func (m *Machine) Executed(commandID string) error {
	if commandID == "" || strings.ContainsAny(commandID, `/\`) || commandID == "." || commandID == ".." {
		return fmt.Errorf("fakehw: command id %q cannot name a file", commandID)
	}
	n, err := m.Executions(commandID)
	if err != nil {
		return err
	}
	step := 1
	if m.knobs().ExecuteTwice {
		step = 2
	}
	return config.WriteFileAtomic(m.ExecutionsPath(commandID), []byte(strconv.Itoa(n+step)+"\n"), 0o644)
}

// StartsPath is the file of the agent's starts: one line each, Unix ms.
func (m *Machine) StartsPath() string {
	return filepath.Join(m.root, "var", "lib", "fakehw", "starts")
}

// Started appends this start of the agent to its starts file, fsynced:
// what a retry-safe command may run again after (docs/harness.md, "Fleet
// invariants", I2).
func (m *Machine) Started() error {
	return appendTime(m.StartsPath())
}

// Executions reads a command's execution counter (0 when it never ran).
func (m *Machine) Executions(commandID string) (int, error) {
	data, err := os.ReadFile(m.ExecutionsPath(commandID))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// Hold reads the "hold_ms" param.
func (m *Machine) Hold(params []byte) time.Duration {
	var p struct {
		HoldMs int64 `json:"hold_ms"`
	}
	if len(params) == 0 || json.Unmarshal(params, &p) != nil || p.HoldMs <= 0 {
		return 0
	}
	return time.Duration(p.HoldMs) * time.Millisecond
}
