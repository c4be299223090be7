// Tests of a network policy's one check (every kind of refusal, the
// injection strings among them, each naming its rule) and of its place in
// a domain's fingerprint (none: the fingerprint of before; a change: a
// new one).

package runtime

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestAPolicyIsParsedIntoItsValues(t *testing.T) {
	p := &NetworkPolicy{
		Ingress: []NetworkRule{{Protocol: "tcp", CIDR: "0.0.0.0/0", PortMin: 22, PortMax: 22}, {Protocol: "icmp", CIDR: "10.0.0.0/8"}},
		Egress:  []NetworkRule{{Protocol: "udp", CIDR: "10.1.2.3/32", PortMin: 53, PortMax: 53}, {Protocol: "tcp", CIDR: "192.168.0.0/16", PortMin: 1, PortMax: 65535}},
	}
	got, err := p.Parse()
	if err != nil {
		t.Fatal(err)
	}
	want := &Policy{
		Ingress: []Rule{{ProtocolTCP, netip.MustParsePrefix("0.0.0.0/0"), 22, 22}, {ProtocolICMP, netip.MustParsePrefix("10.0.0.0/8"), 0, 0}},
		Egress:  []Rule{{ProtocolUDP, netip.MustParsePrefix("10.1.2.3/32"), 53, 53}, {ProtocolTCP, netip.MustParsePrefix("192.168.0.0/16"), 1, 65535}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%v\nwant %v", got, want)
	}
	if pol, err := (*NetworkPolicy)(nil).Parse(); pol != nil || err != nil {
		t.Fatalf("no policy: %v %v", pol, err)
	}
	if pol, err := (&NetworkPolicy{}).Parse(); pol == nil || err != nil || len(pol.Ingress)+len(pol.Egress) != 0 {
		t.Fatalf("an empty policy (no flow): %v %v", pol, err)
	}
	if err := (&NetworkPolicy{Egress: make([]NetworkRule, MaxNetworkRules)}).Validate(); err == nil || !strings.Contains(err.Error(), "egress rule 0") {
		t.Fatalf("64 empty rules are refused by their first: %v", err)
	}
}

func TestAPolicyThatIsNotSoundIsRefusedNamingItsRule(t *testing.T) {
	tcp := func(cidr string, lo, hi uint32) NetworkRule {
		return NetworkRule{Protocol: "tcp", CIDR: cidr, PortMin: lo, PortMax: hi}
	}
	many := make([]NetworkRule, MaxNetworkRules+1)
	for i := range many {
		many[i] = tcp("10.0.0.0/8", 443, 443)
	}
	for _, c := range []struct {
		name   string
		rule   NetworkRule
		egress bool
		want   string
	}{
		{"injected protocol", NetworkRule{Protocol: "tcp; flush ruleset", CIDR: "10.0.0.0/8", PortMin: 1, PortMax: 1}, true, `egress rule 1: protocol "tcp; flush ruleset"`},
		{"injected protocol, newline", NetworkRule{Protocol: "tcp\nflush ruleset", CIDR: "10.0.0.0/8", PortMin: 1, PortMax: 1}, false, `ingress rule 1: protocol "tcp\nflush ruleset"`},
		{"injected cidr", tcp("10.0.0.0/8 accept; flush ruleset", 1, 1), true, `egress rule 1: cidr "10.0.0.0/8 accept; flush ruleset" is not an IPv4 network`},
		{"injected cidr, brace", tcp("10.0.0.0/8 }", 1, 1), false, "ingress rule 1: cidr"},
		{"a set for a cidr", tcp("{ 10.0.0.0/8, 0.0.0.0/0 }", 1, 1), true, "egress rule 1: cidr"},
		{"an address, not a network", tcp("10.0.0.1", 1, 1), true, "egress rule 1: cidr"},
		{"upper case protocol", NetworkRule{Protocol: "TCP", CIDR: "10.0.0.0/8", PortMin: 1, PortMax: 1}, true, `protocol "TCP" (tcp, udp or icmp)`},
		{"unknown protocol", NetworkRule{Protocol: "sctp", CIDR: "10.0.0.0/8", PortMin: 1, PortMax: 1}, true, `egress rule 1: protocol "sctp"`},
		{"no protocol", NetworkRule{CIDR: "10.0.0.0/8", PortMin: 1, PortMax: 1}, true, `protocol ""`},
		{"IPv6", tcp("2001:db8::/32", 1, 1), true, `egress rule 1: cidr "2001:db8::/32" is not IPv4`},
		{"IPv4-mapped IPv6", tcp("::ffff:10.0.0.0/104", 1, 1), false, "is not IPv4"},
		{"host bits set", tcp("10.0.0.1/8", 1, 1), true, `egress rule 1: cidr "10.0.0.1/8" has address bits beyond its prefix (10.0.0.0/8)`},
		{"a prefix too long", tcp("10.0.0.0/33", 1, 1), true, "is not an IPv4 network"},
		{"port 0", tcp("10.0.0.0/8", 0, 80), true, "egress rule 1: ports 0-80 (1 to 65535, port_min <= port_max)"},
		{"no ports", tcp("10.0.0.0/8", 0, 0), false, "ingress rule 1: ports 0-0"},
		{"min above max", tcp("10.0.0.0/8", 8100, 8000), true, "ports 8100-8000"},
		{"above 65535", tcp("10.0.0.0/8", 1, 65536), true, "ports 1-65536"},
		{"udp min above max", NetworkRule{Protocol: "udp", CIDR: "10.0.0.0/8", PortMin: 54, PortMax: 53}, false, "ingress rule 1: ports 54-53"},
		{"icmp with ports", NetworkRule{Protocol: "icmp", CIDR: "10.0.0.0/8", PortMin: 8, PortMax: 8}, true, "egress rule 1: icmp with ports 8-8 (both 0)"},
		{"icmp with a port max", NetworkRule{Protocol: "icmp", CIDR: "10.0.0.0/8", PortMax: 1}, false, "icmp with ports 0-1"},
	} {
		p := &NetworkPolicy{Ingress: []NetworkRule{tcp("10.0.0.0/8", 22, 22)}, Egress: []NetworkRule{tcp("10.0.0.0/8", 443, 443)}}
		if c.egress {
			p.Egress = append(p.Egress, c.rule)
		} else {
			p.Ingress = append(p.Ingress, c.rule)
		}
		pol, err := p.Parse()
		if pol != nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "network_policy: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", c.name, err, c.want)
		}
	}
	for _, p := range []*NetworkPolicy{{Ingress: many}, {Egress: many}} {
		if err := p.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "65 ") || !strings.Contains(err.Error(), "rules, at most 64") {
			t.Errorf("65 rules: %v", err)
		}
	}
	if err := (&NetworkPolicy{Ingress: many[:MaxNetworkRules], Egress: many[:MaxNetworkRules]}).Validate(); err != nil {
		t.Errorf("64 rules each way: %v", err)
	}
	long := strings.Repeat("x", 1000)
	if err := (&NetworkPolicy{Egress: []NetworkRule{{Protocol: long}}}).Validate(); err == nil || len(err.Error()) > 200 {
		t.Errorf("a long protocol is quoted in part: %v", err)
	}
}

func TestAPolicyIsPartOfTheFingerprintAndNoneLeavesItAsItWas(t *testing.T) {
	d := &Domain{ID: "vm1", VCPUs: 2, MemoryBytes: 4 << 30, NICs: []NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:01", Tap: TapName("vm1", 0), Address: "169.254.10.2"}},
		SeedID: "sha256:ab", Seed: Seed{MetaData: []byte("instance-id: vm1\n")}}
	// The fingerprint a bcd without network policies computed for it.
	const before = "f12629ef4132a437b3ad0f98dac12c0adc1068c92d7232d040cc83839dced22b"
	if fp := d.Fingerprint(); fp != before {
		t.Fatalf("no policy: %s, want the fingerprint of before %s", fp, before)
	}
	seen := map[string]bool{before: true}
	for _, p := range []*NetworkPolicy{
		{},
		{Egress: []NetworkRule{{Protocol: "tcp", CIDR: "0.0.0.0/0", PortMin: 443, PortMax: 443}}},
		{Egress: []NetworkRule{{Protocol: "tcp", CIDR: "0.0.0.0/0", PortMin: 443, PortMax: 444}}},
		{Ingress: []NetworkRule{{Protocol: "tcp", CIDR: "0.0.0.0/0", PortMin: 443, PortMax: 443}}},
	} {
		d.NetworkPolicy = p
		fp := d.Fingerprint()
		if seen[fp] {
			t.Fatalf("policy %+v: fingerprint %s seen before", p, fp)
		}
		seen[fp] = true
	}
}

func TestOnlyAnEnforcingRuntimeTakesAPolicyOnEveryNIC(t *testing.T) {
	d := &Domain{ID: "vm1", NICs: []NIC{{Bridge: "bcbr0", Tap: TapName("vm1", 0), Address: "169.254.10.2"}}}
	if CheckPolicy(plain{}, d) != nil || CheckPolicyGuarded(d, true) != nil {
		t.Fatal("a domain without a policy is refused")
	}
	d.NetworkPolicy = &NetworkPolicy{}
	err := CheckPolicy(plain{}, d)
	if !errors.Is(err, ErrUnsupported) || err.Error() != "unsupported by this runtime: network_policy: runtime plain does not enforce a network policy on this host" {
		t.Fatalf("%v", err)
	}
	if err := CheckPolicy(enforcing{}, d); err != nil || !EnforcesPolicy(enforcing{}) || EnforcesPolicy(plain{}) {
		t.Fatalf("an enforcing runtime: %v", err)
	}
	if err := CheckPolicyGuarded(d, true); err != nil {
		t.Fatal(err)
	}
	d.NICs = append(d.NICs, NIC{Bridge: "bcbr0", Tap: TapName("vm1", 1)})
	if err := CheckPolicyGuarded(d, false); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "network_policy: NIC 1 ") {
		t.Fatalf("a NIC without an address: %v", err)
	}
	d.NICs[1] = NIC{Bridge: "bcbr0", Address: "169.254.10.3"}
	if CheckPolicyGuarded(d, false) != nil || !errors.Is(CheckPolicyGuarded(d, true), ErrUnsupported) {
		t.Fatal("a NIC without its tap")
	}
}

type plain struct{ Runtime }

func (plain) Name() string { return "plain" }

type enforcing struct{ plain }

func (enforcing) EnforcesNetworkPolicy() bool { return true }
