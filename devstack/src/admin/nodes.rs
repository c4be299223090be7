//! `GET /v1/nodes`, `GET /v1/nodes/{node}` and `POST
//! /v1/nodes/{node}/revoke`: the nodes as a person reads them (state,
//! session, generations, GPUs; a revoked node's state is `revoked`), one
//! node in full, and revocation (once: a second one changes nothing and
//! says so).

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use prost::Message as _;

use super::api::{self, CertView, InventoryView, NodeDetail, NodeSummary, SectionView, SessionView};
use super::{Answer, resolve_node};
use crate::store::rows::{NodeRow, PoolRow};
use crate::view::StackView;

pub(super) fn routes() -> Router<super::State> {
    Router::new()
        .route(&format!("{}/nodes", api::PREFIX), get(list))
        .route(&format!("{}/nodes/{{node}}", api::PREFIX), get(detail))
        .route(&format!("{}/nodes/{{node}}/revoke", api::PREFIX), post(revoke))
}

/// The GPU count of a node's `gpus` inventory section, if it has one.
fn gpus(v: &StackView<'_>, node_id: &str) -> Option<u32> {
    let section = v.inventory(node_id).into_iter().find(|s| s.name == "gpus")?;
    proto::GpuInventory::decode(section.content.as_slice()).ok().map(|g| g.gpus.len() as u32)
}

/// A node's summary line.
pub(super) fn summary(v: &StackView<'_>, pools: &[PoolRow], n: &NodeRow) -> NodeSummary {
    let revoked_at_ms = v.revoked_at(&n.id);
    NodeSummary {
        id: n.id.clone(),
        pool_id: n.pool_id.clone(),
        pool: pools.iter().find(|p| p.id == n.pool_id).map(|p| p.name.clone()).unwrap_or_default(),
        state: if revoked_at_ms.is_some() { "revoked".to_string() } else { n.state.to_string() },
        reason: n.reason.clone(),
        hostname: n.hostname.clone(),
        daemon_version: n.daemon_version.clone(),
        session_epoch: v.live_epoch(&n.id),
        applied_generation: n.applied_generation,
        spec_generation: n.spec_generation,
        gpus: gpus(v, &n.id),
        created_at_ms: n.created_at_ms,
        adopted_at_ms: n.adopted_at_ms,
        revoked_at_ms,
    }
}

async fn list(State(s): State<super::State>) -> Answer<Vec<NodeSummary>> {
    let nodes = s.stack.view(|v| {
        let pools = v.pools();
        v.nodes().iter().map(|n| summary(v, &pools, n)).collect()
    })?;
    Ok(Json(nodes))
}

/// The last `n` items of a list.
fn last<T>(mut items: Vec<T>, n: usize) -> Vec<T> {
    let skip = items.len().saturating_sub(n);
    items.drain(..skip);
    items
}

async fn detail(State(s): State<super::State>, Path(node): Path<String>) -> Answer<NodeDetail> {
    let row = resolve_node(&s.stack, &node)?;
    let detail = s.stack.view(|v| NodeDetail {
        node: summary(v, &v.pools(), &row),
        sessions: last(v.node_sessions(&row.id), 10)
            .into_iter()
            .map(|s| SessionView {
                epoch: s.epoch,
                daemon_version: s.daemon_version,
                boot_id: s.boot_id,
                connected_at_ms: s.connected_at_ms,
                disconnected_at_ms: s.disconnected_at_ms,
            })
            .collect(),
        certificates: v
            .node_certs(&row.id)
            .into_iter()
            .map(|c| CertView {
                serial: c.serial,
                spki_pin: c.spki_pin,
                not_after_ms: c.not_after_ms,
                revoked_at_ms: c.revoked_at_ms,
            })
            .collect(),
        inventory: v
            .inventory(&row.id)
            .into_iter()
            .map(|i| InventoryView { name: i.name, sha256: i.sha256, updated_at_ms: i.updated_at_ms })
            .collect(),
        sections: v
            .section_statuses(&row.id)
            .into_iter()
            .map(|s| SectionView {
                section: s.section,
                state: s.state.to_string(),
                reason: s.reason,
                message: s.message,
                generation: s.generation,
            })
            .collect(),
        commands: last(v.commands(&row.id), 20).into_iter().map(super::commands::view).collect(),
        reservations: v.reservations(&row.id).into_iter().map(super::reservations::view).collect(),
    })?;
    Ok(Json(detail))
}

async fn revoke(State(s): State<super::State>, Path(node): Path<String>) -> Answer<api::Revoked> {
    let row = resolve_node(&s.stack, &node)?;
    let done = s.stack.revoke_node(&row.id).await?;
    Ok(Json(api::Revoked {
        node_id: row.id,
        revoked_at_ms: done.revoked_at_ms,
        certificates: done.certificates,
        already_revoked: done.already_revoked,
        session_notified: done.session_notified,
    }))
}
