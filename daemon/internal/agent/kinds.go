// The agent's command kinds: the registry it hands the dispatcher, which
// is what this node runs — the machine's own kinds (machine.Machine.Kinds),
// inventory.refresh over the agent's status report, and daemon.upgrade
// when there is an Updater (upgrade.go).

package agent

import (
	"bcd/internal/dispatch"
	"bcd/internal/machine"
)

// kinds builds the registry of what this agent runs.
func (a *Agent) kinds() (*dispatch.Registry, error) {
	env := machine.KindEnv{Reboot: func(id string) {
		select {
		case a.reboot <- id:
		default:
		}
	}}
	reg, err := dispatch.NewRegistry(a.opts.Machine.Kinds(env)...)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(machine.InventoryRefreshKind(a.statusReport)); err != nil {
		return nil, err
	}
	if a.opts.Updater != nil {
		if err := reg.Register(a.upgradeKind()); err != nil {
			return nil, err
		}
	}
	return reg, nil
}
