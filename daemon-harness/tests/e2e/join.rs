//! Joining: the token on standard input and never printed, "already joined",
//! the files bcd writes, and the refusals (a JoinResponse signed by another
//! key, a serving certificate that does not match the pin, a sealed token
//! replayed with another CSR).

use std::os::unix::fs::PermissionsExt;

use crate::common::{DEADLINE, Env, node_id};

#[tokio::test(flavor = "multi_thread")]
async fn join_takes_the_token_on_stdin_and_never_prints_it() {
    let Some(env) = Env::start("join_takes_the_token_on_stdin_and_never_prints_it").await else { return };
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let node = env.must_make_node("joiner", "hgx-h100").await;
    let token = env.must_mint_token(&pool, 1).await;
    let out = node.must_join(&token).await.unwrap();
    let id = node_id(&node).unwrap();
    assert!(id.starts_with("node_"), "{id}");

    let data = node.data_dir();
    assert_eq!(std::fs::metadata(&data).unwrap().permissions().mode() & 0o777, 0o700, "data dir mode");
    assert_eq!(std::fs::metadata(data.join("node.key")).unwrap().permissions().mode() & 0o777, 0o600, "node.key mode");
    for file in ["node.crt", "join-response.json"] {
        assert!(data.join(file).is_file(), "{file} is written");
    }
    assert!(node.dir().join("join-encryption.jwk").is_file());

    let again =
        node.run(&["join", "--config", &node.config().to_string_lossy()], Some(&token), DEADLINE).await.unwrap();
    assert!(again.success(), "a second join exits 0: {again:?}");
    assert!(format!("{}{}", again.stdout, again.stderr).contains("already joined"), "{again:?}");

    for text in [&out.stdout, &out.stderr, &again.stdout, &again.stderr] {
        assert!(!text.contains(&token));
    }
    node.assert_never_printed(&token, "the join token");
    let row = env.stack.node(&id).unwrap().expect("the stack knows the node");
    assert_eq!(row.pool_id, pool);
    env.report();
}

/// Rewrites one `key = "value"` line of a config.toml.
fn set_config(node: &daemon_harness::node::Node, key: &str, value: &str) {
    let text = std::fs::read_to_string(node.config()).unwrap();
    let mut found = false;
    let lines: Vec<String> = text
        .lines()
        .map(|l| match l.split_once('=') {
            Some((k, _)) if k.trim() == key => {
                found = true;
                format!("{key} = \"{value}\"")
            }
            _ => l.to_string(),
        })
        .collect();
    assert!(found, "config.toml has no {key}");
    std::fs::write(node.config(), lines.join("\n") + "\n").unwrap();
}

/// The one line that says why `bcd join` failed (log lines aside).
fn one_line_reason(out: &daemon_harness::node::Output) -> String {
    assert!(!out.success(), "bcd join must fail: {out:?}");
    let reasons: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("bcd join:")).collect();
    assert_eq!(reasons.len(), 1, "exactly one reason line on standard error: {:?}", out.stderr);
    reasons[0].to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn join_refuses_a_response_signed_by_another_key() {
    let Some(env) = Env::start("join_refuses_a_response_signed_by_another_key").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let node = env.must_make_node("misled", "cpu").await;
    // Pin another key as the join-signing key: the stack's response no longer verifies.
    let other = pki::keys::random_ed25519();
    let other_key = pki::Signer::public_key(&other);
    set_config(&node, "join_signing_key", &pki::b64::std(&other_key.spki_der()));
    set_config(&node, "join_signing_pin", &other_key.pin());
    let token = env.must_mint_token(&pool, 1).await;
    let out = node.run(&["join", "--config", &node.config().to_string_lossy()], Some(&token), DEADLINE).await.unwrap();
    let reason = one_line_reason(&out);
    assert!(reason.contains("dsse-unknown-key"), "{reason}");
    assert!(!node.data_dir().join("node.crt").exists(), "nothing is written on a refused join");
    node.assert_never_printed(&token, "the join token");
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn join_refuses_a_serving_certificate_that_does_not_match_the_pin() {
    let Some(env) = Env::start("join_refuses_a_serving_certificate_that_does_not_match_the_pin").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let node = env.must_make_node("mitm", "cpu").await;
    set_config(&node, "serving_ca_spki_pin", "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    let token = env.must_mint_token(&pool, 1).await;
    let out = node.run(&["join", "--config", &node.config().to_string_lossy()], Some(&token), DEADLINE).await.unwrap();
    let reason = one_line_reason(&out);
    assert!(reason.to_lowercase().contains("pin"), "{reason}");
    let tokens = env.stack.join_tokens(&pool).unwrap();
    assert!(tokens.iter().all(|t| t.uses == 0), "the token was never presented: {tokens:?}");
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sealed_token_replayed_with_another_csr_is_refused() {
    let Some(env) = Env::start("a_sealed_token_replayed_with_another_csr_is_refused").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let token = env.must_mint_token(&pool, 1).await;
    // What an eavesdropper saw: a token sealed for one CSR...
    let seen_csr = pki::x509::csr(&pki::keys::random_p256(), "bcd").unwrap();
    let seen_pin = pki::x509::parse_csr(&seen_csr).unwrap().pin;
    let sealed = devstack::client::seal(&env.stack, &token, &seen_pin);
    // ...replayed with its own CSR.
    let own_csr = pki::x509::csr(&pki::keys::random_p256(), "bcd").unwrap();
    let channel = devstack::client::channel(&env.stack, None).await.unwrap();
    let mut join = proto::join_client::JoinClient::new(channel);
    let request = |csr: Vec<u8>| proto::JoinRequest {
        method: Some(proto::join_request::Method::Token(proto::TokenJoin {
            sealed_token: sealed.clone(),
            csr_der: csr,
        })),
        claims: None,
    };
    let refused = join.join(request(own_csr)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().starts_with("token-csr-mismatch:"), "{refused:?}");
    let tokens = env.stack.join_tokens(&pool).unwrap();
    assert_eq!(tokens[0].uses, 0, "a refused replay does not use the token");
    // The same sealed token with the CSR it was sealed for is accepted.
    join.join(request(seen_csr)).await.expect("the original join succeeds");
    env.report();
}
