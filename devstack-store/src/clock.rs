//! The store's clock: the one time every gateway of a store agrees on
//! (PostgreSQL's `clock_timestamp()`; SQLite's is the process's own). What
//! gateways record of liveness is taken by it, so gateways whose clocks
//! disagree never disagree about when a node was last heard.

use crate::params;
use crate::{Db, Error, Result};

/// Now by the store's clock, in Unix milliseconds.
pub fn now_ms(c: &Db<'_>) -> Result<i64> {
    let sql = if c.postgres() {
        "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
    } else {
        "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
    c.query_row(sql, params![], |r| r.get(0)).map_err(Error::at("read the store's clock"))
}
