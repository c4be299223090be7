//! A read-only view of a running stack (its store and its live sessions)
//! and the one generic wait over it, [`DevStack::await_until`].
//!
//! Each domain module adds the reads it owns as `impl StackView<'_>`
//! methods, and its `DevStack` reads are one-liners over them, so a test can
//! await any condition on what the stack knows without a new `await_*` per
//! question.

use std::cell::RefCell;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::Connection;

use crate::error::{Error, Result};
use crate::hub::Hub;
use crate::otlp::Exports;
use crate::shared::Shared;
use crate::stack::DevStack;

/// What the stack knows at one instant: one consistent read of its store
/// (the view holds the store's lock) and its live sessions.
///
/// Reads return plain values; a failed store read makes the read that
/// holds the view ([`DevStack::view`], [`DevStack::await_until`]) fail with
/// that error once the closure returns. The closure must not call back into
/// the stack (the view holds the store's lock).
pub struct StackView<'a> {
    c: &'a Connection,
    hub: &'a Hub,
    otlp: &'a Exports,
    error: RefCell<Option<Error>>,
    note: RefCell<Option<String>>,
}

impl<'a> StackView<'a> {
    fn new(c: &'a Connection, shared: &'a Shared) -> Self {
        StackView { c, hub: &shared.hub, otlp: &shared.otlp, error: RefCell::new(None), note: RefCell::new(None) }
    }

    /// Runs a store read; on failure keeps the first error and answers the
    /// empty value.
    pub(crate) fn read<T: Default>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> T {
        match f(self.c) {
            Ok(value) => value,
            Err(e) => {
                let mut first = self.error.borrow_mut();
                if first.is_none() {
                    *first = Some(e);
                }
                T::default()
            }
        }
    }

    /// The live sessions.
    pub(crate) fn hub(&self) -> &Hub {
        self.hub
    }

    /// The OTLP exports the stack received.
    pub(crate) fn otlp(&self) -> &Exports {
        self.otlp
    }

    /// Records what the wait saw last; a wait that times out names it.
    pub fn note(&self, seen: impl std::fmt::Display) {
        *self.note.borrow_mut() = Some(seen.to_string());
    }

    /// The value, or the first failed read.
    fn finish<T>(self, value: T) -> Result<(T, Option<String>)> {
        match self.error.into_inner() {
            Some(e) => Err(e),
            None => Ok((value, self.note.into_inner())),
        }
    }
}

impl DevStack {
    /// One consistent read of the stack: `read` sees the store and the live
    /// sessions at one instant.
    pub fn view<T>(&self, read: impl FnOnce(&StackView<'_>) -> T) -> Result<T> {
        let shared = self.shared();
        shared.store.with(|c| {
            let view = StackView::new(c, shared);
            let value = read(&view);
            view.finish(value).map(|(value, _)| value)
        })
    }

    /// Waits until `until` returns `Some` (re-checked on every change of the
    /// store or of the live sessions), for at most `timeout`; returns its
    /// value. `what` names the wait in the timeout error, with what
    /// [`StackView::note`] recorded last. A condition that can fail returns
    /// `Some(Err(…))` and the caller flattens it.
    pub async fn await_until<T>(
        &self,
        what: impl Into<String>,
        timeout: Duration,
        mut until: impl FnMut(&StackView<'_>) -> Option<T> + Send,
    ) -> Result<T> {
        let what = what.into();
        let shared = self.shared();
        let seen = Mutex::new(None::<String>);
        shared
            .wait_for(
                timeout,
                || match seen.lock().ok().and_then(|s| s.clone()) {
                    Some(seen) => format!("{what} (last seen: {seen})"),
                    None => what.clone(),
                },
                || {
                    let (value, note) = shared.store.with(|c| {
                        let view = StackView::new(c, shared);
                        let value = until(&view);
                        view.finish(value)
                    })?;
                    if let (Some(note), Ok(mut s)) = (note, seen.lock()) {
                        *s = Some(note);
                    }
                    Ok(value)
                },
            )
            .await
    }
}
