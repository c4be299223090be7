//! `devstack instances [ID] [--node N] [--state S]`: the VPS instances the
//! stack holds (oldest first), or one of them.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::InstanceView;
use devstack::admin::query::encode;

use crate::nodes::{api, route};
use crate::output::{Filter, Output, Row, table};
use crate::table::{ago, or_dash};

impl Row for InstanceView {
    const KIND: &'static str = "instance";
    fn name(&self) -> String {
        self.id.clone()
    }
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["INSTANCE", "NODE", "RUNTIME", "DESIRED", "STATE", "VCPUS", "MEMORY"];
        if wide {
            h.extend(["POOL", "CREATED"]);
        }
        h.push("REASON");
        h
    }
    fn cells(&self, wide: bool) -> Vec<String> {
        let mut c = vec![
            self.id.clone(),
            or_dash(self.node_id.clone().unwrap_or_default()),
            self.runtime.clone(),
            self.desired.clone(),
            self.state.clone(),
            self.vcpus.to_string(),
            format!("{} MiB", self.memory_bytes / (1 << 20)),
        ];
        if wide {
            c.extend([self.pool_id.clone(), ago(self.created_at_ms)]);
        }
        c.push(or_dash(self.reason.clone()));
        c
    }
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("instance", self.id.clone()),
            ("node", self.node_id.clone().unwrap_or_default()),
            ("runtime", self.runtime.clone()),
            ("desired", self.desired.clone()),
            ("state", self.state.clone()),
        ]
    }
}

/// `devstack instances [ID]`.
#[derive(Args)]
pub struct Instances {
    /// One instance (`inst_…`) to show instead of the list.
    id: Option<String>,
    /// Only those placed on this node (its id, a unique prefix of it, or its hostname).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    out: Output,
}

impl Instances {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        if let Some(id) = &self.id {
            let one: InstanceView = ctx.client()?.get(&route("instances", "instance", id, "")?).await?;
            self.out.one(&one, |i, wide| Ok(out!("{}", table(std::slice::from_ref(i), wide).render())?))?;
            return Ok(ExitCode::SUCCESS);
        }
        let path = match &self.node {
            Some(node) => {
                route("nodes", "node", node, "")?;
                api(&format!("/instances?node={}", encode(node)))
            }
            None => api("/instances"),
        };
        let list: Vec<InstanceView> = self.filter.apply(ctx.client()?.get(&path).await?)?;
        self.out.list(&list, "no instances")?;
        Ok(ExitCode::SUCCESS)
    }
}
