//! The SQLite backend: one rusqlite connection (a file, or in memory) behind
//! the store's mutex, its statements prepared once (the statement cache),
//! and the store's files owner-only. The embedded default.

use std::path::Path;

use rusqlite::Connection;
use rusqlite::types::{ToSqlOutput, ValueRef};

use crate::sql::{self, Row, SqlError, ToValue, Value};
use crate::{Error, Result};

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(n) => ValueRef::Integer(*n),
            Value::Real(x) => ValueRef::Real(*x),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

fn value(v: ValueRef<'_>) -> Result<Value, SqlError> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::Int(n),
        ValueRef::Real(x) => Value::Real(x),
        ValueRef::Text(t) => Value::Text(
            String::from_utf8(t.to_vec()).map_err(|e| SqlError::Column { index: 0, reason: e.to_string() })?,
        ),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    })
}

/// Runs a statement; the number of rows it changed.
pub(crate) fn execute(conn: &Connection, sql: &str, params: &[&dyn ToValue]) -> Result<usize, SqlError> {
    let values = sql::values(params)?;
    Ok(conn.prepare_cached(sql)?.execute(rusqlite::params_from_iter(values.iter()))?)
}

/// Runs a query; each row through `f`.
pub(crate) fn query_map<T>(
    conn: &Connection,
    sql: &str,
    params: &[&dyn ToValue],
    mut f: impl FnMut(&Row) -> Result<T, SqlError>,
) -> Result<Vec<T>, SqlError> {
    let values = sql::values(params)?;
    let mut stmt = conn.prepare_cached(sql)?;
    let columns = stmt.column_count();
    let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let values = (0..columns).map(|i| value(r.get_ref(i)?)).collect::<Result<Vec<_>, SqlError>>()?;
        out.push(f(&Row::new(values))?);
    }
    Ok(out)
}

/// A transaction on the store's connection, begun and committed by
/// statements prepared once: rusqlite's own `Transaction` runs "BEGIN
/// DEFERRED" and "COMMIT" through `execute_batch`, which parses them anew
/// each time (a tenth of the stack's CPU while a fleet reconnected,
/// `cargo xtask bench scale`). Dropped without a commit (an error, a panic,
/// a failed commit), it rolls back.
pub(crate) struct Transaction<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Transaction<'c> {
    /// Begins a (deferred) transaction.
    pub(crate) fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN")?.execute([])?;
        Ok(Transaction { conn, open: true })
    }

    /// The connection, inside the transaction.
    pub(crate) fn conn(&self) -> &'c Connection {
        self.conn
    }

    /// Commits it.
    pub(crate) fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if self.open {
            // Nothing to do about a failed rollback: the connection is
            // still usable, and the next BEGIN fails if it is not.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// Opens the connection, applies the pragmas, and runs the migrations.
pub(crate) fn open(location: Option<&Path>) -> Result<Connection> {
    let mut conn = match location {
        None => Connection::open_in_memory().map_err(Error::at("open in-memory store"))?,
        Some(path) => open_file(path)?,
    };
    conn.execute_batch("PRAGMA foreign_keys = ON;").map_err(Error::at("enable foreign keys"))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    crate::migrations::migrate_sqlite(&mut conn)?;
    Ok(conn)
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
    let conn = Connection::open(path).map_err(Error::at("open store file"))?;
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(Error::at("set busy timeout"))?;
    // WAL keeps readers and the writer apart; a restarted stack opens the
    // same file while the previous connection may still be closing.
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())).map_err(Error::at("enable WAL"))?;
    // A commit is in the WAL before it returns, so it survives the stack's
    // process being killed or restarted; the WAL is fsynced at checkpoints,
    // not at every commit (an OS crash may lose the last commits). The
    // store's one lock is held through each commit: with an fsync each
    // (~4 ms on this disk), a fleet's joins and sessions would all wait on
    // the disk, about 250 commits a second (docs/devstack.md, "The store").
    conn.execute_batch("PRAGMA synchronous = NORMAL;").map_err(Error::at("set synchronous"))?;
    // A checkpoint every 10,000 WAL pages (~40 MiB), not SQLite's 1,000: it
    // writes each page it finds once, so the pages a fleet's commits touch
    // again and again are written a tenth as often (docs/devstack.md).
    conn.execute_batch("PRAGMA wal_autocheckpoint = 10000;").map_err(Error::at("set wal_autocheckpoint"))?;
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
