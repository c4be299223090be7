// The VPS runtimes of config.toml's [instances] (host builds; docs/daemon.md,
// "Instances"): libvirt-kvm and cloud-hypervisor through bcd helper, the
// volume store in [instances] volume_dir sized by its file system.

package main

import (
	"log/slog"
	"os"
	"syscall"

	"bcd/internal/agent"
	"bcd/internal/config"
	"bcd/internal/metadata"
	"bcd/internal/runtime"
	"bcd/internal/runtime/cloudhypervisor"
	"bcd/internal/runtime/libvirt"
	"bcd/internal/volumes"
)

// hostVPS builds the runtimes [instances] names; nil without the table.
func hostVPS(c *config.Config, _ string, log *slog.Logger) (*agent.VPS, error) {
	in, err := c.InstancesOf()
	if err != nil || in == nil {
		return nil, err
	}
	vps := &agent.VPS{Volumes: volumes.New(in.VolumeDir, fsSize(in.VolumeDir))}
	var seeds multiSeeds
	for _, name := range in.Runtimes {
		switch name {
		case runtime.NameLibvirtKVM:
			rt := libvirt.New(libvirt.Options{Socket: in.HelperSocket, StateDir: in.StateDir})
			vps.Runtimes, seeds = append(vps.Runtimes, rt), append(seeds, rt)
		case runtime.NameCloudHypervisor:
			rt := cloudhypervisor.New(cloudhypervisor.Options{Socket: in.HelperSocket, StateDir: in.StateDir,
				Binary: in.CloudHypervisor, Firmware: in.Firmware})
			vps.Runtimes, seeds = append(vps.Runtimes, rt), append(seeds, rt)
		}
	}
	vps.Seeds = seeds
	log.Info("instances.host", "runtimes", in.Runtimes, "helper_socket", in.HelperSocket, "volume_dir", in.VolumeDir)
	return vps, nil
}

// fsSize is the size of the file system that holds dir (made if missing).
func fsSize(dir string) func() (uint64, error) {
	return func() (uint64, error) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return 0, err
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return 0, err
		}
		return st.Blocks * uint64(st.Bsize), nil
	}
}

// multiSeeds reads a seed from whichever runtime has it.
type multiSeeds []metadata.Seeds

func (m multiSeeds) Seed(id string) ([]byte, []byte, error) {
	var err error = os.ErrNotExist
	for _, s := range m {
		var ud, md []byte
		if ud, md, err = s.Seed(id); err == nil {
			return ud, md, nil
		}
	}
	return nil, nil, err
}
