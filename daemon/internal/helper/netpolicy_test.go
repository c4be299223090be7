// Tests of a tap's guard with a network policy: the script without one is
// the one of before, byte for byte; with one, its egress and ingress
// chains as rendered from the parsed policy, accepted by the real nft
// (nft -c, as root); ch.taps and domain.define refuse a policy that does
// not parse (an injection string, IPv6, …) before nft runs, and one on a
// NIC no guard would hold to it; the tap record keeps the policy.

package helper

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/runtime"
)

// everyProtocol is a policy with a rule of each protocol each way, a
// single port and a range, a host and the whole IPv4 space.
var everyProtocol = &runtime.NetworkPolicy{
	Ingress: []runtime.NetworkRule{
		{Protocol: "tcp", CIDR: "0.0.0.0/0", PortMin: 22, PortMax: 22},
		{Protocol: "udp", CIDR: "10.0.0.0/8", PortMin: 5000, PortMax: 5010},
		{Protocol: "icmp", CIDR: "192.168.1.0/24"},
	},
	Egress: []runtime.NetworkRule{
		{Protocol: "tcp", CIDR: "10.0.0.0/8", PortMin: 8000, PortMax: 8100},
		{Protocol: "udp", CIDR: "10.1.2.3/32", PortMin: 53, PortMax: 53},
		{Protocol: "icmp", CIDR: "0.0.0.0/0"},
	},
}

func TestWithoutAPolicyTheGuardIsTheOneOfBefore(t *testing.T) {
	want := "add table bridge bcd_bcdt0123abcdn0\n" +
		"delete table bridge bcd_bcdt0123abcdn0\n" +
		"table bridge bcd_bcdt0123abcdn0 {\n" +
		"\tchain guard {\n" +
		"\t\tether saddr != 52:54:00:00:00:01 drop\n" +
		"\t\tether type arp arp saddr ip != 169.254.10.2 arp saddr ip 169.254.0.0/16 drop\n" +
		"\t\tether type ip ip saddr != 169.254.10.2 ip saddr 169.254.0.0/16 drop\n" +
		"\t}\n" +
		"\tchain input { type filter hook input priority 0; policy accept; iifname \"bcdt0123abcdn0\" jump guard; }\n" +
		"\tchain forward { type filter hook forward priority 0; policy accept; iifname \"bcdt0123abcdn0\" jump guard; }\n" +
		"}\n"
	if got := guardScript("bcdt0123abcdn0", "52:54:00:00:00:01", "169.254.10.2", nil); got != want {
		t.Fatalf("the guard changed without a policy:\n%s\nwant:\n%s", got, want)
	}
}

func TestAPolicyIsRenderedIntoEgressAndIngressChains(t *testing.T) {
	pol, err := everyProtocol.Parse()
	if err != nil {
		t.Fatal(err)
	}
	tap := TapName("vm1", 0)
	want := `	chain egress {
		ether type arp accept
		ip daddr 169.254.169.254 tcp dport 80 accept
		ip daddr 10.0.0.0/8 tcp dport 8000-8100 accept
		ip daddr 10.1.2.3/32 udp dport 53 accept
		ip daddr 0.0.0.0/0 icmp type echo-request accept
		ip daddr 0.0.0.0/0 tcp sport 22 tcp flags & (syn | ack) != syn accept
		ip daddr 10.0.0.0/8 udp sport 5000-5010 accept
		ip daddr 192.168.1.0/24 icmp type echo-reply accept
		drop
	}
	chain ingress {
		ether type arp accept
		ip saddr 169.254.169.254 tcp sport 80 tcp flags & (syn | ack) != syn accept
		ip saddr 0.0.0.0/0 tcp dport 22 accept
		ip saddr 10.0.0.0/8 udp dport 5000-5010 accept
		ip saddr 192.168.1.0/24 icmp type echo-request accept
		ip saddr 10.0.0.0/8 tcp sport 8000-8100 tcp flags & (syn | ack) != syn accept
		ip saddr 10.1.2.3/32 udp sport 53 accept
		ip saddr 0.0.0.0/0 icmp type { echo-reply, destination-unreachable, time-exceeded } accept
		drop
	}
	chain input { type filter hook input priority 0; policy accept; iifname "` + tap + `" jump guard; iifname "` + tap + `" jump egress; }
	chain forward { type filter hook forward priority 0; policy accept; iifname "` + tap + `" jump guard; iifname "` + tap + `" jump egress; oifname "` + tap + `" jump ingress; }
	chain output { type filter hook output priority 0; policy accept; oifname "` + tap + `" jump ingress; }
}
`
	script := guardScript(tap, "52:54:00:00:00:01", "169.254.10.2", pol)
	guard := guardScript(tap, "52:54:00:00:00:01", "169.254.10.2", nil)
	head := guard[:strings.Index(guard, "\tchain input")]
	if script != head+want {
		t.Fatalf("the policy's guard:\n%s\nwant:\n%s", script, head+want)
	}
	// An empty policy: ARP and the metadata endpoint only.
	empty, _ := (&runtime.NetworkPolicy{}).Parse()
	if s := guardScript(tap, "52:54:00:00:00:01", "169.254.10.2", empty); !strings.Contains(s, "tcp dport 80 accept\n\t\tdrop\n") ||
		!strings.Contains(s, "!= syn accept\n\t\tdrop\n") {
		t.Fatalf("an empty policy:\n%s", s)
	}
}

func TestTheRealNftAcceptsAPolicysGuard(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("nft -c needs root (CAP_NET_ADMIN) to check a script")
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skip("no nft on this host")
	}
	pol, err := everyProtocol.Parse()
	if err != nil {
		t.Fatal(err)
	}
	empty, _ := (&runtime.NetworkPolicy{}).Parse()
	many := &runtime.NetworkPolicy{}
	for i := range runtime.MaxNetworkRules {
		r := runtime.NetworkRule{Protocol: "tcp", CIDR: "10.0.0.0/8", PortMin: uint32(i + 1), PortMax: uint32(i + 1)}
		many.Ingress, many.Egress = append(many.Ingress, r), append(many.Egress, r)
	}
	full, err := many.Parse()
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*runtime.Policy{"none": nil, "every protocol": pol, "empty": empty, "64 rules each way": full} {
		path := filepath.Join(t.TempDir(), "guard.nft")
		if err := os.WriteFile(path, []byte(guardScript(TapName("vm1", 0), "52:54:00:00:00:01", "169.254.10.2", p)), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(nft, "-c", "-f", path).CombinedOutput(); err != nil {
			t.Errorf("%s: nft -c refuses the guard: %v\n%s", name, err, out)
		}
	}
}

func TestATapIsGuardedByItsPolicyAndABadOneNeverReachesNft(t *testing.T) {
	r := newRig(t, nil)
	seen := filepath.Join(r.dir, "seen.nft")
	fakeProgram(t, filepath.Join(r.dir, "nft"), r.calls, `if [ "$1" = -f ]; then cp "$2" `+seen+`; fi
`)
	nic := NIC{Bridge: "bcbr0", MAC: "52:54:00:00:00:01", Address: "169.254.10.2"}
	ctx := context.Background()
	if err := Call(ctx, r.socket, OpChTaps, DomainArgs{ID: "vm1", NICs: []NIC{nic}, NetworkPolicy: everyProtocol}, nil); err != nil {
		t.Fatal(err)
	}
	tap := TapName("vm1", 0)
	pol, _ := everyProtocol.Parse()
	if data, _ := os.ReadFile(seen); string(data) != guardScript(tap, nic.MAC, nic.Address, pol) {
		t.Fatalf("nft got:\n%s", data)
	}
	rec, err := r.readTapRecordFile(t, tap)
	if err != nil || rec.NetworkPolicy == nil || len(rec.NetworkPolicy.Egress) != 3 || rec.NetworkPolicy.Ingress[0].CIDR != "0.0.0.0/0" {
		t.Fatalf("the tap record: %+v %v", rec, err)
	}
	// What does not parse is refused before any program runs.
	os.Remove(r.calls)
	for name, bad := range map[string]*runtime.NetworkPolicy{
		"protocol":     {Egress: []runtime.NetworkRule{{Protocol: "tcp; flush ruleset", CIDR: "10.0.0.0/8", PortMin: 1, PortMax: 1}}},
		"cidr":         {Ingress: []runtime.NetworkRule{{Protocol: "tcp", CIDR: "0.0.0.0/0 accept\nflush ruleset", PortMin: 1, PortMax: 1}}},
		"IPv6":         {Egress: []runtime.NetworkRule{{Protocol: "udp", CIDR: "::/0", PortMin: 53, PortMax: 53}}},
		"host bits":    {Egress: []runtime.NetworkRule{{Protocol: "udp", CIDR: "10.0.0.1/8", PortMin: 53, PortMax: 53}}},
		"port 0":       {Egress: []runtime.NetworkRule{{Protocol: "tcp", CIDR: "10.0.0.0/8", PortMin: 0, PortMax: 1}}},
		"min over max": {Ingress: []runtime.NetworkRule{{Protocol: "tcp", CIDR: "10.0.0.0/8", PortMin: 2, PortMax: 1}}},
		"icmp ports":   {Ingress: []runtime.NetworkRule{{Protocol: "icmp", CIDR: "10.0.0.0/8", PortMin: 8, PortMax: 0}}},
		"65 rules":     {Egress: make([]runtime.NetworkRule, runtime.MaxNetworkRules+1)},
	} {
		for _, op := range []string{OpChTaps, OpDomainDefine} {
			err := Call(ctx, r.socket, op, DomainArgs{ID: "vm2", VCPUs: 1, MemoryBytes: 1 << 30,
				NICs: []NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:02", Tap: TapName("vm2", 0), Address: "169.254.10.3"}}, NetworkPolicy: bad}, nil)
			wantRefused(t, err, string(CodeArgs))
			if !strings.Contains(err.Error(), "network_policy: ") {
				t.Errorf("%s, %s: %v", name, op, err)
			}
		}
	}
	// The raw JSON of an injection, as a peer might send it.
	raw := json.RawMessage(`{"id":"vm2","nics":[{"bridge":"bcbr0","mac":"52:54:00:00:00:02","address":"169.254.10.3"}],` +
		`"network_policy":{"egress":[{"protocol":"tcp","cidr":"10.0.0.0/8 } } flush ruleset; table bridge x {","port_min":1,"port_max":1}]}}`)
	wantRefused(t, Call(ctx, r.socket, OpChTaps, raw, nil), string(CodeArgs))
	if data, _ := os.ReadFile(r.calls); len(data) != 0 {
		t.Fatalf("a refused policy ran programs:\n%s", data)
	}
	// A NIC no guard would hold: refused as a plan this host cannot apply.
	unguarded := DomainArgs{ID: "vm3", VCPUs: 1, MemoryBytes: 1 << 30, NICs: []NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:03"}}, NetworkPolicy: &runtime.NetworkPolicy{}}
	wantRefused(t, Call(ctx, r.socket, OpChTaps, unguarded, nil), string(CodePlan))
	wantRefused(t, Call(ctx, r.socket, OpDomainDefine, unguarded, nil), string(CodePlan))
	unguarded.NICs[0].Address = "169.254.10.4"
	wantRefused(t, Call(ctx, r.socket, OpDomainDefine, unguarded, nil), string(CodePlan)) // no tap of its own: libvirt's, unguarded
	if data, _ := os.ReadFile(r.calls); len(data) != 0 {
		t.Fatalf("a refused policy ran programs:\n%s", data)
	}
}

// readTapRecordFile reads a tap's record.
func (r *rig) readTapRecordFile(t *testing.T, tap string) (*tapRecord, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(r.dir, "state", "taps", tap+".json"))
	if err != nil {
		return nil, err
	}
	rec := &tapRecord{}
	return rec, json.Unmarshal(data, rec)
}
