//! `GET /v1/stack`: what the stack is (URLs, pins, pools, how many nodes in
//! each state); also what a client asks first to learn the endpoint answers.

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
        let pools: Vec<PoolView> = v
            .pools()
            .into_iter()
            .map(|p| PoolView { id: p.id, name: p.name, expect_gpus: p.expect_gpu_count, acceptance: p.acceptance })
            .collect();
        let nodes = v.nodes();
        let mut counts: Vec<(String, usize)> = Vec::new();
        for n in &nodes {
            match counts.iter_mut().find(|(state, _)| *state == n.state.as_str()) {
                Some((_, count)) => *count += 1,
                None => counts.push((n.state.to_string(), 1)),
            }
        }
        let connected = nodes.iter().filter(|n| v.live_epoch(&n.id).is_some()).count();
        (pools, counts, connected)
    })?;
    Ok(Json(StackInfo {
        gateway_url: stack.gateway_url().to_string(),
        well_known_url: stack.well_known_url(),
        server_name: stack.server_name().to_string(),
        serving_ca_pin: stack.pins().serving_ca,
        signed_intent: stack.options().signed_intent,
        tpm_attestor: stack.options().tpm_attestor.is_some(),
        pools,
        nodes,
        connected,
    }))
}
