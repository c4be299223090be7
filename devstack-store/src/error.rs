//! The store's errors: a statement that failed, a migration that did not
//! apply, a stored value that does not read back, a file it could not make
//! private. The dev stack wraps them as its own `Error::Store`.

use std::path::PathBuf;

/// Why the store could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A statement on the SQLite store failed.
    #[error("store: {context}: {source}")]
    Sqlite {
        /// What the stack was doing.
        context: &'static str,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// A numbered migration failed to apply.
    #[error("store migration {version} ({name}): {source}")]
    Migration {
        /// The migration's number.
        version: u32,
        /// The migration's name.
        name: &'static str,
        /// The SQLite error.
        source: rusqlite::Error,
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

impl Error {
    /// A statement's error with its context.
    pub(crate) fn sqlite(context: &'static str) -> impl FnOnce(rusqlite::Error) -> Error {
        move |source| Error::Sqlite { context, source }
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
            Error::Sqlite { context, source: rusqlite::Error::ToSqlConversionFailure(reason) } => {
                Some(format!("{context}: {reason}"))
            }
            _ => None,
        }
    }
}
