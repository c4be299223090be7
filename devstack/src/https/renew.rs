//! `POST /v1/renew` (docs/protocol.md, "Renewal over HTTPS"): the
//! `Gateway.Renew` of a node on the WebSocket transport, on the HTTPS
//! listener. The body is a binary protobuf `RenewRequest`
//! (`application/x-protobuf`), the answer a `RenewReply`; the caller is the
//! client certificate of its TLS connection, and the renewal is
//! `gateway::renew::renew`, the one the gRPC call runs.
//!
//! A refusal is an HTTP error whose body is the refusal's message,
//! `"<code>: <detail>"` (`text/plain`), with the status of its gRPC code
//! ([`http_status`]).

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prost::Message as _;
use tonic::Status;
use tracing::warn;

use crate::gateway::limit::{self, MAX_MESSAGE_BYTES};
use crate::gateway::{auth, renew as gateway_renew};
use crate::shared::Shared;
use crate::status::{self, Code, refuse};
use crate::tls::PeerInfo;

/// The renewal's path.
pub const PATH: &str = "/v1/renew";
/// The content type of the request and of the answer.
pub const CONTENT_TYPE: &str = "application/x-protobuf";

/// The HTTP status a refusal goes out with: the usual mapping of its gRPC
/// code (`frame-too-large` as 413).
pub fn http_status(refusal: &Status) -> StatusCode {
    if status::code_of(refusal) == Code::FrameTooLarge.as_str() {
        return StatusCode::PAYLOAD_TOO_LARGE;
    }
    match refusal.code() {
        tonic::Code::InvalidArgument | tonic::Code::OutOfRange => StatusCode::BAD_REQUEST,
        tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        tonic::Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A refusal as an HTTP answer.
pub fn refusal(refusal: &Status) -> Response {
    let content_type = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    (http_status(refusal), content_type, refusal.message().to_string()).into_response()
}

/// `POST /v1/renew`.
pub async fn renew(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<PeerInfo>,
    body: Body,
) -> Response {
    match answer(&shared, &peer, body).await {
        Ok(reply) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], reply.encode_to_vec()).into_response(),
        Err(status) => {
            warn!(
                rpc = "POST /v1/renew",
                peer = %peer.remote_addr,
                code = status::code_of(&status),
                message = status.message(),
                "gateway: renewal refused"
            );
            refusal(&status)
        }
    }
}

async fn answer(shared: &Shared, peer: &PeerInfo, body: Body) -> Result<proto::RenewReply, Status> {
    let node = auth::authenticate_peer(shared, Some(peer))?;
    let bytes = to_bytes(body, MAX_MESSAGE_BYTES).await.map_err(|e| limit::too_large(&e.to_string()))?;
    let request = proto::RenewRequest::decode(bytes.as_ref())
        .map_err(|e| refuse(Code::FrameMalformed, format!("the body is not a RenewRequest: {e}")))?;
    gateway_renew::renew(shared, &node, &request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_their_code_in_the_body_and_map_their_status() {
        assert_eq!(http_status(&refuse(Code::CertRevoked, "x")), StatusCode::FORBIDDEN);
        assert_eq!(http_status(&refuse(Code::CertUnknown, "x")), StatusCode::UNAUTHORIZED);
        assert_eq!(http_status(&refuse(Code::FrameTooLarge, "x")), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(http_status(&refuse(Code::FrameMalformed, "x")), StatusCode::BAD_REQUEST);
        assert_eq!(http_status(&refuse(Code::Internal, "x")), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
