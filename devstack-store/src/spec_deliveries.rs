//! The `spec_deliveries` table: when each spec generation was sent to its
//! node and when the node first reported it applied, by the store's clock
//! (the facts of invariant I3, docs/harness.md, "Fleet invariants"). A
//! generation sent again (a new session) before it was observed moves its
//! delivery time; once observed, the row no longer changes.

use crate::params;
use crate::{Db, Error, Result};

/// Records that `generation` was sent to `node_id` on a session; a node
/// whose applied generation is already there observed it at once.
pub fn delivered(c: &Db<'_>, node_id: &str, generation: u64) -> Result<()> {
    let now = crate::clock::now_ms(c)?;
    c.execute(
        "INSERT INTO spec_deliveries (node_id, generation, first_delivered_at_ms, delivered_at_ms)
         VALUES (?1, ?2, ?3, ?3)
         ON CONFLICT (node_id, generation) DO UPDATE
         SET delivered_at_ms = excluded.delivered_at_ms, deliveries = spec_deliveries.deliveries + 1
         WHERE spec_deliveries.observed_at_ms IS NULL",
        params![node_id, generation, now],
    )
    .map_err(Error::at("record a spec delivery"))?;
    c.execute(
        "UPDATE spec_deliveries SET observed_at_ms = ?3
         WHERE node_id = ?1 AND generation = ?2 AND observed_at_ms IS NULL
           AND (SELECT applied_generation FROM nodes WHERE id = ?1) >= ?2",
        params![node_id, generation, now],
    )
    .map_err(Error::at("record a spec observed at delivery"))?;
    Ok(())
}

/// Records that `node_id` reported `applied`: every generation up to it
/// sent and not yet observed is observed now.
pub fn observed(c: &Db<'_>, node_id: &str, applied: u64) -> Result<()> {
    if applied == 0 {
        return Ok(());
    }
    let now = crate::clock::now_ms(c)?;
    c.execute(
        "UPDATE spec_deliveries SET observed_at_ms = ?3
         WHERE node_id = ?1 AND generation <= ?2 AND observed_at_ms IS NULL",
        params![node_id, applied, now],
    )
    .map_err(Error::at("record specs observed"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::snapshot;

    #[test]
    fn a_delivery_is_observed_once_the_node_applies_it_and_then_stays() {
        let store = crate::store_with_node();
        store.write(|c| delivered(c, "node_1", 1)).unwrap();
        store.write(|c| delivered(c, "node_1", 1)).unwrap();
        let facts = store.read(snapshot).unwrap();
        let d = &facts.deliveries[0];
        assert_eq!((d.generation, d.deliveries, d.observed_at_ms), (1, 2, None));
        store
            .write(|c| {
                crate::nodes::set_applied_generation(c, "node_1", 1)?;
                observed(c, "node_1", 1)
            })
            .unwrap();
        store.write(|c| delivered(c, "node_1", 1)).unwrap();
        let d = store.read(snapshot).unwrap().deliveries.remove(0);
        assert_eq!(d.deliveries, 2, "a delivery after it was observed changes nothing");
        assert!(d.observed_at_ms.is_some_and(|o| o >= d.delivered_at_ms));
    }

    #[test]
    fn a_generation_the_node_applied_before_it_was_sent_is_observed_at_delivery() {
        let store = crate::store_with_node();
        store.write(|c| crate::nodes::set_applied_generation(c, "node_1", 3).map(|_| ())).unwrap();
        store.write(|c| delivered(c, "node_1", 2)).unwrap();
        let d = store.read(snapshot).unwrap().deliveries.remove(0);
        assert_eq!(d.observed_at_ms, Some(d.delivered_at_ms));
    }
}
