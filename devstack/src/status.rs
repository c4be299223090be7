//! Refusals on the wire: gRPC statuses whose message is `"<code>: <detail>"`
//! (ARCHITECTURE.md, "Errors on the wire").

use tonic::{Code, Status};

/// Codes the JoinService and the gateway add to those of `pki`.
pub mod code {
    /// The token is not one the stack minted.
    pub const TOKEN_UNKNOWN: &str = "token-unknown";
    /// The token has no use left.
    pub const TOKEN_EXHAUSTED: &str = "token-exhausted";
    /// The token expired.
    pub const TOKEN_EXPIRED: &str = "token-expired";
    /// The token's pool no longer exists.
    pub const POOL_UNKNOWN: &str = "pool-unknown";
    /// No client certificate, or one the stack never issued.
    pub const CERT_UNKNOWN: &str = "cert-unknown";
    /// The client certificate was revoked.
    pub const CERT_REVOKED: &str = "cert-revoked";
    /// The Hello names another node than the certificate.
    pub const NODE_MISMATCH: &str = "node-mismatch";
    /// A message above the decoding limit.
    pub const FRAME_TOO_LARGE: &str = "frame-too-large";
    /// The first frame of a session was not a Hello.
    pub const HELLO_EXPECTED: &str = "hello-expected";
    /// A join method this stack does not serve (TPM without an attestor).
    pub const METHOD_UNSUPPORTED: &str = "method-unsupported";
    /// A newer session of the same node took over.
    pub const SESSION_REPLACED: &str = "session-replaced";
}

/// A status `"<code>: <detail>"` with the given gRPC code.
pub fn refuse(grpc: Code, code: &str, detail: impl std::fmt::Display) -> Status {
    Status::new(grpc, format!("{code}: {detail}"))
}

/// A `pki` refusal as a status: its stable code, then its message.
pub fn from_pki(grpc: Code, e: &pki::Error) -> Status {
    refuse(grpc, e.code(), e)
}

/// The stable code at the start of a status message (for logs and tests).
pub fn code_of(status: &Status) -> &str {
    status.message().split(':').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_their_code_first() {
        let s = refuse(Code::PermissionDenied, code::CERT_REVOKED, "node_1 revoked at 5");
        assert_eq!(s.message(), "cert-revoked: node_1 revoked at 5");
        assert_eq!(code_of(&s), "cert-revoked");
        let p = from_pki(
            Code::PermissionDenied,
            &pki::Error::TokenCsrMismatch { bound: "a".into(), presented: "b".into() },
        );
        assert_eq!(code_of(&p), "token-csr-mismatch");
    }
}
