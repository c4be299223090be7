//! Secrets for workloads: the SecretRequest handler. A request must be a
//! statement signed with the session's key; this stack holds no secrets
//! yet, so a verified request is answered `secret-unknown` and a refused one
//! is logged and left unanswered.

use proto::gateway_frame::Frame as Out;
use tracing::warn;

use crate::commands::frame;
use crate::error::Result;
use crate::gateway::handlers::{Effects, RequestContext, RequestHandler};
use crate::status::Code;

/// The SecretRequest handler.
pub struct SecretRequests;

impl RequestHandler<proto::Envelope> for SecretRequests {
    fn answer(&self, request: &RequestContext<'_>, env: proto::Envelope) -> Result<Effects> {
        let envelope = pki::dsse::Envelope::from_proto(&env);
        let node = request.node;
        match pki::statement::verify_secret_request(&envelope, &node.key, &node.node_id) {
            Ok((request, _)) => {
                let response = proto::SecretResponse {
                    request_id: request.request_id,
                    jwe: String::new(),
                    error: format!("{}: this stack holds no secrets", Code::SecretUnknown),
                };
                Ok(Effects::frame(frame(Out::SecretResponse(response))))
            }
            Err(e) => {
                warn!(node_id = %node.node_id, code = e.code(), "session: secret request refused");
                Ok(Effects::default())
            }
        }
    }
}
