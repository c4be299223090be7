//! Real guests (issue 32; docs/harness.md, "Real guests"): bcd's host
//! build, as root, in a VPS host of its own (`daemon_harness::vps_host`:
//! its own libvirtd and virtlogd, the instance bridge), with bcd helper
//! from its slot, boots instances of the cached guest image under QEMU
//! (TCG here: nested KVM does not run guests) from overlays of their own,
//! serves their metadata on the instance bridge, and applies every plan
//! field it reports or refuses it with its code. The guest's init proves
//! it booted: it prints its instance id, its user data's digest and a
//! workload token on its serial console, which the scenarios read.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use daemon_harness::build::{BuildOptions, build_bcd};
use daemon_harness::guest::{self, GuestImage};
use daemon_harness::node::Node;
use daemon_harness::prereq;
use daemon_harness::vps_host::{self, Install, VpsHost};
use devstack::{Acceptance, InstanceRequest, PoolKind, PoolPolicy, PoolSpec};
use sha2::{Digest, Sha256};

use crate::common::Env;

/// How long a guest may take to boot and print (TCG, two shared cores).
pub const BOOT: Duration = Duration::from_secs(120);

/// The host build of bcd, built once per test binary.
fn host_bcd() -> anyhow::Result<PathBuf> {
    static BCD: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BCD.get_or_init(|| build_bcd(&BuildOptions::host()).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

/// The guest image and the accelerator, once per test binary.
fn image() -> anyhow::Result<(GuestImage, &'static str)> {
    static IMAGE: OnceLock<Result<(GuestImage, &'static str), String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let image = guest::build().map_err(|e| format!("{e:#}"))?;
            let accel = guest::accelerator(&image).map_err(|e| format!("{e:#}"))?;
            Ok((image, accel))
        })
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

/// One real-guest scenario's world: the stack, the VPS host, the node (the
/// host build, joined and adopted into a `vps-host` pool) and its helper.
pub struct GuestWorld {
    pub env: Env,
    pub host: Arc<VpsHost>,
    pub image: GuestImage,
    pub accel: &'static str,
    pub install: Install,
    pub node: Node,
    pub node_id: String,
    pub pool: String,
    helper: std::process::Child,
}

impl GuestWorld {
    /// Whether the scenario can run here: Go, root, and what the VPS host
    /// and the guest image need (skipped with the reason, a failure under CI).
    pub fn available(scenario: &str) -> bool {
        let missing = vps_host::missing();
        prereq::require_go(scenario)
            && prereq::require(
                scenario,
                &format!("a VPS host: {}", missing.as_deref().unwrap_or("")),
                missing.is_none(),
            )
    }

    /// Starts everything, or None when a prerequisite is missing (a
    /// failure under CI).
    pub async fn start(scenario: &str) -> Option<GuestWorld> {
        if !Self::available(scenario) {
            return None;
        }
        let (image, accel) = image().expect("the guest image builds");
        let bcd = host_bcd().expect("bcd's host build builds");
        let host = Arc::new(VpsHost::start().expect("the VPS host starts"));
        // bcd applies a desired state on its session's loop: a real domain's
        // destroy takes a second or two under TCG, longer than the other
        // scenarios' three 500 ms heartbeats, so these beat every 2 s.
        let env = Env::start_on(scenario, host.clone(), |o| o.heartbeat_interval_ms = 2000).await;
        let mut install = Install::new(&bcd).expect("bcd is installed in its slot");
        let node = Node::new("vpshost", &install.bcd, host.clone(), vec![]).expect("a node directory");
        let data = node.data_dir();
        std::fs::create_dir_all(data.join("images")).unwrap();
        let update = update_table(&env);
        install.configure(&data, &image, &update).expect("helper.toml is written");
        env.stack.write_bcd_config(node.dir(), &data).await.expect("config.toml is written");
        vps_host::append(&node.config(), &install.instances_table(accel)).unwrap();
        // The operator's image store holds the base image, by digest.
        std::fs::copy(&image.base, base_in_store(&node, &image)).expect("the base image is in the store");
        let helper = install.start_helper(&host).expect("bcd helper starts");
        let pool = env
            .stack
            .create_pool(PoolSpec {
                name: "real".into(),
                acceptance: Acceptance::None,
                kind: PoolKind::VpsHost,
                // Four 1-vCPU guests on a host of two CPUs (the benchmark's).
                policy: PoolPolicy { cpu_overcommit_percent: 400, ..PoolPolicy::default() },
                ..PoolSpec::default()
            })
            .await
            .unwrap();
        let mut world = GuestWorld { env, host, image, accel, install, node, node_id: String::new(), pool, helper };
        eprintln!("{scenario}: guests under {accel}");
        world.node_id = world.env.must_join_and_adopt(&mut world.node, &world.pool).await;
        Some(world)
    }

    /// A request for a guest of the image: 1 vCPU, `mib` MiB, a NIC on the
    /// instance bridge, `user_data`.
    pub fn request(&self, mib: u64, user_data: &[u8]) -> InstanceRequest {
        InstanceRequest {
            runtime: "libvirt-kvm".into(),
            vcpus: 1,
            memory_bytes: mib << 20,
            image: Some(self.image.digest.clone()),
            nics: vec![proto::InstanceNic { bridge: vps_host::BRIDGE.into(), mac: String::new() }],
            user_data: user_data.to_vec(),
            ..InstanceRequest::default()
        }
    }

    /// Waits until the guest's console holds what `done` looks for; returns
    /// what the guest said (its lines after "BCD-GUEST:").
    pub async fn await_console(&self, id: &str, what: &str, done: impl Fn(&Console) -> bool) -> Console {
        let path = self.install.console_log(id);
        let deadline = tokio::time::Instant::now() + BOOT;
        loop {
            let console = Console::read(&path);
            if done(&console) {
                return console;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "guest {id}: {what} not on its console within {BOOT:?}; it says:\n{}",
                std::fs::read_to_string(&path).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What the VPS host's network looks like (for a failure's message).
    pub fn network_state(&self) -> String {
        let mut out = String::new();
        for args in [
            &["ip", "addr"][..],
            &["ip", "route"],
            &["ip", "neigh"],
            &["bridge", "link"],
            &["nft", "list", "ruleset"],
            &["ss", "-ltn"],
        ] {
            let got = self.host.run(args[0], &args[1..]).unwrap_or_else(|e| format!("{e:#}"));
            out += &format!("$ {}\n{got}\n", args.join(" "));
        }
        out
    }

    /// Fails unless the base image in the store still hashes to its digest.
    pub fn assert_base_unchanged(&self) {
        let bytes = std::fs::read(base_in_store(&self.node, &self.image)).unwrap();
        assert_eq!(
            format!("sha256:{}", hex::encode(Sha256::digest(&bytes))),
            self.image.digest,
            "the base image was written"
        );
    }

    /// The taps on the VPS host.
    pub fn taps(&self) -> Vec<String> {
        let links = self.host.run("ip", &["-o", "link", "show"]).unwrap();
        links
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .filter(|n| n.starts_with("bcdt"))
            .map(str::to_string)
            .collect()
    }

    /// A guest's address on the instance network (bcd's record of it).
    pub fn address_of(&self, id: &str) -> String {
        let dir = self.node.data_dir().join("instances/addresses");
        std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .find(|e| std::fs::read_to_string(e.path()).is_ok_and(|owner| owner == format!("{id} 0\n")))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .unwrap_or_else(|| panic!("{id} holds no address in {}", dir.display()))
    }

    /// A guest's MAC (its live domain's).
    pub fn mac_of(&self, id: &str) -> String {
        let xml = self.host.virsh(&["dumpxml", &format!("bcd-{id}")]).unwrap();
        let at = xml.find("<mac address='").expect("the domain has a MAC") + "<mac address='".len();
        xml[at..at + 17].to_string()
    }

    /// How many domain.define the helper ran.
    pub fn defines(&self) -> usize {
        let log = std::fs::read_to_string(self.install.helper_log()).unwrap_or_default();
        log.lines().filter(|l| l.contains("helper.done") && l.contains("domain.define")).count()
    }

    /// Stops bcd and the helper; the VPS host goes with the world.
    pub async fn stop(mut self) {
        self.node.stop().await;
        let _ = self.helper.kill();
        let _ = self.helper.wait();
        self.env.report();
    }
}

/// The `[update]` table of helper.toml: the stack's release pins.
fn update_table(env: &Env) -> String {
    let pins = env.stack.release_keys();
    let array =
        |items: Vec<String>| format!("[{}]", items.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", "));
    format!(
        "[update]\nrelease_keys = {}\nrelease_key_pins = {}\nthreshold = {}\nmin_sequence = {}\n",
        array(pins.spki_b64()),
        array(pins.pins()),
        pins.threshold,
        pins.min_sequence
    )
}

/// Where the node's image store holds the base image.
fn base_in_store(node: &Node, image: &GuestImage) -> PathBuf {
    node.data_dir().join("images").join(format!("{}.raw", image.digest.trim_start_matches("sha256:")))
}

/// What a guest said on its console: its "BCD-GUEST:" lines.
#[derive(Debug, Default)]
pub struct Console {
    pub lines: Vec<String>,
}

impl Console {
    fn read(path: &Path) -> Console {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        Console {
            lines: text
                .lines()
                .filter_map(|l| l.split_once("BCD-GUEST: "))
                .map(|(_, s)| s.trim().to_string())
                .collect(),
        }
    }

    /// The value of the last "<key> <value>" line.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.lines.iter().rev().find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
    }

    /// Whether the guest said it is ready (its metadata fetched and printed).
    pub fn ready(&self) -> bool {
        self.lines.iter().any(|l| l == "ready")
    }

    /// The guest's MemTotal, as it last said it.
    pub fn memtotal_kb(&self) -> Option<u64> {
        self.value("memtotal-kb").and_then(|v| v.parse().ok())
    }
}

/// Checks a guest's console: its instance id, its user data's digest, and a
/// workload token of the stack's issuer naming it, with it as audience.
pub fn must_prove_identity(world: &GuestWorld, console: &Console, id: &str, user_data: &[u8]) -> String {
    assert_eq!(console.value("instance-id"), Some(id), "{console:?}\n{}", world.network_state());
    assert_eq!(console.value("user-data-sha256"), Some(hex::encode(Sha256::digest(user_data)).as_str()), "{console:?}");
    let token = console.value("token").unwrap_or_else(|| panic!("no token: {console:?}")).to_string();
    let key = match world.env.stack.intent_public_keys().unwrap().workload_issuer {
        pki::PublicKey::P256(k) => k,
        other => panic!("the workload issuer is {other:?}"),
    };
    let issuer = devstack::workload_issuer(world.env.stack.trust_domain());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let claims = pki::jws::verify_workload_token(&token, &[key], &issuer, id, now).expect("the guest's token verifies");
    assert_eq!(
        (claims.sub.as_str(), claims.node.as_str()),
        (format!("instance:{id}").as_str(), world.node_id.as_str())
    );
    token
}
