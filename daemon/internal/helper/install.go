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

// RenderInstallScript renders the script.
func RenderInstallScript(o InstallOptions) (string, error) {
	if o.Prefix == "" {
		o.Prefix = "/usr/local"
	}
	if !path.IsAbs(o.Prefix) {
		return "", fmt.Errorf("--prefix %q is not absolute", o.Prefix)
	}
	for _, b := range o.InstanceBridges {
		if !validName(b, 15) {
			return "", fmt.Errorf("instance bridge %q is not an interface name", b)
		}
	}
	if !o.Unprivileged && len(o.InstanceBridges) > 0 {
		return "", fmt.Errorf("--instance-bridges is for bcd helper: add --unprivileged")
	}
	slots := SlotsDirOf(o.Prefix)
	var up *update.Config
	if len(o.ReleaseKeys) > 0 {
		up = &update.Config{Threshold: o.Threshold, MinSequence: o.MinSequence}
		if up.Threshold <= 0 {
			up.Threshold = len(o.ReleaseKeys)
		}
		for _, k := range o.ReleaseKeys {
			up.ReleaseKeys = append(up.ReleaseKeys, base64.StdEncoding.EncodeToString(k.SPKI()))
			up.ReleaseKeyPins = append(up.ReleaseKeyPins, k.Pin())
		}
		if _, err := up.Policy(); err != nil {
			return "", err
		}
	}
	user := "root"
	if o.Unprivileged {
		user = "bcd"
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	heredoc := func(dest, text string) {
		w("cat > %s <<'%s'", dest, scriptTerminator)
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteString("\n")
		}
		w(scriptTerminator)
	}
	mode := "as root"
	if o.Unprivileged {
		mode = "unprivileged, as the bcd user under bcd helper"
	}
	w("#!/bin/sh")
	w("# Rendered by `bcd helper install-script` (bcd %s): installs bcd %s.", o.Version, mode)
	w("# Usage: sh install.sh PATH-TO-BCD   (as root)")
	w("set -eu")
	w(`BIN=${1:?usage: sh install.sh PATH-TO-BCD}`)
	w("umask 022")
	w("")
	if o.Unprivileged {
		w("# The bcd user and group.")
		w("if ! getent passwd bcd >/dev/null; then")
		w("  useradd --system --user-group --home-dir %s --no-create-home --shell /usr/sbin/nologin bcd", NodeDataDir)
		w("fi")
		w("")
	}
	w("# The slots behind the entrypoint %s/bcd (root's, 0755).", slots)
	w("install -d -o root -g root -m 0755 %s", slots)
	w(`if [ ! -L %s/bcd ]; then`, slots)
	w(`  install -o root -g root -m 0755 "$BIN" %s/bcd-a`, slots)
	w("  ln -sfn bcd-a %s/bcd", slots)
	w("fi")
	w("install -d -m 0755 %s/bin", o.Prefix)
	w("ln -sfn %s/bcd %s/bin/bcd", slots, o.Prefix)
	w("")
	w("# The node's configuration and data (%s's).", user)
	w("install -d -o %s -g %s -m 0750 %s", user, user, path.Dir(NodeConfigPath))
	w("install -d -o %s -g %s -m 0700 %s %s", user, user, NodeDataDir, path.Dir(NodeStaged))
	w("if [ ! -e %s ]; then", NodeConfigPath)
	node := fmt.Sprintf("# bcd's configuration: `bcd join` adds the gateway and the pins.\ndata_dir = %s\n", config.Quote(NodeDataDir))
	if up != nil {
		nodeUp := *up
		nodeUp.Staged = NodeStaged
		if o.Unprivileged {
			nodeUp.HelperSocket = DefaultSocket
		} else {
			nodeUp.Dir = slots
		}
		node += "\n" + nodeUp.String()
	}
	heredoc(NodeConfigPath, node)
	w("  chown %s:%s %s", user, user, NodeConfigPath)
	w("  chmod 0640 %s", NodeConfigPath)
	w("fi")
	w("")
	if o.Unprivileged {
		w("# The helper's configuration and state (root's, not group- or world-writable).")
		w("install -d -o root -g root -m 0755 /etc/bcd-helper %s %s", HelperRootsDir, HelperStateDir)
		helper := "# bcd helper's configuration (root's).\n[helper]\n"
		helper += fmt.Sprintf("socket = %s\nuser = \"bcd\"\n", config.Quote(DefaultSocket))
		bridges := make([]string, len(o.InstanceBridges))
		for i, br := range o.InstanceBridges {
			bridges[i] = config.Quote(br)
		}
		helper += fmt.Sprintf("instance_bridges = [%s]\n", strings.Join(bridges, ", "))
		helper += fmt.Sprintf("state_dir = %s\ncommand_roots_dir = %s\n", config.Quote(HelperStateDir), config.Quote(HelperRootsDir))
		if up != nil {
			helperUp := *up
			helperUp.Dir, helperUp.Staged = slots, NodeStaged
			helper += "\n" + helperUp.String()
		}
		heredoc(DefaultConfigPath, helper)
		w("chmod 0644 %s", DefaultConfigPath)
		for i, k := range o.CommandRoots {
			dest := fmt.Sprintf("%s/command-root-%d.pem", HelperRootsDir, i)
			heredoc(dest, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: k.SPKI()})))
			w("chmod 0644 %s", dest)
		}
		w("")
	}
	w("# The service units.")
	w("install -d -m 0755 %s", path.Dir(NodeUnitPath))
	after := "network-online.target"
	if o.Unprivileged {
		heredoc(HelperUnitPath, fmt.Sprintf(`[Unit]
Description=bcd helper: the privileged operations of the unprivileged bcd
Before=bcd.service

[Service]
Type=simple
ExecStart=%s/bcd helper --config %s
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
`, slots, DefaultConfigPath))
		w("chmod 0644 %s", HelperUnitPath)
		after += " bcd-helper.service"
	}
	heredoc(NodeUnitPath, fmt.Sprintf(`[Unit]
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
`, after, after, user, user, slots, NodeConfigPath))
	w("chmod 0644 %s", NodeUnitPath)
	w("")
	w("if [ -d /run/systemd/system ]; then")
	w("  systemctl daemon-reload")
	if o.Unprivileged {
		w("  systemctl enable --now bcd-helper.service")
	}
	w("  systemctl enable bcd.service")
	w(`  echo "bcd installed: join it (bcd join --config %s …), then systemctl start bcd"`, NodeConfigPath)
	w("else")
	w(`  echo "bcd installed; systemd is not running: the units are written, not started"`)
	w("fi")
	return b.String(), nil
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
