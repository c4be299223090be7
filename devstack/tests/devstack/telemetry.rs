//! Authenticated exports seen from a hand-made node (docs/protocol.md,
//! "Telemetry"): once its spec's telemetry section names a `headers_ref`,
//! the secret broker seals that secret to the node (and no other secret),
//! and the OTLP receiver takes its exports only with each of those headers
//! at that value (`otlp-unauthenticated` otherwise), keeping their names
//! and logging no value.

use devstack::{DevStackOptions, SpecUpdate};

use crate::instances::secret_answer;
use crate::node::{TestNode, WAIT};
use crate::stack_with_pool;
use crate::websocket::{http_with, temperature, tls};

const TOKEN: &str = "receiver-s3cret-token";

#[tokio::test]
async fn a_headers_ref_is_sealed_to_its_node_and_its_headers_are_required_of_its_exports() {
    let logs = crate::Logs::global();
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let headers_ref =
        stack.put_secret(format!("Authorization=Bearer%20{TOKEN},X-Tenant=acme").as_bytes()).await.unwrap();
    let other = stack.put_secret(b"Authorization=Bearer%20someone-else").await.unwrap();
    let export = temperature(&node.id, r#"{"timeUnixNano":"1","asDouble":41.5}"#);
    let post = |headers: Vec<(&'static str, String)>| {
        let (stack, cert, body) = (&stack, node.cert.clone(), export.clone());
        async move {
            let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            http_with(tls(stack, Some(&cert)).await, "/v1/metrics", "application/json", &headers, body.as_bytes()).await
        }
    };
    let code = |body: &[u8]| -> String {
        let answer: serde_json::Value = serde_json::from_slice(body).unwrap();
        answer["message"].as_str().unwrap().split(':').next().unwrap().to_string()
    };

    // Before the section names it, the secret is not the node's.
    let (refused, _) = secret_answer(&mut session, &node, &headers_ref).await;
    assert!(refused.error.starts_with("secret-unknown: "), "{refused:?}");
    let (status, _) = post(Vec::new()).await;
    assert_eq!(status, 200, "no headers_ref: no header required");

    let telemetry = proto::TelemetrySection {
        otlp_endpoint: stack.otlp_url(),
        headers_ref: headers_ref.clone(),
        ..Default::default()
    };
    stack.publish_spec(&node.id, SpecUpdate { telemetry: Some(telemetry), ..Default::default() }).await.unwrap();
    let (answer, ephemeral) = secret_answer(&mut session, &node, &headers_ref).await;
    assert!(answer.error.is_empty(), "{answer:?}");
    let kid = pki::PublicKey::P256(ephemeral.public_key()).pin();
    let sealed = pki::jwe::open(&ephemeral, &kid, &answer.jwe).unwrap();
    assert_eq!(sealed, format!("Authorization=Bearer%20{TOKEN},X-Tenant=acme").as_bytes());
    let (refused, _) = secret_answer(&mut session, &node, &other).await;
    assert!(refused.error.starts_with("secret-unknown: "), "another secret stays unknown: {refused:?}");

    let bearer = format!("Bearer {TOKEN}");
    for (what, headers) in [
        ("no header", Vec::new()),
        ("one of two", vec![("authorization", bearer.clone())]),
        ("a wrong value", vec![("authorization", "Bearer guess".to_string()), ("x-tenant", "acme".into())]),
    ] {
        let (status, body) = post(headers).await;
        assert_eq!((status, code(&body)), (401, "otlp-unauthenticated".to_string()), "{what}");
    }
    let (status, _) = post(vec![("authorization", bearer.clone()), ("x-tenant", "acme".into())]).await;
    assert_eq!(status, 200);
    let kept = stack.await_export(&node.id, WAIT, |e| !e.headers.is_empty()).await.unwrap();
    assert_eq!(kept.headers, ["authorization", "x-tenant"]);
    assert_eq!(stack.otlp_exports(&node.id).len(), 2, "the first export and the authenticated one");

    stack.shutdown().await.unwrap();
    let text = logs.text();
    assert!(text.contains("otlp-unauthenticated"), "the refusals are logged");
    assert!(!text.contains(TOKEN), "the token reached the log");
}
