// The TPM as bcd's commands use it: opened on first use only (a token node
// never starts the fakehw swtpm), closed once when the command ends, and
// registered with atexit so that a panic in main's goroutine or an exec
// (self-update) closes it too: the fakehw swtpm is always stopped orderly.

package main

import (
	"log/slog"
	"sync"

	"bcd/internal/atexit"
	"bcd/internal/tpm"
)

// tpmDevice is the TPM of one command.
type tpmDevice struct {
	open func() (*tpm.TPM, func() error, error)
	log  *slog.Logger

	mu         sync.Mutex
	t          *tpm.TPM
	closeTPM   func() error
	unregister func()
}

// newTPMDevice returns the TPM of dataDir (openTPM, by build), not yet open.
func newTPMDevice(dataDir string, getenv func(string) string, log *slog.Logger) *tpmDevice {
	return &tpmDevice{open: func() (*tpm.TPM, func() error, error) { return openTPM(dataDir, getenv, log) }, log: log}
}

// Open opens the TPM, or returns the open one.
func (d *tpmDevice) Open() (*tpm.TPM, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.t != nil {
		return d.t, nil
	}
	t, closeTPM, err := d.open()
	if err != nil {
		return nil, err
	}
	d.t, d.closeTPM = t, closeTPM
	d.unregister = atexit.Register(d.Close)
	return t, nil
}

// Close closes an open TPM (a fakehw swtpm is stopped orderly); later
// calls do nothing.
func (d *tpmDevice) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.t == nil {
		return
	}
	if err := d.closeTPM(); err != nil {
		d.log.Error("tpm.close_failed", "err", err)
	}
	d.t = nil
	d.unregister()
}
