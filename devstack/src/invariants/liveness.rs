//! I3 and I4, over the store's clock.
//!
//! I3: a spec generation delivered to its node is reported observed (the
//! node's applied generation reached it) within the bound of its last
//! delivery, unless its node was marked unreachable in between; one still
//! unobserved when the facts were read is a violation once the bound has
//! passed since its last delivery.
//!
//! I4: no node is marked unreachable within the grace of a gateway hearing
//! from it. The witnesses of hearing: the heard time the mark judged from,
//! every session the node opened (its Hello was heard), and a fault
//! proxy's record of the node's bytes reaching a gateway.

use super::{Facts, Invariant, Violation, ms, overlaps, unreachable_spans};
use std::time::Duration;

/// The I3 violations.
pub(super) fn i3(facts: &Facts, within: Duration) -> Vec<Violation> {
    let (within, store) = (ms(within), &facts.store);
    let mut out = Vec::new();
    for d in &store.deliveries {
        let until = d.observed_at_ms.unwrap_or(store.taken_at_ms);
        if until - d.delivered_at_ms <= within {
            continue;
        }
        if overlaps(&unreachable_spans(store, &d.node_id, store.taken_at_ms), d.delivered_at_ms, until) {
            continue;
        }
        let detail = match d.observed_at_ms {
            Some(at) => format!(
                "observed {} ms after its last delivery (of {}), more than {within} ms",
                at - d.delivered_at_ms,
                d.deliveries
            ),
            None => {
                format!("not observed {} ms after its last delivery (of {})", until - d.delivered_at_ms, d.deliveries)
            }
        };
        let subject = format!("generation {}", d.generation);
        out.push(Violation::new(Invariant::I3, &d.node_id, subject, Some(d.delivered_at_ms), detail));
    }
    out
}

/// The I4 violations.
pub(super) fn i4(facts: &Facts, grace: Duration) -> Vec<Violation> {
    let (grace, store) = (ms(grace), &facts.store);
    let mut out = Vec::new();
    for m in &store.marks {
        let sessions =
            store.sessions.iter().filter(|s| s.node_id == m.node_id).map(|s| (s.connected_at_ms, "its Hello"));
        let proxied = facts.heard.get(&m.node_id).into_iter().flatten().map(|&at| (at, "its bytes at the proxy"));
        let witnesses = std::iter::once((m.heard_at_ms, "the mark's own heard time")).chain(sessions).chain(proxied);
        if let Some((at, what)) = witnesses.filter(|&(at, _)| at <= m.marked_at_ms).max_by_key(|&(at, _)| at)
            && m.marked_at_ms - at < grace
        {
            let detail = format!("marked unreachable {} ms after a gateway heard it ({what})", m.marked_at_ms - at);
            out.push(Violation::new(Invariant::I4, &m.node_id, "", Some(m.marked_at_ms), detail));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Heard, check};
    use super::*;
    use crate::store::rows::{FleetFacts, LivenessMark, SessionFact, SpecDelivery};

    fn delivery(delivered: i64, observed: Option<i64>) -> SpecDelivery {
        SpecDelivery {
            node_id: "n".into(),
            generation: 3,
            first_delivered_at_ms: delivered,
            delivered_at_ms: delivered,
            deliveries: 1,
            observed_at_ms: observed,
        }
    }

    fn mark(marked: i64, heard: i64, cleared: Option<i64>) -> LivenessMark {
        LivenessMark { node_id: "n".into(), marked_at_ms: marked, heard_at_ms: heard, cleared_at_ms: cleared }
    }

    fn facts(store: FleetFacts) -> Facts {
        Facts { store: FleetFacts { taken_at_ms: 500_000, ..store }, ..Default::default() }
    }

    #[test]
    fn a_spec_observed_late_or_never_is_a_violation_unless_its_node_was_unreachable() {
        let late = facts(FleetFacts { deliveries: vec![delivery(1_000, Some(70_000))], ..Default::default() });
        assert_eq!(check(&late, Default::default())[0].invariant, Invariant::I3);
        let never = facts(FleetFacts { deliveries: vec![delivery(1_000, None)], ..Default::default() });
        assert_eq!(check(&never, Default::default()).len(), 1);
        let in_time = facts(FleetFacts { deliveries: vec![delivery(1_000, Some(60_000))], ..Default::default() });
        assert!(check(&in_time, Default::default()).is_empty());
        let away = FleetFacts {
            deliveries: vec![delivery(1_000, None)],
            marks: vec![mark(40_000, 5_000, None)],
            ..Default::default()
        };
        assert!(check(&facts(away), Default::default()).is_empty());
    }

    #[test]
    fn a_mark_soon_after_any_witness_of_hearing_is_a_violation() {
        let honest = facts(FleetFacts { marks: vec![mark(100_000, 60_000, Some(120_000))], ..Default::default() });
        assert!(check(&honest, Default::default()).is_empty());
        let own = facts(FleetFacts { marks: vec![mark(100_000, 95_000, None)], ..Default::default() });
        assert_eq!(check(&own, Default::default())[0].invariant, Invariant::I4);
        let session = SessionFact { node_id: "n".into(), epoch: 2, connected_at_ms: 90_000, disconnected_at_ms: None };
        let hello =
            FleetFacts { marks: vec![mark(100_000, 60_000, None)], sessions: vec![session], ..Default::default() };
        assert_eq!(check(&facts(hello), Default::default()).len(), 1);
        let mut proxied = facts(FleetFacts { marks: vec![mark(100_000, 60_000, None)], ..Default::default() });
        proxied.heard = Heard::from([("n".to_string(), vec![50_000, 99_000, 130_000])]);
        assert_eq!(check(&proxied, Default::default()).len(), 1);
        proxied.heard = Heard::from([("n".to_string(), vec![50_000, 130_000])]);
        assert!(check(&proxied, Default::default()).is_empty(), "a witness after the mark says nothing of it");
    }
}
