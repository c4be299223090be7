//! The refusal codes both sides answer or match on, generated from
//! `proto/refusals.toml` (`cargo xtask codegen`): [`Code`] names each one,
//! [`Domain`] says who refuses with it, [`Code::grpc`] is the one gRPC status
//! it goes out with, and [`TABLE`] lists them all in the file's order.
//!
//! A refusal's message is `"<code>: <detail>"` (docs/protocol.md, "Errors on
//! the wire"). Without the `grpc` feature this module knows the status only
//! as [`Grpc`]; with it, `tonic::Code::from(Grpc)` converts.

#![allow(missing_docs)]

include!("gen/refusals.rs");

/// A gRPC status code, numbered as the gRPC specification numbers them (so
/// without the `grpc` feature the table still says which status a code takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Grpc {
    /// 1.
    Cancelled = 1,
    /// 2.
    Unknown = 2,
    /// 3: malformed input.
    InvalidArgument = 3,
    /// 4.
    DeadlineExceeded = 4,
    /// 5.
    NotFound = 5,
    /// 6.
    AlreadyExists = 6,
    /// 7: a valid but refused credential.
    PermissionDenied = 7,
    /// 8.
    ResourceExhausted = 8,
    /// 9: the state does not allow it.
    FailedPrecondition = 9,
    /// 10.
    Aborted = 10,
    /// 11.
    OutOfRange = 11,
    /// 12.
    Unimplemented = 12,
    /// 13.
    Internal = 13,
    /// 14.
    Unavailable = 14,
    /// 15.
    DataLoss = 15,
    /// 16: no or unknown client certificate.
    Unauthenticated = 16,
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::str::FromStr for Code {
    type Err = UnknownCode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Code::parse(s).ok_or_else(|| UnknownCode(s.to_string()))
    }
}

/// A string that is no refusal code of `proto/refusals.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownCode(pub String);

impl std::fmt::Display for UnknownCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} is not a refusal code of proto/refusals.toml", self.0)
    }
}

impl std::error::Error for UnknownCode {}

#[cfg(feature = "grpc")]
impl From<Grpc> for tonic::Code {
    fn from(g: Grpc) -> Self {
        tonic::Code::from_i32(g as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_parses_back_and_has_a_status() {
        assert!(TABLE.len() > 100, "{} codes", TABLE.len());
        for &code in TABLE {
            assert_eq!(Code::parse(code.as_str()), Some(code));
            assert_eq!(code.to_string(), code.as_str());
            assert!(!code.meaning().is_empty());
            let _ = code.domain().owner();
        }
        assert_eq!(Code::parse("no-such-code"), None);
        assert_eq!(Code::DsseBadSignature.grpc(), Grpc::PermissionDenied);
        assert_eq!(Code::CertUnknown.grpc(), Grpc::Unauthenticated);
        assert_eq!(Code::TokenExpired.domain(), Domain::Jws);
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn statuses_convert_to_tonic() {
        assert_eq!(tonic::Code::from(Grpc::Unimplemented), tonic::Code::Unimplemented);
        assert_eq!(tonic::Code::from(Grpc::Unauthenticated), tonic::Code::Unauthenticated);
        assert_eq!(tonic::Code::from(Grpc::Cancelled), tonic::Code::Cancelled);
    }
}
