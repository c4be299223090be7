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
	} {
		if *d.v == "" {
			*d.v = d.def
		}
	}
	for _, r := range in.Runtimes {
		if r != "libvirt-kvm" && r != "cloud-hypervisor" {
			return nil, fmt.Errorf("%w: %s: [instances] runtime %q (libvirt-kvm or cloud-hypervisor)", ErrInvalid, c.Path, r)
		}
	}
	return &in, nil
}
