//! I1, I5 and I8: the bookings, why they ended, and what they were metered as.
//!
//! I1: two bookings of one node that share a GPU never overlap in time
//! (each from its booking to when its node let go of it, or for ever while
//! it holds), and no node keeps a CDI spec whose devices another booking
//! of that node holds (pending, active or releasing).
//!
//! I5: every withdrawn or failed booking has a cause the stack knows; none
//! of them is connectivity, and a failure the node reported cannot have
//! come while its node was marked unreachable.
//!
//! I8: a booking's usage windows have no duplicate key, carry its GPU
//! count, tile its metered time exactly (from when its node bound it to how
//! far it was metered, no gap, no overlap), and an ended booking is metered
//! to its end and no further: they add up to booked time × GPUs.

use std::collections::{BTreeMap, BTreeSet};

use super::{Facts, Invariant, Ms, Violation, unreachable_spans};
use crate::store::rows::{ReleaseCause, ReservationFact, ReservationState, UsageWindow};

/// Where a booking ends for I1: when its node let go of it, or never.
fn booked_until(r: &ReservationFact) -> Ms {
    r.released_at_ms.unwrap_or(Ms::MAX)
}

/// Whether a booking still keeps its GPUs.
fn holds_gpus(r: &ReservationFact) -> bool {
    matches!(r.state, ReservationState::Pending | ReservationState::Active | ReservationState::Releasing)
}

/// The I1 violations.
pub(super) fn i1(facts: &Facts) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut by_node: BTreeMap<&str, Vec<&ReservationFact>> = BTreeMap::new();
    for r in &facts.store.reservations {
        by_node.entry(&r.node_id).or_default().push(r);
    }
    for (node_id, rs) in &by_node {
        for (i, a) in rs.iter().enumerate() {
            for b in &rs[i + 1..] {
                let shared: Vec<u32> = a.gpu_indexes.iter().filter(|g| b.gpu_indexes.contains(g)).copied().collect();
                if !shared.is_empty() && a.created_at_ms < booked_until(b) && b.created_at_ms < booked_until(a) {
                    out.push(Violation::new(
                        Invariant::I1,
                        node_id,
                        format!("{} and {}", a.id, b.id),
                        Some(b.created_at_ms),
                        format!("both book GPUs {shared:?} at once ({} is {}, {} is {})", a.id, a.state, b.id, b.state),
                    ));
                }
            }
        }
    }
    for (node_id, agent) in &facts.agents.nodes {
        let booked = by_node.get(node_id.as_str()).map(Vec::as_slice).unwrap_or_default();
        for (allocation, gpus) in &agent.holds {
            for other in booked.iter().filter(|r| &r.id != allocation && holds_gpus(r)) {
                let shared: Vec<u32> = gpus.iter().filter(|g| other.gpu_indexes.contains(g)).copied().collect();
                if !shared.is_empty() {
                    out.push(Violation::new(
                        Invariant::I1,
                        node_id,
                        allocation,
                        None,
                        format!(
                            "the node holds GPUs {shared:?} for {allocation}, which {} ({}) books",
                            other.id, other.state
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// The I5 violations.
pub(super) fn i5(facts: &Facts) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in &facts.store.reservations {
        let at = r.release_requested_at_ms;
        let violation = |detail: String| Violation::new(Invariant::I5, &r.node_id, &r.id, at, detail);
        match &r.release_cause {
            None if !holds_gpus(r) || r.state == ReservationState::Releasing => {
                out.push(violation(format!("{} with no recorded cause", r.state)));
            }
            None => {}
            Some(Err(text)) => {
                out.push(violation(format!("{} for a cause the stack does not know: {text:?}", r.state)))
            }
            Some(Ok(ReleaseCause::NodeFailed)) => {
                let away = unreachable_spans(&facts.store, &r.node_id, facts.store.taken_at_ms);
                if let Some(at) = at
                    && away.iter().any(|&(from, to)| from < at && at < to)
                {
                    out.push(violation("failed on a node report while its node was marked unreachable".into()));
                }
            }
            Some(Ok(ReleaseCause::Tenant | ReleaseCause::Expired)) => {}
        }
    }
    out
}

/// The I8 violations.
pub(super) fn i8(facts: &Facts) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut windows: BTreeMap<&str, Vec<&UsageWindow>> = BTreeMap::new();
    let mut keys = BTreeSet::new();
    for w in &facts.store.windows {
        if !keys.insert((&w.reservation_id, w.start_ms)) {
            out.push(Violation::new(
                Invariant::I8,
                "?",
                &w.reservation_id,
                Some(w.start_ms),
                "two usage windows with one key".into(),
            ));
        }
        windows.entry(&w.reservation_id).or_default().push(w);
    }
    for r in &facts.store.reservations {
        let mut ws = windows.remove(r.id.as_str()).unwrap_or_default();
        ws.sort_by_key(|w| w.start_ms);
        out.extend(tiling(r, &ws).map(|(at, detail)| Violation::new(Invariant::I8, &r.node_id, &r.id, at, detail)));
    }
    for (id, ws) in windows {
        let detail = format!("{} usage window(s) of no booking", ws.len());
        out.push(Violation::new(Invariant::I8, "?", id, ws.first().map(|w| w.start_ms), detail));
    }
    out
}

/// Why `ws` (sorted) are not exactly `r`'s booked time × GPUs, if they are not.
fn tiling(r: &ReservationFact, ws: &[&UsageWindow]) -> Option<(Option<Ms>, String)> {
    let gpus = r.gpu_indexes.len() as u32;
    let Some(from) = r.active_at_ms else {
        return (!ws.is_empty()).then(|| (None, format!("{} usage window(s) of a booking never bound", ws.len())));
    };
    if let Some(w) = ws.iter().find(|w| w.gpus != gpus) {
        return Some((Some(w.start_ms), format!("a window of {} GPUs; the booking has {gpus}", w.gpus)));
    }
    let mut at = from;
    for w in ws {
        if w.start_ms != at || w.end_ms <= w.start_ms {
            return Some((Some(w.start_ms), format!("a window {}..{} where {at} was next", w.start_ms, w.end_ms)));
        }
        at = w.end_ms;
    }
    let metered_to = r.metered_to_ms.unwrap_or(from);
    if at != metered_to.max(from) {
        return Some((Some(at), format!("windows reach {at}; the booking was metered to {metered_to}")));
    }
    let metered: i64 = ws.iter().map(|w| (w.end_ms - w.start_ms) * i64::from(w.gpus)).sum();
    match r.release_requested_at_ms {
        Some(end) if at != end.max(from) => Some((
            Some(end),
            format!(
                "{metered} GPU·ms metered to {at}; booked {} GPU·ms to {end}",
                (end.max(from) - from) * i64::from(gpus)
            ),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AgentFacts, NodeAgentFacts, check};
    use super::*;
    use crate::store::rows::FleetFacts;

    fn booking(id: &str, gpus: &[u32], created: i64, released: Option<i64>) -> ReservationFact {
        ReservationFact {
            id: id.into(),
            node_id: "n".into(),
            gpu_indexes: gpus.to_vec(),
            state: if released.is_some() { ReservationState::Released } else { ReservationState::Active },
            created_at_ms: created,
            active_at_ms: Some(created + 10),
            release_requested_at_ms: released.map(|r| r - 5),
            released_at_ms: released,
            release_cause: released.map(|_| Ok(ReleaseCause::Tenant)),
            metered_to_ms: Some(released.map_or(created + 10, |r| r - 5)),
        }
    }

    fn window(id: &str, start: i64, end: i64, gpus: u32) -> UsageWindow {
        UsageWindow { reservation_id: id.into(), start_ms: start, end_ms: end, gpus }
    }

    fn of(reservations: Vec<ReservationFact>, windows: Vec<UsageWindow>) -> Facts {
        Facts {
            store: FleetFacts { reservations, windows, taken_at_ms: 10_000, ..Default::default() },
            ..Default::default()
        }
    }

    #[test]
    fn bookings_that_share_a_gpu_at_once_are_a_violation_one_after_another_are_not() {
        let after = of(vec![booking("a", &[0, 1], 0, Some(100)), booking("b", &[1], 100, None)], vec![]);
        assert!(check(&after, Default::default()).iter().all(|v| v.invariant != Invariant::I1));
        let at_once = of(vec![booking("a", &[0, 1], 0, Some(100)), booking("b", &[1], 90, None)], vec![]);
        let v = check(&at_once, Default::default());
        assert_eq!(v.iter().filter(|v| v.invariant == Invariant::I1).count(), 1, "{v:?}");
    }

    #[test]
    fn a_node_holding_devices_another_booking_owns_is_a_violation() {
        let mut f = of(vec![booking("a", &[0], 0, Some(100)), booking("b", &[0], 100, None)], vec![]);
        let stale = NodeAgentFacts { holds: [("a".to_string(), vec![0])].into(), ..Default::default() };
        f.agents = AgentFacts { nodes: [("n".to_string(), stale)].into() };
        let v = check(&f, Default::default());
        assert!(v.iter().any(|v| v.invariant == Invariant::I1 && v.subject == "a"), "{v:?}");
    }

    #[test]
    fn a_release_without_a_known_cause_or_a_node_failure_while_away_is_a_violation() {
        let mut none = booking("a", &[0], 0, Some(100));
        none.release_cause = None;
        let mut unknown = booking("b", &[1], 0, Some(100));
        unknown.release_cause = Some(Err("liveness".into()));
        let v = check(&of(vec![none, unknown], vec![]), Default::default());
        assert_eq!(v.iter().filter(|v| v.invariant == Invariant::I5).count(), 2, "{v:?}");
    }

    #[test]
    fn windows_must_tile_the_booked_time_with_its_gpu_count_and_no_duplicate_key() {
        let ended = booking("a", &[0, 1], 0, Some(2_015));
        let exact = vec![window("a", 10, 1_000, 2), window("a", 1_000, 2_000, 2), window("a", 2_000, 2_010, 2)];
        assert!(check(&of(vec![ended.clone()], exact.clone()), Default::default()).is_empty());
        let mut gap = exact.clone();
        gap.remove(1);
        assert_eq!(check(&of(vec![ended.clone()], gap), Default::default())[0].invariant, Invariant::I8);
        let mut twice = exact.clone();
        twice.push(window("a", 1_000, 2_000, 2));
        assert!(!check(&of(vec![ended.clone()], twice), Default::default()).is_empty());
        let mut wrong_gpus = exact.clone();
        wrong_gpus[0].gpus = 1;
        assert!(!check(&of(vec![ended.clone()], wrong_gpus), Default::default()).is_empty());
        let mut short = ended.clone();
        short.metered_to_ms = Some(2_000);
        assert!(!check(&of(vec![short], exact[..2].to_vec()), Default::default()).is_empty(), "not metered to its end");
    }
}
