//! One snapshot of everything the fleet invariants read (docs/harness.md,
//! "Fleet invariants"): the unreachable marks, the spec deliveries, the
//! reservations with their release causes and how far they were metered,
//! the usage windows, the commands and the sessions the store keeps. The
//! checkers are pure functions over it (devstack's `invariants`).

use crate::params;
use crate::rows::{CommandFact, FleetFacts, LivenessMark, ReservationFact, SessionFact, SpecDelivery, UsageWindow};
use crate::{Db, Error, Result};

/// Reads the facts in one read (one consistent snapshot).
pub fn snapshot(c: &Db<'_>) -> Result<FleetFacts> {
    Ok(FleetFacts {
        taken_at_ms: crate::clock::now_ms(c)?,
        marks: marks(c)?,
        deliveries: deliveries(c)?,
        reservations: reservations(c)?,
        windows: windows(c)?,
        commands: commands(c)?,
        sessions: sessions(c)?,
    })
}

fn marks(c: &Db<'_>) -> Result<Vec<LivenessMark>> {
    c.query_map(
        "SELECT node_id, marked_at_ms, heard_at_ms, cleared_at_ms FROM liveness_marks ORDER BY id",
        params![],
        |r| {
            Ok(LivenessMark {
                node_id: r.get(0)?,
                marked_at_ms: r.get(1)?,
                heard_at_ms: r.get(2)?,
                cleared_at_ms: r.get(3)?,
            })
        },
    )
    .map_err(Error::at("read liveness marks"))
}

fn deliveries(c: &Db<'_>) -> Result<Vec<SpecDelivery>> {
    c.query_map(
        "SELECT node_id, generation, first_delivered_at_ms, delivered_at_ms, deliveries, observed_at_ms
         FROM spec_deliveries ORDER BY node_id, generation",
        params![],
        |r| {
            Ok(SpecDelivery {
                node_id: r.get(0)?,
                generation: r.get(1)?,
                first_delivered_at_ms: r.get(2)?,
                delivered_at_ms: r.get(3)?,
                deliveries: r.get(4)?,
                observed_at_ms: r.get(5)?,
            })
        },
    )
    .map_err(Error::at("read spec deliveries"))
}

fn reservations(c: &Db<'_>) -> Result<Vec<ReservationFact>> {
    c.query_map(
        "SELECT id, node_id, gpu_indexes, state, created_at_ms, active_at_ms, release_requested_at_ms,
                released_at_ms, release_cause, metered_to_ms
         FROM reservations ORDER BY seq",
        params![],
        |r| {
            let indexes: String = r.get(2)?;
            Ok(ReservationFact {
                id: r.get(0)?,
                node_id: r.get(1)?,
                gpu_indexes: serde_json::from_str(&indexes)
                    .map_err(|e| crate::sql::SqlError::Column { index: 2, reason: e.to_string() })?,
                state: r.parse(3)?,
                created_at_ms: r.get(4)?,
                active_at_ms: r.get(5)?,
                release_requested_at_ms: r.get(6)?,
                released_at_ms: r.get(7)?,
                release_cause: crate::reservations::cause(r.get(8)?),
                metered_to_ms: r.get(9)?,
            })
        },
    )
    .map_err(Error::at("read reservations"))
}

fn windows(c: &Db<'_>) -> Result<Vec<UsageWindow>> {
    c.query_map(
        "SELECT reservation_id, window_start_ms, window_end_ms, gpus FROM usage_windows
         ORDER BY reservation_id, window_start_ms",
        params![],
        |r| Ok(UsageWindow { reservation_id: r.get(0)?, start_ms: r.get(1)?, end_ms: r.get(2)?, gpus: r.get(3)? }),
    )
    .map_err(Error::at("read usage windows"))
}

fn commands(c: &Db<'_>) -> Result<Vec<CommandFact>> {
    c.query_map(
        "SELECT id, node_id, kind, retry_safe, state, reason, created_at_ms, delivered_at_ms, finished_at_ms
         FROM commands ORDER BY seq",
        params![],
        |r| {
            Ok(CommandFact {
                id: r.get(0)?,
                node_id: r.get(1)?,
                kind: r.get(2)?,
                retry_safe: r.get(3)?,
                state: r.parse(4)?,
                reason: r.get(5)?,
                created_at_ms: r.get(6)?,
                delivered_at_ms: r.get(7)?,
                finished_at_ms: r.get(8)?,
            })
        },
    )
    .map_err(Error::at("read commands"))
}

fn sessions(c: &Db<'_>) -> Result<Vec<SessionFact>> {
    c.query_map(
        "SELECT node_id, epoch, connected_at_ms, disconnected_at_ms FROM node_sessions ORDER BY node_id, epoch",
        params![],
        |r| {
            Ok(SessionFact {
                node_id: r.get(0)?,
                epoch: r.get(1)?,
                connected_at_ms: r.get(2)?,
                disconnected_at_ms: r.get(3)?,
            })
        },
    )
    .map_err(Error::at("read sessions"))
}
