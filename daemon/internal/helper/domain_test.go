// Tests of the domain operations against a fake virsh, and of their disks:
// a disk is a regular file of the node's user with one link, reached
// without a symbolic link, and the XML names root's path where it is bound
// (a fake binder here; the bind mount itself as root in a mount namespace
// of its own, TestTheBindShowsTheCheckedVolume, and in roote2e).

package helper

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"bcd/internal/runtime/plan"
	"golang.org/x/sys/unix"
)

// fakeBinder stands for the bind mounts: it records, by target, the
// device and inode of the descriptor bound there, and the targets bound
// read-only.
type fakeBinder struct {
	mu       sync.Mutex
	bound    map[string][2]uint64
	readOnly map[string]bool
}

func (b *fakeBinder) Bind(fd int, target string, readOnly bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bound[target] = [2]uint64{st.Dev, st.Ino}
	if b.readOnly == nil {
		b.readOnly = map[string]bool{}
	}
	b.readOnly[target] = readOnly
	return nil
}

func (b *fakeBinder) Unbind(target string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.bound, target)
	return nil
}

func (b *fakeBinder) Bound(target string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.bound[target]
	return ok, nil
}

// binds is what is bound, by target.
func (b *fakeBinder) binds() map[string][2]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.bound)
}

// inode is the device and inode of path.
func inode(t *testing.T, path string) [2]uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return [2]uint64{st.Dev, st.Ino}
}

// writeVolume writes a volume of the node (the test's user) in dir.
func writeVolume(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("a volume"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDomainsThroughVirsh(t *testing.T) {
	r := newRig(t, nil)
	vm := DomainArgs{ID: "vm1", VCPUs: 2, MemoryBytes: 1 << 30, NICs: []NIC{{Bridge: "bcbr0", MAC: "52:54:00:12:34:56"}}}
	err := Call(context.Background(), r.socket, OpDomainDefine, DomainArgs{ID: "vm1", VCPUs: 2, MemoryBytes: 1 << 30, NICs: []NIC{{Bridge: "br-mgmt"}}}, nil)
	wantRefused(t, err, string(CodeBridge))
	if !strings.Contains(err.Error(), `domain: bridge "br-mgmt" is not an instance network`) {
		t.Fatalf("error %v", err)
	}
	if r.callLog(t) != "" {
		t.Fatal("virsh ran for a refused domain")
	}
	wantRefused(t, Call(context.Background(), r.socket, OpDomainDefine, DomainArgs{ID: "../x", VCPUs: 1, MemoryBytes: 1 << 30}, nil), string(CodeArgs))
	for _, op := range []string{OpDomainDefine, OpDomainStart, OpDomainDestroy, OpDomainUndefine} {
		if err := Call(context.Background(), r.socket, op, vm, nil); err != nil {
			t.Fatal(err)
		}
	}
	xmlPath := filepath.Join(r.dir, "state", "domains", "bcd-vm1.xml")
	want := "virsh define " + xmlPath + "\nvirsh start bcd-vm1\nvirsh destroy bcd-vm1\nvirsh undefine bcd-vm1\n"
	if got := r.callLog(t); got != want {
		t.Fatalf("virsh calls:\n%s\nwant:\n%s", got, want)
	}
	xml, _ := plan.Render(domainOf(&vm))
	for _, s := range []string{`<name>bcd-vm1</name>`, `<source bridge="bcbr0"></source>`, `<mac address="52:54:00:12:34:56"></mac>`, `<vcpu placement="static">2</vcpu>`} {
		if !strings.Contains(string(xml), s) {
			t.Fatalf("domain XML lacks %s:\n%s", s, xml)
		}
	}
	// A disk outside [helper] volume_dirs, or a tap that is not the
	// instance's, is refused before virsh runs; domain.state reads virsh.
	before := r.callLog(t)
	outside := vm
	outside.Disks = []Disk{{Path: "/etc/shadow"}}
	wantRefused(t, Call(context.Background(), r.socket, OpDomainDefine, outside, nil), string(CodeArgs))
	sneaky := vm
	sneaky.Disks = []Disk{{Path: "/var/lib/bcd/volumes/../../../etc/shadow"}}
	wantRefused(t, Call(context.Background(), r.socket, OpDomainDefine, sneaky, nil), string(CodeArgs))
	otherTap := vm
	otherTap.NICs = []NIC{{Bridge: "bcbr0", Tap: TapName("vm2", 0)}}
	wantRefused(t, Call(context.Background(), r.socket, OpDomainDefine, otherTap, nil), string(CodeArgs))
	if r.callLog(t) != before {
		t.Fatal("virsh ran for a refused domain")
	}
	withDisk := vm
	withDisk.NICs = []NIC{{Bridge: "bcbr0", Tap: TapName("vm1", 0)}}
	data := writeVolume(t, r.vols, "data.raw")
	withDisk.Disks = []Disk{{Path: data, Serial: "data"}}
	if err := Call(context.Background(), r.socket, OpDomainDefine, withDisk, nil); err != nil {
		t.Fatal(err)
	}
	// The XML names root's path, where the checked volume is bound.
	bound := filepath.Join(r.dir, "state", "disks", "bcd-vm1", "vda")
	xml, _ = os.ReadFile(xmlPath)
	for _, s := range []string{`<source file="` + bound + `"></source>`, `<target dev="` + TapName("vm1", 0) + `" managed="no"></target>`} {
		if !strings.Contains(string(xml), s) {
			t.Fatalf("domain XML lacks %s:\n%s", s, xml)
		}
	}
	if strings.Contains(string(xml), data) {
		t.Fatalf("domain XML names the node's path:\n%s", xml)
	}
	if got := r.binder.binds(); len(got) != 1 || got[bound] != inode(t, data) {
		t.Fatalf("binds %v, want %s at %s", got, data, bound)
	}
	st := &StateResult{}
	if err := Call(context.Background(), r.socket, OpDomainState, DomainArgs{ID: "vm1"}, st); err != nil || st.State != "defined" {
		t.Fatalf("domain.state: %v %+v", err, st)
	}
}

// defineWith defines vm1 with one disk at path.
func (r *rig) defineWith(path string) error {
	return Call(context.Background(), r.socket, OpDomainDefine, DomainArgs{ID: "vm1", VCPUs: 1, MemoryBytes: 1 << 30,
		NICs: []NIC{{Bridge: "bcbr0"}}, Disks: []Disk{{Path: path, Serial: "data"}}}, nil)
}

func TestDomainDefineTakesOnlyTheNodesOwnVolumes(t *testing.T) {
	r := newRig(t, nil)
	elsewhere := writeVolume(t, r.dir, "elsewhere.raw") // the node's, outside the volume directories
	refused := map[string]struct{ path, why string }{
		"a symbolic link to another file": {filepath.Join(r.vols, "link.raw"), "is a symbolic link"},
		"a hard link":                     {filepath.Join(r.vols, "hard.raw"), "has 2 links"},
		"a directory":                     {filepath.Join(r.vols, "dir.raw"), "it is a directory"},
		"a FIFO":                          {filepath.Join(r.vols, "fifo.raw"), "it is a FIFO"},
		"a symbolic link as the volume directory": {writeVolume(t, r.volsLink, "linked.raw"),
			"a directory on its way is a symbolic link"},
		"no file": {filepath.Join(r.vols, "missing.raw"), "no such volume"},
	}
	if err := os.Symlink(elsewhere, refused["a symbolic link to another file"].path); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(writeVolume(t, r.vols, "hard-twin.raw"), refused["a hard link"].path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(refused["a directory"].path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(refused["a FIFO"].path, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		theirs := writeVolume(t, r.vols, "theirs.raw")
		if err := os.Chown(theirs, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		refused["another user's file"] = struct{ path, why string }{theirs, "is owned by uid 4242, not the node's user"}
		device := filepath.Join(r.vols, "null.raw")
		if err := unix.Mknod(device, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		refused["a device"] = struct{ path, why string }{device, "it is a character device"}
	} else {
		t.Log("not root: another user's file and a device are not made (they need chown and mknod)")
	}
	for name, c := range refused {
		err := r.defineWith(c.path)
		wantRefused(t, err, string(CodeDisk))
		if !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want %q", name, err, c.why)
		}
	}
	if r.callLog(t) != "" || len(r.binder.binds()) != 0 {
		t.Fatalf("a refused disk ran virsh (%q) or was bound (%v)", r.callLog(t), r.binder.binds())
	}
	if entries, _ := os.ReadDir(filepath.Join(r.dir, "state", "disks", "bcd-vm1")); len(entries) != 0 {
		t.Fatalf("a refused define left %v", entries)
	}
	// A path outside the volume directories is refused before it is opened.
	wantRefused(t, r.defineWith(elsewhere), string(CodeArgs))
	// The node's own regular file is taken.
	good := writeVolume(t, r.vols, "good.raw")
	if err := r.defineWith(good); err != nil {
		t.Fatal(err)
	}
	if got := r.binder.binds(); len(got) != 1 || got[filepath.Join(r.dir, "state", "disks", "bcd-vm1", "vda")] != inode(t, good) {
		t.Fatalf("binds %v", got)
	}
}

func TestDomainStartChecksTheVolumesAgainAfterAReboot(t *testing.T) {
	r := newRig(t, nil)
	good := writeVolume(t, r.vols, "data.raw")
	if err := r.defineWith(good); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(r.dir, "state", "disks", "bcd-vm1", "vda")
	start := func() error { return Call(context.Background(), r.socket, OpDomainStart, DomainArgs{ID: "vm1"}, nil) }
	// Bound, a start binds nothing again: the volume swapped for a link
	// since changes nothing, the bind is the inode that was checked.
	checked := inode(t, good)
	os.Remove(good)
	os.Symlink("/etc/hostname", good)
	if err := start(); err != nil {
		t.Fatal(err)
	}
	if got := r.binder.binds()[target]; got != checked {
		t.Fatalf("bound %v, want the checked %v", got, checked)
	}
	// After a reboot (nothing bound), the volume is checked again: a link
	// is refused and virsh start does not run.
	r.binder.Unbind(target)
	before := r.callLog(t)
	wantRefused(t, start(), string(CodeDisk))
	if r.callLog(t) != before || len(r.binder.binds()) != 0 {
		t.Fatal("a start after a reboot took a link for a volume")
	}
	os.Remove(good)
	writeVolume(t, r.vols, "data.raw")
	if err := start(); err != nil {
		t.Fatal(err)
	}
	if got := r.binder.binds()[target]; got != inode(t, good) {
		t.Fatalf("bound %v after the reboot, want %v", got, inode(t, good))
	}
	// undefine unbinds and removes the disks and their record.
	if err := Call(context.Background(), r.socket, OpDomainUndefine, DomainArgs{ID: "vm1"}, nil); err != nil {
		t.Fatal(err)
	}
	if len(r.binder.binds()) != 0 {
		t.Fatalf("binds after undefine: %v", r.binder.binds())
	}
	for _, p := range []string{filepath.Dir(target), filepath.Join(r.dir, "state", "domains", "bcd-vm1.disks.json")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s remains after undefine (%v)", p, err)
		}
	}
}

func TestADomainOfAnEarlierHelperIsNotStartedWithTheNodesPath(t *testing.T) {
	r := newRig(t, nil)
	dir := filepath.Join(r.dir, "state", "domains")
	os.MkdirAll(dir, 0o700)
	old := `<domain type="kvm"><name>bcd-vm9</name><devices><disk type="file" device="disk"><source file="` +
		writeVolume(t, r.vols, "old.raw") + `"></source></disk></devices></domain>`
	if err := os.WriteFile(filepath.Join(dir, "bcd-vm9.xml"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Call(context.Background(), r.socket, OpDomainStart, DomainArgs{ID: "vm9"}, nil)
	wantRefused(t, err, string(CodeDisk))
	if !strings.Contains(err.Error(), "defined by an earlier helper, with the node's path ") || r.callLog(t) != "" {
		t.Fatalf("%v (virsh: %q)", err, r.callLog(t))
	}
	// One without disks starts.
	if err := os.WriteFile(filepath.Join(dir, "bcd-vm9.xml"), []byte(`<domain type="kvm"><name>bcd-vm9</name></domain>`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Call(context.Background(), r.socket, OpDomainStart, DomainArgs{ID: "vm9"}, nil); err != nil {
		t.Fatal(err)
	}
}

// The real bind, as root, in a mount namespace of this test's own thread
// (locked to it and never unlocked: the thread, and its namespace, end with
// the test): the bound path shows the checked volume whatever happens to
// the node's path after, and Unbind takes it off.
func TestTheBindShowsTheCheckedVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a bind mount needs root (roote2e binds the helper's disks as root)")
	}
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Skipf("no mount namespace of its own: %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	vols := filepath.Join(dir, "volumes")
	os.Mkdir(vols, 0o700)
	s := &Server{cfg: &Config{Helper: Settings{VolumeDirs: []string{vols}}}, uid: 0, binder: mountBinder{}}
	good := writeVolume(t, vols, "data.raw")
	v, err := s.openVolume(good, s.cfg.Helper.VolumeDirs)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "vda")
	err = s.bindAt(v, target, false)
	v.close()
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(good)
	os.Symlink("/etc/hostname", good)
	if data, err := os.ReadFile(target); err != nil || string(data) != "a volume" {
		t.Fatalf("the bound path reads %q (%v), want the checked volume", data, err)
	}
	if bound, err := s.binder.Bound(target); err != nil || !bound {
		t.Fatalf("Bound %v %v", bound, err)
	}
	if bound, err := s.binder.Bound(vols); err != nil || bound {
		t.Fatalf("a plain directory is bound: %v %v", bound, err)
	}
	if err := s.binder.Unbind(target); err != nil {
		t.Fatal(err)
	}
	if bound, _ := s.binder.Bound(target); bound {
		t.Fatal("still bound after Unbind")
	}
	if data, _ := os.ReadFile(target); len(data) != 0 {
		t.Fatalf("the mount point reads %q after Unbind", data)
	}
	if err := s.binder.Unbind(target); err != nil {
		t.Fatalf("a second Unbind: %v", err)
	}
}
