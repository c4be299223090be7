//! A read-only view of a running stack (its store and its live sessions) at
//! one instant: what [`crate::shared::Shared::view`] reads and what
//! [`crate::shared::Shared::await_until`] re-checks on every change.
//!
//! Each domain module adds the reads it owns as `impl StackView<'_>`
//! methods, so a test can await any condition on what the stack knows
//! without a new `await_*` per question.

use std::cell::RefCell;

use crate::error::{Error, Result};
use crate::hub::Hub;
use crate::store::Db;

/// What the stack knows at one instant: one consistent read of its store
/// (the view holds the store's lock) and its live sessions.
///
/// Reads return plain values; a failed store read makes the read that
/// holds the view (`view`, `await_until`) fail with that error once the
/// closure returns. The closure must not call back into the stack (the
/// view holds the store's lock).
pub struct StackView<'a> {
    db: &'a Db<'a>,
    hub: &'a Hub,
    error: RefCell<Option<Error>>,
    note: RefCell<Option<String>>,
}

impl<'a> StackView<'a> {
    /// A view over one read of the store and the live sessions.
    pub(crate) fn new(db: &'a Db<'a>, hub: &'a Hub) -> Self {
        StackView { db, hub, error: RefCell::new(None), note: RefCell::new(None) }
    }

    /// Runs a store read; on failure keeps the first error and answers the
    /// empty value.
    pub(crate) fn read<T: Default, E: Into<Error>>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, E>) -> T {
        match f(self.db) {
            Ok(value) => value,
            Err(e) => {
                let mut first = self.error.borrow_mut();
                if first.is_none() {
                    *first = Some(e.into());
                }
                T::default()
            }
        }
    }

    /// The live sessions.
    pub(crate) fn hub(&self) -> &Hub {
        self.hub
    }

    /// Records what the wait saw last; a wait that times out names it.
    pub fn note(&self, seen: impl std::fmt::Display) {
        *self.note.borrow_mut() = Some(seen.to_string());
    }

    /// What [`StackView::note`] recorded last.
    pub(crate) fn last_note(&self) -> Option<String> {
        self.note.borrow().clone()
    }

    /// The value, or the first failed read.
    pub(crate) fn finish<T>(self, value: T) -> Result<T> {
        match self.error.into_inner() {
            Some(e) => Err(e),
            None => Ok(value),
        }
    }
}
