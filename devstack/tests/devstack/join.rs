//! Join, adoption and desired state; join refusals; the well-known document.

use std::time::Duration;

use devstack::{CommandStatus, DevStack, DevStackOptions, Error, NodeState};
use pki::PublicKey;
use proto::gateway_frame::Frame as Out;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::node::{self, TestNode, WAIT, diag_output};
use crate::{Logs, stack_with_pool};

#[tokio::test]
async fn a_node_joins_is_adopted_and_gets_its_desired_state() {
    let logs = Logs::global();
    let (stack, pool, token) = stack_with_pool(DevStackOptions::memory(), Some(8)).await;
    let mark = stack.join_mark().unwrap();
    let node = TestNode::join(&stack, &token).await.unwrap();
    assert_eq!(stack.await_new_node(&pool, mark, WAIT).await.unwrap().id, node.id);
    assert!(node.id.starts_with("node_") && node.id.len() == 21);

    // The signed response: chain, trust domain, gateway, pool; no roots without signed intent.
    let r = &node.response;
    assert_eq!(r.certificate_chain.len(), 2);
    assert_eq!(r.certificate_chain[1], stack.node_ca_der());
    let leaf = pki::x509::verify_issued(&r.certificate_chain[0], stack.node_ca_der(), node::devstack_now_ms()).unwrap();
    assert_eq!(leaf.common_name, node.id);
    assert_eq!(leaf.uris, [pki::x509::node_spiffe_id("compute.dev.local", &node.id)]);
    assert_eq!(leaf.validity.not_after_ms - leaf.validity.not_before_ms, pki::x509::NODE_CERT_VALIDITY_MS);
    assert_eq!(r.trust_domain, "compute.dev.local");
    assert_eq!(r.pool_id, pool);
    let gw = r.gateway.as_ref().unwrap();
    assert_eq!((gw.url.as_str(), gw.server_name.as_str()), (stack.gateway_url(), "gw.dev.local"));
    assert_eq!(gw.serving_ca_spki_pin, stack.pins().serving_ca);
    let trust = r.trust.as_ref().unwrap();
    assert!(trust.command_roots.is_empty() && trust.trust_bundle.is_none());

    // The session: Welcome, the acceptance check, adoption, desired state.
    let mut session = node.connect(&stack, 0).await.unwrap();
    let w = &session.welcome;
    assert_eq!((w.session_epoch, w.acked_seq, w.lane_credits, w.heartbeat_interval_ms), (1, 0, 4, 5000));
    let (cmd, env) = session.expect_command().await;
    assert_eq!((cmd.kind.as_str(), cmd.node_id.as_str(), cmd.retry_safe), ("diag.nvml", node.id.as_str(), true));
    assert!(env.signatures.is_empty());
    assert_eq!(stack.node(&node.id).unwrap().unwrap().state, NodeState::Accepting);
    let seq = session.complete(&cmd, &diag_output(8)).await;
    assert_eq!(session.acked, seq);
    let (spec, spec_env) = session.expect_desired_state().await;
    assert_eq!((spec.node_id.as_str(), spec.generation), (node.id.as_str(), 1));
    assert!(spec_env.signatures.is_empty());
    session.heartbeat(1).await;
    let adopted = stack.await_adopted(&node.id, WAIT).await.unwrap();
    assert_eq!((adopted.spec_generation, adopted.applied_generation), (1, 1));
    assert!(adopted.adopted_at_ms.is_some());

    // What the store says.
    let outcome = stack.await_command(&cmd.id, WAIT).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded);
    assert_eq!(outcome.output_json().unwrap()["gpus"], 8);
    let history: Vec<_> = stack.command_updates(&cmd.id).unwrap().into_iter().map(|u| u.state).collect();
    assert_eq!(history, [CommandStatus::Accepted, CommandStatus::Running, CommandStatus::Succeeded]);
    let row = stack.command(&cmd.id).unwrap().unwrap();
    assert_eq!((row.deliveries, row.result.is_some()), (1, true));
    let sessions = stack.node_sessions(&node.id).unwrap();
    assert_eq!((sessions.len(), sessions[0].boot_id.as_str()), (1, "boot-1"));
    assert_eq!(sessions[0].journal_id, node.journal_id);
    let certs = stack.node_certs(&node.id).unwrap();
    assert_eq!((certs.len(), certs[0].der.as_slice()), (1, r.certificate_chain[0].as_slice()));
    let tokens = stack.join_tokens(&pool).unwrap();
    assert_eq!(tokens[0].uses, 1);
    assert_ne!(tokens[0].token_sha256, token);

    // An enqueued command reaches the live session without a reconnect.
    let id = stack.enqueue_command(&node.id, "inventory.refresh", serde_json::json!({}), Default::default()).await;
    let (cmd, _) = session.expect_command().await;
    assert_eq!(cmd.id, id.unwrap());
    session.complete(&cmd, "{}").await;
    assert_eq!(stack.await_command(&cmd.id, WAIT).await.unwrap().state, CommandStatus::Succeeded);

    stack.shutdown().await.unwrap();
    let text = logs.text();
    assert!(text.contains(&format!("join: node joined node_id={}", node.id)), "{text}");
    assert!(!text.contains(&token), "the join token reached the logs");
    assert!(!text.contains(&token["bc_jt_".len()..]), "the join token reached the logs");
}

#[tokio::test]
async fn signed_intent_signs_commands_specs_and_trust() {
    let options = DevStackOptions { signed_intent: true, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let trust = node.response.trust.clone().unwrap();
    let roots: Vec<PublicKey> = trust.command_roots.iter().map(|k| PublicKey::from_proto(k).unwrap()).collect();
    assert_eq!(roots, stack.command_roots());
    assert_eq!(roots.len(), 1);
    let keys = stack.intent_public_keys().unwrap();
    let bundle_env = pki::dsse::Envelope::from_proto(&trust.trust_bundle.unwrap());
    let payload = bundle_env.verify(proto::payload_type::TRUST_BUNDLE, &keys.approvers, 2).unwrap();
    let bundle: proto::TrustBundle = pki::dsse::decode(payload).unwrap();
    assert_eq!((bundle.sequence, bundle.trust_domain.as_str()), (1, "compute.dev.local"));
    pki::intent::check_quorum(&bundle).unwrap();
    assert_eq!(bundle.command_roots[0], roots[0].to_proto());

    let mut session = node.connect(&stack, 0).await.unwrap();
    let (cmd, env) = session.expect_command().await;
    let env = pki::dsse::Envelope::from_proto(&env);
    assert_eq!(pki::intent::verify_command(&env, &roots, &node.id, node::devstack_now_ms()).unwrap(), cmd);
    session.complete(&cmd, &diag_output(4)).await;
    let (_, spec_env) = session.expect_desired_state().await;
    let spec_env = pki::dsse::Envelope::from_proto(&spec_env);
    let spec = pki::intent::verify_spec(&spec_env, &roots, &node.id, pki::intent::SignedSpecs::Always, None).unwrap();
    assert_eq!(spec.generation, 1);
    session.heartbeat(1).await;
    stack.await_adopted(&node.id, WAIT).await.unwrap();

    // A test can inject an unsigned command into the live session.
    let forged = proto::Command {
        id: "cmd_forged".into(),
        node_id: node.id.clone(),
        kind: "diag.nvml".into(),
        ..Default::default()
    };
    let unsigned = pki::dsse::Envelope::unsigned(proto::payload_type::COMMAND, prost::Message::encode_to_vec(&forged));
    let frame = proto::GatewayFrame {
        seq: 0,
        frame: Some(Out::Command(proto::CommandDelivery { command: Some(unsigned.to_proto()), batch_approval: None })),
    };
    stack.send_raw(&node.id, frame).await.unwrap();
    let (got, env) = session.expect_command().await;
    assert_eq!((got.id.as_str(), env.signatures.len()), ("cmd_forged", 0));
    assert!(matches!(stack.send_raw("node_0000000000000000", Default::default()).await, Err(Error::NoSession { .. })));
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_gpu_count_mismatch_is_rejected_and_never_adopted() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), Some(8)).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (cmd, _) = session.expect_command().await;
    session.complete(&cmd, &diag_output(7)).await;
    let err = stack.await_adopted(&node.id, WAIT).await.unwrap_err();
    let Error::Rejected { reason, .. } = err else { panic!("{err}") };
    assert!(reason.starts_with("GpuCountMismatch"), "{reason}");
    let row = stack.node(&node.id).unwrap().unwrap();
    assert_eq!((row.state, row.spec_generation), (NodeState::Rejected, 0));
    assert!(stack.node_specs(&node.id).unwrap().is_empty());
    stack.shutdown().await.unwrap();
}

fn code(status: &tonic::Status) -> (tonic::Code, &str) {
    (status.code(), devstack::status::code_of(status))
}

#[tokio::test]
async fn a_sealed_token_replayed_with_another_csr_is_refused() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let (_, csr, pin) = node::key_and_csr();
    let sealed = node::seal(&stack, &token, &pin);
    let (_, other_csr, _) = node::key_and_csr();
    let err = node::join_raw(&stack, sealed.clone(), other_csr).await.unwrap_err();
    assert_eq!(code(&err), (tonic::Code::PermissionDenied, "token-csr-mismatch"));
    // The same sealed token with its own CSR still works: the refusal used nothing.
    node::join_raw(&stack, sealed, csr).await.unwrap();
    assert_eq!(stack.nodes().unwrap().len(), 1);
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn unknown_exhausted_and_expired_tokens_are_refused() {
    let (stack, pool, _) = stack_with_pool(DevStackOptions::memory(), None).await;
    let join = |token: String| {
        let stack = &stack;
        async move {
            let (_, csr, pin) = node::key_and_csr();
            node::join_raw(stack, node::seal(stack, &token, &pin), csr).await
        }
    };
    let err = join("bc_jt_not-a-token".into()).await.unwrap_err();
    assert_eq!(code(&err), (tonic::Code::PermissionDenied, "token-unknown"));
    let once = stack.mint_join_token(&pool, 1, Duration::from_secs(60)).await.unwrap();
    join(once.clone()).await.unwrap();
    let err = join(once).await.unwrap_err();
    assert_eq!(code(&err), (tonic::Code::PermissionDenied, "token-exhausted"));
    let expired = stack.mint_join_token(&pool, 1, Duration::ZERO).await.unwrap();
    let err = join(expired).await.unwrap_err();
    assert_eq!(code(&err), (tonic::Code::PermissionDenied, "token-expired"));
    let (_, csr, _) = node::key_and_csr();
    let err = node::join_raw(&stack, "a.b.c".into(), csr).await.unwrap_err();
    assert_eq!(code(&err), (tonic::Code::InvalidArgument, "jwe-malformed"));
    let err = node::join_raw(&stack, "x".into(), vec![0; devstack::MAX_MESSAGE_BYTES + 1]).await.unwrap_err();
    assert_eq!(code(&err), (tonic::Code::InvalidArgument, "frame-too-large"));
    assert_eq!(stack.nodes().unwrap().len(), 1);
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_well_known_document_and_the_bcd_config_name_the_stack() {
    let stack = DevStack::start(DevStackOptions::memory()).await.unwrap();
    let mut tcp = tokio::net::TcpStream::connect(stack.http_url().trim_start_matches("http://")).await.unwrap();
    let request = format!("GET {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", devstack::WELL_KNOWN_PATH);
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let body: serde_json::Value = serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body, stack.well_known());
    let pins = stack.pins();
    assert_eq!(body["gateway"]["url"], stack.gateway_url());
    assert_eq!(body["gateway"]["serverName"], "gw.dev.local");
    assert_eq!(body["gateway"]["servingCaSpkiPin"], pins.serving_ca.as_str());
    assert_eq!(body["join"]["signingPin"], pins.join_signing.as_str());
    assert_eq!(body["join"]["signingKey"], pins.join_signing_key.as_str());
    let signing_der = pki::b64::std_decode(&pins.join_signing_key).unwrap();
    assert_eq!(PublicKey::from_spki_der(&signing_der).unwrap().pin(), pins.join_signing);
    assert_eq!(body["join"]["encryptionPin"], pins.join_encryption.as_str());
    assert_eq!(body["join"]["encryptionJwk"]["kid"], pins.join_encryption.as_str());
    assert_eq!(body["trustDomain"], "compute.dev.local");

    let dir = tempfile::tempdir().unwrap();
    let paths = stack.write_bcd_config(dir.path(), &dir.path().join("data")).await.unwrap();
    let config = std::fs::read_to_string(&paths.config).unwrap();
    for line in [
        format!("gateway_url = \"{}\"", stack.gateway_url()),
        "gateway_server_name = \"gw.dev.local\"".to_string(),
        format!("serving_ca_spki_pin = \"{}\"", pins.serving_ca),
        format!("join_signing_pin = \"{}\"", pins.join_signing),
        format!("join_signing_key = \"{}\"", pins.join_signing_key),
        format!("join_encryption_pin = \"{}\"", pins.join_encryption),
        format!("data_dir = \"{}\"", dir.path().join("data").display()),
        "node_id = \"\"".to_string(),
    ] {
        assert!(config.lines().any(|l| l == line), "{line} missing from\n{config}");
    }
    assert_eq!(paths.jwk, dir.path().join("join-encryption.jwk"));
    assert_eq!(std::fs::read_to_string(&paths.jwk).unwrap().trim(), pins.join_encryption_jwk);
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_join_request_replayed_byte_for_byte_is_not_a_new_node() {
    let (stack, pool, _) = stack_with_pool(DevStackOptions::memory(), None).await;
    let once = stack.mint_join_token(&pool, 1, Duration::from_secs(60)).await.unwrap();
    let (_, csr, pin) = node::key_and_csr();
    let sealed = node::seal(&stack, &once, &pin);
    let first = node::join_raw(&stack, sealed.clone(), csr.clone()).await.unwrap();
    // The same bytes again (a retry, or a replay): the same node and
    // certificate, and the token's one use is not spent again.
    let again = node::join_raw(&stack, sealed.clone(), csr.clone()).await.unwrap();
    assert_eq!(first, again);
    let nodes = stack.nodes().unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let uses: Vec<u32> = stack.join_tokens(&pool).unwrap().iter().map(|t| t.uses).collect();
    assert!(uses.contains(&1) && !uses.iter().any(|u| *u > 1), "{uses:?}");
    // The same sealed token with another CSR after the success is no retry:
    // it stays refused token-csr-mismatch, and answers no node.
    let (_, stranger_csr, _) = node::key_and_csr();
    let err = node::join_raw(&stack, sealed.clone(), stranger_csr).await.unwrap_err();
    assert_eq!(code(&err), (tonic::Code::PermissionDenied, "token-csr-mismatch"));
    // Another request with that token is a new use, and there is none left.
    let (_, other_csr, other_pin) = node::key_and_csr();
    let err = node::join_raw(&stack, node::seal(&stack, &once, &other_pin), other_csr).await.unwrap_err();
    assert_eq!(code(&err), (tonic::Code::PermissionDenied, "token-exhausted"));
    assert_eq!(stack.nodes().unwrap().len(), 1);
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_sealed_token_from_1970_or_the_future_is_refused() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let now = node::devstack_now_ms() / 1000;
    for (iat, want) in [(0, "token-stale"), (now - 3601, "token-stale"), (now + 86_400, "token-not-yet-valid")] {
        let (_, csr, pin) = node::key_and_csr();
        let sealed = pki::join::seal_token(
            &stack.join_encryption_key(),
            &token,
            &pin,
            iat,
            &pki::jwe::SealRandomness::from_os(),
        );
        let err = node::join_raw(&stack, sealed, csr).await.unwrap_err();
        assert_eq!(code(&err), (tonic::Code::PermissionDenied, want), "iat {iat}");
    }
    assert!(stack.nodes().unwrap().is_empty());
    stack.shutdown().await.unwrap();
}
