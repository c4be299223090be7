//! Refusals on the wire: gRPC statuses whose message is `"<code>: <detail>"`
//! (docs/protocol.md, "Errors on the wire"). The codes and the one gRPC
//! status each goes out with are `proto/refusals.toml`'s
//! ([`proto::refusal::Code`]): no call site picks a status by hand. The
//! stack's own errors reach the wire through one mapping, `From<Error> for
//! Status`.

use tonic::Status;

pub use proto::refusal::Code;

use crate::error::Error;

/// The refusal `"<code>: <detail>"`, with the code's gRPC status.
pub fn refuse(code: Code, detail: impl std::fmt::Display) -> Status {
    Status::new(code.grpc().into(), format!("{code}: {detail}"))
}

/// A `pki` refusal as a status: its stable code (and that code's status),
/// then its message.
pub fn from_pki(e: &pki::Error) -> Status {
    refuse(e.refusal(), e)
}

/// An error of the stack as a status. A refusal is its code's; a number the
/// store cannot hold (an unsigned value above 2^63-1, say an event seq of
/// 2^63) came from the caller, so it is its malformed input,
/// `message-malformed`; anything else is the stack failing, `internal`
/// (the detail is the stack's own error, which never holds a secret).
impl From<Error> for Status {
    fn from(e: Error) -> Status {
        match &e {
            Error::Refused { code, detail } => return refuse(*code, detail),
            Error::Store(crate::store::Error::Fenced { node_id, epoch, current }) => {
                let detail = format!("session {epoch} of node {node_id} was taken over by session {current}");
                return refuse(Code::SessionFenced, detail);
            }
            Error::Store(store) if store.is_busy() => {
                tracing::warn!(error = %e, "refused: the store is busy");
                return store_busy(store);
            }
            Error::Store(store) => {
                if let Some(why) = store.out_of_range() {
                    let status = refuse(Code::MessageMalformed, format!("a number out of range ({why})"));
                    tracing::warn!(message = status.message(), "refused: a number out of the store's range");
                    return status;
                }
            }
            _ => {}
        }
        tracing::error!(error = %e, "internal error");
        refuse(Code::Internal, e)
    }
}

/// The metadata key of a refusal's retry-after hint (milliseconds):
/// `connection-limit`'s and `store-busy`'s.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";

/// How long a caller refused `store-busy` is told to wait before it tries
/// again (`retry-after-ms`); bcd adds its own jitter.
const STORE_BUSY_RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// A refusal that tells the caller when to try again: `detail`, then
/// "retry after N ms", and the hint under [`RETRY_AFTER_MS`].
pub fn refuse_with_retry(code: Code, detail: impl std::fmt::Display, retry_after: std::time::Duration) -> Status {
    let ms = retry_after.as_millis() as u64;
    let mut status = refuse(code, format!("{detail}; retry after {ms} ms"));
    if let Ok(value) = ms.to_string().parse() {
        status.metadata_mut().insert(RETRY_AFTER_MS, value);
    }
    status
}

/// A store that could not take the call now, as the caller's cue to try
/// again later (never `internal`: nothing is wrong, and nothing was
/// written).
fn store_busy(e: &crate::store::Error) -> Status {
    refuse_with_retry(Code::StoreBusy, e, STORE_BUSY_RETRY_AFTER)
}

/// The stable code at the start of a status message (for logs and tests).
pub fn code_of(status: &Status) -> &str {
    status.message().split(':').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_that_cannot_take_the_call_now_is_unavailable_with_a_hint_not_internal() {
        let busy = crate::store::Error::Unavailable { location: "postgres://h/db".into(), reason: "no answer".into() };
        let status = Status::from(Error::Store(busy));
        assert_eq!((status.code(), code_of(&status)), (tonic::Code::Unavailable, "store-busy"), "{status:?}");
        assert_eq!(status.metadata().get(RETRY_AFTER_MS).unwrap(), "500");
    }

    #[test]
    fn refusals_carry_their_code_first_and_its_status() {
        let s = refuse(Code::CertRevoked, "node_1 revoked at 5");
        assert_eq!(s.message(), "cert-revoked: node_1 revoked at 5");
        assert_eq!((s.code(), code_of(&s)), (tonic::Code::PermissionDenied, "cert-revoked"));
        let p = from_pki(&pki::JoinError::TokenCsrMismatch { bound: "a".into(), presented: "b".into() }.into());
        assert_eq!((p.code(), code_of(&p)), (tonic::Code::PermissionDenied, "token-csr-mismatch"));
        let m = from_pki(&pki::TpmError::Malformed { what: "quote".into(), reason: "short".into() }.into());
        assert_eq!((m.code(), code_of(&m)), (tonic::Code::InvalidArgument, "tpm-malformed"));
        assert_eq!(refuse(Code::CertUnknown, "none").code(), tonic::Code::Unauthenticated);
        assert_eq!(refuse(Code::MethodUnsupported, "no TPM").code(), tonic::Code::Unimplemented);
    }
}
