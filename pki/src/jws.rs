//! ES256 tokens (docs/formats.md, "ES256 tokens"): exec tickets (compact JWS) and workload
//! tokens (JWT), both signed with P-256 over RFC 6979, so fixtures are
//! byte-stable.
//!
//! Checks, in order (the same on the Go side): three base64url parts and a
//! JSON header (`jws-malformed`), `alg` ES256 (`jws-alg`), no `crit` member
//! in the header (`jws-crit`: RFC 7515 §4.1.11 has a verifier refuse a
//! critical extension it does not understand, and we understand none), a
//! trusted `kid` (`jws-unknown-kid`), the signature (`jws-bad-signature`),
//! the claims (`token-claims`), then `iss`, `aud`, `exp`, `iat` and, for
//! tickets, `op`. As in [`crate::jwe`], a header member that is `null`
//! counts as absent.

use serde::{Deserialize, Serialize};

use crate::error::JwsError;
use crate::{Error, Result, Signer as _, b64};

/// The operation an exec ticket grants.
pub const OP_CONSOLE: &str = "console";
/// How far in the future `iat` may lie (clock skew), in seconds.
pub const MAX_SKEW_S: i64 = 60;

/// The claims of an exec ticket, in their serialized order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecTicket {
    /// The issuer (the tunnels issuer).
    pub iss: String,
    /// `bcd:<node-id>`.
    pub aud: String,
    /// Who opens the console.
    pub sub: String,
    /// The operation: `console`.
    pub op: String,
    /// Issued at (Unix seconds).
    pub iat: i64,
    /// Expires at (Unix seconds).
    pub exp: i64,
    /// The ticket id.
    pub jti: String,
}

/// The claims of a workload token, in their serialized order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadToken {
    /// The issuer (the workload issuer).
    pub iss: String,
    /// The audience the workload asked for.
    pub aud: String,
    /// `instance:<id>`.
    pub sub: String,
    /// The node the instance runs on.
    pub node: String,
    /// Issued at (Unix seconds).
    pub iat: i64,
    /// Expires at (Unix seconds).
    pub exp: i64,
}

/// The audience of an exec ticket for `node_id`.
pub fn ticket_audience(node_id: &str) -> String {
    format!("bcd:{node_id}")
}

/// The `iss` of the exec tickets of `trust_domain`'s tunnels issuer:
/// `https://<trust domain>/tunnels`.
pub fn tunnels_issuer(trust_domain: &str) -> String {
    format!("https://{trust_domain}/tunnels")
}

/// Signs `claims` as a compact JWS: header `{"alg":"ES256","kid":…,"typ":"JWT"}`,
/// signature the raw 64-byte r‖s.
pub fn sign<C: Serialize>(key: &p256::SecretKey, claims: &C) -> String {
    let header = format!(r#"{{"alg":"ES256","kid":"{}","typ":"JWT"}}"#, key.keyid());
    let payload = serde_json::to_vec(claims).expect("claims always serialize");
    let input = format!("{}.{}", b64::url(header.as_bytes()), b64::url(&payload));
    let sig = crate::keys::sign_p256(key, input.as_bytes());
    format!("{input}.{}", b64::url(&sig.to_bytes()))
}

#[derive(Deserialize)]
struct Header {
    alg: Option<String>,
    kid: Option<String>,
    crit: Option<serde_json::Value>,
}

/// Verifies a compact JWS against trusted issuer keys and decodes its claims.
fn verify<C: for<'de> Deserialize<'de>>(token: &str, trusted: &[p256::PublicKey]) -> Result<C> {
    let malformed = |reason: &str| Error::from(JwsError::Malformed { reason: reason.to_string() });
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return Err(malformed("not three parts"));
    }
    let raw: Vec<Vec<u8>> = parts
        .iter()
        .map(|p| b64::url_decode(p).ok_or_else(|| malformed("a part is not base64url")))
        .collect::<Result<_>>()?;
    let header: Header = crate::json::object(&raw[0]).map_err(|_| malformed("the header is not a JSON object"))?;
    let alg = header.alg.unwrap_or_default();
    if alg != "ES256" {
        return Err(JwsError::Alg { found: alg }.into());
    }
    if let Some(crit) = header.crit {
        return Err(JwsError::Crit { crit: crit.to_string() }.into());
    }
    let kid = header.kid.unwrap_or_default();
    let key = trusted
        .iter()
        .find(|k| crate::PublicKey::P256(**k).pin() == kid)
        .ok_or_else(|| JwsError::UnknownKid { kid: kid.clone() })?;
    let input = &token[..parts[0].len() + 1 + parts[1].len()];
    if !crate::keys::verify_p1363(key, input.as_bytes(), &raw[2]) {
        return Err(JwsError::BadSignature { kid }.into());
    }
    crate::json::object(&raw[1]).map_err(|reason| JwsError::Claims { reason }.into())
}

fn check_times(iat: i64, exp: i64, now_ms: i64) -> Result<()> {
    let now = now_ms.div_euclid(1000);
    if exp <= now {
        return Err(JwsError::Expired { exp, now }.into());
    }
    if iat > now + MAX_SKEW_S {
        return Err(JwsError::NotYetValid { iat, now }.into());
    }
    Ok(())
}

/// Verifies an exec ticket for `node_id` from `issuer` at `now_ms`.
pub fn verify_exec_ticket(
    token: &str,
    trusted: &[p256::PublicKey],
    issuer: &str,
    node_id: &str,
    now_ms: i64,
) -> Result<ExecTicket> {
    let claims: ExecTicket = verify(token, trusted)?;
    if claims.iss != issuer {
        return Err(JwsError::Issuer { expected: issuer.to_string(), found: claims.iss }.into());
    }
    let aud = ticket_audience(node_id);
    if claims.aud != aud {
        return Err(JwsError::Audience { expected: aud, found: claims.aud }.into());
    }
    check_times(claims.iat, claims.exp, now_ms)?;
    if claims.op != OP_CONSOLE {
        return Err(JwsError::TicketOp { found: claims.op }.into());
    }
    Ok(claims)
}

/// Verifies a workload token for `audience` from `issuer` at `now_ms`.
pub fn verify_workload_token(
    token: &str,
    trusted: &[p256::PublicKey],
    issuer: &str,
    audience: &str,
    now_ms: i64,
) -> Result<WorkloadToken> {
    let claims: WorkloadToken = verify(token, trusted)?;
    if claims.iss != issuer {
        return Err(JwsError::Issuer { expected: issuer.to_string(), found: claims.iss }.into());
    }
    if claims.aud != audience {
        return Err(JwsError::Audience { expected: audience.to_string(), found: claims.aud }.into());
    }
    check_times(claims.iat, claims.exp, now_ms)?;
    if !claims.sub.starts_with("instance:") {
        return Err(JwsError::Claims { reason: format!("sub {:?} does not name an instance", claims.sub) }.into());
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;

    fn ticket() -> ExecTicket {
        ExecTicket {
            iss: "tunnels".into(),
            aud: ticket_audience("node_1"),
            sub: "user:alice".into(),
            op: OP_CONSOLE.into(),
            iat: 1000,
            exp: 1300,
            jti: "t1".into(),
        }
    }

    #[test]
    fn tickets_verify_and_refuse() {
        let key = keys::p256("s", "tunnels-issuer");
        let token = sign(&key, &ticket());
        assert_eq!(token, sign(&key, &ticket()), "RFC 6979 makes tokens stable");
        let trusted = [key.public_key()];
        assert_eq!(verify_exec_ticket(&token, &trusted, "tunnels", "node_1", 1_100_000).unwrap(), ticket());
        let code =
            |t: &str, node: &str, now: i64| verify_exec_ticket(t, &trusted, "tunnels", node, now).unwrap_err().code();
        assert_eq!(code(&token, "node_2", 1_100_000), "token-audience");
        assert_eq!(code(&token, "node_1", 1_300_000), "token-expired");
        assert_eq!(code(&token, "node_1", 0), "token-not-yet-valid");
        let other = sign(&keys::p256("s", "x"), &ticket());
        assert_eq!(code(&other, "node_1", 1_100_000), "jws-unknown-kid");
    }

    /// A compact JWS of `claims` under an arbitrary `header`, signed by `key`.
    fn sign_with_header<C: Serialize>(key: &p256::SecretKey, header: &str, claims: &C) -> String {
        let payload = serde_json::to_vec(claims).unwrap();
        let input = format!("{}.{}", b64::url(header.as_bytes()), b64::url(&payload));
        let sig = crate::keys::sign_p256(key, input.as_bytes());
        format!("{input}.{}", b64::url(&sig.to_bytes()))
    }

    #[test]
    fn a_crit_header_is_refused_after_alg_and_before_kid() {
        let key = keys::p256("s", "tunnels-issuer");
        let trusted = [key.public_key()];
        let kid = key.keyid();
        let code = |header: &str| {
            let token = sign_with_header(&key, header, &ticket());
            verify_exec_ticket(&token, &trusted, "tunnels", "node_1", 1_100_000).map(|_| ()).map_err(|e| e.code())
        };
        // Whatever `crit` lists, even nothing or something that is not a list, we understand none of it.
        for crit in [r#"["exp"]"#, r#"["b64"]"#, "[]", r#""exp""#, "{}", "0"] {
            let header = format!(r#"{{"alg":"ES256","crit":{crit},"exp":1,"kid":"{kid}","typ":"JWT"}}"#);
            assert_eq!(code(&header), Err("jws-crit"), "{header}");
        }
        // A null member is an absent one, as for every other header member.
        assert_eq!(code(&format!(r#"{{"alg":"ES256","crit":null,"kid":"{kid}"}}"#)), Ok(()));
        // The order: alg first, then crit, before the kid and the signature.
        assert_eq!(code(&format!(r#"{{"alg":"HS256","crit":["exp"],"kid":"{kid}"}}"#)), Err("jws-alg"));
        assert_eq!(code(r#"{"alg":"ES256","crit":["exp"],"kid":"nobody"}"#), Err("jws-crit"));
        let forged = sign_with_header(
            &keys::p256("s", "x"),
            &format!(r#"{{"alg":"ES256","crit":["exp"],"kid":"{kid}"}}"#),
            &ticket(),
        );
        assert_eq!(
            verify_exec_ticket(&forged, &trusted, "tunnels", "node_1", 1_100_000).unwrap_err().code(),
            "jws-crit"
        );
        // Workload tokens go through the same verifier.
        let claims = WorkloadToken {
            iss: "wl".into(),
            aud: "vault".into(),
            sub: "instance:i".into(),
            node: "node_1".into(),
            iat: 1000,
            exp: 1300,
        };
        let token = sign_with_header(&key, &format!(r#"{{"alg":"ES256","crit":["exp"],"kid":"{kid}"}}"#), &claims);
        assert_eq!(verify_workload_token(&token, &trusted, "wl", "vault", 1_100_000).unwrap_err().code(), "jws-crit");
        assert_eq!(verify_workload_token(&sign(&key, &claims), &trusted, "wl", "vault", 1_100_000).unwrap(), claims);
    }

    #[test]
    fn the_tunnels_issuer_is_named_after_the_trust_domain() {
        assert_eq!(tunnels_issuer("compute.dev.local"), "https://compute.dev.local/tunnels");
    }

    #[test]
    fn josekit_verifies_our_tokens() {
        use spki::EncodePublicKey;
        let key = keys::p256("s", "workload-issuer");
        let token = sign(&key, &ticket());
        let der = key.public_key().to_public_key_der().unwrap();
        let verifier = josekit::jws::ES256.verifier_from_der(der.as_bytes()).unwrap();
        josekit::jwt::decode_with_verifier(&token, &verifier).unwrap();
    }
}
