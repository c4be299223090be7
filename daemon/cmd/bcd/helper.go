// bcd helper: the root helper of an unprivileged bcd (serve), and
// `bcd helper install-script`, which renders the install script. A
// helpere2e build also has `bcd helper call`, `bcd helper vps-pass` and
// `bcd helper host-pass` (helper_e2e.go).

package main

import (
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"bcd/internal/helper"
	"bcd/internal/pki"
)

const helperUsage = `usage: bcd helper [--config PATH]
       bcd helper install-script [--unprivileged] [--instance-bridges BR,…]
                                 [--prefix DIR] [--release-key-file PEM]…
                                 [--release-threshold N] [--release-min-sequence N]
                                 [--command-root-file PEM]…

Runs the root helper of an unprivileged bcd: it answers the bcd user's
bcd (one of the installed slots) on a unix socket, for host units signed
by a command root, libvirt domains, cloud-hypervisor taps on the instance
bridges, and self-update of the root-owned slots. SIGTERM or SIGINT stops it.

install-script prints a shell script that installs bcd (run it as root
with the binary to install as its argument): with --unprivileged, the bcd
user, its directories, the helper's configuration and both service units.

Flags:
  --config PATH              helper.toml (default /etc/bcd-helper/helper.toml)
  --unprivileged             install bcd as the bcd user under bcd helper
  --instance-bridges LIST    the bridges instance NICs may join (comma-separated)
  --prefix DIR               where bcd goes (default /usr/local)
  --release-key-file PEM     a release key to pin in [update] (repeat)
  --release-threshold N      signatures a release needs (default: every key)
  --release-min-sequence N   the lowest acceptable release sequence
  --command-root-file PEM    a command root that signs host units (repeat)
`

// helperCall is `bcd helper call` (helpere2e builds only).
var helperCall func(args []string, e env) int

// helperVPSPass is `bcd helper vps-pass` (helpere2e builds only).
var helperVPSPass func(args []string, e env) int

// helperHostPass is `bcd helper host-pass` (helpere2e builds only).
var helperHostPass func(args []string, e env) int

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runHelper(args []string, e env) int {
	if len(args) > 0 {
		switch args[0] {
		case "install-script":
			return runInstallScript(args[1:], e)
		case "vps-pass":
			if helperVPSPass != nil {
				return helperVPSPass(args[1:], e)
			}
		case "host-pass":
			if helperHostPass != nil {
				return helperHostPass(args[1:], e)
			}
		case "call":
			if helperCall != nil {
				return helperCall(args[1:], e)
			}
		}
	}
	fs := flag.NewFlagSet("helper", flag.ContinueOnError)
	configPath := fs.String("config", helper.DefaultConfigPath, "")
	if code, ok := parse(fs, args, helperUsage, e); !ok {
		return code
	}
	cfg, err := helper.LoadConfig(*configPath)
	if err != nil {
		return fail(e, "helper", err)
	}
	log := logger(e)
	s, err := helper.NewServer(cfg, log, helper.Options{})
	if err != nil {
		return fail(e, "helper", err)
	}
	lis, err := s.Listen()
	if err != nil {
		return fail(e, "helper", err)
	}
	if err := s.Serve(e.ctx, lis); err != nil {
		return fail(e, "helper", err)
	}
	return 0
}

// readPublicKey reads a PEM PUBLIC KEY file.
func readPublicKey(path string) (*pki.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, errors.New(path + " is not a PEM PUBLIC KEY")
	}
	return pki.ParsePublicKey(block.Bytes)
}

func runInstallScript(args []string, e env) int {
	fs := flag.NewFlagSet("helper install-script", flag.ContinueOnError)
	o := helper.InstallOptions{Version: version}
	var bridges string
	var releaseKeys, roots multiFlag
	fs.BoolVar(&o.Unprivileged, "unprivileged", false, "")
	fs.StringVar(&bridges, "instance-bridges", "", "")
	fs.StringVar(&o.Prefix, "prefix", "/usr/local", "")
	fs.Var(&releaseKeys, "release-key-file", "")
	fs.IntVar(&o.Threshold, "release-threshold", 0, "")
	fs.Uint64Var(&o.MinSequence, "release-min-sequence", 0, "")
	fs.Var(&roots, "command-root-file", "")
	if code, ok := parse(fs, args, helperUsage, e); !ok {
		return code
	}
	for _, b := range strings.Split(bridges, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.InstanceBridges = append(o.InstanceBridges, b)
		}
	}
	for _, files := range []struct {
		paths []string
		dst   *[]*pki.PublicKey
	}{{releaseKeys, &o.ReleaseKeys}, {roots, &o.CommandRoots}} {
		for _, p := range files.paths {
			key, err := readPublicKey(p)
			if err != nil {
				return fail(e, "helper install-script", err)
			}
			*files.dst = append(*files.dst, key)
		}
	}
	script, err := helper.RenderInstallScript(o)
	if err != nil {
		fmt.Fprintf(e.stderr, "bcd helper install-script: %v\n\n%s", err, helperUsage)
		return 2
	}
	fmt.Fprint(e.stdout, script)
	return 0
}
