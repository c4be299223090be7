//! The cases of the VPS tables: instances (placement, what their host
//! reports, deletion), volumes, a node's driver labels and the broker's
//! secrets.

use devstack_store::rows::{InstanceDesired, InstanceRow, InstanceState, VolumeRow, VolumeState};
use devstack_store::{Store, instances, labels, secrets, volumes};

use crate::seed::{self, POOL, read, write};

fn spec(id: &str) -> proto::InstanceSpec {
    proto::InstanceSpec {
        id: id.into(),
        runtime: "cloud-hypervisor".into(),
        vcpus: 2,
        memory_bytes: 1 << 31,
        state: "running".into(),
        ..Default::default()
    }
}

fn instance(id: &str, node_id: Option<&str>, state: InstanceState) -> InstanceRow {
    InstanceRow {
        id: id.into(),
        pool_id: POOL.into(),
        node_id: node_id.map(Into::into),
        desired: InstanceDesired::Running,
        state,
        reason: String::new(),
        spec: spec(id),
        pinned_node: None,
        generation: node_id.map(|_| 1),
        delete_generation: None,
        created_at_ms: 1,
        updated_at_ms: 1,
        running_at_ms: None,
        deleted_at_ms: None,
        current_memory_bytes: None,
    }
}

fn get(store: &Store, id: &str) -> InstanceRow {
    read(store, |c| instances::get(c, id)).expect("the instance")
}

fn ids(rows: Vec<InstanceRow>) -> Vec<String> {
    rows.into_iter().map(|r| r.id).collect()
}

pub fn instances_read_back_and_are_listed_by_host_and_schedulability(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let placed = InstanceRow {
        pinned_node: Some("node_1".into()),
        ..instance("inst-b", Some("node_1"), InstanceState::Pending)
    };
    let waiting = InstanceRow {
        reason: "no host has 2 vCPUs free".into(),
        ..instance("inst-a", None, InstanceState::Unschedulable)
    };
    write(store, |c| instances::insert(c, &placed).and_then(|()| instances::insert(c, &waiting)));
    assert_eq!(read(store, |c| instances::get(c, "inst-b")), Some(placed));
    assert_eq!(read(store, |c| instances::get(c, "inst-a")), Some(waiting));
    assert_eq!(ids(read(store, instances::all)), ["inst-b", "inst-a"], "oldest first");
    assert_eq!(ids(read(store, |c| instances::on_node(c, "node_1"))), ["inst-b"]);
    assert_eq!(ids(read(store, |c| instances::unschedulable(c, POOL))), ["inst-a"]);
    assert_eq!(read(store, |c| instances::get(c, "inst-unknown")), None);
}

pub fn an_instance_is_placed_reported_and_deleted_once(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| instances::insert(c, &instance("inst-1", None, InstanceState::Unschedulable)));
    write(store, |c| instances::place(c, "inst-1", "node_1", 3, 10));
    let placed = get(store, "inst-1");
    assert_eq!(
        (placed.node_id.as_deref(), placed.generation, placed.state),
        (Some("node_1"), Some(3), InstanceState::Pending)
    );
    let report = |state: InstanceState, reason: &str, at: i64| {
        write(store, |c| instances::report(c, "inst-1", state, reason, at))
    };
    assert!(report(InstanceState::Running, "", 20));
    assert!(!report(InstanceState::Running, "", 25), "unchanged");
    assert!(report(InstanceState::Stopped, "asked to", 30));
    let stopped = get(store, "inst-1");
    assert_eq!((stopped.state, stopped.running_at_ms, stopped.updated_at_ms), (InstanceState::Stopped, Some(20), 30));
    assert!(write(store, |c| instances::finish_delete(c, "inst-1", 40)));
    assert!(!write(store, |c| instances::finish_delete(c, "inst-1", 50)), "deleted already");
    assert!(!report(InstanceState::Running, "", 60), "a deleted instance takes no report");
    let deleted = get(store, "inst-1");
    assert_eq!((deleted.state, deleted.deleted_at_ms), (InstanceState::Deleted, Some(40)));
    assert!(read(store, |c| instances::on_node(c, "node_1")).is_empty());
}

pub fn an_instance_s_desired_state_spec_and_memory_are_recorded(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| instances::insert(c, &instance("inst-1", Some("node_1"), InstanceState::Running)));
    let pinned = proto::InstanceSpec {
        cpus: Some(proto::InstanceCpus { numa_node: 1, host_cpus: vec![4, 5] }),
        ..spec("inst-1")
    };
    write(store, |c| instances::set_spec(c, "inst-1", &pinned));
    assert_eq!(get(store, "inst-1").spec, pinned);
    assert!(write(store, |c| instances::report_memory(c, "inst-1", 1 << 30)));
    assert!(!write(store, |c| instances::report_memory(c, "inst-1", 1 << 30)), "unchanged");
    assert_eq!(get(store, "inst-1").current_memory_bytes, Some(1 << 30));
    let stopping = proto::InstanceSpec { state: "stopped".into(), ..pinned };
    write(store, |c| instances::set_desired(c, "inst-1", InstanceDesired::Deleted, &stopping, Some(5), 70));
    let row = get(store, "inst-1");
    assert_eq!((row.desired, row.delete_generation, row.updated_at_ms), (InstanceDesired::Deleted, Some(5), 70));
    assert_eq!(row.spec, stopping);
    write(store, |c| instances::set_unschedulable(c, "inst-1", "host gone", 80));
    let row = get(store, "inst-1");
    assert_eq!((row.state, row.reason.as_str()), (InstanceState::Unschedulable, "host gone"));
    assert!(read(store, |c| instances::unschedulable(c, POOL)).is_empty(), "not one that is deleted");
}

fn volume(store: &Store, id: &str) -> VolumeRow {
    read(store, |c| volumes::get(c, id)).expect("the volume")
}

pub fn a_volume_is_made_grown_reported_and_deleted_once(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| volumes::insert(c, "vol-b", "node_1", 1 << 30, 0, 5));
    write(store, |c| volumes::insert(c, "vol-a", "node_1", 1 << 20, 2, 6));
    let made = volume(store, "vol-b");
    assert_eq!(
        (made.size_bytes, made.state, made.deleting, made.generation),
        (1 << 30, VolumeState::Pending, false, 0)
    );
    assert_eq!((made.created_at_ms, made.delete_generation, made.deleted_at_ms), (5, None, None));
    write(store, |c| volumes::set_generation(c, "vol-b", 3));
    write(store, |c| volumes::resize(c, "vol-b", 1 << 33));
    let grown = volume(store, "vol-b");
    assert_eq!((grown.generation, grown.size_bytes), (3, 1 << 33));
    let report = |state: VolumeState, reason: &str| write(store, |c| volumes::report(c, "vol-b", state, reason));
    assert!(report(VolumeState::Ready, ""));
    assert!(!report(VolumeState::Ready, ""), "unchanged");
    write(store, |c| volumes::start_delete(c, "vol-b", 4));
    let deleting = volume(store, "vol-b");
    assert_eq!((deleting.deleting, deleting.delete_generation, deleting.state), (true, Some(4), VolumeState::Ready));
    assert!(write(store, |c| volumes::finish_delete(c, "vol-b", 9)));
    assert!(!write(store, |c| volumes::finish_delete(c, "vol-b", 10)), "deleted already");
    assert!(!report(VolumeState::Failed, "late"), "a deleted volume takes no report");
    assert_eq!(volume(store, "vol-b").deleted_at_ms, Some(9));
    let names = |rows: Vec<VolumeRow>| rows.into_iter().map(|v| v.id).collect::<Vec<_>>();
    assert_eq!(names(read(store, volumes::all)), ["vol-b", "vol-a"], "oldest first");
    assert_eq!(names(read(store, |c| volumes::on_node(c, "node_1"))), ["vol-a"]);
    assert_eq!(read(store, |c| volumes::get(c, "vol-unknown")), None);
}

fn drivers(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(name, version)| (name.to_string(), version.to_string())).collect()
}

fn labels_of(store: &Store, node: &str) -> Vec<(String, String)> {
    read(store, |c| labels::of_node(c, node)).into_iter().map(|l| (l.label, l.value)).collect()
}

pub fn a_node_s_driver_labels_are_replaced_only_when_they_change(store: &Store) {
    seed::pool_and_nodes(store, &["node_1", "node_2"]);
    let set = |node: &str, list: &[(&str, &str)]| write(store, |c| labels::set_drivers(c, node, &drivers(list), 1));
    assert!(set("node_1", &[("qemu", "9.0"), ("fake", "1")]));
    assert!(!set("node_1", &[("fake", "1"), ("qemu", "9.0")]), "the same, in another order");
    assert!(set("node_1", &[("qemu", "8.0"), ("qemu", "9.1")]), "a name twice takes its last version");
    assert!(set("node_2", &[("fake", "2")]));
    assert_eq!(labels_of(store, "node_1"), drivers(&[("bc.dev/driver.qemu", "9.1")]));
    assert!(set("node_1", &[]));
    assert!(labels_of(store, "node_1").is_empty());
    assert_eq!(labels_of(store, "node_2"), drivers(&[("bc.dev/driver.fake", "2")]), "another node's stay");
}

pub fn a_secret_reads_back_and_is_stored_once(store: &Store) {
    write(store, |c| secrets::insert(c, "sec-1", b"\x00hunter2\xff", 1));
    assert_eq!(read(store, |c| secrets::get(c, "sec-1")), Some(b"\x00hunter2\xff".to_vec()));
    assert_eq!(read(store, |c| secrets::get(c, "sec-unknown")), None);
    let again = store.write(|c| secrets::insert(c, "sec-1", b"other", 2));
    assert!(again.as_ref().is_err_and(seed::is_unique_violation), "{again:?}");
}
