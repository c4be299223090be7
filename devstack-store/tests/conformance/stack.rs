//! The cases of the stack's own tables and of the seam: releases, OTLP
//! exports, the fleet's counts, the gateways, the store's clock, settings,
//! and what `Store::write` promises (a failed transaction leaves nothing;
//! the liveness lane does not wait behind the shared connections) and
//! `Store::read_one` (one statement, never a write).

use devstack_store::otlp::Bounds;
use devstack_store::rows::{CommandRow, CommandStatus, FleetCounts, GatewayRow, ReleaseArtifactRow, ReleaseRow};
use devstack_store::{
    Error, Lane, POOL_SIZE, Store, clock, commands, fleet, gateways, nodes, otlp, pools, releases, settings,
    ticket_keys,
};

use crate::seed::{self, read, write};

fn release(version: &str, sequence: u64) -> ReleaseRow {
    ReleaseRow {
        version: version.into(),
        sequence,
        manifest: format!("{{\"version\":\"{version}\"}}").into_bytes(),
        envelope: "{\"payloadType\":\"x\"}".into(),
        created_at_ms: sequence as i64,
    }
}

fn artifact(os: &str, arch: &str, size: u64) -> ReleaseArtifactRow {
    ReleaseArtifactRow {
        version: "1.2.0".into(),
        os: os.into(),
        arch: arch.into(),
        sha256: format!("{arch}-sha"),
        size,
    }
}

pub fn a_release_reads_back_with_its_artifacts(store: &Store) {
    write(store, |c| releases::insert(c, &release("1.2.0", 7)));
    let (arm, amd) = (artifact("linux", "arm64", 3), artifact("linux", "amd64", 2));
    write(store, |c| {
        releases::insert_artifact(c, &arm, b"arm").and_then(|()| releases::insert_artifact(c, &amd, b"am"))
    });
    assert_eq!(read(store, |c| releases::get(c, "1.2.0")), Some(release("1.2.0", 7)));
    assert_eq!(read(store, |c| releases::artifacts(c, "1.2.0")), vec![amd, arm], "by platform");
    assert_eq!(read(store, |c| releases::artifact_bytes(c, "1.2.0", "linux", "arm64")), Some(b"arm".to_vec()));
    assert_eq!(read(store, |c| releases::artifact_bytes(c, "1.2.0", "linux", "riscv64")), None);
    assert_eq!(read(store, |c| releases::get(c, "9.9.9")), None);
    let again = store.write(|c| releases::insert(c, &release("1.2.0", 8)));
    assert!(again.as_ref().is_err_and(seed::is_unique_violation), "a version published twice: {again:?}");
}

fn bodies(store: &Store, node: &str) -> Vec<Vec<u8>> {
    read(store, |c| otlp::of_node(c, node)).into_iter().map(|e| e.body).collect()
}

pub fn otlp_exports_keep_the_newest_per_node_and_in_bytes(store: &Store) {
    let bounds = Bounds { per_node: 3, total_bytes: 10 };
    let put =
        |node: &str, at: i64, body: &[u8]| write(store, |c| otlp::insert(c, node, at, "protobuf", body, &[], bounds));
    for (at, body) in [b"1", b"2", b"3", b"4"].into_iter().enumerate() {
        put("node_a", at as i64, body);
    }
    let kept = read(store, |c| otlp::of_node(c, "node_a"));
    assert_eq!(kept.iter().map(|e| e.body.clone()).collect::<Vec<_>>(), [b"2", b"3", b"4"].map(|b| b.to_vec()));
    assert!(kept.windows(2).all(|w| w[0].seq < w[1].seq), "in the order received");
    assert_eq!((kept[0].received_at_ms, kept[0].encoding.as_str()), (1, "protobuf"));
    put("node_b", 9, b"123456789");
    assert_eq!(bodies(store, "node_a"), [b"4".to_vec()], "10 bytes in all: node_b's 9 and node_a's newest");
    assert_eq!(bodies(store, "node_b"), [b"123456789".to_vec()]);
    let refused = store.write(|c| otlp::insert(c, "node_a", 10, "xml", b"x", &[], bounds));
    assert!(refused.is_err(), "an encoding other than json or protobuf: {refused:?}");
}

pub fn the_fleet_is_counted_by_state(store: &Store) {
    assert_eq!(read(store, fleet::counts), FleetCounts::default(), "an empty fleet");
    seed::pool_and_nodes(store, &["node_1", "node_2", "node_3"]);
    write(store, |c| nodes::adopt(c, "node_1", 1));
    write(store, |c| nodes::set_accepting(c, "node_2", "cmd_1").and_then(|_| nodes::reject(c, "node_2", "no")));
    let with = |id: &str, state: CommandStatus| CommandRow { state, ..seed::command(id, "node_1") };
    let rows = [
        with("cmd_1", CommandStatus::Succeeded),
        with("cmd_2", CommandStatus::Unsupported),
        with("cmd_3", CommandStatus::Running),
    ];
    write(store, |c| rows.iter().try_for_each(|r| commands::insert(c, r)));
    let expected = FleetCounts { nodes: 3, adopted: 1, rejected: 1, sessions: 0, commands_done: 2, commands: 3 };
    assert_eq!(read(store, fleet::counts), expected);
}

fn gateway(store: &Store, id: &str) -> GatewayRow {
    read(store, gateways::all).into_iter().find(|g| g.id == id).expect("the gateway")
}

pub fn gateways_register_beat_and_are_listed_by_id(store: &Store) {
    assert!(read(store, gateways::all).is_empty());
    write(store, |c| gateways::register(c, "g2", "https://g2:1", "https://g2:2", 20));
    write(store, |c| gateways::register(c, "g1", "https://g1:1", "https://g1:2", 10));
    write(store, |c| gateways::beat(c, "g1"));
    write(store, |c| gateways::beat(c, "g_unknown"));
    let all = read(store, gateways::all);
    assert_eq!(all.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(), ["g1", "g2"], "by id, none made by a beat");
    let g1 = &all[0];
    assert_eq!((g1.grpc_url.as_str(), g1.https_url.as_str(), g1.started_at_ms), ("https://g1:1", "https://g1:2", 10));
    assert_eq!((g1.draining, g1.fenced_writes), (false, 0));
    assert!(all.iter().all(|g| (0..60_000).contains(&g.beat_ms_ago)), "beat just now by the store's clock: {all:?}");
}

pub fn a_gateway_drains_counts_fenced_writes_and_registers_again(store: &Store) {
    write(store, |c| gateways::register(c, "g1", "https://g1:1", "https://g1:2", 10));
    write(store, |c| gateways::set_draining(c, "g1"));
    write(store, |c| gateways::count_fenced(c, "g1").and_then(|()| gateways::count_fenced(c, "g1")));
    assert_eq!((gateway(store, "g1").draining, gateway(store, "g1").fenced_writes), (true, 2));
    write(store, |c| gateways::register(c, "g1", "https://g1:3", "https://g1:4", 30));
    let again = gateway(store, "g1");
    assert_eq!((again.draining, again.grpc_url.as_str(), again.started_at_ms), (false, "https://g1:3", 30));
    assert_eq!(read(store, gateways::all).len(), 1, "registered once");
}

fn system_now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    since.as_millis() as i64
}

pub fn the_store_s_clock_is_now_and_runs_forward(store: &Store) {
    let (first, second) = (read(store, clock::now_ms), read(store, clock::now_ms));
    assert!((first - system_now_ms()).abs() < 60_000, "the store's clock {first} is now");
    assert!(second >= first, "{second} after {first}");
}

pub fn a_setting_reads_back_and_is_replaced(store: &Store) {
    assert_eq!(read(store, |c| settings::get(c, "ca.key")), None);
    write(store, |c| settings::put(c, "ca.key", b"\x01key"));
    write(store, |c| settings::put(c, "ca.crt", b"crt"));
    write(store, |c| settings::put(c, "ca.key", b"\x02key"));
    assert_eq!(read(store, |c| settings::get(c, "ca.key")), Some(b"\x02key".to_vec()));
    assert_eq!(read(store, |c| settings::get(c, "ca.crt")), Some(b"crt".to_vec()));
}

pub fn a_ticket_key_is_made_once_per_period_and_forgotten(store: &Store) {
    assert_eq!(read(store, |c| ticket_keys::since(c, 0)), vec![]);
    write(store, |c| ticket_keys::offer(c, 7, &[1; 32], 10));
    write(store, |c| ticket_keys::offer(c, 8, &[2; 32], 10));
    // A second maker of period 7 (another gateway) changes nothing.
    write(store, |c| ticket_keys::offer(c, 7, &[3; 32], 11));
    let key = |period, byte| ticket_keys::TicketKey { period, key: vec![byte; 32] };
    assert_eq!(read(store, |c| ticket_keys::since(c, 7)), vec![key(7, 1), key(8, 2)], "oldest first");
    assert_eq!(read(store, |c| ticket_keys::since(c, 8)), vec![key(8, 2)]);
    assert_eq!(write(store, |c| ticket_keys::forget_before(c, 8)), 1);
    assert_eq!(read(store, |c| ticket_keys::since(c, 0)), vec![key(8, 2)]);
}

pub fn a_failed_write_leaves_nothing(store: &Store) {
    seed::pool(store);
    let failed: Result<(), Error> = store.write(|c| {
        nodes::insert(c, &seed::new_node("node_1"))?;
        pools::insert(c, &seed::pool_row("pool_2", "pool one", 0))
    });
    assert!(failed.as_ref().is_err_and(seed::is_unique_violation), "{failed:?}");
    assert_eq!(read(store, |c| nodes::get(c, "node_1")), None, "the node of the failed write");
    let refused: Result<(), Error> = store.write(|c| {
        settings::put(c, "k", b"v")?;
        nodes::fence(c, "node_unknown", 1)
    });
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    assert_eq!(read(store, |c| settings::get(c, "k")), None, "the setting of the fenced write");
}

pub fn a_write_s_value_comes_back_and_its_rows_are_read(store: &Store) {
    assert!(["sqlite", "postgres"].contains(&store.backend()));
    let seq = write(store, |c| {
        pools::insert(c, &seed::pool_row(seed::POOL, "pool one", 0))?;
        nodes::insert(c, &seed::new_node("node_1"))?;
        nodes::last_seq(c)
    });
    assert_eq!(read(store, |c| nodes::get(c, "node_1")).map(|n| n.seq), Some(seq));
}

pub fn a_one_statement_read_reads_and_refuses_a_second_statement_or_a_write(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let node = store.read_one(|c| nodes::get(c, "node_1")).unwrap();
    assert_eq!(node.map(|n| n.id), Some("node_1".to_string()));
    assert_eq!(store.read_one(|c| nodes::get(c, "node_unknown")).unwrap(), None);
    let fenced = store.read_one(|c| nodes::fence(c, "node_1", 7));
    assert!(matches!(fenced, Err(Error::Fenced { .. })), "{fenced:?}");
    let not_one = |e: &Error| e.to_string().contains("a one-statement read");
    let two = store.read_one(|c| nodes::get(c, "node_1").and_then(|_| nodes::get(c, "node_1")));
    assert!(two.as_ref().is_err_and(not_one), "a second statement: {two:?}");
    let wrote = store.read_one(|c| settings::put(c, "k", b"v"));
    assert!(wrote.as_ref().is_err_and(not_one), "a write: {wrote:?}");
    assert_eq!(read(store, |c| settings::get(c, "k")), None, "nothing written");
    // The store is as usable after a refused one as before.
    assert!(store.read_one(|c| nodes::get(c, "node_1")).unwrap().is_some());
    write(store, |c| settings::put(c, "k", b"v"));
}

pub fn the_liveness_lane_does_not_wait_for_the_shared_connections(store: &Store) {
    if store.backend() == "sqlite" {
        return; // One connection: both lanes are it.
    }
    let (held, all_held) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    std::thread::scope(|scope| {
        // Every shared connection in a transaction that waits.
        for _ in 0..POOL_SIZE {
            let (held, released) = (held.clone(), &released);
            scope.spawn(move || {
                write(store, |c| {
                    let now = clock::now_ms(c)?;
                    held.send(()).unwrap();
                    let _ = released.lock().unwrap().recv();
                    Ok(now)
                })
            });
        }
        for _ in 0..POOL_SIZE {
            all_held.recv().unwrap();
        }
        // The lane's write goes through at once (a shared checkout would
        // wait for a connection, and fail after its 30 s).
        let lane = store.write_on(Lane::Liveness, |c| settings::put(c, "beat", b"1"), |_| {});
        for _ in 0..POOL_SIZE {
            release.send(()).unwrap();
        }
        lane.expect("the liveness lane's write");
    });
    assert_eq!(read(store, |c| settings::get(c, "beat")).as_deref(), Some(&b"1"[..]));
}
