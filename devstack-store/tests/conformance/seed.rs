//! What the cases seed a fresh store with, and the reads and writes they go
//! through: a pool, nodes, a token, a command, a session's Hello, each with
//! plain values a case changes with struct update syntax; `read` and
//! `write` unwrap the store's result with what failed.

use devstack_store::nodes::NewNode;
use devstack_store::rows::{CommandRow, CommandStatus, JoinTokenRow, PoolRow};
use devstack_store::sessions::NewSession;
use devstack_store::{Db, Error, Result, Store, nodes, pools};

/// The pool every seeded node is in.
pub const POOL: &str = "pool_1";

/// One transaction, which must commit.
pub fn write<T>(store: &Store, f: impl FnMut(&Db<'_>) -> Result<T>) -> T {
    store.write(f).unwrap_or_else(|e| panic!("a write failed: {e}"))
}

/// One read, which must succeed.
pub fn read<T>(store: &Store, f: impl FnOnce(&Db<'_>) -> Result<T>) -> T {
    store.read(f).unwrap_or_else(|e| panic!("a read failed: {e}"))
}

/// A pool named `name`, made at `created_at_ms`.
pub fn pool_row(id: &str, name: &str, created_at_ms: i64) -> PoolRow {
    PoolRow {
        id: id.into(),
        name: name.into(),
        gpu_model: Some("H100".into()),
        expect_gpu_count: Some(8),
        acceptance: "none".into(),
        created_at_ms,
        kind: "gpu".into(),
        policy: "{}".into(),
    }
}

/// A node of [`POOL`] that joined with no token at time 0.
pub fn new_node(id: &str) -> NewNode<'_> {
    NewNode {
        id,
        pool_id: POOL,
        join_token_id: None,
        hostname: "host",
        daemon_version: "1.0.0",
        hardware_id: "hw",
        created_at_ms: 0,
    }
}

/// Seeds [`POOL`].
pub fn pool(store: &Store) {
    write(store, |c| pools::insert(c, &pool_row(POOL, "pool one", 0)));
}

/// Seeds nodes of [`POOL`] (which must be there).
pub fn nodes(store: &Store, ids: &[&str]) {
    write(store, |c| ids.iter().try_for_each(|id| nodes::insert(c, &new_node(id))));
}

/// Seeds [`POOL`] and nodes in it.
pub fn pool_and_nodes(store: &Store, ids: &[&str]) {
    pool(store);
    nodes(store, ids);
}

/// A join token of [`POOL`] whose hash is `<id>-sha256`.
pub fn token(id: &str, max_uses: u32, uses: u32, expires_at_ms: i64) -> JoinTokenRow {
    JoinTokenRow {
        id: id.into(),
        token_sha256: format!("{id}-sha256"),
        pool_id: POOL.into(),
        max_uses,
        uses,
        expires_at_ms,
        created_at_ms: 1,
    }
}

/// A pending command for `node_id`, enqueued at time 10.
pub fn command(id: &str, node_id: &str) -> CommandRow {
    CommandRow {
        id: id.into(),
        node_id: node_id.into(),
        kind: "diag.nvml".into(),
        params: b"{}".to_vec(),
        retry_safe: true,
        destructive: false,
        batch: String::new(),
        not_after_ms: 0,
        min_generation: 0,
        envelope: vec![1, 2, 3],
        state: CommandStatus::Pending,
        reason: String::new(),
        result: None,
        output: None,
        created_at_ms: 10,
        delivered_at_ms: None,
        finished_at_ms: None,
        deliveries: 0,
        batch_approval: None,
    }
}

/// A Hello of `node_id` on `gateway_id`, journal `j1`.
pub fn hello<'a>(node_id: &'a str, gateway_id: &'a str, now_ms: i64) -> NewSession<'a> {
    NewSession { node_id, journal_id: "j1", boot_id: "b1", daemon_version: "1.0.0", gateway_id, now_ms }
}

/// Whether `e` is a unique or primary key refusing a statement.
pub fn is_unique_violation(e: &Error) -> bool {
    matches!(e, Error::Statement { source, .. } if source.is_unique_violation())
}
