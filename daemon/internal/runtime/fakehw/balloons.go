// The fakehw runtime's balloons (runtime.Ballooner): what each ballooned
// guest has now, kept on disk in <data_dir>/fakehw-plans/libvirt-kvm.balloons
// (JSON, instance id → bytes), so a restarted bcd finds its guests as small
// as it left them, as libvirt's live balloon would. A balloon is live
// state, not the definition: the plan keeps the domain's full memory.

package fakehw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"bcd/internal/config"
	"bcd/internal/runtime"
)

var _ runtime.Ballooner = (*Runtime)(nil)

// BalloonsPath is the balloons file.
func (r *Runtime) BalloonsPath() string {
	return filepath.Join(r.opts.PlansDir, runtime.NameLibvirtKVM+".balloons")
}

func (r *Runtime) balloons() (map[string]uint64, error) {
	out := map[string]uint64{}
	data, err := os.ReadFile(r.BalloonsPath())
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Balloon is what a running guest has now (its full memory unless
// ballooned).
func (r *Runtime) Balloon(_ context.Context, id string) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, err := r.Read(id)
	if err != nil || rec == nil {
		return 0, err
	}
	b, err := r.balloons()
	if err != nil {
		return 0, err
	}
	if n, ok := b[id]; ok {
		return n, nil
	}
	return rec.Domain.MemoryBytes, nil
}

// SetBalloon sets what a guest has (its full memory deflates the balloon
// and drops it from the file).
func (r *Runtime) SetBalloon(_ context.Context, id string, bytes uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, err := r.Read(id)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("fakehw: no domain %s to balloon", id)
	}
	if bytes >= rec.Domain.MemoryBytes {
		return r.dropBalloon(id)
	}
	b, err := r.balloons()
	if err != nil {
		return err
	}
	b[id] = bytes
	return r.writeBalloons(b)
}

// dropBalloon forgets a guest's balloon (the file goes with the last).
func (r *Runtime) dropBalloon(id string) error {
	b, err := r.balloons()
	if err != nil {
		return err
	}
	if _, ok := b[id]; !ok {
		return nil
	}
	delete(b, id)
	return r.writeBalloons(b)
}

func (r *Runtime) writeBalloons(b map[string]uint64) error {
	if len(b) == 0 {
		if err := os.Remove(r.BalloonsPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	data, _ := json.MarshalIndent(b, "", "  ")
	if err := os.MkdirAll(r.opts.PlansDir, 0o755); err != nil {
		return err
	}
	return config.WriteFileAtomic(r.BalloonsPath(), append(data, '\n'), 0o644)
}
