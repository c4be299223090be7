//! What the fuzz targets share: the fixture keys they verify with
//! (testdata/README.md: seed `bc-interop-v1`, asOf 2026-01-01) and
//! [`verdict`], one parser's answer to some bytes as a line both languages
//! write the same way (`accept` or `refuse: <code>`). The targets check
//! their properties around it; `examples/verdicts.rs` prints it for every
//! file of a corpus, and `cargo xtask fuzz` compares that with Go's
//! (`bcd-fixtures verdicts`): the differential check.

use pki::dsse::Envelope;
use pki::tpm::attestor::{CertifiedKey, Signed, verify_key_certification};
use pki::{PublicKey, Signer as _, jws, release};

/// The fixture seed.
pub const SEED: &str = "bc-interop-v1";
/// The fixture time, in Unix milliseconds.
pub const AS_OF_MS: i64 = 1_767_225_600_000;
/// The tunnels issuer of the fixtures.
pub const TUNNELS_ISSUER: &str = "https://compute.dev.local/tunnels";
/// The node the fixtures' tickets are for.
pub const NODE: &str = "node_0";

/// The parsers with a verdict, the differential check's kinds.
pub const KINDS: &[&str] = &["dsse-json", "jwe", "jws", "manifest", "tpm-public", "csr", "certificate"];

/// The fixtures' node CA (`testdata/pki/node-ca.pem`), the one issuer the
/// `certificate` kind verifies against.
pub fn node_ca() -> &'static [u8] {
    static DER: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    DER.get_or_init(|| {
        let pem = include_str!("../../testdata/pki/node-ca.pem");
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        pki::b64::std_decode(&body).expect("the node CA's PEM is base64")
    })
}

/// What the `certificate` kind checks: `data` verified under [`node_ca`] at
/// the fixture time, as a node (client) certificate, the one profile the
/// Join path hands back and the gateway is shown.
pub fn verify_node_certificate(data: &[u8]) -> pki::Result<pki::x509::Verified> {
    pki::x509::verify_for(data, node_ca(), pki::x509::Usage::Client, AS_OF_MS)
}

/// The trusted command root.
pub fn command_root() -> PublicKey {
    pki::keys::ed25519(SEED, "command-root/0").public_key()
}

/// The pin of node/0's CSR key, the one join tokens are bound to.
pub fn csr_pin() -> String {
    pki::keys::p256(SEED, "node/0").keyid()
}

fn outcome<T>(r: pki::Result<T>) -> String {
    match r {
        Ok(_) => "accept".to_string(),
        Err(e) => format!("refuse: {}", e.code()),
    }
}

/// The verdict of parser `kind` on `data`.
pub fn verdict(kind: &str, data: &[u8]) -> String {
    let text = std::str::from_utf8(data);
    match kind {
        "dsse-json" => outcome(
            text.map_err(|e| pki::DsseError::Malformed { reason: e.to_string() }.into())
                .and_then(Envelope::from_json)
                .and_then(|env| env.verify(proto::payload_type::COMMAND, &[command_root()], 1).map(|_| ())),
        ),
        "jwe" => {
            let key = pki::keys::p256(SEED, "join-encryption");
            outcome(
                text.map_err(|e| pki::JweError::Malformed { reason: e.to_string() }.into())
                    .and_then(|t| pki::join::open_token(&key, t, &csr_pin(), AS_OF_MS)),
            )
        }
        "jws" => {
            let issuer = [pki::keys::p256(SEED, "tunnels-issuer").public_key()];
            outcome(
                text.map_err(|e| pki::JwsError::Malformed { reason: e.to_string() }.into())
                    .and_then(|t| jws::verify_exec_ticket(t, &issuer, TUNNELS_ISSUER, NODE, AS_OF_MS)),
            )
        }
        "manifest" => {
            let (a, b) = (pki::keys::ed25519(SEED, "release/0"), pki::keys::ed25519(SEED, "release/1"));
            let env = Envelope::sign(proto::payload_type::RELEASE, data.to_vec(), &[&a, &b]);
            let policy = release::Policy {
                keys: vec![a.public_key(), b.public_key()],
                threshold: 2,
                min_sequence: 5,
                installed_sequence: 0,
            };
            outcome(release::verify_manifest(&env, &policy, AS_OF_MS))
        }
        "tpm-public" => {
            let certified =
                CertifiedKey { public: data.to_vec(), certify: Signed { attest: vec![], signature: vec![] } };
            outcome(verify_key_certification(data, &[0; 32], &certified))
        }
        "csr" => outcome(pki::x509::parse_csr(data)),
        "certificate" => outcome(verify_node_certificate(data)),
        other => panic!("no parser {other:?}"),
    }
}

/// One DER TLV read by [`tlv`].
pub struct Tlv<'a> {
    /// Its tag.
    pub tag: u8,
    /// Its contents.
    pub contents: &'a [u8],
    /// The whole TLV.
    pub whole: &'a [u8],
    /// What follows it.
    pub rest: &'a [u8],
}

/// One DER TLV at the start of `input`; `None` unless it is definite-length
/// and fits. A reader of its own, independent of the one `pki` parses with
/// (`pki/src/x509/signed.rs`), so that the targets can check which bytes
/// were signed.
pub fn tlv(input: &[u8]) -> Option<Tlv<'_>> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b)), &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let header = input.len() - rest.len();
    Some(Tlv { tag, contents: &rest[..len], whole: &input[..header + len], rest: &rest[len..] })
}

/// The elements of a SEQUENCE's contents, each as its whole TLV.
pub fn elements(mut contents: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while !contents.is_empty() {
        let t = tlv(contents)?;
        out.push(t.whole);
        contents = t.rest;
    }
    Some(out)
}

/// A signed DER object (a certificate or a CSR): the exact bytes of what was
/// signed (its first element, whole) and the signature BIT STRING's octets
/// after the unused-bits byte.
pub fn signed_parts(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let parts = elements(tlv(der)?.contents)?;
    let bits = tlv(parts.get(2)?)?.contents;
    Some((parts.first()?, bits.get(1..)?))
}

/// Whether `sig` (DER ECDSA) is `key`'s ECDSA-SHA256 signature over `msg`,
/// with the `ecdsa` crate alone.
pub fn ecdsa_verifies(key: &p256::PublicKey, msg: &[u8], sig: &[u8]) -> bool {
    use p256::ecdsa::signature::Verifier as _;
    p256::ecdsa::Signature::from_der(sig)
        .is_ok_and(|sig| p256::ecdsa::VerifyingKey::from(*key).verify(msg, &sig).is_ok())
}
