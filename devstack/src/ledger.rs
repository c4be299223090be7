//! The store as the stack uses it: reads, and writes whose events are
//! published, and whose change is announced, once they committed.
//!
//! A write's closure gets a [`Tx`]: the transaction (it derefs to the
//! store's `Db`, so every statement takes it) and [`Tx::publish`], which
//! queues a [`StackEvent`]. After the commit, still under the store's lock,
//! the queued events go out on the event stream in the order of the commits
//! and the change notification is bumped; a write that fails publishes
//! nothing. No call site publishes or bumps by hand, so "an event is
//! published only after its change committed" and "every change wakes the
//! waits" hold by construction.
//!
//! The store is synchronous and the stack's tasks are not: a call that
//! would wait (SQLite's connection held by another call, any PostgreSQL
//! round trip) gives its runtime worker up for the wait
//! ([`tokio::task::block_in_place`]), so TLS handshakes, pings and every
//! session that needs no store go on meanwhile. A blocked worker stalls
//! every task queued on it: with SQLite's one connection busy under a
//! fleet's cold start, a 2-core stack ran on one core and its sessions
//! fell 15 s silent.

use std::cell::RefCell;
use std::ops::Deref;

use crate::changes::Changes;
use crate::error::{Error, Result};
use crate::events::{EventBus, StackEvent};
use crate::store::{Db, Lane, Store};

/// The store, the event stream and the change notification, together.
pub struct Ledger {
    store: Store,
    events: EventBus,
    changes: Changes,
}

/// A write in progress: its transaction, and the events to publish once it
/// committed.
pub struct Tx<'a> {
    db: &'a Db<'a>,
    events: &'a RefCell<Vec<StackEvent>>,
}

impl Tx<'_> {
    /// Queues an event, published once this write committed (never if it
    /// does not).
    pub fn publish(&self, event: StackEvent) {
        self.events.borrow_mut().push(event);
    }
}

impl<'a> Deref for Tx<'a> {
    type Target = Db<'a>;

    fn deref(&self) -> &Db<'a> {
        self.db
    }
}

impl Ledger {
    /// The ledger over an opened store, bumping `changes` after each write.
    pub fn new(store: Store, changes: Changes) -> Self {
        Ledger { store, events: EventBus::default(), changes }
    }

    /// One consistent read of the store.
    pub fn read<T, E: Into<Error>>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, E>) -> Result<T> {
        self.waiting_aside(|| self.store.read(|db| f(db).map_err(Into::into)))
    }

    /// A read of one statement ([`Store::read_one`]: on PostgreSQL without
    /// a transaction around it); a closure that runs more is refused.
    pub fn read_one<T, E: Into<Error>>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, E>) -> Result<T> {
        self.waiting_aside(|| self.store.read_one(|db| f(db).map_err(Into::into)))
    }

    /// A transaction, committed when `f` returns `Ok`; then its events are
    /// published and the change is announced. `f` may run more than once
    /// (a PostgreSQL transaction that lost a race is run again).
    pub fn write<T>(&self, f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.write_on(Lane::Shared, f)
    }

    /// [`Ledger::write`] on a lane of the store (the beat's liveness
    /// bookkeeping has one of its own: `Store::write_on`).
    pub fn write_on<T>(&self, lane: Lane, mut f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<T> {
        let events = RefCell::new(Vec::new());
        self.waiting_aside(|| {
            self.store.write_on(
                lane,
                |db| {
                    // A transaction run again (it lost a race on PostgreSQL)
                    // publishes what its last run queued, not what each did.
                    events.borrow_mut().clear();
                    f(&Tx { db, events: &events })
                },
                |changed| {
                    let events = events.take();
                    let announce = changed || !events.is_empty();
                    for event in events {
                        self.events.publish(event);
                    }
                    if announce {
                        self.changes.bump();
                    }
                },
            )
        })
    }

    /// Runs a store call, off the runtime's worker when it would wait (on a
    /// multi-threaded runtime; a single-threaded one has no other worker to
    /// hand its tasks to).
    fn waiting_aside<T>(&self, call: impl FnOnce() -> T) -> T {
        let multi_threaded = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_threaded && self.store.would_wait() { tokio::task::block_in_place(call) } else { call() }
    }

    /// Announces a change outside the store (a session registered with the
    /// hub): its events are published and the waits woken.
    pub fn announce(&self, events: impl IntoIterator<Item = StackEvent>) {
        for event in events {
            self.events.publish(event);
        }
        self.changes.bump();
    }

    /// The store itself (its notifications between gateways).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The event stream (to subscribe to).
    pub fn events(&self) -> &EventBus {
        &self.events
    }

    /// The change notification.
    pub fn changes(&self) -> &Changes {
        &self.changes
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::store::StoreLocation;

    /// A store call waiting for the connection gives its worker up: with
    /// both workers of a 2-worker runtime in store calls (one holding the
    /// connection, one waiting for it), a task that needs no store still
    /// runs. Without that, the holder here waits for that task in vain.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_call_that_waits_leaves_the_runtime_to_the_other_tasks() {
        let ledger = Arc::new(Ledger::new(Store::open(&StoreLocation::Memory).unwrap(), Changes::default()));
        let (holding_tx, holding_rx) = tokio::sync::oneshot::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let holder = tokio::spawn({
            let ledger = ledger.clone();
            async move {
                let mut holding = Some(holding_tx);
                ledger.write(|_| {
                    if let Some(tx) = holding.take() {
                        let _ = tx.send(());
                    }
                    Ok(release_rx.recv_timeout(Duration::from_secs(10)).is_ok())
                })
            }
        });
        holding_rx.await.unwrap();
        let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn({
            let ledger = ledger.clone();
            async move {
                let _ = waiting_tx.send(());
                ledger.read(|_| Ok::<_, Error>(()))
            }
        });
        waiting_rx.await.unwrap();
        // Needs a worker: both are in store calls.
        tokio::spawn(async move { release_tx.send(()) });
        assert!(holder.await.unwrap().unwrap(), "the task that needs no store never ran");
        waiter.await.unwrap().unwrap();
    }
}
