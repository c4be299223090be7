//! The `usage_windows` table: what each reservation's booking is metered
//! as (the facts of invariant I8, docs/harness.md, "Fleet invariants").
//! A reservation is booked from when its node bound it (`active_at_ms`) to
//! when its hold was withdrawn or it failed (`release_requested_at_ms`),
//! both by the store's clock (the stack passes it). The meter cuts that time into windows
//! aligned to multiples of the window length since the Unix epoch (the
//! last one of an ended booking shorter), each keyed by its reservation
//! and start: a meter run twice, or by two gateways at once, computes the
//! same windows and adds none twice. A running booking is metered up to
//! the last window boundary before now; `metered_to_ms` says how far.

use crate::params;
use crate::{Db, Error, Result};

/// The most windows one run writes for one reservation (a booking the
/// meter has not seen for long is caught up over several runs).
pub const MAX_WINDOWS_PER_RUN: i64 = 1_000;

/// Where one reservation's metering stands.
struct Due {
    id: String,
    gpus: u32,
    from_ms: i64,
    end_ms: Option<i64>,
}

/// Meters every reservation that has time not yet metered, in windows of
/// `window_ms`; returns how many windows it wrote.
pub fn meter(c: &Db<'_>, window_ms: i64) -> Result<usize> {
    let window_ms = window_ms.max(1);
    let now = crate::clock::now_ms(c)?;
    let boundary = now.div_euclid(window_ms) * window_ms;
    let due = c
        .query_map(
            "SELECT id, gpu_indexes, COALESCE(metered_to_ms, active_at_ms),
                    COALESCE(release_requested_at_ms, released_at_ms)
             FROM reservations
             WHERE active_at_ms IS NOT NULL
               AND (metered_to_ms IS NULL
                    OR metered_to_ms < COALESCE(release_requested_at_ms, released_at_ms, ?1))
             ORDER BY seq",
            params![boundary],
            |r| {
                let indexes: String = r.get(1)?;
                Ok(Due {
                    id: r.get(0)?,
                    gpus: serde_json::from_str::<Vec<u32>>(&indexes).map_or(0, |v| v.len() as u32),
                    from_ms: r.get(2)?,
                    end_ms: r.get(3)?,
                })
            },
        )
        .map_err(Error::at("read the reservations to meter"))?;
    let mut written = 0;
    for d in due {
        let to = d.end_ms.unwrap_or(boundary).min(d.from_ms + MAX_WINDOWS_PER_RUN * window_ms);
        let mut start = d.from_ms;
        while start < to {
            let end = ((start.div_euclid(window_ms) + 1) * window_ms).min(to);
            written += c
                .execute(
                    "INSERT INTO usage_windows (reservation_id, window_start_ms, window_end_ms, gpus, recorded_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (reservation_id, window_start_ms) DO NOTHING",
                    params![d.id, start, end, d.gpus, now],
                )
                .map_err(Error::at("record a usage window"))?;
            start = end;
        }
        c.execute(
            "UPDATE reservations SET metered_to_ms = ?2 WHERE id = ?1 AND (metered_to_ms IS NULL OR metered_to_ms < ?2)",
            params![d.id, to.max(d.from_ms)],
        )
        .map_err(Error::at("record how far a reservation was metered"))?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::snapshot;
    use crate::reservations;
    use crate::rows::ReleaseCause;

    fn booked(store: &crate::Store, id: &str, gpus: &[u32]) {
        store
            .write(|c| {
                reservations::insert(c, id, "node_1", gpus, &reservations::Share::default(), 1, 0)?;
                let now = crate::clock::now_ms(c)?;
                reservations::activate(c, id, 1, &[], "", b"statement", now)?;
                Ok::<_, Error>(())
            })
            .unwrap();
    }

    #[test]
    fn a_released_booking_is_metered_to_its_release_and_a_second_run_adds_nothing() {
        let store = crate::store_with_node();
        booked(&store, "rsv_1", &[0, 1]);
        store
            .write(|c| {
                let now = crate::clock::now_ms(c)? + 1_234;
                reservations::start_release(c, "rsv_1", 2, ReleaseCause::Tenant, now).map(|_| ())
            })
            .unwrap();
        let first = store.write(|c| meter(c, 1_000)).unwrap();
        assert_eq!(store.write(|c| meter(c, 1_000)).unwrap(), 0, "a replay adds no window");
        let facts = store.read(snapshot).unwrap();
        let r = &facts.reservations[0];
        let (from, to) = (r.active_at_ms.unwrap(), r.release_requested_at_ms.unwrap());
        assert_eq!(r.metered_to_ms, Some(to));
        assert_eq!(facts.windows.len(), first);
        let total: i64 = facts.windows.iter().map(|w| (w.end_ms - w.start_ms) * i64::from(w.gpus)).sum();
        assert_eq!(total, (to - from) * 2);
        assert!(facts.windows.iter().all(|w| w.gpus == 2));
    }

    #[test]
    fn a_running_booking_is_metered_in_whole_windows_up_to_the_last_boundary() {
        let store = crate::store_with_node();
        booked(&store, "rsv_1", &[3]);
        store
            .write(|c| {
                c.execute("UPDATE reservations SET active_at_ms = active_at_ms - 2500", params![])
                    .map_err(Error::at("t"))
            })
            .unwrap();
        store.write(|c| meter(c, 1_000)).unwrap();
        let facts = store.read(snapshot).unwrap();
        let r = &facts.reservations[0];
        let to = r.metered_to_ms.unwrap();
        assert_eq!(to % 1_000, 0, "metered to a boundary");
        assert!(to <= facts.taken_at_ms);
        let windows = &facts.windows;
        assert_eq!(windows.first().unwrap().start_ms, r.active_at_ms.unwrap());
        assert_eq!(windows.last().unwrap().end_ms, to);
        assert!(windows.windows(2).all(|w| w[0].end_ms == w[1].start_ms), "contiguous: {windows:?}");
    }
}
