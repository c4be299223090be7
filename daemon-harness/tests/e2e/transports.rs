//! The WebSocket transport (docs/protocol.md, "WebSocket transport"): a
//! node on the WebSocket alone runs a signed inventory.refresh and renews
//! over `POST /v1/renew`; with the gRPC gateway unreachable and both
//! configured, bcd falls back to the WebSocket and is adopted; a revoked
//! node's WebSocket session is refused (exit 3).

use devstack::{CommandOptions, CommandStatus, Transport};
use serde_json::json;

use crate::common::{DEADLINE, Env, Transports};

#[tokio::test(flavor = "multi_thread")]
async fn a_node_on_the_websocket_runs_signed_commands_and_renews_over_https() {
    let Some(env) = Env::start("a_node_on_the_websocket_runs_signed_commands_and_renews_over_https").await else {
        return;
    };
    let pool = env.must_create_pool("l40s", Some(4)).await;
    let mut node = env.must_make_node("websocket", "l40s").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let grpc_epoch = env.await_transport(&id, Transport::Grpc, 1).await;
    node.stop().await;

    // Restarted with only [websocket] url, renewing 3 s after taking each certificate.
    env.must_use_websocket(&node, Transports::WebSocketOnly);
    let certs_before = env.stack.node_certs(&id).unwrap().len();
    node.set_env("BCD_RENEW_AFTER", "3s");
    node.start().unwrap();
    let epoch = env.await_transport(&id, Transport::WebSocket, grpc_epoch + 1).await;

    let cmd = env.stack.enqueue_command(&id, "inventory.refresh", json!({}), CommandOptions::default()).await.unwrap();
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    assert_eq!(env.stack.live_transport(&id), Some(Transport::WebSocket), "the command ran over the WebSocket");

    let certs = env
        .stack
        .await_until("a renewal over POST /v1/renew", DEADLINE, |v| {
            Some(v.node_certs(&id)).filter(|c| c.len() > certs_before)
        })
        .await
        .unwrap();
    assert!(certs.len() > certs_before);
    let renewed = node.logs().await_line(DEADLINE, "renew.renewed").await.expect("bcd logs its renewal");
    assert!(renewed.contains("transport=https"), "{renewed}");
    let status = node.status().await.unwrap();
    assert_eq!(status["session"]["transport"], json!("websocket"), "{status}");
    assert_eq!(env.stack.live_epoch(&id), Some(epoch), "the session went on across the renewal");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_grpc_gateway_unreachable_bcd_falls_back_to_the_websocket_and_is_adopted() {
    let scenario = "with_the_grpc_gateway_unreachable_bcd_falls_back_to_the_websocket_and_is_adopted";
    let Some(env) = Env::start(scenario).await else { return };
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut node = env.must_make_node("fallback", "hgx-h100").await;
    let id = env.must_join(&node, &pool).await;

    env.must_use_websocket(&node, Transports::UnreachableGrpcAndWebSocket);
    node.start().unwrap();
    env.stack.await_adopted(&id, DEADLINE).await.expect("adopted over the WebSocket");
    assert_eq!(env.stack.live_transport(&id), Some(Transport::WebSocket));
    let line = node.logs().await_line(DEADLINE, "session.fallback").await.expect("bcd logs the fallback");
    assert!(line.contains("transport=websocket"), "{line}");
    node.stop().await;

    // With both reachable, gRPC comes first again.
    env.must_use_websocket(&node, Transports::GrpcAndWebSocket);
    let epoch = env.stack.view(|v| v.node_sessions(&id).len() as u64).unwrap();
    node.start().unwrap();
    env.await_transport(&id, Transport::Grpc, epoch + 1).await;
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_nodes_websocket_session_is_refused() {
    let Some(env) = Env::start("a_revoked_nodes_websocket_session_is_refused").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("revoked-ws", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    node.stop().await;
    env.must_use_websocket(&node, Transports::WebSocketOnly);
    let sessions = env.stack.node_sessions(&id).unwrap().len() as u64;
    node.start().unwrap();
    env.await_transport(&id, Transport::WebSocket, sessions + 1).await;

    // The live WebSocket session gets the RevocationNotice: exit 3, not restarted.
    env.stack.revoke_node(&id).await.unwrap();
    let state =
        node.supervisor().unwrap().await_state(DEADLINE, "bcd to exit after revocation", |s| s.finished).await.unwrap();
    assert_eq!(state.exits.last().copied().flatten(), Some(3), "{state:?}");
    node.stop().await;

    // A new start is refused at the upgrade: a close frame 4007 "cert-revoked: …", exit 3.
    let sessions_before = env.stack.node_sessions(&id).unwrap().len();
    let out = node.run(&["node", "--config", &node.config().to_string_lossy()], None, DEADLINE).await.unwrap();
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(format!("{}{}", out.stdout, out.stderr).contains("cert-revoked"), "{out:?}");
    assert_eq!(env.stack.node_sessions(&id).unwrap().len(), sessions_before, "no session was opened");
    env.report();
}
