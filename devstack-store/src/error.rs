//! The store's errors: a statement that failed, a migration that did not
//! apply, a stored value that does not read back, a file it could not make
//! private. The dev stack wraps them as its own `Error::Store`.

use std::path::PathBuf;

use crate::sql::SqlError;

/// Why the store could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A statement failed.
    #[error("store: {context}: {source}")]
    Statement {
        /// What the stack was doing.
        context: &'static str,
        /// The backend's error.
        source: SqlError,
    },
    /// A numbered migration failed to apply.
    #[error("store migration {version} ({name}): {source}")]
    Migration {
        /// The migration's number.
        version: u32,
        /// The migration's name.
        name: &'static str,
        /// The backend's error.
        source: SqlError,
    },
    /// A session-scoped write of a session a newer one replaced (here or on
    /// another gateway): it is not written.
    #[error("session {epoch} of node {node_id} is fenced: its session epoch is {current} now")]
    Fenced {
        /// The node.
        node_id: String,
        /// The epoch the write was made for.
        epoch: u64,
        /// The node's epoch now.
        current: u64,
    },
    /// The store could not be reached or opened (a PostgreSQL server that
    /// does not answer, a URL it refuses).
    #[error("store {location}: {reason}")]
    Unavailable {
        /// Where (a URL without its password).
        location: String,
        /// Why.
        reason: String,
    },
    /// A stored row holds something the stack cannot read back.
    #[error("store: {table}.{column} of {key}: {reason}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// The row's key.
        key: String,
        /// What is wrong with the value.
        reason: String,
    },
    /// The store's file or directory could not be made or made private.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A result whose error is a store [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error a transaction's closure may return: the store's own, or one
/// that can carry it (the dev stack's), so that a transaction that lost a
/// race is told apart and run again.
pub trait StoreFailure: From<Error> {
    /// The store's error inside, if this is one.
    fn store_error(&self) -> Option<&Error>;
}

impl StoreFailure for Error {
    fn store_error(&self) -> Option<&Error> {
        Some(self)
    }
}

impl Error {
    /// A statement's error with its context.
    pub(crate) fn at<S: Into<SqlError>>(context: &'static str) -> impl FnOnce(S) -> Error {
        move |source| Error::Statement { context, source: source.into() }
    }

    /// Whether the transaction lost a race with another and may be run
    /// again (PostgreSQL's serialization failures).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Statement { source, .. } if source.is_retryable())
    }

    /// Whether the store could not take the call now, and the same call
    /// may succeed later: a transaction that kept losing races, or a
    /// server that does not answer.
    pub fn is_busy(&self) -> bool {
        self.is_retryable() || matches!(self, Error::Unavailable { .. })
    }

    /// A stored value that does not read back.
    pub fn corrupt(table: &'static str, column: &'static str, key: impl Into<String>, reason: impl ToString) -> Error {
        Error::Corrupt { table, column, key: key.into(), reason: reason.to_string() }
    }

    /// When a value could not be stored because it is out of the store's
    /// range (an unsigned number above 2^63-1, say an event seq of 2^63): what
    /// was being done and why. Such a value came from the caller, so it is
    /// the caller's malformed input, not the store failing.
    pub fn out_of_range(&self) -> Option<String> {
        match self {
            Error::Statement { context, source: SqlError::OutOfRange { index, reason } } => {
                Some(format!("{context}: parameter {index}: {reason}"))
            }
            _ => None,
        }
    }
}
