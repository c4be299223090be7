//! Releases and self-update: artifacts served over the HTTP listener, a
//! manifest signed by the release keys and checked with `pki` (threshold,
//! sequence, digest refusals on the manifests the stack makes), the
//! `daemon.upgrade` command and the new version confirmed by a Welcome.

use devstack::{CommandStatus, DevStack, DevStackOptions, Error, ManifestOptions, ReleaseKeys};
use prost::Message as _;

use crate::node::{self, TestNode, WAIT};
use crate::stack_with_pool;

/// The wall clock in Unix milliseconds.
fn devstack_now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The seed of `testdata/release` (two keys, threshold 2, lowest sequence 5).
const SEED: &str = "bc-interop-v1";

fn fixture_options() -> DevStackOptions {
    DevStackOptions {
        signed_intent: true,
        release_keys: ReleaseKeys::from_seed(SEED, 2),
        release_min_sequence: 5,
        ..DevStackOptions::memory()
    }
}

/// The release keys of `testdata/release/release.json` (standard base64 SPKI).
fn fixture_spki() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/release/release.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    json["keys"].as_array().unwrap().iter().map(|k| k["spki"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn a_release_is_served_and_its_manifest_verifies_only_as_published() {
    let (stack, _pool, _token) = stack_with_pool(fixture_options(), None).await;
    let pins = stack.release_keys();
    assert_eq!((pins.threshold, pins.min_sequence), (2, 5));
    assert_eq!(pins.spki_b64(), fixture_spki());

    let amd64 = b"bcd 0.9.0 for linux/amd64".to_vec();
    let arm64 = b"bcd 0.9.0 for linux/arm64!".to_vec();
    let release = stack.publish_release("0.9.0", 7, &[("linux", "arm64", &arm64), ("linux", "amd64", &amd64)]).await;
    let release = release.unwrap();
    assert_eq!(release.manifest.artifacts.len(), 2);
    let url = format!("{}/releases/0.9.0/bcd-linux-amd64", stack.http_url());
    let artifact = pki::release::artifact(&release.manifest, "linux", "amd64").unwrap();
    assert_eq!((artifact.url.as_str(), artifact.size), (url.as_str(), amd64.len() as u64));

    // Downloaded as bcd would, then verified through pki with the [update] pins.
    let (status, bytes) = node::http_get(&stack, "/releases/0.9.0/bcd-linux-amd64").await;
    assert_eq!((status, &bytes), (200, &amd64));
    let (status, manifest) = node::http_get(&stack, "/releases/0.9.0/manifest.dsse.json").await;
    assert_eq!(status, 200);
    let served = pki::dsse::Envelope::from_json(std::str::from_utf8(&manifest).unwrap()).unwrap();
    assert_eq!(served, release.envelope);
    let policy = pins.policy();
    let now = devstack_now_ms();
    let verified = pki::release::verify_release(&served, &policy, "linux", "amd64", &bytes, now).unwrap();
    assert_eq!((verified.version.as_str(), verified.sequence), ("0.9.0", 7));
    assert_eq!(
        pki::release::verify_release(&served, &policy, "linux", "riscv64", &bytes, now).unwrap_err().code(),
        "release-missing-artifact"
    );
    for path in ["/releases/0.9.0/bcd-linux-riscv64", "/releases/1.0.0/bcd-linux-amd64", "/releases/0.9.0/other"] {
        assert_eq!(node::http_get(&stack, path).await.0, 404, "{path}");
    }

    // The manifests made to be refused are refused, each with its code.
    let cases = [
        (ManifestOptions { signers: Some(1), ..Default::default() }, "release-threshold"),
        (ManifestOptions { sequence: Some(4), ..Default::default() }, "release-sequence"),
        (ManifestOptions { wrong_digest: true, ..Default::default() }, "release-digest"),
        (ManifestOptions { expires_at_ms: Some(now - 1), ..Default::default() }, "release-expired"),
    ];
    // A published manifest expires after the stack's release_expiry (30 days).
    let expiry = release.manifest.expires_at_ms - now;
    assert!((29 * 24 * 3600 * 1000..=30 * 24 * 3600 * 1000).contains(&expiry), "expires in {expiry} ms");
    for (options, code) in cases {
        let env = stack.release_manifest("0.9.0", &options).unwrap();
        let refused = pki::release::verify_release(&env, &policy, "linux", "amd64", &bytes, now).unwrap_err();
        assert_eq!(refused.code(), code, "{options:?}");
    }
    assert_eq!(stack.release_manifest("0.9.0", &ManifestOptions::default()).unwrap(), release.envelope);

    // Refused publications.
    let again = stack.publish_release("0.9.0", 8, &[("linux", "amd64", &amd64)]).await;
    assert!(matches!(again, Err(Error::ReleaseExists { .. })));
    for (version, os) in [("../x", "linux"), ("1.0.0", "linux-gnu"), ("1.0.0", "Linux")] {
        let bad = stack.publish_release(version, 8, &[(os, "amd64", &amd64)]).await;
        assert!(matches!(bad, Err(Error::InvalidRelease { .. })), "{version} {os}");
    }
    assert!(matches!(stack.publish_release("1.0.0", 8, &[]).await, Err(Error::InvalidRelease { .. })));
    assert!(matches!(stack.rollout_upgrade("node_x", "2.0.0").await, Err(Error::UnknownRelease { .. })));

    // bcd's [update] section pins the same keys.
    let dir = tempfile::tempdir().unwrap();
    let paths = stack.write_bcd_config_with(dir.path(), &dir.path().join("data"), Some(&pins)).await.unwrap();
    let config = std::fs::read_to_string(paths.config).unwrap();
    let spki = fixture_spki();
    let section = format!(
        "[update]\nrelease_keys = [\"{}\", \"{}\"]\nrelease_key_pins = [\"{}\", \"{}\"]\nthreshold = 2\nmin_sequence = 5\n",
        spki[0],
        spki[1],
        pins.pins()[0],
        pins.pins()[1]
    );
    assert!(config.ends_with(&section), "{config}");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_upgrade_carries_the_signed_manifest_and_the_new_version_is_confirmed_by_its_welcome() {
    let (stack, _pool, token) = stack_with_pool(fixture_options(), None).await;
    let (node, mut session) = node::adopted(&stack, &token, 1).await;
    let binary = b"bcd 0.9.0".to_vec();
    stack.publish_release("0.9.0", 7, &[("linux", "amd64", &binary)]).await.unwrap();

    let defective = ManifestOptions { signers: Some(1), ..Default::default() };
    for (options, code) in [(ManifestOptions::default(), None), (defective, Some("release-threshold"))] {
        let id = stack.rollout_upgrade_with(&node.id, "0.9.0", &options).await.unwrap();
        let (cmd, env) = session.expect_command().await;
        assert_eq!(
            (cmd.id.as_str(), cmd.kind.as_str(), cmd.retry_safe, cmd.destructive),
            (id.as_str(), "daemon.upgrade", true, false)
        );
        // Signed by the command root like every command.
        let env = pki::dsse::Envelope::from_proto(&env);
        pki::intent::verify_command(&env, &stack.command_roots(), &node.id, 0).unwrap();
        // What bcd does with the params: the manifest, verified with its pins.
        let params: serde_json::Value = serde_json::from_slice(&cmd.params).unwrap();
        assert_eq!(params.as_object().unwrap().keys().collect::<Vec<_>>(), ["manifest"]);
        let manifest = pki::dsse::Envelope::from_json(&params["manifest"].to_string()).unwrap();
        assert_eq!(manifest.payload_type, "application/vnd.bc.release+json");
        let checked = pki::release::verify_release(
            &manifest,
            &stack.release_keys().policy(),
            "linux",
            "amd64",
            &binary,
            devstack_now_ms(),
        );
        assert_eq!(checked.as_ref().err().map(|e| e.code()), code);
        if let Some(code) = code {
            // bcd reports the refusal as the command's failure with its code.
            let reason = format!("{code}: 1 valid signature(s), threshold 2");
            fail(&mut session, &node, &cmd, &reason).await;
            let outcome = stack.await_command(&id, WAIT).await.unwrap();
            assert_eq!((outcome.state, outcome.reason), (CommandStatus::Failed, reason));
        }
    }
    let id = stack.commands(&node.id).unwrap().into_iter().find(|c| c.kind == "daemon.upgrade").unwrap().id;

    // The node swaps and execs: a new session reporting 0.9.0 confirms it,
    // and the new binary reports the command done.
    assert!(stack.await_daemon_version(&node.id, "0.9.0", std::time::Duration::from_millis(50)).await.is_err());
    drop(session);
    let mut session = node.connect_as(&stack, 1, |h| h.daemon_version = "0.9.0".into()).await.unwrap();
    let confirmed = stack.await_daemon_version(&node.id, "0.9.0", WAIT).await.unwrap();
    assert_eq!(confirmed.epoch, 2);
    assert_eq!(stack.node(&node.id).unwrap().unwrap().daemon_version, "0.9.0");
    let redelivered = session.expect_delivery().await;
    let cmd = proto::Command::decode(redelivered.command.unwrap().payload.as_slice()).unwrap();
    assert_eq!(cmd.id, id);
    let output = r#"{"version":"0.9.0","sequence":7,"previous":"0.0.0-test","slot":"bcd-b"}"#;
    let result = session.signed_result(&node.key, &cmd, proto::CommandState::Succeeded, "", output);
    let seq = session.send_event(node::Session::update(&id, proto::CommandState::Succeeded, Some(result))).await;
    session.await_ack(seq).await;
    let outcome = stack.await_command(&id, WAIT).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded);
    assert_eq!(outcome.output_json().unwrap()["slot"], "bcd-b");
    stack.shutdown().await.unwrap();
}

/// Reports a command FAILED with a node-signed result.
async fn fail(session: &mut node::Session, node: &TestNode, cmd: &proto::Command, reason: &str) {
    let result = session.signed_result(&node.key, cmd, proto::CommandState::Failed, reason, "");
    let update = proto::node_frame::Frame::CommandUpdate(proto::CommandUpdate {
        command_id: cmd.id.clone(),
        state: proto::CommandState::Failed as i32,
        reason: reason.to_string(),
        result: Some(result),
        at_ms: node::devstack_now_ms(),
    });
    let seq = session.send_event(update).await;
    session.await_ack(seq).await;
}

#[tokio::test]
async fn generated_release_keys_are_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let stack = DevStack::start(DevStackOptions::file(dir.path().join("stack.sqlite"))).await.unwrap();
    let pins = stack.release_keys();
    assert_eq!((pins.keys.len(), pins.threshold, pins.min_sequence), (2, 2, 1));
    assert_ne!(pins.keys[0], pins.keys[1]);
    assert_ne!(pins.spki_b64(), fixture_spki());
    let binary = b"bcd".to_vec();
    let release = stack.publish_release("1.0.0", 1, &[("linux", "amd64", &binary)]).await.unwrap();
    let options = stack.restart_options();
    stack.shutdown().await.unwrap();

    let stack = DevStack::start(options).await.unwrap();
    assert_eq!(stack.release_keys(), pins);
    let again = stack.release_info("1.0.0").unwrap();
    assert_eq!(again, release);
    pki::release::verify_release(&again.envelope, &pins.policy(), "linux", "amd64", &binary, devstack_now_ms())
        .unwrap();
    assert_eq!(node::http_get(&stack, "/releases/1.0.0/bcd-linux-amd64").await, (200, binary));
    stack.shutdown().await.unwrap();
}
