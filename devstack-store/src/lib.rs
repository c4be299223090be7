//! The dev stack's store (docs/devstack.md, "The store"): the ground floor
//! every part of the stack stands on. It holds every row type (`rows`), the
//! numbered migrations, one module of statements per table group, and
//! [`Store`], the seam the rest of the stack reads and writes through: a
//! read or a transaction hands its closure a [`Db`], and every statement of
//! a table module takes one, so statements compose inside a caller's
//! transaction (event recording does this). The backend behind `Db` is the
//! store's business: SQLite (`sqlite`: one connection, a file or in memory,
//! behind a mutex; the embedded default) or PostgreSQL (`pg`: a pool, for
//! several gateways on one database); the SQL is written once (`sql`), the
//! migrations are one numbered list. No caller names either.
//!
//! A SQLite file (and its -wal and -shm files) is owner-only (0600), in a
//! directory created owner-only (0700): it holds every private key of the
//! stack. Every read and transaction is short and synchronous; callers never
//! hold one across an await.
//!
//! **Architecture Invariant:** this crate knows no feature of the stack: it
//! imports nothing of `devstack`, and its types are plain rows.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, TryLockError};

pub use error::{Error, Result, StoreFailure};

pub mod bindings;
pub mod certs;
pub mod clock;
pub mod cluster;
pub mod commands;
pub mod cordons;
mod error;
pub mod events;
pub mod facts;
pub mod fleet;
pub mod gateways;
pub mod instances;
pub mod inventory;
pub mod join_requests;
pub mod labels;
pub mod migrations;
pub mod nodes;
pub mod otlp;
mod pg;
pub mod pools;
pub mod releases;
pub mod reservations;
pub mod rows;
pub mod secrets;
pub mod sections;
pub mod sessions;
pub mod settings;
pub mod spec_deliveries;
pub mod specs;
mod sql;
mod sqlite;
pub mod ticket_keys;
pub mod tokens;
pub mod usage;
pub mod volumes;

pub use pg::{POOL_SIZE, redacted};

/// What a commit that changed a row notifies the gateways of a store.
pub const CHANGED: &str = "c";

/// Where the store lives.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A private in-memory SQLite database (gone at shutdown).
    Memory,
    /// A SQLite file; a stack started again on it keeps its keys and nodes.
    File(PathBuf),
    /// A PostgreSQL database (`postgres://user@host:port/db`, or a
    /// key=value connection string), which several gateways share.
    Postgres(String),
}

impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a password.
        match self {
            StoreLocation::Memory => f.write_str("Memory"),
            StoreLocation::File(path) => f.debug_tuple("File").field(path).finish(),
            StoreLocation::Postgres(url) => f.debug_tuple("Postgres").field(&redacted(url)).finish(),
        }
    }
}

impl std::fmt::Display for StoreLocation {
    /// Where the store is, as a person reads it: never a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Memory => f.write_str("SQLite, in memory"),
            StoreLocation::File(path) => write!(f, "SQLite, {}", path.display()),
            StoreLocation::Postgres(url) => write!(f, "PostgreSQL, {}", redacted(url)),
        }
    }
}

/// The store.
pub struct Store {
    backend: Backend,
}

enum Backend {
    Sqlite(Mutex<rusqlite::Connection>),
    Postgres(Box<pg::Pool>),
}

impl Store {
    /// Opens (creating if needed) the store and applies the migrations.
    pub fn open(location: &StoreLocation) -> Result<Self> {
        let backend = match location {
            StoreLocation::Memory => Backend::Sqlite(Mutex::new(sqlite::open(None)?)),
            StoreLocation::File(path) => Backend::Sqlite(Mutex::new(sqlite::open(Some(path))?)),
            StoreLocation::Postgres(url) => {
                let pool = pg::Pool::open(url)?;
                migrations::migrate_postgres(&*pool.checkout()?)?;
                Backend::Postgres(Box::new(pool))
            }
        };
        Ok(Store { backend })
    }

    /// Tells every gateway of the store `payload` (PostgreSQL's `NOTIFY`);
    /// nothing on SQLite, whose store one process holds.
    pub fn notify(&self, payload: &str) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(pool) => pool.notify(payload),
        }
    }

    /// What the gateways of the store notify, as it comes (every commit that
    /// changed a row notifies [`CHANGED`]); `None` on SQLite.
    pub fn listen(&self) -> Result<Option<tokio::sync::mpsc::UnboundedReceiver<String>>> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(pool) => pool.listen().map(Some),
        }
    }

    /// Which backend runs the store: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Whether a call made now would wait instead of compute: on SQLite
    /// while another call holds the connection, on PostgreSQL always (each
    /// statement is a round trip to the server). An async caller makes such
    /// a call where its wait holds up no other task.
    pub fn would_wait(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(conn) => matches!(conn.try_lock(), Err(TryLockError::WouldBlock)),
            Backend::Postgres(_) => true,
        }
    }

    fn lock(conn: &Mutex<rusqlite::Connection>) -> MutexGuard<'_, rusqlite::Connection> {
        // A panic while the lock was held cannot leave SQLite half-written:
        // every multi-statement change runs in a transaction that rolls back
        // when dropped. So a poisoned lock is still a consistent connection.
        conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One consistent read: `f` sees the store at one instant (writes
    /// through a read's `Db` are not atomic together; use [`Store::write`]).
    pub fn read<T, E: From<Error>>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, E>) -> Result<T, E> {
        match &self.backend {
            Backend::Sqlite(conn) => f(&Db::new(Inner::Sqlite(&Self::lock(conn)))),
            Backend::Postgres(pool) => {
                let conn = pool.checkout()?;
                conn.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").map_err(Error::at("begin a read"))?;
                let value = f(&Db::new(Inner::Postgres(&conn)));
                conn.batch("COMMIT").map_err(Error::at("end a read"))?;
                value
            }
        }
    }

    /// A read of one statement: [`Store::read`] for a closure that runs a
    /// single statement (a row by its key). On PostgreSQL the statement
    /// runs alone, its own snapshot, without the read transaction's `BEGIN`
    /// and `COMMIT`: a third of the round trips. The gateways' hottest reads
    /// (a session's fence at every heartbeat, the latest spec and the open
    /// commands at every Welcome) are such; a second statement, or one
    /// that begins `INSERT`, `UPDATE` or `DELETE`, is refused
    /// ([`sql::SqlError::NotOneRead`]), on both backends.
    pub fn read_one<T, E: From<Error>>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, E>) -> Result<T, E> {
        match &self.backend {
            Backend::Sqlite(conn) => f(&Db::one_read(Inner::Sqlite(&Self::lock(conn)))),
            Backend::Postgres(pool) => {
                let conn = pool.checkout()?;
                f(&Db::one_read(Inner::Postgres(&conn)))
            }
        }
    }

    /// Runs `f` in a transaction, committed when it returns `Ok` (rolled
    /// back on `Err`, or on a panic). On PostgreSQL a transaction that lost
    /// a race with another is run again, so `f` may run more than once.
    pub fn write<T, E: StoreFailure>(&self, f: impl FnMut(&Db<'_>) -> Result<T, E>) -> Result<T, E> {
        self.write_then(f, |_| {})
    }

    /// [`Store::write`], then `committed` once the commit is done (on
    /// SQLite still under the store's lock, so that what it announces is in
    /// the order of the commits); it is told whether the transaction
    /// changed any row.
    pub fn write_then<T, E: StoreFailure>(
        &self,
        f: impl FnMut(&Db<'_>) -> Result<T, E>,
        committed: impl FnOnce(bool),
    ) -> Result<T, E> {
        self.write_on(Lane::Shared, f, committed)
    }

    /// [`Store::write_then`] on a lane: on PostgreSQL the liveness lane
    /// has a connection of its own, so a gateway's beat never waits for a
    /// connection behind its sessions' calls (it did, for tens of seconds
    /// under load, and the nodes it had heard looked unreachable); on
    /// SQLite both lanes are the one connection.
    pub fn write_on<T, E: StoreFailure>(
        &self,
        lane: Lane,
        mut f: impl FnMut(&Db<'_>) -> Result<T, E>,
        committed: impl FnOnce(bool),
    ) -> Result<T, E> {
        match &self.backend {
            Backend::Sqlite(conn) => {
                let conn = Self::lock(conn);
                let before = conn.total_changes();
                let tx = sqlite::Transaction::begin(&conn).map_err(Error::at("begin transaction"))?;
                let value = f(&Db::new(Inner::Sqlite(tx.conn())))?;
                tx.commit().map_err(Error::at("commit"))?;
                committed(conn.total_changes() != before);
                Ok(value)
            }
            Backend::Postgres(pool) => {
                let conn = match lane {
                    Lane::Shared => pool.checkout()?,
                    Lane::Liveness => pool.checkout_reserved()?,
                };
                let mut attempt = 1;
                loop {
                    conn.begin("BEGIN ISOLATION LEVEL SERIALIZABLE").map_err(Error::at("begin transaction"))?;
                    let outcome = f(&Db::new(Inner::Postgres(&conn))).and_then(|value| {
                        // Every gateway of the store is told, at the commit.
                        if conn.changed() {
                            conn.execute("SELECT pg_notify(?1, ?2)", params![pg::CHANNEL, CHANGED])
                                .map_err(Error::at("notify the commit"))?;
                        }
                        conn.batch("COMMIT").map(|()| value).map_err(|e| Error::at("commit")(e).into())
                    });
                    match outcome {
                        Ok(value) => {
                            committed(conn.changed());
                            return Ok(value);
                        }
                        Err(e) => {
                            // After a failed COMMIT the transaction is over;
                            // a ROLLBACK then only warns.
                            let _ = conn.batch("ROLLBACK");
                            let lost_race = e.store_error().is_some_and(Error::is_retryable);
                            if !lost_race || attempt == pg::WRITE_ATTEMPTS {
                                return Err(e);
                            }
                            // Run again after a full-jitter wait, so the
                            // transactions that collided do not collide again.
                            std::thread::sleep(pg::retry_wait(attempt));
                            attempt += 1;
                        }
                    }
                }
            }
        }
    }
}

/// Which connections a write takes on PostgreSQL ([`Store::write_on`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// The pool every other call shares.
    Shared,
    /// The connection of the gateway's liveness bookkeeping (its beat).
    Liveness,
}

/// The store as one read or one transaction sees it; every statement of a
/// table module takes one. The SQL is written once, in the dialect both
/// backends take (`sql`).
pub struct Db<'a> {
    inner: Inner<'a>,
    /// In a one-statement read ([`Store::read_one`]): whether its
    /// statement ran.
    one: Option<std::cell::Cell<bool>>,
}

enum Inner<'a> {
    Sqlite(&'a rusqlite::Connection),
    Postgres(&'a pg::Conn),
}

impl<'a> Db<'a> {
    fn new(inner: Inner<'a>) -> Self {
        Db { inner, one: None }
    }

    fn one_read(inner: Inner<'a>) -> Self {
        Db { inner, one: Some(std::cell::Cell::new(false)) }
    }

    /// Counts a statement of a one-statement read: refused if one ran
    /// already, or if it writes (nothing holds two together).
    fn turn(&self, sql: &str) -> Result<(), sql::SqlError> {
        match &self.one {
            None => Ok(()),
            Some(ran) if ran.get() => Err(sql::SqlError::NotOneRead("ran a second statement")),
            Some(_) if sql::writes(sql) => Err(sql::SqlError::NotOneRead("wrote")),
            Some(ran) => {
                ran.set(true);
                Ok(())
            }
        }
    }

    /// Whether PostgreSQL runs it (for the few statements whose SQL the two
    /// backends spell differently: the clock).
    pub(crate) fn postgres(&self) -> bool {
        matches!(self.inner, Inner::Postgres(_))
    }

    /// Runs a statement; the number of rows it changed.
    pub(crate) fn execute(&self, sql: &str, params: &[&dyn sql::ToValue]) -> Result<usize, sql::SqlError> {
        self.turn(sql)?;
        match self.inner {
            Inner::Sqlite(conn) => sqlite::execute(conn, sql, params),
            Inner::Postgres(conn) => conn.execute(sql, params),
        }
    }

    /// Runs a query; each row through `f`.
    pub(crate) fn query_map<T>(
        &self,
        sql: &str,
        params: &[&dyn sql::ToValue],
        f: impl FnMut(&sql::Row) -> Result<T, sql::SqlError>,
    ) -> Result<Vec<T>, sql::SqlError> {
        self.turn(sql)?;
        match self.inner {
            Inner::Sqlite(conn) => sqlite::query_map(conn, sql, params, f),
            Inner::Postgres(conn) => conn.query_map(sql, params, f),
        }
    }

    /// Runs a query of one row (no row: [`sql::SqlError::NoRows`]).
    pub(crate) fn query_row<T>(
        &self,
        sql: &str,
        params: &[&dyn sql::ToValue],
        f: impl FnOnce(&sql::Row) -> Result<T, sql::SqlError>,
    ) -> Result<T, sql::SqlError> {
        let mut f = Some(f);
        let mut rows = self.query_map(sql, params, |r| match f.take() {
            Some(f) => f(r).map(Some),
            None => Ok(None),
        })?;
        rows.drain(..).next().flatten().ok_or(sql::SqlError::NoRows)
    }
}

/// Reads an optional single row.
pub(crate) fn optional<T>(r: Result<T, sql::SqlError>, context: &'static str) -> Result<Option<T>> {
    match r {
        Ok(value) => Ok(Some(value)),
        Err(sql::SqlError::NoRows) => Ok(None),
        Err(e) => Err(Error::at(context)(e)),
    }
}

/// The wall clock in Unix milliseconds, for the store's own bookkeeping
/// (when a migration or a setting was written).
fn now_ms() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A store for unit tests: in memory, with a pool `pool_1` (acceptance
/// `none`) and a joined node `node_1`.
#[cfg(test)]
pub(crate) fn store_with_node() -> Store {
    let store = Store::open(&StoreLocation::Memory).unwrap();
    let pool = rows::PoolRow {
        id: "pool_1".into(),
        name: "p".into(),
        gpu_model: None,
        expect_gpu_count: None,
        acceptance: "none".into(),
        created_at_ms: 0,
        kind: "gpu".into(),
        policy: "{}".into(),
    };
    let node = nodes::NewNode {
        id: "node_1",
        pool_id: "pool_1",
        join_token_id: Some("jt_1"),
        hostname: "",
        daemon_version: "",
        hardware_id: "",
        created_at_ms: 0,
    };
    store
        .write(|c| {
            pools::insert(c, &pool)?;
            nodes::insert(c, &node)
        })
        .unwrap();
    store
}
