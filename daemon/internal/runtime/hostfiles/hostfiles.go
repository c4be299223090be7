// Package hostfiles is what the host runtimes (runtime/libvirt,
// runtime/cloudhypervisor) keep on bcd's side: one record per domain
// (<state>/<runtime>/<id>.json: its definition and fingerprint, which is
// how List and Inspect know what bcd defined), its NoCloud seed
// (<state>/seeds/<id>/{user-data,meta-data,network-config}, user-data
// 0600), and the instance network's addresses the runtimes share
// (<state>/addresses, runtime/guestnet).
package hostfiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"bcd/internal/config"
	"bcd/internal/runtime"
	"bcd/internal/runtime/guestnet"
)

// Record is a domain bcd defined.
type Record struct {
	Domain      runtime.Domain `json:"domain"`
	Fingerprint string         `json:"fingerprint"`
}

// Files is one runtime's records and the seeds under a state dir.
type Files struct {
	dir, seeds string
}

// New returns the files of runtime name under state.
func New(state, name string) *Files {
	return &Files{dir: filepath.Join(state, name), seeds: filepath.Join(state, "seeds")}
}

func (f *Files) path(id string) string { return filepath.Join(f.dir, id+".json") }

// SeedDir is an instance's seed directory.
func (f *Files) SeedDir(id string) string { return filepath.Join(f.seeds, id) }

// Dir is the runtime's own directory (records, sockets, logs).
func (f *Files) Dir() string { return f.dir }

// Addresses are the instance network's addresses held under state.
func Addresses(state string) guestnet.Addresses {
	return guestnet.Addresses{Dir: filepath.Join(state, "addresses")}
}

// Read returns a record (nil when there is none).
func (f *Files) Read(id string) (*Record, error) {
	return runtime.ReadRecord[Record](f.path(id), "domain record "+id)
}

// Write records a domain and its fingerprint.
func (f *Files) Write(d *runtime.Domain) error {
	data, err := json.MarshalIndent(&Record{Domain: *d, Fingerprint: d.Fingerprint()}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return err
	}
	return config.WriteFileAtomic(f.path(d.ID), append(data, '\n'), 0o600)
}

// WriteSeed writes the domain's seed.
func (f *Files) WriteSeed(d *runtime.Domain) error {
	dir := f.SeedDir(d.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := config.WriteFileAtomic(filepath.Join(dir, "user-data"), d.Seed.UserData, 0o600); err != nil {
		return err
	}
	if err := config.WriteFileAtomic(filepath.Join(dir, "network-config"), d.Seed.NetworkConfig, 0o600); err != nil {
		return err
	}
	return config.WriteFileAtomic(filepath.Join(dir, "meta-data"), d.Seed.MetaData, 0o600)
}

// Seed reads an instance's seed.
func (f *Files) Seed(id string) ([]byte, []byte, error) {
	if !runtime.IDPattern.MatchString(id) {
		return nil, nil, fmt.Errorf("%w: instance id %q", runtime.ErrInvalid, id)
	}
	ud, err := os.ReadFile(filepath.Join(f.SeedDir(id), "user-data"))
	if err != nil {
		return nil, nil, err
	}
	md, err := os.ReadFile(filepath.Join(f.SeedDir(id), "meta-data"))
	return ud, md, err
}

// Remove drops a domain's record and seed.
func (f *Files) Remove(id string) error {
	if err := os.Remove(f.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.RemoveAll(f.SeedDir(id))
}

// List returns the ids of the recorded domains, sorted.
func (f *Files) List() ([]string, error) {
	return runtime.RecordIDs(f.dir)
}
