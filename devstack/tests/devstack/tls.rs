//! Bad connections are refused with a clear log line while a live session
//! keeps working: no ALPN, another ALPN, garbage bytes, a client certificate
//! from another CA; a foreign or expired client certificate is refused with
//! its stable code on every mTLS call.

use devstack::{CommandStatus, DevStackOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::node::{self, ClientCert, Session, TestNode, WAIT, diag_output};
use crate::{Logs, stack_with_pool};

/// Reads until the peer closes; true when it did within the wait.
async fn closed_by_peer<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// A certificate for `node_id` with `serial`, issued by a CA the stack
/// never heard of that bears the node CA's own name.
pub(crate) fn foreign_cert(node_id: &str, serial: &[u8]) -> ClientCert {
    let now = node::devstack_now_ms();
    let ca_key = pki::keys::random_p256();
    let profile = pki::x509::CaProfile {
        common_name: "bc node CA",
        organization: Some("compute.dev.local"),
        serial: &[1],
        validity: pki::x509::Validity { not_before_ms: now - 60_000, not_after_ms: now + 3_600_000 },
    };
    let ca = pki::x509::ca_certificate(&ca_key, &profile).unwrap();
    let key = pki::keys::random_p256();
    let csr = pki::x509::parse_csr(&pki::x509::csr(&key, "bcd").unwrap()).unwrap();
    let node = pki::x509::NodeCertificate {
        node_id,
        trust_domain: "compute.dev.local",
        tpm_ak_name: None,
        serial,
        not_before_ms: now - 60_000,
    };
    let leaf = pki::x509::issue_node_certificate(&ca_key, &ca, &csr, &node).unwrap();
    ClientCert { chain: vec![leaf, ca], key }
}

#[tokio::test]
async fn bad_connections_are_refused_while_a_session_keeps_working() {
    let logs = Logs::global();
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (diag, _) = session.expect_command().await;

    // Another ALPN: the handshake itself fails.
    assert!(node::dial(&stack, None, &[b"http/1.1"]).await.is_err());
    // No ALPN: the handshake completes, then the gateway closes.
    let mut tls = node::dial(&stack, None, &[]).await.expect("a TLS 1.3 handshake");
    assert!(closed_by_peer(&mut tls).await, "a connection without ALPN stayed open");
    // Garbage bytes on the TLS port.
    let mut tcp = tokio::net::TcpStream::connect(stack.gateway_addr()).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\x01garbage").await.unwrap();
    assert!(closed_by_peer(&mut tcp).await, "garbage did not close the connection");
    // A client certificate from another CA, naming the live node: refused
    // by the gateway with its code (the TLS layer takes it).
    let err = Session::open(&stack, Some(foreign_cert(&node.id, &[2])), node.hello(0)).await.err().expect("a refusal");
    assert_eq!(devstack::status::code_of(&err), "cert-unknown", "{err:?}");

    // The live session did not notice.
    session.complete(&diag, &diag_output(1)).await;
    session.heartbeat(1).await;
    stack.await_adopted(&node.id, WAIT).await.unwrap();
    let id = stack.enqueue_command(&node.id, "logs.collect", serde_json::json!({}), Default::default()).await.unwrap();
    let (cmd, _) = session.expect_command().await;
    assert_eq!(cmd.id, id);
    session.complete(&cmd, "{}").await;
    assert_eq!(stack.await_command(&id, WAIT).await.unwrap().state, CommandStatus::Succeeded);
    assert_eq!(stack.node_sessions(&node.id).unwrap().len(), 1);

    stack.shutdown().await.unwrap();
    let text = logs.text();
    for line in [
        "TLS handshake refused peer=127.0.0.1:",
        "the negotiated ALPN is not h2",
        "received corrupt message of type InvalidContentType",
        "code=\"cert-unknown\"",
    ] {
        assert!(text.contains(line), "no log line with {line:?} in\n{text}");
    }
}

#[tokio::test]
async fn a_gateway_on_another_address_is_named_by_its_certificate_and_dialed_by_ip() {
    // 127.0.0.2 stands for the host side of a veth pair or WSL's gateway:
    // a non-default address that the serving certificate must name.
    let host: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let options = DevStackOptions { listen_host: host, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    assert_eq!(stack.gateway_addr().ip(), host);
    assert!(stack.gateway_url().starts_with("https://127.0.0.2:"), "{}", stack.gateway_url());
    assert!(stack.http_url().starts_with("http://127.0.0.2:"));
    let now = node::devstack_now_ms();
    let serving = pki::x509::verify_issued(&gateway_leaf(&stack).await, stack.serving_ca_der(), now).unwrap();
    assert!(serving.ips.contains(&host), "{:?}", serving.ips);
    assert!(serving.dns_names.iter().any(|d| d == "gw.dev.local"));

    // Dialed by IP, checked for the IP itself and for gw.dev.local.
    for name in [rustls::pki_types::ServerName::IpAddress(host.into()), "gw.dev.local".try_into().unwrap()] {
        let connector = tokio_rustls::TlsConnector::from(node::client_config(&stack, None, &[b"h2"]));
        let tcp = tokio::net::TcpStream::connect(stack.gateway_addr()).await.unwrap();
        connector.connect(name.clone(), tcp).await.unwrap_or_else(|e| panic!("{name:?}: {e}"));
    }
    // A node joins and is adopted over it (node::channel dials gateway_addr with gw.dev.local).
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (diag, _) = session.expect_command().await;
    session.complete(&diag, &diag_output(1)).await;
    session.heartbeat(1).await;
    stack.await_node_state(&node.id, devstack::NodeState::Adopted, WAIT).await.unwrap();
    stack.shutdown().await.unwrap();

    // An advertised address (a namespace's view) is named too.
    let options = DevStackOptions {
        advertise_host: Some("127.0.0.3".into()),
        extra_dns_names: vec!["gw.example.test".into()],
        ..DevStackOptions::memory()
    };
    let stack = devstack::DevStack::start(options).await.unwrap();
    assert!(stack.gateway_url().starts_with("https://127.0.0.3:"));
    let serving = pki::x509::verify_issued(&gateway_leaf(&stack).await, stack.serving_ca_der(), now).unwrap();
    assert!(serving.ips.contains(&"127.0.0.3".parse().unwrap()), "{:?}", serving.ips);
    assert!(serving.dns_names.iter().any(|d| d == "gw.example.test"));
    stack.shutdown().await.unwrap();
}

/// The serving certificate the gateway presents.
async fn gateway_leaf(stack: &devstack::DevStack) -> Vec<u8> {
    let tls = node::dial(stack, None, &[b"h2"]).await.unwrap();
    let (_, session) = tls.get_ref();
    session.peer_certificates().unwrap()[0].as_ref().to_vec()
}

/// The gateway's three mTLS calls with `cert`: the refusal of each.
async fn refusals(stack: &devstack::DevStack, node: &TestNode, cert: &ClientCert) -> Vec<(tonic::Code, String)> {
    let code = |e: tonic::Status| (e.code(), devstack::status::code_of(&e).to_string());
    let session = Session::open(stack, Some(cert.clone()), node.hello(0)).await.err().expect("Session refused");
    let channel = node::channel(stack, Some(cert.clone())).await.unwrap();
    let mut client = proto::gateway_client::GatewayClient::new(channel);
    let (_, csr, _) = node::key_and_csr();
    let renew = client.renew(proto::RenewRequest { csr_der: csr, node_key: None }).await.expect_err("Renew refused");
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(proto::TunnelFrame { tunnel_id: "t".into(), frame: None }).await.unwrap();
    let tunnel = client.tunnel(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect_err("Tunnel refused");
    vec![code(session), code(renew), code(tunnel)]
}

/// Defect 15 (a foreign client certificate failed at the TLS handshake
/// with no code a node can act on): TLS takes any certificate whose key
/// signed the handshake, and the gateway answers one the node CA did not
/// issue, even bearing a real node's name and serial under a CA of the
/// node CA's name, `Unauthenticated` `cert-unknown`, and one the stack
/// issued that expired `PermissionDenied` `cert-validity`, on Session,
/// Renew and Tunnel alike; the node's own certificate still works.
#[tokio::test]
async fn a_foreign_or_expired_client_certificate_is_refused_with_a_stable_code() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let serial = pki::x509::describe_der(&node.cert.chain[0]).unwrap().serial;
    let foreign = foreign_cert(&node.id, &serial);
    assert_eq!(pki::x509::describe_der(&foreign.chain[0]).unwrap().serial, serial);
    let unknown = (tonic::Code::Unauthenticated, "cert-unknown".to_string());
    assert_eq!(refusals(&stack, &node, &foreign).await, vec![unknown.clone(); 3]);
    // The foreign leaf alone, without its CA.
    let alone = ClientCert { chain: vec![foreign.chain[0].clone()], key: foreign.key.clone() };
    assert_eq!(refusals(&stack, &node, &alone).await, vec![unknown; 3]);
    // A certificate the stack issued two days ago: expired.
    let (key, csr, _) = node::key_and_csr();
    let two_days_ago = node::devstack_now_ms() - 48 * 3_600_000;
    let row = stack.issue_node_cert_at(&node.id, &csr, two_days_ago).await.unwrap();
    let expired = ClientCert { chain: vec![row.der, stack.node_ca_der().to_vec()], key };
    let validity = (tonic::Code::PermissionDenied, "cert-validity".to_string());
    assert_eq!(refusals(&stack, &node, &expired).await, vec![validity; 3]);
    // The node's own certificate is still taken.
    let mut session = node.connect(&stack, 0).await.unwrap();
    session.expect_command().await;
    stack.shutdown().await.unwrap();
}

/// A node resumes its TLS session after the stack restarted on its file
/// (the ticket keys are the store's): the resumed connection authenticates
/// as its node, with the certificate its session began with, and is logged
/// as resumed. Once the node is revoked, its resumption is refused
/// `cert-revoked`, as a full handshake is.
#[tokio::test]
async fn a_session_resumes_across_a_restart_and_a_revoked_node_s_resumption_is_refused() {
    let logs = Logs::global();
    let dir = tempfile::tempdir().unwrap();
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::file(dir.path().join("stack.sqlite")), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    // One client configuration, so one session store, as bcd keeps one per identity.
    let config = node::client_config(&stack, Some(&node.cert), &[b"h2"]);
    let (channel, resumed) = node::channel_with(&stack, config.clone()).await.unwrap();
    assert!(!resumed, "the first connection is a full handshake");
    let mut session = Session::open_on(channel, node.hello(0)).await.unwrap();
    session.expect_welcome().await;

    let restart = stack.restart_options();
    stack.shutdown().await.unwrap();
    let stack = devstack::DevStack::start(restart).await.unwrap();
    let (channel, resumed) = node::channel_with(&stack, config.clone()).await.unwrap();
    assert!(resumed, "the restarted stack resumed the session");
    let mut session = Session::open_on(channel, node.hello(0)).await.unwrap();
    let welcome = session.expect_welcome().await;
    assert_eq!(welcome.session_epoch, 2);
    let line = format!("node_id={} epoch=2", node.id);
    let text = logs.text();
    let welcomed = text.lines().find(|l| l.contains("session: welcome") && l.contains(&line));
    assert!(welcomed.is_some_and(|l| l.contains("resumed=true")), "the resumed session is logged as such");

    stack.revoke_node(&node.id).await.unwrap();
    let (channel, resumed) = node::channel_with(&stack, config).await.unwrap();
    assert!(resumed, "the TLS session still resumes");
    let refused = Session::open_on(channel, node.hello(0)).await.err().expect("a refusal");
    assert_eq!(devstack::status::code_of(&refused), "cert-revoked", "{refused:?}");
}
