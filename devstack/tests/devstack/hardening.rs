//! What an outside review of the dev stack found, each kept as the test
//! named for it: a store file made owner-only, log lines that cannot be
//! forged, malformed input refused `InvalidArgument` with a code, limits
//! per node.

use devstack::{DevStack, DevStackOptions};

#[cfg(unix)]
#[tokio::test]
async fn a_store_file_is_owner_only_even_when_it_was_world_readable() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stack.sqlite");
    // A store made before the files were owner-only.
    let stack = DevStack::start(DevStackOptions::file(&path)).await.unwrap();
    stack.shutdown().await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        if std::path::Path::new(&file).exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let stack = DevStack::start(DevStackOptions::file(&path)).await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_release_url_cannot_forge_a_log_line() {
    let logs = crate::Logs::global();
    let stack = DevStack::start(DevStackOptions::memory()).await.unwrap();
    // A newline, a forged line and an escape sequence in the URL-decoded
    // version, and in the file name.
    for path in [
        "/releases/0.9.0%0a2026-01-01T00:00:00Z%20INFO%20forged-by-the-client%1b%5b31m/bcd-linux-amd64",
        "/releases/0.9.0/bcd-linux%0aforged-by-the-client%1b%5b31m",
    ] {
        assert_eq!(crate::node::http_get(&stack, path).await.0, 404, "{path}");
    }
    stack.shutdown().await.unwrap();
    let text = logs.text();
    assert!(text.contains("forged-by-the-client"), "the refusal was logged");
    for line in text.lines().filter(|l| l.contains("forged-by-the-client")) {
        assert!(line.contains("release download refused"), "a forged log line: {line:?}");
        assert!(!line.contains('\u{1b}'), "a raw ESC in the log: {line:?}");
    }
}

/// A codec that sends raw bytes and decodes the answers strictly.
struct RawCodec<U>(std::marker::PhantomData<U>);

struct RawEncoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, buf: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        prost::bytes::BufMut::put_slice(buf, &item);
        Ok(())
    }
}

impl<U: prost::Message + Default + Send + 'static> tonic::codec::Codec for RawCodec<U> {
    type Encode = Vec<u8>;
    type Decode = U;
    type Encoder = RawEncoder;
    type Decoder = proto::codec::StrictDecoder<U>;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> Self::Decoder {
        proto::codec::StrictDecoder::default()
    }
}

/// Calls `path` with `body` as its raw request message.
async fn raw_unary<U: prost::Message + Default + Send + 'static>(
    stack: &DevStack,
    cert: Option<crate::node::ClientCert>,
    path: &'static str,
    body: Vec<u8>,
) -> Result<U, tonic::Status> {
    let channel = crate::node::channel(stack, cert).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = RawCodec::<U>(std::marker::PhantomData);
    let path = http::uri::PathAndQuery::from_static(path);
    grpc.unary(tonic::Request::new(body), path, codec).await.map(|r| r.into_inner())
}

/// Opens a Session whose frames are the raw messages of `frames`, and reads
/// it to its end: the final status (Ok for a clean end).
async fn raw_session(
    stack: &DevStack,
    cert: crate::node::ClientCert,
    frames: Vec<Vec<u8>>,
) -> Result<(), tonic::Status> {
    let channel = crate::node::channel(stack, Some(cert)).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = RawCodec::<proto::GatewayFrame>(std::marker::PhantomData);
    let path = http::uri::PathAndQuery::from_static("/bc.agent.v1.Gateway/Session");
    // The stream stays open after the frames, as a node's does.
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    for f in frames {
        tx.send(f).await.unwrap();
    }
    let mut inbound = grpc
        .streaming(tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx)), path, codec)
        .await?
        .into_inner();
    let end = tokio::time::timeout(crate::node::WAIT, async {
        loop {
            match inbound.message().await {
                Ok(Some(f)) => {
                    if let Some(proto::gateway_frame::Frame::Ping(p)) = f.frame {
                        let pong = proto::NodeFrame {
                            seq: 0,
                            frame: Some(proto::node_frame::Frame::Pong(proto::Pong { nonce: p.nonce })),
                        };
                        let _ = tx.send(prost::Message::encode_to_vec(&pong)).await;
                    }
                }
                Ok(None) => return Ok(()),
                Err(status) => return Err(status),
            }
        }
    })
    .await;
    end.expect("the session ends in time")
}

/// A JoinRequest for a token join whose sealed token is `sealed`.
fn join_request(sealed: &str) -> Vec<u8> {
    let request = proto::JoinRequest {
        method: Some(proto::join_request::Method::Token(proto::TokenJoin {
            sealed_token: sealed.into(),
            csr_der: vec![1, 2, 3],
        })),
        claims: None,
    };
    prost::Message::encode_to_vec(&request)
}

fn assert_malformed<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str) {
    let status = r.expect_err(what);
    assert_eq!(
        (status.code(), devstack::status::code_of(&status)),
        (tonic::Code::InvalidArgument, "message-malformed"),
        "{what}: {status:?}"
    );
}

#[tokio::test]
async fn an_undecodable_join_request_is_invalid_argument_not_internal() {
    let stack = DevStack::start(DevStackOptions::memory()).await.unwrap();
    // Field 1 (token) with a length that is not a varint.
    let bad_varint = vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    let r = raw_unary::<proto::JoinReply>(&stack, None, "/bc.agent.v1.Join/Join", bad_varint).await;
    assert_malformed(r, "a bad varint");
    // A sealed token that is not UTF-8.
    let mut not_utf8 = join_request("AAAA");
    let at = not_utf8.windows(4).position(|w| w == b"AAAA").unwrap();
    not_utf8[at..at + 4].copy_from_slice(&[0xff, 0xfe, 0xfd, 0xfc]);
    let r = raw_unary::<proto::JoinReply>(&stack, None, "/bc.agent.v1.Join/Join", not_utf8).await;
    assert_malformed(r, "a string that is not UTF-8");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_undecodable_session_frame_is_refused_never_a_clean_close() {
    let logs = crate::Logs::global();
    let (stack, _pool, token) = crate::stack_with_pool(DevStackOptions::memory(), None).await;
    let node = crate::node::TestNode::join(&stack, &token).await.unwrap();
    let hello = prost::Message::encode_to_vec(&node.hello(0));
    // After the Hello, a frame whose seq is not a varint.
    let garbage = vec![0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    assert_malformed(
        raw_session(&stack, node.cert.clone(), vec![hello.clone(), garbage]).await,
        "a bad varint after the Hello",
    );
    // An undecodable first frame is refused the same way.
    let garbage = vec![0x52, 0x03, 0xff];
    assert_malformed(raw_session(&stack, node.cert.clone(), vec![garbage]).await, "an undecodable first frame");
    // An event seq of 2^63, which no store holds.
    let report = proto::NodeFrame {
        seq: 1 << 63,
        frame: Some(proto::node_frame::Frame::StatusReport(proto::StatusReport::default())),
    };
    let report = prost::Message::encode_to_vec(&report);
    assert_malformed(raw_session(&stack, node.cert.clone(), vec![hello, report]).await, "seq 2^63");
    stack.shutdown().await.unwrap();
    let text = logs.text();
    let closed: Vec<&str> =
        text.lines().filter(|l| l.contains(node.id.as_str()) && l.contains("session: closed")).collect();
    assert_eq!(closed.len(), 2, "{closed:#?}");
    for line in closed {
        assert!(line.contains("message-malformed") && !line.contains("the node closed the stream"), "{line}");
    }
}
