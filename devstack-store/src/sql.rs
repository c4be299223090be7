//! The one SQL surface the table modules write against, whichever backend
//! runs it: parameters as [`Value`]s ([`ToValue`], [`crate::params!`]), rows
//! as owned values read back with [`Row::get`] ([`FromValue`]), and the
//! error a statement fails with ([`SqlError`]). The SQL itself is written
//! once, in the dialect both SQLite and PostgreSQL take (`?N` parameters,
//! `ON CONFLICT`, `RETURNING`, `CASE` instead of a boolean sum); the
//! PostgreSQL backend turns `?N` into `$N`.
//!
//! Hand-written rather than a crate's: the crates that speak both backends
//! (sqlx, sea-query) are async or a query builder, and the store's callers
//! are synchronous transactions the SQLite backend runs on one connection.

use std::cell::RefCell;

/// A value bound to a statement or read from a row.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// An integer (every integer and boolean column: 0 or 1).
    Int(i64),
    /// A double.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

/// Why a statement failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// SQLite's error.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL's error.
    #[error("{}", crate::pg::describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// A query that must return a row returned none.
    #[error("no row")]
    NoRows,
    /// A parameter the store cannot hold (an unsigned value above 2^63-1).
    #[error("parameter {index}: {reason}")]
    OutOfRange {
        /// Its position (1-based).
        index: usize,
        /// Why.
        reason: String,
    },
    /// A one-statement read ([`crate::Store::read_one`]) that ran a second
    /// statement, or a write: it has no transaction to hold them together.
    #[error("a one-statement read {0}")]
    NotOneRead(&'static str),
    /// A column that does not read as the type asked.
    #[error("column {index}: {reason}")]
    Column {
        /// Its position (0-based).
        index: usize,
        /// Why.
        reason: String,
    },
}

impl SqlError {
    /// Whether the transaction lost a race and may be run again
    /// (PostgreSQL's serialization failure or deadlock; SQLite has one
    /// writer and never says so).
    pub fn is_retryable(&self) -> bool {
        match self {
            SqlError::Postgres(e) => e.code().is_some_and(|c| {
                *c == tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED
            }),
            _ => false,
        }
    }

    /// Whether a unique or primary key constraint refused the statement.
    pub fn is_unique_violation(&self) -> bool {
        match self {
            SqlError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => {
                e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            }
            SqlError::Postgres(e) => e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION),
            _ => false,
        }
    }
}

/// A type a statement takes as a parameter.
pub trait ToValue {
    /// The value, or why the store cannot hold it.
    fn to_value(&self) -> Result<Value, String>;
}

macro_rules! int_values {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Result<Value, String> {
                i64::try_from(*self).map(Value::Int).map_err(|_| format!("{self} is above 2^63-1"))
            }
        }
    )*};
}
int_values!(i64, i32, u32, u64, usize);

impl ToValue for bool {
    fn to_value(&self) -> Result<Value, String> {
        Ok(Value::Int(i64::from(*self)))
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> Result<Value, String> {
        Ok(Value::Real(*self))
    }
}

impl ToValue for str {
    fn to_value(&self) -> Result<Value, String> {
        Ok(Value::Text(self.to_string()))
    }
}

impl ToValue for String {
    fn to_value(&self) -> Result<Value, String> {
        Ok(Value::Text(self.clone()))
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> Result<Value, String> {
        Ok(Value::Blob(self.to_vec()))
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> Result<Value, String> {
        Ok(Value::Blob(self.clone()))
    }
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Result<Value, String> {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Result<Value, String> {
        self.as_ref().map_or(Ok(Value::Null), ToValue::to_value)
    }
}

/// The parameters of a statement, in order: `params![a, b, …]`.
#[macro_export]
macro_rules! params {
    () => { &[] as &[&dyn $crate::sql::ToValue] };
    ($($p:expr),+ $(,)?) => { &[$(&$p as &dyn $crate::sql::ToValue),+] as &[&dyn $crate::sql::ToValue] };
}

/// Whether a statement writes (`INSERT`, `UPDATE`, `DELETE`).
pub(crate) fn writes(sql: &str) -> bool {
    sql.trim_start().get(..6).is_some_and(|w| ["INSERT", "UPDATE", "DELETE"].iter().any(|k| w.eq_ignore_ascii_case(k)))
}

/// `rows` rows of `columns` numbered parameters each, for a statement
/// that writes several rows at once: `(?1, ?2), (?3, ?4)`.
pub(crate) fn value_rows(rows: usize, columns: usize) -> String {
    let row = |r: usize| {
        let params: Vec<String> = (1..=columns).map(|c| format!("?{}", r * columns + c)).collect();
        format!("({})", params.join(", "))
    };
    (0..rows).map(row).collect::<Vec<_>>().join(", ")
}

/// The rows a statement that writes several at once may take: the last
/// of each key, in linear time (a node's report may name one section many
/// times, and one statement cannot write a row twice), at most
/// [`MAX_ROWS`] to a statement.
pub(crate) fn last_of_each<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<Vec<&'a T>> {
    let mut seen = std::collections::HashSet::new();
    let mut last: Vec<&T> = items.iter().rev().filter(|item| seen.insert(key(item))).collect();
    last.reverse();
    last.chunks(MAX_ROWS).map(<[&T]>::to_vec).collect()
}

/// The most rows one statement writes (PostgreSQL binds at most 65,535
/// parameters to a statement).
pub(crate) const MAX_ROWS: usize = 1_000;

/// The parameters as values, or the first the store cannot hold.
pub(crate) fn values(params: &[&dyn ToValue]) -> Result<Vec<Value>, SqlError> {
    params
        .iter()
        .enumerate()
        .map(|(i, p)| p.to_value().map_err(|reason| SqlError::OutOfRange { index: i + 1, reason }))
        .collect()
}

/// A type a row's column reads as.
pub trait FromValue: Sized {
    /// The column's value as this type, or why not.
    fn from_value(value: Value) -> Result<Self, String>;
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "NULL",
        Value::Int(_) => "an integer",
        Value::Real(_) => "a double",
        Value::Text(_) => "text",
        Value::Blob(_) => "bytes",
    }
}

macro_rules! int_columns {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(value: Value) -> Result<Self, String> {
                match value {
                    Value::Int(n) => <$t>::try_from(n).map_err(|_| format!("{n} does not fit {}", stringify!($t))),
                    other => Err(format!("{} where an integer was expected", kind(&other))),
                }
            }
        }
    )*};
}
int_columns!(i64, i32, u32, u64, usize);

impl FromValue for bool {
    fn from_value(value: Value) -> Result<Self, String> {
        i64::from_value(value).map(|n| n != 0)
    }
}

impl FromValue for f64 {
    fn from_value(value: Value) -> Result<Self, String> {
        match value {
            Value::Real(x) => Ok(x),
            Value::Int(n) => Ok(n as f64),
            other => Err(format!("{} where a double was expected", kind(&other))),
        }
    }
}

impl FromValue for String {
    fn from_value(value: Value) -> Result<Self, String> {
        match value {
            Value::Text(s) => Ok(s),
            other => Err(format!("{} where text was expected", kind(&other))),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: Value) -> Result<Self, String> {
        match value {
            Value::Blob(b) => Ok(b),
            Value::Text(s) => Ok(s.into_bytes()),
            other => Err(format!("{} where bytes were expected", kind(&other))),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: Value) -> Result<Self, String> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One row of a result, its values owned: each column is read once.
pub struct Row {
    values: RefCell<Vec<Value>>,
}

impl Row {
    pub(crate) fn new(values: Vec<Value>) -> Self {
        Row { values: RefCell::new(values) }
    }

    /// Column `index` as `T` (taken out of the row: read each column once).
    pub fn get<T: FromValue>(&self, index: usize) -> Result<T, SqlError> {
        let value = self.values.borrow_mut().get_mut(index).map(|v| std::mem::replace(v, Value::Null));
        let value = value.ok_or_else(|| SqlError::Column { index, reason: "no such column".into() })?;
        T::from_value(value).map_err(|reason| SqlError::Column { index, reason })
    }

    /// Column `index` as a value type that parses from its text (an enum
    /// the store keeps as text).
    pub fn parse<T: std::str::FromStr<Err = String>>(&self, index: usize) -> Result<T, SqlError> {
        let text: String = self.get(index)?;
        text.parse().map_err(|reason| SqlError::Column { index, reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_written_at_once_keep_the_last_of_each_key_in_statements_of_at_most_max_rows() {
        let items = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)];
        let rows = last_of_each(&items, |(k, _)| *k);
        assert_eq!(rows, vec![vec![&("a", 3), &("c", 4), &("b", 5)]]);
        let many: Vec<usize> = (0..2 * MAX_ROWS + 1).collect();
        let sizes: Vec<usize> = last_of_each(&many, |n| *n).iter().map(Vec::len).collect();
        assert_eq!(sizes, [MAX_ROWS, MAX_ROWS, 1]);
        // A key repeated many times costs linear time and writes one row.
        let repeated = vec![("trust", 0); 100_000];
        assert_eq!(last_of_each(&repeated, |(k, _)| *k), vec![vec![&("trust", 0)]]);
        assert!(last_of_each(&[] as &[u8], |n| *n).is_empty());
    }

    #[test]
    fn value_rows_number_their_parameters_row_by_row() {
        assert_eq!(value_rows(2, 3), "(?1, ?2, ?3), (?4, ?5, ?6)");
        assert_eq!(value_rows(1, 1), "(?1)");
    }
}
