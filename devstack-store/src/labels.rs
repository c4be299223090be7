//! The `node_labels` table: what the stack knows a node offers, from its
//! Hello (`bc.dev/driver.<runtime>` for each runtime driver it announces,
//! `bc.dev/cap.<capability>` for each capability).

use crate::params;

use crate::rows::NodeLabelRow;
use crate::{Db, Error, Result};

/// The prefix of a driver label.
pub const DRIVER_PREFIX: &str = "bc.dev/driver.";

/// The prefix of a capability label (`bc.dev/cap.<capability>`, from the
/// Hello's `capabilities`).
pub const CAPABILITY_PREFIX: &str = "bc.dev/cap.";

/// Replaces a node's driver labels with `drivers` (name, version; a name
/// given twice takes its last version) and says whether they changed. Labels
/// that are already so are not written again: every Hello announces the
/// drivers, and a fleet reconnecting must not rewrite them all. Written,
/// they are the ones asked for, so they changed.
pub fn set_drivers(c: &Db<'_>, node_id: &str, drivers: &[(String, String)], now: i64) -> Result<bool> {
    set_prefixed(c, node_id, DRIVER_PREFIX, drivers, now)
}

/// Replaces a node's capability labels with `capabilities` (each with an
/// empty value), as [`set_drivers`] does its driver labels.
pub fn set_capabilities(c: &Db<'_>, node_id: &str, capabilities: &[String], now: i64) -> Result<bool> {
    let entries: Vec<(String, String)> = capabilities.iter().map(|c| (c.clone(), String::new())).collect();
    set_prefixed(c, node_id, CAPABILITY_PREFIX, &entries, now)
}

/// Whether a node has the capability label of `capability`.
pub fn has_capability(c: &Db<'_>, node_id: &str, capability: &str) -> Result<bool> {
    let label = format!("{CAPABILITY_PREFIX}{capability}");
    Ok(of_node(c, node_id)?.iter().any(|l| l.label == label))
}

/// Replaces the labels of a node under `prefix` with `entries` (name,
/// value), unless they are already so; says whether they changed.
fn set_prefixed(c: &Db<'_>, node_id: &str, prefix: &str, entries: &[(String, String)], now: i64) -> Result<bool> {
    let wanted: std::collections::BTreeMap<String, &str> =
        entries.iter().map(|(name, value)| (format!("{prefix}{name}"), value.as_str())).collect();
    let before = of_node(c, node_id)?;
    let current = before.iter().filter(|l| l.label.starts_with(prefix));
    if current.map(|l| (l.label.as_str(), l.value.as_str())).eq(wanted.iter().map(|(l, v)| (l.as_str(), *v))) {
        return Ok(false);
    }
    // Exactly the prefix (LIKE would take `_` and `%` as wildcards).
    c.execute(
        "DELETE FROM node_labels WHERE node_id = ?1 AND substr(label, 1, length(?2)) = ?2",
        params![node_id, prefix],
    )
    .map_err(Error::at("clear labels"))?;
    for (label, value) in &wanted {
        c.execute(
            "INSERT INTO node_labels (node_id, label, value, updated_at_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (node_id, label) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms",
            params![node_id, label, value, now],
        )
        .map_err(Error::at("insert label"))?;
    }
    Ok(true)
}

/// A node's labels, by label.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<NodeLabelRow>> {
    c.query_map(
        "SELECT node_id, label, value FROM node_labels WHERE node_id = ?1 ORDER BY label",
        params![node_id],
        |r| Ok(NodeLabelRow { node_id: r.get(0)?, label: r.get(1)?, value: r.get(2)? }),
    )
    .map_err(Error::at("list labels"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_labels_already_so_are_not_written_again() {
        let store = crate::store_with_node();
        let updated = |c: &Db<'_>| -> Vec<i64> {
            c.query_map("SELECT updated_at_ms FROM node_labels ORDER BY label", params![], |r| r.get(0)).unwrap()
        };
        let drivers = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
        };
        store
            .write(|c| {
                assert!(set_drivers(c, "node_1", &drivers(&[("qemu", "9.0"), ("fake", "1")]), 10)?);
                assert_eq!(updated(c), vec![10, 10]);
                // The same drivers in another order: unchanged, not written.
                assert!(!set_drivers(c, "node_1", &drivers(&[("fake", "1"), ("qemu", "9.0")]), 20)?);
                assert_eq!(updated(c), vec![10, 10]);
                // A name given twice takes its last version.
                assert!(set_drivers(c, "node_1", &drivers(&[("fake", "1"), ("qemu", "8.0"), ("qemu", "9.1")]), 30)?);
                let labels: Vec<(String, String)> =
                    of_node(c, "node_1")?.into_iter().map(|l| (l.label, l.value)).collect();
                assert_eq!(labels, drivers(&[("bc.dev/driver.fake", "1"), ("bc.dev/driver.qemu", "9.1")]));
                assert!(set_drivers(c, "node_1", &[], 40)?);
                assert!(of_node(c, "node_1")?.is_empty());
                assert!(!set_drivers(c, "node_1", &[], 50)?);
                // Capabilities beside drivers: each replaces its own.
                assert!(set_drivers(c, "node_1", &drivers(&[("qemu", "9.0")]), 60)?);
                let caps = vec!["cdi".to_string(), "devices.limits".to_string()];
                assert!(set_capabilities(c, "node_1", &caps, 60)?);
                assert!(!set_capabilities(c, "node_1", &caps, 70)?);
                assert!(has_capability(c, "node_1", "devices.limits")? && !has_capability(c, "node_1", "nvml")?);
                assert!(set_capabilities(c, "node_1", &caps[..1], 80)?);
                let labels: Vec<String> = of_node(c, "node_1")?.into_iter().map(|l| l.label).collect();
                assert_eq!(labels, vec!["bc.dev/cap.cdi", "bc.dev/driver.qemu"]);
                Ok::<_, Error>(())
            })
            .unwrap();
    }
}
