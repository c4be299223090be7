//! Workload identity: the WorkloadTokenRequest handler. Under signed
//! intent the stack's workload issuer (named in the trust bundle) mints a
//! workload token (docs/formats.md, "Workload token": ES256 JWT, `iss`
//! `https://<trust domain>/workload`, `aud` the audience asked for, `sub`
//! `instance:<id>`, `node`, `iat`, `exp` an hour later) for an instance
//! that runs on the asking node as the stack knows it; any other instance
//! is `workload-instance`, and a stack without signed intent answers
//! `workload-unsupported`. Tokens are never logged.

use proto::gateway_frame::Frame as Out;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::error::Result;
use crate::frames::frame;
use crate::gateway::handlers::{Effects, RequestContext, RequestHandler};
use crate::status::Code;
use crate::store::instances;
use crate::store::rows::{InstanceDesired, InstanceState};

/// How long a workload token is valid.
pub const TOKEN_TTL_S: i64 = 3600;

/// The `iss` of the stack's workload tokens.
pub fn issuer(trust_domain: &str) -> String {
    format!("https://{trust_domain}/workload")
}

/// The WorkloadTokenRequest handler.
pub struct WorkloadTokens;

impl RequestHandler<proto::WorkloadTokenRequest> for WorkloadTokens {
    fn answer(&self, request: &RequestContext<'_>, message: proto::WorkloadTokenRequest) -> Result<Effects> {
        let node_id = &request.node.node_id;
        let answer = |token: String, error: String| {
            Ok(Effects::frame(frame(Out::WorkloadTokenResponse(proto::WorkloadTokenResponse {
                request_id: message.request_id.clone(),
                token,
                error,
            }))))
        };
        let Some(intent) = &request.shared.keys.intent else {
            return answer(
                String::new(),
                format!("{}: this stack runs without signed intent", Code::WorkloadUnsupported),
            );
        };
        let row = request.shared.ledger.read(|c| instances::get(c, &message.instance_id))?;
        let running = row.as_ref().is_some_and(|r| {
            r.node_id.as_deref() == Some(node_id.as_str())
                && r.state == InstanceState::Running
                && r.desired != InstanceDesired::Deleted
        });
        if !running || message.audience.is_empty() {
            warn!(node_id = %node_id, instance_id = %message.instance_id, "workload: token refused");
            return answer(
                String::new(),
                format!("{}: instance {:?} is not running on this node", Code::WorkloadInstance, message.instance_id),
            );
        }
        let iat = now_ms() / 1000;
        let claims = pki::jws::WorkloadToken {
            iss: issuer(&request.shared.settings.options.trust_domain),
            aud: message.audience.clone(),
            sub: format!("instance:{}", message.instance_id),
            node: node_id.clone(),
            iat,
            exp: iat + TOKEN_TTL_S,
        };
        let token = pki::jws::sign(&intent.workload_issuer, &claims);
        info!(node_id = %node_id, instance_id = %message.instance_id, audience = %message.audience, "workload: token minted");
        answer(token, String::new())
    }
}
