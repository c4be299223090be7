//! `POST /v1/reservations`, `GET /v1/reservations[?node=N&state=S]`, `GET /v1/reservations/{id}`, `POST
//! /v1/reservations/{id}/wait` and `POST /v1/reservations/{id}/release`:
//! book GPUs of an adopted node (or of the node placement picks in a pool,
//! for a while or until released) as a hold, list them, read one, wait until
//! the node bound it (or it ended), withdraw its hold (docs/protocol.md,
//! "Reservations (holds)").

use axum::Json;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::routing::{get, post};

use super::api::{self, ReservationView, ReserveRequest, WaitRequest};
use super::{Answer, ApiError, resolve_node};
use crate::ReservationRequest;
use crate::store::rows::{ReservationRow, ReservationState};
use proto::refusal::Code;

pub(super) fn routes() -> Router<super::State> {
    Router::new()
        .route(&format!("{}/reservations", api::PREFIX), post(reserve).get(list))
        .route(&format!("{}/reservations/{{id}}", api::PREFIX), get(read))
        .route(&format!("{}/reservations/{{id}}/wait", api::PREFIX), post(wait))
        .route(&format!("{}/reservations/{{id}}/release", api::PREFIX), post(release))
}

/// A reservation as the API shows it.
pub(super) fn view(r: ReservationRow) -> ReservationView {
    ReservationView {
        id: r.id,
        node_id: r.node_id,
        gpu_indexes: r.gpu_indexes,
        state: r.state.to_string(),
        reason: r.reason,
        last_refusal: r.last_refusal,
        generation: r.generation,
        cdi_devices: r.cdi_devices,
    }
}

fn reservation(s: &super::State, id: &str) -> Result<ReservationView, ApiError> {
    s.stack
        .view(|v| v.reservation(id))?
        .map(view)
        .ok_or_else(|| ApiError::not_found(Code::ReservationUnknown, format!("no reservation {id}")))
}

/// Books on the node named, or (`pool`) on the node placement picks in
/// the pool; with `duration_ms` the reservation ends itself then.
async fn reserve(State(s): State<super::State>, Json(request): Json<ReserveRequest>) -> Answer<ReservationView> {
    let gpus = ReservationRequest { gpus: request.gpus, ..ReservationRequest::default() };
    let duration = request.duration_ms.map(std::time::Duration::from_millis);
    let id = match (&request.pool, request.node.is_empty()) {
        (Some(pool), true) => s.stack.reserve_in_pool(pool, gpus, duration).await?.0,
        (None, false) => {
            let node = resolve_node(&s.stack, &request.node)?;
            match duration {
                Some(d) => s.stack.reserve_for(&node.id, gpus, d).await?,
                None => s.stack.reserve_with(&node.id, gpus).await?,
            }
        }
        _ => return Err(ApiError::bad_request("name either a node or a pool")),
    };
    Ok(Json(reservation(&s, &id)?))
}

/// The reservations of every node (or of `node`), in `state` when asked,
/// oldest first.
async fn list(State(s): State<super::State>, RawQuery(query): RawQuery) -> Answer<Vec<ReservationView>> {
    let wanted = super::query::parse(query.as_deref(), &["node", "state"])?;
    let nodes = match wanted.get("node") {
        Some(name) => vec![resolve_node(&s.stack, name)?.id],
        None => s.stack.view(|v| v.nodes())?.into_iter().map(|n| n.id).collect(),
    };
    let mut rows: Vec<ReservationRow> = s.stack.view(|v| nodes.iter().flat_map(|n| v.reservations(n)).collect())?;
    rows.retain(|r| wanted.get("state").is_none_or(|st| r.state.as_str() == st));
    rows.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
    Ok(Json(rows.into_iter().map(view).collect()))
}

async fn read(State(s): State<super::State>, Path(id): Path<String>) -> Answer<ReservationView> {
    super::check_name("reservation", &id)?;
    Ok(Json(reservation(&s, &id)?))
}

async fn release(State(s): State<super::State>, Path(id): Path<String>) -> Answer<ReservationView> {
    super::check_name("reservation", &id)?;
    s.stack.release(&id).await?;
    Ok(Json(reservation(&s, &id)?))
}

async fn wait(
    State(s): State<super::State>,
    Path(id): Path<String>,
    Json(request): Json<WaitRequest>,
) -> Answer<ReservationView> {
    let timeout = std::time::Duration::from_millis(request.timeout_ms).min(super::MAX_WAIT);
    let mut stop = s.stop.clone();
    let bound = s.stack.await_until(format!("reservation {id} to be bound"), timeout, |v| {
        let Some(row) = v.reservation(&id) else { return Some(None) };
        v.note(format_args!("state {}", row.state));
        (row.state == ReservationState::Active || row.state.is_terminal()).then_some(Some(row))
    });
    let row = tokio::select! {
        row = bound => row?,
        _ = stop.wait_for(|s| *s) => {
            return Err(super::stopping());
        }
    };
    row.map(|r| Json(view(r)))
        .ok_or_else(|| ApiError::not_found(Code::ReservationUnknown, format!("no reservation {id}")))
}
