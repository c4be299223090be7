//! `devstack command NODE KIND [--params JSON] [--wait]` (enqueue a
//! command, checked first against the kind list, `proto/kinds.toml`, with
//! the closest kind suggested for a typo) and `devstack commands [ID]`
//! (list them, of a node, in a state, of a kind; or show one).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::{CommandRequest, CommandView, WaitRequest};
use devstack::admin::query::encode;

use crate::nodes::{api, route};
use crate::output::{Filter, Output, Row};
use crate::table::{ago, or_dash};

impl Row for CommandView {
    const KIND: &'static str = "command";
    fn name(&self) -> String {
        self.id.clone()
    }
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["COMMAND", "NODE", "KIND", "STATE", "ENQUEUED"];
        if wide {
            h.extend(["FINISHED", "DELIVERIES"]);
        }
        h.push("REASON");
        h
    }
    fn cells(&self, wide: bool) -> Vec<String> {
        let mut c =
            vec![self.id.clone(), self.node_id.clone(), self.kind.clone(), self.state.clone(), ago(self.created_at_ms)];
        if wide {
            c.extend([self.finished_at_ms.map_or("-".into(), ago), self.deliveries.to_string()]);
        }
        c.push(or_dash(self.reason.clone()));
        c
    }
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("command", self.id.clone()),
            ("node", self.node_id.clone()),
            ("kind", self.kind.clone()),
            ("state", self.state.clone()),
        ]
    }
}

/// `devstack command NODE KIND [--params JSON] [--wait]`.
#[derive(Args)]
pub struct CommandArgs {
    /// The node: its id, a unique prefix of it, or its hostname.
    node: String,
    /// The command kind (`diag.nvml`, `logs.collect`, `node.reboot`,
    /// `inventory.refresh`, `daemon.upgrade`, …: proto/kinds.toml).
    kind: String,
    /// Its parameters, a JSON object (`daemon.upgrade` takes `{"version": "0.9.1"}`
    /// to roll out a release of `serve --releases`).
    #[arg(long, value_name = "JSON", default_value = "{}")]
    params: String,
    /// Wait for the command to end; exit 1 unless it succeeded.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (then exit 6).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    out: Output,
}

impl CommandArgs {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        route("nodes", "node", &self.node, "")?;
        let params: serde_json::Value = serde_json::from_str(&self.params)
            .map_err(|e| crate::usage(format!("--params is not JSON ({e}): {}", self.params)))?;
        devstack::admin::kinds::check(&self.kind, &params).map_err(|refused| crate::usage(refused.message))?;
        let c = ctx.client()?;
        let request = CommandRequest { node: self.node, kind: self.kind, params };
        let mut view: CommandView = c.post(&api("/commands"), &request).await?;
        if self.wait {
            if !self.out.json() {
                eprintln!("enqueued {} ({}) for {}; waiting for its end", view.id, view.kind, view.node_id);
            }
            let wait = WaitRequest { timeout_ms: self.timeout.as_millis() as u64 };
            view = c.post(&route("commands", "command", &view.id, "/wait")?, &wait).await?;
        }
        self.out.one(&view, |v, _| print_command(v))?;
        Ok(if !self.wait || view.state == "succeeded" { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    }
}

/// A command's line, and its output.
pub fn print_command(view: &CommandView) -> Result<()> {
    let reason = if view.reason.is_empty() { String::new() } else { format!(": {}", view.reason) };
    outln!("{} {} on {}: {}{reason}", view.id, view.kind, view.node_id, view.state)?;
    if let Some(output) = &view.output {
        outln!("{}", serde_json::to_string_pretty(output).unwrap_or_default())?;
    }
    Ok(())
}

/// `devstack commands [ID] [--node N] [--state S] [--kind K]`.
#[derive(Args)]
pub struct Commands {
    /// One command (`cmd_…`) to show instead of the list.
    id: Option<String>,
    /// Only this node's (its id, a unique prefix of it, or its hostname).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
    /// Only of this kind.
    #[arg(long, value_name = "KIND")]
    kind: Option<String>,
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    out: Output,
}

impl Commands {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        if let Some(id) = &self.id {
            let view: CommandView = ctx.client()?.get(&route("commands", "command", id, "")?).await?;
            self.out.one(&view, |v, _| print_command(v))?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut query = Vec::new();
        if let Some(node) = &self.node {
            route("nodes", "node", node, "")?;
            query.push(format!("node={}", encode(node)));
        }
        if let Some(kind) = &self.kind {
            query.push(format!("kind={}", encode(kind)));
        }
        let path = if query.is_empty() { api("/commands") } else { api(&format!("/commands?{}", query.join("&"))) };
        let commands: Vec<CommandView> = self.filter.apply(ctx.client()?.get(&path).await?)?;
        self.out.list(&commands, "no commands")?;
        Ok(ExitCode::SUCCESS)
    }
}
