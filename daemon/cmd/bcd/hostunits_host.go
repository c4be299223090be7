//go:build !fakehw

// Host units on a host build (docs/daemon.md, "Host units"): the machine
// is also a hostconfig.System through bcd helper (host.apply of the signed
// NodeSpec envelope, host.start of each unit) when config.toml names the
// helper's socket: [update] helper_socket, else [instances] helper_socket.
// Without one the host section is not reconciled (bcd cannot write units
// itself as the bcd user).

package main

import (
	"log/slog"

	"bcd/internal/config"
	"bcd/internal/helper"
	"bcd/internal/hostconfig"
	"bcd/internal/machine"
	"bcd/internal/update"
)

// hostMachine is the host with its units applied by the helper.
type hostMachine struct {
	*machine.Host
	*helper.HostUnits
}

var _ hostconfig.System = hostMachine{}

// withHostUnits makes m a hostconfig.System when a helper socket is configured.
func withHostUnits(m machine.Machine, c *config.Config, log *slog.Logger) (machine.Machine, error) {
	host, ok := m.(*machine.Host)
	if !ok {
		return m, nil
	}
	socket, err := helperSocket(c)
	if err != nil || socket == "" {
		if err == nil {
			log.Info("host_units.off", "why", "no [update] or [instances] helper_socket")
		}
		return m, err
	}
	log.Info("host_units.helper", "helper_socket", socket)
	return hostMachine{Host: host, HostUnits: &helper.HostUnits{Socket: socket}}, nil
}

// helperSocket is bcd helper's socket as config.toml names it ("" for none).
func helperSocket(c *config.Config) (string, error) {
	uc, err := update.ParseConfig(c.Update)
	if err != nil {
		return "", err
	}
	if uc != nil && uc.HelperSocket != "" {
		return uc.HelperSocket, nil
	}
	in, err := c.InstancesOf()
	if err != nil || in == nil {
		return "", err
	}
	return in.HelperSocket, nil
}
