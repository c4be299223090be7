//! The secret broker: secrets a test or an operator puts
//! ([`DevStack::put_secret`], stored in the `secrets` table and never
//! logged), and the SecretRequest handler. A request must be a statement
//! signed with the session's key (a refused one is logged and left
//! unanswered); it is answered with the secret sealed to its ephemeral
//! P-256 key (docs/formats.md, "Secret response") only when an instance
//! placed on the asking node and not deleted names that secret as its user
//! data, or the telemetry section of the node's latest spec names it as its
//! `headers_ref`, and `secret-unknown` otherwise, so a node learns nothing
//! of other nodes' secrets, not even that they exist.

use proto::gateway_frame::Frame as Out;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::error::Result;
use crate::frames::frame;
use crate::gateway::handlers::{Effects, RequestContext, RequestHandler};
use crate::ids;
use crate::shared::Shared;
use crate::spec;
use crate::status::Code;
use crate::store::rows::InstanceDesired;
use crate::store::{instances, secrets};

/// The SecretRequest handler.
pub struct SecretRequests;

impl RequestHandler<proto::Envelope> for SecretRequests {
    fn answer(&self, request: &RequestContext<'_>, env: proto::Envelope) -> Result<Effects> {
        let envelope = pki::dsse::Envelope::from_proto(&env);
        let node = request.node;
        let (asked, ephemeral) = match pki::statement::verify_secret_request(&envelope, &node.key, &node.node_id) {
            Ok(verified) => verified,
            Err(e) => {
                warn!(node_id = %node.node_id, code = e.code(), "session: secret request refused");
                return Ok(Effects::default());
            }
        };
        let secret = request.shared.ledger.read(|c| {
            let referenced = instances::on_node(c, &node.node_id)?
                .iter()
                .any(|i| i.desired != InstanceDesired::Deleted && i.spec.user_data_secret == asked.secret_ref)
                || spec::telemetry_headers_ref(c, &node.node_id)?.as_deref() == Some(asked.secret_ref.as_str());
            if !referenced {
                return Ok(None);
            }
            secrets::get(c, &asked.secret_ref)
        })?;
        let response = match secret {
            Some(value) => {
                let jwe =
                    pki::statement::seal_secret_response(&ephemeral, &value, &pki::jwe::SealRandomness::from_os());
                info!(node_id = %node.node_id, request_id = %asked.request_id, secret_ref = %asked.secret_ref, "secret: sealed to the node");
                proto::SecretResponse { request_id: asked.request_id, jwe, error: String::new() }
            }
            None => {
                warn!(node_id = %node.node_id, secret_ref = %asked.secret_ref, "secret: not one of this node's instances' or its telemetry headers");
                proto::SecretResponse {
                    request_id: asked.request_id,
                    jwe: String::new(),
                    error: format!("{}: no secret {:?} for this node", Code::SecretUnknown, asked.secret_ref),
                }
            }
        };
        Ok(Effects::frame(frame(Out::SecretResponse(response))))
    }
}

/// Stores a secret (instance user data, say) and returns its reference;
/// the value is never logged and reaches a node only sealed, for one of
/// its instances.
pub fn put_secret(shared: &Shared, value: &[u8]) -> Result<String> {
    let id = ids::secret_id();
    shared.ledger.write(|c| Ok(secrets::insert(c, &id, value, now_ms())?))?;
    info!(secret_ref = %id, bytes = value.len(), "secret: stored");
    Ok(id)
}
