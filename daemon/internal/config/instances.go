// The [instances] table of config.toml: what makes a host build of bcd a
// VPS host (docs/daemon.md, "config.toml"). fakehw builds ignore it (their
// VPS host is fake hardware's).

package config

import (
	"fmt"
	"path/filepath"
)

// Instances is the [instances] table.
type Instances struct {
	// Runtimes are the runtimes to run: "libvirt-kvm", "cloud-hypervisor".
	Runtimes []string `toml:"runtimes"`
	// HelperSocket is bcd helper's socket (default /run/bcd-helper/helper.sock).
	HelperSocket string `toml:"helper_socket"`
	// StateDir keeps the runtimes' records and the seeds (default
	// <data_dir>/instances).
	StateDir string `toml:"state_dir"`
	// VolumeDir is the volume store (default <data_dir>/volumes; it must be
	// one of the helper's [helper] volume_dirs).
	VolumeDir string `toml:"volume_dir"`
	// CloudHypervisor is the cloud-hypervisor binary (default on PATH).
	CloudHypervisor string `toml:"cloud_hypervisor"`
	// Firmware is what cloud-hypervisor boots (default
	// /usr/share/cloud-hypervisor/hypervisor-fw).
	Firmware string `toml:"firmware"`
	// ImageDir is the image store: the base disks instances boot from,
	// <hex of their SHA-256>.raw or .qcow2 (default <data_dir>/images; it
	// must be one of the helper's [helper] image_dirs).
	ImageDir string `toml:"image_dir"`
	// Accelerator is what guests run under: "kvm" (the default) or "tcg",
	// QEMU's emulation, where KVM cannot run a guest (a nested host).
	Accelerator string `toml:"accelerator"`
}

// InstancesOf returns the [instances] table with its defaults filled in
// (nil without the table), refusing an unknown runtime.
func (c *Config) InstancesOf() (*Instances, error) {
	if c.Instances == nil {
		return nil, nil
	}
	in := *c.Instances
	for _, d := range []struct {
		v   *string
		def string
	}{
		{&in.HelperSocket, "/run/bcd-helper/helper.sock"},
		{&in.StateDir, filepath.Join(c.DataDir, "instances")},
		{&in.VolumeDir, filepath.Join(c.DataDir, "volumes")},
		{&in.CloudHypervisor, "cloud-hypervisor"},
		{&in.Firmware, "/usr/share/cloud-hypervisor/hypervisor-fw"},
		{&in.ImageDir, filepath.Join(c.DataDir, "images")},
		{&in.Accelerator, "kvm"},
	} {
		if *d.v == "" {
			*d.v = d.def
		}
	}
	if in.Accelerator != "kvm" && in.Accelerator != "tcg" {
		return nil, fmt.Errorf("%w: %s: [instances] accelerator %q (kvm or tcg)", ErrInvalid, c.Path, in.Accelerator)
	}
	for _, r := range in.Runtimes {
		if r != "libvirt-kvm" && r != "cloud-hypervisor" {
			return nil, fmt.Errorf("%w: %s: [instances] runtime %q (libvirt-kvm or cloud-hypervisor)", ErrInvalid, c.Path, r)
		}
	}
	return &in, nil
}
