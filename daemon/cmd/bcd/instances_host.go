// The VPS runtimes of config.toml's [instances] (host builds; docs/daemon.md,
// "Instances"): libvirt-kvm through bcd helper, and cloud-hypervisor where
// its binary and a working KVM are there (elsewhere it is not advertised),
// the volume store in [instances] volume_dir sized by its file system, the
// image store in [instances] image_dir, the accelerator, and the metadata
// endpoint on the instance bridges (listeners from the helper's
// imds.listen, a request known by its source address).

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"

	"bcd/internal/agent"
	"bcd/internal/config"
	"bcd/internal/helper"
	"bcd/internal/images"
	"bcd/internal/metadata"
	"bcd/internal/runtime"
	"bcd/internal/runtime/cloudhypervisor"
	"bcd/internal/runtime/hostfiles"
	"bcd/internal/runtime/libvirt"
	"bcd/internal/volumes"
)

// hostVPS builds the runtimes [instances] names; nil without the table.
func hostVPS(c *config.Config, _ string, log *slog.Logger) (*agent.VPS, error) {
	in, err := c.InstancesOf()
	if err != nil || in == nil {
		return nil, err
	}
	vps := &agent.VPS{Volumes: volumes.New(in.VolumeDir, fsSize(in.VolumeDir)), Images: images.New(in.ImageDir),
		Accelerator: in.Accelerator}
	var seeds multiSeeds
	for _, name := range in.Runtimes {
		switch name {
		case runtime.NameLibvirtKVM:
			rt := libvirt.New(libvirt.Options{Socket: in.HelperSocket, StateDir: in.StateDir})
			vps.Runtimes, seeds = append(vps.Runtimes, rt), append(seeds, rt)
		case runtime.NameCloudHypervisor:
			if ok, why := cloudhypervisor.Available(in.CloudHypervisor, in.Accelerator); !ok {
				log.Warn("instances.runtime_unavailable", "runtime", name, "why", why)
				continue
			}
			rt := cloudhypervisor.New(cloudhypervisor.Options{Socket: in.HelperSocket, StateDir: in.StateDir,
				Binary: in.CloudHypervisor, Firmware: in.Firmware})
			vps.Runtimes, seeds = append(vps.Runtimes, rt), append(seeds, rt)
		}
	}
	vps.Seeds = seeds
	vps.Metadata = &agent.HostMetadata{Listen: metadataListeners(in.HelperSocket), Owners: hostfiles.Addresses(in.StateDir)}
	log.Info("instances.host", "runtimes", in.Runtimes, "helper_socket", in.HelperSocket, "volume_dir", in.VolumeDir,
		"image_dir", in.ImageDir, "accelerator", in.Accelerator)
	return vps, nil
}

// metadataListeners asks the helper for the metadata endpoint's listeners.
func metadataListeners(socket string) func(context.Context) ([]net.Listener, error) {
	return func(ctx context.Context) ([]net.Listener, error) {
		res := &helper.ListenResult{}
		files, err := helper.CallFiles(ctx, socket, helper.OpImdsListen, struct{}{}, res)
		if err != nil {
			return nil, err
		}
		var out []net.Listener
		for _, f := range files {
			lis, err := net.FileListener(f)
			f.Close()
			if err != nil {
				for _, l := range out {
					l.Close()
				}
				return nil, fmt.Errorf("a listener of imds.listen: %w", err)
			}
			out = append(out, lis)
		}
		return out, nil
	}
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
