//! The PostgreSQL backend: a fixed pool of tokio-postgres connections, for
//! several gateways on one database (docs/devstack.md, "The store").
//!
//! The store's transactions are synchronous closures (the SQLite backend
//! runs them on one connection under a mutex), so this backend keeps that
//! shape: the connections' I/O tasks run on a small runtime of the store's
//! own, and a caller's statements block on their client futures (which need
//! no runtime: they talk to the I/O task over channels). A caller on a
//! tokio worker blocks it for a round trip, as a SQLite statement blocks it
//! for the disk. Hand-written rather than deadpool-postgres: that pool is
//! async, and its checkouts could not be awaited from these closures.
//!
//! A write runs `SERIALIZABLE` and is run again when PostgreSQL reports a
//! serialization failure or a deadlock; a read is one `REPEATABLE READ READ
//! ONLY` snapshot, or, for a read of one statement, that statement alone
//! (its own snapshot: no `BEGIN`, no `COMMIT`). `?N` parameters become
//! `$N`; each connection prepares a statement once.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, NoTls, Statement};

use crate::sql::{self, Row, SqlError, ToValue, Value};
use crate::{Error, Result};

/// How many connections a store holds.
pub const POOL_SIZE: usize = 8;
/// How long a checkout waits for a free connection before it fails.
const CHECKOUT_WAIT: Duration = Duration::from_secs(30);
/// How often a write is tried when it keeps losing races.
pub const WRITE_ATTEMPTS: usize = 16;

/// The wait before a write's next attempt, after `attempt` lost a race:
/// full jitter, `random(0, min(64 ms, 2^attempt ms))`.
pub(crate) fn retry_wait(attempt: usize) -> Duration {
    let cap_us = 1_000u64 << attempt.min(6);
    let mut bytes = [0u8; 8];
    // No randomness (never on Linux): the cap's half, still bounded.
    let random = getrandom::fill(&mut bytes).map(|()| u64::from_le_bytes(bytes)).unwrap_or(cap_us / 2);
    Duration::from_micros(random % cap_us)
}

/// A PostgreSQL error as the store says it: its SQLSTATE and message.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// A URL without its password (what logs and errors may show).
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(a PostgreSQL connection string)".to_string();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let mut out = match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => format!("{scheme}://{rest}"),
        },
        None => format!("{scheme}://{rest}"),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{out}?{}", pairs.join("&"));
    }
    out
}

/// `?N` parameters as PostgreSQL's `$N` (outside string literals).
pub(crate) fn dollar_params(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    for c in sql.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted => out.push('$'),
            _ => out.push(c),
        }
    }
    out
}

/// A value bound to a PostgreSQL parameter, as the parameter's type wants.
#[derive(Debug)]
struct Param<'a>(&'a Value);

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match (self.0, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Int(n), &Type::INT8) => n.to_sql(ty, out),
            (Value::Int(n), &Type::INT4) => i32::try_from(*n)?.to_sql(ty, out),
            (Value::Int(n), &Type::INT2) => i16::try_from(*n)?.to_sql(ty, out),
            (Value::Int(n), &Type::BOOL) => (*n != 0).to_sql(ty, out),
            (Value::Int(n), &Type::FLOAT8) => (*n as f64).to_sql(ty, out),
            (Value::Int(n), &Type::TEXT | &Type::VARCHAR) => n.to_string().to_sql(ty, out),
            (Value::Real(x), &Type::FLOAT8) => x.to_sql(ty, out),
            (Value::Text(s), _) => s.as_str().to_sql(ty, out),
            (Value::Blob(b), &Type::BYTEA) => b.as_slice().to_sql(ty, out),
            (v, ty) => Err(format!("a {v:?} for a parameter of type {ty}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A column of a PostgreSQL row as a value.
fn column(row: &tokio_postgres::Row, i: usize) -> std::result::Result<Value, SqlError> {
    let ty = row.columns()[i].type_();
    let v = match *ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::Int),
        Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(|n| Value::Int(n.into())),
        Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(|n| Value::Int(n.into())),
        Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(|b| Value::Int(b.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::Real),
        Type::FLOAT4 => row.try_get::<_, Option<f32>>(i)?.map(|x| Value::Real(x.into())),
        Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Blob),
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => row.try_get::<_, Option<String>>(i)?.map(Value::Text),
        ref other => return Err(SqlError::Column { index: i, reason: format!("a column of type {other}") }),
    };
    Ok(v.unwrap_or(Value::Null))
}

/// One connection, used by one transaction at a time.
pub(crate) struct Conn {
    client: Client,
    statements: RefCell<HashMap<String, Statement>>,
    /// Whether the transaction in progress changed a row.
    changed: Cell<bool>,
}

impl Conn {
    fn statement(&self, sql: &str) -> std::result::Result<Statement, SqlError> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let prepared = block_on(self.client.prepare(&dollar_params(sql)))?;
        self.statements.borrow_mut().insert(sql.to_string(), prepared.clone());
        Ok(prepared)
    }

    pub(crate) fn batch(&self, sql: &str) -> std::result::Result<(), SqlError> {
        Ok(block_on(self.client.batch_execute(sql))?)
    }

    pub(crate) fn execute(&self, sql: &str, params: &[&dyn ToValue]) -> std::result::Result<usize, SqlError> {
        let values = sql::values(params)?;
        let statement = self.statement(sql)?;
        let bound: Vec<Param<'_>> = values.iter().map(Param).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let n = block_on(self.client.execute(&statement, &refs))?;
        if n > 0 {
            self.changed.set(true);
        }
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    pub(crate) fn query_map<T>(
        &self,
        sql: &str,
        params: &[&dyn ToValue],
        mut f: impl FnMut(&Row) -> std::result::Result<T, SqlError>,
    ) -> std::result::Result<Vec<T>, SqlError> {
        let values = sql::values(params)?;
        let statement = self.statement(sql)?;
        let bound: Vec<Param<'_>> = values.iter().map(Param).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let rows = block_on(self.client.query(&statement, &refs))?;
        if sql::writes(sql) && !rows.is_empty() {
            self.changed.set(true);
        }
        rows.iter()
            .map(|r| {
                let values = (0..r.len()).map(|i| column(r, i)).collect::<std::result::Result<Vec<_>, _>>()?;
                f(&Row::new(values))
            })
            .collect()
    }

    /// Starts a transaction; whether it changes a row is counted from here.
    pub(crate) fn begin(&self, how: &str) -> std::result::Result<(), SqlError> {
        self.changed.set(false);
        self.batch(how)
    }

    pub(crate) fn changed(&self) -> bool {
        self.changed.get()
    }
}

/// Blocks on a client future (it needs no runtime of its own).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_executor::block_on(f)
}

/// The pool: the connections, and the runtime their I/O runs on.
pub(crate) struct Pool {
    url: String,
    runtime: Option<tokio::runtime::Runtime>,
    free: Mutex<Vec<Conn>>,
    returned: Condvar,
    /// The liveness lane's own connection (connected at its first use):
    /// a gateway's beat never waits for one behind its sessions' calls.
    reserved: Mutex<Option<Conn>>,
}

impl Pool {
    /// Connects `POOL_SIZE` connections to `url`.
    pub(crate) fn open(url: &str) -> Result<Pool> {
        let unavailable = |reason: String| Error::Unavailable { location: redacted(url), reason };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("devstack-store-pg")
            .enable_all()
            .build()
            .map_err(|e| unavailable(format!("its runtime: {e}")))?;
        let mut pool = Pool {
            url: url.to_string(),
            runtime: Some(runtime),
            free: Mutex::new(Vec::new()),
            returned: Condvar::new(),
            reserved: Mutex::new(None),
        };
        let conns = (0..POOL_SIZE).map(|_| pool.connect()).collect::<Result<Vec<_>>>()?;
        pool.free = Mutex::new(conns);
        Ok(pool)
    }

    /// A new connection, its I/O task spawned on the store's runtime.
    fn connect(&self) -> Result<Conn> {
        let unavailable = |reason: String| Error::Unavailable { location: redacted(&self.url), reason };
        let runtime = self.runtime.as_ref().ok_or_else(|| unavailable("the store is closing".into()))?;
        let url = self.url.clone();
        let connected = runtime.spawn(async move {
            let (client, connection) = tokio_postgres::connect(&url, NoTls).await?;
            tokio::spawn(async move {
                // The connection ends when the client is dropped, or the
                // server goes: the next checkout connects again.
                let _ = connection.await;
            });
            Ok::<_, tokio_postgres::Error>(client)
        });
        let client =
            block_on(connected).map_err(|e| unavailable(e.to_string()))?.map_err(|e| unavailable(describe(&e)))?;
        Ok(Conn { client, statements: RefCell::new(HashMap::new()), changed: Cell::new(false) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        // Connections are pushed and popped whole: a poisoned lock still
        // holds a consistent list.
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free connection (connected again if the server dropped it),
    /// returned when the checkout is dropped.
    pub(crate) fn checkout(&self) -> Result<Checkout<'_>> {
        let mut free = self.lock();
        let deadline = std::time::Instant::now() + CHECKOUT_WAIT;
        let conn = loop {
            if let Some(conn) = free.pop() {
                break conn;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(Error::Unavailable {
                    location: redacted(&self.url),
                    reason: format!("no free connection of {POOL_SIZE} within {} s", CHECKOUT_WAIT.as_secs()),
                });
            }
            free = self.returned.wait_timeout(free, left).unwrap_or_else(|p| p.into_inner()).0;
        };
        drop(free);
        let conn = if conn.client.is_closed() { self.connect()? } else { conn };
        Ok(Checkout { home: Home::Pool(self), conn: Some(conn) })
    }

    /// The liveness lane's connection (one caller at a time; connected
    /// again if the server dropped it), returned to the lane when dropped.
    pub(crate) fn checkout_reserved(&self) -> Result<Checkout<'_>> {
        let mut lane = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        let conn = match lane.take() {
            Some(conn) if !conn.client.is_closed() => conn,
            _ => self.connect()?,
        };
        Ok(Checkout { home: Home::Reserved(lane), conn: Some(conn) })
    }
}

/// The channel the gateways of a store notify each other on.
pub const CHANNEL: &str = "devstack";

impl Pool {
    /// Sends `payload` to every listener of the store (itself included).
    pub(crate) fn notify(&self, payload: &str) -> Result<()> {
        let conn = self.checkout()?;
        conn.execute("SELECT pg_notify(?1, ?2)", crate::params![CHANNEL, payload])
            .map_err(Error::at("notify the gateways"))?;
        Ok(())
    }

    /// What the store's gateways notify, as it comes: a connection of its
    /// own that listens, connected again (after a second) when the server
    /// drops it; an empty payload says it was (what was sent meanwhile is
    /// lost: the receiver re-reads what it waits on).
    pub(crate) fn listen(&self) -> Result<tokio::sync::mpsc::UnboundedReceiver<String>> {
        let runtime = self.runtime.as_ref().ok_or_else(|| Error::Unavailable {
            location: redacted(&self.url),
            reason: "the store is closing".into(),
        })?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let url = self.url.clone();
        runtime.spawn(async move {
            while !tx.is_closed() {
                if let Ok((client, mut connection)) = tokio_postgres::connect(&url, NoTls).await {
                    let (messages, mut incoming) = tokio::sync::mpsc::unbounded_channel();
                    let driver = tokio::spawn(async move {
                        loop {
                            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                                    if messages.send(n.payload().to_string()).is_err() {
                                        return;
                                    }
                                }
                                Some(Ok(_)) => {}
                                Some(Err(_)) | None => return,
                            }
                        }
                    });
                    if client.batch_execute(&format!("LISTEN {CHANNEL}")).await.is_ok() {
                        let _ = tx.send(String::new());
                        while let Some(payload) = incoming.recv().await {
                            if tx.send(payload).is_err() {
                                break;
                            }
                        }
                    }
                    driver.abort();
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Ok(rx)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.lock().clear();
        *self.reserved.lock().unwrap_or_else(|p| p.into_inner()) = None;
        // Dropped inside a runtime (a test's stack): shut ours down without
        // blocking that one.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A connection out of the pool, or the liveness lane's.
pub(crate) struct Checkout<'a> {
    home: Home<'a>,
    conn: Option<Conn>,
}

/// Where a checked-out connection goes back to.
enum Home<'a> {
    Pool(&'a Pool),
    /// The lane, held locked until the connection is back.
    Reserved(std::sync::MutexGuard<'a, Option<Conn>>),
}

impl std::ops::Deref for Checkout<'_> {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("a checkout holds its connection until dropped")
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            match &mut self.home {
                Home::Pool(pool) => {
                    pool.lock().push(conn);
                    pool.returned.notify_one();
                }
                Home::Reserved(lane) => **lane = Some(conn),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_and_passwords_are_rewritten() {
        assert_eq!(dollar_params("SELECT ?1, '?' FROM t WHERE a = ?2"), "SELECT $1, '?' FROM t WHERE a = $2");
        assert_eq!(
            redacted("postgres://bc:secret@127.0.0.1:5432/devstack"),
            "postgres://bc:***@127.0.0.1:5432/devstack"
        );
        assert_eq!(redacted("postgres://bc@/devstack?host=/tmp"), "postgres://bc@/devstack?host=/tmp");
        assert!(!redacted("host=/tmp user=bc password=x").contains('x'));
        assert_eq!(
            redacted("postgres://bc@h/db?password=s3&sslmode=disable"),
            "postgres://bc@h/db?password=***&sslmode=disable"
        );
        assert_eq!(redacted("postgres://bc:p@ss@h/db"), "postgres://bc:***@h/db");
    }
}
