//! `devstack token [--uses N] [--ttl D] [--pool P]` (mint a join token; the
//! stack writes it to a 0600 file, and the line to join a node with it is
//! printed, naming a bcd that exists) and `devstack tokens` (list them:
//! id, pool, uses, expiry, file, never a token).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::{TokenRequest, TokenSummary, TokenView};

use crate::nodes::api;
use crate::output::{Filter, Output, Row};
use crate::table::{ago, or_dash};

/// `devstack token --uses N [--ttl D] [--pool P]`.
#[derive(Args)]
pub struct Token {
    /// How many joins the token allows.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    uses: u32,
    /// How long it works (`90s`, `30m`, `24h`, `7d`).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// The pool it joins nodes into, by name or id (default: the stack's `default`).
    #[arg(long, value_name = "POOL")]
    pool: Option<String>,
    #[command(flatten)]
    out: Output,
}

impl Token {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        if self.ttl.is_zero() {
            return Err(crate::usage("--ttl must be longer than 0s"));
        }
        let c = ctx.client()?;
        let request = TokenRequest { pool: self.pool, uses: self.uses, ttl_ms: self.ttl.as_millis() as u64 };
        let t: TokenView = c.post(&api("/tokens"), &request).await?;
        if self.out.json() {
            crate::output::print_json(&t)?;
            return Ok(ExitCode::SUCCESS);
        }
        outln!(
            "join token {} ({} use(s), pool {}, expires in {}) written to {}",
            t.token_id,
            t.uses,
            t.pool,
            crate::table::duration(self.ttl),
            t.file
        )?;
        let config = c.discovery().data_dir.join("bcd").join(devstack::config::CONFIG_FILE);
        let (bcd, note) = crate::hint::bcd();
        outln!("join a node: {bcd} join --token-file {} --config {}", t.file, config.display())?;
        if let Some(note) = note {
            outln!("  ({note})")?;
        }
        Ok(ExitCode::SUCCESS)
    }
}

impl Row for TokenSummary {
    const KIND: &'static str = "token";
    fn name(&self) -> String {
        self.token_id.clone()
    }
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["TOKEN", "POOL", "STATE", "USED", "EXPIRES"];
        if wide {
            h.extend(["CREATED", "FILE"]);
        }
        h
    }
    fn cells(&self, wide: bool) -> Vec<String> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let left = Duration::from_millis((self.expires_at_ms - now.as_millis() as i64).max(0) as u64);
        let expires =
            if left.is_zero() { ago(self.expires_at_ms) } else { format!("in {}", crate::table::duration(left)) };
        let mut c = vec![
            self.token_id.clone(),
            self.pool.clone(),
            self.state.clone(),
            format!("{}/{}", self.used, self.uses),
            expires,
        ];
        if wide {
            c.extend([ago(self.created_at_ms), or_dash(self.file.clone().unwrap_or_default())]);
        }
        c
    }
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![("token", self.token_id.clone()), ("pool", self.pool.clone()), ("state", self.state.clone())]
    }
}

/// `devstack tokens`.
#[derive(Args)]
pub struct Tokens {
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    out: Output,
}

impl Tokens {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        let tokens: Vec<TokenSummary> = self.filter.apply(ctx.client()?.get(&api("/tokens")).await?)?;
        self.out.list(&tokens, "no join tokens")?;
        Ok(ExitCode::SUCCESS)
    }
}
