//! The fleet subcommands of the admin CLI (docs/devstack.md, "The admin
//! CLI"): `cordon NODE --reason R` and `uncordon NODE`, and the pool form
//! of `reserve` (`--pool P [--duration D]`, flattened into `reserve`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::{self, CordonRequest, CordonView};

use crate::nodes::route;
use crate::output::Output;

/// `devstack cordon NODE --reason R`.
#[derive(Args)]
pub struct Cordon {
    /// The node: its id, a unique prefix of it, or its hostname.
    node: String,
    /// Why (shown in the event and the refusals of new bookings).
    #[arg(long, value_name = "R")]
    reason: String,
    #[command(flatten)]
    out: Output,
}

/// `devstack uncordon NODE`.
#[derive(Args)]
pub struct Uncordon {
    /// The node: its id, a unique prefix of it, or its hostname.
    node: String,
    #[command(flatten)]
    out: Output,
}

/// The pool form of `devstack reserve`: placement picks the node.
#[derive(Args, Clone, Default)]
pub struct PoolForm {
    /// Book in this pool (name or id) instead of on NODE: the stack picks
    /// the node with the most free GPUs that can take the reservation.
    #[arg(long, value_name = "POOL", conflicts_with = "node")]
    pub pool: Option<String>,
    /// End the reservation by itself after this long (`30m`, `2h`): its
    /// hold is withdrawn and its GPUs freed once the node lets go.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
}

impl PoolForm {
    /// The request's pool and duration.
    pub fn request(&self, node: Option<String>, gpus: u32) -> api::ReserveRequest {
        api::ReserveRequest {
            node: node.unwrap_or_default(),
            gpus,
            pool: self.pool.clone(),
            duration_ms: self.duration.map(|d| d.as_millis() as u64),
        }
    }
}

fn print(view: &CordonView, out: &Output) -> Result<()> {
    if out.json() {
        return crate::output::print_json(view);
    }
    match (&view.reason, view.changed) {
        (Some(reason), true) => {
            outln!("{}: cordoned ({reason}); it takes no new reservation or instance", view.node_id)?
        }
        (Some(reason), false) => outln!("{}: already cordoned ({reason})", view.node_id)?,
        (None, true) => outln!("{}: uncordoned", view.node_id)?,
        (None, false) => outln!("{}: was not cordoned", view.node_id)?,
    }
    Ok(())
}

impl Cordon {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        let path = route("nodes", "node", &self.node, "/cordon")?;
        let view: CordonView = ctx.client()?.post(&path, &CordonRequest { reason: self.reason }).await?;
        print(&view, &self.out)?;
        Ok(ExitCode::SUCCESS)
    }
}

impl Uncordon {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        let path = route("nodes", "node", &self.node, "/uncordon")?;
        let view: CordonView = ctx.client()?.post(&path, &serde_json::json!({})).await?;
        print(&view, &self.out)?;
        Ok(ExitCode::SUCCESS)
    }
}
