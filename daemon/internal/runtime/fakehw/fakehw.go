// Package fakehw is the libvirt-kvm runtime of fakehw builds: domains are
// files under the fake root, so they survive a bcd restart and a fake
// reboot (docs/daemon.md, "Instances"):
//
//   - <root>/var/lib/bcd/domains/<id>.json: the definition, its
//     fingerprint, its state, the boot it was started in, and how many
//     times it was defined and started;
//   - <root>/var/lib/bcd/seeds/<id>/{user-data,meta-data}: the NoCloud
//     seed (user-data 0600: it may be a secret);
//   - <root>/run/bcd/taps/<tap>: the taps of its NICs (run/ is cleared by
//     a reboot, as a real host loses its taps; Start makes them again);
//   - <root>/var/lib/bcd/addresses/<address>: its NICs' addresses on the
//     instance network (runtime/guestnet), given back with the domain;
//   - <root>/var/lib/bcd/overlays/<id>.qcow2: the overlay of a domain that
//     boots an image, simulated (a JSON note of its base: no QEMU here),
//     and its seed disk named in the plan beside the seed's files
//     (seeds/<id>/cidata.img, not written: nothing boots here);
//   - <data_dir>/fakehw-plans/<id>.xml: the libvirt domain XML a real host
//     would define (runtime/plan, the renderer bcd helper uses), or
//     <id>.error with the reason when libvirt would refuse the domain;
//   - <data_dir>/fakehw-plans/libvirt-kvm.balloons: the ballooned guests
//     (balloons.go).
//
// A domain is running when its file says so and it was started in the
// current boot: after a reboot every domain is shut off, as on a host.
// Its guests have no network, so it enforces no network policy: a domain
// with one is refused (runtime.ErrUnsupported, runtime.CheckPolicy) and
// its .error says so.
package fakehw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"bcd/internal/config"
	"bcd/internal/runtime"
	"bcd/internal/runtime/guestnet"
	"bcd/internal/runtime/plan"
)

// Version is the fake libvirt's version, advertised in the Hello.
const Version = "10.0.0-fakehw"

// Options configure the runtime.
type Options struct {
	// Root is the fake root.
	Root string
	// PlansDir is where plans go (<data_dir>/fakehw-plans).
	PlansDir string
	// BootID is the machine's current boot id.
	BootID func() string
	// Bridges are the host's instance bridges.
	Bridges []string
	// Now is the clock (tests).
	Now func() time.Time
}

// Record is a domain's file.
type Record struct {
	Domain      runtime.Domain `json:"domain"`
	Fingerprint string         `json:"fingerprint"`
	// State is "defined" or "running" (running only in BootID's boot).
	State       string `json:"state"`
	BootID      string `json:"boot_id,omitempty"`
	Defines     int    `json:"defines"`
	Starts      int    `json:"starts"`
	DefinedAtMs int64  `json:"defined_at_ms"`
	StartedAtMs int64  `json:"started_at_ms,omitempty"`
}

// Tap is a tap's file.
type Tap struct {
	Instance string `json:"instance"`
	Bridge   string `json:"bridge"`
}

// Runtime is the file-backed libvirt-kvm.
type Runtime struct {
	opts Options
	mu   sync.Mutex
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns the runtime over opts.Root.
func New(opts Options) *Runtime {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Runtime{opts: opts}
}

// Name is libvirt-kvm.
func (r *Runtime) Name() string { return runtime.NameLibvirtKVM }

// Version is the fake libvirt's.
func (r *Runtime) Version() string { return Version }

// DomainsDir, SeedsDir and TapsDir are where the runtime keeps its files.
func (r *Runtime) DomainsDir() string {
	return filepath.Join(r.opts.Root, "var", "lib", "bcd", "domains")
}
func (r *Runtime) SeedsDir() string { return filepath.Join(r.opts.Root, "var", "lib", "bcd", "seeds") }
func (r *Runtime) TapsDir() string  { return filepath.Join(r.opts.Root, "run", "bcd", "taps") }

// OverlaysDir holds the simulated overlays.
func (r *Runtime) OverlaysDir() string {
	return filepath.Join(r.opts.Root, "var", "lib", "bcd", "overlays")
}

// Addresses are the instances' addresses on the instance network.
func (r *Runtime) Addresses() guestnet.Addresses {
	return guestnet.Addresses{Dir: filepath.Join(r.opts.Root, "var", "lib", "bcd", "addresses")}
}

// local is what the runtime chooses for a domain: its NICs' addresses,
// and for a domain that boots an image its overlay and seed disk.
func (r *Runtime) local(d *runtime.Domain) error {
	if err := r.Addresses().AssignAll(d); err != nil {
		return err
	}
	d.Seed.NetworkConfig = guestnet.NetworkConfig(d)
	if d.Image != nil {
		d.Local.Overlay = filepath.Join(r.OverlaysDir(), d.ID+".qcow2")
		d.Local.SeedDisk = filepath.Join(r.SeedsDir(), d.ID, "cidata.img")
	}
	return nil
}

// writeOverlay writes the simulated overlay of a domain that boots an
// image (a note of its base), or removes one it no longer has.
func (r *Runtime) writeOverlay(d *runtime.Domain) error {
	path := filepath.Join(r.OverlaysDir(), d.ID+".qcow2")
	if d.Image == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	note, _ := json.Marshal(map[string]string{"simulated": "qcow2 overlay", "backing": d.Image.Base, "backing_format": d.Image.Format, "digest": d.Image.Digest})
	if err := os.MkdirAll(r.OverlaysDir(), 0o755); err != nil {
		return err
	}
	return config.WriteFileAtomic(path, append(note, '\n'), 0o600)
}

func (r *Runtime) recordPath(id string) string { return filepath.Join(r.DomainsDir(), id+".json") }

// PlanPath and ErrorPath are a domain's plan and its refusal.
func (r *Runtime) PlanPath(id string) string  { return filepath.Join(r.opts.PlansDir, id+".xml") }
func (r *Runtime) ErrorPath(id string) string { return filepath.Join(r.opts.PlansDir, id+".error") }

// Read returns a domain's record (nil when it has none).
func (r *Runtime) Read(id string) (*Record, error) {
	return runtime.ReadRecord[Record](r.recordPath(id), "fakehw domain "+id)
}

func (r *Runtime) write(rec *Record) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.DomainsDir(), 0o755); err != nil {
		return err
	}
	return config.WriteFileAtomic(r.recordPath(rec.Domain.ID), append(data, '\n'), 0o644)
}

// Define checks the domain as libvirt would, writes its plan (or its
// .error), its seed and its taps, and records it; a domain defined with
// the same fingerprint is not defined again (only its seed is refreshed).
func (r *Runtime) Define(_ context.Context, d *runtime.Domain) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.local(d)
	if err == nil {
		err = plan.Check(d, r.opts.Bridges)
	}
	if err == nil {
		err = d.NetworkPolicy.Validate()
	}
	if err == nil {
		// Its guests have no network to hold to a policy: one is refused,
		// never defined and reported applied without it.
		err = runtime.CheckPolicy(r, d)
	}
	if err != nil {
		if old, _ := r.Read(d.ID); old == nil && runtime.IDPattern.MatchString(d.ID) {
			_ = r.Addresses().Release(d.ID)
		}
		if runtime.IDPattern.MatchString(d.ID) {
			_ = os.Remove(r.PlanPath(d.ID))
			if werr := r.writePlanFile(r.ErrorPath(d.ID), []byte(err.Error()+"\n")); werr != nil {
				return werr
			}
		}
		return err
	}
	rec, err := r.Read(d.ID)
	if err != nil {
		return err
	}
	if err := r.writeSeed(d); err != nil {
		return err
	}
	if err := r.makeTaps(d); err != nil {
		return err
	}
	fp := d.Fingerprint()
	if err := r.writeOverlay(d); err != nil {
		return err
	}
	if rec != nil && rec.Fingerprint == fp {
		return nil
	}
	xml, err := plan.Render(d)
	if err != nil {
		return err
	}
	if err := r.writePlanFile(r.PlanPath(d.ID), xml); err != nil {
		return err
	}
	_ = os.Remove(r.ErrorPath(d.ID))
	if rec == nil {
		rec = &Record{State: string(runtime.Defined)}
	}
	rec.Domain, rec.Fingerprint = *d, fp
	rec.Defines++
	rec.DefinedAtMs = r.opts.Now().UnixMilli()
	return r.write(rec)
}

func (r *Runtime) writePlanFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return config.WriteFileAtomic(path, data, 0o644)
}

// writeSeed writes the NoCloud seed: user-data 0600 (it may be a secret),
// meta-data 0644.
func (r *Runtime) writeSeed(d *runtime.Domain) error {
	dir := filepath.Join(r.SeedsDir(), d.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := config.WriteFileAtomic(filepath.Join(dir, "user-data"), d.Seed.UserData, 0o600); err != nil {
		return err
	}
	if err := config.WriteFileAtomic(filepath.Join(dir, "network-config"), d.Seed.NetworkConfig, 0o644); err != nil {
		return err
	}
	return config.WriteFileAtomic(filepath.Join(dir, "meta-data"), d.Seed.MetaData, 0o644)
}

// makeTaps records a tap per NIC under run/ (a real host's taps go with a
// reboot too).
func (r *Runtime) makeTaps(d *runtime.Domain) error {
	if len(d.NICs) == 0 {
		return nil
	}
	if err := os.MkdirAll(r.TapsDir(), 0o755); err != nil {
		return err
	}
	for i, n := range d.NICs {
		data, _ := json.Marshal(Tap{Instance: d.ID, Bridge: n.Bridge})
		if err := config.WriteFileAtomic(filepath.Join(r.TapsDir(), runtime.TapName(d.ID, i)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Start runs a defined domain in the current boot.
func (r *Runtime) Start(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, err := r.Read(id)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("fakehw: domain bcd-%s is not defined", id)
	}
	if r.running(rec) {
		return nil
	}
	if err := r.makeTaps(&rec.Domain); err != nil {
		return err
	}
	rec.State, rec.BootID = string(runtime.Running), r.opts.BootID()
	rec.Starts++
	rec.StartedAtMs = r.opts.Now().UnixMilli()
	return r.write(rec)
}

// Stop shuts a domain off.
func (r *Runtime) Stop(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, err := r.Read(id)
	if err != nil || rec == nil || rec.State == string(runtime.Defined) {
		return err
	}
	rec.State, rec.BootID = string(runtime.Defined), ""
	return r.write(rec)
}

// Destroy removes the domain, its plan (or .error), its seed and its taps.
func (r *Runtime) Destroy(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !runtime.IDPattern.MatchString(id) {
		return fmt.Errorf("%w: instance id %q", runtime.ErrInvalid, id)
	}
	taps, _ := filepath.Glob(filepath.Join(r.TapsDir(), strings.TrimSuffix(runtime.TapName(id, 0), "0")+"*"))
	if err := r.dropBalloon(id); err != nil {
		return err
	}
	paths := append(taps, r.PlanPath(id), r.ErrorPath(id), r.recordPath(id), filepath.Join(r.OverlaysDir(), id+".qcow2"))
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := r.Addresses().Release(id); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(r.SeedsDir(), id))
}

// Inspect reads the domain's state and fingerprint.
func (r *Runtime) Inspect(_ context.Context, id string) (runtime.State, string, error) {
	rec, err := r.Read(id)
	switch {
	case err != nil:
		return "", "", err
	case rec == nil:
		return runtime.Absent, "", nil
	case r.running(rec):
		return runtime.Running, rec.Fingerprint, nil
	}
	return runtime.Defined, rec.Fingerprint, nil
}

// running says the domain runs: started, and in this boot.
func (r *Runtime) running(rec *Record) bool {
	return rec.State == string(runtime.Running) && rec.BootID == r.opts.BootID()
}

// List returns every domain's id, sorted.
func (r *Runtime) List(context.Context) ([]string, error) {
	return runtime.RecordIDs(r.DomainsDir())
}

// Seed reads an instance's seed (what the metadata endpoint serves).
func (r *Runtime) Seed(id string) ([]byte, []byte, error) {
	if !runtime.IDPattern.MatchString(id) {
		return nil, nil, fmt.Errorf("%w: instance id %q", runtime.ErrInvalid, id)
	}
	dir := filepath.Join(r.SeedsDir(), id)
	ud, err := os.ReadFile(filepath.Join(dir, "user-data"))
	if err != nil {
		return nil, nil, err
	}
	md, err := os.ReadFile(filepath.Join(dir, "meta-data"))
	return ud, md, err
}

var _ runtime.UsageReader = (*Runtime)(nil)

// Usage is fakehw's synthetic usage of a running domain, deterministic so
// tests can assert it: one CPU second per boot of the domain, half its
// configured memory in use, no disk or network I/O.
func (r *Runtime) Usage(_ context.Context, id string) (runtime.Usage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, err := r.Read(id)
	if err != nil {
		return runtime.Usage{}, err
	}
	if rec == nil || !r.running(rec) {
		return runtime.Usage{}, fmt.Errorf("fakehw: domain bcd-%s is not running", id)
	}
	return runtime.Usage{CPUTime: time.Duration(rec.Starts) * time.Second, MemoryUsedBytes: rec.Domain.MemoryBytes / 2}, nil
}
