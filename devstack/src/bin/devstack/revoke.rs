//! `devstack revoke NODE`: revokes every certificate of a node, and says
//! what happened: the certificates revoked and whether a live session got
//! the RevocationNotice, or that the node was revoked before (nothing
//! changed). A revoked node shows `revoked` and gets no new work.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::Revoked;

use crate::nodes::route;
use crate::output::Output;
use crate::table::ago;

/// `devstack revoke NODE`.
#[derive(Args)]
pub struct Revoke {
    /// The node: its id, a unique prefix of it, or its hostname.
    node: String,
    #[command(flatten)]
    out: Output,
}

impl Revoke {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        let path = route("nodes", "node", &self.node, "/revoke")?;
        let r: Revoked = ctx.client()?.post(&path, &serde_json::json!({})).await?;
        if self.out.json() {
            crate::output::print_json(&r)?;
        } else if r.already_revoked {
            outln!("{}: already revoked {}; nothing changed", r.node_id, ago(r.revoked_at_ms))?;
        } else {
            let session = if r.session_notified {
                "its live session got a RevocationNotice (bcd node exits 3)"
            } else {
                "it had no live session; a new one is refused (cert-revoked)"
            };
            outln!("{}: revoked {} certificate(s); {session}", r.node_id, r.certificates)?;
        }
        Ok(ExitCode::SUCCESS)
    }
}
