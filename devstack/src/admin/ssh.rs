//! `POST /v1/nodes/{node}/ssh-cert`: a user certificate of the break-glass
//! SSH CA for a principal the node allows (docs/devstack.md, "SSH
//! certificate authorities"). Only the public key travels; the answer is
//! the certificate.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;

use super::api::{self, SshCertRequestBody, SshCertView};
use super::{Answer, resolve_node};
use crate::SshCertRequest;

pub(super) fn routes() -> Router<super::State> {
    Router::new().route(&format!("{}/nodes/{{node}}/ssh-cert", api::PREFIX), post(issue))
}

async fn issue(
    State(s): State<super::State>,
    Path(node): Path<String>,
    Json(body): Json<SshCertRequestBody>,
) -> Answer<SshCertView> {
    let node = resolve_node(&s.stack, &node)?;
    let request = SshCertRequest {
        principal: body.principal,
        ttl: Duration::from_millis(body.ttl_ms),
        public_key: body.public_key,
        source_addresses: body.source_addresses,
    };
    let cert = s.stack.issue_ssh_cert(&node.id, &request).await?;
    Ok(Json(SshCertView {
        node_id: node.id,
        certificate: cert.certificate,
        serial: cert.serial,
        key_id: cert.key_id,
        valid_after: cert.valid_after,
        valid_before: cert.valid_before,
    }))
}
