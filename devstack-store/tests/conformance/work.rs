//! The cases of what the stack asks of a node and what it reports: commands
//! (the queue, deliveries, the state machine, the history), events (once
//! by journal and seq), specs, inventory, section statuses and GPU
//! reservations.

use devstack_store::commands::Outcome;
use devstack_store::reservations::Share;
use devstack_store::rows::ReleaseCause::Tenant;
use devstack_store::rows::{
    CommandRow, CommandStatus, InventoryRow, NodeSpecRow, ReservationRow, ReservationState, SectionState, SectionStatus,
};
use devstack_store::{Store, commands, events, inventory, nodes, reservations, sections, specs};

use crate::seed::{self, read, write};

pub fn a_command_reads_back_as_enqueued(store: &Store) {
    seed::pool_and_nodes(store, &["node_1", "node_2"]);
    let full = CommandRow {
        kind: "gpu.reset".into(),
        params: br#"{"gpu":1}"#.to_vec(),
        retry_safe: false,
        destructive: true,
        batch: "batch_1".into(),
        not_after_ms: 9_000,
        min_generation: 4,
        batch_approval: Some(vec![9, 9]),
        ..seed::command("cmd_b", "node_1")
    };
    let plain = seed::command("cmd_a", "node_1");
    write(store, |c| [&full, &plain].into_iter().try_for_each(|cmd| commands::insert(c, cmd)));
    write(store, |c| commands::insert(c, &seed::command("cmd_c", "node_2")));
    assert_eq!(read(store, |c| commands::get(c, "cmd_b")), Some(full.clone()));
    assert_eq!(read(store, |c| commands::of_node(c, "node_1")), vec![full, plain], "in enqueue order");
    assert_eq!(read(store, |c| commands::get(c, "cmd_unknown")), None);
    assert!(read(store, |c| commands::of_node(c, "node_unknown")).is_empty());
}

pub fn a_command_for_an_unknown_node_is_refused(store: &Store) {
    seed::pool(store);
    let refused = store.write(|c| commands::insert(c, &seed::command("cmd_1", "node_unknown")));
    assert!(refused.is_err(), "a command of no node: {refused:?}");
    assert_eq!(read(store, |c| commands::get(c, "cmd_1")), None);
}

fn ids(rows: Vec<CommandRow>) -> Vec<String> {
    rows.into_iter().map(|r| r.id).collect()
}

pub fn pending_and_open_commands_are_listed_by_state(store: &Store) {
    seed::pool_and_nodes(store, &["node_1", "node_2", "node_3"]);
    let with = |id: &str, node: &str, state: CommandStatus| CommandRow { state, ..seed::command(id, node) };
    let rows = [
        with("cmd_1", "node_1", CommandStatus::Pending),
        with("cmd_2", "node_1", CommandStatus::Delivered),
        with("cmd_3", "node_1", CommandStatus::Succeeded),
        with("cmd_4", "node_1", CommandStatus::Busy),
        with("cmd_5", "node_2", CommandStatus::Pending),
        with("cmd_6", "node_2", CommandStatus::Pending),
        with("cmd_7", "node_3", CommandStatus::Failed),
    ];
    write(store, |c| rows.iter().try_for_each(|r| commands::insert(c, r)));
    assert_eq!(ids(read(store, |c| commands::pending(c, "node_1"))), ["cmd_1"]);
    assert_eq!(ids(read(store, |c| commands::open(c, "node_1"))), ["cmd_1", "cmd_2", "cmd_4"]);
    assert!(read(store, |c| commands::open(c, "node_3")).is_empty());
    let mut waiting = read(store, commands::nodes_with_pending);
    waiting.sort();
    assert_eq!(waiting, ["node_1", "node_2"], "each node once");
}

fn command(store: &Store, id: &str) -> CommandRow {
    read(store, |c| commands::get(c, id)).expect("the command")
}

pub fn each_delivery_is_counted_and_the_first_moves_pending_to_delivered(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| commands::insert(c, &seed::command("cmd_1", "node_1")));
    write(store, |c| commands::mark_delivered(c, "cmd_1", 100));
    let once = command(store, "cmd_1");
    assert_eq!((once.state, once.deliveries, once.delivered_at_ms), (CommandStatus::Delivered, 1, Some(100)));
    let running = Outcome { state: CommandStatus::Running, reason: "", result: None, output: None };
    write(store, |c| commands::set_state(c, "cmd_1", &running, 150));
    write(store, |c| commands::mark_delivered(c, "cmd_1", 200));
    let twice = command(store, "cmd_1");
    assert_eq!((twice.state, twice.deliveries, twice.delivered_at_ms), (CommandStatus::Running, 2, Some(200)));
}

pub fn a_terminal_command_state_is_not_changed_again(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| commands::insert(c, &seed::command("cmd_1", "node_1")));
    let set = |state: CommandStatus, reason: &str, result: Option<&[u8]>, at: i64| {
        write(store, |c| commands::set_state(c, "cmd_1", &Outcome { state, reason, result, output: None }, at))
    };
    assert!(set(CommandStatus::Running, "", Some(b"partial"), 10));
    let running = command(store, "cmd_1");
    assert_eq!((running.state, running.finished_at_ms), (CommandStatus::Running, None));
    assert!(set(CommandStatus::Succeeded, "done", None, 20), "to a terminal state");
    let output = Outcome { state: CommandStatus::Failed, reason: "late", result: Some(b"other"), output: Some(b"o") };
    assert!(!write(store, |c| commands::set_state(c, "cmd_1", &output, 30)), "terminal already");
    let done = command(store, "cmd_1");
    assert_eq!((done.state, done.reason.as_str(), done.finished_at_ms), (CommandStatus::Succeeded, "done", Some(20)));
    assert_eq!(
        (done.result.as_deref(), done.output),
        (Some(&b"partial"[..]), None),
        "a result kept when none is given"
    );
    assert!(!set(CommandStatus::Running, "", None, 40), "no way back from terminal");
    let unknown = Outcome { state: CommandStatus::Failed, reason: "", result: None, output: None };
    assert!(!write(store, |c| commands::set_state(c, "cmd_unknown", &unknown, 50)));
}

pub fn a_command_s_history_is_kept_in_order(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| commands::insert(c, &seed::command("cmd_1", "node_1")));
    write(store, |c| commands::insert(c, &seed::command("cmd_2", "node_1")));
    write(store, |c| commands::record_update(c, "cmd_1", CommandStatus::Accepted, "", 10));
    write(store, |c| commands::record_update(c, "cmd_2", CommandStatus::Busy, "no lane", 11));
    write(store, |c| commands::record_update(c, "cmd_1", CommandStatus::Running, "", 12));
    write(store, |c| commands::record_update(c, "cmd_1", CommandStatus::Failed, "exit 1", 13));
    let history: Vec<_> =
        read(store, |c| commands::updates(c, "cmd_1")).into_iter().map(|u| (u.state, u.reason, u.at_ms)).collect();
    let expected = [
        (CommandStatus::Accepted, String::new(), 10),
        (CommandStatus::Running, String::new(), 12),
        (CommandStatus::Failed, "exit 1".to_string(), 13),
    ];
    assert_eq!(history, expected);
    assert_eq!(read(store, |c| commands::updates(c, "cmd_2")).len(), 1);
    assert!(read(store, |c| commands::updates(c, "cmd_unknown")).is_empty());
}

pub fn an_event_recorded_twice_is_recorded_once(store: &Store) {
    seed::pool_and_nodes(store, &["node_1", "node_2"]);
    let record = |node: &str, journal: &str, seq| write(store, |c| events::record(c, node, journal, seq, 1, 16));
    let acked = |node: &str, journal: &str| read(store, |c| events::acked_seq(c, node, journal));
    assert_eq!(acked("node_1", "j1"), 0, "a new journal");
    assert!(record("node_1", "j1", 1) && record("node_1", "j1", 2));
    assert!(!record("node_1", "j1", 2), "the same event again");
    assert!(!record("node_1", "j1", 1), "an older one");
    assert!(record("node_1", "j1", 5), "a later one, after a gap");
    assert_eq!(acked("node_1", "j1"), 5);
    assert!(record("node_1", "j2", 1) && record("node_2", "j1", 1), "another journal, another node");
    assert_eq!((acked("node_1", "j2"), acked("node_2", "j1")), (1, 1));
}

pub fn a_node_keeps_only_its_newest_journals(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let record = |journal: &str, at| write(store, |c| events::record(c, "node_1", journal, 1, at, 2));
    assert!(record("j1", 1) && record("j2", 2) && record("j3", 3));
    let acked = |journal: &str| read(store, |c| events::acked_seq(c, "node_1", journal));
    assert_eq!((acked("j1"), acked("j2"), acked("j3")), (0, 1, 1), "j1, the oldest, forgotten");
}

pub fn a_seq_above_the_store_s_range_is_the_caller_s_error(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let refused = store.write(|c| events::record(c, "node_1", "j1", 1 << 63, 1, 16));
    let why = refused.as_ref().err().and_then(|e| e.out_of_range());
    assert!(why.is_some(), "seq 2^63: {refused:?}");
    assert_eq!(read(store, |c| events::acked_seq(c, "node_1", "j1")), 0);
}

fn spec(generation: u64) -> NodeSpecRow {
    NodeSpecRow {
        node_id: "node_1".into(),
        generation,
        payload: vec![generation as u8; 3],
        envelope: vec![0xe0, generation as u8],
        created_at_ms: generation as i64 * 10,
    }
}

pub fn a_spec_becomes_the_node_s_generation(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    assert_eq!(read(store, |c| specs::latest(c, "node_1")), None);
    write(store, |c| specs::insert(c, &spec(1)));
    write(store, |c| specs::insert(c, &spec(2)));
    assert_eq!(read(store, |c| specs::latest(c, "node_1")), Some(spec(2)));
    assert_eq!(read(store, |c| specs::of_node(c, "node_1")), vec![spec(1), spec(2)]);
    assert_eq!(read(store, |c| nodes::get(c, "node_1")).unwrap().spec_generation, 2);
    let again = store.write(|c| specs::insert(c, &spec(2)));
    assert!(again.as_ref().is_err_and(seed::is_unique_violation), "a generation made twice: {again:?}");
}

pub fn an_inventory_section_is_replaced_by_the_next_report(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let at = |name, sha256, content| inventory::Section { name, sha256, content };
    write(store, |c| inventory::upsert(c, "node_1", &[at("system", "s1", b"sys")], 1));
    write(store, |c| inventory::upsert(c, "node_1", &[at("gpus", "g1", b"gpu")], 2));
    // Several in one statement; a name given twice keeps the last.
    let report = [at("system", "s0", b"sys0"), at("system", "s2", b"sys2")];
    write(store, |c| inventory::upsert(c, "node_1", &report, 3));
    write(store, |c| inventory::upsert(c, "node_1", &[], 4));
    let section = |name: &str, sha256: &str, content: &[u8], at| InventoryRow {
        node_id: "node_1".into(),
        name: name.into(),
        sha256: sha256.into(),
        content: content.to_vec(),
        updated_at_ms: at,
    };
    let expected = vec![section("gpus", "g1", b"gpu", 2), section("system", "s2", b"sys2", 3)];
    assert_eq!(read(store, |c| inventory::of_node(c, "node_1")), expected, "by name");
    assert_eq!(read(store, |c| inventory::names(c, "node_1")), ["gpus", "system"]);
    assert!(read(store, |c| inventory::of_node(c, "node_unknown")).is_empty());
}

fn status(section: &str, state: SectionState, reason: &str, generation: u64) -> SectionStatus {
    SectionStatus {
        node_id: "node_1".into(),
        section: section.into(),
        state,
        reason: reason.into(),
        message: format!("{section} {reason}"),
        generation,
        updated_at_ms: generation as i64,
    }
}

pub fn a_section_status_is_replaced_by_the_next_report(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let (trust, holds) = (
        status("trust", SectionState::Applied, "Applied", 1),
        status("holds", SectionState::Progressing, "Retrying", 1),
    );
    write(store, |c| sections::upsert(c, &[trust.clone(), holds.clone()]));
    // A section named twice in one report keeps the last; none writes nothing.
    let failed = status("holds", SectionState::Failed, "HoldFailed", 2);
    write(store, |c| sections::upsert(c, &[holds.clone(), failed.clone()]));
    write(store, |c| sections::upsert(c, &[]));
    assert_eq!(read(store, |c| sections::get(c, "node_1", "holds")), Some(failed.clone()));
    assert_eq!(read(store, |c| sections::of_node(c, "node_1")), vec![failed, trust], "by section");
    assert_eq!(read(store, |c| sections::names(c, "node_1")), ["holds", "trust"]);
    assert_eq!(read(store, |c| sections::get(c, "node_1", "instances")), None);
}

fn reservation(store: &Store, id: &str) -> ReservationRow {
    read(store, |c| reservations::get(c, id)).expect("the reservation")
}

pub fn a_reservation_reads_back_as_booked(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let share = Share { vcpus: 4, memory_bytes: 1 << 40, binding: "kubernetes".into() };
    write(store, |c| reservations::insert(c, "rsv_1", "node_1", &[0, 3], &share, 2, 100));
    let row = reservation(store, "rsv_1");
    assert_eq!(
        (row.node_id.as_str(), row.gpu_indexes.as_slice(), row.state),
        ("node_1", &[0, 3][..], ReservationState::Pending)
    );
    assert_eq!((row.vcpus, row.memory_bytes, row.binding.as_str()), (4, 1 << 40, "kubernetes"));
    assert_eq!((row.generation, row.release_generation, row.bound_generation), (2, None, None));
    assert_eq!((row.cdi_devices.len(), row.statement, row.last_refusal.as_str()), (0, None, ""));
    assert_eq!((row.created_at_ms, row.active_at_ms, row.released_at_ms), (100, None, None));
    assert_eq!(read(store, |c| reservations::get(c, "rsv_unknown")), None);
}

fn ids_of(rows: Vec<ReservationRow>) -> Vec<String> {
    rows.into_iter().map(|r| r.id).collect()
}

pub fn a_reservation_moves_pending_active_releasing_released(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let share = Share::default();
    write(store, |c| reservations::insert(c, "rsv_1", "node_1", &[0], &share, 1, 1));
    write(store, |c| reservations::insert(c, "rsv_2", "node_1", &[1], &share, 1, 2));
    write(store, |c| reservations::refuse(c, "rsv_1", "statement-invalid: bad signature"));
    assert_eq!(reservation(store, "rsv_1").last_refusal, "statement-invalid: bad signature");
    let devices = ["nvidia.com/gpu=0".to_string()];
    let activate = |at| write(store, |c| reservations::activate(c, "rsv_1", 2, &devices, "bc.slice", b"stmt", at));
    assert!(activate(10));
    assert!(!activate(11), "active already");
    let active = reservation(store, "rsv_1");
    assert_eq!(
        (active.state, active.bound_generation, active.cdi_devices.as_slice()),
        (ReservationState::Active, Some(2), &devices[..])
    );
    assert_eq!((active.statement.as_deref(), active.cgroup_parent.as_str()), (Some(&b"stmt"[..]), "bc.slice"));
    assert_eq!((active.last_refusal.as_str(), active.active_at_ms), ("", Some(10)), "the refusal cleared");
    let release = |generation| write(store, |c| reservations::start_release(c, "rsv_1", generation, Tenant, 15));
    assert!(release(3));
    assert!(!release(4), "releasing already");
    assert_eq!(ids_of(read(store, |c| reservations::held(c, "node_1"))), ["rsv_2"]);
    assert_eq!(ids_of(read(store, |c| reservations::taken(c, "node_1"))), ["rsv_1", "rsv_2"]);
    assert!(write(store, |c| reservations::finish_release(c, "rsv_1", 20)));
    assert!(!write(store, |c| reservations::finish_release(c, "rsv_1", 21)), "released already");
    let released = reservation(store, "rsv_1");
    assert_eq!(
        (released.state, released.release_generation, released.released_at_ms),
        (ReservationState::Released, Some(3), Some(20))
    );
    assert_eq!((released.release_cause, released.release_requested_at_ms), (Some(Ok(Tenant)), Some(15)));
    assert_eq!(ids_of(read(store, |c| reservations::taken(c, "node_1"))), ["rsv_2"]);
    assert_eq!(ids_of(read(store, |c| reservations::of_node(c, "node_1"))), ["rsv_1", "rsv_2"]);
}

pub fn only_a_reservation_that_is_not_over_fails(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let share = Share::default();
    write(store, |c| reservations::insert(c, "rsv_1", "node_1", &[0], &share, 1, 1));
    let fail = |id: &str, at| write(store, |c| reservations::fail(c, id, "no such gpu", at));
    assert_eq!(fail("rsv_1", 5), Some(ReservationState::Pending), "its state before");
    assert_eq!(fail("rsv_1", 6), None, "failed already");
    let failed = reservation(store, "rsv_1");
    assert_eq!(
        (failed.state, failed.reason.as_str(), failed.released_at_ms),
        (ReservationState::Failed, "no such gpu", Some(5))
    );
    write(store, |c| reservations::set_release_generation(c, "rsv_1", 7));
    assert_eq!(reservation(store, "rsv_1").release_generation, Some(7));
    assert_eq!(fail("rsv_unknown", 8), None);
    assert!(!write(store, |c| reservations::activate(c, "rsv_1", 1, &[], "", b"", 9)), "a failed one is not activated");
}
