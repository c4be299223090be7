//! VPS scenarios (issue 11; docs/harness.md, "Scenarios"): bcd joins a
//! `vps-host` pool, and the dev stack places instances on it; the fakehw
//! runtime defines and starts them (domain files, plans that
//! `virt-xml-validate` accepts, seeds, taps), their secret user data
//! arrives sealed and is never logged, a metadata request gets a workload
//! token naming the instance, deletes remove everything, admission holds
//! back what does not fit until there is room, a restart and a reboot keep
//! a running instance running, an unknown runtime fails the section, a NIC
//! on a management bridge is refused as libvirt would (`<id>.error`), and
//! create/delete churn leaves nothing behind on either side.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use daemon_harness::node::Node;
use daemon_harness::prereq;
use devstack::{
    Acceptance, CommandOptions, CommandStatus, InstanceRequest, InstanceRow, InstanceState, PoolKind, PoolSpec,
    SectionState, SpecUpdate, VolumeState,
};
use serde_json::json;

use crate::common::{DEADLINE, Env};

/// The runtime every fakehw VPS host has.
pub const RUNTIME: &str = "libvirt-kvm";

/// A VPS host pool whose nodes are adopted on their first session.
pub async fn must_create_vps_pool(env: &Env, name: &str) -> String {
    let spec =
        PoolSpec { name: name.into(), acceptance: Acceptance::None, kind: PoolKind::VpsHost, ..PoolSpec::default() };
    env.stack.create_pool(spec).await.expect("the pool is created")
}

/// Whether virt-xml-validate (libvirt-clients, with xmllint) runs here;
/// required: every scenario's plans are validated.
pub fn require_validator(scenario: &str) -> bool {
    let present = std::process::Command::new("virt-xml-validate")
        .arg("/dev/null")
        .output()
        .map(|o| !String::from_utf8_lossy(&o.stderr).contains("not found"))
        .unwrap_or(false);
    prereq::require(scenario, "virt-xml-validate (Debian's libvirt-clients and libxml2-utils)", present)
}

/// An instance request of `vcpus` and `gib` GiB on the instance bridge.
pub fn request(vcpus: u32, gib: u64) -> InstanceRequest {
    InstanceRequest {
        runtime: RUNTIME.into(),
        vcpus,
        memory_bytes: gib << 30,
        nics: vec![proto::InstanceNic { bridge: "bcbr0".into(), mac: "52:54:00:12:34:56".into() }],
        ..InstanceRequest::default()
    }
}

/// The fake root's files of one instance on `node`.
pub struct Files {
    pub domain: PathBuf,
    pub plan: PathBuf,
    pub seed: PathBuf,
    pub taps: PathBuf,
}

pub fn files(node: &Node, id: &str) -> Files {
    let root = node.data_dir().join("fakehw-root");
    Files {
        domain: root.join(format!("var/lib/bcd/domains/{id}.json")),
        plan: node.data_dir().join(format!("fakehw-plans/{id}.xml")),
        seed: root.join(format!("var/lib/bcd/seeds/{id}")),
        taps: root.join("run/bcd/taps"),
    }
}

/// The domain file of an instance, as JSON.
pub fn domain(node: &Node, id: &str) -> serde_json::Value {
    let path = files(node, id).domain;
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Fails unless virt-xml-validate accepts the plan as a libvirt domain.
pub fn must_validate(plan: &Path) {
    let out = std::process::Command::new("virt-xml-validate").arg(plan).arg("domain").output().unwrap();
    assert!(
        out.status.success(),
        "virt-xml-validate refuses {}: {}{}",
        plan.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Creates an instance and waits until it runs; validates its plan.
pub async fn must_run_instance(env: &Env, node: &Node, pool: &str, req: InstanceRequest) -> InstanceRow {
    let id = env.stack.create_instance(pool, req).await.expect("the instance is created");
    let row = env.stack.await_instance_state(&id, InstanceState::Running, DEADLINE).await.expect("it runs");
    must_validate(&files(node, &id).plan);
    row
}

/// Deletes an instance and waits until the stack records it deleted.
pub async fn must_delete_instance(env: &Env, id: &str) {
    env.stack.delete_instance(id).await.expect("the instance is deleted");
    env.stack.await_instance_state(id, InstanceState::Deleted, DEADLINE).await.expect("its host confirms it gone");
}

/// A metadata request of the simulated guest `instance` on `node`: the
/// status and the body.
pub fn metadata_get(node: &Node, instance: &str, path: &str) -> (u16, String) {
    let mut s = UnixStream::connect(node.data_dir().join("metadata.sock")).expect("the metadata socket");
    write!(s, "GET {path} HTTP/1.1\r\nHost: metadata\r\nBcd-Instance: {instance}\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    // A chunked body (Go's default without a length) is one chunk here.
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body.split("\r\n").nth(1).unwrap_or_default().to_string()
    } else {
        body.to_string()
    };
    (status, body)
}

/// What is left under the fake root: domain files, plans, seeds, taps,
/// volumes, addresses, overlays.
pub fn leftovers(node: &Node) -> Vec<String> {
    let root = node.data_dir().join("fakehw-root");
    let mut left = Vec::new();
    for dir in [
        root.join("var/lib/bcd/domains"),
        root.join("var/lib/bcd/seeds"),
        root.join("var/lib/bcd/volumes"),
        root.join("var/lib/bcd/addresses"),
        root.join("var/lib/bcd/overlays"),
        root.join("run/bcd/taps"),
        node.data_dir().join("fakehw-plans"),
    ] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            left.extend(entries.flatten().map(|e| e.path().display().to_string()));
        }
    }
    left
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vps_host_runs_an_instance_from_create_to_delete() {
    let scenario = "a_vps_host_runs_an_instance_from_create_to_delete";
    let Some(env) = Env::start(scenario).await else { return };
    if !require_validator(scenario) {
        return;
    }
    let pool = must_create_vps_pool(&env, "vps").await;
    let mut node = env.must_make_node("host", "cpu").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;
    let labels = env.stack.node_labels(&node_id).unwrap();
    assert!(labels.iter().any(|l| l.label == "bc.dev/driver.libvirt-kvm"), "{labels:?}");

    let user_data = "#cloud-config\nchpasswd: {list: 'root:p4ss-w0rd-never-logged'}\n";
    let secret = env.stack.put_secret(user_data.as_bytes()).await.unwrap();
    let req = InstanceRequest { user_data_secret: Some(secret.clone()), ..request(2, 4) };
    let row = must_run_instance(&env, &node, &pool, req).await;
    assert_eq!(row.node_id.as_deref(), Some(node_id.as_str()));
    let id = row.id;
    let f = files(&node, &id);
    let dom = domain(&node, &id);
    assert_eq!((dom["defines"].as_u64(), dom["state"].as_str()), (Some(1), Some("running")), "{dom}");
    let written = std::fs::read_to_string(f.seed.join("user-data")).unwrap();
    assert_eq!(written, user_data, "the secret user data arrived sealed and was opened into the seed");
    let mode = std::fs::metadata(f.seed.join("user-data")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(!std::fs::read_to_string(&f.plan).unwrap().contains("p4ss-w0rd"), "the plan holds no secret");
    assert_eq!(std::fs::read_dir(&f.taps).unwrap().count(), 1, "one tap for its one NIC");

    // The simulated guest asks its metadata endpoint for a workload token.
    let audience = "https://vault.dev.local";
    let (status, token) = metadata_get(&node, &id, &format!("/v1/token?audience={audience}"));
    assert_eq!(status, 200, "{token}");
    let issuer_key = match env.stack.intent_public_keys().unwrap().workload_issuer {
        pki::PublicKey::P256(k) => k,
        other => panic!("the workload issuer is {other:?}"),
    };
    let issuer = devstack::workload_issuer(env.stack.trust_domain());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let claims = pki::jws::verify_workload_token(token.trim(), &[issuer_key], &issuer, audience, now).unwrap();
    assert_eq!((claims.sub.as_str(), claims.node.as_str()), (format!("instance:{id}").as_str(), node_id.as_str()));
    let (status, _) = metadata_get(&node, "inst-not-here", &format!("/v1/token?audience={audience}"));
    assert_eq!(status, 404, "no token for an instance that does not run here");
    let (status, seed) = metadata_get(&node, &id, "/nocloud/meta-data");
    assert!(status == 200 && seed.contains(&format!("instance-id: {id}")), "{status} {seed}");

    must_delete_instance(&env, &id).await;
    for path in [&f.domain, &f.plan, &f.seed] {
        assert!(!path.exists(), "{} remains", path.display());
    }
    assert!(leftovers(&node).is_empty(), "{:?}", leftovers(&node));
    node.assert_never_printed("p4ss-w0rd-never-logged", "the secret user data");
    node.assert_never_printed(token.trim(), "the workload token");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_that_does_not_fit_starts_once_the_first_is_deleted() {
    let scenario = "an_instance_that_does_not_fit_starts_once_the_first_is_deleted";
    let Some(env) = Env::start(scenario).await else { return };
    if !require_validator(scenario) {
        return;
    }
    let pool = must_create_vps_pool(&env, "vps").await;
    let mut node = env.must_make_node("host", "cpu").await; // 32 cores, 128 GiB
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;
    let first = must_run_instance(&env, &node, &pool, request(20, 32)).await;
    // Pinned: placement leaves room to the host's own admission.
    let second = InstanceRequest { node: Some(node_id.clone()), ..request(20, 32) };
    let second = env.stack.create_instance(&pool, second).await.unwrap();
    let held = env
        .stack
        .await_until("the second instance to be held back", DEADLINE, |v| {
            let row = v.instance(&second)?;
            v.note(format_args!("{} {:?}", row.state, row.reason));
            (row.state == InstanceState::Stopped && row.reason.starts_with("ResourcesExhausted:")).then_some(row)
        })
        .await
        .unwrap();
    assert!(held.reason.contains("needs 20 vCPUs"), "{held:?}");
    let section = env
        .stack
        .await_until("instances PROGRESSING Retrying", DEADLINE, |v| {
            v.section_status(&node_id, "instances").filter(|s| s.is(SectionState::Progressing, "Retrying"))
        })
        .await
        .unwrap();
    assert_eq!(section.message, format!("ResourcesExhausted: this host cannot start {second} now"));
    assert!(!files(&node, &second).domain.exists() || domain(&node, &second)["state"] == "defined");

    must_delete_instance(&env, &first.id).await;
    env.stack.await_instance_state(&second, InstanceState::Running, DEADLINE).await.unwrap();
    must_validate(&files(&node, &second).plan);
    env.stack
        .await_until("instances APPLIED", DEADLINE, |v| {
            v.section_status(&node_id, "instances").filter(|s| s.is(SectionState::Applied, "Applied"))
        })
        .await
        .unwrap();
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_instance_survives_a_restart_and_a_reboot() {
    let scenario = "a_running_instance_survives_a_restart_and_a_reboot";
    let Some(env) = Env::start(scenario).await else { return };
    if !require_validator(scenario) {
        return;
    }
    let pool = must_create_vps_pool(&env, "vps").await;
    let mut node = env.must_make_node("host", "cpu").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;
    let id = must_run_instance(&env, &node, &pool, request(2, 2)).await.id;
    let before = env.stack.await_session(&node_id, 1, DEADLINE).await.unwrap();

    // A restart of bcd: the domain keeps running and is not defined again.
    node.stop().await;
    node.start().unwrap();
    let after = env.stack.await_session(&node_id, before.epoch + 1, DEADLINE).await.unwrap();
    env.stack
        .await_until("the restarted bcd to report", DEADLINE, |v| {
            v.section_status(&node_id, "instances").filter(|s| s.is(SectionState::Applied, "Applied"))
        })
        .await
        .unwrap();
    let dom = domain(&node, &id);
    assert_eq!((dom["defines"].as_u64(), dom["starts"].as_u64()), (Some(1), Some(1)), "{dom}");
    assert_eq!(env.stack.instance(&id).unwrap().unwrap().state, InstanceState::Running);

    // A reboot shuts every domain off; bcd starts it again from the next boot.
    let cmd = env.stack.enqueue_command(&node_id, "node.reboot", json!({}), CommandOptions::default()).await.unwrap();
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    let rebooted = env.stack.await_session(&node_id, after.epoch + 1, DEADLINE).await.unwrap();
    let started_again = env
        .stack
        .await_until("the domain to run in the new boot", DEADLINE, |_| {
            let dom = domain(&node, &id);
            (dom["boot_id"] == rebooted.boot_id.as_str()).then_some(dom)
        })
        .await
        .unwrap();
    assert_eq!((started_again["defines"].as_u64(), started_again["starts"].as_u64()), (Some(1), Some(2)));
    env.stack.await_instance_state(&id, InstanceState::Running, DEADLINE).await.unwrap();
    must_validate(&files(&node, &id).plan);
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_runtime_is_unschedulable_and_fails_the_section() {
    let scenario = "an_unknown_runtime_is_unschedulable_and_fails_the_section";
    let Some(env) = Env::start(scenario).await else { return };
    let pool = must_create_vps_pool(&env, "vps").await;
    let mut node = env.must_make_node("host", "cpu").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;

    // No host announces it: the stack does not place it, and says which label is missing.
    let req = InstanceRequest { runtime: "firecracker".into(), ..request(1, 1) };
    let id = env.stack.create_instance(&pool, req).await.unwrap();
    let row = env.stack.instance(&id).unwrap().unwrap();
    assert_eq!(row.state, InstanceState::Unschedulable);
    assert!(row.reason.starts_with("instance-unschedulable: "), "{row:?}");
    assert!(row.reason.contains("lack the label bc.dev/driver.firecracker"), "{row:?}");

    // A spec that names it anyway fails the section with a clear reason.
    let odd = proto::InstanceSpec {
        id: "inst-odd".into(),
        runtime: "firecracker".into(),
        vcpus: 1,
        memory_bytes: 1 << 30,
        state: "running".into(),
        ..Default::default()
    };
    let section = proto::InstancesSection { instances: vec![odd], volumes: vec![] };
    env.stack.publish_spec(&node_id, SpecUpdate { instances: Some(section), ..SpecUpdate::default() }).await.unwrap();
    let failed = env
        .stack
        .await_until("instances FAILED RuntimeUnknown", DEADLINE, |v| {
            v.section_status(&node_id, "instances").filter(|s| s.is(SectionState::Failed, "RuntimeUnknown"))
        })
        .await
        .unwrap();
    assert!(
        failed.message.contains(r#"instance inst-odd names runtime "firecracker"; this bcd has libvirt-kvm"#),
        "{failed:?}"
    );
    assert!(leftovers(&node).is_empty(), "{:?}", leftovers(&node));
    env.stack.delete_instance(&id).await.unwrap();
    assert_eq!(env.stack.instance(&id).unwrap().unwrap().state, InstanceState::Deleted);
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn create_and_delete_churn_leaves_nothing_behind() {
    let scenario = "create_and_delete_churn_leaves_nothing_behind";
    let Some(env) = Env::start(scenario).await else { return };
    if !require_validator(scenario) {
        return;
    }
    let pool = must_create_vps_pool(&env, "vps").await;
    let mut node = env.must_make_node("host", "cpu").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;
    for round in 0..10 {
        let volume = env.stack.create_volume(&node_id, (1 + round) << 30).await.unwrap();
        env.stack.await_volume_state(&volume, VolumeState::Ready, DEADLINE).await.unwrap();
        let attach =
            proto::VolumeAttachment { volume_id: volume.clone(), serial: format!("disk{round}"), read_only: false };
        let req = InstanceRequest { volumes: vec![attach], user_data: b"#cloud-config\n".to_vec(), ..request(4, 8) };
        let row = must_run_instance(&env, &node, &pool, req).await;
        let plan = std::fs::read_to_string(files(&node, &row.id).plan).unwrap();
        assert!(plan.contains(&format!("volumes/{volume}.raw")), "the plan attaches the volume:\n{plan}");
        must_delete_instance(&env, &row.id).await;
        env.stack.delete_volume(&volume).await.unwrap();
        env.stack.await_volume_state(&volume, VolumeState::Deleted, DEADLINE).await.unwrap();
    }
    assert!(leftovers(&node).is_empty(), "the fake root keeps {:?}", leftovers(&node));
    let (instances, volumes) = env.stack.view(|v| (v.instances(), v.volumes())).unwrap();
    assert_eq!(instances.len(), 10);
    assert!(instances.iter().all(|i| i.state == InstanceState::Deleted && !i.books_room()), "{instances:?}");
    assert!(volumes.iter().all(|v| v.state == VolumeState::Deleted), "{volumes:?}");
    let spec = env.stack.node_specs(&node_id).unwrap().pop().unwrap();
    let latest = <proto::NodeSpec as prost::Message>::decode(spec.payload.as_slice()).unwrap();
    let section = latest.instances.unwrap_or_default();
    assert!(section.instances.is_empty() && section.volumes.is_empty(), "{section:?}");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nic_on_a_management_bridge_is_refused_as_libvirt_would() {
    let scenario = "a_nic_on_a_management_bridge_is_refused_as_libvirt_would";
    let Some(env) = Env::start(scenario).await else { return };
    let pool = must_create_vps_pool(&env, "vps").await;
    let mut node = env.must_make_node("host", "cpu").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;
    let mut req = request(1, 1);
    req.nics[0].bridge = "br-mgmt".into();
    let id = env.stack.create_instance(&pool, req).await.unwrap();
    let failed = env.stack.await_instance_state(&id, InstanceState::Failed, DEADLINE).await.unwrap();
    assert!(
        failed.reason.starts_with(r#"InstanceInvalid: domain: bridge "br-mgmt" is not an instance network"#),
        "{failed:?}"
    );
    let error = node.data_dir().join(format!("fakehw-plans/{id}.error"));
    let why = std::fs::read_to_string(&error).unwrap();
    assert!(why.contains("br-mgmt"), "{why}");
    assert!(!files(&node, &id).plan.exists(), "no plan for a refused domain");
    env.stack
        .await_until("instances FAILED InstanceFailed", DEADLINE, |v| {
            v.section_status(&node_id, "instances").filter(|s| s.is(SectionState::Failed, "InstanceFailed"))
        })
        .await
        .unwrap();
    must_delete_instance(&env, &id).await;
    assert!(!error.exists(), "the .error goes with the instance");
    assert!(leftovers(&node).is_empty(), "{:?}", leftovers(&node));
    node.stop().await;
    env.report();
}
