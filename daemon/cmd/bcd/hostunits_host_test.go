//go:build !fakehw

// Tests of the host build's host units: which helper socket the machine
// uses, and that without one it is no hostconfig.System.

package main

import (
	"log/slog"
	"path/filepath"
	"testing"

	"bcd/internal/config"
	"bcd/internal/hostconfig"
	"bcd/internal/machine"
	"bcd/internal/testlog"
)

func TestTheHostMachineAppliesHostUnitsThroughTheConfiguredHelper(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, toml, socket string
	}{
		{"update", "[update]\nrelease_keys = []\nhelper_socket = \"/run/h/update.sock\"\n\n[instances]\nruntimes = []\nhelper_socket = \"/run/h/instances.sock\"\n", "/run/h/update.sock"},
		{"instances", "[instances]\nruntimes = []\nhelper_socket = \"/run/h/instances.sock\"\n", "/run/h/instances.sock"},
		{"instances default", "[instances]\nruntimes = []\n", "/run/bcd-helper/helper.sock"},
		{"none", "", ""},
	} {
		path := filepath.Join(dir, c.name+".toml")
		writeFile(t, path, "data_dir = \""+dir+"\"\n"+c.toml)
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		log := &testlog.Buffer{}
		m, err := withHostUnits(machine.NewHost(), cfg, slog.New(slog.NewTextHandler(log, nil)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		system, ok := m.(hostconfig.System)
		if c.socket == "" {
			if ok {
				t.Fatalf("%s: a host machine without a helper reconciles host units", c.name)
			}
			continue
		}
		if !ok || system.(hostMachine).HostUnits.Socket != c.socket {
			t.Fatalf("%s: %T %+v, want the helper at %s", c.name, m, m, c.socket)
		}
		// The host's own methods stay, the optional ones included.
		if _, ok := m.(interface{ CDIDir() string }); !ok || m.BootID() != machine.NewHost().BootID() {
			t.Fatalf("%s: the host's methods are lost", c.name)
		}
	}
}
