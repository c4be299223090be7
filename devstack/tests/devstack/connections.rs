//! Connections (docs/devstack.md, "Connections"), each test named for the
//! defect an outside review found: idle connections kept forever (TLS done
//! and nothing sent, no TLS at all, a slow HTTP request), no cap, a
//! half-open connection, and a request that never arrives.

use std::time::{Duration, Instant};

use devstack::{ConnectionOptions, DevStack, DevStackOptions};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::Endpoint;

use crate::node::{self, TestNode, WAIT};
use crate::stack_with_pool;

/// Short deadlines, so that the tests see them pass.
fn quick() -> ConnectionOptions {
    ConnectionOptions {
        handshake_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
        keepalive_interval: Duration::from_millis(300),
        keepalive_timeout: Duration::from_millis(300),
        ..ConnectionOptions::default()
    }
}

/// Waits for the peer to close `stream`; how long that took, or `None`
/// when it stayed open for the whole wait.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, wait: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((start + wait).into(), stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn idle_connections_are_not_kept_forever() {
    let options = DevStackOptions { connections: quick(), ..DevStackOptions::memory() };
    let stack = DevStack::start(options).await.unwrap();
    // 50 clients that complete TLS 1.3 with ALPN h2 and no certificate,
    // then send nothing (not even the HTTP/2 preface).
    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(node::dial(&stack, None, &[b"h2"]).await.unwrap());
    }
    // And some that never start TLS.
    let mut silent = Vec::new();
    for _ in 0..10 {
        silent.push(TcpStream::connect(stack.gateway_addr()).await.unwrap());
    }
    for tls in &mut idle {
        let took = closed_within(tls, WAIT).await.expect("an idle TLS connection was kept");
        assert!(took < Duration::from_secs(8), "closed after {took:?}");
    }
    for tcp in &mut silent {
        closed_within(tcp, WAIT).await.expect("a connection that never started TLS was kept");
    }
    // The HTTP side: a connection that sends nothing, and one that sends
    // half a request header, slowly.
    let http = stack.http_url().trim_start_matches("http://").to_string();
    let mut nothing = TcpStream::connect(&http).await.unwrap();
    let mut slow = TcpStream::connect(&http).await.unwrap();
    slow.write_all(b"GET /.well-known/better-compute HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    closed_within(&mut nothing, WAIT).await.expect("an idle HTTP connection was kept");
    closed_within(&mut slow, WAIT).await.expect("a half-sent HTTP request was kept");
    // The HTTPS listener: TLS done, nothing sent.
    let config = node::client_config(&stack, None, &[b"http/1.1"]);
    let tcp = TcpStream::connect(stack.https_addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(devstack::SERVER_NAME).unwrap();
    let mut https = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.unwrap();
    closed_within(&mut https, WAIT).await.expect("an idle HTTPS connection was kept");
    // A real node still joins.
    let pool = stack.create_pool(devstack::PoolSpec { name: "p".into(), ..Default::default() }).await.unwrap();
    let token = stack.mint_join_token(&pool, 1, Duration::from_secs(60)).await.unwrap();
    TestNode::join(&stack, &token).await.unwrap();
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_connection_beyond_the_cap_is_shed_with_a_stable_code() {
    let connections =
        ConnectionOptions { max_connections: 4, max_shed: 2, http_max_connections: 2, ..ConnectionOptions::default() };
    let (stack, _pool, token) =
        stack_with_pool(DevStackOptions { connections, ..DevStackOptions::memory() }, None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(node::dial(&stack, None, &[b"h2"]).await.unwrap());
    }
    // The fifth is answered, with the code and a retry-after hint.
    let err = node.connect(&stack, 0).await.err().expect("a refusal");
    assert_eq!(
        (err.code(), devstack::status::code_of(&err)),
        (tonic::Code::Unavailable, "connection-limit"),
        "{err:?}"
    );
    assert_eq!(err.metadata().get(devstack::RETRY_AFTER_MS).unwrap(), "1000");
    // Beyond the shed allowance a connection is closed at once.
    let mut shed = Vec::new();
    for _ in 0..2 {
        shed.push(node::dial(&stack, None, &[b"h2"]).await.unwrap());
    }
    let mut beyond = TcpStream::connect(stack.gateway_addr()).await.unwrap();
    closed_within(&mut beyond, WAIT).await.expect("a connection beyond the shed allowance was kept");
    // Once the held ones go, a node connects again.
    drop(held);
    drop(shed);
    let connected = async {
        loop {
            match node.connect(&stack, 0).await {
                Ok(session) => return session,
                Err(e) => assert_eq!(devstack::status::code_of(&e), "connection-limit", "{e:?}"),
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(WAIT, connected).await.expect("a session once the cap had room");
    // The HTTP side: beyond its cap, 503 with the code.
    let http = stack.http_url().trim_start_matches("http://").to_string();
    let _a = TcpStream::connect(&http).await.unwrap();
    let _b = TcpStream::connect(&http).await.unwrap();
    let mut c = TcpStream::connect(&http).await.unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(WAIT, c.read_to_string(&mut answer)).await;
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("connection-limit: "), "{answer}");
    // The HTTPS listener has its own count, and sheds the same way.
    let tls = || async {
        let config = node::client_config(&stack, None, &[b"http/1.1"]);
        let tcp = TcpStream::connect(stack.https_addr()).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from(devstack::SERVER_NAME).unwrap();
        tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.unwrap()
    };
    let (_d, _e) = (tls().await, tls().await);
    let mut f = tls().await;
    f.write_all(b"GET /v1/session HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(WAIT, f.read_to_string(&mut answer)).await;
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("connection-limit: "), "{answer}");
    stack.shutdown().await.unwrap();
}

/// A TCP proxy to `to` that forwards both ways until `freeze` turns true,
/// then forwards nothing while keeping both sockets open (a half-open
/// path); it reports when the upstream side was closed.
async fn freezing_proxy(
    to: std::net::SocketAddr,
) -> (std::net::SocketAddr, tokio::sync::watch::Sender<bool>, tokio::sync::oneshot::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (freeze, frozen) = tokio::sync::watch::channel(false);
    let (closed_tx, closed) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        let upstream = TcpStream::connect(to).await.unwrap();
        let (mut cr, mut cw) = client.into_split();
        let (mut ur, mut uw) = upstream.into_split();
        let f1 = frozen.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n) = cr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if !*f1.borrow() {
                    let _ = uw.write_all(&buf[..n]).await;
                }
            }
            let _ = uw;
        });
        let mut buf = [0u8; 16 * 1024];
        loop {
            match ur.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) if !*frozen.borrow() => {
                    let _ = cw.write_all(&buf[..n]).await;
                }
                Ok(_) => {}
            }
        }
        let _ = closed_tx.send(());
        // Keep the client's side open: it is the half-open end.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(cw);
    });
    (addr, freeze, closed)
}

#[tokio::test]
async fn a_half_open_connection_is_closed() {
    let options = DevStackOptions { connections: quick(), heartbeat_interval_ms: 60_000, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let (proxy, freeze, closed) = freezing_proxy(stack.gateway_addr()).await;
    let config = node::client_config(&stack, Some(&node.cert), &[b"h2"]);
    let connector = tower::service_fn(move |_uri: http::Uri| {
        let config = config.clone();
        async move {
            let tcp = TcpStream::connect(proxy).await?;
            let name = rustls::pki_types::ServerName::try_from("gw.dev.local").unwrap();
            let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
            Ok::<_, std::io::Error>(TokioIo::new(tls))
        }
    });
    let channel = Endpoint::from_static("http://gw.dev.local").connect_with_connector(connector).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(node.hello(0)).await.unwrap();
    let mut client = proto::gateway_client::GatewayClient::new(channel);
    let mut inbound = client.session(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    assert!(inbound.message().await.unwrap().unwrap().frame.is_some(), "a Welcome");
    // The path goes dead: no FIN, no RST, nothing answers the PINGs. The
    // session's liveness is a minute away; the connection's keepalive is not.
    let frozen_at = Instant::now();
    freeze.send(true).unwrap();
    tokio::time::timeout(WAIT, closed).await.expect("the gateway kept a half-open connection").unwrap();
    assert!(frozen_at.elapsed() < Duration::from_secs(5), "closed after {:?}", frozen_at.elapsed());
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_request_that_never_arrives_is_answered_request_timeout() {
    let options = DevStackOptions { connections: quick(), ..DevStackOptions::memory() };
    let stack = DevStack::start(options).await.unwrap();
    let channel = node::channel(&stack, None).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    // A Join whose request message never comes.
    let never = tokio_stream::pending::<proto::JoinRequest>();
    let path = http::uri::PathAndQuery::from_static("/bc.agent.v1.Join/Join");
    let codec = proto::codec::StrictCodec::<proto::JoinRequest, proto::JoinReply>::default();
    let started = Instant::now();
    let err = tokio::time::timeout(WAIT, grpc.client_streaming(tonic::Request::new(never), path, codec))
        .await
        .expect("an answer in time")
        .unwrap_err();
    assert_eq!(
        (err.code(), devstack::status::code_of(&err)),
        (tonic::Code::DeadlineExceeded, "request-timeout"),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_peer_that_sends_nothing_holds_no_handshake_slot() {
    let handshake_timeout = Duration::from_secs(3);
    let connections = ConnectionOptions { max_handshakes: 1, handshake_timeout, ..quick() };
    let stack = DevStack::start(DevStackOptions { connections, ..DevStackOptions::memory() }).await.unwrap();
    // Silent connections, more than the slots: each waits for its
    // ClientHello without a slot, so a client that speaks is not held up
    // until their handshake timeout.
    let mut silent = Vec::new();
    for _ in 0..5 {
        silent.push(TcpStream::connect(stack.gateway_addr()).await.unwrap());
    }
    for _ in 0..3 {
        let started = Instant::now();
        node::dial(&stack, None, &[b"h2"]).await.expect("a handshake behind silent peers completes");
        assert!(started.elapsed() < handshake_timeout / 2, "held up {:?} behind silent peers", started.elapsed());
    }
    for tcp in &mut silent {
        closed_within(tcp, WAIT).await.expect("a silent connection is closed at the handshake timeout");
    }
}

#[tokio::test]
async fn a_peer_that_stalls_after_a_byte_holds_its_handshake_slot_for_two_seconds_at_most() {
    let handshake_timeout = Duration::from_secs(8);
    let connections = ConnectionOptions { max_handshakes: 1, handshake_timeout, ..quick() };
    let stack = DevStack::start(DevStackOptions { connections, ..DevStackOptions::memory() }).await.unwrap();
    // The first byte of a TLS record, then nothing: it takes the one slot.
    let mut stalled = TcpStream::connect(stack.gateway_addr()).await.unwrap();
    stalled.write_all(&[0x16]).await.unwrap();
    let started = Instant::now();
    node::dial(&stack, None, &[b"h2"]).await.expect("a handshake behind a stalled peer completes");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(4), "held up {took:?} behind a stalled peer (its slot is 2 s at most)");
    closed_within(&mut stalled, WAIT).await.expect("the stalled connection is closed at the handshake timeout");
}
