//! The VPS host of the real-guest scenarios (docs/harness.md, "The VPS
//! host"): a network namespace of its own ([`crate::netns::Netns`], joined
//! to the test by a veth pair) and a private mount namespace
//! (`scripts/vps-host-ns.sh`: overlays of `/etc` and `/var`, a fresh
//! `/run`, huge pages, the instance bridge `bcbr0`, and its own `virtlogd`
//! and `libvirtd`). Everything of the host runs in it as root through
//! `nsenter` into the script's namespaces: bcd's host build from its slot
//! (this is its [`Runner`]), `bcd helper`, `virsh`, QEMU. Dropping it
//! kills what runs inside (all of it started there by the harness), then
//! removes the namespaces; nothing of the machine is left changed.
//!
//! [`Install`] lays out one node's host: bcd in a slot of its own,
//! `helper.toml` (the node's user root, the instance bridge, the volume
//! and image directories, the guest kernel and initrd, the release pins of
//! its slots), and the `[instances]` table of its `config.toml`.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::guest::GuestImage;
use crate::netns::{NETNS_PREFIX, Netns};
use crate::runner::Runner;

/// The instance bridge of the VPS host.
pub const BRIDGE: &str = "bcbr0";

/// How long the VPS host may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the VPS host cannot run here, if it cannot.
pub fn missing() -> Option<String> {
    if !crate::netns::available() {
        return Some("root and iproute2 (the VPS host is a namespace of its own)".into());
    }
    for program in ["libvirtd", "virtlogd", "virsh", "nsenter", "unshare", "nft", "mkfs.vfat", "mcopy"] {
        if !["/usr/sbin", "/usr/bin", "/sbin", "/bin"].iter().any(|d| Path::new(d).join(program).is_file()) {
            return Some(format!("{program} (cargo xtask prereqs installs it)"));
        }
    }
    crate::guest::missing()
}

/// A VPS host: its namespaces, libvirt inside, and a scratch directory.
pub struct VpsHost {
    netns: Netns,
    holder: Mutex<Child>,
    pid: u32,
    pressure_bound: Mutex<bool>,
    // The tmpfs of the overlays' upper layers is mounted on it inside.
    _scratch: tempfile::TempDir,
    // Files the harness shares with the host (its pressure).
    files: tempfile::TempDir,
}

impl VpsHost {
    /// Starts the namespaces, libvirtd and virtlogd; waits until libvirt answers.
    pub fn start() -> Result<VpsHost> {
        let netns = Netns::create(NETNS_PREFIX).context("the VPS host's network namespace")?;
        let scratch = tempfile::Builder::new().prefix("bcd-e2e-vpshost-").tempdir()?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/vps-host-ns.sh");
        let own_ns = ["mnt", "net"]
            .iter()
            .filter_map(|ns| std::fs::read_link(format!("/proc/self/ns/{ns}")).ok())
            .map(|l| l.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        // libvirt's cache of QEMU's capabilities, kept across runs.
        let caps = crate::build::target_dir().join("vps-guest").join("libvirt-capabilities");
        std::fs::create_dir_all(&caps)?;
        let args: Vec<OsString> = ["--mount", "--propagation", "private", "bash"]
            .iter()
            .map(OsString::from)
            .chain([script.into_os_string(), scratch.path().into(), caps.into()])
            .collect();
        let mut child = netns
            .command("unshare".as_ref(), &args)
            .env("BCD_VPS_HOST_NS", own_ns)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting scripts/vps-host-ns.sh")?;
        let pid = child.id();
        let stdout = child.stdout.take().context("the script's output")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line == "ready" {
                    let _ = tx.send(());
                }
            }
        });
        let files = tempfile::Builder::new().prefix("bcd-e2e-vpsfiles-").tempdir()?;
        let host = VpsHost {
            netns,
            holder: Mutex::new(child),
            pid,
            pressure_bound: Mutex::new(false),
            _scratch: scratch,
            files,
        };
        if rx.recv_timeout(START_TIMEOUT).is_err() {
            bail!("the VPS host did not start within {START_TIMEOUT:?} (scripts/vps-host-ns.sh)");
        }
        Ok(host)
    }

    /// `nsenter` into the host's namespaces running `program args…`.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["--target", &self.pid.to_string(), "--mount", "--net", "--"]).arg(program).args(args);
        cmd
    }

    /// Runs `program args…` inside and returns its standard output; fails
    /// with its standard error unless it exits 0.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String> {
        let out = self.command(program, args).output().with_context(|| format!("running {program} in the VPS host"))?;
        if !out.status.success() {
            bail!(
                "{program} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `virsh -c qemu:///system args…` inside.
    pub fn virsh(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["-c", "qemu:///system"];
        all.extend_from_slice(args);
        self.run("virsh", &all)
    }

    /// The names of every domain libvirt has (running or not).
    pub fn domains(&self) -> Result<Vec<String>> {
        Ok(self
            .virsh(&["list", "--all", "--name"])?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect())
    }

    /// Writes `content` over `/proc/pressure/memory` as this host's
    /// processes see it: a file of the harness bound there in the host's
    /// mount namespace (the kernel's own file is the machine's; bcd reads
    /// the path, the scenario says what it holds).
    pub fn set_memory_pressure(&self, percent: f64) -> Result<()> {
        let file = self.files.path().join("memory-pressure");
        std::fs::write(
            &file,
            format!(
                "some avg10={percent:.2} avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
            ),
        )?;
        let mut bound = self.pressure_bound.lock().unwrap_or_else(|p| p.into_inner());
        if !*bound {
            self.run("mount", &["--bind", &file.to_string_lossy(), "/proc/pressure/memory"])?;
            *bound = true;
        }
        Ok(())
    }

    /// The process whose namespaces are the host's (`nsenter --target`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The veth's host-side address: where bcd inside reaches the stack.
    pub fn gateway(&self) -> String {
        self.netns.host_addr().to_string()
    }
}

impl Runner for VpsHost {
    fn name(&self) -> &'static str {
        "vps-host"
    }

    fn command(&self, program: &Path, args: &[OsString], env: &[(String, String)]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("nsenter");
        cmd.args(["--target", &self.pid.to_string(), "--mount", "--net", "--"]).arg(program).args(args);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    fn gateway_host(&self) -> String {
        self.gateway()
    }
}

impl Drop for VpsHost {
    fn drop(&mut self) {
        // The holder's standard input ends; the Netns's drop kills what
        // runs inside (libvirtd, virtlogd, QEMU, the helper, bcd) and
        // removes the namespaces.
        let mut holder = self.holder.lock().unwrap_or_else(|p| p.into_inner());
        drop(holder.stdin.take());
        let _ = holder.kill();
        let _ = holder.wait();
    }
}

/// One node's host layout: bcd in its slot, helper.toml, the helper's
/// state and log.
pub struct Install {
    /// The root of the layout (a temporary directory).
    pub dir: tempfile::TempDir,
    /// `<dir>/slots/bcd-a`: what bcd runs as (the helper answers only it).
    pub bcd: PathBuf,
    /// `helper.toml`.
    pub helper_config: PathBuf,
    /// The helper's socket.
    pub socket: PathBuf,
    /// The helper's state directory (domains, overlays, seeds, consoles).
    pub state: PathBuf,
}

impl Install {
    /// Installs the bcd binary `bcd` in a slot of a fresh layout.
    pub fn new(bcd: &Path) -> Result<Install> {
        let dir = tempfile::Builder::new().prefix("bcd-e2e-vpsinstall-").tempdir()?;
        let slots = dir.path().join("slots");
        std::fs::create_dir_all(&slots)?;
        let slot = slots.join("bcd-a");
        std::fs::copy(bcd, &slot).context("installing bcd into its slot")?;
        let (socket, state) = (dir.path().join("run/helper.sock"), dir.path().join("state"));
        Ok(Install { bcd: slot, helper_config: dir.path().join("helper.toml"), socket, state, dir })
    }

    /// Writes helper.toml for a node whose data directory is `data_dir`:
    /// the guest image's kernel, and `update` (an `[update]` table of
    /// release pins, without `dir` and `staged`, which this adds).
    pub fn configure(&mut self, data_dir: &Path, image: &GuestImage, update: &str) -> Result<()> {
        let q = |p: &Path| format!("{:?}", p.to_string_lossy());
        let root = self.dir.path();
        let text = format!(
            "[helper]\nsocket = {}\nuser = \"root\"\ninstance_bridges = [\"{BRIDGE}\"]\nvolume_dirs = [{}]\nimage_dirs = [{}]\n\
             state_dir = {}\ncommand_roots_dir = {}\nunit_dir = {}\nnode_config = {}\nguest_kernel = {}\nguest_initrd = {}\n\
             guest_cmdline = \"console=ttyS0 root=/dev/vda rw quiet\"\n\n{update}dir = {}\nstaged = {}\n",
            q(&self.socket),
            q(&data_dir.join("volumes")),
            q(&data_dir.join("images")),
            q(&self.state),
            q(&root.join("roots")),
            q(&root.join("units")),
            q(&data_dir.parent().context("the data dir's parent")?.join("config.toml")),
            q(&image.kernel),
            q(&image.initrd),
            q(&root.join("slots")),
            q(&data_dir.join("update/bcd.staged")),
        );
        std::fs::write(&self.helper_config, text)?;
        Ok(())
    }

    /// Starts `bcd helper` from the slot in the VPS host (as its unit
    /// would), its output in [`Install::helper_log`]; waits for its socket.
    pub fn start_helper(&self, host: &VpsHost) -> Result<Child> {
        let log = std::fs::File::create(self.helper_log())?;
        let mut child = host
            .command(&self.bcd, &["helper", "--config", &self.helper_config.to_string_lossy()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting bcd helper")?;
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        while !std::fs::read_to_string(self.helper_log()).unwrap_or_default().contains("helper.serving") {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "bcd helper exited ({status}):\n{}",
                    std::fs::read_to_string(self.helper_log()).unwrap_or_default()
                );
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                bail!("bcd helper did not serve within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(child)
    }

    /// The helper's log.
    pub fn helper_log(&self) -> PathBuf {
        self.dir.path().join("helper.log")
    }

    /// The `[instances]` table for the node's `config.toml`: both runtimes
    /// (cloud-hypervisor only where its binary and a working KVM are).
    pub fn instances_table(&self, accelerator: &str) -> String {
        format!(
            "\n[instances]\nruntimes = [\"libvirt-kvm\", \"cloud-hypervisor\"]\nhelper_socket = {:?}\naccelerator = \"{accelerator}\"\n",
            self.socket.to_string_lossy()
        )
    }

    /// A domain's console log (the helper's).
    pub fn console_log(&self, id: &str) -> PathBuf {
        self.state.join("consoles").join(format!("bcd-{id}.log"))
    }

    /// A domain's overlay (the helper's).
    pub fn overlay(&self, id: &str) -> PathBuf {
        self.state.join("overlays").join(format!("bcd-{id}.qcow2"))
    }

    /// A domain's seed disk (the helper's).
    pub fn seed_disk(&self, id: &str) -> PathBuf {
        self.state.join("seeds").join(format!("bcd-{id}.img"))
    }
}

impl Drop for Install {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- log of bcd helper ----\n{}\n---- end of log ----",
                std::fs::read_to_string(self.helper_log()).unwrap_or_default()
            );
            // Keep the layout (console logs, domain XML) for a look after.
            let dir = std::mem::replace(&mut self.dir, tempfile::TempDir::new().expect("a temporary directory"));
            eprintln!("the VPS host's layout is kept: {}", dir.keep().display());
        }
    }
}

/// Appends `text` to a file.
pub fn append(path: &Path, text: &str) -> Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).with_context(|| path.display().to_string())?;
    f.write_all(text.as_bytes())?;
    Ok(())
}
