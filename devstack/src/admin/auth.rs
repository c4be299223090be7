//! The admin endpoint's one credential: a random bearer token, written to
//! a file readable by the owner only and kept in memory as its SHA-256;
//! every request must present it (`Authorization: Bearer …`), compared in
//! constant time. A refusal is `401` and names no token.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use proto::refusal::Code;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

use super::ApiError;

/// A fresh token: `bc_admin_` and 32 random bytes, base64url.
pub fn fresh_token() -> String {
    format!("bc_admin_{}", pki::b64::url(&crate::ids::random_bytes(32)))
}

/// The SHA-256 the endpoint keeps of its token.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Lets a request through only with the endpoint's bearer token.
pub async fn require_token(State(expected): State<std::sync::Arc<[u8; 32]>>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|token| digest(token.trim()));
    if presented.is_some_and(|d| bool::from(d.ct_eq(&*expected))) {
        return next.run(request).await;
    }
    let mut refused = ApiError::new(
        StatusCode::UNAUTHORIZED,
        Code::AdminToken,
        "the admin token was refused: send `Authorization: Bearer <the token in the file the discovery file names>`",
    )
    .into_response();
    refused.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    refused
}

/// Lets a request through only when it names a loopback host (`Host:
/// 127.0.0.1:PORT`, `[::1]:PORT` or `localhost:PORT`): a page another site
/// served, whose name was made to resolve to loopback (DNS rebinding),
/// names its own host and is refused `421`, whatever else it sends.
pub async fn require_loopback_host(request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if loopback_host(host) {
        return next.run(request).await;
    }
    ApiError::new(
        StatusCode::MISDIRECTED_REQUEST,
        Code::AdminHost,
        "the admin endpoint answers requests for a loopback host only",
    )
    .into_response()
}

/// Whether a `Host` header names a loopback host (with or without a port).
fn loopback_host(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !name.ends_with(':') => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh_and_kept_as_digests() {
        let (a, b) = (fresh_token(), fresh_token());
        assert_ne!(a, b);
        assert!(a.starts_with("bc_admin_") && a.len() == 9 + 43, "{a}");
        assert_eq!(digest(&a), digest(&a));
        assert_ne!(digest(&a), digest(&b));
    }

    #[test]
    fn only_a_loopback_host_is_answered() {
        for good in ["127.0.0.1:4000", "127.0.0.1", "[::1]:80", "localhost:9", "LOCALHOST"] {
            assert!(loopback_host(good), "{good}");
        }
        for bad in ["", "evil.example:4000", "10.0.0.1:1", "127.0.0.1.evil.example", "[::2]:1", "localhost.evil:1"] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }
}
