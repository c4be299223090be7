//! The `otlp_exports` table: the exports the OTLP receiver kept, bounded
//! per node and in total bytes, oldest dropped first.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::rows::OtlpExportRow;
use crate::{Db, Error, Result};

/// How many exports are kept, and how many bytes of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// At most this many exports per node (the newest).
    pub per_node: u32,
    /// At most this many bytes of bodies in all (the newest).
    pub total_bytes: u64,
}

fn row(r: &Row) -> Result<OtlpExportRow, SqlError> {
    Ok(OtlpExportRow {
        seq: r.get(0)?,
        node_id: r.get(1)?,
        received_at_ms: r.get(2)?,
        encoding: r.get(3)?,
        body: r.get(4)?,
        headers: r.get::<String>(5)?.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect(),
    })
}

/// Keeps an export with the names of the headers it was checked for,
/// then drops the oldest beyond `bounds`.
pub fn insert(
    c: &Db<'_>,
    node_id: &str,
    received_at_ms: i64,
    encoding: &str,
    body: &[u8],
    headers: &[String],
    bounds: Bounds,
) -> Result<()> {
    c.execute(
        "INSERT INTO otlp_exports (node_id, received_at_ms, encoding, body, bytes, header_names)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![node_id, received_at_ms, encoding, body, body.len() as i64, headers.join(",")],
    )
    .map_err(Error::at("insert otlp export"))?;
    // The count is written into the statement (a bound LIMIT makes SQLite
    // prepare it again at every run).
    c.execute(
        &format!(
            "DELETE FROM otlp_exports WHERE node_id = ?1 AND seq NOT IN
             (SELECT seq FROM otlp_exports WHERE node_id = ?1 ORDER BY seq DESC LIMIT {})",
            bounds.per_node
        ),
        params![node_id],
    )
    .map_err(Error::at("bound otlp exports per node"))?;
    c.execute(
        "DELETE FROM otlp_exports WHERE seq IN (SELECT seq FROM
         (SELECT seq, CAST(SUM(bytes) OVER (ORDER BY seq DESC) AS BIGINT) AS kept FROM otlp_exports) AS k WHERE kept > ?1)",
        params![bounds.total_bytes.min(i64::MAX as u64) as i64],
    )
    .map_err(Error::at("bound otlp exports in bytes"))?;
    Ok(())
}

/// A node's exports, in the order received.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<OtlpExportRow>> {
    c.query_map(
        "SELECT seq, node_id, received_at_ms, encoding, body, header_names FROM otlp_exports
         WHERE node_id = ?1 ORDER BY seq",
        params![node_id],
        row,
    )
    .map_err(Error::at("list otlp exports"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_exports_go_first_per_node_and_in_bytes() {
        let store = crate::store_with_node();
        let bounds = Bounds { per_node: 3, total_bytes: 10 };
        let put = |node: &str, body: &[u8]| store.write(|c| insert(c, node, 0, "json", body, &[], bounds)).unwrap();
        let bodies = |node: &str| -> Vec<Vec<u8>> {
            store.read(|c| of_node(c, node)).unwrap().into_iter().map(|r| r.body).collect()
        };
        for b in [b"1", b"2", b"3", b"4"] {
            put("a", b);
        }
        assert_eq!(bodies("a"), [b"2".to_vec(), b"3".to_vec(), b"4".to_vec()]);
        put("b", b"123456789");
        // 10 bytes in all: b's 9 and a's newest one.
        assert_eq!(bodies("a"), [b"4".to_vec()]);
        assert_eq!(bodies("b"), [b"123456789".to_vec()]);
        // The names of the headers checked come back, never a value.
        let names = ["authorization".to_string(), "x-tenant".to_string()];
        store.write(|c| insert(c, "b", 1, "json", b"1", &names, bounds)).unwrap();
        let kept = store.read(|c| of_node(c, "b")).unwrap();
        assert_eq!(kept.last().unwrap().headers, names);
        assert!(kept[0].headers.is_empty());
    }
}
