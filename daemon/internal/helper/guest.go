// What the helper makes and checks for a guest beyond its volumes: the
// files of root's a domain uses (the boot disk's qcow2 overlay over the
// bound base, made with qemu-img and kept across redefinitions over the
// same base; the NoCloud seed disk, a FAT image labelled CIDATA made with
// mkfs.vfat and mcopy from the seed's files; the console log), the
// direct-boot kernel of [helper] guest_kernel, the host facts a plan
// field needs (checkHost: its CPUs and NUMA nodes, a pool of huge pages of
// the size, each GPU a display-class PCI device in an IOMMU group: else
// instance-plan), and the running guest's balloon (domain.setmem, between
// its floor and its memory) and statistics (domain.stats, from virsh
// domstats).

package helper

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"bcd/internal/config"
	"bcd/internal/runtime"
	"bcd/internal/runtime/plan"
)

// guestPath is a file of root's for a domain: <state_dir>/<kind>/bcd-<id><ext>.
func (s *Server) guestPath(kind, id, ext string) string {
	return filepath.Join(s.cfg.Helper.StateDir, kind, plan.DomainName(id)+ext)
}

// localOf sets what the helper chooses for a domain: its overlay (with an
// image), its seed disk (with a seed), its console log, and the kernel of
// [helper] guest_kernel for a domain that boots an image.
func (s *Server) localOf(d *runtime.Domain, seed bool) *runtime.Domain {
	d.Local = runtime.Local{ConsoleLog: s.guestPath("consoles", d.ID, ".log")}
	if d.Image != nil {
		d.Local.Overlay = s.guestPath("overlays", d.ID, ".qcow2")
		if k := s.cfg.Helper.GuestKernel; k != "" {
			d.Local.Kernel = &runtime.DirectBoot{Kernel: k, Initrd: s.cfg.Helper.GuestInitrd, Cmdline: s.cfg.Helper.GuestCmdline}
		}
	}
	if seed {
		d.Local.SeedDisk = s.guestPath("seeds", d.ID, ".img")
	}
	return d
}

// guestDir makes a directory of root's that qemu may cross.
func (s *Server) guestDir(kind string) error {
	dir := filepath.Join(s.cfg.Helper.StateDir, kind)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	return os.Chmod(dir, 0o711)
}

// makeOverlay makes the boot disk's overlay over the bound base, unless
// the overlay there is over the same image (a redefinition keeps the
// guest's disk); it says whether it made one.
func (s *Server) makeOverlay(ctx context.Context, a *DomainArgs, d *runtime.Domain) (bool, error) {
	overlay, stamp := d.Local.Overlay, s.guestPath("overlays", d.ID, ".digest")
	if was, err := os.ReadFile(stamp); err == nil && string(was) == a.Image.Digest {
		if _, err := os.Stat(overlay); err == nil {
			return false, nil
		}
	}
	if err := s.guestDir("overlays"); err != nil {
		return false, err
	}
	_ = os.Remove(overlay)
	if _, err := run(ctx, s.cfg.Helper.QemuImg, "create", "-q", "-f", plan.FormatQcow2, "-F", d.Image.Format, "-b", d.Image.Base, overlay); err != nil {
		return false, err
	}
	if err := config.WriteFileAtomic(stamp, []byte(a.Image.Digest), 0o600); err != nil {
		_ = os.Remove(overlay)
		return false, err
	}
	s.log.Info("domain.overlay", "domain", plan.DomainName(d.ID), "image", a.Image.Digest, "overlay", overlay)
	return true, nil
}

// makeSeedDisk writes the seed disk: a 1 MiB FAT image labelled CIDATA
// holding meta-data and network-config, made beside its place and renamed
// there.
func (s *Server) makeSeedDisk(ctx context.Context, seed *SeedArgs, path string) error {
	if err := s.guestDir("seeds"); err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Dir(path), ".seed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	img := filepath.Join(work, "cidata.img")
	if _, err := run(ctx, s.cfg.Helper.MkfsVfat, "-n", "CIDATA", "-C", img, "1024"); err != nil {
		return err
	}
	for name, content := range map[string]string{"meta-data": seed.MetaData, "network-config": seed.NetworkConfig} {
		file := filepath.Join(work, name)
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			return err
		}
		if _, err := run(ctx, s.cfg.Helper.Mcopy, "-o", "-i", img, file, "::"+name); err != nil {
			return err
		}
	}
	if err := os.Chmod(img, 0o644); err != nil {
		return err
	}
	return os.Rename(img, path)
}

// removeGuestFiles removes a domain's overlay, seed disk and console log.
func (s *Server) removeGuestFiles(id string) error {
	for _, p := range []string{s.guestPath("overlays", id, ".qcow2"), s.guestPath("overlays", id, ".digest"),
		s.guestPath("seeds", id, ".img"), s.guestPath("consoles", id, ".log")} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// sysPath is a file under the host's /sys (Options.SysRoot in tests).
func (s *Server) sysPath(parts ...string) string {
	return filepath.Join(append([]string{s.sysRoot}, parts...)...)
}

// checkHost refuses (instance-plan) a plan field this host cannot apply:
// a pinned CPU or a NUMA node it lacks, huge pages of a size it has none
// of, a GPU that is not a display-class PCI device in an IOMMU group.
func (s *Server) checkHost(a *DomainArgs) error {
	if c := a.CPUs; c != nil {
		if _, err := os.Stat(s.sysPath("devices", "system", "node", fmt.Sprintf("node%d", c.Node))); err != nil {
			return refuse(CodePlan, "NUMA node %d: this host has none", c.Node)
		}
		for _, cpu := range c.HostCPUs {
			if _, err := os.Stat(s.sysPath("devices", "system", "cpu", fmt.Sprintf("cpu%d", cpu))); err != nil {
				return refuse(CodePlan, "host CPU %d: this host has none", cpu)
			}
		}
	}
	if size := a.HugePageBytes; size != 0 {
		pages := s.sysPath("kernel", "mm", "hugepages", fmt.Sprintf("hugepages-%dkB", size/1024), "nr_hugepages")
		data, err := os.ReadFile(pages)
		if n, perr := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); err != nil || perr != nil || n == 0 {
			return refuse(CodePlan, "huge pages of %d KiB: this host reserved none (%s)", size/1024, pages)
		}
	}
	for _, g := range a.GPUs {
		dev := s.sysPath("bus", "pci", "devices", g.Address)
		class, err := os.ReadFile(filepath.Join(dev, "class"))
		if err != nil {
			return refuse(CodePlan, "GPU %d: no PCI device %s on this host", g.Index, g.Address)
		}
		if !strings.HasPrefix(strings.TrimSpace(string(class)), "0x03") {
			return refuse(CodePlan, "GPU %d: PCI device %s is of class %s, not a display controller", g.Index, g.Address, strings.TrimSpace(string(class)))
		}
		if _, err := os.Stat(filepath.Join(dev, "iommu_group")); err != nil {
			return refuse(CodePlan, "GPU %d: PCI device %s is in no IOMMU group (VFIO passthrough needs the IOMMU on)", g.Index, g.Address)
		}
	}
	return nil
}

// SetMemArgs are domain.setmem's: the memory the running guest keeps.
type SetMemArgs struct {
	ID          string `json:"id"`
	MemoryBytes uint64 `json:"memory_bytes"`
}

// setMem sets a running guest's memory through its balloon (virsh setmem
// --live), between its floor and its memory (instance-plan otherwise, or
// for a guest without a balloon).
func (s *Server) setMem(ctx context.Context, req Request) (any, error) {
	var a SetMemArgs
	if err := decode(req, &a); err != nil {
		return nil, err
	}
	if !runtime.IDPattern.MatchString(a.ID) {
		return nil, refuse(CodeArgs, "instance id %q", a.ID)
	}
	rec, err := s.readRecord(a.ID)
	if err != nil {
		return nil, err
	}
	if rec == nil || !rec.HasBalloon || rec.Floor == 0 {
		return nil, refuse(CodePlan, "%s has no balloon floor: its memory is not given back", plan.DomainName(a.ID))
	}
	if a.MemoryBytes < rec.Floor || a.MemoryBytes > rec.Memory {
		return nil, refuse(CodePlan, "%d bytes for %s: between its floor %d and its memory %d", a.MemoryBytes, plan.DomainName(a.ID), rec.Floor, rec.Memory)
	}
	if _, err := run(ctx, s.cfg.Helper.Virsh, "setmem", plan.DomainName(a.ID), strconv.FormatUint(a.MemoryBytes/1024, 10), "--live"); err != nil {
		return nil, err
	}
	s.log.Info("domain.setmem", "domain", plan.DomainName(a.ID), "memory_bytes", a.MemoryBytes)
	return map[string]uint64{"memory_bytes": a.MemoryBytes}, nil
}

// StatsResult is domain.stats': what virsh domstats says of a running guest.
type StatsResult struct {
	// CPUTimeNs is the guest's CPU time.
	CPUTimeNs uint64 `json:"cpu_time_ns"`
	// BalloonCurrentBytes is what the guest has now; BalloonMaximumBytes
	// its memory; AvailableBytes and UnusedBytes what its balloon driver
	// last reported (0 before it did); RSSBytes the QEMU process's.
	BalloonCurrentBytes uint64 `json:"balloon_current_bytes"`
	BalloonMaximumBytes uint64 `json:"balloon_maximum_bytes"`
	AvailableBytes      uint64 `json:"available_bytes"`
	UnusedBytes         uint64 `json:"unused_bytes"`
	RSSBytes            uint64 `json:"rss_bytes"`
	// Disk and network I/O, summed over its disks and NICs.
	DiskReadBytes  uint64 `json:"disk_read_bytes"`
	DiskWriteBytes uint64 `json:"disk_write_bytes"`
	NetRxBytes     uint64 `json:"net_rx_bytes"`
	NetTxBytes     uint64 `json:"net_tx_bytes"`
}

// stats runs virsh domstats for a guest and sums its counters.
func (s *Server) stats(ctx context.Context, req Request) (any, error) {
	var a DomainArgs
	if err := decode(req, &a); err != nil {
		return nil, err
	}
	if !runtime.IDPattern.MatchString(a.ID) {
		return nil, refuse(CodeArgs, "instance id %q", a.ID)
	}
	out, err := run(ctx, s.cfg.Helper.Virsh, "domstats", plan.DomainName(a.ID), "--cpu-total", "--balloon", "--block", "--interface")
	if err != nil {
		return nil, err
	}
	return ParseDomstats(out), nil
}

// ParseDomstats reads `virsh domstats` lines (key=value; balloon sizes in
// KiB) into a StatsResult.
func ParseDomstats(out string) *StatsResult {
	r := &StatsResult{}
	for _, line := range strings.Split(out, "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		n, err := strconv.ParseUint(value, 10, 64)
		if !ok || err != nil {
			continue
		}
		parts := strings.Split(key, ".")
		last := parts[len(parts)-1]
		switch {
		case key == "cpu.time":
			r.CPUTimeNs = n
		case key == "balloon.current":
			r.BalloonCurrentBytes = n * 1024
		case key == "balloon.maximum":
			r.BalloonMaximumBytes = n * 1024
		case key == "balloon.available":
			r.AvailableBytes = n * 1024
		case key == "balloon.unused":
			r.UnusedBytes = n * 1024
		case key == "balloon.rss":
			r.RSSBytes = n * 1024
		case parts[0] == "block" && len(parts) == 4 && parts[2] == "rd" && last == "bytes":
			r.DiskReadBytes += n
		case parts[0] == "block" && len(parts) == 4 && parts[2] == "wr" && last == "bytes":
			r.DiskWriteBytes += n
		case parts[0] == "net" && len(parts) == 4 && parts[2] == "rx" && last == "bytes":
			r.NetRxBytes += n
		case parts[0] == "net" && len(parts) == 4 && parts[2] == "tx" && last == "bytes":
			r.NetTxBytes += n
		}
	}
	return r
}
