//! Placement scenarios (issue 13; docs/harness.md, "Scenarios"): a pinned,
//! NUMA-affine flavor gets `vcpupin` and a strict `numatune` within one NUMA
//! node of its host and off the pool's reserved CPUs, and a 2 MiB huge-page
//! flavor gets page backing and no balloon (no locked memory), in the plans the
//! fakehw runtime writes (each validated by `virt-xml-validate`) and in the
//! specs the stack stored; a sandbox volume attached by its serial outlives
//! the sandbox and is attached again by the next one.

use devstack::{HugePageSize, HugePages, InstanceRequest, PoolPolicy, SectionState, VolumeState};
use prost::Message as _;

use crate::common::{DEADLINE, Env};
use crate::host::must_create_policy_pool;
use crate::vps::{files, must_delete_instance, must_run_instance, request, require_validator};

/// The host CPUs of each `<vcpupin … cpuset="N">` of a plan, in order.
fn vcpupins(plan: &str) -> Vec<u32> {
    plan.lines()
        .filter(|l| l.contains("<vcpupin "))
        .map(|l| {
            let at = l.find("cpuset=\"").unwrap() + 8;
            l[at..].split('"').next().unwrap().parse().unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn pinned_and_huge_page_flavors_are_placed_in_their_plans() {
    let scenario = "pinned_and_huge_page_flavors_are_placed_in_their_plans";
    let Some(env) = Env::start(scenario).await else { return };
    if !require_validator(scenario) {
        return;
    }
    let policy = PoolPolicy {
        hugepages: Some(HugePages { size: HugePageSize::Mi2, count: 1024 }),
        reserved_cpus: vec![0, 1],
        ..PoolPolicy::default()
    };
    let pool = must_create_policy_pool(&env, "placed", policy).await;
    // l40s: CPUs 0-31 on NUMA node 0, 32-63 on node 1.
    let mut node = env.must_make_node("host", "l40s").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;
    env.stack
        .await_until("host APPLIED", DEADLINE, |v| {
            v.section_status(&node_id, "host").filter(|s| s.is(SectionState::Applied, "Applied"))
        })
        .await
        .unwrap();
    let system = env
        .stack
        .await_until("the inventory with huge pages", DEADLINE, |v| {
            v.inventory(&node_id)
                .into_iter()
                .find(|s| s.name == "system")
                .and_then(|s| proto::SystemInventory::decode(s.content.as_slice()).ok())
                .filter(|s| s.hugepages_2mi == 1024)
        })
        .await
        .unwrap();

    // Pinned: node 0 first, off the reserved CPUs 0 and 1.
    let small = must_run_instance(&env, &node, &pool, InstanceRequest { pin_cpus: true, ..request(4, 2) }).await;
    let pin = small.spec.cpus.clone().expect("placement pinned it");
    assert_eq!((pin.numa_node, pin.host_cpus.as_slice()), (0, [2, 3, 4, 5].as_slice()));
    // 28 more do not fit in node 0's 26 free CPUs: node 1 takes them, all on node 1.
    let big = must_run_instance(&env, &node, &pool, InstanceRequest { pin_cpus: true, ..request(28, 4) }).await;
    let pin = big.spec.cpus.clone().expect("placement pinned it");
    assert_eq!(pin.numa_node, 1);
    assert_eq!(pin.host_cpus, (32..60).collect::<Vec<u32>>());

    for row in [&small, &big] {
        let pin = row.spec.cpus.as_ref().unwrap();
        let plan = std::fs::read_to_string(files(&node, &row.id).plan).unwrap();
        let pinned = vcpupins(&plan);
        assert_eq!(pinned, pin.host_cpus, "vCPU i on host CPU i of the spec:\n{plan}");
        let numa = &system.numa[pin.numa_node as usize];
        assert!(pinned.iter().all(|c| numa.cpus.contains(c) && !matches!(c, 0 | 1)), "{pinned:?} off node {}", numa.id);
        assert!(plan.contains(&format!(r#"<memory mode="strict" nodeset="{}"></memory>"#, pin.numa_node)), "{plan}");
        assert!(plan.contains(r#"<memballoon model="virtio">"#), "a pinned guest keeps its balloon:\n{plan}");
    }

    // Huge pages: 2 GiB of 2 MiB pages (never swapped: no <locked/>), no balloon.
    let paged =
        must_run_instance(&env, &node, &pool, InstanceRequest { hugepage_bytes: 2 << 20, ..request(2, 2) }).await;
    let plan = std::fs::read_to_string(files(&node, &paged.id).plan).unwrap();
    for want in [r#"<page size="2048" unit="KiB"></page>"#, r#"<memballoon model="none"></memballoon>"#] {
        assert!(plan.contains(want), "the plan lacks {want}:\n{plan}");
    }
    assert!(!plan.contains("<locked>"), "huge pages need no locked memory:\n{plan}");
    assert!(!plan.contains("<vcpupin"), "a floating guest is not pinned:\n{plan}");
    // 1024 pages reserved, 1024 booked: one more huge-page guest does not fit.
    let more =
        env.stack.create_instance(&pool, InstanceRequest { hugepage_bytes: 2 << 20, ..request(1, 2) }).await.unwrap();
    let row = env.stack.instance(&more).unwrap().unwrap();
    assert!(row.reason.contains("lack 1024 free huge pages of 2Mi (have 0 of 1024 reserved)"), "{row:?}");
    node.stop().await;
    env.report();
}

/// What the first sandbox leaves at the start of its volume.
const WORK: &[u8] = b"work of the first sandbox";

/// Writes `bytes` at the start of a (sparse) volume file, keeping its size.
fn write_head(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

/// The first bytes of a volume file, as many as WORK has.
fn read_head(path: &std::path::Path) -> Vec<u8> {
    use std::io::Read as _;
    let mut buf = vec![0; WORK.len()];
    std::fs::File::open(path).unwrap().read_exact(&mut buf).unwrap();
    buf
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_volume_attached_by_its_serial_outlives_the_sandbox() {
    let scenario = "a_sandbox_volume_attached_by_its_serial_outlives_the_sandbox";
    let Some(env) = Env::start(scenario).await else { return };
    if !require_validator(scenario) {
        return;
    }
    let pool = must_create_policy_pool(&env, "sandboxes", PoolPolicy::default()).await;
    let mut node = env.must_make_node("host", "cpu").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;
    let volume = env.stack.create_volume(&node_id, 2 << 30).await.unwrap();
    env.stack.await_volume_state(&volume, VolumeState::Ready, DEADLINE).await.unwrap();
    let file = node.data_dir().join(format!("fakehw-root/var/lib/bcd/volumes/{volume}.raw"));
    let attach = proto::VolumeAttachment { volume_id: volume.clone(), serial: "sandbox-data".into(), read_only: false };

    let sandbox =
        must_run_instance(&env, &node, &pool, InstanceRequest { volumes: vec![attach.clone()], ..request(1, 1) }).await;
    let plan = std::fs::read_to_string(files(&node, &sandbox.id).plan).unwrap();
    assert!(plan.contains("<serial>sandbox-data</serial>"), "attached by its serial:\n{plan}");
    write_head(&file, WORK);
    must_delete_instance(&env, &sandbox.id).await;

    // The sandbox is gone; its volume, its bytes and its row are not.
    assert!(!files(&node, &sandbox.id).domain.exists() && !files(&node, &sandbox.id).plan.exists());
    assert_eq!(read_head(&file), WORK);
    assert_eq!(env.stack.volume(&volume).unwrap().unwrap().state, VolumeState::Ready);
    // The next sandbox finds it where the first left it, placed on its host.
    let next = must_run_instance(&env, &node, &pool, InstanceRequest { volumes: vec![attach], ..request(1, 1) }).await;
    assert_eq!(next.node_id.as_deref(), Some(node_id.as_str()));
    let plan = std::fs::read_to_string(files(&node, &next.id).plan).unwrap();
    assert!(
        plan.contains(&format!("volumes/{volume}.raw")) && plan.contains("<serial>sandbox-data</serial>"),
        "{plan}"
    );
    assert_eq!(read_head(&file), WORK);
    must_delete_instance(&env, &next.id).await;
    env.stack.delete_volume(&volume).await.unwrap();
    env.stack.await_volume_state(&volume, VolumeState::Deleted, DEADLINE).await.unwrap();
    assert!(!file.exists(), "deleting the volume, not the sandbox, removes it");
    node.stop().await;
    env.report();
}

/// Writes the fake root's memory pressure (PSI) at `avg10` percent.
fn press(node: &daemon_harness::node::Node, avg10: u32) {
    let dir = node.data_dir().join("fakehw-root/proc/pressure");
    std::fs::create_dir_all(&dir).unwrap();
    let psi = format!(
        "some avg10={avg10}.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    );
    std::fs::write(dir.join("memory"), psi).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_overcommitted_guest_is_ballooned_to_its_floor_under_pressure_and_deflated_after() {
    let scenario = "an_overcommitted_guest_is_ballooned_to_its_floor_under_pressure_and_deflated_after";
    let Some(env) = Env::start(scenario).await else { return };
    if !require_validator(scenario) {
        return;
    }
    let policy = PoolPolicy { memory_overcommit_percent: 150, ..PoolPolicy::default() };
    let pool = must_create_policy_pool(&env, "overcommitted", policy).await;
    let mut node = env.must_make_node("host", "cpu").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;
    let req = InstanceRequest { memory_floor_bytes: 1 << 30, ..request(2, 4) };
    let row = must_run_instance(&env, &node, &pool, req).await;
    let id = row.id.clone();
    let memory = |want: u64| {
        let id = id.clone();
        move |v: &devstack::StackView<'_>| v.instance(&id).filter(|r| r.current_memory_bytes == Some(want))
    };
    env.stack.await_until("the guest at its full memory", DEADLINE, memory(4 << 30)).await.unwrap();
    let balloons = node.data_dir().join("fakehw-plans/libvirt-kvm.balloons");
    assert!(!balloons.exists());

    press(&node, 80);
    env.stack.await_until("the guest ballooned to its floor", DEADLINE, memory(1 << 30)).await.unwrap();
    let kept: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&balloons).unwrap()).unwrap();
    assert_eq!(kept[&id], serde_json::json!(1u64 << 30), "{kept}");
    let plan = std::fs::read_to_string(files(&node, &id).plan).unwrap();
    assert!(
        plan.contains(r#"<memory unit="KiB">4194304</memory>"#) && plan.contains(r#"<memballoon model="virtio">"#),
        "{plan}"
    );

    // A restart keeps the balloon (it is on disk) and defines nothing again.
    node.stop().await;
    node.start().expect("bcd node starts again");
    env.stack
        .await_until("instances APPLIED after the restart", DEADLINE, |v| {
            v.section_status(&node_id, "instances").filter(|s| s.is(SectionState::Applied, "Applied"))
        })
        .await
        .unwrap();
    assert_eq!(env.stack.instance(&id).unwrap().unwrap().current_memory_bytes, Some(1 << 30));
    let dom: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(files(&node, &id).domain).unwrap()).unwrap();
    assert_eq!(dom["defines"], 1, "{dom}");

    press(&node, 5);
    env.stack.await_until("the guest deflated", DEADLINE, memory(4 << 30)).await.unwrap();
    assert!(!balloons.exists(), "no balloon left once deflated");
    node.stop().await;
    env.report();
}
