//! `POST /v1/nodes/{node}/cordon` `{reason}` and `POST
//! /v1/nodes/{node}/uncordon`: a cordoned node takes no new reservation or
//! instance and keeps what it runs (docs/devstack.md, "Cordon").

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;

use super::api::{self, CordonRequest, CordonView};
use super::{Answer, resolve_node};

pub(super) fn routes() -> Router<super::State> {
    Router::new()
        .route(&format!("{}/nodes/{{node}}/cordon", api::PREFIX), post(cordon))
        .route(&format!("{}/nodes/{{node}}/uncordon", api::PREFIX), post(uncordon))
}

/// The node's cordon now, and whether the request changed it.
fn view(s: &super::State, node_id: String, changed: bool) -> Answer<CordonView> {
    let reason = s.stack.cordoned(&node_id)?.map(|c| c.reason);
    Ok(Json(CordonView { node_id, cordoned: reason.is_some(), reason, changed }))
}

async fn cordon(
    State(s): State<super::State>,
    Path(node): Path<String>,
    Json(request): Json<CordonRequest>,
) -> Answer<CordonView> {
    let node = resolve_node(&s.stack, &node)?;
    let changed = s.stack.cordon(&node.id, &request.reason).await?;
    view(&s, node.id, changed)
}

async fn uncordon(State(s): State<super::State>, Path(node): Path<String>) -> Answer<CordonView> {
    let node = resolve_node(&s.stack, &node)?;
    let changed = s.stack.uncordon(&node.id).await?;
    view(&s, node.id, changed)
}
