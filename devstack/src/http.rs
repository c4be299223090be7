//! The plain-HTTP side of the stack (loopback): the well-known document that
//! lets `bcd join --server URL` find the gateway and the join pins.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::{Value, json};

use crate::shared::Shared;

/// The path of the well-known document.
pub const WELL_KNOWN_PATH: &str = "/.well-known/better-compute";

/// The well-known document of a stack.
pub fn well_known(shared: &Shared) -> Value {
    let keys = &shared.keys;
    // The JWK is embedded as a JSON object; `pki::pin::p256_jwk` writes
    // valid JSON, so parsing it back cannot fail.
    let jwk: Value = serde_json::from_str(&keys.join_encryption_jwk()).unwrap_or(Value::Null);
    json!({
        "gateway": {
            "url": shared.settings.gateway_url,
            "serverName": crate::SERVER_NAME,
            "servingCaSpkiPin": keys.serving_ca_pin(),
        },
        "join": {
            "signingPin": keys.join_signing_pin(),
            "signingKey": keys.join_signing_key_b64(),
            "encryptionPin": keys.join_encryption_pin(),
            "encryptionJwk": jwk,
        },
        "trustDomain": shared.settings.trust_domain,
    })
}

/// The HTTP routes.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(WELL_KNOWN_PATH, get(|State(shared): State<Arc<Shared>>| async move { Json(well_known(&shared)) }))
        .with_state(shared)
}
