// helper.toml: the helper's own configuration, root's and apart from the
// node's config.toml (which the bcd user writes): [helper] (the socket, the
// node's user, the instance bridges, where volumes and base images may be
// taken from, the kernel guests boot directly, where host units, domains
// and state go, the programs it runs, the command roots that sign host
// units) and [update] (the release pins and the slots, see package update).

package helper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"bcd/internal/config"
	"bcd/internal/update"
	"github.com/BurntSushi/toml"
)

// DefaultConfigPath is where `bcd helper` reads its configuration.
const DefaultConfigPath = "/etc/bcd-helper/helper.toml"

// ErrConfig marks a helper.toml that cannot be used.
var ErrConfig = errors.New("invalid helper configuration")

// Config is helper.toml.
type Config struct {
	Helper Settings       `toml:"helper"`
	Update *update.Config `toml:"update"`

	// Path is the file it was read from.
	Path string `toml:"-"`
}

// Settings is the [helper] table.
type Settings struct {
	// Socket is the unix socket (default /run/bcd-helper/helper.sock).
	Socket string `toml:"socket"`
	// User is the node's user, the only one answered (default "bcd").
	User string `toml:"user"`
	// InstanceBridges are the bridges instance NICs may join.
	InstanceBridges []string `toml:"instance_bridges"`
	// VolumeDirs are where the volumes a domain may attach live (default
	// /var/lib/bcd/volumes).
	VolumeDirs []string `toml:"volume_dirs"`
	// ImageDirs are where the base images a domain boots from live
	// (default /var/lib/bcd/images); a base is attached read-only.
	ImageDirs []string `toml:"image_dirs"`
	// GuestKernel, GuestInitrd and GuestCmdline boot a domain with an
	// image directly (root's files; none: the firmware boots its disk).
	GuestKernel  string `toml:"guest_kernel"`
	GuestInitrd  string `toml:"guest_initrd"`
	GuestCmdline string `toml:"guest_cmdline"`
	// UnitDir is where host units are written (default /etc/systemd/system).
	UnitDir string `toml:"unit_dir"`
	// AccessRoot is where access.apply writes sshd's files, under
	// etc/ssh (default /).
	AccessRoot string `toml:"access_root"`
	// StateDir holds the helper's records and domain XML (default /var/lib/bcd-helper).
	StateDir string `toml:"state_dir"`
	// CommandRootsDir holds the PEM public keys that sign host units
	// (default /etc/bcd-helper/command-roots).
	CommandRootsDir string `toml:"command_roots_dir"`
	// NodeID is this host's node id: host.apply takes only specs for it.
	// Without it the helper reads node_id from NodeConfig at each apply.
	NodeID string `toml:"node_id"`
	// NodeConfig is the node's config.toml, where a join wrote node_id
	// (default /etc/bcd/config.toml).
	NodeConfig string `toml:"node_config"`
	// Virsh, IP, Systemctl, Nft, QemuImg, MkfsVfat and Mcopy are the
	// programs run (looked up on PATH; defaults virsh, ip, systemctl,
	// nft, qemu-img, mkfs.vfat, mcopy).
	Virsh     string `toml:"virsh"`
	IP        string `toml:"ip"`
	Systemctl string `toml:"systemctl"`
	Nft       string `toml:"nft"`
	QemuImg   string `toml:"qemu_img"`
	MkfsVfat  string `toml:"mkfs_vfat"`
	Mcopy     string `toml:"mcopy"`
}

// LoadConfig reads helper.toml and fills the defaults.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	md, err := toml.Decode(string(data), c)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		return nil, fmt.Errorf("%w: %s: unknown key %q", ErrConfig, path, undecoded[0].String())
	}
	if key, ok := config.MixedCaseKey(md); ok {
		return nil, fmt.Errorf("%w: %s: there is no key %q: keys are lowercase", ErrConfig, path, key.String())
	}
	c.Path = path
	c.defaults()
	for _, b := range c.Helper.InstanceBridges {
		if !validName(b, 15) {
			return nil, fmt.Errorf("%w: %s: instance bridge %q is not an interface name", ErrConfig, path, b)
		}
	}
	return c, nil
}

func (c *Config) defaults() {
	h := &c.Helper
	if len(h.VolumeDirs) == 0 {
		h.VolumeDirs = []string{"/var/lib/bcd/volumes"}
	}
	for i, d := range h.VolumeDirs {
		h.VolumeDirs[i] = filepath.Clean(d)
	}
	if len(h.ImageDirs) == 0 {
		h.ImageDirs = []string{"/var/lib/bcd/images"}
	}
	for i, d := range h.ImageDirs {
		h.ImageDirs[i] = filepath.Clean(d)
	}
	for _, d := range []struct {
		v   *string
		def string
	}{
		{&h.Socket, "/run/bcd-helper/helper.sock"}, {&h.User, "bcd"}, {&h.UnitDir, "/etc/systemd/system"}, {&h.AccessRoot, "/"},
		{&h.StateDir, "/var/lib/bcd-helper"}, {&h.CommandRootsDir, "/etc/bcd-helper/command-roots"},
		{&h.NodeConfig, "/etc/bcd/config.toml"},
		{&h.Virsh, "virsh"}, {&h.IP, "ip"}, {&h.Systemctl, "systemctl"}, {&h.Nft, "nft"},
		{&h.QemuImg, "qemu-img"}, {&h.MkfsVfat, "mkfs.vfat"}, {&h.Mcopy, "mcopy"},
		{&h.GuestCmdline, "console=ttyS0 root=/dev/vda rw"},
	} {
		if *d.v == "" {
			*d.v = d.def
		}
	}
}

// SlotsDir is [update] dir (CodeNotInstalled without one: the helper's
// slots are never guessed from its own executable).
func (c *Config) SlotsDir() (string, error) {
	if c.Update == nil || c.Update.Dir == "" {
		return "", fmt.Errorf("%w: %s has no [update] dir", update.CodeNotInstalled, c.Path)
	}
	return filepath.Clean(c.Update.Dir), nil
}

// validName says whether s is a plain name: letters, digits, '-', '_', '.',
// not starting with '.' or '-', at most max bytes.
func validName(s string, max int) bool {
	if s == "" || len(s) > max || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "-") {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
