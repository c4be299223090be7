//! Instances seen from a hand-made node: its Hello's runtime driver becomes
//! a label, placement puts an instance in its next spec (signed), its
//! StatusReport moves the instance to running, the secret broker seals only
//! a secret its instances name, the workload issuer mints tokens only for
//! its running instances, and a report without the instance after the
//! delete's generation records it deleted.

use devstack::{Acceptance, DevStackOptions, InstanceRequest, InstanceState, PoolKind, PoolSpec, workload_issuer};
use prost::Message as _;
use proto::gateway_frame::Frame as Out;
use proto::node_frame::Frame as In;

use crate::node::{Session, TestNode, WAIT, control};

fn system_section(cores: u32, memory_bytes: u64) -> proto::InventorySection {
    use sha2::Digest as _;
    let content = proto::SystemInventory { cpu_cores: cores, memory_bytes, ..Default::default() }.encode_to_vec();
    proto::InventorySection { name: "system".into(), sha256: hex::encode(sha2::Sha256::digest(&content)), content }
}

async fn report(session: &mut Session, report: proto::StatusReport) {
    let seq = session.send_event(In::StatusReport(report)).await;
    session.await_ack(seq).await;
}

pub(crate) async fn secret_answer(
    session: &mut Session,
    node: &TestNode,
    secret_ref: &str,
) -> (proto::SecretResponse, p256::SecretKey) {
    let ephemeral = pki::keys::random_p256();
    let spki = pki::PublicKey::P256(ephemeral.public_key()).spki_der();
    let statement = proto::NodeStatement {
        node_id: node.id.clone(),
        boot_id: node.boot_id.clone(),
        at_ms: 1,
        body: Some(proto::node_statement::Body::SecretRequest(proto::SecretRequest {
            request_id: format!("req-{secret_ref}"),
            secret_ref: secret_ref.into(),
            ephemeral_spki_der: spki,
        })),
    };
    let env = pki::statement::sign(&node.key, &statement);
    session.send(control(In::SecretRequest(env.to_proto()))).await;
    let f = session.wait_for(|f| matches!(f.frame, Some(Out::SecretResponse(_)))).await.unwrap();
    let Some(Out::SecretResponse(r)) = f.frame else { unreachable!() };
    (r, ephemeral)
}

async fn token_answer(session: &mut Session, instance_id: &str) -> proto::WorkloadTokenResponse {
    let request = proto::WorkloadTokenRequest {
        request_id: format!("tok-{instance_id}"),
        instance_id: instance_id.into(),
        audience: "https://vault".into(),
    };
    session.send(control(In::WorkloadTokenRequest(request))).await;
    let f = session.wait_for(|f| matches!(f.frame, Some(Out::WorkloadTokenResponse(_)))).await.unwrap();
    let Some(Out::WorkloadTokenResponse(r)) = f.frame else { unreachable!() };
    r
}

#[tokio::test]
async fn an_instance_is_placed_run_given_its_secret_and_token_and_deleted() {
    let logs = crate::Logs::global();
    let stack =
        devstack::DevStack::start(DevStackOptions { signed_intent: true, ..DevStackOptions::memory() }).await.unwrap();
    let spec =
        PoolSpec { name: "vps".into(), acceptance: Acceptance::None, kind: PoolKind::VpsHost, ..PoolSpec::default() };
    let pool = stack.create_pool(spec).await.unwrap();
    let token = stack.mint_join_token(&pool, 1, std::time::Duration::from_secs(60)).await.unwrap();
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node
        .connect_as(&stack, 0, |h| {
            h.drivers =
                vec![proto::DriverManifest { name: "libvirt-kvm".into(), kind: "runtime".into(), version: "10".into() }]
        })
        .await
        .unwrap();
    session.expect_desired_state().await;
    // Its Hello's runtime and capability (the test node advertises diag.nvml).
    let labels = stack.node_labels(&node.id).unwrap();
    assert_eq!(
        labels.iter().map(|l| l.label.as_str()).collect::<Vec<_>>(),
        ["bc.dev/cap.diag.nvml", "bc.dev/driver.libvirt-kvm"]
    );
    let inventory = vec![system_section(8, 16 << 30)];
    report(
        &mut session,
        proto::StatusReport { inventory: inventory.clone(), applied_generation: 1, ..Default::default() },
    )
    .await;

    let secret = stack.put_secret(b"#cloud-config\npassword: s3cr3t-value\n").await.unwrap();
    let other = stack.put_secret(b"someone else's").await.unwrap();
    let image = format!("sha256:{}", "ab".repeat(32));
    let request = InstanceRequest {
        runtime: "libvirt-kvm".into(),
        vcpus: 2,
        memory_bytes: 2 << 30,
        user_data_secret: Some(secret.clone()),
        image: Some(image.clone()),
        ..InstanceRequest::default()
    };
    // An image that is no digest is refused before anything is stored.
    for bad in ["sha256:AB", "ab".repeat(32).as_str(), "sha256:../../etc/passwd"] {
        let err = stack.create_instance(&pool, InstanceRequest { image: Some(bad.into()), ..request.clone() }).await;
        let err = err.expect_err(bad).to_string();
        assert!(err.contains(proto::refusal::Code::InstanceInvalid.as_str()), "{bad}: {err}");
    }
    let id = stack.create_instance(&pool, request.clone()).await.unwrap();
    let (spec, env) = session.expect_desired_state().await;
    assert!(!env.signatures.is_empty(), "the spec is signed");
    let section = spec.instances.clone().unwrap();
    assert_eq!((section.instances.len(), section.instances[0].id.as_str()), (1, id.as_str()));
    assert_eq!(section.instances[0].state, "running");
    assert_eq!(section.instances[0].image, image, "the spec names the image it boots");

    // Too big for the room left: unschedulable, the room filter named.
    let big = stack.create_instance(&pool, InstanceRequest { vcpus: 8, ..request.clone() }).await.unwrap();
    let row = stack.instance(&big).unwrap().unwrap();
    assert_eq!(row.state, InstanceState::Unschedulable);
    assert!(row.reason.contains("room: 1 host(s) lack room for 8 vCPUs"), "{row:?}");

    // Before it runs: no token.
    assert!(token_answer(&mut session, &id).await.error.starts_with("workload-instance: "));
    let running = proto::InstanceStatus {
        id: id.clone(),
        state: "running".into(),
        generation: spec.generation,
        ..Default::default()
    };
    report(
        &mut session,
        proto::StatusReport { instances: vec![running], applied_generation: spec.generation, ..Default::default() },
    )
    .await;
    stack.await_instance_state(&id, InstanceState::Running, WAIT).await.unwrap();

    let (answer, ephemeral) = secret_answer(&mut session, &node, &secret).await;
    assert!(answer.error.is_empty(), "{answer:?}");
    let kid = pki::PublicKey::P256(ephemeral.public_key()).pin();
    assert_eq!(pki::jwe::open(&ephemeral, &kid, &answer.jwe).unwrap(), b"#cloud-config\npassword: s3cr3t-value\n");
    let (refused, _) = secret_answer(&mut session, &node, &other).await;
    assert!(refused.error.starts_with("secret-unknown: ") && refused.jwe.is_empty(), "{refused:?}");

    let minted = token_answer(&mut session, &id).await;
    let issuer = match stack.intent_public_keys().unwrap().workload_issuer {
        pki::PublicKey::P256(k) => k,
        other => panic!("{other:?}"),
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let claims = pki::jws::verify_workload_token(
        &minted.token,
        &[issuer],
        &workload_issuer(stack.trust_domain()),
        "https://vault",
        now,
    )
    .unwrap();
    assert_eq!((claims.sub, claims.node), (format!("instance:{id}"), node.id.clone()));
    assert!(token_answer(&mut session, "inst-elsewhere").await.error.starts_with("workload-instance: "));

    // Deleted once a report at or after the removal no longer lists it; the
    // room it freed places the big one.
    stack.delete_instance(&id).await.unwrap();
    let (gone, _) = session.expect_desired_state().await;
    assert!(gone.instances.unwrap().instances.is_empty());
    assert_eq!(stack.instance(&id).unwrap().unwrap().state, InstanceState::Running, "not before the host says so");
    report(&mut session, proto::StatusReport { applied_generation: gone.generation, ..Default::default() }).await;
    stack.await_instance_state(&id, InstanceState::Deleted, WAIT).await.unwrap();
    let (placed, _) = session.expect_desired_state().await;
    assert_eq!(placed.instances.unwrap().instances[0].id, big);
    assert_eq!(stack.instance(&big).unwrap().unwrap().state, InstanceState::Pending);
    let logs = logs.text();
    assert!(logs.contains(&id), "the stack's log is captured");
    assert!(!logs.contains("s3cr3t-value") && !logs.contains(&minted.token), "a secret or a token reached the log");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_instance_with_a_network_policy_waits_for_a_host_that_enforces_one_and_a_bad_policy_is_refused() {
    let stack = devstack::DevStack::start(DevStackOptions::memory()).await.unwrap();
    let spec =
        PoolSpec { name: "vps".into(), acceptance: Acceptance::None, kind: PoolKind::VpsHost, ..PoolSpec::default() };
    let pool = stack.create_pool(spec).await.unwrap();
    let token = stack.mint_join_token(&pool, 1, std::time::Duration::from_secs(60)).await.unwrap();
    let node = TestNode::join(&stack, &token).await.unwrap();
    let libvirt =
        || vec![proto::DriverManifest { name: "libvirt-kvm".into(), kind: "runtime".into(), version: "10".into() }];
    let mut session = node.connect_as(&stack, 0, |h| h.drivers = libvirt()).await.unwrap();
    session.expect_desired_state().await;
    let inventory = vec![system_section(8, 16 << 30)];
    let rooted = proto::StatusReport { inventory: inventory.clone(), applied_generation: 1, ..Default::default() };
    report(&mut session, rooted.clone()).await;

    let rule = |protocol: &str, cidr: &str, min: u32, max: u32| proto::NetworkRule {
        protocol: protocol.into(),
        cidr: cidr.into(),
        port_min: min,
        port_max: max,
    };
    let policy = proto::NetworkPolicy {
        ingress: vec![rule("tcp", "10.0.0.0/8", 22, 22)],
        egress: vec![rule("udp", "0.0.0.0/0", 53, 53), rule("icmp", "0.0.0.0/0", 0, 0)],
    };
    let request = InstanceRequest {
        runtime: "libvirt-kvm".into(),
        vcpus: 1,
        memory_bytes: 1 << 30,
        network_policy: Some(policy.clone()),
        ..InstanceRequest::default()
    };
    // A bad rule is refused before anything is stored, the rule named.
    let bad = proto::NetworkPolicy { egress: vec![rule("tcp", "10.0.0.1/8", 443, 443)], ..policy.clone() };
    let err = stack
        .create_instance(&pool, InstanceRequest { network_policy: Some(bad), ..request.clone() })
        .await
        .expect_err("a peer with host bits")
        .to_string();
    assert!(err.contains("instance-invalid: network policy: egress rule 0: peer \"10.0.0.1/8\""), "{err}");
    assert!(stack.instances().unwrap().is_empty(), "nothing stored");

    // The host does not advertise the capability: the instance waits, the label named.
    let id = stack.create_instance(&pool, request).await.unwrap();
    let row = stack.instance(&id).unwrap().unwrap();
    assert_eq!(row.state, InstanceState::Unschedulable);
    assert!(row.reason.contains("do not advertise instance.network-policy"), "{row:?}");

    // Back with it: placed at its next report, the policy in the spec it gets.
    drop(session);
    let mut session = node
        .connect_as(&stack, 0, |h| {
            h.drivers = libvirt();
            h.capabilities.push("instance.network-policy".into());
        })
        .await
        .unwrap();
    session.expect_desired_state().await;
    report(&mut session, rooted).await;
    let (spec, _) = session.expect_desired_state().await;
    let instances = spec.instances.unwrap().instances;
    assert_eq!((instances.len(), instances[0].id.as_str()), (1, id.as_str()));
    assert_eq!(instances[0].network_policy.as_ref(), Some(&policy));
    assert_eq!(stack.instance(&id).unwrap().unwrap().state, InstanceState::Pending);
    stack.shutdown().await.unwrap();
}
