// The instance network's guard and its metadata listener. A NIC with an
// address on the instance network (169.254.0.0/16) gets, when ch.taps
// makes its tap: its bridge up, an nftables table of its own in the bridge family
// (bcd_<tap>) that drops, on the bridge's input and forward hooks, every
// frame from the tap whose source MAC is not the NIC's, and every ARP or
// IPv4 packet from it that claims another address of 169.254.0.0/16; a
// host route to the address on its bridge and a permanent neighbour
// entry with the NIC's MAC, so answers go to that tap only. So a guest
// speaks on the instance network as itself alone, and the metadata
// endpoint may know it by its source address. ch.taps.delete removes the
// table, the route and the neighbour entry with the tap (tap records,
// <state_dir>/taps/<tap>.json).
//
// A NIC of an instance with a network policy (DomainArgs.NetworkPolicy)
// gets two more chains in its table: egress, for the frames from the tap
// (on the input and forward hooks, after the guard), and ingress, for the
// frames to it (on the forward hook, and on an output hook for the host's
// own frames, the metadata endpoint's answers among them). Each passes
// ARP, the metadata requests (169.254.169.254:80) or their answers, the
// flows the rules allow and their replies, and drops the rest (IPv6 and
// other ethertypes too). The bridge family has no conntrack here, so the
// rules are stateless: a reply is known by its ports, and a TCP reply may
// not be a bare SYN (it may not open a connection). The rules are rendered
// from the parsed policy only (runtime.Policy: a protocol of three,
// netip.Prefix, numbers), never from the strings bcd sent.
//
// imds.listen hands bcd the metadata endpoint's listeners: for each
// instance bridge that exists, 169.254.169.254/32 on it and a TCP socket
// bound to 169.254.169.254:80 on that device (SO_BINDTODEVICE), passed
// over the helper's socket (SCM_RIGHTS): bcd, unprivileged, may not bind
// port 80 or add the address itself.

package helper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"bcd/internal/config"
	"bcd/internal/runtime"
	"bcd/internal/runtime/plan"
	"golang.org/x/sys/unix"
)

// tapRecord is what a guarded tap holds on the host.
type tapRecord struct {
	Instance string `json:"instance"`
	Bridge   string `json:"bridge"`
	Address  string `json:"address"`
	MAC      string `json:"mac"`
	// NetworkPolicy is the policy its guard holds it to (nil: none).
	NetworkPolicy *runtime.NetworkPolicy `json:"network_policy,omitempty"`
}

func (s *Server) tapRecordPath(tap string) string {
	return filepath.Join(s.cfg.Helper.StateDir, "taps", tap+".json")
}

// nftTable is a tap's guard table.
func nftTable(tap string) string { return "bcd_" + tap }

// guardScript is the nft script that (re)makes a tap's guard table in one
// transaction (the add makes the delete safe when there is none), with
// the chains of its network policy when it has one (pol; nil: none, and
// the script is what it was before policies were).
func guardScript(tap, mac, addr string, pol *runtime.Policy) string {
	var b strings.Builder
	fmt.Fprintf(&b, `add table bridge %[1]s
delete table bridge %[1]s
table bridge %[1]s {
	chain guard {
		ether saddr != %[2]s drop
		ether type arp arp saddr ip != %[3]s arp saddr ip 169.254.0.0/16 drop
		ether type ip ip saddr != %[3]s ip saddr 169.254.0.0/16 drop
	}
`, nftTable(tap), mac, addr)
	if pol == nil {
		fmt.Fprintf(&b, `	chain input { type filter hook input priority 0; policy accept; iifname "%[1]s" jump guard; }
	chain forward { type filter hook forward priority 0; policy accept; iifname "%[1]s" jump guard; }
}
`, tap)
		return b.String()
	}
	// egress: the frames from the guest (its peer is their daddr); ingress:
	// the frames to it (their saddr).
	policyChain(&b, "egress", "ip daddr "+plan.MetadataAddress+" tcp dport 80 accept", "daddr", pol.Egress, pol.Ingress, false)
	policyChain(&b, "ingress", "ip saddr "+plan.MetadataAddress+" tcp sport 80 tcp flags & (syn | ack) != syn accept",
		"saddr", pol.Ingress, pol.Egress, true)
	fmt.Fprintf(&b, `	chain input { type filter hook input priority 0; policy accept; iifname "%[1]s" jump guard; iifname "%[1]s" jump egress; }
	chain forward { type filter hook forward priority 0; policy accept; iifname "%[1]s" jump guard; iifname "%[1]s" jump egress; oifname "%[1]s" jump ingress; }
	chain output { type filter hook output priority 0; policy accept; oifname "%[1]s" jump ingress; }
}
`, tap)
	return b.String()
}

// policyChain writes one of a policy's chains: ARP, the metadata line,
// the flows its side opens (opens), the replies of those the other side
// opens (replies; toGuest: the chain of the frames to the guest), and a
// drop of the rest. peer is the peer's address field, "daddr" or "saddr".
func policyChain(b *strings.Builder, name, metadata, peer string, opens, replies []runtime.Rule, toGuest bool) {
	fmt.Fprintf(b, "\tchain %s {\n\t\tether type arp accept\n\t\t%s\n", name, metadata)
	for _, r := range opens {
		b.WriteString("\t\t" + openRule(peer, r) + "\n")
	}
	for _, r := range replies {
		b.WriteString("\t\t" + replyRule(peer, r, toGuest) + "\n")
	}
	b.WriteString("\t\tdrop\n\t}\n")
}

// openRule passes a flow the rule allows one side to open: peer (the
// peer's address field, "daddr" or "saddr") in the rule's network, to the
// rule's ports (an ICMP echo request).
func openRule(peer string, r runtime.Rule) string {
	net := "ip " + peer + " " + r.Peer.Masked().String() + " "
	switch r.Protocol {
	case runtime.ProtocolTCP:
		return net + "tcp dport " + ports(r) + " accept"
	case runtime.ProtocolUDP:
		return net + "udp dport " + ports(r) + " accept"
	}
	return net + "icmp type echo-request accept"
}

// replyRule passes the replies of a flow the rule allows the other side
// to open: from the rule's ports, a TCP segment that is not a bare SYN;
// an ICMP echo reply, and to the guest (toGuest) the errors its echo may
// meet on the way too.
func replyRule(peer string, r runtime.Rule, toGuest bool) string {
	net := "ip " + peer + " " + r.Peer.Masked().String() + " "
	switch r.Protocol {
	case runtime.ProtocolTCP:
		return net + "tcp sport " + ports(r) + " tcp flags & (syn | ack) != syn accept"
	case runtime.ProtocolUDP:
		return net + "udp sport " + ports(r) + " accept"
	}
	if toGuest {
		return net + "icmp type { echo-reply, destination-unreachable, time-exceeded } accept"
	}
	return net + "icmp type echo-reply accept"
}

// ports is a rule's ports: "443", or "8000-8100".
func ports(r runtime.Rule) string {
	if r.PortMin == r.PortMax {
		return strconv.FormatUint(uint64(r.PortMin), 10)
	}
	return strconv.FormatUint(uint64(r.PortMin), 10) + "-" + strconv.FormatUint(uint64(r.PortMax), 10)
}

// checkAddress refuses an address another instance's tap holds.
func (s *Server) checkAddress(id string, n NIC) error {
	entries, err := os.ReadDir(filepath.Join(s.cfg.Helper.StateDir, "taps"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		rec, err := s.readTapRecord(filepath.Join(s.cfg.Helper.StateDir, "taps", e.Name()))
		if err == nil && rec.Address == n.Address && rec.Instance != id {
			return refuse(CodeArgs, "address %s is instance %s's", n.Address, rec.Instance)
		}
	}
	return nil
}

func (s *Server) readTapRecord(path string) (*tapRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rec := &tapRecord{}
	return rec, json.Unmarshal(data, rec)
}

// guard makes a tap's guard (with the chains of pol, the parsed policy,
// when it has one), route and neighbour entry, and records them.
func (s *Server) guard(ctx context.Context, id, tap string, n NIC, policy *runtime.NetworkPolicy, pol *runtime.Policy) error {
	dir := filepath.Join(s.cfg.Helper.StateDir, "taps")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	rec, _ := json.Marshal(tapRecord{Instance: id, Bridge: n.Bridge, Address: n.Address, MAC: n.MAC, NetworkPolicy: policy})
	if err := config.WriteFileAtomic(s.tapRecordPath(tap), rec, 0o600); err != nil {
		return err
	}
	script := filepath.Join(dir, tap+".nft")
	if err := os.WriteFile(script, []byte(guardScript(tap, n.MAC, n.Address, pol)), 0o600); err != nil {
		return err
	}
	defer os.Remove(script)
	if _, err := run(ctx, s.cfg.Helper.Nft, "-f", script); err != nil {
		return err
	}
	// A route needs its device up: the instance bridge is (it carries the guests).
	if _, err := run(ctx, s.cfg.Helper.IP, "link", "set", "dev", n.Bridge, "up"); err != nil {
		return err
	}
	if _, err := run(ctx, s.cfg.Helper.IP, "route", "replace", n.Address+"/32", "dev", n.Bridge); err != nil {
		return err
	}
	_, err := run(ctx, s.cfg.Helper.IP, "neigh", "replace", n.Address, "lladdr", n.MAC, "dev", n.Bridge, "nud", "permanent")
	return err
}

// unguard removes what guard made for a tap (nothing when it made none).
func (s *Server) unguard(ctx context.Context, tap string) error {
	rec, err := s.readTapRecord(s.tapRecordPath(tap))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// Each may be gone already (a reboot took them): the deletions are tried, not required.
	_, _ = run(ctx, s.cfg.Helper.Nft, "delete", "table", "bridge", nftTable(tap))
	_, _ = run(ctx, s.cfg.Helper.IP, "neigh", "del", rec.Address, "dev", rec.Bridge)
	_, _ = run(ctx, s.cfg.Helper.IP, "route", "del", rec.Address+"/32", "dev", rec.Bridge)
	if err := os.Remove(s.tapRecordPath(tap)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	s.log.Info("ch.tap_unguarded", "tap", tap, "address", rec.Address)
	return nil
}

// ListenResult is imds.listen's result: the bridges whose listeners come
// with it, in the order of the descriptors.
type ListenResult struct {
	Bridges []string `json:"bridges"`
}

// filesResult is a result sent with open files (SCM_RIGHTS).
type filesResult struct {
	result any
	files  []*os.File
}

// imdsListen makes the metadata endpoint's listener on each instance
// bridge that exists.
func (s *Server) imdsListen(ctx context.Context) (any, error) {
	res := &ListenResult{Bridges: []string{}}
	var files []*os.File
	for _, br := range s.cfg.Helper.InstanceBridges {
		if _, err := os.Stat(filepath.Join("/sys/class/net", br)); err != nil {
			continue
		}
		if _, err := run(ctx, s.cfg.Helper.IP, "addr", "replace", plan.MetadataAddress+"/32", "dev", br); err != nil {
			closeAll(files)
			return nil, err
		}
		f, err := listenOn(ctx, br)
		if err != nil {
			closeAll(files)
			return nil, refuse(CodeCommand, "listening on %s:80 on %s: %v", plan.MetadataAddress, br, err)
		}
		res.Bridges, files = append(res.Bridges, br), append(files, f)
	}
	s.log.Info("imds.listen", "bridges", res.Bridges)
	return &filesResult{result: res, files: files}, nil
}

// listenOn is a listening socket on 169.254.169.254:80 bound to a device.
func listenOn(ctx context.Context, dev string) (*os.File, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, dev)
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	lis, err := lc.Listen(ctx, "tcp4", net.JoinHostPort(plan.MetadataAddress, "80"))
	if err != nil {
		return nil, err
	}
	defer lis.Close()
	return lis.(*net.TCPListener).File()
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
