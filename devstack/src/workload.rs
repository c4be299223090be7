//! Workload identity: the WorkloadTokenRequest handler. This stack issues
//! no workload tokens yet, so every request is answered
//! `workload-unsupported`.

use proto::gateway_frame::Frame as Out;

use crate::commands::frame;
use crate::error::Result;
use crate::gateway::handlers::{Effects, RequestContext, RequestHandler};
use crate::status::Code;

/// The WorkloadTokenRequest handler.
pub struct WorkloadTokens;

impl RequestHandler<proto::WorkloadTokenRequest> for WorkloadTokens {
    fn answer(&self, _request: &RequestContext<'_>, message: proto::WorkloadTokenRequest) -> Result<Effects> {
        let response = proto::WorkloadTokenResponse {
            request_id: message.request_id,
            token: String::new(),
            error: format!("{}: this stack issues no workload tokens yet", Code::WorkloadUnsupported),
        };
        Ok(Effects::frame(frame(Out::WorkloadTokenResponse(response))))
    }
}
