//! Running the lists on each backend, every case and race on a fresh store:
//! SQLite in memory (a race's two sides share the one store, as the
//! threads of one process do), or a fresh database of the test binary's one
//! throwaway PostgreSQL cluster, named after the case (a race's two sides
//! are two `Store` handles on its URL, as two gateway processes would be).
//! Every item runs to its end even when another fails (PostgreSQL's a few
//! at a time: they mostly wait on the server); the panic at the end names
//! each failing item and what it said.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock};

use devstack_store::cluster::Cluster;
use devstack_store::{Store, StoreLocation};

use crate::{Case, Race};

/// One item of a run: its name, and the item on its fresh store.
type Job<'a> = (&'static str, Box<dyn FnOnce() + Send + 'a>);

/// What a panic said.
fn message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(a panic without a message)".into())
}

/// Runs every job on `workers` threads, each to its end whatever the others
/// do; then panics naming each job that failed, with what it said.
fn run(backend: &str, jobs: Vec<Job<'_>>, workers: usize) {
    let ran = jobs.len();
    let queue = Mutex::new(jobs.into_iter());
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                while let Some((name, job)) = queue.lock().unwrap_or_else(|p| p.into_inner()).next() {
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(job)) {
                        failed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("{name}: {}", message(&*payload)));
                    }
                }
            });
        }
    });
    let mut failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    failed.sort();
    assert!(failed.is_empty(), "{backend}: {} of {ran} cases failed:\n  {}", failed.len(), failed.join("\n  "));
    eprintln!("{backend}: {ran} cases passed");
}

/// How many items run at once on PostgreSQL: an item mostly waits on the
/// server's processes (a new database, its migrations, its connections).
const POSTGRES_WORKERS: usize = 3;

fn memory_store() -> Store {
    Store::open(&StoreLocation::Memory).unwrap_or_else(|e| panic!("open an in-memory store: {e}"))
}

/// A race whose two sides share one in-memory store.
fn race_in_memory(race: fn(&Store, &Store)) {
    let store = memory_store();
    race(&store, &store);
}

/// Runs every case and race on SQLite in memory.
pub fn run_on_sqlite(cases: &[Case], races: &[Race]) {
    let cases = cases.iter().map(|&(name, case)| -> Job<'_> { (name, Box::new(move || case(&memory_store()))) });
    let races = races.iter().map(|&(name, race)| -> Job<'_> { (name, Box::new(move || race_in_memory(race))) });
    run("sqlite", cases.chain(races).collect(), 1);
}

/// The test binary's one cluster, started at first use (or why it could not be).
fn cluster() -> &'static Result<Cluster, String> {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start().map_err(|e| e.to_string()))
}

/// A database name PostgreSQL takes (63 bytes at most, lowercase), unique
/// by the item's place in its list.
fn database_name(list: &str, index: usize, case: &str) -> String {
    let plain: String =
        case.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    let mut name = format!("{list}{index:02}_{plain}");
    name.truncate(63);
    name
}

fn postgres_store(url: &str) -> Store {
    Store::open(&StoreLocation::Postgres(url.to_string())).unwrap_or_else(|e| panic!("open a PostgreSQL store: {e}"))
}

/// A race whose sides are two handles on the database at `url`.
fn race_on_two_handles(race: fn(&Store, &Store), url: &str) {
    race(&postgres_store(url), &postgres_store(url));
}

fn fresh_database(cluster: &Cluster, name: &str) -> String {
    cluster.database(name).unwrap_or_else(|e| panic!("create database {name}: {e}"))
}

/// Runs every case and race on PostgreSQL; without PostgreSQL it says why
/// and returns, except under CI, where PostgreSQL must be there.
pub fn run_on_postgres(cases: &[Case], races: &[Race]) {
    let cluster = match cluster() {
        Ok(cluster) => cluster,
        Err(why) => {
            assert!(std::env::var_os("CI").is_none(), "PostgreSQL must run the conformance suite under CI: {why}");
            eprintln!("skipped: {why}");
            return;
        }
    };
    let cases = cases.iter().enumerate().map(|(index, &(name, case))| -> Job<'_> {
        (name, Box::new(move || case(&postgres_store(&fresh_database(cluster, &database_name("c", index, name))))))
    });
    let races = races.iter().enumerate().map(|(index, &(name, race))| -> Job<'_> {
        (name, Box::new(move || race_on_two_handles(race, &fresh_database(cluster, &database_name("r", index, name)))))
    });
    run("postgres", cases.chain(races).collect(), POSTGRES_WORKERS);
}
