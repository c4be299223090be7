//! `devstack pools [NAME]`: the pools (by name), what each expects of its
//! nodes and how many it has; or one pool.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::PoolView;

use crate::nodes::{api, route};
use crate::output::{Filter, Output, Row, table};
use crate::table::ago;

impl Row for PoolView {
    const KIND: &'static str = "pool";
    fn name(&self) -> String {
        self.name.clone()
    }
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["POOL", "ID", "KIND", "EXPECTS", "ACCEPTANCE", "NODES"];
        if wide {
            h.push("CREATED");
        }
        h
    }
    fn cells(&self, wide: bool) -> Vec<String> {
        let expects = self.expect_gpus.map_or("any GPU count".into(), |n| format!("{n} GPUs"));
        let mut c = vec![
            self.name.clone(),
            self.id.clone(),
            self.kind.clone(),
            expects,
            self.acceptance.clone(),
            self.nodes.to_string(),
        ];
        if wide {
            c.push(ago(self.created_at_ms));
        }
        c
    }
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![("pool", self.name.clone()), ("id", self.id.clone()), ("kind", self.kind.clone())]
    }
}

/// `devstack pools [NAME]`.
#[derive(Args)]
pub struct Pools {
    /// One pool (its name or id) to show instead of the list.
    name: Option<String>,
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    out: Output,
}

impl Pools {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        if let Some(name) = &self.name {
            let pool: PoolView = ctx.client()?.get(&route("pools", "pool", name, "")?).await?;
            self.out.one(&pool, |p, wide| Ok(out!("{}", table(std::slice::from_ref(p), wide).render())?))?;
            return Ok(ExitCode::SUCCESS);
        }
        let pools: Vec<PoolView> = self.filter.apply(ctx.client()?.get(&api("/pools")).await?)?;
        self.out.list(&pools, "no pools")?;
        Ok(ExitCode::SUCCESS)
    }
}
