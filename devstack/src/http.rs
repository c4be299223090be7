//! The plain-HTTP side of the stack: the well-known document that lets
//! `bcd join --server URL` find the gateway and the join pins, and release
//! downloads (`GET /releases/<version>/bcd-<os>-<arch>` and
//! `GET /releases/<version>/manifest.dsse.json`), and the OTLP receiver of
//! node metrics (`POST /v1/metrics`, `crate::otlp`). Plain HTTP is enough for
//! releases: bcd trusts only the signed manifest and the digest it names.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::shared::Shared;
use crate::store::releases;

/// The path of the well-known document.
pub const WELL_KNOWN_PATH: &str = "/.well-known/better-compute";

/// The well-known document of a stack.
pub fn well_known(shared: &Shared) -> Value {
    let keys = &shared.keys;
    // The JWK is embedded as a JSON object; `pki::pin::p256_jwk` writes
    // valid JSON, so parsing it back cannot fail.
    let jwk: Value = serde_json::from_str(&keys.join_encryption_jwk()).unwrap_or(Value::Null);
    let gateways = gateways(shared);
    let first = gateways.first().and_then(|g| g["url"].as_str()).unwrap_or(&shared.settings.gateway_url).to_string();
    json!({
        "gateway": {
            "url": first,
            "serverName": crate::SERVER_NAME,
            "servingCaSpkiPin": keys.serving_ca_pin(),
        },
        "join": {
            "signingPin": keys.join_signing_pin(),
            "signingKey": keys.join_signing_key_b64(),
            "encryptionPin": keys.join_encryption_pin(),
            "encryptionJwk": jwk,
        },
        "trustDomain": shared.settings.options.trust_domain,
        "gateways": gateways,
    })
}

/// The gateways a node may dial, this one first (docs/protocol.md, "The
/// well-known document"); this one alone when the store cannot be read.
fn gateways(shared: &Shared) -> Vec<Value> {
    let me = || vec![json!({ "id": shared.settings.options.gateway_id, "url": shared.settings.gateway_url })];
    match crate::cluster::live(shared) {
        Ok(list) if !list.is_empty() => list.iter().map(|g| json!({ "id": g.id, "url": g.grpc_url })).collect(),
        Ok(_) => me(),
        Err(e) => {
            tracing::warn!(error = %e, "http: the gateways could not be read for the well-known document");
            me()
        }
    }
}

/// One file of a release: an artifact's bytes or the signed manifest. The
/// version and file name come URL-decoded from the client: they are logged
/// only escaped (`?`), never as the refusal's text, so no request can forge
/// a log line.
async fn release_file(State(shared): State<Arc<Shared>>, Path((version, file)): Path<(String, String)>) -> Response {
    let not_found = |what: &str| {
        tracing::warn!(version = ?version, file = ?file, "http: release download refused: {what}");
        (StatusCode::NOT_FOUND, what.to_string()).into_response()
    };
    if !crate::releases::valid_version(&version) {
        return not_found("no such release");
    }
    if file == "manifest.dsse.json" {
        return match shared.ledger.read(|c| releases::get(c, &version)) {
            Ok(Some(row)) => ([(header::CONTENT_TYPE, "application/json")], row.envelope).into_response(),
            Ok(None) => not_found("no such release"),
            Err(e) => internal(e),
        };
    }
    let Some((os, arch)) = file.strip_prefix("bcd-").and_then(|p| p.split_once('-')) else {
        return not_found("no such file");
    };
    match shared.ledger.read(|c| releases::artifact_bytes(c, &version, os, arch)) {
        Ok(Some(bytes)) => {
            tracing::info!(version = %version, os = ?os, arch = ?arch, size = bytes.len(), "http: release artifact served");
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        Ok(None) => not_found("no such artifact in the release"),
        Err(e) => internal(e),
    }
}

fn internal(e: crate::error::Error) -> Response {
    tracing::error!(error = %e, "http: internal error");
    (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
}

/// The HTTP routes.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(WELL_KNOWN_PATH, get(|State(shared): State<Arc<Shared>>| async move { Json(well_known(&shared)) }))
        .route("/releases/{version}/{file}", get(release_file))
        .route(crate::otlp::PATH, post(crate::otlp::refuse_unauthenticated))
        .with_state(shared)
}
