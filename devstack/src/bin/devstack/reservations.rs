//! `devstack reserve NODE --gpus N [--wait]` (book GPUs as a hold; `--pool
//! P [--duration D]` on the node placement picks, for a while),
//! `devstack release ID` (withdraw it) and `devstack reservations [ID]`
//! (list them, of a node, in a state; or show one).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::{ReservationView, WaitRequest};
use devstack::admin::query::encode;

use crate::nodes::{api, route};
use crate::output::{Filter, Output, Row, table};
use crate::table::or_dash;

impl Row for ReservationView {
    const KIND: &'static str = "reservation";
    fn name(&self) -> String {
        self.id.clone()
    }
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["RESERVATION", "NODE", "GPUS", "STATE"];
        if wide {
            h.extend(["GEN", "CDI DEVICES"]);
        }
        h.push("REASON");
        h
    }
    fn cells(&self, wide: bool) -> Vec<String> {
        let gpus: Vec<String> = self.gpu_indexes.iter().map(u32::to_string).collect();
        let mut c = vec![self.id.clone(), self.node_id.clone(), format!("[{}]", gpus.join(",")), self.state.clone()];
        if wide {
            c.extend([self.generation.to_string(), or_dash(self.cdi_devices.join(","))]);
        }
        let reason = if self.reason.is_empty() { self.last_refusal.clone() } else { self.reason.clone() };
        c.push(or_dash(reason));
        c
    }
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![("reservation", self.id.clone()), ("node", self.node_id.clone()), ("state", self.state.clone())]
    }
}

fn print_one(out: &Output, view: &ReservationView) -> Result<()> {
    out.one(view, |v, wide| Ok(out!("{}", table(std::slice::from_ref(v), wide).render())?))
}

/// `devstack reserve NODE --gpus N [--wait]`, or `--pool P [--duration D]`
/// (crate::fleet).
#[derive(Args)]
pub struct Reserve {
    /// The node: its id, a unique prefix of it, or its hostname.
    #[arg(required_unless_present = "pool")]
    node: Option<String>,
    #[command(flatten)]
    pool: crate::fleet::PoolForm,
    /// How many GPUs to book.
    #[arg(long, value_name = "N")]
    gpus: u32,
    /// Wait until the node bound the hold (or it failed); exit 1 unless active.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (then exit 6).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    out: Output,
}

impl Reserve {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        if let Some(node) = &self.node {
            route("nodes", "node", node, "")?;
        }
        let c = ctx.client()?;
        let mut view: ReservationView = c.post(&api("/reservations"), &self.pool.request(self.node, self.gpus)).await?;
        if self.wait {
            let wait = WaitRequest { timeout_ms: self.timeout.as_millis() as u64 };
            view = c.post(&route("reservations", "reservation", &view.id, "/wait")?, &wait).await?;
        }
        print_one(&self.out, &view)?;
        Ok(if !self.wait || view.state == "active" { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    }
}

/// `devstack release ID`.
#[derive(Args)]
pub struct Release {
    /// The reservation (`rsv_…`).
    id: String,
    #[command(flatten)]
    out: Output,
}

impl Release {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        let path = route("reservations", "reservation", &self.id, "/release")?;
        let view: ReservationView = ctx.client()?.post(&path, &serde_json::json!({})).await?;
        print_one(&self.out, &view)?;
        Ok(ExitCode::SUCCESS)
    }
}

/// `devstack reservations [ID] [--node N] [--state S]`.
#[derive(Args)]
pub struct Reservations {
    /// One reservation (`rsv_…`) to show instead of the list.
    id: Option<String>,
    /// Only this node's (its id, a unique prefix of it, or its hostname).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    out: Output,
}

impl Reservations {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        if let Some(id) = &self.id {
            let view: ReservationView = ctx.client()?.get(&route("reservations", "reservation", id, "")?).await?;
            print_one(&self.out, &view)?;
            return Ok(ExitCode::SUCCESS);
        }
        let path = match &self.node {
            Some(node) => {
                route("nodes", "node", node, "")?;
                api(&format!("/reservations?node={}", encode(node)))
            }
            None => api("/reservations"),
        };
        let list: Vec<ReservationView> = self.filter.apply(ctx.client()?.get(&path).await?)?;
        self.out.list(&list, "no reservations")?;
        Ok(ExitCode::SUCCESS)
    }
}
