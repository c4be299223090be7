//! The TPM join over the Join RPC: a software TPM in Rust (an EK certified
//! by a test manufacturer root, a restricted AK, a node key certified by the
//! AK) runs both rounds; the node is bound to `SHA-256(EK public)`, a rejoin
//! after a reinstall is the same node, a renewal needs the AK's
//! certification of the next key. The committed fixture of `testdata/tpm/`
//! (made on swtpm by bcd's Go side) passes round 2, when it is present.

use std::time::Duration;

use devstack::{
    ChallengeSource, DevStack, DevStackOptions, JoinMethod, NodeKeyLevel, NodeState, PoolSpec, TpmAllow,
    TpmAttestorOptions,
};
use pki::tpm::attest::{Attest, Attested, EcdsaSignature, PcrSelection};
use pki::tpm::attestor::Signed;
use pki::tpm::public::Public;
use pki::tpm::{NodeKeyPolicy, alg};
use sha2::{Digest, Sha256};
use tonic::{Code, Status};

use crate::node::{self, ClientCert, WAIT};

const DAY_MS: i64 = 86_400_000;

/// A test manufacturer: a root that issues EK certificates.
struct Manufacturer {
    key: p256::SecretKey,
    root: Vec<u8>,
}

impl Manufacturer {
    fn new(name: &str) -> Self {
        let key = pki::keys::random_p256();
        let now = node::devstack_now_ms();
        let profile = pki::x509::CaProfile {
            common_name: name,
            organization: Some("test manufacturer"),
            serial: &[1],
            validity: pki::x509::Validity { not_before_ms: now - DAY_MS, not_after_ms: now + DAY_MS },
        };
        let root = pki::x509::ca_certificate(&key, &profile).unwrap();
        Manufacturer { key, root }
    }

    fn ek_certificate(&self, ek: &p256::PublicKey) -> Vec<u8> {
        let now = node::devstack_now_ms();
        let profile = pki::x509::EkCertificate {
            common_name: "test EK",
            tpm: pki::x509::TpmIdentity { manufacturer: 0x4942_4d00, model: "SW TPM", version: 0x2019_1023 },
            serial: &[2],
            validity: pki::x509::Validity { not_before_ms: now - DAY_MS, not_after_ms: now + DAY_MS },
        };
        pki::x509::issue_ek_certificate(&self.key, &self.root, ek, &profile).unwrap()
    }
}

/// A TPM in software: its EK (certified by a manufacturer), the AK of the
/// current install and the node keys it holds.
struct SoftTpm {
    ek: p256::SecretKey,
    ek_certificate: Vec<u8>,
    ak: p256::SecretKey,
}

fn pcrs() -> Vec<Vec<u8>> {
    (0..8u8).map(|i| Sha256::digest([i]).to_vec()).collect()
}

impl SoftTpm {
    fn new(manufacturer: &Manufacturer) -> Self {
        let ek = pki::keys::random_p256();
        SoftTpm { ek_certificate: manufacturer.ek_certificate(&ek.public_key()), ek, ak: pki::keys::random_p256() }
    }

    /// The same TPM after a reinstall: the EK stays, bcd makes a new AK.
    fn reinstalled(&self) -> Self {
        SoftTpm { ek: self.ek.clone(), ek_certificate: self.ek_certificate.clone(), ak: pki::keys::random_p256() }
    }

    fn ek_public(&self) -> Vec<u8> {
        Public::ek_p256(&self.ek.public_key()).to_bytes()
    }

    fn ak_public(&self) -> Vec<u8> {
        Public::ak_p256(&self.ak.public_key()).to_bytes()
    }

    fn ak_name(&self) -> Vec<u8> {
        Public::ak_p256(&self.ak.public_key()).name().unwrap()
    }

    fn round1(&self) -> proto::TpmRound1 {
        proto::TpmRound1 {
            ek_public: self.ek_public(),
            ek_certificate: self.ek_certificate.clone(),
            ak_public: self.ak_public(),
        }
    }

    fn sign(&self, attested: Attested, nonce: &[u8]) -> Signed {
        let attest = Attest {
            magic: pki::tpm::GENERATED_VALUE,
            qualified_signer: vec![0, 0x0b],
            extra_data: nonce.to_vec(),
            clock_info: Default::default(),
            firmware_version: 1,
            attested,
        };
        let bytes = attest.to_bytes();
        let sig: p256::ecdsa::Signature =
            p256::ecdsa::signature::Signer::sign(&p256::ecdsa::SigningKey::from(&self.ak), &bytes);
        Signed { attest: bytes, signature: EcdsaSignature::from_p256(&sig).to_bytes() }
    }

    /// TPM2_Certify of a node key by the AK over `nonce`.
    fn certify(&self, key: &p256::PublicKey, nonce: &[u8]) -> proto::TpmCertification {
        let public = Public::node_key_p256(key).to_bytes();
        let name = pki::tpm::public::name_sha256(&public);
        let signed = self.sign(Attested::Certify { name, qualified_name: vec![] }, nonce);
        proto::TpmCertification { public, attest: signed.attest, signature: signed.signature }
    }

    /// Round 2 for a challenge: the node key `node_key` (in the TPM) is
    /// certified; the CSR is signed by `csr_key`.
    fn round2(
        &self,
        challenge: &proto::TpmChallenge,
        node_key: &p256::SecretKey,
        csr_key: &p256::SecretKey,
    ) -> proto::TpmRound2 {
        let credential = pki::tpm::credential::Credential {
            credential_blob: challenge.credential_blob.clone(),
            encrypted_secret: challenge.encrypted_secret.clone(),
        };
        let secret = pki::tpm::credential::activate_credential(&self.ek, &self.ak_name(), &credential).unwrap();
        let digest = Sha256::digest(pcrs().concat()).to_vec();
        let selection = vec![PcrSelection { hash: alg::SHA256, select: vec![0xff, 0, 0] }];
        let quote = self.sign(Attested::Quote { selection, pcr_digest: digest }, &challenge.nonce);
        proto::TpmRound2 {
            session_id: challenge.session_id.clone(),
            activated_secret: secret,
            quote: Some(proto::TpmQuote { attest: quote.attest, signature: quote.signature, pcr_values: pcrs() }),
            node_key: Some(self.certify(&node_key.public_key(), &challenge.nonce)),
            csr_der: pki::x509::csr(csr_key, "bcd").unwrap(),
        }
    }
}

fn claims() -> proto::NodeClaims {
    proto::NodeClaims { hostname: "tpm-host".into(), daemon_version: "0.0.0-test".into(), ..Default::default() }
}

async fn join_rpc(stack: &DevStack, method: proto::join_request::Method) -> Result<proto::JoinReply, Status> {
    let channel = node::channel(stack, None).await.unwrap();
    let request = proto::JoinRequest { method: Some(method), claims: Some(claims()) };
    proto::join_client::JoinClient::new(channel).join(request).await.map(|r| r.into_inner())
}

async fn round1(stack: &DevStack, r: proto::TpmRound1) -> Result<proto::TpmChallenge, Status> {
    match join_rpc(stack, proto::join_request::Method::TpmRound1(r)).await?.reply {
        Some(proto::join_reply::Reply::Challenge(c)) => Ok(c),
        other => panic!("round 1 answered {other:?}"),
    }
}

async fn round2(stack: &DevStack, r: proto::TpmRound2) -> Result<proto::Envelope, Status> {
    match join_rpc(stack, proto::join_request::Method::TpmRound2(r)).await?.reply {
        Some(proto::join_reply::Reply::Response(env)) => Ok(env),
        other => panic!("round 2 answered {other:?}"),
    }
}

/// Both rounds; the verified JoinResponse and the client certificate.
async fn join(
    stack: &DevStack,
    tpm: &SoftTpm,
    node_key: &p256::SecretKey,
    csr_key: &p256::SecretKey,
) -> Result<(proto::JoinResponse, ClientCert), Status> {
    let challenge = round1(stack, tpm.round1()).await?;
    let env = round2(stack, tpm.round2(&challenge, node_key, csr_key)).await?;
    let pin = pki::x509::parse_csr(&pki::x509::csr(csr_key, "bcd").unwrap()).unwrap().pin;
    let response =
        pki::join::verify_response(&pki::dsse::Envelope::from_proto(&env), &stack.join_signing_key(), &pin).unwrap();
    let cert = ClientCert { chain: response.certificate_chain.clone(), key: csr_key.clone() };
    Ok((response, cert))
}

fn code(status: &Status) -> (Code, &str) {
    (status.code(), devstack::status::code_of(status))
}

async fn tpm_stack(manufacturer: &Manufacturer, policy: NodeKeyPolicy, allow: Vec<TpmAllow>) -> (DevStack, String) {
    let attestor = TpmAttestorOptions { allow, ..TpmAttestorOptions::new(vec![manufacturer.root.clone()], policy) };
    let options = DevStackOptions { tpm_attestor: Some(attestor), ..DevStackOptions::memory() };
    let stack = DevStack::start(options).await.unwrap();
    let spec = PoolSpec { name: "tpm".into(), acceptance: devstack::Acceptance::None, ..PoolSpec::default() };
    let pool = stack.create_pool(spec).await.unwrap();
    (stack, pool)
}

async fn renew(
    stack: &DevStack,
    cert: &ClientCert,
    csr_key: &p256::SecretKey,
    node_key: Option<proto::TpmCertification>,
) -> Result<proto::JoinResponse, Status> {
    let csr_der = pki::x509::csr(csr_key, "bcd").unwrap();
    let pin = pki::x509::parse_csr(&csr_der).unwrap().pin;
    let channel = node::channel(stack, Some(cert.clone())).await.unwrap();
    let request = proto::RenewRequest { csr_der, node_key };
    let reply = proto::gateway_client::GatewayClient::new(channel).renew(request).await?.into_inner();
    let env = pki::dsse::Envelope::from_proto(&reply.response.unwrap());
    Ok(pki::join::verify_response(&env, &stack.join_signing_key(), &pin).unwrap())
}

fn names_ak(chain: &[Vec<u8>], stack: &DevStack, ak_name: &[u8]) -> bool {
    let leaf = pki::x509::verify_issued(&chain[0], stack.node_ca_der(), node::devstack_now_ms()).unwrap();
    leaf.uris.contains(&pki::x509::tpm_ak_uri(ak_name))
}

#[tokio::test]
async fn a_tpm_node_joins_in_two_rounds_rejoins_as_itself_and_renews_with_its_ak() {
    let manufacturer = Manufacturer::new("test EK root");
    let tpm = SoftTpm::new(&manufacturer);
    let allow = vec![TpmAllow::ek(&tpm.ek_public(), "tpm")];
    let (stack, pool) = tpm_stack(&manufacturer, NodeKeyPolicy::Certified, allow).await;

    // Two rounds; the key is made in the TPM and is the CSR's.
    let key = pki::keys::random_p256();
    let (response, cert) = join(&stack, &tpm, &key, &key).await.unwrap();
    let node_id = response.node_id.clone();
    assert_eq!(response.pool_id, pool);
    assert!(names_ak(&cert.chain, &stack, &tpm.ak_name()));
    let ek_sha256: [u8; 32] = Sha256::digest(tpm.ek_public()).into();
    let bindings = stack.node_bindings(&node_id).unwrap();
    assert_eq!(bindings.len(), 1);
    assert_eq!((bindings[0].kind.as_str(), bindings[0].sha256.as_str()), ("tpm-ek", hex::encode(ek_sha256).as_str()));
    assert_eq!((&bindings[0].ak_public, &bindings[0].ak_name), (&tpm.ak_public(), &tpm.ak_name()));
    assert_eq!(stack.node_by_ek(&ek_sha256).unwrap().unwrap().node_id, node_id);
    let joins = stack.node_joins(&node_id).unwrap();
    assert_eq!(joins.len(), 1);
    assert_eq!(
        (joins[0].method, joins[0].node_key, joins[0].policy.as_str()),
        (JoinMethod::Tpm, NodeKeyLevel::Tpm, "certified")
    );

    // The node's session works on that identity, and it is adopted.
    let test_node = node::TestNode::from_response(key.clone(), response.clone());
    let session = test_node.connect(&stack, 0).await.unwrap();
    stack.await_node_state(&node_id, NodeState::Adopted, WAIT).await.unwrap();
    drop(session);

    // A reinstall: the same EK, a new AK and key: the same node, one more certificate.
    let reinstalled = tpm.reinstalled();
    let key2 = pki::keys::random_p256();
    let (again, cert2) = join(&stack, &reinstalled, &key2, &key2).await.unwrap();
    assert_eq!(again.node_id, node_id);
    assert!(names_ak(&cert2.chain, &stack, &reinstalled.ak_name()));
    assert_eq!(stack.node_certs(&node_id).unwrap().len(), 2);
    assert_eq!(stack.node_joins(&node_id).unwrap().len(), 2);
    assert_eq!(stack.nodes().unwrap().len(), 1);
    let binding = &stack.node_bindings(&node_id).unwrap()[0];
    assert_eq!(binding.ak_public, reinstalled.ak_public());
    assert_eq!(stack.node(&node_id).unwrap().unwrap().state, NodeState::Adopted);

    // Renewal: the current AK certifies the next key over SHA-256(csr).
    let next = pki::keys::random_p256();
    let csr = pki::x509::csr(&next, "bcd").unwrap();
    let nonce = Sha256::digest(&csr);
    let renewed = renew(&stack, &cert2, &next, Some(reinstalled.certify(&next.public_key(), &nonce))).await.unwrap();
    assert_eq!(renewed.node_id, node_id);
    assert!(names_ak(&renewed.certificate_chain, &stack, &reinstalled.ak_name()));
    assert_eq!(stack.node_certs(&node_id).unwrap().len(), 3);

    // Refused renewals.
    let other = pki::keys::random_p256();
    let cases = [
        (None, "node-key-uncertified"),
        (Some(reinstalled.certify(&next.public_key(), &[0; 32])), "certify-nonce"),
        (Some(reinstalled.certify(&other.public_key(), &nonce)), "node-key-not-csr"),
        (Some(tpm.certify(&next.public_key(), &nonce)), "certify-signature"),
    ];
    for (certification, expected) in cases {
        let err = renew(&stack, &cert2, &next, certification).await.unwrap_err();
        assert_eq!(code(&err), (Code::PermissionDenied, expected));
    }
    assert_eq!(stack.node_certs(&node_id).unwrap().len(), 3);
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn tpm_joins_are_refused_with_the_attestors_codes() {
    let manufacturer = Manufacturer::new("test EK root");
    let tpm = SoftTpm::new(&manufacturer);

    // No attestor.
    let plain = DevStack::start(DevStackOptions::memory()).await.unwrap();
    let err = round1(&plain, tpm.round1()).await.unwrap_err();
    assert_eq!(code(&err), (Code::Unimplemented, "method-unsupported"));
    assert!(matches!(plain.allow_tpm(TpmAllow::any("x")), Err(devstack::Error::NoTpmAttestor)));
    plain.shutdown().await.unwrap();

    let (stack, _pool) = tpm_stack(&manufacturer, NodeKeyPolicy::Tpm, vec![]).await;
    // An EK certificate from another manufacturer.
    let foreign = SoftTpm::new(&Manufacturer::new("another root"));
    assert_eq!(
        code(&round1(&stack, foreign.round1()).await.unwrap_err()),
        (Code::PermissionDenied, "ek-certificate-chain")
    );
    // An EK no allow-list entry names, then any EK into a pool that does not exist, then into "tpm".
    assert_eq!(code(&round1(&stack, tpm.round1()).await.unwrap_err()), (Code::PermissionDenied, "tpm-not-allowed"));
    stack.allow_tpm(TpmAllow::any("nowhere")).unwrap();
    assert_eq!(code(&round1(&stack, tpm.round1()).await.unwrap_err()), (Code::FailedPrecondition, "pool-unknown"));
    stack.allow_tpm(TpmAllow::any("tpm")).unwrap();
    // Malformed round 1.
    let broken = proto::TpmRound1 { ek_public: vec![1, 2, 3], ..tpm.round1() };
    assert_eq!(code(&round1(&stack, broken).await.unwrap_err()), (Code::InvalidArgument, "tpm-malformed"));

    // Under nodeKey tpm, a CSR of a key that is not the certified one.
    let key = pki::keys::random_p256();
    let software = pki::keys::random_p256();
    let challenge = round1(&stack, tpm.round1()).await.unwrap();
    let err = round2(&stack, tpm.round2(&challenge, &key, &software)).await.unwrap_err();
    assert_eq!(code(&err), (Code::PermissionDenied, "node-key-not-csr"));
    // A session is used once, refused or not.
    let err = round2(&stack, tpm.round2(&challenge, &key, &key)).await.unwrap_err();
    assert_eq!(code(&err), (Code::FailedPrecondition, "tpm-session-unknown"));
    // A wrong activated secret, a quote over another nonce.
    let challenge = round1(&stack, tpm.round1()).await.unwrap();
    let mut answer = tpm.round2(&challenge, &key, &key);
    answer.activated_secret[0] ^= 1;
    assert_eq!(code(&round2(&stack, answer).await.unwrap_err()), (Code::PermissionDenied, "credential"));
    let challenge = round1(&stack, tpm.round1()).await.unwrap();
    let other_nonce = proto::TpmChallenge { nonce: vec![7; 32], ..challenge.clone() };
    let mut answer = tpm.round2(&challenge, &key, &key);
    answer.quote = tpm.round2(&other_nonce, &key, &key).quote;
    assert_eq!(code(&round2(&stack, answer).await.unwrap_err()), (Code::PermissionDenied, "quote-nonce"));
    assert!(stack.nodes().unwrap().is_empty());
    // And the good one.
    let (response, _) = join(&stack, &tpm, &key, &key).await.unwrap();
    assert_eq!(stack.node_joins(&response.node_id).unwrap()[0].policy, "tpm");
    stack.shutdown().await.unwrap();

    // A round 2 after its session's deadline.
    let attestor = TpmAttestorOptions {
        allow: vec![TpmAllow::any("tpm")],
        session_ttl: Duration::ZERO,
        ..TpmAttestorOptions::new(vec![manufacturer.root.clone()], NodeKeyPolicy::Any)
    };
    let stack = DevStack::start(DevStackOptions { tpm_attestor: Some(attestor), ..DevStackOptions::memory() }).await;
    let stack = stack.unwrap();
    stack.create_pool(PoolSpec { name: "tpm".into(), ..PoolSpec::default() }).await.unwrap();
    let challenge = round1(&stack, tpm.round1()).await.unwrap();
    let err = round2(&stack, tpm.round2(&challenge, &key, &key)).await.unwrap_err();
    assert_eq!(code(&err), (Code::FailedPrecondition, "tpm-session-expired"));
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_token_node_renews_with_a_plain_csr() {
    let (stack, _pool, token) = crate::stack_with_pool(DevStackOptions::memory(), None).await;
    let node = node::TestNode::join(&stack, &token).await.unwrap();
    let joins = stack.node_joins(&node.id).unwrap();
    assert_eq!(
        (joins[0].method, joins[0].node_key, joins[0].policy.as_str()),
        (JoinMethod::Token, NodeKeyLevel::Any, "")
    );
    assert!(stack.node_bindings(&node.id).unwrap().is_empty());
    // A certification from a token node is ignored: there is no AK to check it with.
    let next = pki::keys::random_p256();
    let tpm = SoftTpm::new(&Manufacturer::new("unused"));
    let renewed = renew(&stack, &node.cert, &next, Some(tpm.certify(&next.public_key(), &[0; 32]))).await.unwrap();
    let leaf = pki::x509::verify_issued(&renewed.certificate_chain[0], stack.node_ca_der(), node::devstack_now_ms());
    assert!(leaf.unwrap().uris.iter().all(|u| !u.starts_with("urn:bc:tpm-ak:")));
    stack.shutdown().await.unwrap();
}

/// `testdata/tpm/<name>` as JSON, if the fixture set is there.
fn fixture(name: &str) -> Option<serde_json::Value> {
    let path = format!("{}/../testdata/tpm/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).ok()?;
    Some(serde_json::from_str(&text).unwrap())
}

fn b64(v: &serde_json::Value) -> Vec<u8> {
    pki::b64::std_decode(v.as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn the_committed_swtpm_fixture_passes_both_rounds_through_the_join_service() {
    let (Some(r1), Some(ch), Some(answer)) =
        (fixture("round1.json"), fixture("challenge.json"), fixture("answer.json"))
    else {
        eprintln!("testdata/tpm is not there: the fixture half of the TPM join test is skipped");
        return;
    };
    let root = std::fs::read(format!("{}/../testdata/tpm/ek-root.der", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let ek_public = b64(&r1["ekPublic"]);
    let attestor = TpmAttestorOptions {
        allow: vec![TpmAllow::ek(&ek_public, "tpm")],
        challenge: ChallengeSource::Seeded { seed: "bc-interop-v1".into(), label: "tpm/challenge".into() },
        ..TpmAttestorOptions::new(vec![root], NodeKeyPolicy::Tpm)
    };
    let stack = DevStack::start(DevStackOptions { tpm_attestor: Some(attestor), ..DevStackOptions::memory() }).await;
    let stack = stack.unwrap();
    stack.create_pool(PoolSpec { name: "tpm".into(), ..PoolSpec::default() }).await.unwrap();
    let round1_msg = proto::TpmRound1 {
        ek_public: ek_public.clone(),
        ek_certificate: b64(&r1["ekCertificate"]),
        ak_public: b64(&r1["akPublic"]),
    };
    let node_key = &answer["nodeKey"];
    let round2_msg = |session_id: String| proto::TpmRound2 {
        session_id,
        activated_secret: b64(&answer["activatedSecret"]),
        quote: Some(proto::TpmQuote {
            attest: b64(&answer["quote"]["attest"]),
            signature: b64(&answer["quote"]["signature"]),
            pcr_values: answer["pcrs"]["values"].as_array().unwrap().iter().map(b64).collect(),
        }),
        node_key: Some(proto::TpmCertification {
            public: b64(&node_key["public"]),
            attest: b64(&node_key["certify"]["attest"]),
            signature: b64(&node_key["certify"]["signature"]),
        }),
        csr_der: b64(&answer["csr"]),
    };

    // The seeded challenge is the committed one.
    let challenge = round1(&stack, round1_msg.clone()).await.unwrap();
    assert_eq!(challenge.credential_blob, b64(&ch["credentialBlob"]));
    assert_eq!(challenge.encrypted_secret, b64(&ch["encryptedSecret"]));
    assert_eq!(challenge.nonce, b64(&ch["nonce"]));

    // Refused: a CSR of another key (nodeKey tpm), a changed PCR value.
    let mut other_csr = round2_msg(challenge.session_id.clone());
    other_csr.csr_der = pki::x509::csr(&pki::keys::random_p256(), "bcd").unwrap();
    assert_eq!(code(&round2(&stack, other_csr).await.unwrap_err()), (Code::PermissionDenied, "node-key-not-csr"));
    let challenge = round1(&stack, round1_msg.clone()).await.unwrap();
    let mut pcr = round2_msg(challenge.session_id);
    pcr.quote.as_mut().unwrap().pcr_values[0][0] ^= 1;
    assert_eq!(code(&round2(&stack, pcr).await.unwrap_err()), (Code::PermissionDenied, "pcr-digest"));

    // Accepted, twice: the second is a rejoin of the same node.
    let mut ids = Vec::new();
    for _ in 0..2 {
        let challenge = round1(&stack, round1_msg.clone()).await.unwrap();
        let env = round2(&stack, round2_msg(challenge.session_id)).await.unwrap();
        let csr_pin = pki::x509::parse_csr(&b64(&answer["csr"])).unwrap().pin;
        let env = pki::dsse::Envelope::from_proto(&env);
        let response = pki::join::verify_response(&env, &stack.join_signing_key(), &csr_pin).unwrap();
        let ak_name = pki::tpm::public::name_sha256(&round1_msg.ak_public);
        assert!(names_ak(&response.certificate_chain, &stack, &ak_name));
        ids.push(response.node_id);
    }
    assert_eq!(ids[0], ids[1]);
    let joins = stack.node_joins(&ids[0]).unwrap();
    assert_eq!(joins.iter().map(|j| j.node_key).collect::<Vec<_>>(), [NodeKeyLevel::Tpm, NodeKeyLevel::Tpm]);
    let ek_sha256: [u8; 32] = Sha256::digest(&ek_public).into();
    assert_eq!(stack.node_by_ek(&ek_sha256).unwrap().unwrap().node_id, ids[0]);
    assert_eq!(stack.node_certs(&ids[0]).unwrap().len(), 2);
    stack.shutdown().await.unwrap();
}
