//! `devstack status [-o json]`: what the running stack is (every URL
//! `serve` printed, the pins, the data dir, how many nodes in each state,
//! the pools).

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::{self, StackInfo};

use crate::output::{Format, Output};
use crate::table::{Table, ago, or_dash};

/// `devstack status`.
#[derive(Args)]
pub struct Status {
    #[command(flatten)]
    out: Output,
}

impl Status {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        let c = ctx.client()?;
        let info: StackInfo = c.get(&format!("{}/stack", api::PREFIX)).await?;
        if matches!(self.out.format(), Format::Json) {
            crate::output::print_json(&info)?;
            return Ok(ExitCode::SUCCESS);
        }
        let d = c.discovery();
        outln!("devstack (pid {}) up {}", d.pid, ago(d.started_at_ms).trim_end_matches(" ago"))?;
        outln!("  gateway:          {}", info.gateway_url)?;
        for other in info.gateway_urls.iter().filter(|u| **u != info.gateway_url) {
            outln!("  other gateway:    {other}")?;
        }
        outln!("  well-known:       {}", info.well_known_url)?;
        outln!("  websocket:        {}", info.websocket_url)?;
        outln!("  OTLP metrics:     {}", info.otlp_url)?;
        outln!("  releases:         {}", info.releases_url)?;
        outln!("  admin endpoint:   {}", info.admin_url)?;
        outln!("  serving CA pin:   {}", info.serving_ca_pin)?;
        outln!("  signed intent:    {}, TPM attestor: {}", info.signed_intent, info.tpm_attestor)?;
        outln!("  data dir:         {}", d.data_dir.display())?;
        let counts: Vec<String> = info.nodes.iter().map(|(state, n)| format!("{n} {state}")).collect();
        let total: usize = info.nodes.iter().map(|(_, n)| n).sum();
        outln!("  nodes:            {total} ({}), {} connected", or_dash(counts.join(", ")), info.connected)?;
        let mut pools = Table::new(&["POOL", "ID", "EXPECTS", "ACCEPTANCE", "NODES"]);
        for p in &info.pools {
            let expects = p.expect_gpus.map_or("any GPU count".into(), |n| format!("{n} GPUs"));
            pools.row(vec![p.name.clone(), p.id.clone(), expects, p.acceptance.clone(), p.nodes.to_string()]);
        }
        out!("\n{}", pools.render())?;
        Ok(ExitCode::SUCCESS)
    }
}
