//! The control plane of a chaos run, and what each fault does. With one
//! gateway it is the dev stack in process on a SQLite file: a gateway kill
//! drops it, as a crash would, and the revival starts it again on the same
//! file and ports. With several it is as many `devstack gateway` processes
//! on a throwaway PostgreSQL cluster (killed, stalled, revived), and the
//! stack in process drives the workload from the same store, unlisted (no
//! node dials it). What a fault does to an agent is [`super::strike`]'s.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use devstack_store::cluster::Cluster;

use super::ChaosError;
use super::agents::SimProcess;
use super::gateways::GatewayChild;
use super::proxy::FaultProxy;
use super::schedule::{Fault, FaultKind};
use super::strike::AgentFaults;
use crate::options::DevStackOptions;
use crate::stack::DevStack;
use crate::store::StoreLocation;

/// How long a revival waits for the old listeners' ports.
const REBIND: Duration = Duration::from_secs(30);

/// The stack and the gateway processes.
pub struct Plane {
    stack: Option<DevStack>,
    options: DevStackOptions,
    gateways: Vec<GatewayChild>,
    cluster: Option<Cluster>,
}

impl Plane {
    /// The dev stack in process on `dir`'s SQLite file, the one gateway.
    pub async fn single(dir: &Path, heartbeat_ms: u32, usage_window: Duration) -> Result<Plane, ChaosError> {
        let options = DevStackOptions {
            store: StoreLocation::File(dir.join("devstack.sqlite")),
            signed_intent: true,
            heartbeat_interval_ms: heartbeat_ms,
            usage_window,
            ..DevStackOptions::default()
        };
        let stack = DevStack::start(options).await?;
        let options = stack.restart_options();
        Ok(Plane { stack: Some(stack), options, gateways: Vec::new(), cluster: None })
    }

    /// `n` gateway processes of `exe` (a devstack binary) on a throwaway
    /// PostgreSQL cluster, driven by the stack in process.
    pub async fn several(exe: &Path, n: u32, heartbeat_ms: u32, usage_window: Duration) -> Result<Plane, ChaosError> {
        let cluster = tokio::task::spawn_blocking(Cluster::start)
            .await
            .map_err(|e| ChaosError::Sim(format!("the PostgreSQL cluster: {e}")))?
            .map_err(|e| ChaosError::Sim(format!("the PostgreSQL cluster: {e}")))?;
        let url = cluster.database("chaos").map_err(|e| ChaosError::Sim(format!("the chaos database: {e}")))?;
        let options = DevStackOptions {
            store: StoreLocation::Postgres(url.clone()),
            signed_intent: true,
            heartbeat_interval_ms: heartbeat_ms,
            usage_window,
            gateway_id: "api".into(),
            listed: false,
            ..DevStackOptions::default()
        };
        let stack = DevStack::start(options).await?;
        let options = stack.restart_options();
        let mut gateways = Vec::new();
        for k in 1..=n {
            gateways.push(GatewayChild::start(exe, &url, &format!("g{k}"), heartbeat_ms).await?);
        }
        Ok(Plane { stack: Some(stack), options, gateways, cluster: Some(cluster) })
    }

    /// The stack (the workload's way in), unless it is killed now.
    pub fn stack(&self) -> Option<&DevStack> {
        self.stack.as_ref()
    }

    /// Where the nodes dial: each gateway's address.
    pub fn gateway_addrs(&self) -> Vec<SocketAddr> {
        if self.gateways.is_empty() {
            self.stack.iter().map(DevStack::gateway_addr).collect()
        } else {
            self.gateways.iter().map(GatewayChild::addr).collect()
        }
    }

    /// Kills gateway `g` (the stack in process, with one gateway).
    pub async fn kill(&mut self, g: u32) {
        match self.gateways.get_mut(g as usize) {
            Some(gateway) => gateway.kill().await,
            None => drop(self.stack.take()),
        }
    }

    /// Revives gateway `g` (a stalled one resumes).
    pub async fn revive(&mut self, g: u32) -> Result<(), ChaosError> {
        match self.gateways.get_mut(g as usize) {
            Some(gateway) => gateway.revive().await,
            None => self.revive_stack().await,
        }
    }

    /// Revives every gateway (the quiet period).
    pub async fn revive_all(&mut self) -> Result<(), ChaosError> {
        self.revive_stack().await?;
        for g in &mut self.gateways {
            g.revive().await?;
        }
        Ok(())
    }

    async fn revive_stack(&mut self) -> Result<(), ChaosError> {
        if self.stack.is_some() {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + REBIND;
        loop {
            match DevStack::start(self.options.clone()).await {
                Ok(stack) => {
                    self.stack = Some(stack);
                    return Ok(());
                }
                Err(crate::error::Error::Bind { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Shuts everything down: the gateways drain, then the stack, then the cluster goes.
    pub async fn shutdown(mut self) {
        for g in self.gateways.drain(..) {
            g.stop().await;
        }
        if let Some(stack) = self.stack.take() {
            let _ = stack.shutdown().await;
        }
        drop(self.cluster.take());
    }
}

/// Starts (or, `starts` false, ends) `fault`; false when it could not
/// strike (a process fault whose agent was between two lives, a stall of
/// the one gateway in process).
pub async fn apply(
    plane: &mut Plane,
    agents: &mut AgentFaults,
    sim: &mut SimProcess,
    proxy: &FaultProxy,
    fault: &Fault,
    starts: bool,
) -> Result<bool, ChaosError> {
    if let Some(done) = agents.apply(sim.control(), proxy, fault, starts).await? {
        return Ok(done);
    }
    match (fault.kind, plane.gateways.get_mut(fault.target as usize)) {
        (FaultKind::GatewayKill, _) if starts => {
            plane.kill(fault.target).await;
            Ok(true)
        }
        (FaultKind::GatewayKill, _) => plane.revive(fault.target).await.map(|()| true),
        (_, Some(g)) if starts => {
            g.stall();
            Ok(true)
        }
        (_, Some(g)) => {
            g.resume();
            Ok(true)
        }
        (_, None) => Ok(false),
    }
}
