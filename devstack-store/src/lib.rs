//! The dev stack's store (docs/devstack.md, "The store"): the ground floor
//! every part of the stack stands on. It holds every row type (`rows`), the
//! numbered migrations, one module of statements per table group, and
//! [`Store`], the seam the rest of the stack reads and writes through: a
//! read or a transaction hands its closure a [`Db`], and every statement of
//! a table module takes one, so statements compose inside a caller's
//! transaction (event recording does this). The backend behind `Db` is the
//! store's business: today one SQLite connection (file or in-memory) behind
//! a mutex; no caller names SQLite.
//!
//! A store file (and its -wal and -shm files) is owner-only (0600), in a
//! directory created owner-only (0700): it holds every private key of the
//! stack. Every read and transaction is short and synchronous; callers never
//! hold one across an await.
//!
//! **Architecture Invariant:** this crate knows no feature of the stack: it
//! imports nothing of `devstack`, and its types are plain rows.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{CachedStatement, Connection, OptionalExtension};

pub use error::{Error, Result};

pub mod bindings;
pub mod certs;
pub mod commands;
mod error;
pub mod events;
pub mod fleet;
pub mod instances;
pub mod inventory;
pub mod join_requests;
pub mod labels;
pub mod migrations;
pub mod nodes;
pub mod otlp;
pub mod pools;
pub mod releases;
pub mod reservations;
pub mod rows;
pub mod secrets;
pub mod sections;
pub mod sessions;
pub mod settings;
pub mod specs;
pub mod tokens;
pub mod volumes;

/// Where the store lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// A private in-memory database (gone at shutdown).
    Memory,
    /// A SQLite file; a stack started again on it keeps its keys and nodes.
    File(PathBuf),
}

/// The store.
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if needed) the store and applies the migrations.
    pub fn open(location: &StoreLocation) -> Result<Self> {
        let mut conn = match location {
            StoreLocation::Memory => Connection::open_in_memory().map_err(Error::sqlite("open in-memory store"))?,
            StoreLocation::File(path) => open_file(path)?,
        };
        conn.execute_batch("PRAGMA foreign_keys = ON;").map_err(Error::sqlite("enable foreign keys"))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        migrations::migrate(&mut conn)?;
        Ok(Store { conn: Mutex::new(conn) })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while the lock was held cannot leave SQLite half-written:
        // every multi-statement change runs in a transaction that rolls back
        // when dropped. So a poisoned lock is still a consistent connection.
        self.conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One consistent read: `f` sees the store at one instant (writes
    /// through a read's `Db` are not atomic together; use [`Store::write`]).
    pub fn read<T, E>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, E>) -> Result<T, E> {
        f(&Db { conn: &self.lock() })
    }

    /// Runs `f` in a transaction, committed when it returns `Ok` (rolled
    /// back on `Err`, or on a panic).
    pub fn write<T, E: From<Error>>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, E>) -> Result<T, E> {
        self.write_then(f, |_| {})
    }

    /// [`Store::write`], then `committed` once the commit is done, still
    /// under the store's lock, so that what it announces is in the order of
    /// the commits; it is told whether the transaction changed any row.
    pub fn write_then<T, E: From<Error>>(
        &self,
        f: impl FnOnce(&Db<'_>) -> Result<T, E>,
        committed: impl FnOnce(bool),
    ) -> Result<T, E> {
        let mut conn = self.lock();
        let before = conn.total_changes();
        let tx = conn.transaction().map_err(Error::sqlite("begin transaction"))?;
        let value = f(&Db { conn: &tx })?;
        tx.commit().map_err(Error::sqlite("commit"))?;
        committed(conn.total_changes() != before);
        Ok(value)
    }
}

/// The store as one read or one transaction sees it; every statement takes
/// one. Its statements run prepared once per connection (the statement
/// cache) rather than parsed and planned on every call: with a fleet
/// joining, SQLite's parser and planner were a third of the stack's time in
/// the store.
pub struct Db<'a> {
    conn: &'a Connection,
}

impl Db<'_> {
    /// `Connection::execute` through the statement cache.
    pub(crate) fn execute_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.conn.prepare_cached(sql)?.execute(params)
    }

    /// `Connection::query_row` through the statement cache.
    pub(crate) fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    {
        self.conn.prepare_cached(sql)?.query_row(params, f)
    }

    /// A statement through the statement cache (for queries of many rows).
    pub(crate) fn prepare_cached(&self, sql: &str) -> rusqlite::Result<CachedStatement<'_>> {
        self.conn.prepare_cached(sql)
    }

    /// The rowid of the last row this connection inserted.
    pub(crate) fn last_insert_rowid(&self) -> i64 {
        self.conn.last_insert_rowid()
    }
}

/// How many prepared statements the connection keeps: more than the store
/// has distinct statements, so each is parsed and planned once.
const STATEMENT_CACHE: usize = 256;

/// The mode of the store's files: it holds every private key of the stack.
const STORE_FILE_MODE: u32 = 0o600;

fn open_file(path: &Path) -> Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)?;
    }
    // The file exists, owner-only, before SQLite opens it: SQLite gives its
    // -wal and -shm files the database file's mode.
    private_file(path, true)?;
    let conn = Connection::open(path).map_err(Error::sqlite("open store file"))?;
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(Error::sqlite("set busy timeout"))?;
    // WAL keeps readers and the writer apart; a restarted stack opens the
    // same file while the previous connection may still be closing.
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())).map_err(Error::sqlite("enable WAL"))?;
    // A commit is in the WAL before it returns, so it survives the stack's
    // process being killed or restarted; the WAL is fsynced at checkpoints,
    // not at every commit (an OS crash may lose the last commits). The
    // store's one lock is held through each commit: with an fsync each
    // (~4 ms on this disk), a fleet's joins and sessions would all wait on
    // the disk, about 250 commits a second (docs/devstack.md, "The store").
    conn.execute_batch("PRAGMA synchronous = NORMAL;").map_err(Error::sqlite("set synchronous"))?;
    // A checkpoint every 10,000 WAL pages (~40 MiB), not SQLite's 1,000: it
    // writes each page it finds once, so the pages a fleet's commits touch
    // again and again are written a tenth as often (docs/devstack.md).
    conn.execute_batch("PRAGMA wal_autocheckpoint = 10000;").map_err(Error::sqlite("set wal_autocheckpoint"))?;
    // A store made before the files were owner-only is made so now.
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        private_file(Path::new(&side), false)?;
    }
    Ok(conn)
}

/// Creates `dir` (and its parents) owner-only when it does not exist; an
/// existing directory keeps its mode.
fn create_private_dir(dir: &Path) -> Result<()> {
    let io = |source| Error::Io { path: dir.to_path_buf(), source };
    if dir.exists() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(io)
}

/// Makes `path` owner-only (0600), creating it empty when `create` says so;
/// a missing file that is not to be created is left alone.
fn private_file(path: &Path, create: bool) -> Result<()> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(create);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, STORE_FILE_MODE);
    match options.open(path) {
        Ok(file) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                file.set_permissions(std::fs::Permissions::from_mode(STORE_FILE_MODE)).map_err(io)?;
            }
            drop(file);
            Ok(())
        }
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// Reads an optional single row.
pub(crate) fn optional<T>(r: rusqlite::Result<T>, context: &'static str) -> Result<Option<T>> {
    r.optional().map_err(Error::sqlite(context))
}

/// Reads a text column holding an enum value; a value the stack does not
/// know is a conversion failure naming the column.
pub(crate) fn enum_col<T: std::str::FromStr<Err = String>>(r: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = r.get(idx)?;
    text.parse()
        .map_err(|e: String| rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, e.into()))
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
