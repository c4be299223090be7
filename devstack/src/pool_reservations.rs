//! Pool-level reservations (docs/devstack.md, "Reservations"): a
//! reservation that names a pool, not a node. Placement picks the node in
//! the one transaction that books it: the pool's nodes with the most free
//! GPUs first (ties to the node that joined first), each tried with every
//! check of a node's reservation (adopted, not cordoned, the capabilities
//! the request needs, free GPUs, room); the first that passes is booked.
//! When none does, the refusal (`reservation-unplaceable`) says why of
//! each node.

use std::time::Duration;

use tracing::info;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::ids;
use crate::reservations::{self, ReservationRequest};
use crate::shared::Shared;
use crate::status::Code;
use crate::store::{nodes, pools};

/// The most nodes a refusal names (the rest are counted).
const NAMED: usize = 8;

/// Books a reservation on the node of `pool` (its id or name) that
/// placement picks; returns the reservation id and the node. With
/// `duration` it ends itself that long after it was booked.
pub fn reserve_in_pool(
    shared: &Shared,
    pool: &str,
    request: ReservationRequest,
    duration: Option<Duration>,
) -> Result<(String, String)> {
    let id = ids::reservation_id();
    let ends_at_ms = duration.map(|d| now_ms().saturating_add(d.as_millis().min(i64::MAX as u128) as i64));
    let (spec, node_id) = shared.ledger.write(|c| {
        let pool = match pools::get(c, pool)? {
            Some(p) => p,
            None => pools::by_name(c, pool)?.ok_or_else(|| Error::UnknownPool { pool_id: pool.into() })?,
        };
        let mut candidates = Vec::new();
        for node in nodes::of_pool(c, &pool.id)? {
            candidates.push((reservations::free_gpus(c, &node.id)?, node));
        }
        // Most free GPUs first; the sort is stable, so ties keep join order.
        candidates.sort_by_key(|(free, _)| std::cmp::Reverse(*free));
        let mut refusals = Vec::new();
        for (_, node) in &candidates {
            match reservations::book(c, shared, &node.id, &id, request) {
                Ok((spec, _)) => {
                    if let Some(end) = ends_at_ms {
                        crate::store::reservations::set_end(c, &id, end)?;
                    }
                    return Ok((spec, node.id.clone()));
                }
                Err(e @ Error::Store(_)) => return Err(e),
                Err(why) => refusals.push(format!("{}: {why}", node.id)),
            }
        }
        let named = refusals.len().min(NAMED);
        let mut detail = format!("no node of pool {:?} can take {} GPU(s)", pool.name, request.gpus);
        if refusals.is_empty() {
            detail.push_str(": the pool has no node");
        } else {
            detail.push_str(&format!(": {}", refusals[..named].join("; ")));
            if refusals.len() > named {
                detail.push_str(&format!("; and {} more", refusals.len() - named));
            }
        }
        Err(Error::Refused { code: Code::ReservationUnplaceable, detail })
    })?;
    info!(pool, node_id = %node_id, reservation_id = %id, generation = spec.generation, "reservation: placed in the pool");
    shared.hub.push_spec(&spec);
    Ok((id, node_id))
}
