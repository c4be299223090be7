// The install script `bcd helper install-script` renders: a POSIX shell
// script that installs bcd behind its entrypoint (the slots root's), and in
// the unprivileged mode the bcd user and group, the node's directories (the
// user's), the helper's configuration (root's) and both service units.
// Everything it needs is in the script; it takes the binary to install as
// its only argument.

package helper

import (
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"path"
	"strings"

	"bcd/internal/config"
	"bcd/internal/pki"
	"bcd/internal/update"
)

// InstallOptions are the install script's choices.
type InstallOptions struct {
	// Version is the rendering bcd's version (a comment).
	Version string
	// Unprivileged installs bcd as the bcd user under bcd helper.
	Unprivileged bool
	// InstanceBridges are [helper] instance_bridges.
	InstanceBridges []string
	// Prefix is where bcd goes (default /usr/local: /usr/local/lib/bcd, /usr/local/bin/bcd).
	Prefix string
	// ReleaseKeys, Threshold and MinSequence are [update]'s pins (no
	// [update] without keys).
	ReleaseKeys []*pki.PublicKey
	Threshold   int
	MinSequence uint64
	// CommandRoots are the keys that sign host units (PEM files in
	// /etc/bcd-helper/command-roots).
	CommandRoots []*pki.PublicKey
}

// The installed layout.
const (
	NodeConfigPath   = "/etc/bcd/config.toml"
	NodeDataDir      = "/var/lib/bcd"
	NodeStaged       = "/var/lib/bcd/update/bcd.staged"
	HelperUnitPath   = "/etc/systemd/system/bcd-helper.service"
	NodeUnitPath     = "/etc/systemd/system/bcd.service"
	HelperStateDir   = "/var/lib/bcd-helper"
	HelperRootsDir   = "/etc/bcd-helper/command-roots"
	DefaultSocket    = "/run/bcd-helper/helper.sock"
	scriptTerminator = "BCD_INSTALL_EOF"
)

// SlotsDirOf is <prefix>/lib/bcd.
func SlotsDirOf(prefix string) string { return path.Join(prefix, "lib", "bcd") }

// RenderInstallScript renders the script: the options checked, the
// [update] table of their pins, then the script's parts in order.
func RenderInstallScript(o InstallOptions) (string, error) {
	o, err := o.checked()
	if err != nil {
		return "", err
	}
	up, err := o.updateConfig()
	if err != nil {
		return "", err
	}
	s := &installScript{o: o, up: up, slots: SlotsDirOf(o.Prefix), user: o.user()}
	s.preamble()
	s.bcdUser()
	s.entrypoint()
	s.nodeConfig()
	s.helperConfig()
	s.units()
	s.enable()
	return s.b.String(), nil
}

// checked is o with the default prefix, or why o cannot be rendered: a
// relative prefix, an instance bridge that is not an interface name,
// instance bridges without Unprivileged.
func (o InstallOptions) checked() (InstallOptions, error) {
	if o.Prefix == "" {
		o.Prefix = "/usr/local"
	}
	if !path.IsAbs(o.Prefix) {
		return o, fmt.Errorf("--prefix %q is not absolute", o.Prefix)
	}
	for _, b := range o.InstanceBridges {
		if !validName(b, 15) {
			return o, fmt.Errorf("instance bridge %q is not an interface name", b)
		}
	}
	if !o.Unprivileged && len(o.InstanceBridges) > 0 {
		return o, fmt.Errorf("--instance-bridges is for bcd helper: add --unprivileged")
	}
	return o, nil
}

// updateConfig is the [update] table of the pins (nil without release
// keys; the threshold defaults to every key), refused when its policy is.
func (o InstallOptions) updateConfig() (*update.Config, error) {
	if len(o.ReleaseKeys) == 0 {
		return nil, nil
	}
	up := &update.Config{Threshold: o.Threshold, MinSequence: o.MinSequence}
	if up.Threshold <= 0 {
		up.Threshold = len(o.ReleaseKeys)
	}
	for _, k := range o.ReleaseKeys {
		up.ReleaseKeys = append(up.ReleaseKeys, base64.StdEncoding.EncodeToString(k.SPKI()))
		up.ReleaseKeyPins = append(up.ReleaseKeyPins, k.Pin())
	}
	if _, err := up.Policy(); err != nil {
		return nil, err
	}
	return up, nil
}

// user is the user bcd runs as: bcd when unprivileged, else root.
func (o InstallOptions) user() string {
	if o.Unprivileged {
		return "bcd"
	}
	return "root"
}

// installScript is the script being rendered.
type installScript struct {
	o InstallOptions
	// up is the [update] table (nil: none).
	up *update.Config
	// slots is the slots directory, user the user bcd runs as.
	slots, user string
	b           strings.Builder
}

// line writes one line of the script.
func (s *installScript) line(format string, args ...any) {
	fmt.Fprintf(&s.b, format+"\n", args...)
}

// heredoc writes a command that writes text to dest.
func (s *installScript) heredoc(dest, text string) {
	s.line("cat > %s <<'%s'", dest, scriptTerminator)
	s.b.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		s.b.WriteString("\n")
	}
	s.line(scriptTerminator)
}

// preamble is the shebang, what the script installs and its argument.
func (s *installScript) preamble() {
	mode := "as root"
	if s.o.Unprivileged {
		mode = "unprivileged, as the bcd user under bcd helper"
	}
	s.line("#!/bin/sh")
	s.line("# Rendered by `bcd helper install-script` (bcd %s): installs bcd %s.", s.o.Version, mode)
	s.line("# Usage: sh install.sh PATH-TO-BCD   (as root)")
	s.line("set -eu")
	s.line(`BIN=${1:?usage: sh install.sh PATH-TO-BCD}`)
	s.line("umask 022")
	s.line("")
}

// bcdUser adds the bcd user and group (unprivileged only).
func (s *installScript) bcdUser() {
	if !s.o.Unprivileged {
		return
	}
	s.line("# The bcd user and group.")
	s.line("if ! getent passwd bcd >/dev/null; then")
	s.line("  useradd --system --user-group --home-dir %s --no-create-home --shell /usr/sbin/nologin bcd", NodeDataDir)
	s.line("fi")
	s.line("")
}

// entrypoint installs the binary into bcd-a behind the entrypoint (unless
// there is one already) and links <prefix>/bin/bcd to it.
func (s *installScript) entrypoint() {
	s.line("# The slots behind the entrypoint %s/bcd (root's, 0755).", s.slots)
	s.line("install -d -o root -g root -m 0755 %s", s.slots)
	s.line(`if [ ! -L %s/bcd ]; then`, s.slots)
	s.line(`  install -o root -g root -m 0755 "$BIN" %s/bcd-a`, s.slots)
	s.line("  ln -sfn bcd-a %s/bcd", s.slots)
	s.line("fi")
	s.line("install -d -m 0755 %s/bin", s.o.Prefix)
	s.line("ln -sfn %s/bcd %s/bin/bcd", s.slots, s.o.Prefix)
	s.line("")
}

// nodeConfig makes the node's directories and writes its config.toml
// when there is none.
func (s *installScript) nodeConfig() {
	user := s.user
	s.line("# The node's configuration and data (%s's).", user)
	s.line("install -d -o %s -g %s -m 0750 %s", user, user, path.Dir(NodeConfigPath))
	s.line("install -d -o %s -g %s -m 0700 %s %s", user, user, NodeDataDir, path.Dir(NodeStaged))
	s.line("if [ ! -e %s ]; then", NodeConfigPath)
	s.heredoc(NodeConfigPath, s.nodeConfigText())
	s.line("  chown %s:%s %s", user, user, NodeConfigPath)
	s.line("  chmod 0640 %s", NodeConfigPath)
	s.line("fi")
	s.line("")
}

// nodeConfigText is the node's config.toml: the data dir and [update],
// whose slots are the helper's when unprivileged.
func (s *installScript) nodeConfigText() string {
	node := fmt.Sprintf("# bcd's configuration: `bcd join` adds the gateway and the pins.\ndata_dir = %s\n", config.Quote(NodeDataDir))
	if s.up != nil {
		nodeUp := *s.up
		nodeUp.Staged = NodeStaged
		if s.o.Unprivileged {
			nodeUp.HelperSocket = DefaultSocket
		} else {
			nodeUp.Dir = s.slots
		}
		node += "\n" + nodeUp.String()
	}
	return node
}

// helperConfig makes the helper's directories and writes its helper.toml
// and the command roots (unprivileged only).
func (s *installScript) helperConfig() {
	if !s.o.Unprivileged {
		return
	}
	s.line("# The helper's configuration and state (root's, not group- or world-writable).")
	s.line("install -d -o root -g root -m 0755 /etc/bcd-helper %s %s", HelperRootsDir, HelperStateDir)
	s.heredoc(DefaultConfigPath, s.helperConfigText())
	s.line("chmod 0644 %s", DefaultConfigPath)
	for i, k := range s.o.CommandRoots {
		dest := fmt.Sprintf("%s/command-root-%d.pem", HelperRootsDir, i)
		s.heredoc(dest, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: k.SPKI()})))
		s.line("chmod 0644 %s", dest)
	}
	s.line("")
}

// helperConfigText is helper.toml: [helper] and [update] over the slots.
func (s *installScript) helperConfigText() string {
	helper := "# bcd helper's configuration (root's).\n[helper]\n"
	helper += fmt.Sprintf("socket = %s\nuser = \"bcd\"\n", config.Quote(DefaultSocket))
	bridges := make([]string, len(s.o.InstanceBridges))
	for i, br := range s.o.InstanceBridges {
		bridges[i] = config.Quote(br)
	}
	helper += fmt.Sprintf("instance_bridges = [%s]\n", strings.Join(bridges, ", "))
	helper += fmt.Sprintf("state_dir = %s\ncommand_roots_dir = %s\n", config.Quote(HelperStateDir), config.Quote(HelperRootsDir))
	if s.up != nil {
		helperUp := *s.up
		helperUp.Dir, helperUp.Staged = s.slots, NodeStaged
		helper += "\n" + helperUp.String()
	}
	return helper
}

// units writes the service units: bcd-helper.service when unprivileged,
// and bcd.service after it.
func (s *installScript) units() {
	s.line("# The service units.")
	s.line("install -d -m 0755 %s", path.Dir(NodeUnitPath))
	after := "network-online.target"
	if s.o.Unprivileged {
		s.heredoc(HelperUnitPath, helperUnit(s.slots))
		s.line("chmod 0644 %s", HelperUnitPath)
		after += " bcd-helper.service"
	}
	s.heredoc(NodeUnitPath, nodeUnit(after, s.user, s.slots))
	s.line("chmod 0644 %s", NodeUnitPath)
	s.line("")
}

// helperUnit is bcd-helper.service, running the helper of the slots'
// entrypoint before bcd.service.
func helperUnit(slots string) string {
	return fmt.Sprintf(`[Unit]
Description=bcd helper: the privileged operations of the unprivileged bcd
Before=bcd.service

[Service]
Type=simple
ExecStart=%s/bcd helper --config %s
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
`, slots, DefaultConfigPath)
}

// nodeUnit is bcd.service, running bcd node of the slots' entrypoint as
// user after the units of after (exit status 3 is not restarted).
func nodeUnit(after, user, slots string) string {
	return fmt.Sprintf(`[Unit]
Description=bcd, the node daemon
Wants=%s
After=%s

[Service]
User=%s
Group=%s
ExecStart=%s/bcd node --config %s
Restart=always
RestartPreventExitStatus=3
RestartSec=1

[Install]
WantedBy=multi-user.target
`, after, after, user, user, slots, NodeConfigPath)
}

// enable enables the units when systemd runs, and says what is next.
func (s *installScript) enable() {
	s.line("if [ -d /run/systemd/system ]; then")
	s.line("  systemctl daemon-reload")
	if s.o.Unprivileged {
		s.line("  systemctl enable --now bcd-helper.service")
	}
	s.line("  systemctl enable bcd.service")
	s.line(`  echo "bcd installed: join it (bcd join --config %s …), then systemctl start bcd"`, NodeConfigPath)
	s.line("else")
	s.line(`  echo "bcd installed; systemd is not running: the units are written, not started"`)
	s.line("fi")
}

// ExecStart reads the ExecStart= line of a unit (how a test starts the
// helper exactly as its unit does).
func ExecStart(unit string) ([]string, error) {
	for _, line := range strings.Split(unit, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart="); ok {
			return strings.Fields(rest), nil
		}
	}
	return nil, fmt.Errorf("no ExecStart= line")
}
