//! The numbered schema migrations of the store, applied in order at start.
//!
//! Each migration runs in its own transaction and is recorded in
//! `schema_migrations`; a migration, once released, never changes: later
//! issues append new ones.

use rusqlite::Connection;

use crate::params;
use crate::pg::Conn;
use crate::sql::SqlError;

use crate::now_ms;
use crate::{Error, Result};

/// A migration: its number, its name and its SQL.
pub struct Migration {
    /// The number (1, 2, …), in application order.
    pub version: u32,
    /// A short name.
    pub name: &'static str,
    /// The statements.
    pub sql: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "nodes, commands and keys", sql: V1 },
    Migration { version: 2, name: "batch approvals", sql: V2 },
    Migration { version: 3, name: "reservations", sql: V3 },
    Migration { version: 4, name: "node bindings and joins", sql: V4 },
    Migration { version: 5, name: "releases", sql: V5 },
    Migration { version: 6, name: "node section status", sql: V6 },
    Migration { version: 7, name: "instances, volumes, node labels, secrets", sql: V7 },
    Migration { version: 8, name: "join requests", sql: V8 },
    Migration {
        version: 9,
        name: "pool policies, reservation shares and bindings, instances' current memory",
        sql: V9,
    },
    Migration { version: 10, name: "otlp exports", sql: V10 },
    Migration { version: 11, name: "node journals", sql: V11 },
    Migration { version: 12, name: "gateways, session epochs and liveness", sql: V12 },
    Migration { version: 13, name: "fleet facts: liveness marks, spec deliveries, release causes, usage", sql: V13 },
    Migration { version: 14, name: "node cordons, reservation ends", sql: V14 },
    Migration { version: 15, name: "otlp export header names", sql: V15 },
    Migration { version: 16, name: "TLS session ticket keys", sql: V16 },
    Migration { version: 17, name: "the marked nodes' index", sql: V17 },
    Migration { version: 18, name: "the open sessions' index", sql: V18 },
];

/// The open sessions (at most one a node), apart from the closed ones
/// every node keeps a history of (up to `sessions_kept`, 64, each: ten
/// times as many rows after a few reconnections): the liveness judge's
/// "open on a gateway that beats", the count by gateway and the list of
/// open sessions read them through this partial index instead of scanning
/// every session ever kept.
const V18: &str = r#"
CREATE INDEX node_sessions_open ON node_sessions (node_id, epoch, gateway_id) WHERE disconnected_at_ms IS NULL;
"#;

/// An export from a node whose telemetry section names a `headers_ref` was
/// checked against that secret's headers: their names (comma-separated,
/// lowercase; never a value) are kept with it.
const V15: &str = r#"
ALTER TABLE otlp_exports ADD COLUMN header_names TEXT NOT NULL DEFAULT '';
"#;

/// The keys the gateways seal TLS session tickets with, one per period
/// (`ticket_keys`): kept in the store so that every gateway of it, and a
/// gateway started again on it, resumes the sessions any of them began.
const V16: &str = r#"
CREATE TABLE tls_ticket_keys (
    period INTEGER PRIMARY KEY,
    key BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL
);
"#;

/// A gateway's beat clears the marks of the nodes it heard: it reads the
/// marked nodes through a partial index that holds only them (usually
/// none), where it joined every chunk of its sessions against every
/// node's liveness.
const V17: &str = r#"
CREATE INDEX node_liveness_marked ON node_liveness (node_id) WHERE unreachable_at_ms IS NOT NULL;
"#;

/// What the fleet invariants are checked over (docs/harness.md, "Fleet
/// invariants"), every time by the store's clock: each unreachable mark
/// with the last heard time it judged from and when it was cleared
/// (`liveness_marks`); when each spec generation was last delivered to its
/// node and first reported observed (`spec_deliveries`); why and when a
/// reservation's hold was withdrawn (`reservations.release_cause`,
/// `release_requested_at_ms`) and how far it was metered; and the usage
/// windows themselves, keyed by reservation and window start so that a
/// meter run twice (a replay, two gateways) adds nothing.
const V13: &str = r#"
CREATE TABLE liveness_marks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id TEXT NOT NULL REFERENCES nodes(id),
    marked_at_ms INTEGER NOT NULL,
    heard_at_ms INTEGER NOT NULL,
    cleared_at_ms INTEGER
);
CREATE INDEX liveness_marks_node ON liveness_marks (node_id, cleared_at_ms);
CREATE TABLE spec_deliveries (
    node_id TEXT NOT NULL REFERENCES nodes(id),
    generation INTEGER NOT NULL,
    first_delivered_at_ms INTEGER NOT NULL,
    delivered_at_ms INTEGER NOT NULL,
    deliveries INTEGER NOT NULL DEFAULT 1,
    observed_at_ms INTEGER,
    PRIMARY KEY (node_id, generation)
);
CREATE INDEX spec_deliveries_open ON spec_deliveries (node_id, observed_at_ms);
ALTER TABLE reservations ADD COLUMN release_cause TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN release_requested_at_ms INTEGER;
ALTER TABLE reservations ADD COLUMN metered_to_ms INTEGER;
CREATE TABLE usage_windows (
    reservation_id TEXT NOT NULL REFERENCES reservations(id),
    window_start_ms INTEGER NOT NULL,
    window_end_ms INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    recorded_at_ms INTEGER NOT NULL,
    PRIMARY KEY (reservation_id, window_start_ms)
);
"#;

/// A cordoned node takes no new reservation or instance
/// (`node_cordons`: why and since when); a reservation booked for a while
/// ends itself (`reservation_ends`: when). Each in a table of its own, so
/// the rows of `nodes` and `reservations` keep their columns.
const V14: &str = r#"
CREATE TABLE node_cordons (
    node_id TEXT PRIMARY KEY REFERENCES nodes(id),
    reason TEXT NOT NULL,
    cordoned_at_ms INTEGER NOT NULL
);
CREATE TABLE reservation_ends (
    reservation_id TEXT PRIMARY KEY REFERENCES reservations(id),
    ends_at_ms INTEGER NOT NULL
);
CREATE INDEX reservation_ends_by_time ON reservation_ends (ends_at_ms);
"#;

/// Several gateways on one store: each registers itself (`gateways`), a
/// node's current session epoch and gateway (its home) are the node's, so
/// that a session-scoped write is fenced by its epoch, and when a gateway
/// last heard a node is kept by the store's clock, never a gateway's, in a
/// table of its own (`node_liveness`): every gateway rewrites it each beat,
/// and kept apart from `nodes` it never conflicts with the sessions'
/// transactions, which read the node's row for their fence.
const V12: &str = r#"
ALTER TABLE nodes ADD COLUMN session_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN gateway_id TEXT NOT NULL DEFAULT '';
CREATE TABLE node_liveness (
    node_id TEXT PRIMARY KEY REFERENCES nodes(id),
    epoch INTEGER NOT NULL,
    heard_at_ms INTEGER NOT NULL,
    unreachable_at_ms INTEGER
);
CREATE INDEX node_liveness_heard ON node_liveness (heard_at_ms);
UPDATE nodes SET session_epoch = (SELECT COALESCE(MAX(epoch), 0) FROM node_sessions WHERE node_sessions.node_id = nodes.id);
ALTER TABLE node_sessions ADD COLUMN gateway_id TEXT NOT NULL DEFAULT '';
CREATE TABLE gateways (
    id TEXT PRIMARY KEY,
    grpc_url TEXT NOT NULL,
    https_url TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    beat_at_ms INTEGER NOT NULL,
    draining INTEGER NOT NULL DEFAULT 0,
    fenced_writes INTEGER NOT NULL DEFAULT 0
);
"#;

/// A journal's events are recorded by its highest seq (events increase per
/// journal), not one row per event: a journal id is stored once per node.
const V11: &str = r#"
CREATE TABLE node_journals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id TEXT NOT NULL REFERENCES nodes(id),
    journal_id TEXT NOT NULL,
    acked_seq INTEGER NOT NULL DEFAULT 0,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (node_id, journal_id)
);
INSERT INTO node_journals (node_id, journal_id, acked_seq, updated_at_ms)
    SELECT node_id, journal_id, MAX(seq), MAX(recorded_at_ms) FROM node_events GROUP BY node_id, journal_id;
DROP TABLE node_events;
"#;

const V10: &str = r#"
CREATE TABLE otlp_exports (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id TEXT NOT NULL,
    received_at_ms INTEGER NOT NULL,
    encoding TEXT NOT NULL CHECK (encoding IN ('json', 'protobuf')),
    body BLOB NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE INDEX otlp_exports_node ON otlp_exports(node_id, seq);
"#;

const V9: &str = r#"
ALTER TABLE pools ADD COLUMN policy TEXT NOT NULL DEFAULT '{}';
ALTER TABLE reservations ADD COLUMN vcpus INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD COLUMN memory_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD COLUMN binding TEXT NOT NULL DEFAULT '' CHECK (binding IN ('', 'kubernetes'));
ALTER TABLE reservations ADD COLUMN cgroup_parent TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN current_memory_bytes INTEGER;
"#;

const V1: &str = r#"
CREATE TABLE settings (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    updated_at_ms INTEGER NOT NULL
);

CREATE TABLE pools (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    gpu_model TEXT,
    expect_gpu_count INTEGER,
    acceptance TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);

CREATE TABLE join_tokens (
    id TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    pool_id TEXT NOT NULL REFERENCES pools(id),
    max_uses INTEGER NOT NULL,
    uses INTEGER NOT NULL DEFAULT 0,
    expires_at_ms INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL
);

CREATE TABLE nodes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    pool_id TEXT NOT NULL REFERENCES pools(id),
    state TEXT NOT NULL CHECK (state IN ('joined', 'accepting', 'adopted', 'rejected')),
    reason TEXT NOT NULL DEFAULT '',
    hostname TEXT NOT NULL DEFAULT '',
    daemon_version TEXT NOT NULL DEFAULT '',
    hardware_id TEXT NOT NULL DEFAULT '',
    join_token_id TEXT,
    acceptance_command_id TEXT,
    applied_generation INTEGER NOT NULL DEFAULT 0,
    spec_generation INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    adopted_at_ms INTEGER
);
CREATE INDEX nodes_pool ON nodes(pool_id);

CREATE TABLE node_certs (
    node_id TEXT NOT NULL REFERENCES nodes(id),
    serial TEXT NOT NULL,
    spki_pin TEXT NOT NULL,
    der BLOB NOT NULL,
    not_before_ms INTEGER NOT NULL,
    not_after_ms INTEGER NOT NULL,
    revoked_at_ms INTEGER,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (node_id, serial)
);

CREATE TABLE node_sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id TEXT NOT NULL REFERENCES nodes(id),
    epoch INTEGER NOT NULL,
    journal_id TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    daemon_version TEXT NOT NULL,
    connected_at_ms INTEGER NOT NULL,
    disconnected_at_ms INTEGER,
    UNIQUE (node_id, epoch)
);

CREATE TABLE node_events (
    node_id TEXT NOT NULL REFERENCES nodes(id),
    journal_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    recorded_at_ms INTEGER NOT NULL,
    PRIMARY KEY (node_id, journal_id, seq)
);

CREATE TABLE commands (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    node_id TEXT NOT NULL REFERENCES nodes(id),
    kind TEXT NOT NULL,
    params BLOB NOT NULL,
    retry_safe INTEGER NOT NULL,
    destructive INTEGER NOT NULL,
    batch TEXT NOT NULL DEFAULT '',
    not_after_ms INTEGER NOT NULL DEFAULT 0,
    min_generation INTEGER NOT NULL DEFAULT 0,
    envelope BLOB NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    result BLOB,
    output BLOB,
    created_at_ms INTEGER NOT NULL,
    delivered_at_ms INTEGER,
    finished_at_ms INTEGER,
    deliveries INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX commands_node ON commands(node_id, state);

CREATE TABLE command_updates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    command_id TEXT NOT NULL REFERENCES commands(id),
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    at_ms INTEGER NOT NULL
);
CREATE INDEX command_updates_command ON command_updates(command_id);

CREATE TABLE node_inventory (
    node_id TEXT NOT NULL REFERENCES nodes(id),
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    content BLOB NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (node_id, name)
);

CREATE TABLE node_specs (
    node_id TEXT NOT NULL REFERENCES nodes(id),
    generation INTEGER NOT NULL,
    payload BLOB NOT NULL,
    envelope BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (node_id, generation)
);
"#;

const V2: &str = r#"
ALTER TABLE commands ADD COLUMN batch_approval BLOB;
"#;

const V3: &str = r#"
CREATE TABLE reservations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    node_id TEXT NOT NULL REFERENCES nodes(id),
    gpu_indexes TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'active', 'releasing', 'released', 'failed')),
    reason TEXT NOT NULL DEFAULT '',
    generation INTEGER NOT NULL,
    release_generation INTEGER,
    bound_generation INTEGER,
    cdi_devices TEXT NOT NULL DEFAULT '[]',
    statement BLOB,
    last_refusal TEXT NOT NULL DEFAULT '',
    created_at_ms INTEGER NOT NULL,
    active_at_ms INTEGER,
    released_at_ms INTEGER
);
CREATE INDEX reservations_node ON reservations(node_id, state);
"#;

const V4: &str = r#"
CREATE TABLE node_bindings (
    node_id TEXT NOT NULL REFERENCES nodes(id),
    kind TEXT NOT NULL CHECK (kind IN ('tpm-ek')),
    sha256 TEXT NOT NULL,
    ak_public BLOB NOT NULL,
    ak_name BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (kind, sha256)
);
CREATE INDEX node_bindings_node ON node_bindings(node_id);

CREATE TABLE node_joins (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id TEXT NOT NULL REFERENCES nodes(id),
    method TEXT NOT NULL CHECK (method IN ('token', 'tpm')),
    node_key TEXT NOT NULL CHECK (node_key IN ('tpm', 'certified', 'any')),
    policy TEXT NOT NULL DEFAULT '',
    serial TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE INDEX node_joins_node ON node_joins(node_id);
"#;

const V5: &str = r#"
CREATE TABLE releases (
    version TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL,
    manifest BLOB NOT NULL,
    envelope TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);

CREATE TABLE release_artifacts (
    version TEXT NOT NULL REFERENCES releases(version),
    os TEXT NOT NULL,
    arch TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    bytes BLOB NOT NULL,
    PRIMARY KEY (version, os, arch)
);
"#;

const V6: &str = r#"
CREATE TABLE node_section_status (
    node_id TEXT NOT NULL REFERENCES nodes(id),
    section TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('unspecified', 'applied', 'progressing', 'failed')),
    reason TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL DEFAULT '',
    generation INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (node_id, section)
);
"#;

const V7: &str = r#"
ALTER TABLE pools ADD COLUMN kind TEXT NOT NULL DEFAULT 'gpu' CHECK (kind IN ('gpu', 'vps-host'));

CREATE TABLE node_labels (
    node_id TEXT NOT NULL REFERENCES nodes(id),
    label TEXT NOT NULL,
    value TEXT NOT NULL DEFAULT '',
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (node_id, label)
);

CREATE TABLE instances (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    pool_id TEXT NOT NULL REFERENCES pools(id),
    node_id TEXT REFERENCES nodes(id),
    runtime TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_bytes INTEGER NOT NULL,
    desired TEXT NOT NULL CHECK (desired IN ('running', 'stopped', 'deleted')),
    state TEXT NOT NULL CHECK (state IN ('unschedulable', 'pending', 'starting', 'running', 'stopped', 'failed', 'deleted')),
    reason TEXT NOT NULL DEFAULT '',
    spec BLOB NOT NULL,
    pinned_node TEXT,
    generation INTEGER,
    delete_generation INTEGER,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    running_at_ms INTEGER,
    deleted_at_ms INTEGER
);
CREATE INDEX instances_node ON instances(node_id, state);
CREATE INDEX instances_pool ON instances(pool_id, state);

CREATE TABLE volumes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    node_id TEXT NOT NULL REFERENCES nodes(id),
    size_bytes INTEGER NOT NULL,
    desired TEXT NOT NULL CHECK (desired IN ('present', 'deleted')),
    state TEXT NOT NULL CHECK (state IN ('pending', 'ready', 'failed', 'deleted')),
    reason TEXT NOT NULL DEFAULT '',
    generation INTEGER NOT NULL,
    delete_generation INTEGER,
    created_at_ms INTEGER NOT NULL,
    deleted_at_ms INTEGER
);
CREATE INDEX volumes_node ON volumes(node_id, state);

CREATE TABLE secrets (
    id TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL
);
"#;

const V8: &str = r#"
CREATE TABLE join_requests (
    request_sha256 TEXT PRIMARY KEY,
    node_id TEXT NOT NULL REFERENCES nodes(id),
    response TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
"#;

/// The table that records the migrations applied.
const SCHEMA_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
)";

/// A migration's SQL as PostgreSQL takes it: the SQLite text with
/// PostgreSQL's names for the same types (an autoincrement key is an
/// identity column, an integer a `BIGINT`, a blob a `BYTEA`), so that one
/// list serves both backends.
pub fn postgres_sql(sqlite: &str) -> String {
    let mut out =
        sqlite.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY");
    for (from, to) in [("INTEGER", "BIGINT"), ("BLOB", "BYTEA")] {
        let mut replaced = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(from) {
            let before = rest[..at].chars().next_back();
            let after = rest[at + from.len()..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            replaced.push_str(&rest[..at]);
            replaced.push_str(if word(before) || word(after) { from } else { to });
            rest = &rest[at + from.len()..];
        }
        replaced.push_str(rest);
        out = replaced;
    }
    out
}

/// Applies every migration a SQLite store has not recorded; returns the
/// numbers applied.
pub(crate) fn migrate_sqlite(conn: &mut Connection) -> Result<Vec<u32>> {
    conn.execute_batch(SCHEMA_MIGRATIONS).map_err(Error::at("create schema_migrations"))?;
    let current: u32 = conn
        .query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", [], |r| r.get(0))
        .map_err(Error::at("read schema_migrations"))?;
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        let fail =
            |source: rusqlite::Error| Error::Migration { version: m.version, name: m.name, source: source.into() };
        let tx = conn.transaction().map_err(fail)?;
        tx.execute_batch(m.sql).map_err(fail)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?1, ?2, ?3)",
            rusqlite::params![m.version, m.name, now_ms()],
        )
        .map_err(fail)?;
        tx.commit().map_err(fail)?;
        applied.push(m.version);
    }
    Ok(applied)
}

/// Applies every migration a PostgreSQL store has not recorded, in one
/// transaction each under an advisory lock, so that gateways starting at
/// once apply each migration once; returns the numbers applied.
pub(crate) fn migrate_postgres(conn: &Conn) -> Result<Vec<u32>> {
    conn.batch(&postgres_sql(SCHEMA_MIGRATIONS)).map_err(Error::at("create schema_migrations"))?;
    let mut applied = Vec::new();
    for m in MIGRATIONS {
        let fail = |source: SqlError| Error::Migration { version: m.version, name: m.name, source };
        conn.begin("BEGIN").map_err(fail)?;
        let step = (|| {
            // The same key for every gateway of the database.
            conn.batch("SELECT pg_advisory_xact_lock(7303350)")?;
            let done =
                conn.query_map("SELECT 1 FROM schema_migrations WHERE version = ?1", params![m.version], |_| Ok(()))?;
            if done.is_empty() {
                conn.batch(&postgres_sql(m.sql))?;
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?1, ?2, ?3)",
                    params![m.version, m.name, now_ms()],
                )?;
            }
            conn.batch("COMMIT")?;
            Ok::<_, SqlError>(done.is_empty())
        })();
        match step {
            Ok(true) => applied.push(m.version),
            Ok(false) => {}
            Err(e) => {
                let _ = conn.batch("ROLLBACK");
                return Err(fail(e));
            }
        }
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_and_apply_once() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "{}", m.name);
        }
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate_sqlite(&mut conn).unwrap().len(), MIGRATIONS.len());
        assert!(migrate_sqlite(&mut conn).unwrap().is_empty());
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for t in [
            "commands",
            "gateways",
            "join_requests",
            "join_tokens",
            "instances",
            "liveness_marks",
            "node_bindings",
            "node_certs",
            "node_labels",
            "node_journals",
            "node_joins",
            "node_section_status",
            "node_sessions",
            "nodes",
            "otlp_exports",
            "pools",
            "release_artifacts",
            "releases",
            "reservations",
            "secrets",
            "settings",
            "spec_deliveries",
            "usage_windows",
            "volumes",
        ] {
            assert!(tables.iter().any(|x| x == t), "{t} missing from {tables:?}");
        }
    }
}
