//! The dev stack and the Go test gateway answer the same refusals alike,
//! and as `proto/refusals.toml` says: the Go client `bcd-conformance` runs
//! every case of `daemon/internal/conformance` against a `DevStack` this test
//! prepared (tokens of each kind, a node joined with the one-use token,
//! another joined and revoked), `go test ./internal/conformance` runs them
//! against an in-process testgw prepared the same way, and this test compares
//! both answers (code and gRPC status) with the list's and prints the table.
//! Needs Go: skipped with a reason locally when it is missing, a failure
//! under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use devstack::{Acceptance, DevStack, DevStackOptions, PoolSpec};
use p256::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _};
use proto::refusal::Code;
use serde_json::{Value, json};

fn daemon_dir() -> PathBuf {
    interop::testdata().join("../daemon")
}

/// Runs a command to its end; its standard output, or a panic with both outputs.
fn output(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Joins a node with `token` and returns its credentials as the Go client reads them.
async fn join(stack: &DevStack, token: &str) -> Value {
    let key = pki::keys::random_p256();
    let csr_der = pki::x509::csr(&key, "bcd").expect("a CSR for a fresh key");
    let pin = pki::x509::parse_csr(&csr_der).expect("our CSR parses").pin;
    let sealed = devstack::client::seal(stack, token, &pin);
    let channel = devstack::client::channel(stack, None).await.expect("dial the gateway");
    let request = proto::JoinRequest {
        method: Some(proto::join_request::Method::Token(proto::TokenJoin { sealed_token: sealed, csr_der })),
        claims: None,
    };
    let reply = proto::join_client::JoinClient::new(channel).join(request).await.expect("the join succeeds");
    let Some(proto::join_reply::Reply::Response(env)) = reply.into_inner().reply else { panic!("no JoinResponse") };
    let env = pki::dsse::Envelope::from_proto(&env);
    let response = pki::join::verify_response(&env, &stack.join_signing_key(), &pin).expect("a valid response");
    let pkcs8 = key.to_pkcs8_der().expect("a P-256 key encodes");
    json!({
        "node_id": response.node_id,
        "chain": response.certificate_chain.iter().map(|d| pki::b64::std(d)).collect::<Vec<_>>(),
        "key": pki::b64::std(pkcs8.as_bytes()),
    })
}

/// The dev stack's target: its pins, tokens of each kind and two nodes.
async fn prepare(stack: &DevStack) -> Value {
    let pool = stack
        .create_pool(PoolSpec { name: "conformance".into(), acceptance: Acceptance::None, ..PoolSpec::default() })
        .await
        .expect("a pool");
    let hour = Duration::from_secs(3600);
    let exhausted = stack.mint_join_token(&pool, 1, hour).await.expect("a token");
    let to_revoke = stack.mint_join_token(&pool, 1, hour).await.expect("a token");
    let valid = stack.mint_join_token(&pool, 1, hour).await.expect("a token");
    let expired = stack.mint_join_token(&pool, 1, Duration::ZERO).await.expect("a token");
    let joined = join(stack, &exhausted).await;
    let revoked = join(stack, &to_revoke).await;
    stack.revoke_node(revoked["node_id"].as_str().expect("a node id")).await.expect("revoke");
    let spki = stack.join_encryption_key().to_public_key_der().expect("a P-256 key encodes");
    json!({
        "gateway_url": stack.gateway_url(),
        "server_name": stack.server_name(),
        "serving_ca_spki_pin": stack.pins().serving_ca,
        "join_encryption_key": pki::b64::std(spki.as_bytes()),
        "tokens": {"unknown": "never-minted", "exhausted": exhausted, "expired": expired, "valid": valid},
        "joined": joined,
        "revoked": revoked,
    })
}

/// `case code grpc-status` lines, split.
fn lines(text: &str) -> Vec<[String; 3]> {
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 3, "not a `case code grpc-status` line: {l:?}");
            [f[0].to_string(), f[1].to_string(), f[2].to_string()]
        })
        .collect()
}

/// The Rust table gives every expected code the status Go's table gave it.
fn check_rust_table(expected: &[[String; 3]]) {
    for [case, code, status] in expected {
        let parsed = Code::parse(code).unwrap_or_else(|| panic!("{case}: {code} is not in proto::refusal"));
        assert_eq!(&format!("{:?}", tonic::Code::from(parsed.grpc())), status, "{case}: the tables differ on {code}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devstack_and_testgw_refuse_alike() {
    if Command::new("go").arg("version").output().is_err() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "go is missing (CI=true makes this a failure)");
        eprintln!("skipped: go is not on PATH");
        return;
    }
    let daemon = daemon_dir();
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bcd-conformance");
    output(Command::new("go").args(["build", "-o"]).arg(&bin).arg("./cmd/bcd-conformance").current_dir(&daemon));
    let expected = lines(&output(Command::new(&bin).arg("expected")));
    check_rust_table(&expected);

    let stack = DevStack::start(DevStackOptions::memory()).await.expect("the dev stack starts");
    let target = tmp.path().join("devstack.json");
    std::fs::write(&target, serde_json::to_vec_pretty(&prepare(&stack).await).unwrap()).unwrap();
    let run = Command::new(&bin).arg("run").arg(&target).output();
    let devstack = tokio::task::spawn_blocking(move || run).await.unwrap();
    let devstack = devstack.expect("bcd-conformance runs");
    assert!(devstack.status.success(), "bcd-conformance: {}", String::from_utf8_lossy(&devstack.stderr));
    let devstack = lines(&String::from_utf8(devstack.stdout).unwrap());
    stack.shutdown().await.expect("the dev stack stops");

    let out = tmp.path().join("testgw.txt");
    output(
        Command::new("go")
            .args(["test", "-count=1", "-run", "TestTestgwAnswersEveryCaseAsTheList", "./internal/conformance/"])
            .env("BCD_CONFORMANCE_OUT", &out)
            .current_dir(&daemon),
    );
    let testgw = lines(&std::fs::read_to_string(&out).expect("the Go test wrote its answers"));

    println!("{:<36} {:<40} {:<40} {:<40}", "case", "proto/refusals.toml", "devstack", "testgw");
    let mut wrong = Vec::new();
    for (i, [case, code, status]) in expected.iter().enumerate() {
        let cell = |l: &[String; 3]| format!("{} {}", l[1], l[2]);
        let (d, g) = (devstack.get(i).map(cell).unwrap_or_default(), testgw.get(i).map(cell).unwrap_or_default());
        let want = format!("{code} {status}");
        let mark = if d == want && g == want { "" } else { "  <-- differs" };
        println!("{case:<36} {want:<40} {d:<40} {g:<40}{mark}");
        if !mark.is_empty() {
            wrong.push(case.clone());
        }
    }
    assert_eq!(devstack.len(), expected.len(), "the dev stack answered another number of cases");
    assert_eq!(testgw.len(), expected.len(), "testgw answered another number of cases");
    for (a, b) in [(&devstack, "devstack"), (&testgw, "testgw")] {
        let names: Vec<&String> = a.iter().map(|l| &l[0]).collect();
        let want: Vec<&String> = expected.iter().map(|l| &l[0]).collect();
        assert_eq!(names, want, "{b} answered other cases");
    }
    assert!(wrong.is_empty(), "cases answered otherwise than proto/refusals.toml says: {wrong:?}");
}
