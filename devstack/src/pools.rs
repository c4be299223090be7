//! Pools and join tokens: creating a pool with its kind (GPU nodes or VPS
//! hosts) and its acceptance rule, minting
//! a join token (only its SHA-256 is stored, and it is never logged), and
//! reading both back.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tracing::info;

use crate::adoption::{ACCEPTANCE_DIAG, ACCEPTANCE_NONE};
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::events::StackEvent;
use crate::ids;
use crate::policy::PoolPolicy;
use crate::shared::Shared;
use crate::store::rows::{JoinTokenRow, PoolRow};
use crate::store::{pools, tokens};
use crate::view::StackView;

/// How a pool accepts its nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Acceptance {
    /// Run `diag.nvml` and compare its GPU count with the expected one.
    #[default]
    DiagNvml,
    /// Adopt on the first session.
    None,
}

/// The stored kind of a GPU pool.
pub const KIND_GPU: &str = "gpu";
/// The stored kind of a VPS host pool.
pub const KIND_VPS_HOST: &str = "vps-host";

/// What a pool's nodes are for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PoolKind {
    /// GPU nodes: reservations (the default).
    #[default]
    Gpu,
    /// VPS hosts: placement puts instances on them.
    VpsHost,
}

impl PoolKind {
    /// The value stored in `pools.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolKind::Gpu => KIND_GPU,
            PoolKind::VpsHost => KIND_VPS_HOST,
        }
    }
}

/// A pool to create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSpec {
    /// A unique name.
    pub name: String,
    /// The GPU model nodes should have (recorded, not checked yet).
    pub gpu_model: Option<String>,
    /// The GPU count `diag.nvml` must report; `None` accepts any.
    pub expect_gpu_count: Option<u32>,
    /// The acceptance check.
    pub acceptance: Acceptance,
    /// What its nodes are for.
    pub kind: PoolKind,
    /// What it asks of its hosts (rendered into their `NodeSpec.host`).
    pub policy: PoolPolicy,
}

impl StackView<'_> {
    /// Every pool.
    pub fn pools(&self) -> Vec<PoolRow> {
        self.read(pools::all)
    }

    /// A pool by name.
    pub fn pool_by_name(&self, name: &str) -> Option<PoolRow> {
        self.read(|c| pools::by_name(c, name))
    }

    /// The join tokens of a pool (hashes and counters only).
    pub fn join_tokens(&self, pool_id: &str) -> Vec<JoinTokenRow> {
        self.read(|c| tokens::of_pool(c, pool_id))
    }
}

/// Creates a pool; returns its id.
pub fn create_pool(shared: &Shared, spec: PoolSpec) -> Result<String> {
    spec.policy.check()?;
    let row = PoolRow {
        id: ids::pool_id(),
        name: spec.name,
        gpu_model: spec.gpu_model,
        expect_gpu_count: spec.expect_gpu_count,
        acceptance: match spec.acceptance {
            Acceptance::DiagNvml => ACCEPTANCE_DIAG,
            Acceptance::None => ACCEPTANCE_NONE,
        }
        .to_string(),
        created_at_ms: now_ms(),
        kind: spec.kind.as_str().to_string(),
        policy: spec.policy.to_json(),
    };
    shared.ledger.write(|c| {
        pools::insert(c, &row)?;
        c.publish(StackEvent::PoolCreated { pool_id: row.id.clone(), name: row.name.clone() });
        Ok(())
    })?;
    info!(pool_id = %row.id, name = %row.name, kind = %row.kind, policy = %row.policy, expect_gpu_count = ?row.expect_gpu_count, "pool created");
    Ok(row.id)
}

/// Mints a join token for a pool; returns the secret token. Only its
/// SHA-256 is stored, and it is never logged.
pub fn mint_join_token(shared: &Shared, pool_id: &str, max_uses: u32, ttl: Duration) -> Result<String> {
    let secret = ids::token_secret();
    let now = now_ms();
    let row = JoinTokenRow {
        id: ids::token_id(),
        token_sha256: hex::encode(Sha256::digest(secret.as_bytes())),
        pool_id: pool_id.to_string(),
        max_uses,
        uses: 0,
        expires_at_ms: now.saturating_add(ttl.as_millis().min(i64::MAX as u128) as i64),
        created_at_ms: now,
    };
    shared.ledger.write(|c| {
        if pools::get(c, pool_id)?.is_none() {
            return Err(Error::UnknownPool { pool_id: pool_id.to_string() });
        }
        tokens::insert(c, &row)?;
        c.publish(StackEvent::TokenMinted {
            token_id: row.id.clone(),
            pool_id: pool_id.to_string(),
            max_uses,
            expires_at_ms: row.expires_at_ms,
        });
        Ok(())
    })?;
    info!(token_id = %row.id, pool_id, max_uses, expires_at_ms = row.expires_at_ms, "join token minted");
    Ok(secret)
}
