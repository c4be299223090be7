//! The admin endpoint's one credential: a random bearer token, written to
//! a file readable by the owner only and kept in memory as its SHA-256;
//! every request must present it (`Authorization: Bearer …`), compared in
//! constant time. A refusal is `401` and names no token.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
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
        "the admin token was refused: send `Authorization: Bearer <the token in the file the discovery file names>`",
    )
    .into_response();
    refused.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    refused
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
}
