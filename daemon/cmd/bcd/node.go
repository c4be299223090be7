// bcd node: one node agent until SIGTERM/SIGINT (exit 0), a reboot (exit
// 0), or revocation (exit 3).

package main

import (
	"flag"
	"path/filepath"

	"bcd/internal/agent"
	"bcd/internal/config"
)

const nodeUsage = `usage: bcd node [--config PATH]

Runs the node: the session with the gateway over mTLS (Hello, Welcome,
heartbeats, liveness, reconnects), commands, desired state, and the status
socket bcd.sock in the data dir. SIGTERM or SIGINT closes the stream and
exits 0; a node.reboot exits 0 for the supervisor to start bcd again; a
revoked node exits 3.

Flags:
  --config PATH   config.toml (default /etc/bcd/config.toml)
`

func runNode(args []string, e env) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	configPath := fs.String("config", config.DefaultPath, "")
	if code, ok := parse(fs, args, nodeUsage, e); !ok {
		return code
	}
	c, err := config.Load(*configPath)
	if err != nil {
		return fail(e, "node", err)
	}
	log := logger(e)
	m, err := newMachine(c.DataDir, e.getenv, "")
	if err != nil {
		return fail(e, "node", err)
	}
	if m, err = withHostUnits(m, c, log); err != nil {
		return fail(e, "node", err)
	}
	k := readKnobs(e.getenv, log)
	updater, err := newUpdater(c, e.getenv, log)
	if err != nil {
		return fail(e, "node", err)
	}
	device := newTPMDevice(c.DataDir, e.getenv, log)
	defer device.Close()
	vps, err := newVPS(c, c.DataDir, m, e.getenv, log)
	if err != nil {
		return fail(e, "node", err)
	}
	a, err := agent.New(withUpdate(agent.Options{Config: c, Machine: m, Version: version, AllowH2C: fakehwBuild, BackoffCap: k.backoffCap, Log: log,
		TPM: device.Open, RenewAfter: k.renewAfter, VPS: vps}, updater, log))
	if err != nil {
		return fail(e, "node", err)
	}
	ctx := e.ctx
	code, err := a.Run(ctx)
	if err != nil {
		return fail(e, "node", err)
	}
	return code
}

// machineDir is the data dir for the machine: the configured one, or data/
// next to config.toml before a configuration exists.
func machineDir(dataDir, configPath string) string {
	if dataDir != "" {
		return dataDir
	}
	return filepath.Join(filepath.Dir(configPath), "data")
}
