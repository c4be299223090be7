// bcd status: the running node's status over the unix socket in the data dir.

package main

import (
	"encoding/json"
	"flag"
	"fmt"

	"bcd/internal/config"
	"bcd/internal/status"
)

const statusUsage = `usage: bcd status [--json] [--config PATH]

Prints the running node's status, read from bcd.sock in the data dir.
With --json: one JSON object {"nodeId", "daemonVersion", "bootId",
"journalId", "session": {"state", "epoch", "gateway", "connectedAtMs"},
"appliedGeneration", "commands": {"running", "done"}}.
Exits 1 when bcd is not running.

Flags:
  --json          print JSON
  --config PATH   config.toml (default /etc/bcd/config.toml)
`

func runStatus(args []string, e env) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	configPath := fs.String("config", config.DefaultPath, "")
	if code, ok := parse(fs, args, statusUsage, e); !ok {
		return code
	}
	c, err := config.Load(*configPath)
	if err != nil {
		return fail(e, "status", err)
	}
	data, err := status.Query(status.Path(c.DataDir))
	if err != nil {
		return fail(e, "status", err)
	}
	if *asJSON {
		fmt.Fprint(e.stdout, string(data))
		return 0
	}
	var s status.Status
	if err := json.Unmarshal(data, &s); err != nil {
		return fail(e, "status", err)
	}
	refused := ""
	if s.Session.Refused != "" {
		refused = ", refused " + s.Session.Refused
	}
	fmt.Fprintf(e.stdout, "node %s (bcd %s)\nsession %s%s, epoch %d, gateway %s\nboot %s, journal %s\napplied generation %d\ncommands: %d running, %d done\n",
		s.NodeID, s.DaemonVersion, s.Session.State, refused, s.Session.Epoch, s.Session.Gateway, s.BootID, s.JournalID,
		s.AppliedGeneration, s.Commands.Running, s.Commands.Done)
	return 0
}
