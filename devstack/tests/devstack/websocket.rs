//! The HTTPS listener from a Rust node (docs/protocol.md, "WebSocket
//! transport", "Renewal over HTTPS"): a session over the WebSocket (Hello,
//! Welcome, the acceptance command, a live session named `websocket`),
//! refusals as close frames `4000 + status` with `"<code>: <detail>"`,
//! `POST /v1/renew` over HTTP/1.1, and the OTLP receiver's answers.

use devstack::{DevStack, DevStackOptions, Transport};
use futures_util::{SinkExt as _, StreamExt as _};
use prost::Message as _;
use proto::gateway_frame::Frame as Out;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::node::{ClientCert, TestNode, WAIT, client_config, key_and_csr};
use crate::stack_with_pool;

type Socket = tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<TcpStream>>;

/// A TLS connection to the HTTPS listener (ALPN `http/1.1`).
pub(crate) async fn tls(stack: &DevStack, cert: Option<&ClientCert>) -> tokio_rustls::client::TlsStream<TcpStream> {
    let connector = tokio_rustls::TlsConnector::from(client_config(stack, cert, &[b"http/1.1"]));
    let tcp = TcpStream::connect(stack.https_addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(devstack::SERVER_NAME).unwrap();
    connector.connect(name, tcp).await.unwrap()
}

async fn socket(stack: &DevStack, cert: Option<&ClientCert>) -> Socket {
    let url = format!("wss://{}/v1/session", devstack::SERVER_NAME);
    tokio_tungstenite::client_async(url, tls(stack, cert).await).await.expect("the upgrade").0
}

/// The next gateway frame, or the close frame's code and reason.
async fn next(ws: &mut Socket) -> Result<proto::GatewayFrame, (u16, String)> {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("a message in time") {
            Some(Ok(Message::Binary(b))) => return Ok(proto::GatewayFrame::decode(b.as_ref()).unwrap()),
            Some(Ok(Message::Close(Some(frame)))) => return Err((u16::from(frame.code), frame.reason.to_string())),
            Some(Ok(Message::Close(None))) | None => return Err((1005, String::new())),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err((0, e.to_string())),
        }
    }
}

async fn send(ws: &mut Socket, frame: &proto::NodeFrame) {
    ws.send(Message::Binary(frame.encode_to_vec().into())).await.unwrap();
}

#[tokio::test]
async fn a_session_runs_over_the_websocket() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut ws = socket(&stack, Some(&node.cert)).await;
    send(&mut ws, &node.hello(0)).await;
    let welcome = next(&mut ws).await.unwrap();
    assert!(matches!(welcome.frame, Some(Out::Welcome(ref w)) if w.session_epoch == 1), "{welcome:?}");
    assert_eq!(stack.live_transport(&node.id), Some(Transport::WebSocket));
    // The acceptance command comes next, as over gRPC.
    let delivery = next(&mut ws).await.unwrap();
    assert!(matches!(delivery.frame, Some(Out::Command(_))), "{delivery:?}");
    // A graceful end is a normal close, after the Drain frame.
    stack.shutdown().await.unwrap();
    assert!(matches!(next(&mut ws).await, Ok(proto::GatewayFrame { frame: Some(Out::Drain(_)), .. })));
    assert_eq!(next(&mut ws).await.unwrap_err().0, 1000);
}

#[tokio::test]
async fn refusals_are_close_frames_with_their_code() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();

    let mut anonymous = socket(&stack, None).await;
    let (code, reason) = next(&mut anonymous).await.unwrap_err();
    assert_eq!((code, reason.split(':').next().unwrap()), (4016, "cert-unknown"), "{reason}");

    let mut text = socket(&stack, Some(&node.cert)).await;
    text.send(Message::Text("hello".into())).await.unwrap();
    let (code, reason) = next(&mut text).await.unwrap_err();
    assert_eq!((code, reason.split(':').next().unwrap()), (4003, "frame-malformed"), "{reason}");

    let mut heartbeat_first = socket(&stack, Some(&node.cert)).await;
    let beat = proto::NodeFrame { seq: 0, frame: Some(proto::node_frame::Frame::Heartbeat(Default::default())) };
    send(&mut heartbeat_first, &beat).await;
    let (code, reason) = next(&mut heartbeat_first).await.unwrap_err();
    assert_eq!((code, reason.split(':').next().unwrap()), (4003, "hello-expected"), "{reason}");

    let mut huge = socket(&stack, Some(&node.cert)).await;
    let _ = huge.send(Message::Binary(vec![0u8; devstack::MAX_MESSAGE_BYTES + 1].into())).await;
    let (code, reason) = next(&mut huge).await.unwrap_err();
    assert_eq!((code, reason.split(':').next().unwrap()), (4003, "frame-too-large"), "{reason}");
    // Up to twice the limit the message is read whole, so the node that
    // wrote it all sees the close code, not a reset.
    let mut larger = socket(&stack, Some(&node.cert)).await;
    larger.send(Message::Binary(vec![0u8; 2 * devstack::MAX_MESSAGE_BYTES - 64].into())).await.unwrap();
    let (code, reason) = next(&mut larger).await.unwrap_err();
    assert_eq!((code, reason.split(':').next().unwrap()), (4003, "frame-too-large"), "{reason}");

    stack.revoke_node(&node.id).await.unwrap();
    let mut revoked = socket(&stack, Some(&node.cert)).await;
    let (code, reason) = next(&mut revoked).await.unwrap_err();
    assert_eq!((code, reason.split(':').next().unwrap()), (4007, "cert-revoked"), "{reason}");
    assert!(stack.node_sessions(&node.id).unwrap().is_empty(), "no refused socket opened a session");
    stack.shutdown().await.unwrap();
}

/// One HTTP/1.1 request over `io`; the status and the body.
async fn http<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    io: S,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, Vec<u8>) {
    http_with(io, path, content_type, &[], body).await
}

/// One HTTP/1.1 request over `io` with `headers` besides its own; the
/// status and the body.
pub(crate) async fn http_with<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut io: S,
    path: &str,
    content_type: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let extra: String = headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        devstack::SERVER_NAME,
        body.len()
    );
    io.write_all(head.as_bytes()).await.unwrap();
    io.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    let _ = io.read_to_end(&mut answer).await;
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").expect("a head");
    let status = String::from_utf8_lossy(&answer[9..12]).parse().unwrap();
    let head = String::from_utf8_lossy(&answer[..split]).to_lowercase();
    let mut rest = answer[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        // One chunk is all these answers hold.
        let line = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16).unwrap();
        rest = rest[line + 2..line + 2 + size].to_vec();
    }
    (status, rest)
}

#[tokio::test]
async fn renewal_over_https_answers_a_renew_reply_or_a_refusal() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let (_key, csr_der, pin) = key_and_csr();
    let request = proto::RenewRequest { csr_der, node_key: None }.encode_to_vec();
    let (status, body) =
        http(tls(&stack, Some(&node.cert)).await, "/v1/renew", "application/x-protobuf", &request).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let reply = proto::RenewReply::decode(body.as_slice()).unwrap();
    let env = pki::dsse::Envelope::from_proto(&reply.response.unwrap());
    let response = pki::join::verify_response(&env, &stack.join_signing_key(), &pin).unwrap();
    assert_eq!(response.node_id, node.id);
    assert_eq!(stack.node_certs(&node.id).unwrap().len(), 2);

    let (status, body) =
        http(tls(&stack, Some(&node.cert)).await, "/v1/renew", "application/x-protobuf", b"\xff").await;
    assert_eq!((status, String::from_utf8_lossy(&body).split(':').next().unwrap()), (400, "frame-malformed"));
    let (status, body) = http(tls(&stack, None).await, "/v1/renew", "application/x-protobuf", &request).await;
    assert_eq!((status, String::from_utf8_lossy(&body).split(':').next().unwrap()), (401, "cert-unknown"));
    stack.revoke_node(&node.id).await.unwrap();
    let (status, body) =
        http(tls(&stack, Some(&node.cert)).await, "/v1/renew", "application/x-protobuf", &request).await;
    assert_eq!((status, String::from_utf8_lossy(&body).split(':').next().unwrap()), (403, "cert-revoked"));
    stack.shutdown().await.unwrap();
}

/// An export of `node_id` with one point of `bcd.gpu.temperature` whose
/// data point is `point`.
pub(crate) fn temperature(node_id: &str, point: &str) -> String {
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"bcd.node.id","value":{{"stringValue":"{node_id}"}}}}]}},
        "scopeMetrics":[{{"metrics":[{{"name":"bcd.gpu.temperature","gauge":{{"dataPoints":[{point}]}}}}]}}]}}]}}"#
    )
}

#[tokio::test]
async fn the_otlp_receiver_keeps_good_exports_and_refuses_malformed_ones() {
    let logs = crate::Logs::global();
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let export = temperature(&node.id, r#"{"timeUnixNano":"1","asDouble":41.5}"#);
    let post = |body: Vec<u8>, content_type: &'static str| {
        let (stack, cert) = (&stack, node.cert.clone());
        async move { http(tls(stack, Some(&cert)).await, "/v1/metrics", content_type, &body).await }
    };
    let (status, body) = post(export.clone().into_bytes(), "application/json").await;
    assert_eq!((status, body.as_slice()), (200, b"{}".as_slice()));
    let kept = stack.await_export(&node.id, WAIT, |_| true).await.unwrap();
    assert_eq!(kept.body, export.as_bytes());
    assert_eq!(devstack::point_value(kept.points("bcd.gpu.temperature")[0]), Some(41.5));

    let code = |body: &[u8]| -> String {
        let answer: serde_json::Value = serde_json::from_slice(body).unwrap();
        answer["message"].as_str().unwrap().split(':').next().unwrap().to_string()
    };
    let malformed = br#"{"resourceMetrics":[{"scopeMetrics":"node-otlp-private-marker"}]}"#;
    let (status, body) = post(malformed.to_vec(), "application/json").await;
    assert_eq!((status, code(&body)), (400, "otlp-malformed".to_string()));
    // What the official types would decode, and the receiver must not take.
    for point in [
        r#"{"asInt":"many"}"#,
        r#"{"asInt":1.5}"#,
        r#"{"asDouble":"many"}"#,
        r#"{"timeUnixNano":"soon","asDouble":1.0}"#,
        r#"{"asInt":"1","asDouble":1.0}"#,
        r#"{"asInt":"1","attributes":[{"key":"gpu.index","value":{"intValue":"many"}}]}"#,
    ] {
        let (status, body) = post(temperature(&node.id, point).into_bytes(), "application/json").await;
        assert_eq!((status, code(&body)), (400, "otlp-malformed".to_string()), "{point}");
    }
    let (status, _) = post(b"x".to_vec(), "text/plain").await;
    assert_eq!(status, 415);

    // Another node's name, from this node's certificate: refused, not kept.
    let spoofed = temperature("node_someone_else", r#"{"timeUnixNano":"1","asDouble":999.0}"#);
    let (status, body) = post(spoofed.clone().into_bytes(), "application/json").await;
    assert_eq!((status, code(&body)), (403, "node-mismatch".to_string()));
    // No certificate, over TLS or the plain HTTP side: refused, not kept.
    let (status, body) = http(tls(&stack, None).await, "/v1/metrics", "application/json", export.as_bytes()).await;
    assert_eq!((status, code(&body)), (401, "cert-unknown".to_string()));
    let plain = stack.http_url().trim_start_matches("http://").to_string();
    let (status, body) =
        http(TcpStream::connect(&plain).await.unwrap(), "/v1/metrics", "application/json", export.as_bytes()).await;
    assert_eq!((status, code(&body)), (401, "cert-unknown".to_string()));
    assert_eq!(stack.otlp_exports(&node.id).len(), 1);
    assert!(stack.otlp_exports("node_someone_else").is_empty());

    stack.shutdown().await.unwrap();
    let text = logs.text();
    assert!(text.contains("otlp: malformed export refused"), "{text}");
    assert!(!text.contains("node-otlp-private-marker"), "the malformed body reached the log");
}

/// Defect 15 over the HTTPS listener: it takes any client certificate at
/// TLS as the gateway does, and the WebSocket session answers a foreign
/// CA's certificate bearing the node's name and serial with `cert-unknown`
/// and an expired one the stack issued with `cert-validity`, as close
/// frames.
#[tokio::test]
async fn a_foreign_or_expired_certificate_is_refused_over_the_websocket_too() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let serial = pki::x509::describe_der(&node.cert.chain[0]).unwrap().serial;
    let foreign = crate::tls::foreign_cert(&node.id, &serial);
    let mut ws = socket(&stack, Some(&foreign)).await;
    let (code, reason) = next(&mut ws).await.unwrap_err();
    assert_eq!((code, reason.split(':').next().unwrap()), (4016, "cert-unknown"), "{reason}");
    let (key, csr, _) = key_and_csr();
    let two_days_ago = crate::node::devstack_now_ms() - 48 * 3_600_000;
    let row = stack.issue_node_cert_at(&node.id, &csr, two_days_ago).await.unwrap();
    let expired = ClientCert { chain: vec![row.der, stack.node_ca_der().to_vec()], key };
    let mut ws = socket(&stack, Some(&expired)).await;
    let (code, reason) = next(&mut ws).await.unwrap_err();
    assert_eq!((code, reason.split(':').next().unwrap()), (4007, "cert-validity"), "{reason}");
    stack.shutdown().await.unwrap();
}
