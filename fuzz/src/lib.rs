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
pub const KINDS: &[&str] = &["dsse-json", "jwe", "jws", "manifest", "tpm-public"];

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
        other => panic!("no parser {other:?}"),
    }
}
