// Tests of bcd helper in one process, unprivileged: the peer check, the
// update operations through Client (every refusal of the helper e2e, and
// the good path), host units (signed, unsigned, tampered, names,
// generations; host.start against a fake systemctl; the host reconciler
// over HostUnits), taps against a fake ip, and the install script's syntax
// and content (domains and their disks: domain_test.go). The same
// operations run as real root in roote2e (TestHelperAsRoot).

package helper

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"bcd/internal/converge"
	"bcd/internal/hostconfig"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/testlog"
	"bcd/internal/update"
	"bcd/internal/update/updatetest"
	"google.golang.org/protobuf/proto"
)

var commandRoot = pki.DeriveEd25519("helper-test", "command-root/0")

// rig is a helper serving in a temporary directory.
type rig struct {
	dir, socket, slots, staged string
	log                        *testlog.Buffer
	client                     *Client
	rel                        *updatetest.Release
	calls                      string // the fake programs' log
	// vols is a volume directory; volsLink is one too, a symbolic link to
	// another directory. images is the image directory, sys the host's /sys.
	vols, volsLink, images, sys string
	binder                      *fakeBinder
	cancel                      context.CancelFunc
	done                        chan error
}

func fakeProgram(t *testing.T, path, log, extra string) {
	t.Helper()
	script := "#!/bin/sh\necho \"$(basename \"$0\") $*\" >> " + log + "\n" + extra
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func newRig(t *testing.T, exes []string) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{dir: dir, socket: filepath.Join(dir, "run", "helper.sock"), slots: filepath.Join(dir, "slots"),
		staged: filepath.Join(dir, "node", "bcd.staged"), log: &testlog.Buffer{}, rel: updatetest.Load(t), calls: filepath.Join(dir, "calls.log")}
	installed := filepath.Join(dir, "installed")
	if err := os.WriteFile(installed, []byte("installed bcd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := update.Install(r.slots, installed); err != nil {
		t.Fatal(err)
	}
	roots := filepath.Join(dir, "roots")
	os.MkdirAll(roots, 0o755)
	pub, _ := pki.PublicKeyOf(commandRoot)
	os.WriteFile(filepath.Join(roots, "root.pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub.SPKI()}), 0o644)
	fakeProgram(t, filepath.Join(dir, "virsh"), r.calls, "")
	// systemctl start runs a oneshot unit's ExecStart= and fails as it does.
	fakeProgram(t, filepath.Join(dir, "systemctl"), r.calls, `if [ "$1" = start ]; then
  cmd=$(sed -n 's/^ExecStart=//p' "`+filepath.Join(dir, "units")+`/$2")
  $cmd >/dev/null 2>&1 || { echo "Job for $2 failed because the control process exited with error code." >&2; exit 1; }
fi
`)
	fakeProgram(t, filepath.Join(dir, "ip"), r.calls, `if [ "$1" = "-o" ]; then
  echo "1: lo: <LOOPBACK> mtu 65536"
  echo "7: `+TapName("vm1", 0)+`: <BROADCAST> mtu 1500 master bcbr0"
  echo "8: `+TapName("vm1", 1)+`@if3: <BROADCAST> mtu 1500"
fi
if [ "$1 $2" = "link delete" ]; then exit 1; fi
`)
	// qemu-img create and mkfs.vfat -C make their last file; mcopy and nft log.
	fakeProgram(t, filepath.Join(dir, "qemu-img"), r.calls, "for f; do :; done; : > \"$f\"\n")
	fakeProgram(t, filepath.Join(dir, "mkfs.vfat"), r.calls, ": > \"$4\"\n")
	fakeProgram(t, filepath.Join(dir, "mcopy"), r.calls, "")
	fakeProgram(t, filepath.Join(dir, "nft"), r.calls, "")
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.images, r.sys = filepath.Join(real, "images"), filepath.Join(real, "sys")
	os.MkdirAll(r.images, 0o700)
	r.vols, r.volsLink = filepath.Join(real, "volumes"), filepath.Join(real, "linked-volumes")
	os.MkdirAll(r.vols, 0o700)
	os.MkdirAll(filepath.Join(real, "elsewhere"), 0o700)
	os.Symlink(filepath.Join(real, "elsewhere"), r.volsLink)
	r.binder = &fakeBinder{bound: map[string][2]uint64{}}
	up := &update.Config{Threshold: 2, MinSequence: 5, Dir: r.slots, Staged: r.staged, ReleaseKeys: r.rel.SPKIs(), ReleaseKeyPins: r.rel.Pins()}
	nodeConfig := filepath.Join(dir, "node", "config.toml")
	os.MkdirAll(filepath.Dir(nodeConfig), 0o700)
	os.WriteFile(nodeConfig, []byte("# The node's config.toml, after its join.\ndata_dir = \"data\"\nnode_id = \"node_1\"\n"), 0o600)
	toml := "[helper]\nsocket = \"" + r.socket + "\"\nvolume_dirs = [\"" + r.vols + "\", \"" + r.volsLink + "\"]\nnode_config = \"" + nodeConfig + "\"\ninstance_bridges = [\"bcbr0\"]\nunit_dir = \"" + filepath.Join(dir, "units") +
		"\"\naccess_root = \"" + filepath.Join(dir, "access-root") + "\"\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\ncommand_roots_dir = \"" + roots + "\"\nvirsh = \"" + filepath.Join(dir, "virsh") +
		"\"\nip = \"" + filepath.Join(dir, "ip") + "\"\nsystemctl = \"" + filepath.Join(dir, "systemctl") +
		"\"\nimage_dirs = [\"" + r.images + "\"]\nguest_kernel = \"/boot/vmlinux\"\nqemu_img = \"" + filepath.Join(dir, "qemu-img") +
		"\"\nmkfs_vfat = \"" + filepath.Join(dir, "mkfs.vfat") + "\"\nmcopy = \"" + filepath.Join(dir, "mcopy") + "\"\nnft = \"" + filepath.Join(dir, "nft") + "\"\n\n" + up.String()
	path := filepath.Join(dir, "helper.toml")
	if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	if exes == nil {
		exe, _ := os.Executable()
		exes = []string{exe}
	}
	s, err := NewServer(cfg, slog.New(slog.NewTextHandler(r.log, nil)), Options{UID: &uid, GID: &gid, Exes: exes, Binder: r.binder, SysRoot: r.sys})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Error(err)
		}
	})
	r.client = &Client{Socket: r.socket}
	return r
}

func (r *rig) stage(t *testing.T, data []byte) {
	t.Helper()
	os.MkdirAll(filepath.Dir(r.staged), 0o700)
	os.Remove(r.staged)
	if err := os.WriteFile(r.staged, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) current(t *testing.T) string {
	t.Helper()
	c, err := r.client.Current()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantRefused(t *testing.T, err error, code string) {
	t.Helper()
	var ref *Refusal
	if !errors.As(err, &ref) {
		t.Fatalf("error %v, want a refusal %s", err, code)
	}
	if ref.Code != code || !strings.HasPrefix(ref.Message, code+": ") {
		t.Fatalf("refusal %q (code %q), want %s", ref.Message, ref.Code, code)
	}
}

func TestTheHelperAnswersOnlyAnInstalledSlot(t *testing.T) {
	r := newRig(t, []string{"/usr/local/lib/bcd/bcd-a"})
	err := Call(context.Background(), r.socket, OpPing, nil, nil)
	wantRefused(t, err, string(CodePeer))
	if !strings.Contains(r.log.String(), "helper.refused") {
		t.Fatalf("log %s", r.log)
	}
	fi, err := os.Stat(r.socket)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket %v %v", fi.Mode(), err)
	}
}

func TestUnknownOperationsAreRefused(t *testing.T) {
	r := newRig(t, nil)
	wantRefused(t, Call(context.Background(), r.socket, "rm -rf", nil, nil), string(CodeOp))
	wantRefused(t, Call(context.Background(), r.socket, OpUpdateConfirm, nil, nil), string(CodeArgs))
}

func TestSelfUpdateUnderTheHelper(t *testing.T) {
	r := newRig(t, nil)
	good := r.rel.Envelope(t)

	// prepare refuses a tampered manifest, another digest and a missing artifact.
	r.stage(t, r.rel.Artifact)
	tampered := r.rel.Envelope(t)
	tampered.Payload = []byte(strings.Replace(string(tampered.Payload), `"sequence":7`, `"sequence":9`, 1))
	_, err := r.client.Prepare(tampered)
	wantRefused(t, err, "dsse-bad-signature")
	r.stage(t, []byte("bcd 0.9.0 other artifact!!\n"))
	_, err = r.client.Prepare(good)
	wantRefused(t, err, "release-digest")
	r.stage(t, r.rel.Artifact)
	sum := sha256.Sum256(r.rel.Artifact)
	armOnly := r.rel.Sign(t, pki.Manifest{Version: "0.9.0", Sequence: 7, Artifacts: []pki.Artifact{{OS: "linux", Arch: "riscv64",
		SHA256: hex.EncodeToString(sum[:]), Size: uint64(len(r.rel.Artifact)), URL: "http://127.0.0.1:1/x"}}})
	_, err = r.client.Prepare(armOnly)
	wantRefused(t, err, "release-missing-artifact")

	// swap refuses nothing prepared, nothing staged, a symlink and other bytes, without moving current.
	_, err = r.client.Swap(update.SwapRequest{CommandID: "c", Previous: "0.1.0"})
	wantRefused(t, err, string(update.CodeNothingPrepared))
	if _, err := r.client.Prepare(good); err != nil {
		t.Fatal(err)
	}
	os.Remove(r.staged)
	_, err = r.client.Swap(update.SwapRequest{CommandID: "c", Previous: "0.1.0"})
	wantRefused(t, err, string(update.CodeNothingStaged))
	os.Symlink(filepath.Join(r.slots, update.SlotA), r.staged)
	_, err = r.client.Swap(update.SwapRequest{CommandID: "c", Previous: "0.1.0"})
	wantRefused(t, err, string(update.CodeStagedSymlink))
	r.stage(t, []byte("bcd 0.9.0 evil artifact!!!\n"))
	_, err = r.client.Swap(update.SwapRequest{CommandID: "c", Previous: "0.1.0"})
	wantRefused(t, err, string(update.CodeStagedBytes))
	if c := r.current(t); c != update.SlotA {
		t.Fatalf("a refused swap moved current to %s", c)
	}

	// A good swap: slot b, sequence 7 in upgrade.json.
	r.stage(t, r.rel.Artifact)
	rec, err := r.client.Swap(update.SwapRequest{CommandID: "c", Previous: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Slot != update.SlotB || rec.Sequence != 7 || r.current(t) != update.SlotB {
		t.Fatalf("swap %+v", rec)
	}
	st, err := r.client.State()
	if err != nil || st.Pending == nil || st.Pending.Sequence != 7 || st.Entrypoint != filepath.Join(r.slots, "bcd") {
		t.Fatalf("state %+v %v", st, err)
	}
	if !strings.Contains(r.log.String(), "update.swapped") {
		t.Fatal("the swap is not in the helper's log")
	}
	// A second swap, and confirming another version, are refused.
	_, err = r.client.Swap(update.SwapRequest{CommandID: "c2", Previous: "0.1.0"})
	wantRefused(t, err, string(update.CodePending))
	_, err = r.client.Confirm("0.9.1")
	wantRefused(t, err, string(update.CodeVersion))
	// rollback brings the installed binary back; settle records the failure.
	if _, err := r.client.Rollback(); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(r.slots, "bcd")); string(data) != "installed bcd" {
		t.Fatalf("the entrypoint runs %q", data)
	}
	if _, err := r.client.Settle("0.9.0"); err != nil {
		t.Fatal(err)
	}
	r.stage(t, r.rel.Artifact)
	_, err = r.client.Prepare(good)
	wantRefused(t, err, string(update.CodeReleaseFailed))
	if !errors.Is(err, update.CodeReleaseFailed) {
		t.Fatal("a refusal does not match its update.Code")
	}
}

// spec signs a NodeSpec of node_1 with the host units.
func spec(t *testing.T, generation uint64, key ed25519.PrivateKey, units ...*agentv1.HostUnit) json.RawMessage {
	return specFor(t, "node_1", generation, key, units...)
}

// specFor signs a NodeSpec of nodeID with the host units.
func specFor(t *testing.T, nodeID string, generation uint64, key ed25519.PrivateKey, units ...*agentv1.HostUnit) json.RawMessage {
	payload, _ := proto.Marshal(&agentv1.NodeSpec{NodeId: nodeID, Generation: generation, Host: &agentv1.HostSection{Units: units}})
	env := &pki.Envelope{PayloadType: pki.PayloadTypeNodeSpec, Payload: payload, Signatures: []pki.Signature{}}
	if key != nil {
		var err error
		if env, err = pki.SignEnvelope(rand.Reader, pki.PayloadTypeNodeSpec, payload, key); err != nil {
			t.Fatal(err)
		}
	}
	return env.JSON()
}

func TestHostUnits(t *testing.T) {
	r := newRig(t, nil)
	hp := &agentv1.HostUnit{Name: "bcd-hugepages.service", Content: []byte("[Service]\nExecStart=/bin/true\n")}
	km := &agentv1.HostUnit{Name: "bcd-modules.service", Content: []byte("[Service]\nExecStart=/sbin/modprobe tun\n")}
	apply := func(raw json.RawMessage) (*HostResult, error) {
		res := &HostResult{}
		err := Call(context.Background(), r.socket, OpHostApply, map[string]json.RawMessage{"spec": raw}, res)
		return res, err
	}
	units := filepath.Join(r.dir, "units")
	_, err := apply(spec(t, 2, nil, hp))
	wantRefused(t, err, "dsse-unsigned")
	tampered := spec(t, 2, commandRoot, hp)
	env, _ := pki.ParseEnvelopeJSON(tampered)
	env.Payload = append(env.Payload, 0x08, 0x01)
	_, err = apply(env.JSON())
	wantRefused(t, err, "dsse-bad-signature")
	other := pki.DeriveEd25519("helper-test", "someone-else")
	_, err = apply(spec(t, 2, other, hp))
	wantRefused(t, err, "dsse-unknown-key")
	_, err = apply(spec(t, 2, commandRoot, &agentv1.HostUnit{Name: "../../etc/passwd", Content: []byte("x")}))
	wantRefused(t, err, string(CodeUnitName))
	if entries, _ := os.ReadDir(units); len(entries) != 0 {
		t.Fatalf("a refused spec wrote %v", entries)
	}
	res, err := apply(spec(t, 2, commandRoot, hp, km))
	if err != nil || len(res.Written) != 2 || res.Reloaded {
		t.Fatalf("apply %+v %v", res, err)
	}
	if data, _ := os.ReadFile(filepath.Join(units, hp.Name)); string(data) != string(hp.Content) {
		t.Fatalf("unit %q", data)
	}
	res, err = apply(spec(t, 3, commandRoot, hp))
	if err != nil || len(res.Removed) != 1 || res.Removed[0] != km.Name {
		t.Fatalf("apply %+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(units, km.Name)); !os.IsNotExist(err) {
		t.Fatal("a unit gone from the spec remains")
	}
	_, err = apply(spec(t, 1, commandRoot, km))
	wantRefused(t, err, string(CodeGeneration))
}

func TestHostStartRunsOnlyTheAppliedUnits(t *testing.T) {
	r := newRig(t, nil)
	ok := &agentv1.HostUnit{Name: "bcd-ok.service", Content: []byte("[Service]\nType=oneshot\nExecStart=/bin/true\n")}
	bad := &agentv1.HostUnit{Name: "bcd-bad.service", Content: []byte("[Service]\nType=oneshot\nExecStart=/bin/false\n")}
	start := func(name string) error {
		return Call(context.Background(), r.socket, OpHostStart, HostStartArgs{Name: name}, nil)
	}
	// Before any apply, and for names that are no host unit's, nothing runs.
	wantRefused(t, start(ok.Name), string(CodeUnitUnknown))
	wantRefused(t, start("sshd.service"), string(CodeUnitName))
	wantRefused(t, start("bcd-../../x.service"), string(CodeUnitName))
	wantRefused(t, Call(context.Background(), r.socket, OpHostStart, nil, nil), string(CodeArgs))
	if got := r.callLog(t); got != "" {
		t.Fatalf("systemctl ran for a refused start: %q", got)
	}
	if err := Call(context.Background(), r.socket, OpHostApply, map[string]json.RawMessage{"spec": spec(t, 2, commandRoot, ok, bad)}, &HostResult{}); err != nil {
		t.Fatal(err)
	}
	if err := start(ok.Name); err != nil {
		t.Fatal(err)
	}
	err := start(bad.Name)
	wantRefused(t, err, string(CodeCommand))
	if !strings.Contains(err.Error(), "systemctl start bcd-bad.service: Job for bcd-bad.service failed") {
		t.Fatalf("reason %v", err)
	}
	// A unit the next apply dropped is no longer started.
	if err := Call(context.Background(), r.socket, OpHostApply, map[string]json.RawMessage{"spec": spec(t, 3, commandRoot, ok)}, &HostResult{}); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, start(bad.Name), string(CodeUnitUnknown))
	if got, want := r.callLog(t), "systemctl start bcd-ok.service\nsystemctl start bcd-bad.service\n"; got != want {
		t.Fatalf("systemctl calls:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(r.log.String(), "host.started") {
		t.Fatalf("log:\n%s", r.log.String())
	}
}

func (r *rig) callLog(t *testing.T) string {
	data, _ := os.ReadFile(r.calls)
	return string(data)
}

func TestTapsThroughIP(t *testing.T) {
	r := newRig(t, nil)
	err := Call(context.Background(), r.socket, OpChTaps, DomainArgs{ID: "vm1", NICs: []NIC{{Bridge: "bcbr0"}, {Bridge: "br-mgmt"}}}, nil)
	wantRefused(t, err, string(CodeBridge))
	if !strings.Contains(err.Error(), `ch.taps: "br-mgmt" is not an instance bridge of this host ([helper] instance_bridges)`) {
		t.Fatalf("error %v", err)
	}
	if r.callLog(t) != "" {
		t.Fatal("ip ran for refused taps")
	}
	res := &TapsResult{}
	if err := Call(context.Background(), r.socket, OpChTaps, DomainArgs{ID: "vm1", NICs: []NIC{{Bridge: "bcbr0"}}}, res); err != nil {
		t.Fatal(err)
	}
	tap := TapName("vm1", 0)
	if len(res.Taps) != 1 || res.Taps[0] != tap || len(tap) > 15 {
		t.Fatalf("taps %v", res.Taps)
	}
	uid := os.Getuid()
	for _, want := range []string{
		"ip tuntap add dev " + tap + " mode tap user " + strconv.Itoa(uid) + " group " + strconv.Itoa(os.Getgid()),
		"ip link set dev " + tap + " master bcbr0", "ip link set dev " + tap + " up"} {
		if !strings.Contains(r.callLog(t), want+"\n") {
			t.Fatalf("ip calls lack %q:\n%s", want, r.callLog(t))
		}
	}
	os.Remove(r.calls)
	// The fake ip refuses "link delete": the deletion fails with its words.
	err = Call(context.Background(), r.socket, OpChTapsDelete, DomainArgs{ID: "vm1"}, nil)
	wantRefused(t, err, string(CodeCommand))
	if !strings.Contains(r.callLog(t), "ip link delete "+tap+"\n") {
		t.Fatalf("ip calls:\n%s", r.callLog(t))
	}
}

func TestTheInstallScript(t *testing.T) {
	rel := updatetest.Load(t)
	root, _ := pki.PublicKeyOf(commandRoot)
	script, err := RenderInstallScript(InstallOptions{Version: "0.1.0", Unprivileged: true, InstanceBridges: []string{"bcbr0"},
		ReleaseKeys: rel.PublicKeys(), Threshold: 2, MinSequence: 5, CommandRoots: []*pki.PublicKey{root}})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v %s", err, out)
	}
	for _, want := range []string{
		"useradd --system --user-group", "install -o root -g root -m 0755 \"$BIN\" /usr/local/lib/bcd/bcd-a",
		"ln -sfn bcd-a /usr/local/lib/bcd/bcd", "instance_bridges = [\"bcbr0\"]", "threshold = 2", "min_sequence = 5",
		"helper_socket = \"/run/bcd-helper/helper.sock\"", "ExecStart=/usr/local/lib/bcd/bcd helper --config /etc/bcd-helper/helper.toml",
		"User=bcd", "RestartPreventExitStatus=3", rel.Keys[0].Public.Pin(), rel.Keys[1].Public.Pin(), "BEGIN PUBLIC KEY",
	} {
		if !strings.Contains(script, want) {
			t.Fatalf("the script lacks %q:\n%s", want, script)
		}
	}
	unit := script[strings.Index(script, "cat > "+HelperUnitPath):]
	argv, err := ExecStart(unit)
	if err != nil || strings.Join(argv, " ") != "/usr/local/lib/bcd/bcd helper --config /etc/bcd-helper/helper.toml" {
		t.Fatalf("ExecStart %v %v", argv, err)
	}
	if _, err := RenderInstallScript(InstallOptions{InstanceBridges: []string{"bcbr0"}}); err == nil {
		t.Fatal("instance bridges without --unprivileged")
	}
	if _, err := RenderInstallScript(InstallOptions{Unprivileged: true, InstanceBridges: []string{"br0; rm -rf /"}}); err == nil {
		t.Fatal("a bridge name that is not a name")
	}
	root2, err := RenderInstallScript(InstallOptions{Version: "0.1.0"})
	if err != nil || strings.Contains(root2, "useradd") || !strings.Contains(root2, "User=root") {
		t.Fatalf("the root install: %v\n%s", err, root2)
	}
}

func TestHostApplyRefusesASpecSignedForAnotherNode(t *testing.T) {
	r := newRig(t, nil)
	hp := &agentv1.HostUnit{Name: "bcd-hugepages.service", Content: []byte("[Service]\nExecStart=/bin/true\n")}
	apply := func(raw json.RawMessage) (*HostResult, error) {
		res := &HostResult{}
		return res, Call(context.Background(), r.socket, OpHostApply, map[string]json.RawMessage{"spec": raw}, res)
	}
	nodeConfig := filepath.Join(r.dir, "node", "config.toml")
	joined, _ := os.ReadFile(nodeConfig)
	units := filepath.Join(r.dir, "units")
	// Before the first apply: without a node id the helper applies nothing,
	// and a link is not read (the bcd user writes that file).
	os.WriteFile(nodeConfig, []byte("data_dir = \"data\"\n"), 0o600)
	_, err := apply(spec(t, 2, commandRoot, hp))
	wantRefused(t, err, string(CodeNodeUnknown))
	os.Remove(nodeConfig)
	os.Symlink(filepath.Join(r.dir, "helper.toml"), nodeConfig)
	_, err = apply(spec(t, 2, commandRoot, hp))
	wantRefused(t, err, string(CodeNodeUnknown))
	os.Remove(nodeConfig)
	os.WriteFile(nodeConfig, joined, 0o600)
	// Another node's spec, properly signed, at a huge generation: refused,
	// nothing written, and this node's own specs still apply.
	_, err = apply(specFor(t, "node_other", 1<<40, commandRoot, hp))
	wantRefused(t, err, "spec-wrong-node")
	if entries, _ := os.ReadDir(units); len(entries) != 0 {
		t.Fatalf("another node's spec wrote %v", entries)
	}
	if _, err := apply(spec(t, 2, commandRoot, hp)); err != nil {
		t.Fatalf("this node's own spec after another's: %v", err)
	}
	if !strings.Contains(r.log.String(), "host.node_bound") {
		t.Fatalf("the first apply did not bind the node:\n%s", r.log)
	}
	// The first apply bound node_1: the bcd user naming another node in
	// config.toml afterwards does not make root apply that node's units.
	os.WriteFile(nodeConfig, []byte("data_dir = \"data\"\nnode_id = \"node_other\"\n"), 0o600)
	_, err = apply(specFor(t, "node_other", 1<<40, commandRoot, hp))
	wantRefused(t, err, string(CodeNodeChanged))
	if strings.Contains(err.Error(), "node_other") {
		t.Fatalf("the refusal echoes what the bcd user wrote: %v", err)
	}
	_, err = apply(spec(t, 3, commandRoot, hp))
	wantRefused(t, err, string(CodeNodeChanged))
	// Without a node id in config.toml (or without the file) the bound one
	// still holds: this node's spec applies, another's does not.
	os.WriteFile(nodeConfig, []byte("data_dir = \"data\"\n"), 0o600)
	if _, err := apply(spec(t, 3, commandRoot, hp)); err != nil {
		t.Fatalf("the bound node's spec: %v", err)
	}
	os.Remove(nodeConfig)
	_, err = apply(specFor(t, "node_other", 1<<40, commandRoot, hp))
	wantRefused(t, err, "spec-wrong-node")
	if _, err := apply(spec(t, 4, commandRoot, hp)); err != nil {
		t.Fatalf("the bound node's spec without config.toml: %v", err)
	}
	// Root rebinds: with host-units.json gone, the next apply binds again.
	os.WriteFile(nodeConfig, []byte("data_dir = \"data\"\nnode_id = \"node_other\"\n"), 0o600)
	os.Remove(filepath.Join(r.dir, "state", "host-units.json"))
	if _, err := apply(specFor(t, "node_other", 1, commandRoot, hp)); err != nil {
		t.Fatalf("after root removed the record: %v", err)
	}
}

var _ hostconfig.System = (*HostUnits)(nil)

// The host reconciler over HostUnits: the signed envelope goes to
// host.apply, each unit to host.start, a failing one is the section's reason.
func TestTheHostReconcilerThroughTheHelper(t *testing.T) {
	r := newRig(t, nil)
	ok := &agentv1.HostUnit{Name: "bcd-ok.service", Content: []byte("[Service]\nType=oneshot\nExecStart=/bin/true\n")}
	bad := &agentv1.HostUnit{Name: "bcd-bad.service", Content: []byte("[Service]\nType=oneshot\nExecStart=/bin/false\n")}
	rec := hostconfig.New(&HostUnits{Socket: r.socket})
	pass := func(raw json.RawMessage, signed bool) converge.Result {
		env, err := pki.ParseEnvelopeJSON(raw)
		if err != nil {
			t.Fatal(err)
		}
		spec := &agentv1.NodeSpec{}
		if err := proto.Unmarshal(env.Payload, spec); err != nil {
			t.Fatal(err)
		}
		res, err := rec.Reconcile(context.Background(), converge.Input{Spec: spec, Envelope: env.Proto(), Signed: signed})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := pass(spec(t, 2, commandRoot, ok, bad), true)
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != hostconfig.ReasonUnitFailed ||
		!strings.Contains(res.Message, "1 of 2 unit(s) failed: bcd-bad.service: helper-command: ") ||
		!strings.Contains(res.Message, "systemctl start bcd-bad.service: Job for bcd-bad.service failed") {
		t.Fatalf("%+v", res)
	}
	for _, u := range []*agentv1.HostUnit{ok, bad} {
		if data, _ := os.ReadFile(filepath.Join(r.dir, "units", u.Name)); string(data) != string(u.Content) {
			t.Fatalf("%s holds %q", u.Name, data)
		}
	}
	if res := pass(spec(t, 3, commandRoot, ok), true); res.State != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatalf("%+v", res)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "units", bad.Name)); !os.IsNotExist(err) {
		t.Fatal("the dropped unit remains")
	}
	// A spec signed by a key the helper does not trust: the helper refuses
	// it even though the reconciler was told it is signed.
	res = pass(spec(t, 4, pki.DeriveEd25519("helper-test", "someone-else"), ok), true)
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || !strings.Contains(res.Message, "installing the units: dsse-unknown-key") {
		t.Fatalf("%+v", res)
	}
	if got, want := r.callLog(t), "systemctl start bcd-ok.service\nsystemctl start bcd-bad.service\nsystemctl start bcd-ok.service\n"; got != want {
		t.Fatalf("systemctl calls:\n%s\nwant:\n%s", got, want)
	}
	if err := (&HostUnits{Socket: r.socket}).Install(context.Background(), nil, nil); err == nil {
		t.Fatal("an Install without the envelope")
	}
}

func TestLoadConfigRefusesAKeyInAnotherCase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "helper.toml")
	if err := os.WriteFile(path, []byte("[helper]\nSocket = \"/run/bcd-helper.sock\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `no key "helper.Socket"`) {
		t.Fatalf("a key in another case: %v", err)
	}
}
