// A guest's network policy on the instance network (InstanceSpec's
// network_policy): the flows its NICs may carry besides ARP and its
// metadata requests. NetworkPolicy is what the spec says, as bcd and bcd
// helper pass it on; Parse is the one check of it, and its result, Policy,
// holds only parsed values (a protocol of three, IPv4 networks, ports as
// numbers), which is all the helper renders its nftables rules from.

package runtime

import (
	"fmt"
	"net/netip"
	"strconv"
)

// MaxNetworkRules is how many rules a policy may have in each direction.
const MaxNetworkRules = 64

// NetworkPolicy is a guest's network policy as the spec says it: its NICs
// pass ARP, its metadata requests and their answers, the flows the rules
// allow and those flows' replies, and nothing else. An empty policy allows
// no flow at all.
type NetworkPolicy struct {
	// Ingress are the flows a peer may open to the guest.
	Ingress []NetworkRule `json:"ingress,omitempty"`
	// Egress are the flows the guest may open to a peer.
	Egress []NetworkRule `json:"egress,omitempty"`
}

// NetworkRule is one allowed flow as the spec says it.
type NetworkRule struct {
	// Protocol is "tcp", "udp" or "icmp" (echo, and its replies).
	Protocol string `json:"protocol"`
	// CIDR is the peer's IPv4 network ("10.0.0.0/8"), no address bits
	// beyond its prefix.
	CIDR string `json:"cidr"`
	// PortMin and PortMax are the guest's ports of an ingress rule, the
	// peer's of an egress rule (1 to 65535, PortMin <= PortMax; both 0 for
	// icmp).
	PortMin uint32 `json:"port_min,omitempty"`
	PortMax uint32 `json:"port_max,omitempty"`
}

// Protocol is a rule's protocol, parsed.
type Protocol uint8

// The protocols a rule may name.
const (
	ProtocolTCP Protocol = iota + 1
	ProtocolUDP
	ProtocolICMP
)

// String is the protocol's name ("tcp", "udp", "icmp").
func (p Protocol) String() string {
	switch p {
	case ProtocolTCP:
		return "tcp"
	case ProtocolUDP:
		return "udp"
	case ProtocolICMP:
		return "icmp"
	}
	return "protocol(" + strconv.Itoa(int(p)) + ")"
}

// Policy is a NetworkPolicy checked and parsed.
type Policy struct {
	Ingress, Egress []Rule
}

// Rule is a NetworkRule checked and parsed: Peer is an IPv4 network
// (Peer == Peer.Masked()), the ports 1 to 65535 with PortMin <= PortMax
// for tcp and udp, both 0 for icmp.
type Rule struct {
	Protocol         Protocol
	Peer             netip.Prefix
	PortMin, PortMax uint16
}

// Parse checks the policy and returns its parsed values (nil for no
// policy). An error wraps ErrInvalid and names the rule by its direction
// and index from 0: "network_policy: egress rule 3: …".
func (p *NetworkPolicy) Parse() (*Policy, error) {
	if p == nil {
		return nil, nil
	}
	ingress, err := parseRules("ingress", p.Ingress)
	if err != nil {
		return nil, err
	}
	egress, err := parseRules("egress", p.Egress)
	if err != nil {
		return nil, err
	}
	return &Policy{Ingress: ingress, Egress: egress}, nil
}

// Validate says why the policy is refused (wrapping ErrInvalid), or nil.
func (p *NetworkPolicy) Validate() error {
	_, err := p.Parse()
	return err
}

func parseRules(direction string, rules []NetworkRule) ([]Rule, error) {
	if len(rules) > MaxNetworkRules {
		return nil, fmt.Errorf("%w: network_policy: %d %s rules, at most %d", ErrInvalid, len(rules), direction, MaxNetworkRules)
	}
	out := make([]Rule, 0, len(rules))
	for i, r := range rules {
		parsed, why := parseRule(r)
		if why != "" {
			return nil, fmt.Errorf("%w: network_policy: %s rule %d: %s", ErrInvalid, direction, i, why)
		}
		out = append(out, parsed)
	}
	return out, nil
}

// parseRule parses one rule, or says why it is refused.
func parseRule(r NetworkRule) (Rule, string) {
	var out Rule
	switch r.Protocol {
	case "tcp":
		out.Protocol = ProtocolTCP
	case "udp":
		out.Protocol = ProtocolUDP
	case "icmp":
		out.Protocol = ProtocolICMP
	default:
		return Rule{}, fmt.Sprintf("protocol %s (tcp, udp or icmp)", quote(r.Protocol))
	}
	peer, err := netip.ParsePrefix(r.CIDR)
	switch {
	case err != nil:
		return Rule{}, fmt.Sprintf("cidr %s is not an IPv4 network (\"10.0.0.0/8\")", quote(r.CIDR))
	case !peer.Addr().Is4():
		return Rule{}, fmt.Sprintf("cidr %s is not IPv4", quote(r.CIDR))
	case peer != peer.Masked():
		return Rule{}, fmt.Sprintf("cidr %s has address bits beyond its prefix (%s)", quote(r.CIDR), peer.Masked())
	}
	out.Peer = peer
	if out.Protocol == ProtocolICMP {
		if r.PortMin != 0 || r.PortMax != 0 {
			return Rule{}, fmt.Sprintf("icmp with ports %d-%d (both 0)", r.PortMin, r.PortMax)
		}
		return out, ""
	}
	if r.PortMin < 1 || r.PortMax > 65535 || r.PortMin > r.PortMax {
		return Rule{}, fmt.Sprintf("ports %d-%d (1 to 65535, port_min <= port_max)", r.PortMin, r.PortMax)
	}
	out.PortMin, out.PortMax = uint16(r.PortMin), uint16(r.PortMax)
	return out, ""
}

// quote quotes a string of the spec for a message, at most 64 bytes of it.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}

// PolicyEnforcer is a runtime that enforces a domain's NetworkPolicy on
// each of its NICs (through bcd helper's guard of its taps). A runtime
// that is not one refuses a domain with a policy (CheckPolicy), and bcd
// advertises instance.network-policy only with a runtime that is.
type PolicyEnforcer interface {
	// EnforcesNetworkPolicy says whether it does.
	EnforcesNetworkPolicy() bool
}

// EnforcesPolicy says whether rt enforces network policies.
func EnforcesPolicy(rt Runtime) bool {
	e, ok := rt.(PolicyEnforcer)
	return ok && e.EnforcesNetworkPolicy()
}

// CheckPolicy refuses (ErrUnsupported) a domain with a network policy on
// a runtime that does not enforce one: the domain is not run without it.
func CheckPolicy(rt Runtime, d *Domain) error {
	if d.NetworkPolicy == nil || EnforcesPolicy(rt) {
		return nil
	}
	return fmt.Errorf("%w: network_policy: runtime %s does not enforce a network policy on this host", ErrUnsupported, rt.Name())
}

// CheckPolicyGuarded refuses (ErrUnsupported) a domain with a network
// policy one of whose NICs has no address on the instance network (no
// guard would hold it to the policy) or, when taps is set, no tap of the
// instance's: a policy holds on every NIC or the domain is not run.
func CheckPolicyGuarded(d *Domain, taps bool) error {
	if d.NetworkPolicy == nil {
		return nil
	}
	for i, n := range d.NICs {
		if n.Address == "" || (taps && n.Tap != TapName(d.ID, i)) {
			return fmt.Errorf("%w: network_policy: NIC %d has no guarded tap on the instance network to enforce it on", ErrUnsupported, i)
		}
	}
	return nil
}
