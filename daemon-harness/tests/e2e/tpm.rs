//! TPM join end to end (issue 6 item 2): a fakehw bcd whose TPM is a swtpm on
//! a copy of the committed state (its EK certificate issued by the test
//! manufacturer root) joins with `--attestor tpm` and no token, is bound to
//! SHA-256(EK), rejoins as the same node after a reinstall, is adopted,
//! renews with the AK certifying the next key, and is refused with another
//! EK root or a node key that is not the CSR's. No swtpm is left behind.

use daemon_harness::node::Node;
use devstack::{JoinMethod, NodeKeyLevel, TpmAllow, TpmAttestorOptions};
use pki::tpm::attestor::NodeKeyPolicy;

use crate::common::{DEADLINE, Env, node_id};

/// SHA-256 of the committed swtpm state's EK public area.
const EK_SHA256: &str = "b59eabcd4b407f8d04bb47d991b637990008677d1d999d80bff89d9e5c174fcf";

fn testdata_tpm(file: &str) -> std::path::PathBuf {
    interop::testdata().join("tpm").join(file).canonicalize().expect("the TPM fixture is committed")
}

/// A stack whose TPM attestor trusts `ek_root` and admits every EK into the pool named "tpm".
async fn tpm_env(scenario: &str, ek_root: Vec<u8>) -> Option<Env> {
    if !daemon_harness::prereq::require(scenario, "swtpm", daemon_harness::prereq::have_program("swtpm", "--version")) {
        return None;
    }
    Env::start_with(scenario, |o| {
        let mut attestor = TpmAttestorOptions::new(vec![ek_root], NodeKeyPolicy::Tpm);
        attestor.allow.push(TpmAllow::any("tpm"));
        o.tpm_attestor = Some(attestor);
    })
    .await
}

/// A fakehw node whose TPM starts from the committed swtpm state.
async fn tpm_node(env: &Env, name: &str) -> Node {
    let mut node = env.must_make_node(name, "hgx-h100").await;
    let state = env.runner.daemon_path(&testdata_tpm("tpm2-00.permall")).unwrap();
    node.set_env("BCD_FAKEHW_TPM_STATE", &state);
    node
}

async fn tpm_join(node: &Node) -> daemon_harness::node::Output {
    let config = node.config().to_string_lossy().into_owned();
    node.run(&["join", "--attestor", "tpm", "--config", &config], None, DEADLINE).await.unwrap()
}

/// Fails if any process still runs with `dir` in its command line (a swtpm
/// or a bcd of this node).
fn assert_no_process_under(dir: &std::path::Path) {
    let needle = dir.to_string_lossy().into_owned();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            left.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_join_binds_the_ek_rejoins_after_a_reinstall_and_renews_in_the_tpm() {
    let scenario = "tpm_join_binds_the_ek_rejoins_after_a_reinstall_and_renews_in_the_tpm";
    let Some(env) = tpm_env(scenario, std::fs::read(testdata_tpm("ek-root.der")).unwrap()).await else { return };
    env.must_create_pool("tpm", None).await;
    let mut node = tpm_node(&env, "tpm").await;

    let started = std::time::Instant::now();
    let out = tpm_join(&node).await;
    assert!(out.success(), "{out:?}");
    let id = node_id(&node).unwrap();
    eprintln!("tpm join (two rounds) in {:.2?}", started.elapsed());

    // Bound to SHA-256(EK), the join recorded with nodeKey tpm, the certificate naming the AK.
    let bindings = env.stack.node_bindings(&id).unwrap();
    assert_eq!(bindings.len(), 1);
    assert_eq!((bindings[0].kind.as_str(), bindings[0].sha256.as_str()), ("tpm-ek", EK_SHA256));
    let joins = env.stack.node_joins(&id).unwrap();
    assert_eq!((joins[0].method, joins[0].node_key), (JoinMethod::Tpm, NodeKeyLevel::Tpm), "{joins:?}");
    let certs = env.stack.node_certs(&id).unwrap();
    let leaf = pki::x509::describe_der(&certs[0].der).unwrap();
    assert!(leaf.uris.contains(&pki::x509::tpm_ak_uri(&bindings[0].ak_name)), "{:?}", leaf.uris);
    let key_file = std::fs::read_to_string(node.data_dir().join("node.key")).unwrap();
    assert!(key_file.starts_with("-----BEGIN BCD TPM NODE KEY-----"), "{key_file}");
    assert!(!key_file.contains("PRIVATE KEY"), "node.key holds only a reference to the TPM key");

    // "already joined" on a re-run.
    let again = tpm_join(&node).await;
    assert!(again.success() && format!("{}{}", again.stdout, again.stderr).contains("already joined"), "{again:?}");

    // A reinstall: the identity files go, the TPM stays; the same node joins again.
    for file in ["node.key", "node.crt", "join-response.json"] {
        std::fs::remove_file(node.data_dir().join(file)).unwrap();
    }
    let rejoin = tpm_join(&node).await;
    assert!(rejoin.success(), "{rejoin:?}");
    assert_eq!(node_id(&node).unwrap(), id, "the same node");
    assert_eq!(env.stack.node_certs(&id).unwrap().len(), 2);

    // bcd node adopted on that identity, renewing early: the AK certifies the next key.
    node.set_env("BCD_RENEW_AFTER", "2s");
    node.start().unwrap();
    env.stack.await_adopted(&id, DEADLINE).await.unwrap();
    let renewed = env
        .stack
        .await_until("a renewal (a third certificate)", DEADLINE, |v| Some(v.node_certs(&id)).filter(|c| c.len() >= 3))
        .await
        .expect("a renewal");
    let latest = pki::x509::describe_der(&renewed.last().unwrap().der).unwrap();
    assert!(latest.uris.iter().any(|u| u.starts_with("urn:bc:tpm-ak:")), "the renewed certificate still names the AK");
    let key_file = std::fs::read_to_string(node.data_dir().join("node.key")).unwrap();
    assert!(key_file.starts_with("-----BEGIN BCD TPM NODE KEY-----"), "the key is still in the TPM");
    node.stop().await;
    assert_no_process_under(node.dir());
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_join_refuses_an_ek_from_another_root() {
    let scenario = "tpm_join_refuses_an_ek_from_another_root";
    let other_root = pki::x509::ca_certificate(
        &pki::keys::random_p256(),
        &pki::x509::CaProfile {
            common_name: "another manufacturer",
            organization: None,
            serial: &[7],
            validity: pki::x509::Validity { not_before_ms: 0, not_after_ms: 4_102_444_800_000 },
        },
    )
    .unwrap();
    let Some(env) = tpm_env(scenario, other_root).await else { return };
    env.must_create_pool("tpm", None).await;
    let node = tpm_node(&env, "foreign-ek").await;
    let out = tpm_join(&node).await;
    assert!(!out.success(), "{out:?}");
    assert!(out.stderr.lines().any(|l| l.starts_with("bcd join:") && l.contains("ek-certificate-chain")), "{out:?}");
    assert!(env.stack.nodes().unwrap().is_empty(), "no node was created");
    assert_no_process_under(node.dir());
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_join_refuses_a_node_key_that_is_not_the_csr_key() {
    let scenario = "tpm_join_refuses_a_node_key_that_is_not_the_csr_key";
    let Some(env) = tpm_env(scenario, std::fs::read(testdata_tpm("ek-root.der")).unwrap()).await else { return };
    env.must_create_pool("tpm", None).await;
    let mut node = tpm_node(&env, "other-csr-key").await;
    node.set_env("BCD_FAKEHW_TPM_CSR_KEY", "other");
    let out = tpm_join(&node).await;
    assert!(!out.success(), "{out:?}");
    assert!(out.stderr.lines().any(|l| l.starts_with("bcd join:") && l.contains("node-key-not-csr")), "{out:?}");
    assert!(!node.data_dir().join("node.crt").exists(), "nothing is written on a refused join");
    assert_no_process_under(node.dir());
    env.report();
}
