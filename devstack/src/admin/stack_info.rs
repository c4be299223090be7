//! `GET /v1/stack`: what the stack is (every URL `devstack serve` prints,
//! the pins, pools, how many nodes in each state, the last event's number);
//! also what a client asks first to learn the endpoint answers.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;

use super::Answer;
use super::api::{self, PoolView, StackInfo};

pub(super) fn routes() -> Router<super::State> {
    Router::new().route(&format!("{}/stack", api::PREFIX), get(info))
}

async fn info(State(s): State<super::State>) -> Answer<StackInfo> {
    let stack = &s.stack;
    let (pools, nodes, connected) = stack.view(|v| {
        let mut pools: Vec<PoolView> = v.pools().into_iter().map(|p| super::pools::view(v, p)).collect();
        pools.sort_by(|a, b| a.name.cmp(&b.name));
        let nodes = v.nodes();
        let mut counts: Vec<(String, usize)> = Vec::new();
        for n in &nodes {
            let state = if v.revoked_at(&n.id).is_some() { "revoked" } else { n.state.as_str() };
            match counts.iter_mut().find(|(s, _)| s == state) {
                Some((_, count)) => *count += 1,
                None => counts.push((state.to_string(), 1)),
            }
        }
        let connected = nodes.iter().filter(|n| v.live_epoch(&n.id).is_some()).count();
        (pools, counts, connected)
    })?;
    let well_known = stack.well_known();
    let gateway_urls = well_known["gateways"]
        .as_array()
        .map(|g| g.iter().filter_map(|g| g["url"].as_str().map(str::to_string)).collect())
        .unwrap_or_else(|| vec![stack.gateway_url().to_string()]);
    let pins = stack.pins();
    Ok(Json(StackInfo {
        gateway_url: stack.gateway_url().to_string(),
        gateway_urls,
        well_known_url: stack.well_known_url(),
        websocket_url: stack.websocket_url(),
        otlp_url: stack.otlp_url(),
        releases_url: format!("{}/releases/", stack.http_url()),
        admin_url: s.url.clone(),
        server_name: stack.server_name().to_string(),
        serving_ca_pin: pins.serving_ca,
        join_signing_pin: pins.join_signing,
        join_encryption_pin: pins.join_encryption,
        signed_intent: stack.options().signed_intent,
        tpm_attestor: stack.options().tpm_attestor.is_some(),
        pools,
        nodes,
        connected,
        last_event_seq: stack.recent_events().last().map_or(0, |e| e.seq),
    }))
}
