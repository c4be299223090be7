//! The admin endpoint's checks as a browser or another local user would
//! meet them: a request without the bearer token is 401 whatever it
//! carries (a token in the query or a cookie, a rebinding site's Host), a
//! request with it for a host that is not loopback is 421, and the CLI's
//! client trusts only a discovery file of this user's. Revocation through
//! the endpoint: a state, new work refused with its code, done once.

use std::sync::Arc;

use devstack::admin::{Admin, AdminOptions, discovery};
use devstack::{DevStack, DevStackOptions};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The status of a raw HTTP/1.1 GET of `/v1/stack` with these headers.
async fn status(url: &str, headers: &str) -> u16 {
    let mut tcp = TcpStream::connect(url.trim_start_matches("http://")).await.unwrap();
    let request = format!("GET /v1/stack HTTP/1.1\r\n{headers}Connection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {text:?}"))
}

#[tokio::test]
async fn without_the_token_or_for_another_host_the_endpoint_answers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Arc::new(DevStack::start(DevStackOptions::memory()).await.unwrap());
    let options = AdminOptions {
        discovery: dir.path().join("admin").join("admin.json"),
        data_dir: dir.path().to_path_buf(),
        default_pool: "default".into(),
        releases: None,
    };
    let admin = Admin::serve(stack.clone(), options).await.unwrap();
    let found = discovery::read_trusted(admin.discovery_path()).unwrap();
    let token = std::fs::read_to_string(&found.token_file).unwrap();
    let bearer = format!("Authorization: Bearer {}\r\n", token.trim());
    let host = format!("Host: {}\r\n", admin.url().trim_start_matches("http://"));
    let port = admin.url().rsplit(':').next().unwrap().to_string();

    assert_eq!(status(admin.url(), &format!("{host}{bearer}")).await, 200);
    assert_eq!(status(admin.url(), &format!("Host: localhost:{port}\r\n{bearer}")).await, 200);
    for (without_token, what) in [
        (host.clone(), "no token"),
        (format!("{host}Cookie: token={}\r\n", token.trim()), "a cookie"),
        (format!("Host: rebound.example:{port}\r\n"), "a rebinding site"),
        (format!("{host}Origin: http://evil.example\r\n"), "a cross-site request"),
    ] {
        assert_eq!(status(admin.url(), &without_token).await, 401, "{what}");
    }
    // With the token (leaked, say), a rebinding site's Host is still refused.
    assert_eq!(status(admin.url(), &format!("Host: rebound.example:{port}\r\n{bearer}")).await, 421);
    assert_eq!(status(admin.url(), &format!("Host: 10.0.0.1:{port}\r\n{bearer}")).await, 421);
    admin.shutdown().await;
}

#[tokio::test]
async fn revocation_is_a_state_refuses_new_work_with_its_code_and_happens_once() {
    use devstack::admin::api::{NodeSummary, Revoked};
    use devstack::admin::client::{AdminClient, ClientError};
    let dir = tempfile::tempdir().unwrap();
    let (stack, _pool, token) = crate::stack_with_pool(DevStackOptions::memory(), None).await;
    let stack = Arc::new(stack);
    let node = crate::node::TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    stack.await_session(&node.id, 1, crate::node::WAIT).await.unwrap();
    let options = AdminOptions {
        discovery: dir.path().join("admin.json"),
        data_dir: dir.path().to_path_buf(),
        default_pool: "gpu".into(),
        releases: None,
    };
    let admin = Admin::serve(stack.clone(), options).await.unwrap();
    let client = AdminClient::discover(admin.discovery_path()).unwrap();
    let refused = |e: ClientError| match e {
        ClientError::Refused { status, code, message } => (status, code, message),
        other => panic!("{other}"),
    };

    // A kind or params the list does not have: 400 with the code, nothing enqueued.
    let enqueued = stack.commands(&node.id).unwrap().len();
    let command =
        |kind: &str, params: serde_json::Value| serde_json::json!({"node": node.id, "kind": kind, "params": params});
    let e = client.post::<_, serde_json::Value>("/v1/commands", &command("diag.nvm", serde_json::json!({}))).await;
    let (status, code, message) = refused(e.unwrap_err());
    assert_eq!((status, code.as_str()), (400, "kind-unknown"), "{message}");
    assert!(message.contains("did you mean \"diag.nvml\""), "{message}");
    let e = client.post::<_, serde_json::Value>("/v1/commands", &command("diag.nvml", serde_json::json!([1]))).await;
    assert_eq!(refused(e.unwrap_err()).1, "params-invalid");
    assert_eq!(stack.commands(&node.id).unwrap().len(), enqueued);
    let e = client.get::<serde_json::Value>("/v1/nodes/%20").await;
    assert_eq!(refused(e.unwrap_err()).1, "node-unknown", "a name that is not there");

    let first: Revoked = client.post(&format!("/v1/nodes/{}/revoke", node.id), &serde_json::json!({})).await.unwrap();
    assert!(!first.already_revoked && first.session_notified && first.certificates == 1, "{first:?}");
    let (end, _) = session.until_end().await;
    assert!(end.is_ok(), "{end:?}");
    let again: Revoked = client.post(&format!("/v1/nodes/{}/revoke", node.id), &serde_json::json!({})).await.unwrap();
    assert!(again.already_revoked && !again.session_notified && again.certificates == 0, "{again:?}");
    assert_eq!(again.revoked_at_ms, first.revoked_at_ms);
    let revoked_events = stack.recent_events().iter().filter(|e| e.to_json()["event"] == "revoked").count();
    assert_eq!(revoked_events, 1, "one revoked event");
    let nodes: Vec<NodeSummary> = client.get("/v1/nodes").await.unwrap();
    assert_eq!((nodes[0].state.as_str(), nodes[0].revoked_at_ms), ("revoked", Some(first.revoked_at_ms)));
    let e = client.post::<_, serde_json::Value>("/v1/commands", &command("diag.nvml", serde_json::json!({}))).await;
    let (status, code, _) = refused(e.unwrap_err());
    assert_eq!((status, code.as_str()), (409, "node-revoked"));
    let e =
        client.post::<_, serde_json::Value>("/v1/reservations", &serde_json::json!({"node": node.id, "gpus": 1})).await;
    assert_eq!(refused(e.unwrap_err()).1, "node-revoked");
    admin.shutdown().await;
}
