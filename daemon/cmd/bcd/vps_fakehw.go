//go:build fakehw

// The fakehw VPS host: the file-backed libvirt-kvm runtime under the fake
// root (plans in <data_dir>/fakehw-plans), a volume store of
// BCD_FAKEHW_VOLUME_STORE_BYTES (default 256 GiB of sparse files), the
// instance bridges of BCD_FAKEHW_INSTANCE_BRIDGES (default bcbr0), and
// the image store under the fake root (var/lib/bcd/images), and the
// metadata endpoint on <data_dir>/metadata.sock.

package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"

	"bcd/internal/agent"
	"bcd/internal/config"
	"bcd/internal/fakehw"
	"bcd/internal/images"
	"bcd/internal/machine"
	"bcd/internal/runtime"
	rtfake "bcd/internal/runtime/fakehw"
	"bcd/internal/volumes"
)

// defaultVolumeStore is the fakehw volume store's size.
const defaultVolumeStore = 256 << 30

// PlansDirName is where fakehw writes the plans, under the data dir.
const PlansDirName = "fakehw-plans"

// newVPS makes every fakehw machine a VPS host.
func newVPS(_ *config.Config, dataDir string, m machine.Machine, getenv func(string) string, log *slog.Logger) (*agent.VPS, error) {
	fm, ok := m.(*fakehw.Machine)
	if !ok {
		return nil, fmt.Errorf("fakehw: the machine is a %T", m)
	}
	size := uint64(defaultVolumeStore)
	if v := getenv("BCD_FAKEHW_VOLUME_STORE_BYTES"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			log.Warn("fakehw.knob_ignored", "knob", "BCD_FAKEHW_VOLUME_STORE_BYTES", "reason", "not a positive number of bytes")
		} else {
			size = n
			log.Info("fakehw.knob", "knob", "BCD_FAKEHW_VOLUME_STORE_BYTES", "value", n)
		}
	}
	bridges := []string{"bcbr0"}
	if v := getenv("BCD_FAKEHW_INSTANCE_BRIDGES"); v != "" {
		bridges = strings.Split(v, ",")
		log.Info("fakehw.knob", "knob", "BCD_FAKEHW_INSTANCE_BRIDGES", "value", v)
	}
	rt := rtfake.New(rtfake.Options{Root: fm.Root(), PlansDir: filepath.Join(dataDir, PlansDirName), BootID: fm.BootID, Bridges: bridges})
	store := volumes.New(filepath.Join(fm.Root(), "var", "lib", "bcd", "volumes"), func() (uint64, error) { return size, nil })
	imageStore := images.New(filepath.Join(fm.Root(), "var", "lib", "bcd", "images"))
	return &agent.VPS{Runtimes: []runtime.Runtime{rt}, Volumes: store, Images: imageStore, Seeds: rt, MetadataSocket: true}, nil
}
