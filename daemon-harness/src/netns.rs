//! The `netns` runner: bcd in its own network namespace, joined to the host
//! by a veth pair, reaching the test's listeners at its default route (as
//! under WSL's NAT networking).
//!
//! # Addresses
//!
//! Each namespace takes one slot `s` in `0..16384` of `10.213.0.0/16`, a /30:
//! the host side `bcdv<s>` gets `10.213.(s / 64).((s % 64) * 4 + 1)`, the
//! namespace side `eth0` gets the next address, and the namespace's default
//! route goes via the host side. A slot is claimed by creating the host
//! interface `bcdv<s>`: the kernel refuses a second interface of that name,
//! so parallel tests (threads or processes, and the `scripts/wsl.exe` shim,
//! which claims slots the same way) never share a subnet.
//!
//! # Listeners
//!
//! Inside the namespace, 127.0.0.1 is the namespace's own loopback: a
//! listener the test bound on the host's 127.0.0.1 is out of reach. A
//! listener for bcd must bind to [`Netns::host_addr`] (what
//! [`Runner::gateway_host`] returns), which exists as long as the namespace
//! does; binding to 0.0.0.0 also works but listens on every host interface,
//! so prefer the host-side address. A TLS listener's serving certificate must
//! name that IP address.
//!
//! # Cleanup
//!
//! [`Netns`] removes everything when dropped, also while a test panics: it
//! kills what still runs inside the namespace (only processes the harness
//! started there), deletes the veth pair, then the namespace. Namespaces of
//! test processes that died without cleaning up (SIGKILL) are reaped by the
//! next [`Netns::create`]: their names carry the pid of their creator.
//!
//! Commands run as `ip netns exec <ns> <program> <args…>`, no shell: `ip`
//! execs the program in place, so its pid is the program's and signals from
//! the supervisor reach bcd directly. The environment is passed unchanged.

use std::ffi::{OsStr, OsString};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

use crate::runner::Runner;

/// The name prefix of the netns runner's namespaces: `bcde2e-<pid>-<n>`.
pub const NETNS_PREFIX: &str = "bcde2e";
/// The name prefix of the namespaces that play WSL distributions for the shim.
pub const WSL_SHIM_PREFIX: &str = "bcdwsl";
/// The prefix of host-side veth names: `bcdv<slot>`.
pub const VETH_PREFIX: &str = "bcdv";
/// The name of the namespace side of the veth pair.
pub const NS_INTERFACE: &str = "eth0";
/// How many /30 slots `10.213.0.0/16` holds.
pub const SLOTS: u32 = 16384;
/// Where `ip netns` keeps its namespaces.
const NETNS_DIR: &str = "/run/netns";
/// How many slots a creation tries before giving up.
const SLOT_ATTEMPTS: u32 = 512;

static COUNTER: AtomicU32 = AtomicU32::new(0);
/// Serializes `ip netns add` within the process: the first one mounts
/// `/run/netns`, and two racing first mounts stack.
static CREATE_LOCK: Mutex<()> = Mutex::new(());
/// Serializes [`reap_stale`] within the process, and lets a test hold it
/// off while it builds a namespace by hand ([`hold_reaping`]): a reaper
/// that saw a namespace before its veth's alias was set would delete the
/// namespace alone, leaving the pair to the kernel's later cleanup.
static REAP_LOCK: Mutex<()> = Mutex::new(());

/// Holds off every [`reap_stale`] of this process while the guard lives.
pub fn hold_reaping() -> std::sync::MutexGuard<'static, ()> {
    REAP_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The host-side and namespace-side addresses of `slot` (a /30 each).
pub fn slot_addresses(slot: u32) -> (Ipv4Addr, Ipv4Addr) {
    let slot = slot % SLOTS;
    let third = (slot / 64) as u8;
    let fourth = ((slot % 64) * 4) as u8;
    (Ipv4Addr::new(10, 213, third, fourth + 1), Ipv4Addr::new(10, 213, third, fourth + 2))
}

/// The `ip` program: on `PATH`, else in the sbin directories (a non-root
/// `PATH` often lacks them).
pub fn ip_program() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("ip")).find(|p| p.is_file()))
        .unwrap_or_default();
    on_path
        .or_else(|| {
            ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].map(PathBuf::from).into_iter().find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from("ip"))
}

/// Whether network namespaces can be made here: root, and iproute2.
pub fn available() -> bool {
    crate::prereq::is_root() && Command::new(ip_program()).arg("-V").output().is_ok_and(|o| o.status.success())
}

/// Runs `ip args…`; fails with its standard error unless it exits 0.
fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new(ip_program()).args(args).output().context("running ip (is iproute2 installed?)")?;
    if !out.status.success() {
        bail!("ip {} failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Whether the namespace `name` exists.
pub fn netns_exists(name: &str) -> bool {
    Path::new(NETNS_DIR).join(name).exists()
}

/// Whether the host has a network interface `name`.
pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The pids of the processes inside namespace `name`.
pub fn pids_in(name: &str) -> Vec<i32> {
    Command::new(ip_program())
        .args(["netns", "pids", name])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// Kills every process inside namespace `name` (all of them were started
/// there by the harness: the namespace is its own) and every one on its way
/// in: an `ip netns exec <name> …` that has not entered the namespace yet is
/// not among `ip netns pids` and would run on, in a namespace kept alive by
/// its descriptor. So those go first; one that entered and exec'd before
/// they were looked for is inside (ip enters before it execs), so among the
/// pids read after.
fn kill_inside(name: &str) {
    for pid in entering(name).into_iter().chain(pids_in(name)) {
        // SAFETY: kill(2) has no memory preconditions; a pid that exited
        // meanwhile only yields ESRCH.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// The pids of the `ip netns exec <name> …` processes not yet exec'd.
fn entering(name: &str) -> Vec<i32> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    procs
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            (args.len() > 4 && args[1..4] == [&b"netns"[..], b"exec", name.as_bytes()]).then_some(pid)
        })
        .collect()
}

/// The host side of namespace `name`'s veth pair, which [`Netns::create`]
/// and the shim record as the alias of `eth0` inside.
pub fn host_interface_of(name: &str) -> Option<String> {
    let out = Command::new(ip_program()).args(["-n", name, "-o", "link", "show", "dev", NS_INTERFACE]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split(|c: char| c.is_whitespace() || c == '\\');
    words.find(|w| *w == "alias")?;
    words.find(|w| !w.is_empty()).map(str::to_string)
}

/// Removes namespaces `<prefix>-<pid>-<n>` of the harness whose creating
/// process no longer exists (it was killed before its `Drop` ran).
pub fn reap_stale() {
    let _reaping = hold_reaping();
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut parts = name.splitn(3, '-');
        let (Some(prefix), Some(pid), Some(_)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if prefix != NETNS_PREFIX && prefix != WSL_SHIM_PREFIX {
            continue;
        }
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        kill_inside(&name);
        // Deleting the namespace would destroy the veth pair too, but later,
        // in the kernel's cleanup: delete the host side first, synchronously.
        if let Some(host_if) = host_interface_of(&name).filter(|h| h.starts_with(VETH_PREFIX) && link_exists(h)) {
            let _ = ip(&["link", "delete", &host_if]);
        }
        if let Err(e) = ip(&["netns", "delete", &name]) {
            eprintln!("netns: could not reap stale namespace {name}: {e:#}");
        }
    }
}

/// A network namespace with a veth pair to the host and a default route via
/// the host side. Removed on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
    host_if: String,
    slot: u32,
    host_addr: Ipv4Addr,
    ns_addr: Ipv4Addr,
}

impl Netns {
    /// Creates the namespace `<prefix>-<pid>-<n>` with its veth pair,
    /// addresses, loopback and default route.
    pub fn create(prefix: &str) -> Result<Netns> {
        reap_stale();
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("{prefix}-{pid}-{n}");
        {
            let _guard = CREATE_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            ip(&["netns", "add", &name])?;
        }
        // From here on, dropping `ns` removes what exists so far.
        let mut ns = Netns {
            name,
            host_if: String::new(),
            slot: 0,
            host_addr: Ipv4Addr::UNSPECIFIED,
            ns_addr: Ipv4Addr::UNSPECIFIED,
        };
        let start = pid.wrapping_mul(2_654_435_761).wrapping_add(n.wrapping_mul(97)) % SLOTS;
        for attempt in 0..SLOT_ATTEMPTS {
            let slot = (start + attempt) % SLOTS;
            let host_if = format!("{VETH_PREFIX}{slot}");
            let out = Command::new(ip_program())
                .args(["link", "add", &host_if, "type", "veth", "peer", "name", NS_INTERFACE, "netns", &ns.name])
                .output()
                .context("running ip link add")?;
            if out.status.success() {
                (ns.host_addr, ns.ns_addr) = slot_addresses(slot);
                ns.slot = slot;
                ns.host_if = host_if;
                break;
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !stderr.contains("File exists") {
                bail!("ip link add {host_if} … failed ({}): {}", out.status, stderr.trim());
            }
        }
        if ns.host_if.is_empty() {
            bail!("no free veth slot after {SLOT_ATTEMPTS} attempts (are stale {VETH_PREFIX}* interfaces left?)");
        }
        let host_cidr = format!("{}/30", ns.host_addr);
        let ns_cidr = format!("{}/30", ns.ns_addr);
        let host_addr = ns.host_addr.to_string();
        ip(&["addr", "add", &host_cidr, "dev", &ns.host_if])?;
        ip(&["link", "set", &ns.host_if, "up"])?;
        ip(&["-n", &ns.name, "link", "set", NS_INTERFACE, "alias", &ns.host_if])?;
        ip(&["-n", &ns.name, "addr", "add", &ns_cidr, "dev", NS_INTERFACE])?;
        ip(&["-n", &ns.name, "link", "set", NS_INTERFACE, "up"])?;
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns.name, "route", "add", "default", "via", &host_addr])?;
        Ok(ns)
    }

    /// The namespace's name (`ip netns exec <name> …`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host side of the veth pair (`bcdv<slot>`).
    pub fn host_interface(&self) -> &str {
        &self.host_if
    }

    /// Sets the host side of the veth pair down (`false`: a network
    /// partition; the namespace's side loses its carrier, its address and
    /// routes stay) or up again (the partition healed).
    pub fn set_link(&self, up: bool) -> Result<()> {
        ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }])
    }

    /// The slot in `10.213.0.0/16`.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The host-side address: the namespace's default gateway, where its
    /// programs reach the test's listeners.
    pub fn host_addr(&self) -> Ipv4Addr {
        self.host_addr
    }

    /// The namespace-side address: where connections from inside come from.
    pub fn ns_addr(&self) -> Ipv4Addr {
        self.ns_addr
    }

    /// `ip netns exec <name> program args…`, without a shell.
    pub fn command(&self, program: &OsStr, args: &[OsString]) -> Command {
        let mut cmd = Command::new(ip_program());
        cmd.args([OsStr::new("netns"), OsStr::new("exec"), OsStr::new(&self.name), program]).args(args);
        cmd
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        kill_inside(&self.name);
        if !self.host_if.is_empty() && link_exists(&self.host_if) {
            // Deleting one end deletes the pair, synchronously.
            if let Err(e) = ip(&["link", "delete", &self.host_if]) {
                eprintln!("netns: could not delete {}: {e:#}", self.host_if);
            }
        }
        if let Err(e) = ip(&["netns", "delete", &self.name]) {
            eprintln!("netns: could not delete namespace {}: {e:#}", self.name);
        }
    }
}

/// bcd in its own network namespace (`BCD_E2E_RUNNER=netns`).
#[derive(Debug)]
pub struct NetnsRunner {
    netns: Netns,
}

impl NetnsRunner {
    /// Creates a fresh namespace `bcde2e-<pid>-<n>` for this runner; it is
    /// removed when the runner is dropped.
    pub fn new() -> Result<Self> {
        Ok(NetnsRunner { netns: Netns::create(NETNS_PREFIX).context("creating the netns runner's namespace")? })
    }

    /// The namespace.
    pub fn netns(&self) -> &Netns {
        &self.netns
    }
}

impl Runner for NetnsRunner {
    fn name(&self) -> &'static str {
        "netns"
    }

    fn command(&self, program: &Path, args: &[OsString], env: &[(String, String)]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::from(self.netns.command(program.as_os_str(), args));
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// The host side of the veth pair; see the module documentation for
    /// where a listener must bind.
    fn gateway_host(&self) -> String {
        self.netns.host_addr.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_disjoint_slash_30s() {
        assert_eq!(slot_addresses(0), (Ipv4Addr::new(10, 213, 0, 1), Ipv4Addr::new(10, 213, 0, 2)));
        assert_eq!(slot_addresses(1), (Ipv4Addr::new(10, 213, 0, 5), Ipv4Addr::new(10, 213, 0, 6)));
        assert_eq!(slot_addresses(63), (Ipv4Addr::new(10, 213, 0, 253), Ipv4Addr::new(10, 213, 0, 254)));
        assert_eq!(slot_addresses(64), (Ipv4Addr::new(10, 213, 1, 1), Ipv4Addr::new(10, 213, 1, 2)));
        assert_eq!(slot_addresses(SLOTS - 1), (Ipv4Addr::new(10, 213, 255, 253), Ipv4Addr::new(10, 213, 255, 254)));
        let mut seen = std::collections::HashSet::new();
        for slot in 0..SLOTS {
            let (host, ns) = slot_addresses(slot);
            let network = u32::from(host) & !3;
            assert_eq!(u32::from(host), network + 1);
            assert_eq!(u32::from(ns), network + 2);
            assert!(seen.insert(network), "slot {slot} reuses a subnet");
        }
    }

    #[test]
    fn veth_names_fit_ifnamsiz() {
        assert!(format!("{VETH_PREFIX}{}", SLOTS - 1).len() <= 15);
    }
}
