//! The guest image of the real-guest scenarios (docs/harness.md, "The
//! guest image"), built once and cached like the bcd build: under
//! `target/vps-guest/<key>/`, where the key hashes everything it is made
//! of (the two init scripts of `daemon-harness/guest/`, busybox, Debian's
//! kernel and the modules):
//!
//! - `vmlinux`: Debian's kernel (`linux-image-amd64`), decompressed from
//!   `/boot/vmlinuz-<version>` (`xz`), which QEMU boots directly through
//!   its PVH entry point: no firmware decompression under TCG;
//! - `initrd.gz`: busybox-static and the kernel modules a guest needs
//!   (virtio PCI, block, net and balloon, ext4, vfat), in the order
//!   `modprobe --show-depends` gives, and `guest/initrd-init`, which loads
//!   them and switches to the root disk (Debian's own initrd, udev and all,
//!   takes 22 s to boot under TCG here; this one about 5);
//! - `base.raw`: the base image, an ext4 file system made with
//!   `mkfs.ext4 -d` from busybox (every applet linked) and `guest/init`,
//!   and `digest`, its `sha256:<hex>`, written last.
//!
//! [`accelerator`] probes once per machine boot whether KVM runs this
//! kernel (nested KVM here opens, but its guests hang before they print)
//! and caches the answer beside the images.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use sha2::{Digest, Sha256};

/// The kernel modules a guest needs; their dependencies come first.
const MODULES: [&str; 9] = [
    "crc32c_generic",
    "ext4",
    "virtio_pci",
    "virtio_blk",
    "virtio_net",
    "virtio_balloon",
    "vfat",
    "nls_cp437",
    "nls_ascii",
];

/// The base image's size.
const BASE_SIZE: &str = "32M";

/// How long the KVM probe waits for the kernel's first words (under a
/// working KVM they come within a second or two).
const PROBE_TIMEOUT: Duration = Duration::from_secs(6);

/// The built guest image.
#[derive(Clone, Debug)]
pub struct GuestImage {
    /// The kernel (an ELF QEMU boots directly).
    pub kernel: PathBuf,
    /// The initrd.
    pub initrd: PathBuf,
    /// The base image (raw ext4).
    pub base: PathBuf,
    /// `sha256:<hex>` of the base image.
    pub digest: String,
}

/// Why the guest image cannot be built here, if it cannot: the programs
/// and files it is made of.
pub fn missing() -> Option<String> {
    for program in ["mkfs.ext4", "cpio", "gzip", "xz", "modprobe", "qemu-system-x86_64", "qemu-img"] {
        if which(program).is_none() {
            return Some(format!("{program} (cargo xtask prereqs installs it)"));
        }
    }
    if let Err(e) = kernel() {
        return Some(format!("{e:#}"));
    }
    if let Err(e) = busybox() {
        return Some(format!("{e:#}"));
    }
    None
}

/// A program on PATH or in the sbin directories.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Debian's kernel: the newest `/boot/vmlinuz-<version>` with modules.
fn kernel() -> Result<(String, PathBuf)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/boot").context("reading /boot")?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(version) = name.strip_prefix("vmlinuz-")
            && Path::new("/lib/modules").join(version).is_dir()
        {
            found.push((version.to_string(), entry.path()));
        }
    }
    found.sort();
    found.pop().context("no /boot/vmlinuz-<version> with /lib/modules/<version> (linux-image-amd64)")
}

/// busybox, statically linked (busybox-static): it runs in the guest alone.
fn busybox() -> Result<PathBuf> {
    let path = which("busybox").context("no busybox (busybox-static)")?;
    ensure!(
        !has_interpreter(&std::fs::read(&path)?),
        "{} is linked dynamically: install busybox-static",
        path.display()
    );
    Ok(path)
}

/// Whether a 64-bit little-endian ELF asks for a program interpreter (a
/// PT_INTERP program header: it is linked dynamically).
fn has_interpreter(elf: &[u8]) -> bool {
    let at = |o: usize, n: usize| elf.get(o..o + n).map(|b| b.iter().rev().fold(0usize, |v, x| v << 8 | *x as usize));
    let (Some(phoff), Some(phentsize), Some(phnum)) = (at(32, 8), at(54, 2), at(56, 2)) else { return true };
    (0..phnum).any(|i| at(phoff + i * phentsize, 4).is_none_or(|t| t == 3))
}

/// The modules' files, dependencies first.
fn module_files(version: &str) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = Vec::new();
    for module in MODULES {
        let shown = Command::new(which("modprobe").context("modprobe")?)
            .args(["-S", version, "--show-depends", module])
            .output()
            .context("modprobe --show-depends")?;
        ensure!(shown.status.success(), "modprobe --show-depends {module}: {}", String::from_utf8_lossy(&shown.stderr));
        for line in String::from_utf8_lossy(&shown.stdout).lines() {
            let Some(path) = line.strip_prefix("insmod ").map(|p| PathBuf::from(p.trim())) else { continue };
            // crc32c-intel needs SSE4.2, which QEMU's TCG CPU lacks: crc32c_generic stands in.
            if !path.to_string_lossy().contains("crc32c-intel") && !out.contains(&path) {
                out.push(path);
            }
        }
    }
    Ok(out)
}

/// The guest scripts' directory.
fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("guest")
}

/// Builds the guest image, or finds it in the cache.
pub fn build() -> Result<GuestImage> {
    let (version, vmlinuz) = kernel()?;
    let busybox = busybox()?;
    let modules = module_files(&version)?;
    let mut key = Sha256::new();
    for file in [scripts().join("init"), scripts().join("initrd-init"), busybox.clone(), vmlinuz.clone()] {
        key.update(std::fs::read(&file).with_context(|| file.display().to_string())?);
    }
    for m in &modules {
        key.update(m.to_string_lossy().as_bytes());
    }
    key.update(BASE_SIZE.as_bytes());
    let dir = crate::build::target_dir().join("vps-guest").join(&hex::encode(key.finalize())[..16]);
    let image = |dir: &Path| -> Result<GuestImage> {
        let digest = std::fs::read_to_string(dir.join("digest"))?;
        Ok(GuestImage {
            kernel: dir.join("vmlinux"),
            initrd: dir.join("initrd.gz"),
            base: dir.join("base.raw"),
            digest: digest.trim().to_string(),
        })
    };
    if dir.join("digest").is_file() {
        return image(&dir);
    }
    let work = dir.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    eprintln!("guest image: building {} (kernel {version})", dir.display());
    decompress_kernel(&vmlinuz, &work.join("vmlinux"))?;
    make_initrd(&work, &busybox, &modules)?;
    make_base(&work, &busybox)?;
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(std::fs::read(work.join("base.raw"))?)));
    std::fs::write(work.join("digest"), format!("{digest}\n"))?;
    if let Err(e) = std::fs::rename(&work, &dir) {
        // Another process built it first: use theirs.
        let _ = std::fs::remove_dir_all(&work);
        if !dir.join("digest").is_file() {
            return Err(e).context("moving the guest image into the cache");
        }
    }
    image(&dir)
}

/// Decompresses a bzImage's XZ payload into the kernel's ELF.
fn decompress_kernel(vmlinuz: &Path, out: &Path) -> Result<()> {
    let bytes = std::fs::read(vmlinuz)?;
    let at = bytes
        .windows(6)
        .position(|w| w == [0xfd, b'7', b'z', b'X', b'Z', 0])
        .with_context(|| format!("{} has no XZ payload", vmlinuz.display()))?;
    let mut xz = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(out)?)
        .spawn()
        .context("running xz")?;
    let payload = bytes[at..].to_vec();
    let mut stdin = xz.stdin.take().context("xz's stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(&payload));
    let status = xz.wait()?;
    // xz stops reading after the stream: what it left unread is the bzImage's trailer.
    let _ = writer.join();
    ensure!(status.success(), "xz -dc of {} failed", vmlinuz.display());
    let mut magic = [0u8; 4];
    std::fs::File::open(out)?.read_exact(&mut magic)?;
    ensure!(magic == *b"\x7fELF", "the decompressed kernel is not an ELF");
    Ok(())
}

/// The initrd: busybox, the modules and their order, and initrd-init.
fn make_initrd(work: &Path, busybox: &Path, modules: &[PathBuf]) -> Result<()> {
    let tree = work.join("initrd");
    for d in ["bin", "proc", "dev", "newroot", "lib/modules"] {
        std::fs::create_dir_all(tree.join(d))?;
    }
    std::fs::copy(busybox, tree.join("bin/busybox"))?;
    std::fs::copy(scripts().join("initrd-init"), tree.join("init"))?;
    let mut order = String::new();
    for m in modules {
        let name = m.file_stem().context("a module file")?.to_string_lossy().into_owned();
        std::fs::copy(m, tree.join("lib/modules").join(format!("{name}.ko")))?;
        order += &format!("{name}\n");
    }
    std::fs::write(tree.join("lib/modules/order"), order)?;
    let mut names = Vec::new();
    list(&tree, Path::new("."), &mut names)?;
    names.sort();
    let mut cpio = Command::new("cpio")
        .args(["-o", "-H", "newc", "--quiet"])
        .current_dir(&tree)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running cpio")?;
    let gzip = Command::new("gzip")
        .arg("-9n")
        .stdin(cpio.stdout.take().context("cpio's stdout")?)
        .stdout(std::fs::File::create(work.join("initrd.gz"))?)
        .spawn()
        .context("running gzip")?;
    cpio.stdin.take().context("cpio's stdin")?.write_all((names.join("\n") + "\n").as_bytes())?;
    ensure!(cpio.wait()?.success(), "cpio failed");
    ensure!(gzip.wait_with_output()?.status.success(), "gzip failed");
    std::fs::remove_dir_all(&tree)?;
    Ok(())
}

/// Every path under `root` (relative, `./…`), directories included.
fn list(root: &Path, rel: &Path, out: &mut Vec<String>) -> Result<()> {
    out.push(rel.to_string_lossy().into_owned());
    if root.join(rel).is_dir() && !root.join(rel).is_symlink() {
        for entry in std::fs::read_dir(root.join(rel))? {
            list(root, &rel.join(entry?.file_name()), out)?;
        }
    }
    Ok(())
}

/// The base image: busybox with every applet, and the guest's init.
fn make_base(work: &Path, busybox: &Path) -> Result<()> {
    let tree = work.join("rootfs");
    for d in ["bin", "sbin", "proc", "sys", "dev", "tmp", "seed", "run", "etc"] {
        std::fs::create_dir_all(tree.join(d))?;
    }
    std::fs::copy(busybox, tree.join("bin/busybox"))?;
    let applets = Command::new(busybox).arg("--list").output().context("busybox --list")?;
    for applet in String::from_utf8_lossy(&applets.stdout).lines().filter(|a| !a.is_empty() && *a != "busybox") {
        std::os::unix::fs::symlink("busybox", tree.join("bin").join(applet))?;
    }
    std::fs::copy(scripts().join("init"), tree.join("sbin/init"))?;
    let out = Command::new(which("mkfs.ext4").context("mkfs.ext4")?)
        .args(["-q", "-F", "-L", "bcdroot", "-U", "6b6f2a1e-5c4d-4e0f-9a8b-0c1d2e3f4a5b", "-E", "root_owner=0:0", "-d"])
        .arg(&tree)
        .arg(work.join("base.raw"))
        .arg(BASE_SIZE)
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .output()
        .context("running mkfs.ext4")?;
    if !out.status.success() {
        bail!("mkfs.ext4 -d failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::remove_dir_all(&tree)?;
    Ok(())
}

/// The accelerator guests run under here: `kvm` when KVM boots this
/// kernel (the probe sees its first words within 6 s), else `tcg`;
/// probed once per machine boot and kept in the cache.
pub fn accelerator(image: &GuestImage) -> Result<&'static str> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let cache = crate::build::target_dir().join("vps-guest").join(format!("accelerator-{}", boot.trim()));
    if let Ok(known) = std::fs::read_to_string(&cache) {
        return Ok(if known.trim() == "kvm" { "kvm" } else { "tcg" });
    }
    let (accel, why) = probe_kvm(image)?;
    eprintln!("guests: accelerator {accel} ({why}); kept in {}", cache.display());
    std::fs::create_dir_all(cache.parent().expect("the cache has a parent"))?;
    std::fs::write(&cache, accel)?;
    Ok(accel)
}

/// Boots the kernel under KVM until it says BCD-PROBE-OK or the timeout.
fn probe_kvm(image: &GuestImage) -> Result<(&'static str, String)> {
    if std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_err() {
        return Ok(("tcg", "no usable /dev/kvm".into()));
    }
    let mut qemu = Command::new("qemu-system-x86_64")
        .args(["-accel", "kvm", "-machine", "q35", "-m", "128", "-nographic", "-no-reboot", "-kernel"])
        .arg(&image.kernel)
        .arg("-initrd")
        .arg(&image.initrd)
        .args(["-append", "console=ttyS0 bcd.probe panic=-1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("running qemu-system-x86_64")?;
    let stdout = qemu.stdout.take().context("qemu's stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("BCD-PROBE-OK") {
                let _ = tx.send(());
                return;
            }
        }
    });
    let ok = rx.recv_timeout(PROBE_TIMEOUT).is_ok();
    let _ = qemu.kill();
    let _ = qemu.wait();
    Ok(if ok {
        ("kvm", "KVM booted the kernel".into())
    } else {
        ("tcg", format!("KVM opens but its guest printed nothing in {PROBE_TIMEOUT:?}"))
    })
}
