// Instances: libvirt domains through virsh (domain.define renders the
// domain XML itself from a few fields, never taking XML from the node, and
// refuses a NIC on a bridge outside [helper] instance_bridges before the
// domain exists; start, destroy, undefine by name), and cloud-hypervisor
// taps made with ip tuntap, owned by the node's user and enslaved only to
// an instance bridge (ch.taps), deleted by ch.taps.delete.

package helper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"bcd/internal/config"
)

// instanceID is what an instance id may look like.
var instanceID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// macAddr is a unicast MAC address.
var macAddr = regexp.MustCompile(`^[0-9a-f][02468ace](:[0-9a-f]{2}){5}$`)

// NIC is an instance's network interface.
type NIC struct {
	// Bridge is the bridge it joins.
	Bridge string `json:"bridge"`
	// MAC is its address (optional).
	MAC string `json:"mac,omitempty"`
}

// DomainArgs are the domain.* arguments.
type DomainArgs struct {
	// ID is the instance id; the domain is bcd-<id>.
	ID string `json:"id"`
	// VCPUs and MemoryBytes size it (domain.define).
	VCPUs       uint32 `json:"vcpus,omitempty"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// NICs are its interfaces (domain.define, ch.taps).
	NICs []NIC `json:"nics,omitempty"`
}

func (s *Server) checkInstance(a *DomainArgs, define bool) error {
	if !instanceID.MatchString(a.ID) {
		return refuse(CodeArgs, "instance id %q", a.ID)
	}
	if len(a.NICs) > 8 {
		return refuse(CodeArgs, "%d NICs, at most 8", len(a.NICs))
	}
	for _, n := range a.NICs {
		if n.MAC != "" && !macAddr.MatchString(n.MAC) {
			return refuse(CodeArgs, "MAC %q", n.MAC)
		}
		if !slices.Contains(s.cfg.Helper.InstanceBridges, n.Bridge) {
			if define {
				return refuse(CodeBridge, "domain: bridge %q is not an instance network", n.Bridge)
			}
			return refuse(CodeBridge, "ch.taps: %q is not an instance bridge of this host ([helper] instance_bridges)", n.Bridge)
		}
	}
	if define && (a.VCPUs == 0 || a.VCPUs > 512 || a.MemoryBytes < 1<<20) {
		return refuse(CodeArgs, "domain %s: %d vCPUs, %d bytes of memory", a.ID, a.VCPUs, a.MemoryBytes)
	}
	return nil
}

// run runs a program (never a shell) and turns a failure into CodeCommand.
func run(ctx context.Context, program string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, program, args...).CombinedOutput()
	if err != nil {
		return "", &Error{Code: CodeCommand, Reason: fmt.Sprintf("%s %s: %s", program, strings.Join(args, " "), strings.TrimSpace(string(out))), Err: err}
	}
	return string(out), nil
}

// domainXML renders a KVM domain with bridged virtio NICs.
func domainXML(a *DomainArgs) ([]byte, error) {
	type source struct {
		Bridge string `xml:"bridge,attr"`
	}
	type mac struct {
		Address string `xml:"address,attr"`
	}
	type model struct {
		Type string `xml:"type,attr"`
	}
	type iface struct {
		Type   string `xml:"type,attr"`
		MAC    *mac   `xml:"mac,omitempty"`
		Source source `xml:"source"`
		Model  model  `xml:"model"`
	}
	type memory struct {
		Unit  string `xml:"unit,attr"`
		Value uint64 `xml:",chardata"`
	}
	type osType struct {
		Arch  string `xml:"arch,attr"`
		Value string `xml:",chardata"`
	}
	type domain struct {
		XMLName    xml.Name `xml:"domain"`
		Type       string   `xml:"type,attr"`
		Name       string   `xml:"name"`
		Memory     memory   `xml:"memory"`
		VCPU       uint32   `xml:"vcpu"`
		OS         osType   `xml:"os>type"`
		Interfaces []iface  `xml:"devices>interface"`
	}
	d := domain{Type: "kvm", Name: "bcd-" + a.ID, Memory: memory{"KiB", a.MemoryBytes / 1024}, VCPU: a.VCPUs, OS: osType{"x86_64", "hvm"}}
	for _, n := range a.NICs {
		i := iface{Type: "bridge", Source: source{n.Bridge}, Model: model{"virtio"}}
		if n.MAC != "" {
			i.MAC = &mac{n.MAC}
		}
		d.Interfaces = append(d.Interfaces, i)
	}
	return xml.MarshalIndent(d, "", "  ")
}

func (s *Server) domain(ctx context.Context, req Request) (any, error) {
	var a DomainArgs
	if err := decode(req, &a); err != nil {
		return nil, err
	}
	if err := s.checkInstance(&a, req.Op == OpDomainDefine); err != nil {
		return nil, err
	}
	name := "bcd-" + a.ID
	virsh := s.cfg.Helper.Virsh
	switch req.Op {
	case OpDomainDefine:
		data, err := domainXML(&a)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(s.cfg.Helper.StateDir, "domains")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, name+".xml")
		if err := config.WriteFileAtomic(path, data, 0o600); err != nil {
			return nil, err
		}
		if _, err := run(ctx, virsh, "define", path); err != nil {
			return nil, err
		}
	case OpDomainStart:
		if _, err := run(ctx, virsh, "start", name); err != nil {
			return nil, err
		}
	case OpDomainDestroy:
		if _, err := run(ctx, virsh, "destroy", name); err != nil {
			return nil, err
		}
	case OpDomainUndefine:
		if _, err := run(ctx, virsh, "undefine", name); err != nil {
			return nil, err
		}
		_ = os.Remove(filepath.Join(s.cfg.Helper.StateDir, "domains", name+".xml"))
	}
	s.log.Info("domain.done", "op", req.Op, "domain", name)
	return map[string]string{"domain": name}, nil
}

// TapName is the tap of an instance's i-th NIC: bcdt<8 hex of SHA-256(id)>n<i>.
func TapName(id string, i int) string {
	sum := sha256.Sum256([]byte(id))
	return "bcdt" + hex.EncodeToString(sum[:4]) + "n" + strconv.Itoa(i)
}

// TapsResult is ch.taps' result.
type TapsResult struct {
	Taps []string `json:"taps"`
}

func (s *Server) chTaps(ctx context.Context, req Request) (any, error) {
	var a DomainArgs
	if err := decode(req, &a); err != nil {
		return nil, err
	}
	if err := s.checkInstance(&a, false); err != nil {
		return nil, err
	}
	ip := s.cfg.Helper.IP
	res := &TapsResult{Taps: []string{}}
	for i, n := range a.NICs {
		tap := TapName(a.ID, i)
		_, _ = run(ctx, ip, "link", "delete", tap) // a tap of an earlier start
		steps := [][]string{
			{"tuntap", "add", "dev", tap, "mode", "tap", "user", strconv.FormatUint(uint64(s.uid), 10), "group", strconv.FormatUint(uint64(s.gid), 10)},
			{"link", "set", "dev", tap, "master", n.Bridge},
			{"link", "set", "dev", tap, "up"},
		}
		for _, args := range steps {
			if _, err := run(ctx, ip, args...); err != nil {
				_, _ = run(ctx, ip, "link", "delete", tap)
				return nil, err
			}
		}
		res.Taps = append(res.Taps, tap)
	}
	s.log.Info("ch.taps", "instance", a.ID, "taps", res.Taps)
	return res, nil
}

func (s *Server) chTapsDelete(ctx context.Context, req Request) (any, error) {
	var a DomainArgs
	if err := decode(req, &a); err != nil {
		return nil, err
	}
	if !instanceID.MatchString(a.ID) {
		return nil, refuse(CodeArgs, "instance id %q", a.ID)
	}
	out, err := run(ctx, s.cfg.Helper.IP, "-o", "link", "show")
	if err != nil {
		return nil, err
	}
	prefix := strings.TrimSuffix(TapName(a.ID, 0), "0")
	res := &TapsResult{Taps: []string{}}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(fields[1], ":"), "@")
		if strings.HasPrefix(name, prefix) {
			if _, err := run(ctx, s.cfg.Helper.IP, "link", "delete", name); err != nil {
				return nil, err
			}
			res.Taps = append(res.Taps, name)
		}
	}
	s.log.Info("ch.taps_deleted", "instance", a.ID, "taps", res.Taps)
	return res, nil
}
