//! `GET /v1/instances[?node=N&state=S]` and `GET /v1/instances/{id}`: the
//! VPS instances the stack holds (docs/devstack.md, "Instances"), oldest
//! first, and one of them.

use axum::Json;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::routing::get;
use proto::refusal::Code;

use super::api::{self, InstanceView};
use super::{Answer, ApiError, resolve_node};
use crate::store::rows::InstanceRow;

pub(super) fn routes() -> Router<super::State> {
    Router::new()
        .route(&format!("{}/instances", api::PREFIX), get(list))
        .route(&format!("{}/instances/{{id}}", api::PREFIX), get(read))
}

/// An instance as the API shows it.
fn view(i: InstanceRow) -> InstanceView {
    InstanceView {
        id: i.id,
        pool_id: i.pool_id,
        node_id: i.node_id,
        desired: i.desired.as_str().to_string(),
        state: i.state.as_str().to_string(),
        reason: i.reason,
        vcpus: i.spec.vcpus,
        memory_bytes: i.spec.memory_bytes,
        runtime: i.spec.runtime,
        created_at_ms: i.created_at_ms,
    }
}

async fn list(State(s): State<super::State>, RawQuery(query): RawQuery) -> Answer<Vec<InstanceView>> {
    let wanted = super::query::parse(query.as_deref(), &["node", "state"])?;
    let node = match wanted.get("node") {
        Some(name) => Some(resolve_node(&s.stack, name)?.id),
        None => None,
    };
    let mut rows = s.stack.view(|v| v.instances())?;
    rows.retain(|i| {
        node.as_ref().is_none_or(|n| i.node_id.as_ref() == Some(n))
            && wanted.get("state").is_none_or(|st| i.state.as_str() == st)
    });
    rows.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
    Ok(Json(rows.into_iter().map(view).collect()))
}

async fn read(State(s): State<super::State>, Path(id): Path<String>) -> Answer<InstanceView> {
    super::check_name("instance", &id)?;
    s.stack
        .view(|v| v.instance(&id))?
        .map(|i| Json(view(i)))
        .ok_or_else(|| ApiError::not_found(Code::InstanceUnknown, format!("no instance {id}")))
}
