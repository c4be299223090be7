//go:build !fakehw

// The host build's VPS runtimes come from config.toml's [instances]
// (instances_host.go); without the table the node is no VPS host.

package main

import (
	"log/slog"

	"bcd/internal/agent"
	"bcd/internal/config"
	"bcd/internal/machine"
)

func newVPS(c *config.Config, dataDir string, _ machine.Machine, _ func(string) string, log *slog.Logger) (*agent.VPS, error) {
	return hostVPS(c, dataDir, log)
}
