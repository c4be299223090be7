//! Consoles seen from the stack's side, with a Rust node that plays bcd's
//! half of `Gateway.Tunnel` over real mTLS: the OpenTunnel and its ticket,
//! pairing by certificate and ticket, the relay both ways, refusals the
//! node reports, the stack's own refusals (limit, unknown tunnel, another
//! ticket, timeout), and either side going away. (bcd's real shell on a
//! real PTY is `daemon-harness/tests/e2e/console.rs`.)

use std::time::{Duration, Instant};

use devstack::{
    ConsoleEnd, ConsoleOptions, ConsoleSize, DevStack, DevStackOptions, Error, TunnelOptions, status::Code,
};
use proto::gateway_frame::Frame as Out;
use proto::tunnel_frame::Frame as Tf;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::node::{Session, TestNode, WAIT, channel, diag_output};
use crate::{Logs, stack_with_pool};

/// How soon the other side must see a tunnel end.
const WITHIN: Duration = Duration::from_secs(1);

/// A stack under signed intent with `tunnels`, and an adopted node's session.
async fn stack_and_node(tunnels: TunnelOptions) -> (DevStack, TestNode, Session) {
    let options = DevStackOptions { signed_intent: true, tunnels, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (diag, _) = session.expect_command().await;
    session.complete(&diag, &diag_output(1)).await;
    session.expect_desired_state().await;
    (stack, node, session)
}

/// The node's side of one Tunnel call.
struct NodeTunnel {
    tx: mpsc::Sender<proto::TunnelFrame>,
    rx: Streaming<proto::TunnelFrame>,
    id: String,
}

impl NodeTunnel {
    /// Calls Tunnel as `node` with `first` as its first frame.
    async fn call(stack: &DevStack, node: &TestNode, id: &str, first: Tf) -> Result<NodeTunnel, tonic::Status> {
        let channel = channel(stack, Some(node.cert.clone())).await.unwrap();
        let mut client = proto::gateway_client::GatewayClient::new(channel);
        let (tx, rx) = mpsc::channel(16);
        tx.send(proto::TunnelFrame { tunnel_id: id.to_string(), frame: Some(first) }).await.unwrap();
        let rx = client.tunnel(ReceiverStream::new(rx)).await?.into_inner();
        Ok(NodeTunnel { tx, rx, id: id.to_string() })
    }

    async fn send(&self, f: Tf) {
        self.tx.send(proto::TunnelFrame { tunnel_id: self.id.clone(), frame: Some(f) }).await.unwrap();
    }

    /// The next frame from the stack, or None once the stream ended.
    async fn next(&mut self) -> Option<Tf> {
        match tokio::time::timeout(WAIT, self.rx.message()).await.expect("a frame or the end in time") {
            Ok(Some(f)) => f.frame,
            Ok(None) => None,
            Err(status) => panic!("the tunnel ended with {status:?}"),
        }
    }
}

/// The OpenTunnel the node's session received.
async fn open_tunnel(session: &mut Session) -> proto::OpenTunnel {
    let f = session.wait_for(|f| matches!(f.frame, Some(Out::OpenTunnel(_)))).await.unwrap();
    let Some(Out::OpenTunnel(open)) = f.frame else { unreachable!() };
    open
}

#[tokio::test]
async fn a_console_relays_both_ways_and_ends_with_the_exit_status() {
    let logs = Logs::global();
    let (stack, node, mut session) = stack_and_node(TunnelOptions::default()).await;
    let options = ConsoleOptions {
        size: ConsoleSize { rows: 40, cols: 120 },
        term: "vt100".into(),
        subject: "alice".into(),
        ..ConsoleOptions::default()
    };
    let mut console = stack.open_console_with(&node.id, options).await.unwrap();
    let open = open_tunnel(&mut session).await;
    assert_eq!(open.tunnel_id, console.tunnel_id());
    assert_eq!((open.size, open.term.as_str()), (Some(proto::TerminalSize { rows: 40, cols: 120 }), "vt100"));
    let issuer = stack.intent_public_keys().unwrap().tunnels_issuer;
    let pki::PublicKey::P256(issuer) = issuer else { panic!("the tunnels issuer is P-256") };
    let iss = pki::jws::tunnels_issuer(stack.trust_domain());
    let ticket = pki::jws::verify_exec_ticket(&open.ticket, &[issuer], &iss, &node.id, crate::node::devstack_now_ms())
        .expect("the ticket verifies under the bundle's tunnels issuer");
    assert_eq!((ticket.sub.as_str(), ticket.op.as_str()), ("alice", "console"));
    assert_eq!(stack.open_tunnels(&node.id), 1);

    let mut tunnel = NodeTunnel::call(&stack, &node, &open.tunnel_id, Tf::Ticket(open.ticket.clone())).await.unwrap();
    console.await_opened(WAIT).await.unwrap();
    tunnel.send(Tf::Data(b"$ ".to_vec())).await;
    console.await_output("$ ", WAIT).await.unwrap();
    console.write("typed-secret-7\n").await.unwrap();
    assert_eq!(tunnel.next().await, Some(Tf::Data(b"typed-secret-7\n".to_vec())));
    console.resize(ConsoleSize { rows: 50, cols: 132 }).await.unwrap();
    assert_eq!(tunnel.next().await, Some(Tf::Resize(proto::TerminalSize { rows: 50, cols: 132 })));
    tunnel.send(Tf::ExitCode(5)).await;
    assert_eq!(console.await_end(WAIT).await.unwrap(), ConsoleEnd::Exited(5));
    assert_eq!(tunnel.next().await, None, "the stack ends the node's stream after the exit status");
    stack
        .await_until("the tunnel to be forgotten", WAIT, |_| (stack.open_tunnels(&node.id) == 0).then_some(()))
        .await
        .unwrap();

    let text = logs.text();
    assert!(text.contains(console.tunnel_id()), "the tunnel is logged by its id");
    assert!(!text.contains(&open.ticket), "the ticket is never logged");
    assert!(!text.contains("typed-secret-7"), "typed bytes are never logged");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_refusal_the_node_reports_reaches_the_caller_with_its_code() {
    let (stack, node, mut session) = stack_and_node(TunnelOptions::default()).await;
    let mut console = stack.open_console(&node.id, ConsoleSize::default()).await.unwrap();
    let open = open_tunnel(&mut session).await;
    let reason = format!("{}: ticket tkt_1 was already used on this node", Code::TicketReplayed);
    let mut tunnel = NodeTunnel::call(&stack, &node, &open.tunnel_id, Tf::CloseReason(reason.clone())).await.unwrap();
    assert_eq!(tunnel.next().await, None, "the stack ends a refused tunnel's stream");
    let end = console.await_end(WAIT).await.unwrap();
    assert_eq!((end.code(), &end), (Some("ticket-replayed"), &ConsoleEnd::Closed(reason)));
    assert_eq!(stack.open_tunnels(&node.id), 0);
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_stack_refuses_beyond_the_limit_unknown_tunnels_and_other_tickets() {
    let tunnels = TunnelOptions { max_per_node: 2, ..TunnelOptions::default() };
    let (stack, node, mut session) = stack_and_node(tunnels).await;
    let mut first = stack.open_console(&node.id, ConsoleSize::default()).await.unwrap();
    let _second = stack.open_console(&node.id, ConsoleSize::default()).await.unwrap();
    match stack.open_console(&node.id, ConsoleSize::default()).await {
        Err(Error::Refused { code: Code::TunnelLimit, .. }) => {}
        Err(e) => panic!("the third console: {e}"),
        Ok(_) => panic!("the third console opened"),
    }
    let status = NodeTunnel::call(&stack, &node, "tun_none", Tf::Ticket("x".into())).await.err().unwrap();
    assert_eq!((status.code(), devstack::status::code_of(&status)), (tonic::Code::NotFound, "tunnel-unknown"));
    let open = open_tunnel(&mut session).await;
    assert_eq!(open.tunnel_id, first.tunnel_id());
    let other = open_tunnel(&mut session).await;
    let status = NodeTunnel::call(&stack, &node, &open.tunnel_id, Tf::Ticket(other.ticket)).await.err().unwrap();
    assert_eq!((status.code(), devstack::status::code_of(&status)), (tonic::Code::PermissionDenied, "tunnel-ticket"));
    assert_eq!(first.await_end(WAIT).await.unwrap().code(), Some("tunnel-ticket"), "its caller is told");
    assert!(stack.open_console(&node.id, ConsoleSize::default()).await.is_ok(), "the refused tunnel freed its place");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_node_that_never_dials_ends_the_console_at_the_open_timeout() {
    let tunnels = TunnelOptions { open_timeout: Duration::from_millis(200), ..TunnelOptions::default() };
    let (stack, node, _session) = stack_and_node(tunnels).await;
    let mut console = stack.open_console(&node.id, ConsoleSize::default()).await.unwrap();
    assert_eq!(console.await_end(WAIT).await.unwrap().code(), Some("tunnel-timeout"));
    assert_eq!(stack.open_tunnels(&node.id), 0);
    let offline = stack.open_console("node_unknown", ConsoleSize::default()).await;
    assert!(matches!(offline, Err(Error::NoSession { .. })), "a node without a session gets no console");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn either_side_going_away_ends_the_other_within_a_second() {
    let (stack, node, mut session) = stack_and_node(TunnelOptions::default()).await;

    // The caller goes away: the node is told and its stream ends.
    let mut console = stack.open_console(&node.id, ConsoleSize::default()).await.unwrap();
    let open = open_tunnel(&mut session).await;
    let mut tunnel = NodeTunnel::call(&stack, &node, &open.tunnel_id, Tf::Ticket(open.ticket)).await.unwrap();
    console.await_opened(WAIT).await.unwrap();
    let gone = Instant::now();
    drop(console);
    match tunnel.next().await {
        Some(Tf::CloseReason(reason)) => assert!(reason.starts_with("tunnel-gone: "), "{reason}"),
        other => panic!("the node got {other:?}, not a close reason"),
    }
    assert_eq!(tunnel.next().await, None);
    assert!(gone.elapsed() < WITHIN, "the node heard of it in {:?}", gone.elapsed());

    // The node goes away: the caller sees the end.
    let mut console = stack.open_console(&node.id, ConsoleSize::default()).await.unwrap();
    let open = open_tunnel(&mut session).await;
    let tunnel = NodeTunnel::call(&stack, &node, &open.tunnel_id, Tf::Ticket(open.ticket)).await.unwrap();
    console.await_opened(WAIT).await.unwrap();
    drop(tunnel);
    assert_eq!(console.await_end(WITHIN).await.unwrap().code(), Some("tunnel-gone"), "within a second");

    // The stack shuts down: an open console ends `draining`.
    let mut console = stack.open_console(&node.id, ConsoleSize::default()).await.unwrap();
    let open = open_tunnel(&mut session).await;
    let _tunnel = NodeTunnel::call(&stack, &node, &open.tunnel_id, Tf::Ticket(open.ticket)).await.unwrap();
    console.await_opened(WAIT).await.unwrap();
    stack.shutdown().await.unwrap();
    assert_eq!(console.await_end(WAIT).await.unwrap().code(), Some("draining"));
}
