//! Host unit scenarios (issue 13; docs/harness.md, "Scenarios"): a pool's
//! policy is rendered into its nodes' signed `NodeSpec.host`, and the fakehw
//! bcd applies the units under its fake root: huge pages written to the
//! machine-wide `nr_hugepages` and spread over the NUMA nodes (node 0 taking
//! the remainder), modules listed in `proc/modules`; the inventory reads the
//! pages back and the stack books them; a unit that fails is reported in the
//! host section with its reason while the others still apply.

use std::path::{Path, PathBuf};

use daemon_harness::node::Node;
use devstack::{
    Acceptance, HUGEPAGES_UNIT, HugePageSize, HugePages, InstanceRequest, InstanceState, MODULES_UNIT, PoolKind,
    PoolPolicy, PoolSpec, SectionState,
};
use prost::Message as _;

use crate::common::{DEADLINE, Env};
use crate::vps::{must_run_instance, request, require_validator};

/// A VPS host pool with `policy`, adopting on the first session.
pub async fn must_create_policy_pool(env: &Env, name: &str, policy: PoolPolicy) -> String {
    let spec = PoolSpec {
        name: name.into(),
        acceptance: Acceptance::None,
        kind: PoolKind::VpsHost,
        policy,
        ..PoolSpec::default()
    };
    env.stack.create_pool(spec).await.expect("the pool is created")
}

fn root(node: &Node) -> PathBuf {
    node.data_dir().join("fakehw-root")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A kernel count under the fake root.
fn count(node: &Node, rel: &str) -> u64 {
    read(&root(node).join(rel)).trim().parse().unwrap()
}

fn node_pages(node_index: u32) -> String {
    format!("sys/devices/system/node/node{node_index}/hugepages/hugepages-2048kB/nr_hugepages")
}

const MACHINE_PAGES: &str = "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

/// The host section of the node's latest spec, as the stack stored it.
async fn stored_host(env: &Env, node_id: &str) -> proto::HostSection {
    let specs = env.stack.node_specs(node_id).unwrap();
    let latest = specs.last().expect("the node has a spec");
    proto::NodeSpec::decode(latest.payload.as_slice()).unwrap().host.expect("the spec has a host section")
}

/// The node's system inventory as the stack stored it, once it says `ok`.
async fn await_system(
    env: &Env,
    node_id: &str,
    what: &str,
    ok: impl Fn(&proto::SystemInventory) -> bool + Sync,
) -> proto::SystemInventory {
    env.stack
        .await_until(what, DEADLINE, |v| {
            v.inventory(node_id)
                .into_iter()
                .find(|s| s.name == "system")
                .and_then(|s| proto::SystemInventory::decode(s.content.as_slice()).ok())
                .filter(|s| ok(s))
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_policy_reserves_huge_pages_and_loads_modules_under_the_fake_root() {
    let scenario = "a_pool_policy_reserves_huge_pages_and_loads_modules_under_the_fake_root";
    let Some(env) = Env::start(scenario).await else { return };
    if !require_validator(scenario) {
        return;
    }
    let policy = PoolPolicy {
        hugepages: Some(HugePages { size: HugePageSize::Mi2, count: 1025 }),
        kernel_modules: vec!["tun".into(), "vhost_net".into()],
        reserved_cpus: vec![0, 1],
        ..PoolPolicy::default()
    };
    let pool = must_create_policy_pool(&env, "metal", policy).await;
    // l40s: 64 cores on 2 NUMA nodes.
    let mut node = env.must_make_node("host", "l40s").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;

    let status = env
        .stack
        .await_until("host APPLIED", DEADLINE, |v| {
            v.section_status(&node_id, "host").filter(|s| s.is(SectionState::Applied, "Applied"))
        })
        .await
        .unwrap();
    assert_eq!(status.generation, 1, "the first spec carries the pool's host section");
    assert!(status.message.contains("2 host unit(s) started"), "{status:?}");

    // The signed spec's units, byte for byte, where systemd reads them.
    let host = stored_host(&env, &node_id).await;
    assert_eq!(host.reserved_cpus, [0, 1]);
    let names: Vec<&str> = host.units.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, [HUGEPAGES_UNIT, MODULES_UNIT]);
    for unit in &host.units {
        let installed = std::fs::read(root(&node).join("etc/systemd/system").join(&unit.name)).unwrap();
        assert_eq!(installed, unit.content, "{} installed as signed", unit.name);
    }
    let spec = env.stack.node_specs(&node_id).unwrap().remove(0);
    let envelope = proto::Envelope::decode(spec.envelope.as_slice()).unwrap();
    assert!(!envelope.signatures.is_empty(), "the host section comes in a signed spec");

    // The kernel's files: machine-wide, and spread over the two nodes.
    assert_eq!(count(&node, MACHINE_PAGES), 1025);
    assert_eq!((count(&node, &node_pages(0)), count(&node, &node_pages(1))), (513, 512));
    let modules = read(&root(&node).join("proc/modules"));
    let loaded: Vec<&str> = modules.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(loaded, ["tun", "vhost_net"]);

    // The inventory reads them back, and the stack stores it.
    let sys = await_system(&env, &node_id, "the inventory with huge pages", |s| s.hugepages_2mi == 1025).await;
    let per_node: Vec<(u32, u64, usize)> = sys.numa.iter().map(|n| (n.id, n.hugepages_2mi, n.cpus.len())).collect();
    assert_eq!(per_node, [(0, 513, 32), (1, 512, 32)]);

    // The stack books them: 512 pages for the first guest, then 1024 more do not fit in 1025.
    let first = InstanceRequest { hugepage_bytes: 2 << 20, ..request(2, 1) };
    let row = must_run_instance(&env, &node, &pool, first).await;
    assert_eq!(row.spec.hugepage_bytes, 2 << 20);
    let second = InstanceRequest { hugepage_bytes: 2 << 20, ..request(2, 2) };
    let id = env.stack.create_instance(&pool, second).await.unwrap();
    let held = env.stack.instance(&id).unwrap().unwrap();
    assert_eq!(held.state, InstanceState::Unschedulable, "{held:?}");
    assert!(held.reason.contains("lack 1024 free huge pages of 2Mi (have 513 of 1025 reserved)"), "{held:?}");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_host_unit_fails_the_section_with_its_reason() {
    let scenario = "a_failing_host_unit_fails_the_section_with_its_reason";
    let Some(env) = Env::start(scenario).await else { return };
    let policy = PoolPolicy {
        hugepages: Some(HugePages { size: HugePageSize::Mi2, count: 16 }),
        kernel_modules: vec!["tun".into(), "no_such_module".into()],
        ..PoolPolicy::default()
    };
    let pool = must_create_policy_pool(&env, "metal", policy).await;
    let mut node = env.must_make_node("host", "cpu").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;

    let failed = env
        .stack
        .await_until("host FAILED UnitFailed", DEADLINE, |v| {
            v.section_status(&node_id, "host").filter(|s| s.is(SectionState::Failed, "UnitFailed"))
        })
        .await
        .unwrap();
    assert!(
        failed.message.contains(
            "1 of 2 unit(s) failed: bcd-modules.service: modprobe: FATAL: Module no_such_module not found in directory /lib/modules/6.8.0-fakehw"
        ),
        "{failed:?}"
    );
    // The other unit still ran: one NUMA node holds every page.
    assert_eq!(count(&node, MACHINE_PAGES), 16);
    assert_eq!(count(&node, &node_pages(0)), 16);
    let modules = std::fs::read_to_string(root(&node).join("proc/modules")).unwrap_or_default();
    assert!(!modules.contains("no_such_module"), "{modules}");
    let sys = await_system(&env, &node_id, "the inventory with huge pages", |s| s.hugepages_2mi == 16).await;
    assert_eq!(sys.numa.len(), 1);
    node.stop().await;
    env.report();
}
