//! Where a stack keeps its store, from the command line: the embedded
//! SQLite by default (a file under `--data`, or in memory), a PostgreSQL
//! database with `--store URL` (or `DEVSTACK_DATABASE_URL`), or a throwaway
//! PostgreSQL cluster of the stack's own with `--postgres` (started in a
//! temporary directory, its URL printed, removed at exit).

use std::path::Path;

use anyhow::{Context, Result};
use clap::Args;
use devstack::StoreLocation;
use devstack_store::cluster::Cluster;

/// The store flags `serve` and `gateway` share.
#[derive(Args, Clone, Debug, Default)]
pub struct StoreArgs {
    /// Keep the store in a PostgreSQL database (`postgresql://user@host/db`,
    /// or a key=value connection string) that several gateways can share.
    #[arg(long, value_name = "URL", env = "DEVSTACK_DATABASE_URL", hide_env_values = true)]
    pub store: Option<String>,
    /// Start a throwaway PostgreSQL cluster (PostgreSQL 15 from Debian's
    /// `postgresql`) in a temporary directory, keep the store there, print
    /// its URL, and remove it at exit.
    #[arg(long, conflicts_with = "store")]
    pub postgres: bool,
}

/// A store, and the throwaway cluster it lives on (kept until the stack
/// is done with it).
pub struct OpenedStore {
    /// Where the stack keeps its store.
    pub location: StoreLocation,
    /// The cluster of `--postgres`.
    pub cluster: Option<Cluster>,
}

impl StoreArgs {
    /// Whether the store is PostgreSQL (shared by several gateways).
    pub fn shared(&self) -> bool {
        self.store.is_some() || self.postgres
    }

    /// The store: PostgreSQL when asked, else the SQLite file
    /// `sqlite_file` (`None`: in memory).
    pub fn open(&self, sqlite_file: Option<&Path>) -> Result<OpenedStore> {
        if let Some(url) = &self.store {
            return Ok(OpenedStore { location: StoreLocation::Postgres(url.clone()), cluster: None });
        }
        if self.postgres {
            eprintln!("devstack: starting a throwaway PostgreSQL cluster");
            let cluster = Cluster::start().context("start a PostgreSQL cluster (--postgres)")?;
            let url = cluster.database("devstack").context("create its database")?;
            return Ok(OpenedStore { location: StoreLocation::Postgres(url), cluster: Some(cluster) });
        }
        let location = match sqlite_file {
            Some(file) => StoreLocation::File(file.to_path_buf()),
            None => StoreLocation::Memory,
        };
        Ok(OpenedStore { location, cluster: None })
    }
}

/// The URL another gateway connects with, password and all: handed to a
/// child gateway in its environment (`DEVSTACK_DATABASE_URL`), which only
/// this user reads, never on a command line or in the output.
pub fn url_of(location: &StoreLocation) -> Option<&str> {
    match location {
        StoreLocation::Postgres(url) => Some(url),
        _ => None,
    }
}
