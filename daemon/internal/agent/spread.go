// The order an agent tries its gateways in (docs/protocol.md, "Several
// gateways"): its home first, as configured (the gateway it joined
// through), then the others in an order the agent draws when it starts.
// Every node's list names the gateways in the control plane's one order,
// so when a gateway died its nodes all moved to the gateway after it in
// that order: a third of a 10,000-node fleet on one survivor while the
// other idled. Drawn per agent (as gRPC's pick_first shuffles its address
// list), they spread over every survivor.

package agent

import "slices"

// failoverOrder is urls with its first kept first and the others in the
// order shuffle draws (rand.Shuffle's signature).
func failoverOrder(urls []string, shuffle func(n int, swap func(i, j int))) []string {
	out := slices.Clone(urls)
	if len(out) > 2 {
		others := out[1:]
		shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	}
	return out
}
