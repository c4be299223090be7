//! `POST /v1/commands`, `GET /v1/commands[?node=N&state=S&kind=K]`, `GET
//! /v1/commands/{id}` and `POST /v1/commands/{id}/wait`: enqueue a command
//! for a node (checked against the kind list first, [`super::kinds`];
//! signed under signed intent, as the stack signs every command), list
//! them, read one, and wait for its end. `daemon.upgrade` with params
//! `{"version": V}` rolls out the published release V (the release
//! directory is scanned first, so a release dropped in after start is
//! found).

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{get, post};

use super::api::{self, CommandRequest, CommandView, WaitRequest};
use super::{Answer, ApiError, resolve_node, stopping};
use crate::commands::CommandOptions;
use crate::releases::UPGRADE_KIND;
use crate::store::rows::CommandRow;
use proto::refusal::Code;

pub(super) fn routes() -> Router<super::State> {
    Router::new()
        .route(&format!("{}/commands", api::PREFIX), post(enqueue).get(list))
        .route(&format!("{}/commands/{{id}}", api::PREFIX), get(read))
        .route(&format!("{}/commands/{{id}}/wait", api::PREFIX), post(wait))
}

/// A command as the API shows it.
pub(super) fn view(row: CommandRow) -> CommandView {
    let output = row.output.as_deref().filter(|o| !o.is_empty()).map(|o| {
        serde_json::from_slice(o).unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(o).into()))
    });
    CommandView {
        done: row.state.is_terminal(),
        id: row.id,
        node_id: row.node_id,
        kind: row.kind,
        state: row.state.to_string(),
        reason: row.reason,
        output,
        created_at_ms: row.created_at_ms,
        finished_at_ms: row.finished_at_ms,
        deliveries: row.deliveries,
    }
}

fn command(s: &super::State, id: &str) -> Result<CommandView, ApiError> {
    s.stack
        .view(|v| v.command(id))?
        .map(view)
        .ok_or_else(|| ApiError::not_found(Code::CommandUnknown, format!("no command {id}")))
}

async fn enqueue(State(s): State<super::State>, Json(request): Json<CommandRequest>) -> Answer<CommandView> {
    super::kinds::check(&request.kind, &request.params)
        .map_err(|refused| ApiError::new(StatusCode::BAD_REQUEST, refused.code, refused.message))?;
    let node = resolve_node(&s.stack, &request.node)?;
    let version = request.params.get("version").and_then(|v| v.as_str());
    let id = match version {
        Some(version) if request.kind == UPGRADE_KIND && request.params.get("manifest").is_none() => {
            if let Some(dir) = &s.options.releases {
                super::releases::publish_new(&s.stack, dir).await?;
            }
            s.stack.rollout_upgrade(&node.id, version).await?
        }
        _ => s.stack.enqueue_command(&node.id, &request.kind, request.params, CommandOptions::default()).await?,
    };
    Ok(Json(command(&s, &id)?))
}

/// The commands of every node (or of `node`), in `state` and of `kind` when
/// asked, oldest first.
async fn list(State(s): State<super::State>, RawQuery(query): RawQuery) -> Answer<Vec<CommandView>> {
    let wanted = super::query::parse(query.as_deref(), &["node", "state", "kind"])?;
    let nodes = match wanted.get("node") {
        Some(name) => vec![resolve_node(&s.stack, name)?.id],
        None => s.stack.view(|v| v.nodes())?.into_iter().map(|n| n.id).collect(),
    };
    let mut rows: Vec<CommandRow> = s.stack.view(|v| nodes.iter().flat_map(|n| v.commands(n)).collect())?;
    rows.retain(|c| {
        wanted.get("state").is_none_or(|st| c.state.as_str() == st) && wanted.get("kind").is_none_or(|k| &c.kind == k)
    });
    rows.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
    Ok(Json(rows.into_iter().map(view).collect()))
}

async fn read(State(s): State<super::State>, Path(id): Path<String>) -> Answer<CommandView> {
    super::check_name("command", &id)?;
    Ok(Json(command(&s, &id)?))
}

async fn wait(
    State(s): State<super::State>,
    Path(id): Path<String>,
    Json(request): Json<WaitRequest>,
) -> Answer<CommandView> {
    let timeout = Duration::from_millis(request.timeout_ms).min(super::MAX_WAIT);
    let mut stop = s.stop.clone();
    tokio::select! {
        ended = s.stack.await_command(&id, timeout) => { ended?; }
        _ = stop.wait_for(|s| *s) => {
            return Err(stopping());
        }
    }
    Ok(Json(command(&s, &id)?))
}
