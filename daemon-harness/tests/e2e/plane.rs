//! A scenario's control plane in one of its shapes: the in-process dev
//! stack on a SQLite file, the same on PostgreSQL, or several gateway
//! processes on one PostgreSQL store (docs/harness.md, "Several
//! gateways"), each an `e2e-gateway` process on a throwaway cluster of the
//! scenario's own, driven by the in-process stack, unlisted (nodes never
//! dial it). What a scenario reads of it (who is connected where, the
//! processes to measure) is the same whatever the shape.

use std::time::{Duration, Instant};

use daemon_harness::gateways::{GatewayProcess, GatewaySpec};
use devstack::{DevStack, DevStackOptions, NodeSessionRow, StoreLocation};
use devstack_store::cluster::Cluster;

use crate::common::{DEADLINE, Env};

/// The e2e-gateway binary, built with the suite.
const GATEWAY_EXE: &str = env!("CARGO_BIN_EXE_e2e-gateway");

/// Where a control plane keeps its store and serves its nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// The in-process stack on a SQLite file.
    Sqlite,
    /// On PostgreSQL: the in-process stack alone (1), or N gateway processes.
    Postgres {
        /// How many gateways.
        gateways: usize,
    },
}

/// A running control plane.
pub struct Plane {
    pub env: Env,
    pub gateways: Vec<GatewayProcess>,
    pub cluster: Option<Cluster>,
    /// The SQLite file's directory.
    _dir: Option<tempfile::TempDir>,
}

/// The cluster, or None (skipped) without PostgreSQL outside CI.
fn cluster(scenario: &str) -> Option<Cluster> {
    match Cluster::start() {
        Ok(cluster) => Some(cluster),
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "{scenario}: PostgreSQL is a prerequisite under CI: {e}");
            eprintln!("{scenario} skipped: {e}");
            None
        }
    }
}

impl Plane {
    /// A control plane of `topology`, its stack adjusted by `adjust` and
    /// its gateway processes beating every `heartbeat_ms`.
    pub async fn start(
        scenario: &str,
        topology: Topology,
        heartbeat_ms: u32,
        adjust: impl FnOnce(&mut DevStackOptions),
    ) -> Option<Plane> {
        match topology {
            Topology::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("devstack.sqlite");
                let env = Env::start_with(scenario, |o| {
                    o.store = StoreLocation::File(path);
                    o.heartbeat_interval_ms = heartbeat_ms;
                    adjust(o);
                })
                .await?;
                Some(Plane { env, gateways: Vec::new(), cluster: None, _dir: Some(dir) })
            }
            Topology::Postgres { gateways: 1 } => {
                let cluster = cluster(scenario)?;
                let url = cluster.database("e2e").expect("a database");
                let env = Env::start_with(scenario, |o| {
                    o.store = StoreLocation::Postgres(url);
                    o.heartbeat_interval_ms = heartbeat_ms;
                    adjust(o);
                })
                .await?;
                Some(Plane { env, gateways: Vec::new(), cluster: Some(cluster), _dir: None })
            }
            Topology::Postgres { gateways } => {
                let specs = (1..=gateways)
                    .map(|i| GatewaySpec { heartbeat_ms, ..GatewaySpec::new(&format!("g{i}")) })
                    .collect();
                Self::start_gateways(scenario, specs, adjust).await
            }
        }
    }

    /// A cluster, the driving stack (gateway id `api`, not listed) and one
    /// gateway process per spec (listening where the runner's bcd reaches).
    pub async fn start_gateways(
        scenario: &str,
        specs: Vec<GatewaySpec>,
        adjust: impl FnOnce(&mut DevStackOptions),
    ) -> Option<Plane> {
        let cluster = cluster(scenario)?;
        let url = cluster.database("e2e").expect("a database");
        let store = StoreLocation::Postgres(url.clone());
        let env = Env::start_with(scenario, |o| {
            o.store = store;
            o.gateway_id = "api".into();
            o.listed = false;
            adjust(o);
        })
        .await?;
        let host = env.runner.gateway_host().parse().expect("the runner's gateway host is an IP address");
        let mut gateways = Vec::new();
        for mut spec in specs {
            spec.host = host;
            gateways.push(GatewayProcess::start(GATEWAY_EXE.as_ref(), &url, spec).await.expect("a gateway starts"));
        }
        Some(Plane { env, gateways, cluster: Some(cluster), _dir: None })
    }

    pub fn stack(&self) -> &DevStack {
        &self.env.stack
    }

    /// Gateway process `id`.
    pub fn gateway(&mut self, id: &str) -> &mut GatewayProcess {
        self.gateways.iter_mut().find(|g| g.id() == id).unwrap_or_else(|| panic!("no gateway {id}"))
    }

    /// The gateway processes' pids (what they use counts as the stack's).
    pub fn pids(&self) -> Vec<u32> {
        self.gateways.iter().filter_map(GatewayProcess::pid).collect()
    }

    /// How many nodes are connected: to the in-process stack, or (with
    /// gateway processes) to any gateway, by the store.
    pub fn sessions(&self) -> u64 {
        if self.gateways.is_empty() {
            return self.stack().live_sessions();
        }
        let by_gateway = self.stack().view(|v| v.sessions_by_gateway()).expect("the sessions by gateway");
        by_gateway.iter().map(|(_, n)| n).sum()
    }

    /// How many nodes are connected to each gateway, by the store.
    pub fn sessions_by_gateway(&self) -> Vec<(String, u64)> {
        self.stack().view(|v| v.sessions_by_gateway()).expect("the sessions by gateway")
    }

    /// Waits until `node_id` has an open session of epoch ≥ `min_epoch` on
    /// a gateway `on` accepts.
    pub async fn await_open_session(
        &self,
        node_id: &str,
        min_epoch: u64,
        on: impl Fn(&str) -> bool + Send + Sync,
    ) -> NodeSessionRow {
        self.stack()
            .await_until(format!("a session of {node_id} at epoch ≥ {min_epoch}"), DEADLINE, |v| {
                let open = v.open_session(node_id);
                v.note(format_args!("{open:?}"));
                open.filter(|s| s.epoch >= min_epoch && on(&s.gateway_id))
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Restarts the control plane with every node connected: the stack (a
    /// Drain to every session, then a start on the same store and ports),
    /// or every gateway process at once (SIGTERM, each drains; then all
    /// started again on their ports). Returns how long the stop and the
    /// start took.
    pub async fn restart(&mut self) -> (Duration, Duration) {
        if self.gateways.is_empty() {
            return self.env.restart_stack().await;
        }
        let stop = Instant::now();
        for g in &mut self.gateways {
            g.stop().await.expect("the gateway stops");
        }
        let start = Instant::now();
        for g in &mut self.gateways {
            g.restart().await.expect("the gateway starts again");
        }
        (start - stop, start.elapsed())
    }
}
