//! `GET /v1/pools` and `GET /v1/pools/{pool}`: the pools (by name order),
//! each with what it expects of its nodes and how many it has; one pool by
//! id or name.

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use proto::refusal::Code;

use super::api::{self, PoolView};
use super::{Answer, ApiError};
use crate::store::rows::PoolRow;
use crate::view::StackView;

pub(super) fn routes() -> Router<super::State> {
    Router::new()
        .route(&format!("{}/pools", api::PREFIX), get(list))
        .route(&format!("{}/pools/{{pool}}", api::PREFIX), get(read))
}

/// A pool as the API shows it.
pub(super) fn view(v: &StackView<'_>, p: PoolRow) -> PoolView {
    let nodes = v.nodes().iter().filter(|n| n.pool_id == p.id).count();
    PoolView {
        id: p.id,
        name: p.name,
        expect_gpus: p.expect_gpu_count,
        acceptance: p.acceptance,
        kind: p.kind,
        nodes,
        created_at_ms: p.created_at_ms,
    }
}

async fn list(State(s): State<super::State>) -> Answer<Vec<PoolView>> {
    let mut pools: Vec<PoolView> = s.stack.view(|v| v.pools().into_iter().map(|p| view(v, p)).collect())?;
    pools.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(pools))
}

async fn read(State(s): State<super::State>, Path(pool): Path<String>) -> Answer<PoolView> {
    super::check_name("pool", &pool)?;
    s.stack
        .view(|v| v.pools().into_iter().find(|p| p.id == pool || p.name == pool).map(|p| view(v, p)))?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(Code::PoolUnknown, format!("no pool is named {pool:?} (by id or name)")))
}
