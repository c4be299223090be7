//! `devstack events [--watch] [--after N] [--kind K] [--node N] [-o json]`:
//! the stack's events. On a terminal each is a line a person reads (time,
//! kind, node, what happened); piped, or with `-o json`, each is the
//! endpoint's JSON object on a line of its own (docs/devstack.md, "The event
//! stream"), flushed as it comes. `--kind` and `--node` keep some.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::NodeDetail;
use serde_json::Value;

use crate::nodes::{api, route};
use crate::output::{Format, Output};

/// `devstack events`.
#[derive(Args)]
pub struct Events {
    /// Keep following: print each new event as it happens, until the stack stops or Ctrl-C.
    #[arg(short, long)]
    watch: bool,
    /// Only events numbered after N (the `seq` field).
    #[arg(long, value_name = "N", default_value_t = 0)]
    after: u64,
    /// Only events of these kinds (comma-separated: `adopted,rejected,command`).
    #[arg(long, value_name = "KIND", value_delimiter = ',')]
    kind: Vec<String>,
    /// Only events about this node (its id, a unique prefix of it, or its hostname).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
    #[command(flatten)]
    out: Output,
}

impl Events {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        let c = ctx.client()?;
        let node = match &self.node {
            Some(name) => Some(c.get::<NodeDetail>(&route("nodes", "node", name, "")?).await?.node.id),
            None => None,
        };
        let json = match self.out.format() {
            Format::Json => true,
            Format::Table | Format::Wide => !std::io::stdout().is_terminal(),
            Format::Name => return Err(crate::usage("events have no names: -o table or -o json")),
        };
        let path = api(&format!("/events?after={}{}", self.after, if self.watch { "&watch=true" } else { "" }));
        let mut lines = c.lines(&path).await?;
        loop {
            let next = tokio::select! {
                line = lines.next_line() => line?,
                _ = tokio::signal::ctrl_c() => None,
            };
            let Some(line) = next else { break };
            let event: Value = serde_json::from_str(&line).unwrap_or_default();
            let kind = event["event"].as_str().unwrap_or_default();
            if (!self.kind.is_empty() && !self.kind.iter().any(|k| k == kind))
                || node.as_ref().is_some_and(|id| event["node_id"].as_str() != Some(id))
            {
                continue;
            }
            // One line a write, flushed, so a pipe sees each event as it comes.
            if json { out!("{line}\n")? } else { out!("{}\n", human(&event))? }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// A field as text (`-` when absent or empty).
fn text(event: &Value, key: &str) -> String {
    match &event[key] {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Null => "-".into(),
        Value::String(_) => "-".into(),
        other => other.to_string(),
    }
}

/// What happened, in words, by kind; other kinds list their fields.
fn summary(event: &Value) -> String {
    let t = |key| text(event, key);
    let reason = |key| match text(event, key).as_str() {
        "-" => String::new(),
        r => format!(": {r}"),
    };
    match event["event"].as_str().unwrap_or_default() {
        "joined" => format!("joined pool {} as {} ({})", t("pool_id"), t("hostname"), t("method")),
        "connected" => format!("session {} opened (bcd {})", t("epoch"), t("daemon_version")),
        "disconnected" => format!("session {} ended{}", t("epoch"), reason("reason")),
        "adopted" => "adopted".into(),
        "rejected" => format!("rejected{}", reason("reason")),
        "command" => format!("{} {} {}{}", t("command_id"), t("kind"), t("state"), reason("reason")),
        "reservation" => format!("{} {}{}", t("reservation_id"), t("state"), reason("reason")),
        "revoked" => "revoked: every certificate".into(),
        _ => {
            let skip = ["seq", "at_ms", "event", "node_id"];
            let fields = event.as_object().into_iter().flatten().filter(|(k, _)| !skip.contains(&k.as_str()));
            fields.map(|(k, _)| format!("{k}={}", t(k))).collect::<Vec<_>>().join(" ")
        }
    }
}

/// `12:01:02.345  adopted        node_ab…  adopted`.
fn human(event: &Value) -> String {
    let at = event["at_ms"].as_u64().unwrap_or_default();
    let time = humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(at));
    let time = time.to_string();
    let clock = time.get(11..23).unwrap_or(&time);
    let kind = event["event"].as_str().unwrap_or("?");
    format!("{clock}  {kind:<18} {:<24} {}", text(event, "node_id"), summary(event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_as_lines() {
        let e = serde_json::json!({"seq": 3, "at_ms": 1000, "event": "command", "node_id": "node_a",
            "command_id": "cmd_1", "kind": "diag.nvml", "state": "failed", "reason": "diag-error: x"});
        assert_eq!(
            human(&e),
            format!("00:00:01.000  command            {:<24} cmd_1 diag.nvml failed: diag-error: x", "node_a")
        );
        let other =
            serde_json::json!({"seq": 1, "at_ms": 0, "event": "pool_created", "pool_id": "pool_1", "name": "x"});
        assert!(human(&other).ends_with("pool_id=pool_1 name=x"), "{}", human(&other));
    }
}
