// The disks of a domain, as the helper hands them to libvirt. A disk path
// the node names is only lexically a volume (absolute, clean, directly
// under a [helper] volume_dirs entry) until it is opened, and the volume
// directory is the node user's: evil.raw could be a link to /etc/shadow
// or /dev/sda, and libvirt (root) opens a disk's path, and with dynamic
// ownership chowns it, at every start, not at the define. So:
//
//   - openVolume opens the path with openat2(RESOLVE_NO_SYMLINKS) as an
//     O_PATH descriptor (no symbolic link in any component, the volume
//     directory and its parents included; nothing opened for reading, so a
//     FIFO or a device is never opened) and checks that descriptor: a
//     regular file, owned by the node's user, with one link (instance-disk
//     otherwise);
//   - the verified descriptor is bind-mounted (/proc/self/fd/N, which the
//     kernel resolves to the open file itself) onto a path of root's,
//     <state_dir>/disks/bcd-<id>/vda, vdb, …, and that path is the one the
//     domain XML names: libvirt reaches it through root's directories only,
//     and whatever the node does to its own directory later, the path shows
//     the inode that was checked. (/proc/self/fd/N itself is no use to
//     libvirtd: it is the helper's descriptor, gone when the request ends.)
//     A reboot unmounts the binds: domain.start binds again what is not
//     bound, checking each volume again; domain.undefine unmounts them.
//
// The other things the helper takes from the node, audited alike:
//
//   - taps are names, never paths: a NIC's tap must be TapName(id, i) (hex
//     of a hash) and its bridge one of [helper] instance_bridges, checked
//     before ip runs;
//   - the base image a domain boots from: opened and checked as a volume,
//     but under [helper] image_dirs, and bound read-only at
//     <state_dir>/disks/bcd-<id>/base; the guest's writes go to an overlay
//     of root's the helper makes over it (guest.go), whose chain the XML
//     says in full, so no backing file name is read from an image;
//   - seeds: the seed disk is root's, made by the helper from the seed's
//     files (guest.go); the node's bytes are only the files inside it;
//   - host units (host.go): their names and bytes are the signed payload's,
//     verified against root's command roots, and written under unitName
//     into root's unit_dir; nothing of a unit is the node's to choose, and
//     what its ExecStart= runs is its signer's decision (the helper cannot
//     judge a unit's every Exec*=, What= or hook piecewise, so it does not
//     pretend to);
//   - CDI specs: the helper takes none (bcd writes its own);
//   - the staged binary (update.go): update.Slots opens it O_NOFOLLOW,
//     checks the node's uid on the descriptor, and copies only bytes of the
//     signed digest;
//   - the node's config.toml (host.go): read for node_id alone, opened
//     O_NOFOLLOW, a regular file, its content never echoed.

package helper

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"bcd/internal/config"
	"bcd/internal/refusal"
	"bcd/internal/runtime/plan"
	"golang.org/x/sys/unix"
)

// Binder makes a verified volume reachable by libvirt at a path of root's.
// The helper's is mountBinder; tests that cannot mount replace it.
type Binder interface {
	// Bind makes target, an existing file, show the file open as fd,
	// read-only or not.
	Bind(fd int, target string, readOnly bool) error
	// Unbind undoes every Bind on target (nothing when there is none).
	Unbind(target string) error
	// Bound says whether target shows a bound volume now.
	Bound(target string) (bool, error)
}

// mountBinder bind-mounts: the binds of a host.
type mountBinder struct{}

func (mountBinder) Bind(fd int, target string, readOnly bool) error {
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", fd), target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting the volume on %s: %w", target, err)
	}
	if readOnly {
		// A bind takes the read-only flag only from a remount of it.
		if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			return fmt.Errorf("making the bind on %s read-only: %w", target, err)
		}
	}
	return nil
}

// maxStacked bounds the binds Unbind takes off one target.
const maxStacked = 16

func (mountBinder) Unbind(target string) error {
	for range maxStacked {
		err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // not a mount point (any more)
		}
		if err != nil {
			return fmt.Errorf("unmounting %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmounting %s: still a mount point after %d unmounts", target, maxStacked)
}

func (mountBinder) Bound(target string) (bool, error) {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, target, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &st)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("statx %s: %w", target, err)
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, fmt.Errorf("statx %s: this kernel does not say whether a path is a mount point (Linux 5.8 does)", target)
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}

// volume is a disk path opened and checked by openVolume.
type volume struct {
	fd   int
	path string
}

func (v *volume) close() { _ = unix.Close(v.fd) }

// openVolume opens a disk path of the node (directly under one of dirs)
// without following a symbolic link anywhere on the way, as O_PATH, and
// checks the descriptor: a regular file of the node's user with one link
// (instance-disk otherwise).
func (s *Server) openVolume(path string, dirs []string) (*volume, error) {
	if !plan.DiskUnder(path, dirs) {
		return nil, refuse(CodeArgs, "disk %q is not a file under %v", path, dirs)
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, how)
	for tries := 0; errors.Is(err, unix.EAGAIN) && tries < 8; tries++ {
		fd, err = unix.Openat2(unix.AT_FDCWD, path, how)
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, refuse(CodeDisk, "disk %s: a directory on its way is a symbolic link", path)
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return nil, refuse(CodeDisk, "disk %s: no such volume", path)
	case errors.Is(err, unix.ENOSYS):
		return nil, refuse(CodeDisk, "disk %s: this kernel has no openat2 (Linux 5.6), so the helper cannot open it safely", path)
	case err != nil:
		return nil, refusal.Wrap(CodeDisk, err, "disk "+path)
	}
	v := &volume{fd: fd, path: path}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		v.close()
		return nil, refusal.Wrap(CodeDisk, err, "disk "+path)
	}
	why := ""
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		why = "is a symbolic link"
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		why = "is not a regular file: it is " + kindOf(st.Mode)
	case st.Uid != s.uid:
		why = fmt.Sprintf("is owned by uid %d, not the node's user (uid %d)", st.Uid, s.uid)
	case st.Nlink != 1:
		why = fmt.Sprintf("has %d links (a volume has one)", st.Nlink)
	}
	if why != "" {
		v.close()
		return nil, refuse(CodeDisk, "disk %s %s", path, why)
	}
	return v, nil
}

// kindOf names what a stat mode that is not a regular file's is.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("of type %#o", mode&unix.S_IFMT)
}

// disksDir is <state_dir>/disks/bcd-<id>: root's, where the domain's disks are bound.
func (s *Server) disksDir(id string) string {
	return filepath.Join(s.cfg.Helper.StateDir, "disks", plan.DomainName(id))
}

// diskRecord is <state_dir>/domains/bcd-<id>.disks.json, the domain's
// record: the node's volume paths, in order, and its base image (path and
// digest), so that domain.start can check and bind them again after a
// reboot and a redefinition over the same base keeps the overlay; and its
// memory and balloon floor, which domain.setmem holds it between.
func (s *Server) diskRecord(id string) string {
	return filepath.Join(s.cfg.Helper.StateDir, "domains", plan.DomainName(id)+".disks.json")
}

// domainRecord is what diskRecord holds.
type domainRecord struct {
	Volumes    []string `json:"volumes"`
	Base       string   `json:"base,omitempty"`
	Digest     string   `json:"digest,omitempty"`
	Memory     uint64   `json:"memory_bytes,omitempty"`
	Floor      uint64   `json:"memory_floor_bytes,omitempty"`
	HugePages  bool     `json:"hugepages,omitempty"`
	HasBalloon bool     `json:"balloon,omitempty"`
}

// readRecord reads a domain's record (nil when it has none).
func (s *Server) readRecord(id string) (*domainRecord, error) {
	data, err := os.ReadFile(s.diskRecord(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec := &domainRecord{}
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, fmt.Errorf("%s: %w", s.diskRecord(id), err)
	}
	return rec, nil
}

// baseTarget is where a domain's base image is bound.
func (s *Server) baseTarget(id string) string { return filepath.Join(s.disksDir(id), "base") }

// boundDisks are where a domain's disks are bound.
type boundDisks struct {
	volumes []string
	base    string
}

// bindDisks checks every volume and the base image of the domain and
// binds them at paths of root's (the base read-only), replacing what an
// earlier define bound, and records the node's. Nothing is bound when a
// disk is refused.
func (s *Server) bindDisks(a *DomainArgs) (*boundDisks, error) {
	var opened []*volume
	defer func() {
		for _, v := range opened {
			v.close()
		}
	}()
	rec := &domainRecord{Volumes: make([]string, 0, len(a.Disks)), Memory: a.MemoryBytes, Floor: a.MemoryFloorBytes,
		HugePages: a.HugePageBytes != 0, HasBalloon: a.HugePageBytes == 0}
	for _, d := range a.Disks {
		v, err := s.openVolume(d.Path, s.cfg.Helper.VolumeDirs)
		if err != nil {
			return nil, err
		}
		opened = append(opened, v)
		rec.Volumes = append(rec.Volumes, d.Path)
	}
	var base *volume
	if a.Image != nil {
		v, err := s.openVolume(a.Image.Base, s.cfg.Helper.ImageDirs)
		if err != nil {
			return nil, err
		}
		opened = append(opened, v)
		base, rec.Base, rec.Digest = v, a.Image.Base, a.Image.Digest
	}
	id := a.ID
	dir := s.disksDir(id)
	if err := s.unbindDisks(id); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.cfg.Helper.StateDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	// qemu opens the disks as its own user: root's directories it may only cross.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, err
		}
	}
	out := &boundDisks{volumes: make([]string, len(a.Disks))}
	for i := range a.Disks {
		out.volumes[i] = filepath.Join(dir, plan.DiskDev(i))
		if err := s.bindAt(opened[i], out.volumes[i], false); err != nil {
			_ = s.unbindDisks(id)
			return nil, err
		}
	}
	if base != nil {
		out.base = s.baseTarget(id)
		if err := s.bindAt(base, out.base, true); err != nil {
			_ = s.unbindDisks(id)
			return nil, err
		}
	}
	record, _ := json.Marshal(rec)
	if err := config.WriteFileAtomic(s.diskRecord(id), record, 0o600); err != nil {
		_ = s.unbindDisks(id)
		return nil, err
	}
	return out, nil
}

// bindAt binds the verified volume at target, a mount point of root's it
// makes (an empty file), read-only or not.
func (s *Server) bindAt(v *volume, target string, readOnly bool) error {
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	return s.binder.Bind(v.fd, target, readOnly)
}

// rebindDisks binds again, each checked again, the disks of the domain's
// record that are not bound (a reboot unmounted them). A domain without a
// record was defined by an earlier helper, with the node's paths in its
// XML: it is not started until it is defined again.
func (s *Server) rebindDisks(id string) error {
	rec, err := s.readRecord(id)
	if err != nil {
		return err
	}
	if rec == nil {
		return s.checkUnrecorded(id)
	}
	type disk struct {
		path, target string
		dirs         []string
		readOnly     bool
	}
	var disks []disk
	for i, path := range rec.Volumes {
		disks = append(disks, disk{path, filepath.Join(s.disksDir(id), plan.DiskDev(i)), s.cfg.Helper.VolumeDirs, false})
	}
	if rec.Base != "" {
		disks = append(disks, disk{rec.Base, s.baseTarget(id), s.cfg.Helper.ImageDirs, true})
	}
	for _, d := range disks {
		bound, err := s.binder.Bound(d.target)
		if err != nil {
			return err
		}
		if bound {
			continue
		}
		v, err := s.openVolume(d.path, d.dirs)
		if err != nil {
			return err
		}
		err = s.bindAt(v, d.target, d.readOnly)
		v.close()
		if err != nil {
			return err
		}
		s.log.Info("domain.disk_bound", "domain", plan.DomainName(id), "disk", d.path, "at", d.target)
	}
	return nil
}

// checkUnrecorded refuses to start a domain whose XML (the helper's own
// file) names a disk outside its bind directory: an earlier helper put the
// node's path there.
func (s *Server) checkUnrecorded(id string) error {
	data, err := os.ReadFile(filepath.Join(s.cfg.Helper.StateDir, "domains", plan.DomainName(id)+".xml"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // not the helper's domain: virsh says what it knows of it
	}
	if err != nil {
		return err
	}
	var doc struct {
		Disks []struct {
			Source struct {
				File string `xml:"file,attr"`
			} `xml:"source"`
		} `xml:"devices>disk"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("the domain XML of %s: %w", plan.DomainName(id), err)
	}
	for _, d := range doc.Disks {
		if !strings.HasPrefix(d.Source.File, s.disksDir(id)+"/") {
			return refuse(CodeDisk, "%s was defined by an earlier helper, with the node's path %s in its XML: define it again", plan.DomainName(id), d.Source.File)
		}
	}
	return nil
}

// unbindDisks unmounts and removes every bound disk of the domain, and its record.
func (s *Server) unbindDisks(id string) error {
	dir := s.disksDir(id)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		target := filepath.Join(dir, e.Name())
		if err := s.binder.Unbind(target); err != nil {
			return err
		}
		if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(s.diskRecord(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeDisks is unbindDisks and the directory.
func (s *Server) removeDisks(id string) error {
	if err := s.unbindDisks(id); err != nil {
		return err
	}
	if err := os.Remove(s.disksDir(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
