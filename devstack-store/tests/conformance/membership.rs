//! The cases of who is in the fleet: pools, join tokens and join requests,
//! nodes (their life, their session epoch and fence, their liveness),
//! sessions, certificates and hardware bindings.

use devstack_store::rows::{JoinMethod, NodeBindingRow, NodeCertRow, NodeJoinRow, NodeKeyLevel, NodeState, PoolRow};
use devstack_store::sessions::NewSession;
use devstack_store::{Error, Store, bindings, certs, join_requests, nodes, pools, sessions, tokens};

use crate::seed::{self, POOL, read, write};

pub fn pools_read_back_by_id_and_name_oldest_first(store: &Store) {
    let (newer, older) = (seed::pool_row("pool_a", "alpha", 20), seed::pool_row("pool_b", "beta", 10));
    let vps = PoolRow {
        gpu_model: None,
        expect_gpu_count: None,
        kind: "vps-host".into(),
        policy: r#"{"x":1}"#.into(),
        ..seed::pool_row("pool_c", "gamma", 30)
    };
    write(store, |c| [&newer, &older, &vps].into_iter().try_for_each(|p| pools::insert(c, p)));
    assert_eq!(read(store, |c| pools::get(c, "pool_a")), Some(newer.clone()));
    assert_eq!(read(store, |c| pools::by_name(c, "gamma")), Some(vps.clone()));
    assert_eq!(read(store, pools::all), vec![older, newer, vps]);
    assert_eq!(read(store, |c| pools::get(c, "pool_unknown")), None);
    assert_eq!(read(store, |c| pools::by_name(c, "unknown")), None);
}

pub fn a_pool_name_is_taken_once(store: &Store) {
    seed::pool(store);
    let again = store.write(|c| pools::insert(c, &seed::pool_row("pool_2", "pool one", 0)));
    assert!(again.as_ref().is_err_and(seed::is_unique_violation), "a second pool of one name: {again:?}");
    assert_eq!(read(store, pools::all).len(), 1);
}

pub fn tokens_read_back_by_hash_and_pool(store: &Store) {
    seed::pool(store);
    let (first, second) = (seed::token("jt_1", 3, 0, 1_000), seed::token("jt_2", 1, 1, 2_000));
    write(store, |c| [&second, &first].into_iter().try_for_each(|t| tokens::insert(c, t)));
    assert_eq!(read(store, |c| tokens::by_sha256(c, "jt_1-sha256")), Some(first.clone()));
    assert_eq!(read(store, |c| tokens::of_pool(c, POOL)), vec![first, second]);
    assert_eq!(read(store, |c| tokens::by_sha256(c, "unknown")), None);
    assert!(read(store, |c| tokens::of_pool(c, "pool_unknown")).is_empty());
}

fn uses(store: &Store, id: &str) -> u32 {
    read(store, |c| tokens::by_sha256(c, &format!("{id}-sha256"))).expect("the token").uses
}

pub fn a_token_is_spent_one_use_at_a_time_until_none_is_left(store: &Store) {
    seed::pool(store);
    write(store, |c| tokens::insert(c, &seed::token("jt_1", 2, 0, 1_000)));
    let use_once = || write(store, |c| tokens::use_once(c, "jt_1", 500));
    assert!(use_once() && use_once(), "two uses of two");
    assert!(!use_once(), "no use left");
    assert_eq!(uses(store, "jt_1"), 2);
    assert!(!write(store, |c| tokens::use_once(c, "jt_unknown", 500)), "an unknown token");
}

pub fn an_expired_token_is_not_spent(store: &Store) {
    seed::pool(store);
    write(store, |c| tokens::insert(c, &seed::token("jt_1", 5, 0, 1_000)));
    assert!(!write(store, |c| tokens::use_once(c, "jt_1", 1_000)), "at its expiry");
    assert!(!write(store, |c| tokens::use_once(c, "jt_1", 1_001)), "past it");
    assert_eq!(uses(store, "jt_1"), 0);
    assert!(write(store, |c| tokens::use_once(c, "jt_1", 999)), "just before");
    assert_eq!(uses(store, "jt_1"), 1);
}

pub fn a_join_request_is_answered_the_same_again(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| join_requests::insert(c, "req-sha", "node_1", "{\"payload\":\"x\"}", 5));
    let answer = Some(("node_1".to_string(), "{\"payload\":\"x\"}".to_string()));
    assert_eq!(read(store, |c| join_requests::get(c, "req-sha")), answer);
    assert_eq!(read(store, |c| join_requests::get(c, "other-sha")), None);
    let again = store.write(|c| join_requests::insert(c, "req-sha", "node_1", "other", 6));
    assert!(again.as_ref().is_err_and(seed::is_unique_violation), "a request recorded twice: {again:?}");
    assert_eq!(read(store, |c| join_requests::get(c, "req-sha")), answer);
}

pub fn nodes_read_back_in_join_order(store: &Store) {
    seed::pool(store);
    assert_eq!(read(store, nodes::last_seq), 0, "no node yet");
    let joined = nodes::NewNode { join_token_id: Some("jt_1"), created_at_ms: 7, ..seed::new_node("node_b") };
    write(store, |c| nodes::insert(c, &joined));
    seed::nodes(store, &["node_a", "node_c"]);
    let all = read(store, nodes::all);
    assert_eq!(all.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(), ["node_b", "node_a", "node_c"]);
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq), "seq follows the joins");
    let first = &all[0];
    assert_eq!((first.pool_id.as_str(), first.state, first.reason.as_str()), (POOL, NodeState::Joined, ""));
    assert_eq!(
        (first.hostname.as_str(), first.daemon_version.as_str(), first.hardware_id.as_str()),
        ("host", "1.0.0", "hw")
    );
    assert_eq!((first.created_at_ms, first.adopted_at_ms, first.acceptance_command_id.as_deref()), (7, None, None));
    assert_eq!((first.applied_generation, first.spec_generation, first.session_epoch), (0, 0, 0));
    assert_eq!((first.gateway_id.as_str(), first.unreachable_since_ms), ("", None));
    assert_eq!(read(store, |c| nodes::get(c, "node_b")).as_ref(), Some(first));
    assert_eq!(read(store, |c| nodes::of_pool(c, POOL)), all);
    assert!(read(store, |c| nodes::of_pool(c, "pool_unknown")).is_empty());
    assert_eq!(read(store, |c| nodes::after(c, first.seq)), all[1..].to_vec());
    assert_eq!(read(store, nodes::last_seq), all[2].seq);
    assert_eq!(read(store, |c| nodes::get(c, "node_unknown")), None);
}

fn state(store: &Store, id: &str) -> NodeState {
    read(store, |c| nodes::get(c, id)).expect("the node").state
}

pub fn a_node_is_accepted_then_adopted_once(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    assert!(write(store, |c| nodes::set_accepting(c, "node_1", "cmd_accept")));
    assert!(!write(store, |c| nodes::set_accepting(c, "node_1", "cmd_other")), "accepting already");
    let node = read(store, |c| nodes::get(c, "node_1")).unwrap();
    assert_eq!((node.state, node.acceptance_command_id.as_deref()), (NodeState::Accepting, Some("cmd_accept")));
    assert!(write(store, |c| nodes::adopt(c, "node_1", 50)));
    assert!(!write(store, |c| nodes::adopt(c, "node_1", 60)), "adopted already");
    write(store, |c| nodes::reject(c, "node_1", "too late"));
    let node = read(store, |c| nodes::get(c, "node_1")).unwrap();
    assert_eq!((node.state, node.adopted_at_ms, node.reason.as_str()), (NodeState::Adopted, Some(50), ""));
}

pub fn a_rejected_node_is_never_adopted(store: &Store) {
    seed::pool_and_nodes(store, &["node_1", "node_2"]);
    write(store, |c| nodes::reject(c, "node_1", "not accepting"));
    assert_eq!(state(store, "node_1"), NodeState::Joined, "only an accepting node is rejected");
    write(store, |c| nodes::set_accepting(c, "node_1", "cmd_1").map(drop));
    write(store, |c| nodes::reject(c, "node_1", "gpu count 4, expected 8"));
    let node = read(store, |c| nodes::get(c, "node_1")).unwrap();
    assert_eq!((node.state, node.reason.as_str()), (NodeState::Rejected, "gpu count 4, expected 8"));
    assert!(!write(store, |c| nodes::adopt(c, "node_1", 5)));
    assert!(!write(store, |c| nodes::set_accepting(c, "node_1", "cmd_2")));
    assert_eq!(state(store, "node_1"), NodeState::Rejected);
    assert!(write(store, |c| nodes::adopt(c, "node_2", 5)), "a joined node is adopted without acceptance");
    assert!(!write(store, |c| nodes::adopt(c, "node_unknown", 5)));
}

pub fn a_hello_and_an_applied_generation_are_recorded(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| nodes::record_hello(c, "node_1", "2.0.0", 3));
    let node = read(store, |c| nodes::get(c, "node_1")).unwrap();
    assert_eq!((node.daemon_version.as_str(), node.applied_generation), ("2.0.0", 3));
    assert!(write(store, |c| nodes::set_applied_generation(c, "node_1", 4)));
    assert!(!write(store, |c| nodes::set_applied_generation(c, "node_1", 4)), "unchanged");
    assert!(!write(store, |c| nodes::set_applied_generation(c, "node_unknown", 4)));
    assert_eq!(read(store, |c| nodes::get(c, "node_1")).unwrap().applied_generation, 4);
}

pub fn each_session_epoch_is_taken_once_and_moves_the_home(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    assert_eq!(write(store, |c| nodes::take_epoch(c, "node_1", "g1")), Some(1));
    assert_eq!(write(store, |c| nodes::take_epoch(c, "node_1", "g2")), Some(2));
    let node = read(store, |c| nodes::get(c, "node_1")).unwrap();
    assert_eq!((node.session_epoch, node.gateway_id.as_str()), (2, "g2"));
    assert_eq!(write(store, |c| nodes::take_epoch(c, "node_unknown", "g1")), None);
}

pub fn only_the_current_epoch_passes_the_fence(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    assert!(store.read(|c| nodes::fence(c, "node_1", 0)).is_ok(), "epoch 0 before any session");
    write(store, |c| nodes::take_epoch(c, "node_1", "g1"));
    write(store, |c| nodes::take_epoch(c, "node_1", "g1"));
    assert!(store.read(|c| nodes::fence(c, "node_1", 2)).is_ok());
    for (node, epoch, current) in [("node_1", 1, 2), ("node_1", 3, 2), ("node_unknown", 1, 0)] {
        match store.read(|c| nodes::fence(c, node, epoch)) {
            Err(Error::Fenced { node_id, epoch: e, current: now }) => {
                assert_eq!((node_id.as_str(), e, now), (node, epoch, current));
            }
            other => panic!("epoch {epoch} of {node}: {other:?}, not fenced"),
        }
    }
    let fenced_write = store.write(|c| {
        nodes::fence(c, "node_1", 1)?;
        nodes::set_applied_generation(c, "node_1", 9)
    });
    assert!(matches!(fenced_write, Err(Error::Fenced { .. })), "{fenced_write:?}");
    assert_eq!(read(store, |c| nodes::get(c, "node_1")).unwrap().applied_generation, 0, "not written");
}

fn unreachable_since(store: &Store, id: &str) -> Option<i64> {
    read(store, |c| nodes::get(c, id)).expect("the node").unreachable_since_ms
}

pub fn the_unreachable_mark_is_set_and_cleared_by_the_store_s_clock(store: &Store) {
    const TIMEOUT_MS: u64 = 30_000;
    seed::pool_and_nodes(store, &["node_1", "node_never_heard"]);
    write(store, |c| nodes::take_epoch(c, "node_1", "g1"));
    let mark = || write(store, |c| nodes::mark_unreachable(c, TIMEOUT_MS));
    // Heard a minute ago by its gateway's clock: past the timeout.
    assert!(
        write(store, |c| nodes::heard(c, &[("node_1", 1, 60_000)], &nodes::marked(c)?)).is_empty(),
        "no mark to clear"
    );
    assert_eq!(mark(), ["node_1"]);
    let since = unreachable_since(store, "node_1").expect("marked");
    assert!((since - read(store, devstack_store::clock::now_ms)).abs() < 60_000, "marked by the store's clock");
    assert!(mark().is_empty(), "marked once");
    assert!(
        write(store, |c| nodes::heard(c, &[("node_1", 0, 0)], &nodes::marked(c)?)).is_empty(),
        "a stale epoch clears nothing"
    );
    assert_eq!(unreachable_since(store, "node_1"), Some(since));
    assert_eq!(write(store, |c| nodes::heard(c, &[("node_1", 1, 0)], &nodes::marked(c)?)), ["node_1"]);
    assert_eq!(unreachable_since(store, "node_1"), None);
    // Heard just now; an older age reported after it does not move it back.
    write(store, |c| nodes::heard(c, &[("node_1", 1, 120_000)], &nodes::marked(c)?));
    assert!(mark().is_empty());
    assert_eq!(unreachable_since(store, "node_never_heard"), None, "a node never heard is not marked");
}

pub fn a_session_takes_the_next_epoch_and_its_gateway(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let first = write(store, |c| sessions::open(c, &seed::hello("node_1", "g1", 100), 8)).expect("a known node");
    let hello = NewSession { journal_id: "j2", boot_id: "b2", ..seed::hello("node_1", "g2", 200) };
    let second = write(store, |c| sessions::open(c, &hello, 8)).expect("a known node");
    assert_eq!((first.epoch, first.gateway_id.as_str(), first.connected_at_ms), (1, "g1", 100));
    assert_eq!((second.epoch, second.gateway_id.as_str(), second.journal_id.as_str()), (2, "g2", "j2"));
    assert_eq!(
        (second.boot_id.as_str(), second.daemon_version.as_str(), second.disconnected_at_ms),
        ("b2", "1.0.0", None)
    );
    assert_eq!(read(store, |c| sessions::of_node(c, "node_1")), vec![first, second]);
    let node = read(store, |c| nodes::get(c, "node_1")).unwrap();
    assert_eq!((node.session_epoch, node.gateway_id.as_str()), (2, "g2"));
    assert_eq!(read(store, |c| sessions::last_journal(c, "node_1")).as_deref(), Some("j2"));
    assert_eq!(write(store, |c| sessions::open(c, &seed::hello("node_unknown", "g1", 1), 8)), None);
    assert!(read(store, |c| sessions::of_node(c, "node_unknown")).is_empty());
    assert_eq!(read(store, |c| sessions::last_journal(c, "node_unknown")), None);
}

pub fn sessions_close_once_and_by_gateway(store: &Store) {
    seed::pool_and_nodes(store, &["node_1", "node_2", "node_3"]);
    let open =
        |node: &str, gateway: &str| write(store, |c| sessions::open(c, &seed::hello(node, gateway, 1), 8)).unwrap();
    let (one, two, three) = (open("node_1", "g1"), open("node_2", "g1"), open("node_3", "g2"));
    write(store, |c| sessions::close(c, one.id, 10));
    write(store, |c| sessions::close(c, one.id, 20));
    assert_eq!(write(store, |c| sessions::close_all_open(c, "g1", 30)), 1, "node_2's only");
    let closed_at = |node: &str| read(store, |c| sessions::of_node(c, node))[0].disconnected_at_ms;
    assert_eq!(closed_at("node_1"), Some(10), "closed once");
    assert_eq!(closed_at("node_2"), Some(30));
    assert_eq!(closed_at("node_3"), None, "another gateway's stays open");
    assert_eq!((two.gateway_id, three.gateway_id), ("g1".to_string(), "g2".to_string()));
}

pub fn a_session_forgets_closed_sessions_beyond_those_kept(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    for at in 1..=3 {
        let row = write(store, |c| sessions::open(c, &seed::hello("node_1", "g1", at), 2)).unwrap();
        write(store, |c| sessions::close(c, row.id, at));
    }
    write(store, |c| sessions::open(c, &seed::hello("node_1", "g1", 4), 2));
    let epochs: Vec<u64> = read(store, |c| sessions::of_node(c, "node_1")).iter().map(|s| s.epoch).collect();
    assert_eq!(epochs, [3, 4]);
}

fn cert(serial: &str, not_before_ms: i64, not_after_ms: i64) -> NodeCertRow {
    NodeCertRow {
        node_id: "node_1".into(),
        serial: serial.into(),
        spki_pin: "pin-a".into(),
        der: vec![0x30, serial.len() as u8],
        not_before_ms,
        not_after_ms,
        revoked_at_ms: None,
    }
}

pub fn certificates_read_back_and_the_valid_one_is_found_by_pin(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let (old, new) = (cert("01", 0, 1_000), cert("02", 500, 2_000));
    let other_key = NodeCertRow { spki_pin: "pin-b".into(), ..cert("03", 0, 2_000) };
    write(store, |c| certs::insert(c, &old, 10).and_then(|()| certs::insert(c, &new, 20)));
    write(store, |c| certs::insert(c, &other_key, 30));
    assert_eq!(read(store, |c| certs::get(c, "node_1", "01")), Some(old.clone()));
    assert_eq!(read(store, |c| certs::get(c, "node_1", "99")), None);
    assert_eq!(read(store, |c| certs::of_node(c, "node_1")), vec![old.clone(), new.clone(), other_key]);
    let valid_at = |now| read(store, |c| certs::valid_by_pin(c, "node_1", "pin-a", now)).map(|c| c.serial);
    assert_eq!(valid_at(100).as_deref(), Some("01"));
    assert_eq!(valid_at(600).as_deref(), Some("02"), "the one issued last");
    assert_eq!(valid_at(2_000), None, "past notAfter");
    assert_eq!(read(store, |c| certs::valid_by_pin(c, "node_1", "pin-c", 100)), None);
}

pub fn revoking_a_node_revokes_each_certificate_once(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    let revoked = NodeCertRow { revoked_at_ms: Some(5), ..cert("01", 0, 1_000) };
    write(store, |c| certs::insert(c, &revoked, 1).and_then(|()| certs::insert(c, &cert("02", 0, 1_000), 2)));
    write(store, |c| certs::insert(c, &cert("03", 0, 1_000), 3));
    assert_eq!(write(store, |c| certs::revoke_all(c, "node_1", 50)), 2);
    assert_eq!(write(store, |c| certs::revoke_all(c, "node_1", 60)), 0);
    let revoked_at: Vec<_> = read(store, |c| certs::of_node(c, "node_1")).iter().map(|c| c.revoked_at_ms).collect();
    assert_eq!(revoked_at, [Some(5), Some(50), Some(50)]);
    assert_eq!(read(store, |c| certs::valid_by_pin(c, "node_1", "pin-a", 100)), None);
}

fn join(serial: &str, node_key: NodeKeyLevel) -> NodeJoinRow {
    NodeJoinRow {
        node_id: "node_1".into(),
        method: JoinMethod::Tpm,
        node_key,
        policy: "certified".into(),
        serial: serial.into(),
        at_ms: 1,
    }
}

pub fn renewals_are_the_certificates_no_join_issued(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| certs::insert(c, &cert("01", 0, 1_000), 10));
    write(store, |c| bindings::record_join(c, &join("01", NodeKeyLevel::Tpm)));
    write(store, |c| certs::insert(c, &cert("02", 0, 1_000), 20));
    assert_eq!(read(store, |c| certs::renewed_since(c, "node_1", 0)), 1);
    assert_eq!(read(store, |c| certs::renewed_since(c, "node_1", 21)), 0);
}

pub fn an_ek_stays_bound_to_its_first_node(store: &Store) {
    seed::pool_and_nodes(store, &["node_1", "node_2"]);
    let binding = |node_id: &str, ak: u8, at: i64| NodeBindingRow {
        node_id: node_id.into(),
        kind: bindings::TPM_EK.into(),
        sha256: "ab".repeat(32),
        ak_public: vec![ak],
        ak_name: vec![0, 0x0b, ak],
        created_at_ms: at,
        updated_at_ms: at,
    };
    assert_eq!(read(store, |c| bindings::latest_node_key(c, "node_1")), None);
    write(store, |c| bindings::upsert(c, &binding("node_1", 1, 10)));
    write(store, |c| bindings::record_join(c, &join("01", NodeKeyLevel::Tpm)));
    write(store, |c| bindings::upsert(c, &binding("node_1", 2, 20)));
    write(store, |c| bindings::record_join(c, &join("02", NodeKeyLevel::Certified)));
    write(store, |c| bindings::upsert(c, &binding("node_2", 3, 30)));
    let expected = NodeBindingRow { created_at_ms: 10, ..binding("node_1", 2, 20) };
    assert_eq!(read(store, |c| bindings::get(c, bindings::TPM_EK, &"ab".repeat(32))), Some(expected.clone()));
    assert_eq!(read(store, |c| bindings::of_node(c, "node_1")), vec![expected.clone()]);
    assert_eq!(read(store, |c| bindings::tpm_of_node(c, "node_1")), Some(expected));
    assert_eq!(read(store, |c| bindings::tpm_of_node(c, "node_2")), None);
    assert_eq!(read(store, |c| bindings::get(c, bindings::TPM_EK, "cd")), None);
    let serials: Vec<String> = read(store, |c| bindings::joins(c, "node_1")).into_iter().map(|j| j.serial).collect();
    assert_eq!(serials, ["01", "02"]);
    assert_eq!(read(store, |c| bindings::latest_node_key(c, "node_1")), Some(NodeKeyLevel::Certified));
}
