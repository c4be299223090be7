//! The `tls_ticket_keys` table: the keys the gateways' TLS session tickets
//! are sealed with (docs/devstack.md, "TLS session resumption"), one per
//! period of time, so that every gateway of a store, and a gateway started
//! again on it, opens the tickets any of them issued. A key is made once per
//! period by whichever gateway comes first (the period is the key's primary
//! key: a second maker's insert does nothing, and both read back the one
//! key), and forgotten once no gateway may open its tickets any more.

use crate::params;
use crate::{Db, Error, Result};

/// A ticket key: its period and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct TicketKey {
    /// The period it seals tickets in (Unix time over the period's length).
    pub period: i64,
    /// The key (32 bytes), never logged.
    pub key: Vec<u8>,
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TicketKey").field("period", &self.period).finish_non_exhaustive()
    }
}

/// Stores `key` for `period` unless the period has a key already (made by
/// another gateway first): that one stays.
pub fn offer(c: &Db<'_>, period: i64, key: &[u8], now_ms: i64) -> Result<()> {
    c.execute(
        "INSERT INTO tls_ticket_keys (period, key, created_at_ms) VALUES (?1, ?2, ?3) ON CONFLICT (period) DO NOTHING",
        params![period, key, now_ms],
    )
    .map_err(Error::at("offer a ticket key"))?;
    Ok(())
}

/// The keys of `from` and every later period, oldest first.
pub fn since(c: &Db<'_>, from: i64) -> Result<Vec<TicketKey>> {
    c.query_map("SELECT period, key FROM tls_ticket_keys WHERE period >= ?1 ORDER BY period", params![from], |r| {
        Ok(TicketKey { period: r.get(0)?, key: r.get(1)? })
    })
    .map_err(Error::at("read the ticket keys"))
}

/// Forgets the keys of the periods before `before`; how many it forgot.
pub fn forget_before(c: &Db<'_>, before: i64) -> Result<usize> {
    c.execute("DELETE FROM tls_ticket_keys WHERE period < ?1", params![before])
        .map_err(Error::at("forget old ticket keys"))
}
