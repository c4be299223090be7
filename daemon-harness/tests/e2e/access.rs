//! Access scenarios of issue 33 (docs/harness.md, "Scenarios"): a node's
//! access section from the stack's SSH CAs is written where sshd reads it
//! under the fake root; a break-glass certificate the stack issues reads
//! back with `ssh-keygen -L` as documented (principal, validity, critical
//! options, extensions) and is refused for an unknown node, a validity
//! beyond a day, a principal the node does not allow, a key that does not
//! parse; revoking its key puts it in the node's KRL, which `ssh-keygen -Q`
//! reports revoked while another key stays valid; and under
//! `signed_specs = "access"` an unsigned spec is taken only while it leaves
//! access as it is.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use daemon_harness::node::Node;
use devstack::{Error, SectionState, SpecUpdate, SshCertRequest};

use crate::common::{DEADLINE, Env};

/// ssh-keygen, or None (skipped locally, a failure under CI).
fn ssh_keygen(scenario: &str) -> Option<&'static str> {
    let ok = Command::new("ssh-keygen").arg("-?").output().is_ok();
    if !ok {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{scenario}: ssh-keygen is not installed (CI=true)");
        eprintln!("{scenario} skipped: ssh-keygen is not installed (openssh-client)");
        return None;
    }
    Some("ssh-keygen")
}

/// A fresh user key pair made by ssh-keygen: its public key file.
fn user_key(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let out = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"]).arg(&path).output();
    assert!(out.unwrap().status.success(), "ssh-keygen made no key");
    path.with_extension("pub")
}

fn access_file(node: &Node, name: &str) -> PathBuf {
    node.data_dir().join("fakehw-root/etc/ssh").join(name)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The key part (type and base64) of an OpenSSH line.
fn key_part(line: &str) -> String {
    line.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

/// Waits for the access section's status at `generation` or later.
async fn await_access(env: &Env, id: &str, generation: u64) -> devstack::SectionStatus {
    env.stack
        .await_until(format!("the access section of generation {generation}"), DEADLINE, |v| {
            v.section_status(id, "access").filter(|s| s.generation >= generation)
        })
        .await
        .unwrap()
}

/// `ssh-keygen -Q -f krl key`: whether it reports the key revoked.
fn revoked(krl: &Path, key: &Path) -> bool {
    let out = Command::new("ssh-keygen").arg("-Q").arg("-f").arg(krl).arg(key).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim_end().ends_with("REVOKED")
}

#[tokio::test(flavor = "multi_thread")]
async fn access_and_break_glass_certificates_reach_sshds_files() {
    let scenario = "access_and_break_glass_certificates_reach_sshds_files";
    if ssh_keygen(scenario).is_none() {
        return;
    }
    let Some(env) = Env::start(scenario).await else { return };
    let pool = env.must_create_pool("access", Some(8)).await;
    let mut node = env.must_make_node("access", "hgx-h100").await;
    // Only a spec that changes access must be signed.
    let config = node.config();
    std::fs::write(&config, read(&config) + "signed_specs = \"access\"\n").unwrap();
    let id = env.must_join_and_adopt(&mut node, &pool).await;

    // Generation 1's access section, where sshd reads it.
    let status = await_access(&env, &id, 1).await;
    assert!(status.is(SectionState::Applied, "Applied"), "{status:?}");
    let section = env.stack.ssh_access_section();
    assert_eq!(
        read(&access_file(&node, "bcd/trusted_user_ca_keys")).trim(),
        key_part(&section.trusted_user_ca_keys[0])
    );
    assert_eq!(
        read(&access_file(&node, "bcd/sandbox_user_ca_keys")).trim(),
        key_part(&section.sandbox_user_ca_keys[0])
    );
    assert_eq!(read(&access_file(&node, "bcd/auth_principals/root")), "root\n");
    let drop_in = read(&access_file(&node, "sshd_config.d/bcd-access.conf"));
    assert!(drop_in.contains("TrustedUserCAKeys /etc/ssh/bcd/trusted_user_ca_keys\n"), "{drop_in}");
    for (path, mode) in [("bcd", 0o755), ("bcd/auth_principals", 0o755), ("bcd/revoked_keys.krl", 0o644)] {
        let got = std::fs::metadata(access_file(&node, path)).unwrap().permissions().mode() & 0o777;
        assert_eq!(got, mode, "{path}");
    }

    // A break-glass certificate, as ssh-keygen -L reads it.
    let dir = tempfile::tempdir().unwrap();
    let public = user_key(dir.path(), "operator");
    let request = SshCertRequest {
        principal: "root".into(),
        ttl: Duration::from_secs(900),
        public_key: read(&public),
        source_addresses: vec!["10.0.0.0/8".into()],
    };
    let cert = env.stack.issue_ssh_cert(&id, &request).await.unwrap();
    assert_eq!(cert.valid_before - cert.valid_after, 900 + 300, "15 minutes, backdated 5 minutes");
    let cert_file = dir.path().join("operator-cert.pub");
    std::fs::write(&cert_file, format!("{}\n", cert.certificate)).unwrap();
    let listed = Command::new("ssh-keygen").arg("-L").arg("-f").arg(&cert_file).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    for needle in [
        "Type: ssh-ed25519-cert-v01@openssh.com user certificate",
        &format!("Serial: {}", cert.serial),
        &format!("Key ID: \"{}\"", cert.key_id),
        "Principals: \n                root\n",
        "Critical Options: \n                source-address 10.0.0.0/8\n",
        "Extensions: \n                permit-pty\n",
    ] {
        assert!(listed.contains(needle), "{needle:?} in\n{listed}");
    }
    // What is refused, each with its code.
    let refused = |e: Error| e.to_string();
    let unknown = env.stack.issue_ssh_cert("node_nobody", &request).await.unwrap_err();
    assert!(matches!(unknown, Error::UnknownNode { .. }), "{unknown}");
    let long = SshCertRequest { ttl: Duration::from_secs(25 * 3600), ..request.clone() };
    assert!(refused(env.stack.issue_ssh_cert(&id, &long).await.unwrap_err()).starts_with("ssh-ttl: "));
    let alice = SshCertRequest { principal: "alice".into(), ..request.clone() };
    assert!(refused(env.stack.issue_ssh_cert(&id, &alice).await.unwrap_err()).starts_with("ssh-principal: "));
    let garbage = SshCertRequest { public_key: "ssh-ed25519 AAAA".into(), ..request.clone() };
    assert!(refused(env.stack.issue_ssh_cert(&id, &garbage).await.unwrap_err()).starts_with("ssh-request: "));

    // An unsigned spec that leaves access as it is applies.
    let same = env.stack.publish_spec(&id, SpecUpdate { unsigned: true, ..SpecUpdate::default() }).await.unwrap();
    env.stack.await_node(&id, |n| n.applied_generation >= same, DEADLINE).await.unwrap();
    // Revoking the operator's key, unsigned, is refused: access changed.
    let other = user_key(dir.path(), "other");
    let mut revoking = section.clone();
    revoking.revoked_keys = vec![read(&public).trim().to_string()];
    revoking.accounts.push(devstack_ops());
    let update = SpecUpdate { access: Some(revoking.clone()), unsigned: true, ..SpecUpdate::default() };
    env.stack.publish_spec(&id, update).await.unwrap();
    let line = node.logs().await_line(DEADLINE, "converge.spec_refused").await.unwrap();
    assert!(line.contains("spec-unsigned-access"), "{line}");
    assert_eq!(env.stack.node(&id).unwrap().unwrap().applied_generation, same, "the unsigned access change applied");
    // Signed, it applies: the KRL revokes the key and its certificate.
    let update = SpecUpdate { access: Some(revoking), ..SpecUpdate::default() };
    let signed = env.stack.publish_spec(&id, update).await.unwrap();
    let status = await_access(&env, &id, signed).await;
    assert!(status.is(SectionState::Applied, "Applied") && status.message.contains("1 revoked key(s)"), "{status:?}");
    let krl = access_file(&node, "bcd/revoked_keys.krl");
    assert!(revoked(&krl, &public), "the revoked key is reported revoked");
    assert!(revoked(&krl, &cert_file), "its certificate with it");
    assert!(!revoked(&krl, &other), "another key stays valid");
    assert_eq!(read(&access_file(&node, "bcd/auth_principals/ops")), "ops\n");
    node.stop().await;
    env.report();
}

/// An account `ops` whose principal is `ops`.
fn devstack_ops() -> proto::SshAccount {
    proto::SshAccount { name: "ops".into(), principals: vec!["ops".into()], ..Default::default() }
}
