//! The SQLite store (file or in-memory): one connection behind a mutex,
//! migrations at open, and one module per table group. A store file (and
//! its -wal and -shm files) is owner-only (0600), in a directory created
//! owner-only (0700): it holds every private key of the stack.
//!
//! Every method is a short synchronous statement or transaction; callers never
//! hold the lock across an await. Functions that take a `&Connection` compose
//! inside a caller's transaction (event recording does this).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, Transaction};

use crate::error::{Error, Result};

pub mod bindings;
pub mod certs;
pub mod commands;
pub mod events;
pub mod instance_rows;
pub mod instances;
pub mod inventory;
pub mod join_requests;
pub mod labels;
pub mod migrations;
pub mod nodes;
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
            StoreLocation::Memory => Connection::open_in_memory().map_err(Error::store("open in-memory store"))?,
            StoreLocation::File(path) => open_file(path)?,
        };
        conn.execute_batch("PRAGMA foreign_keys = ON;").map_err(Error::store("enable foreign keys"))?;
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

    /// Runs `f` on the connection.
    pub fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        f(&self.lock())
    }

    /// Runs `f` in a transaction, committed when it returns `Ok`.
    pub fn tx<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(Error::store("begin transaction"))?;
        let value = f(&tx)?;
        tx.commit().map_err(Error::store("commit"))?;
        Ok(value)
    }
}

/// How many prepared statements the connection keeps: more than the store
/// has distinct statements, so each is parsed and planned once.
const STATEMENT_CACHE: usize = 256;

/// The store's statements run prepared once per connection (rusqlite's
/// statement cache) rather than parsed and planned on every call: with a
/// fleet joining, SQLite's parser and planner were a third of the stack's
/// time in the store.
pub(crate) trait Cached {
    /// `Connection::execute` through the statement cache.
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;
    /// `Connection::query_row` through the statement cache.
    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>;
}

impl Cached for Connection {
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }
}

/// The mode of the store's files: it holds every private key of the stack.
const STORE_FILE_MODE: u32 = 0o600;

fn open_file(path: &Path) -> Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)?;
    }
    // The file exists, owner-only, before SQLite opens it: SQLite gives its
    // -wal and -shm files the database file's mode.
    private_file(path, true)?;
    let conn = Connection::open(path).map_err(Error::store("open store file"))?;
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(Error::store("set busy timeout"))?;
    // WAL keeps readers and the writer apart; a restarted stack opens the
    // same file while the previous connection may still be closing.
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())).map_err(Error::store("enable WAL"))?;
    // A commit is in the WAL before it returns, so it survives the stack's
    // process being killed or restarted; the WAL is fsynced at checkpoints,
    // not at every commit (an OS crash may lose the last commits). The
    // store's one lock is held through each commit: with an fsync each
    // (~4 ms on this disk), a fleet's joins and sessions would all wait on
    // the disk, about 250 commits a second (docs/devstack.md, "The store").
    conn.execute_batch("PRAGMA synchronous = NORMAL;").map_err(Error::store("set synchronous"))?;
    // A checkpoint every 10,000 WAL pages (~40 MiB), not SQLite's 1,000: it
    // writes each page it finds once, so the pages a fleet's commits touch
    // again and again are written a tenth as often (docs/devstack.md).
    conn.execute_batch("PRAGMA wal_autocheckpoint = 10000;").map_err(Error::store("set wal_autocheckpoint"))?;
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
    r.optional().map_err(Error::store(context))
}

/// Reads a text column holding an enum value; a value the stack does not
/// know is a conversion failure naming the column.
pub(crate) fn enum_col<T: std::str::FromStr<Err = String>>(r: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = r.get(idx)?;
    text.parse()
        .map_err(|e: String| rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, e.into()))
}
