//! The races: two writers of one row at once, as two joins or two gateways
//! would be, each side through its own store handle (`a`, `b`: two handles
//! on one PostgreSQL database, or the one SQLite store twice). The two
//! threads are released together by a barrier, each race is run
//! [`ROUNDS`] times on rows of its own, and every round has exactly one
//! winner. Only PostgreSQL shows a race honestly (SQLite's writes take one
//! lock in turn); they run on both so that both keep the contract.

use std::sync::Barrier;

use devstack_store::commands::Outcome;
use devstack_store::rows::{CommandStatus, NodeState};
use devstack_store::{Error, Result, Store, commands, events, facts, nodes, sessions, ticket_keys, tokens, usage};

use crate::seed::{self, read, write};

/// How many times each race is run.
const ROUNDS: usize = 20;

/// Runs `a` and `b` on two threads released together; their results (a
/// side's panic is the caller's).
fn at_once<A: Send, B: Send>(a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B + Send) -> (A, B) {
    let barrier = Barrier::new(2);
    let barrier = &barrier;
    std::thread::scope(|s| {
        let a = s.spawn(move || {
            barrier.wait();
            a()
        });
        let b = s.spawn(move || {
            barrier.wait();
            b()
        });
        (joined(a), joined(b))
    })
}

/// A side's result, or its panic again.
fn joined<T>(side: std::thread::ScopedJoinHandle<'_, T>) -> T {
    side.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Asserts exactly one of the two won.
fn exactly_one(round: usize, what: &str, a: bool, b: bool) {
    assert!(a ^ b, "round {round}: {what}: exactly one winner, not a {a} and b {b}");
}

pub fn a_token_s_last_use_goes_to_one_of_two_joins(a: &Store, b: &Store) {
    seed::pool(a);
    for round in 0..ROUNDS {
        let id = format!("jt_{round}");
        write(a, |c| tokens::insert(c, &seed::token(&id, 3, 2, i64::MAX)));
        let join = |store: &Store| write(store, |c| tokens::use_once(c, &id, 1));
        let (won_a, won_b) = at_once(|| join(a), || join(b));
        exactly_one(round, "the last use", won_a, won_b);
        let token = read(a, |c| tokens::by_sha256(c, &format!("{id}-sha256"))).expect("the token");
        assert_eq!(token.uses, token.max_uses, "round {round}");
    }
}

/// Opens a session of `node` on `g1` through `a` and one on `g2` through
/// `b`, at once; their epochs (g1's, g2's) and which gateway took the later.
fn two_sessions_at_once(a: &Store, b: &Store, node: &str) -> (u64, u64, &'static str) {
    let open = |store: &Store, gateway: &str| write(store, |c| sessions::open(c, &seed::hello(node, gateway, 1), 8));
    let (g1, g2) = at_once(|| open(a, "g1"), || open(b, "g2"));
    let (g1, g2) = (g1.expect("a known node").epoch, g2.expect("a known node").epoch);
    (g1, g2, if g1 > g2 { "g1" } else { "g2" })
}

fn fenced_at(store: &Store, node: &str, epoch: u64) -> Option<u64> {
    match store.read(|c| nodes::fence(c, node, epoch)) {
        Ok(()) => None,
        Err(Error::Fenced { current, .. }) => Some(current),
        Err(e) => panic!("the fence of epoch {epoch}: {e}"),
    }
}

pub fn two_sessions_of_one_node_take_two_epochs_and_the_later_owns_it(a: &Store, b: &Store) {
    seed::pool(a);
    for round in 0..ROUNDS {
        let node = format!("node_{round}");
        seed::nodes(a, &[&node]);
        let (g1, g2, home) = two_sessions_at_once(a, b, &node);
        let (earlier, later) = (g1.min(g2), g1.max(g2));
        assert_eq!((earlier, later), (1, 2), "round {round}: two epochs, each taken once");
        let row = read(b, |c| nodes::get(c, &node)).expect("the node");
        assert_eq!((row.session_epoch, row.gateway_id.as_str()), (later, home), "round {round}");
        let epochs: Vec<u64> = read(a, |c| sessions::of_node(c, &node)).iter().map(|s| s.epoch).collect();
        assert_eq!(epochs, [1, 2], "round {round}");
        assert_eq!(fenced_at(a, &node, later), None, "round {round}: the later passes the fence");
        assert_eq!(fenced_at(b, &node, earlier), Some(later), "round {round}: the earlier is fenced");
    }
}

/// A gateway's delivery of a command by the session of `epoch` (fenced).
fn deliver(store: &Store, node: &str, command: &str, epoch: u64) -> Result<()> {
    store.write(|c| {
        nodes::fence(c, node, epoch)?;
        commands::mark_delivered(c, command, 5)
    })
}

pub fn two_gateways_deliver_one_command_once(a: &Store, b: &Store) {
    seed::pool(a);
    for round in 0..ROUNDS {
        let (node, command) = (format!("node_{round}"), format!("cmd_{round}"));
        seed::nodes(a, &[&node]);
        write(a, |c| commands::insert(c, &seed::command(&command, &node)));
        let (g1, g2, home) = two_sessions_at_once(a, b, &node);
        let (on_g1, on_g2) = at_once(|| deliver(a, &node, &command, g1), || deliver(b, &node, &command, g2));
        exactly_one(round, "the delivery", on_g1.is_ok(), on_g2.is_ok());
        let (won, lost) = if home == "g1" { (on_g1, on_g2) } else { (on_g2, on_g1) };
        assert!(won.is_ok(), "round {round}: the later session's delivery: {won:?}");
        assert!(matches!(lost, Err(Error::Fenced { current, .. }) if current == g1.max(g2)), "round {round}: {lost:?}");
        let row = read(a, |c| commands::get(c, &command)).expect("the command");
        assert_eq!((row.deliveries, row.state), (1, CommandStatus::Delivered), "round {round}");
    }
}

pub fn an_event_sent_twice_at_once_is_recorded_once(a: &Store, b: &Store) {
    seed::pool_and_nodes(a, &["node_1"]);
    for round in 0..ROUNDS {
        let journal = format!("j{round}");
        // A new journal's first event, then an existing journal's next one.
        for seq in [1, 2] {
            let record = |store: &Store| write(store, |c| events::record(c, "node_1", &journal, seq, 1, 64));
            let (new_a, new_b) = at_once(|| record(a), || record(b));
            exactly_one(round, &format!("event {seq} of {journal}"), new_a, new_b);
            assert_eq!(read(b, |c| events::acked_seq(c, "node_1", &journal)), seq, "round {round}");
        }
    }
}

pub fn a_node_is_adopted_once_of_two_at_once(a: &Store, b: &Store) {
    seed::pool(a);
    for round in 0..ROUNDS {
        let node = format!("node_{round}");
        seed::nodes(a, &[&node]);
        let adopt = |store: &Store, at: i64| write(store, |c| nodes::adopt(c, &node, at));
        let (by_a, by_b) = at_once(|| adopt(a, 1), || adopt(b, 2));
        exactly_one(round, "the adoption", by_a, by_b);
        let row = read(a, |c| nodes::get(c, &node)).expect("the node");
        assert_eq!(
            (row.state, row.adopted_at_ms),
            (NodeState::Adopted, Some(if by_a { 1 } else { 2 })),
            "round {round}"
        );
    }
}

pub fn a_command_s_outcome_is_set_once_of_two_at_once(a: &Store, b: &Store) {
    seed::pool_and_nodes(a, &["node_1"]);
    for round in 0..ROUNDS {
        let command = format!("cmd_{round}");
        write(a, |c| commands::insert(c, &seed::command(&command, "node_1")));
        let finish = |store: &Store, state: CommandStatus| {
            let outcome = Outcome { state, reason: state.as_str(), result: None, output: None };
            write(store, |c| commands::set_state(c, &command, &outcome, 1))
        };
        let (succeeded, failed) = at_once(|| finish(a, CommandStatus::Succeeded), || finish(b, CommandStatus::Failed));
        exactly_one(round, "the outcome", succeeded, failed);
        let row = read(a, |c| commands::get(c, &command)).expect("the command");
        let winner = if succeeded { CommandStatus::Succeeded } else { CommandStatus::Failed };
        assert_eq!((row.state, row.reason.as_str()), (winner, winner.as_str()), "round {round}");
    }
}

pub fn two_gateways_meter_one_booking_and_each_window_is_kept_once(a: &Store, b: &Store) {
    seed::pool_and_nodes(a, &["node_1"]);
    for round in 0..ROUNDS {
        let id = format!("rsv_{round}");
        write(a, |c| {
            devstack_store::reservations::insert(c, &id, "node_1", &[0, 1], &Default::default(), 1, 1)?;
            let now = devstack_store::clock::now_ms(c)?;
            devstack_store::reservations::activate(c, &id, 1, &[], "", b"stmt", now - 3_500)?;
            devstack_store::reservations::start_release(c, &id, 2, devstack_store::rows::ReleaseCause::Tenant, now)
        });
        let meter = |store: &Store| write(store, |c| usage::meter(c, 1_000));
        let (wrote_a, wrote_b) = at_once(|| meter(a), || meter(b));
        let f = read(a, facts::snapshot);
        let windows: Vec<_> = f.windows.iter().filter(|w| w.reservation_id == id).collect();
        assert_eq!(wrote_a + wrote_b, windows.len(), "round {round}: each window written once: {windows:?}");
        let metered: i64 = windows.iter().map(|w| (w.end_ms - w.start_ms) * i64::from(w.gpus)).sum();
        assert_eq!(metered, 3_500 * 2, "round {round}");
    }
}

pub fn two_gateways_make_one_ticket_key_per_period(a: &Store, b: &Store) {
    for round in 0..ROUNDS {
        let period = round as i64;
        let make = |store: &Store, byte: u8| {
            write(store, |c| {
                ticket_keys::offer(c, period, &[byte; 32], 0)?;
                ticket_keys::since(c, period)
            })
        };
        let (seen_a, seen_b) = at_once(|| make(a, 1), || make(b, 2));
        assert_eq!(seen_a[0], seen_b[0], "round {round}: both gateways seal with one key");
        assert_eq!(read(a, |c| ticket_keys::since(c, period)).len(), 1, "round {round}");
    }
}
