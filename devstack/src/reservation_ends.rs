//! Reservations that end themselves (docs/devstack.md, "Reservations"): a
//! reservation booked with a duration is released at its end, as a
//! `release` would (its hold withdrawn in a new spec generation; its GPUs
//! free once the node reports them released). One task per gateway sleeps
//! until the soonest end, at most a second at a time so that an earlier
//! end booked meanwhile is seen; a release another gateway made first is
//! not an error.

use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::connections::Phase;
use crate::shared::Shared;
use crate::store::reservations as rows;

/// The longest sleep between two looks at the ends.
const MAX_SLEEP: Duration = Duration::from_secs(1);
/// How many ended reservations one look releases at most.
const BATCH: u32 = 256;

/// Releases every reservation whose end has come; returns how many.
pub fn release_ended(shared: &Shared) -> usize {
    let ended = match shared.ledger.read(|c| rows::ended(c, now_ms(), BATCH)) {
        Ok(ended) => ended,
        Err(e) => {
            warn!(error = %e, "reservation: the ended reservations could not be read");
            return 0;
        }
    };
    let mut released = 0;
    for id in ended {
        match crate::reservations::release(shared, &id, crate::store::rows::ReleaseCause::Expired) {
            Ok(generation) => {
                released += 1;
                info!(reservation_id = %id, generation, "reservation: ended at its end, hold withdrawn");
            }
            Err(e) => info!(reservation_id = %id, error = %e, "reservation: its end found it released already"),
        }
    }
    released
}

/// Runs until the stack stops: releases the reservations whose end came.
pub async fn run(shared: std::sync::Arc<Shared>, mut phase: watch::Receiver<Phase>) {
    loop {
        release_ended(&shared);
        let next = shared.ledger.read(rows::next_end).ok().flatten();
        let sleep = next.map_or(MAX_SLEEP, |at| Duration::from_millis(at.saturating_sub(now_ms()).max(0) as u64));
        tokio::select! {
            _ = tokio::time::sleep(sleep.min(MAX_SLEEP)) => {}
            _ = phase.wait_for(|p| *p != Phase::Serving) => return,
        }
    }
}
