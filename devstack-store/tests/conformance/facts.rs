//! The cases of the fleet facts (docs/harness.md, "Fleet invariants"):
//! unreachable marks kept with the heard time they judged from, spec
//! deliveries and when they were observed, release causes, and usage
//! windows that a meter run again (or by another gateway at once) adds
//! nothing to.

use devstack_store::reservations::Share;
use devstack_store::rows::{ReleaseCause, ReservationState};
use devstack_store::{Store, clock, facts, nodes, reservations, spec_deliveries, usage};

use crate::seed::{self, read, write};

pub fn a_mark_is_kept_with_its_heard_time_and_cleared_once(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| nodes::take_epoch(c, "node_1", "g1"));
    write(store, |c| nodes::heard(c, &[("node_1", 1, 60_000)], &nodes::marked(c)?));
    assert_eq!(write(store, |c| nodes::mark_unreachable(c, 30_000)), ["node_1"]);
    assert!(write(store, |c| nodes::mark_unreachable(c, 30_000)).is_empty(), "marked once");
    let marks = read(store, facts::snapshot).marks;
    assert_eq!(marks.len(), 1);
    let mark = &marks[0];
    assert!(mark.marked_at_ms - mark.heard_at_ms >= 30_000, "{mark:?}");
    assert_eq!(mark.cleared_at_ms, None);
    write(store, |c| nodes::heard(c, &[("node_1", 1, 0)], &nodes::marked(c)?));
    write(store, |c| nodes::heard(c, &[("node_1", 1, 0)], &nodes::marked(c)?));
    let marks = read(store, facts::snapshot).marks;
    assert_eq!(marks.len(), 1, "heard twice: still one mark");
    assert!(marks[0].cleared_at_ms.is_some_and(|at| at >= marks[0].marked_at_ms), "{marks:?}");
}

pub fn a_spec_delivered_is_observed_when_the_node_applies_it(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    write(store, |c| spec_deliveries::delivered(c, "node_1", 1));
    write(store, |c| spec_deliveries::delivered(c, "node_1", 2));
    write(store, |c| nodes::record_hello(c, "node_1", "1.0.0", 1));
    let d = read(store, facts::snapshot).deliveries;
    assert_eq!(
        d.iter().map(|d| (d.generation, d.observed_at_ms.is_some())).collect::<Vec<_>>(),
        [(1, true), (2, false)]
    );
    write(store, |c| spec_deliveries::delivered(c, "node_1", 2));
    write(store, |c| nodes::set_applied_generation(c, "node_1", 2));
    let d = read(store, facts::snapshot).deliveries;
    assert_eq!(d[1].deliveries, 2);
    assert!(
        d[1].observed_at_ms
            .is_some_and(|o| o >= d[1].delivered_at_ms && d[1].delivered_at_ms >= d[1].first_delivered_at_ms)
    );
}

/// Books `id` on node_1 (GPUs `gpus`) and binds it now by the store's clock.
fn bound(store: &Store, id: &str, gpus: &[u32]) {
    write(store, |c| {
        reservations::insert(c, id, "node_1", gpus, &Share::default(), 1, 1)?;
        let now = clock::now_ms(c)?;
        reservations::activate(c, id, 1, &[], "", b"stmt", now)
    });
}

pub fn a_release_keeps_its_cause_and_a_failure_after_it_does_not_change_it(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    bound(store, "rsv_1", &[0]);
    bound(store, "rsv_2", &[1]);
    assert!(write(store, |c| reservations::start_release(c, "rsv_1", 2, ReleaseCause::Tenant, 500)));
    assert_eq!(write(store, |c| reservations::fail(c, "rsv_1", "gone", 900)), Some(ReservationState::Releasing));
    assert_eq!(write(store, |c| reservations::fail(c, "rsv_2", "gone", 700)), Some(ReservationState::Active));
    let r1 = read(store, |c| reservations::get(c, "rsv_1")).unwrap();
    let r2 = read(store, |c| reservations::get(c, "rsv_2")).unwrap();
    assert_eq!((r1.release_cause, r1.release_requested_at_ms), (Some(Ok(ReleaseCause::Tenant)), Some(500)));
    assert_eq!((r2.release_cause, r2.release_requested_at_ms), (Some(Ok(ReleaseCause::NodeFailed)), Some(700)));
}

pub fn usage_windows_add_up_to_the_booked_time_and_a_replay_adds_none(store: &Store) {
    seed::pool_and_nodes(store, &["node_1"]);
    bound(store, "rsv_1", &[0, 1, 2]);
    write(store, |c| {
        let now = clock::now_ms(c)?;
        reservations::start_release(c, "rsv_1", 2, ReleaseCause::Tenant, now + 2_500).map(|_| ())
    });
    let first = write(store, |c| usage::meter(c, 1_000));
    assert!(first >= 2, "{first} windows");
    assert_eq!(write(store, |c| usage::meter(c, 1_000)), 0, "a replay adds nothing");
    let f = read(store, facts::snapshot);
    let r = &f.reservations[0];
    let booked = r.release_requested_at_ms.unwrap() - r.active_at_ms.unwrap();
    let metered: i64 = f.windows.iter().map(|w| (w.end_ms - w.start_ms) * i64::from(w.gpus)).sum();
    assert_eq!(metered, booked * 3);
    assert_eq!(r.metered_to_ms, r.release_requested_at_ms);
}
