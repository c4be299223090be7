// Native fuzz target of the helper's request protocol: the bytes a peer
// sends, read as the socket reads them (readRequest), then answered as far
// as that changes nothing on the host. Properties: a request that does not
// decode is refused helper-args; one that decodes re-encodes to a request
// that decodes to itself, and re-encodes to the same bytes; its arguments,
// decoded as its operation decodes them, re-encode to themselves; a domain
// or tap operation's arguments that the helper accepts name only what it
// allows (the instance's id, instance bridges, the instance's own taps,
// guest addresses of the instance network with their MACs, disks directly
// under volume_dirs and a base image directly under image_dirs, and of
// those only the node's regular file opens as a volume, and a network
// policy that parses, whose guard's rules are each of the fixed grammar
// of policyLine); and every other
// answer is a result or a refusal whose code is in proto/refusals.toml
// (unknown operations helper-op). The operations on a running guest and
// imds.listen are checked, never run.

package helper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"bcd/internal/refusal"
	"bcd/internal/runtime"
	"bcd/internal/runtime/plan"
	"bcd/internal/update"
)

// fuzzServer is a helper that cannot change the host: no command roots,
// no [update], programs that do not exist, and a binder that refuses.
func fuzzServer(f *testing.F) (*Server, string) {
	dir, err := filepath.EvalSymlinks(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	vols := filepath.Join(dir, "volumes")
	os.Mkdir(vols, 0o700)
	good := filepath.Join(vols, "good.raw")
	os.WriteFile(good, []byte("a volume"), 0o600)
	os.Symlink("/etc/hostname", filepath.Join(vols, "link.raw"))
	none := filepath.Join(dir, "none")
	images := filepath.Join(dir, "images")
	os.Mkdir(images, 0o700)
	cfg := &Config{Helper: Settings{VolumeDirs: []string{vols}, ImageDirs: []string{images}, InstanceBridges: []string{"bcbr0", "bcbr1"},
		UnitDir: filepath.Join(dir, "units"), StateDir: filepath.Join(dir, "state"), CommandRootsDir: none,
		NodeConfig: none, Virsh: none, IP: none, Systemctl: none, Nft: none, QemuImg: none, MkfsVfat: none, Mcopy: none}}
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	s, err := NewServer(cfg, nil, Options{UID: &uid, GID: &gid, Exes: []string{"/x"}, Binder: refusingBinder{}, SysRoot: filepath.Join(dir, "sys")})
	if err != nil {
		f.Fatal(err)
	}
	return s, good
}

// refusingBinder binds nothing.
type refusingBinder struct{}

func (refusingBinder) Bind(int, string, bool) error {
	return errors.New("the fuzz target binds nothing")
}
func (refusingBinder) Unbind(string) error        { return nil }
func (refusingBinder) Bound(string) (bool, error) { return false, nil }

// argsOf is what each operation decodes its arguments into.
var argsOf = map[string]func() any{
	OpHostApply: func() any { return &hostArgs{} }, OpHostStart: func() any { return &HostStartArgs{} },
	OpAccessApply:  func() any { return &hostArgs{} },
	OpDomainDefine: func() any { return &DomainArgs{} }, OpDomainStart: func() any { return &DomainArgs{} },
	OpDomainDestroy: func() any { return &DomainArgs{} }, OpDomainUndefine: func() any { return &DomainArgs{} },
	OpDomainState: func() any { return &DomainArgs{} }, OpChTaps: func() any { return &DomainArgs{} },
	OpChTapsDelete: func() any { return &DomainArgs{} }, OpUpdatePrepare: func() any { return &prepareArgs{} },
	OpDomainSetMem: func() any { return &SetMemArgs{} }, OpDomainStats: func() any { return &DomainArgs{} },
	OpUpdateSwap: func() any { return &update.SwapRequest{} }, OpUpdateConfirm: func() any { return &versionArgs{} },
	OpUpdateSettle: func() any { return &versionArgs{} },
}

// wantCode fails unless err is a refusal with one of codes.
func wantCode(t *testing.T, err error, codes ...Code) {
	t.Helper()
	if c := refusal.CodeOf(err); !slices.Contains(codes, c) {
		t.Fatalf("refused with %q, want one of %v: %v", c, codes, err)
	}
}

func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		`{"op":"ping"}`,
		`{"op":"domain.define","args":{"id":"vm1","vcpus":2,"memory_bytes":1073741824,"nics":[{"bridge":"bcbr0","mac":"52:54:00:12:34:56","tap":"` + TapName("vm1", 0) + `"}],"disks":[{"path":"VOLS/good.raw","serial":"data","read_only":true}]}}`,
		`{"op":"domain.define","args":{"id":"vm1","vcpus":1,"memory_bytes":1048576,"disks":[{"path":"VOLS/link.raw"},{"path":"VOLS/../../etc/shadow"}]}}`,
		`{"op":"ch.taps","args":{"id":"vm2","nics":[{"bridge":"bcbr1"},{"bridge":"br-mgmt"}]}}`,
		`{"op":"ch.taps.delete","args":{"id":"vm2"}}`,
		`{"op":"domain.define","args":{"id":"vm3","vcpus":1,"memory_bytes":268435456,"memory_floor_bytes":134217728,"accelerator":"tcg",` +
			`"nics":[{"bridge":"bcbr0","mac":"52:54:00:00:00:03","address":"169.254.10.3"}],"cpus":{"node":0,"host_cpus":[1]},"gpus":[{"index":0,"address":"0000:3b:00.0"}],` +
			`"image":{"digest":"sha256:` + strings.Repeat("ab", 32) + `","base":"IMAGES/base.raw","format":"raw"},"seed":{"meta_data":"instance-id: vm3\n","network_config":"version: 2\n"}}}`,
		`{"op":"ch.taps","args":{"id":"vm3","nics":[{"bridge":"bcbr0","mac":"52:54:00:00:00:03","address":"169.254.169.254"}]}}`,
		`{"op":"ch.taps","args":{"id":"vm4","nics":[{"bridge":"bcbr0","mac":"52:54:00:00:00:04","address":"169.254.10.4"}],"network_policy":` +
			`{"ingress":[{"protocol":"tcp","cidr":"0.0.0.0/0","port_min":22,"port_max":22}],"egress":[{"protocol":"icmp","cidr":"10.0.0.0/8"},` +
			`{"protocol":"udp","cidr":"10.1.2.3/32","port_min":53,"port_max":54}]}}}`,
		`{"op":"ch.taps","args":{"id":"vm4","nics":[{"bridge":"bcbr0","mac":"52:54:00:00:00:04","address":"169.254.10.4"}],"network_policy":` +
			`{"egress":[{"protocol":"tcp; flush ruleset","cidr":"10.0.0.0/8 }","port_min":1,"port_max":1}]}}}`,
		`{"op":"domain.setmem","args":{"id":"vm3","memory_bytes":1}}`,
		`{"op":"domain.stats","args":{"id":"vm3"}}`,
		`{"op":"imds.listen"}`,
		`{"op":"host.apply","args":{"spec":{"payloadType":"x","payload":"","signatures":[]}}}`,
		`{"op":"host.start","args":{"name":"bcd-hugepages.service"}}`,
		`{"op":"update.swap","args":{"command_id":"c","previous":"0.1.0","confirm_timeout_ms":1000}}`,
		`{"op":"rm -rf","args":[1,"\u003c\ud800"]}` + "\n" + `{"op":"ping"}`,
		`{"op":"update.confirm"`,
	} {
		f.Add([]byte(seed))
	}
	s, good := fuzzServer(f)
	vols := s.cfg.Helper.VolumeDirs[0]
	peer := &Peer{UID: s.uid, Exe: "/x"}
	f.Fuzz(func(t *testing.T, data []byte) {
		data = bytes.ReplaceAll(data, []byte("VOLS"), []byte(vols))
		data = bytes.ReplaceAll(data, []byte("IMAGES"), []byte(s.cfg.Helper.ImageDirs[0]))
		req, err := readRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			wantCode(t, err, CodeArgs)
			return
		}
		var wire, again bytes.Buffer
		if err := writeMessage(&wire, req); err != nil {
			return // HTML escaping grew it past MaxMessage: the client would not send it
		}
		back, err := readRequest(bufio.NewReader(bytes.NewReader(wire.Bytes())))
		if err != nil || back.Op != req.Op || writeMessage(&again, back) != nil || !bytes.Equal(again.Bytes(), wire.Bytes()) {
			t.Fatalf("the request does not re-encode to itself: %v\n%q\n%q", err, wire.Bytes(), again.Bytes())
		}
		if newArgs := argsOf[req.Op]; newArgs != nil && len(req.Args) > 0 {
			a := newArgs()
			if err := decode(req, a); err != nil {
				wantCode(t, err, CodeArgs)
				return
			}
			first, _ := json.Marshal(a)
			b := newArgs()
			if json.Unmarshal(first, b) != nil {
				t.Fatalf("the arguments do not decode from their encoding %q", first)
			}
			if second, _ := json.Marshal(b); !bytes.Equal(first, second) {
				t.Fatalf("the arguments re-encode as %q, then %q", first, second)
			}
		}
		if isInstanceOp(req.Op) {
			checkInstanceOp(t, s, req, good)
			return
		}
		res, err := s.do(context.Background(), peer, req)
		if err != nil {
			code := refusal.CodeOf(err)
			if _, known := refusal.Lookup(code); !known {
				t.Fatalf("%s refused without a code of the table: %v", req.Op, err)
			}
			if argsOf[req.Op] == nil && !slices.Contains([]string{OpPing, OpUpdateState, OpUpdateRollback}, req.Op) && code != CodeOp {
				t.Fatalf("the unknown operation %q: %v", req.Op, err)
			}
			return
		}
		if _, err := json.Marshal(res); err != nil || req.Op != OpPing {
			t.Fatalf("%s answered %v (%v): only ping may, on this helper", req.Op, res, err)
		}
	})
}

// policyLine is every line a policy's chains may have.
var policyLine = regexp.MustCompile(`^\t(chain (egress|ingress) \{|\})$|^\t\t(ether type arp accept|drop|` +
	`ip [ds]addr \d{1,3}(\.\d{1,3}){3}(/\d{1,2})? (` +
	`(tcp|udp) [ds]port \d{1,5}(-\d{1,5})?( tcp flags & \(syn \| ack\) != syn)?|` +
	`icmp type (echo-request|echo-reply|\{ echo-reply, destination-unreachable, time-exceeded \})) accept)$`)

// isInstanceOp says whether op is a domain, guest or tap operation (not
// run here: their checks are).
func isInstanceOp(op string) bool {
	return slices.Contains([]string{OpDomainDefine, OpDomainStart, OpDomainDestroy, OpDomainUndefine, OpDomainState, OpChTaps, OpChTapsDelete,
		OpDomainSetMem, OpDomainStats, OpImdsListen}, op)
}

// checkInstanceOp holds a domain or tap operation's accepted arguments to
// what the helper allows, and opens a define's disks as define does.
func checkInstanceOp(t *testing.T, s *Server, req Request, good string) {
	if req.Op == OpImdsListen {
		return // it takes nothing of the node's
	}
	var a DomainArgs
	if err := decode(req, &a); err != nil {
		wantCode(t, err, CodeArgs)
		return
	}
	if err := s.checkInstance(&a, req.Op == OpDomainDefine); err != nil {
		wantCode(t, err, CodeArgs, CodeBridge, CodePlan)
		return
	}
	pol, err := a.NetworkPolicy.Parse()
	if err != nil {
		t.Fatalf("accepted a policy that does not parse: %v", err)
	}
	if pol != nil {
		script := guardScript(TapName(a.ID, 0), "52:54:00:00:00:01", "169.254.10.2", pol)
		rules := script[strings.Index(script, "\tchain egress {\n"):strings.Index(script, "\tchain input")]
		for _, line := range strings.Split(strings.TrimSuffix(rules, "\n"), "\n") {
			if !policyLine.MatchString(line) {
				t.Fatalf("the guard of an accepted policy has the line %q", line)
			}
		}
	}
	if im := a.Image; im != nil && (req.Op != OpDomainDefine || !plan.DiskUnder(im.Base, s.cfg.Helper.ImageDirs)) {
		t.Fatalf("accepted the image %+v", im)
	}
	if !runtime.IDPattern.MatchString(a.ID) || len(a.NICs) > plan.MaxNICs {
		t.Fatalf("accepted id %q, %d NICs", a.ID, len(a.NICs))
	}
	for i, n := range a.NICs {
		if !slices.Contains(s.cfg.Helper.InstanceBridges, n.Bridge) || (n.Tap != "" && n.Tap != TapName(a.ID, i)) ||
			(n.Address != "" && req.Op == OpDomainDefine && (!plan.GuestAddress(n.Address) || n.MAC == "")) {
			t.Fatalf("accepted NIC %d %+v", i, n)
		}
	}
	for _, d := range a.Disks {
		if !plan.DiskUnder(d.Path, s.cfg.Helper.VolumeDirs) {
			t.Fatalf("accepted the disk %q", d.Path)
		}
		if req.Op != OpDomainDefine {
			continue
		}
		v, err := s.openVolume(d.Path, s.cfg.Helper.VolumeDirs)
		if err != nil {
			wantCode(t, err, CodeArgs, CodeDisk)
			continue
		}
		v.close()
		if d.Path != good {
			t.Fatalf("%q opened as a volume; the node's only volume is %s", d.Path, good)
		}
	}
}
