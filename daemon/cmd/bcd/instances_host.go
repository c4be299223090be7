// The VPS runtimes of config.toml's [instances] (host builds).

package main

import (
	"log/slog"

	"bcd/internal/agent"
	"bcd/internal/config"
)

// hostVPS builds the runtimes [instances] names; nil without the table.
func hostVPS(c *config.Config, dataDir string, log *slog.Logger) (*agent.VPS, error) {
	return nil, nil
}
