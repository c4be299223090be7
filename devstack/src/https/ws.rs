//! The Session over a WebSocket (docs/protocol.md, "WebSocket transport"):
//! `GET /v1/session` upgraded on the HTTPS listener, one binary protobuf
//! frame per message (`NodeFrame` in, `GatewayFrame` out), run by the very
//! session of `Gateway.Session` (`gateway::session::run`): Hello first,
//! heartbeats, pings, drain, revocation and the 1 MiB limit are its rules,
//! not this module's.
//!
//! The caller is authenticated by the client certificate of its TLS
//! connection, checked against `node_certs` as for gRPC. A refusal, at the
//! upgrade's first instant or later, is a close frame whose code is
//! `4000 + <the refusal's gRPC status code>` and whose reason is the
//! refusal's message, `"<code>: <detail>"` (cut to the 123 bytes a close
//! reason may hold). A graceful end (Drain, RevocationNotice, the node's
//! own close) is a normal close (1000). A text message, or a binary one
//! that is not a `NodeFrame`, is refused `frame-malformed`; one above
//! 1 MiB `frame-too-large`.

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use futures_util::{SinkExt as _, StreamExt as _};
use prost::Message as _;
use tokio::sync::mpsc;
use tonic::Status;
use tracing::{debug, warn};

use crate::gateway::limit::{self, MAX_MESSAGE_BYTES};
use crate::gateway::{GatewayService, auth, session};
use crate::hub::Transport;
use crate::status::{self, Code, refuse};
use crate::tls::PeerInfo;

/// The session endpoint's path.
pub const PATH: &str = "/v1/session";

/// The session's URL (`wss://host:port/v1/session`) on the HTTPS listener
/// at `https_base` (`https://host:port`).
pub fn url(https_base: &str) -> String {
    format!("wss://{}{PATH}", https_base.trim_start_matches("https://"))
}
/// The first close code of refusals: a refusal closes with this plus its
/// gRPC status code (4003 InvalidArgument, 4007 PermissionDenied, …).
pub const REFUSAL_CLOSE_BASE: u16 = 4000;
/// The longest close reason (RFC 6455: 125 bytes of payload, 2 of them the code).
pub const MAX_CLOSE_REASON: usize = 123;
/// How much of a message the socket reads: twice the frame limit, so that
/// a message over the limit (and under this) is read whole and refused with
/// a close frame the node sees, instead of the connection being dropped
/// under a node that is still writing it (a reset, and no close code).
/// Beyond this bound the connection is dropped (docs/protocol.md,
/// "WebSocket transport").
const READ_BOUND: usize = 2 * MAX_MESSAGE_BYTES;
/// How many frames may wait for a slow node before the session blocks.
const OUTBOUND_BUFFER: usize = 64;

/// The upgrade: every session opens, or is refused, on the socket.
pub async fn upgrade(
    State(gateway): State<GatewayService>,
    ConnectInfo(peer): ConnectInfo<PeerInfo>,
    ws: WebSocketUpgrade,
) -> Response {
    let ws = ws.max_message_size(READ_BOUND).max_frame_size(READ_BOUND);
    ws.on_upgrade(move |socket| serve(gateway, peer, socket))
}

/// The close frame of a refusal.
pub fn close_frame(refusal: &Status) -> CloseFrame {
    let mut reason = refusal.message();
    if reason.len() > MAX_CLOSE_REASON {
        let mut end = MAX_CLOSE_REASON;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason = &reason[..end];
    }
    CloseFrame { code: REFUSAL_CLOSE_BASE + refusal.code() as u16, reason: reason.into() }
}

/// Runs one WebSocket: authenticates, runs the session over it, and writes
/// what the session sends until it ends.
async fn serve(gateway: GatewayService, peer: PeerInfo, socket: WebSocket) {
    let GatewayService { shared, handlers } = gateway;
    let (mut sink, stream) = socket.split();
    let opened = auth::authenticate_peer(&shared, Some(&peer)).and_then(|node| {
        if shared.is_draining() { Err(refuse(Code::Draining, "the dev stack is shutting down")) } else { Ok(node) }
    });
    let node = match opened {
        Ok(node) => node,
        Err(refusal) => {
            warn!(rpc = "WebSocket Session", peer = %peer.remote_addr, code = status::code_of(&refusal), message = refusal.message(), "gateway: refused");
            let _ = sink.send(Message::Close(Some(close_frame(&refusal)))).await;
            return;
        }
    };
    let node_id = node.node_id.clone();
    let (out, mut frames) = mpsc::channel(OUTBOUND_BUFFER);
    let inbound = tokio_stream::StreamExt::filter_map(stream, inbound);
    tokio::spawn(session::run(shared, handlers, node, Transport::WebSocket, inbound, out));
    let close = loop {
        match frames.recv().await {
            Some(Ok(frame)) => {
                if let Err(e) = sink.send(Message::Binary(frame.encode_to_vec().into())).await {
                    debug!(node_id = %node_id, error = %e, "websocket: the node is gone");
                    return;
                }
            }
            Some(Err(refusal)) => break close_frame(&refusal),
            None => break CloseFrame { code: 1000, reason: "".into() },
        }
    };
    debug!(node_id = %node_id, code = close.code, reason = %close.reason, "websocket: closing");
    let _ = sink.send(Message::Close(Some(close))).await;
}

/// One message from the node as the session reads it: a binary message is
/// one `NodeFrame`; pings and pongs are the WebSocket's own (skipped); the
/// close ends the stream.
fn inbound(message: Result<Message, axum::Error>) -> Option<Result<proto::NodeFrame, Status>> {
    match message {
        Ok(Message::Binary(bytes)) if bytes.len() > MAX_MESSAGE_BYTES => {
            Some(Err(limit::too_large(&format!("a message of {} bytes", bytes.len()))))
        }
        Ok(Message::Binary(bytes)) => Some(
            proto::NodeFrame::decode(bytes.as_ref())
                .map_err(|e| refuse(Code::FrameMalformed, format!("a binary message that is not a NodeFrame: {e}"))),
        ),
        Ok(Message::Text(_)) => Some(Err(refuse(Code::FrameMalformed, "a text message: frames are binary protobuf"))),
        Ok(Message::Ping(_) | Message::Pong(_) | Message::Close(_)) => None,
        Err(e) => Some(Err(transport_error(e))),
    }
}

/// A read error: the contract's `frame-too-large` for a message above the
/// limit, else a plain transport error (the session ends as closed).
fn transport_error(e: axum::Error) -> Status {
    let inner = e.into_inner();
    match inner.downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Capacity(capacity)) => limit::too_large(&capacity.to_string()),
        _ => Status::unavailable(format!("websocket: {inner}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_close_with_their_status_and_a_reason_that_fits() {
        let revoked = close_frame(&refuse(Code::CertRevoked, "certificate 01 of node_1 was revoked at 5"));
        assert_eq!(revoked.code, 4007);
        assert_eq!(revoked.reason.as_str(), "cert-revoked: certificate 01 of node_1 was revoked at 5");
        let long = close_frame(&refuse(Code::HelloExpected, "é".repeat(100)));
        assert_eq!(long.code, 4003);
        assert!(long.reason.len() <= MAX_CLOSE_REASON && long.reason.as_str().starts_with("hello-expected: é"));
        assert_eq!(close_frame(&refuse(Code::CertUnknown, "none")).code, 4016);
    }

    #[test]
    fn messages_become_frames_or_refusals() {
        let hello = proto::NodeFrame { seq: 0, frame: Some(proto::node_frame::Frame::Hello(Default::default())) };
        let ok = inbound(Ok(Message::Binary(hello.encode_to_vec().into()))).unwrap().unwrap();
        assert_eq!(ok, hello);
        let text = inbound(Ok(Message::Text("hi".into()))).unwrap().unwrap_err();
        assert_eq!(status::code_of(&text), "frame-malformed");
        let garbage = inbound(Ok(Message::Binary(vec![0xff, 0xff].into()))).unwrap().unwrap_err();
        assert_eq!(status::code_of(&garbage), "frame-malformed");
        assert!(inbound(Ok(Message::Ping(Default::default()))).is_none());
    }
}
