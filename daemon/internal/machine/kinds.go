// The command kinds about the machine (docs/protocol.md, "Commands"):
// diag.nvml, logs.collect and node.reboot, which a machine lists in Kinds
// when it can run them, and inventory.refresh, which every machine has and
// the agent registers with its status report. Registering a kind with the
// dispatcher is what allows it.

package machine

import (
	"context"
	"encoding/json"

	"bcd/internal/dispatch"
	"bcd/internal/proto/agentv1"
)

// The kinds' names (KindDiag, KindLogs, KindReboot, KindInventoryRefresh)
// are generated from proto/kinds.toml into kinds_gen.go.

// KindEnv is what a machine's kinds need from the agent that runs them.
type KindEnv struct {
	// Reboot asks the agent to reboot the machine (Machine.Reboot) and end
	// the process, once commandID is journaled running. It returns at once.
	Reboot func(commandID string)
}

// DiagKind is diag.nvml on m.
func DiagKind(m Machine) dispatch.Kind {
	return dispatch.Kind{Name: KindDiag, RetrySafe: true, Run: func(ctx context.Context, _ dispatch.Call) ([]byte, error) {
		diag, err := m.Diag(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(diag)
	}}
}

// LogsKind is logs.collect on m.
func LogsKind(m Machine) dispatch.Kind {
	return dispatch.Kind{Name: KindLogs, RetrySafe: true, Run: func(ctx context.Context, _ dispatch.Call) ([]byte, error) {
		return m.CollectLogs(ctx)
	}}
}

// RebootKind is node.reboot: it hands the reboot to the agent (env.Reboot)
// and leaves the command running; the next boot settles it SUCCEEDED
// "rebooted" on its redelivery.
func RebootKind(env KindEnv) dispatch.Kind {
	return dispatch.Kind{Name: KindReboot, RetrySafe: true, SelfTerminating: true, Destructive: true,
		Run: func(_ context.Context, call dispatch.Call) ([]byte, error) {
			if env.Reboot != nil {
				env.Reboot(call.ID)
			}
			return nil, dispatch.ErrProcessEnding
		}}
}

// InventoryRefreshKind is inventory.refresh over report, which sends a
// StatusReport and returns its inventory sections.
func InventoryRefreshKind(report func() ([]*agentv1.InventorySection, error)) dispatch.Kind {
	return dispatch.Kind{Name: KindInventoryRefresh, RetrySafe: true, Run: func(context.Context, dispatch.Call) ([]byte, error) {
		sections, err := report()
		if err != nil {
			return nil, err
		}
		type hash struct {
			Name   string `json:"name"`
			SHA256 string `json:"sha256"`
		}
		out := struct {
			Sections []hash `json:"sections"`
		}{Sections: []hash{}}
		for _, s := range sections {
			out.Sections = append(out.Sections, hash{s.GetName(), s.GetSha256()})
		}
		return json.Marshal(out)
	}}
}
