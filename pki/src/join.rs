//! Token join (docs/formats.md, "Sealed join token"; docs/protocol.md, "Join"): the sealed join token bcd sends, and the
//! signed JoinResponse it verifies.
//!
//! The sealed token is a JWE (see [`crate::jwe`]) whose payload is
//! `{"token":…,"csr":<the CSR's SPKI pin>,"iat":<Unix seconds>}`; the pin
//! binds it to one CSR, so a copy presented with another CSR is refused
//! (`token-csr-mismatch`), and `iat` bounds how long a copy is good: at most
//! [`IAT_MAX_AGE_S`] before the check (`token-stale`) and at most
//! [`IAT_MAX_SKEW_S`] after it (`token-not-yet-valid`).

use serde::{Deserialize, Serialize};

use crate::dsse::{self, Envelope};
use crate::error::{JoinError, JwsError};
use crate::{PublicKey, Result, Signer, jwe};

/// The payload of a sealed join token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedTokenPayload {
    /// The plain join token.
    pub token: String,
    /// The pin of the CSR's key.
    pub csr: String,
    /// When bcd sealed it (Unix seconds).
    pub iat: i64,
}

/// Seals a join token to the JoinService's encryption key, bound to a CSR pin.
pub fn seal_token(
    join_encryption: &p256::PublicKey,
    token: &str,
    csr_pin: &str,
    iat: i64,
    rnd: &jwe::SealRandomness,
) -> String {
    let payload = SealedTokenPayload { token: token.to_string(), csr: csr_pin.to_string(), iat };
    let kid = PublicKey::P256(*join_encryption).pin();
    jwe::seal(join_encryption, &kid, &serde_json::to_vec(&payload).expect("the payload serializes"), rnd)
}

/// How long before the check a sealed token's `iat` may be (1 hour): a
/// node seals its token right before it joins, and an unjoined node's clock
/// may be off by this much.
pub const IAT_MAX_AGE_S: i64 = 3600;
/// How far after the check a sealed token's `iat` may be (10 minutes).
pub const IAT_MAX_SKEW_S: i64 = 600;

/// Opens a sealed join token presented with the CSR whose pin is `csr_pin`,
/// at `now_ms`: the JWE (`jwe-*`), the payload (`token-payload`), the
/// binding (`token-csr-mismatch`), then `iat` (`token-stale`,
/// `token-not-yet-valid`).
pub fn open_token(
    join_encryption: &p256::SecretKey,
    sealed: &str,
    csr_pin: &str,
    now_ms: i64,
) -> Result<SealedTokenPayload> {
    open_token_with_kid(join_encryption, &join_encryption.keyid(), sealed, csr_pin, now_ms)
}

/// [`open_token`] for a caller that keeps the join-encryption key's pin
/// (`kid`): deriving it from the secret is a scalar multiplication at every
/// join.
pub fn open_token_with_kid(
    join_encryption: &p256::SecretKey,
    kid: &str,
    sealed: &str,
    csr_pin: &str,
    now_ms: i64,
) -> Result<SealedTokenPayload> {
    let plain = jwe::open(join_encryption, kid, sealed)?;
    let payload: SealedTokenPayload =
        crate::json::object(&plain).map_err(|reason| JoinError::TokenPayload { reason })?;
    if payload.csr != csr_pin {
        return Err(JoinError::TokenCsrMismatch { bound: payload.csr, presented: csr_pin.to_string() }.into());
    }
    let now = now_ms.div_euclid(1000);
    if payload.iat < now.saturating_sub(IAT_MAX_AGE_S) {
        return Err(JoinError::TokenStale { iat: payload.iat, now, max_age_s: IAT_MAX_AGE_S }.into());
    }
    if payload.iat > now.saturating_add(IAT_MAX_SKEW_S) {
        return Err(JwsError::NotYetValid { iat: payload.iat, now }.into());
    }
    Ok(payload)
}

/// Signs a JoinResponse with the JoinService's signing key.
pub fn sign_response(key: &dyn Signer, response: &proto::JoinResponse) -> Envelope {
    Envelope::sign(proto::payload_type::JOIN_RESPONSE, prost::Message::encode_to_vec(response), &[key])
}

/// Verifies a JoinResponse against the pinned join-signing key and checks
/// that it answers the CSR whose pin is `csr_pin`.
pub fn verify_response(env: &Envelope, join_signing: &PublicKey, csr_pin: &str) -> Result<proto::JoinResponse> {
    let payload = env.verify(proto::payload_type::JOIN_RESPONSE, std::slice::from_ref(join_signing), 1)?;
    let response: proto::JoinResponse = dsse::decode(payload)?;
    if response.csr_pin != csr_pin {
        return Err(JoinError::ResponseCsr { expected: csr_pin.to_string(), found: response.csr_pin }.into());
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;

    #[test]
    fn a_sealed_token_opens_only_with_its_csr() {
        let key = keys::p256("s", "join-encryption");
        let sealed = seal_token(&key.public_key(), "bc_jt_1", "sha256:csr", 10, &jwe::SealRandomness::seeded("s", "t"));
        let rnd = || jwe::SealRandomness::seeded("s", "t");
        assert_eq!(open_token(&key, &sealed, "sha256:csr", 10_000).unwrap().token, "bc_jt_1");
        assert_eq!(open_token(&key, &sealed, "sha256:other", 10_000).unwrap_err().code(), "token-csr-mismatch");
        // iat 10 s: good up to an hour later, not after.
        assert!(open_token(&key, &sealed, "sha256:csr", (10 + IAT_MAX_AGE_S) * 1000).is_ok());
        assert_eq!(
            open_token(&key, &sealed, "sha256:csr", (11 + IAT_MAX_AGE_S) * 1000).unwrap_err().code(),
            "token-stale"
        );
        let future = seal_token(&key.public_key(), "bc_jt_1", "sha256:csr", 10 + IAT_MAX_SKEW_S + 1, &rnd());
        assert_eq!(open_token(&key, &future, "sha256:csr", 10_000).unwrap_err().code(), "token-not-yet-valid");
    }

    #[test]
    fn responses_verify_against_the_pinned_key() {
        let key = keys::ed25519("s", "join-signing");
        let response = proto::JoinResponse { node_id: "n".into(), csr_pin: "p".into(), ..Default::default() };
        let env = sign_response(&key, &response);
        assert_eq!(verify_response(&env, &key.public_key(), "p").unwrap(), response);
        assert_eq!(verify_response(&env, &key.public_key(), "q").unwrap_err().code(), "join-response-csr");
        let other = keys::ed25519("s", "other").public_key();
        assert_eq!(verify_response(&env, &other, "p").unwrap_err().code(), "dsse-unknown-key");
    }
}
