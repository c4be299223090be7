//! A refused admin request (docs/devstack.md, "The admin endpoint"): an
//! HTTP status and `{"error": "<sentence>", "code": "<code>"}`, the code a
//! stable one of `proto/refusals.toml` (most of them of its `admin` domain),
//! so a script matches the code and a person reads the sentence. The
//! sentence never starts with the code: the CLI prints both.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use proto::refusal::Code;

use super::api;
use crate::error::Error;

/// A refused admin request.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: Code,
    message: String,
}

impl ApiError {
    /// A refusal with this status, code and sentence.
    pub fn new(status: StatusCode, code: Code, message: impl Into<String>) -> Self {
        let message = message.into();
        // A sentence that already starts with its code ("<code>: …") keeps the rest.
        let message = match message.strip_prefix(code.as_str()).and_then(|m| m.strip_prefix(": ")) {
            Some(rest) => rest.to_string(),
            None => message,
        };
        ApiError { status, code, message }
    }

    /// A request the endpoint does not take (400 `request-invalid`).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Code::RequestInvalid, message)
    }

    /// Something named that does not exist (404).
    pub fn not_found(code: Code, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// A request the state of the stack or node refuses (409).
    pub fn conflict(code: Code, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }
}

/// The HTTP status and code of a library error.
fn status_and_code(e: &Error) -> (StatusCode, Code) {
    use StatusCode as S;
    match e {
        Error::UnknownNode { .. } => (S::NOT_FOUND, Code::NodeUnknown),
        Error::UnknownPool { .. } => (S::NOT_FOUND, Code::PoolUnknown),
        Error::UnknownCommand { .. } => (S::NOT_FOUND, Code::CommandUnknown),
        Error::UnknownReservation { .. } => (S::NOT_FOUND, Code::ReservationUnknown),
        Error::UnknownRelease { .. } => (S::NOT_FOUND, Code::ReleaseUnknown),
        Error::UnknownInstance { .. } => (S::NOT_FOUND, Code::InstanceUnknown),
        Error::InvalidReservation { .. } | Error::InvalidRelease { .. } | Error::InvalidPolicy { .. } => {
            (S::BAD_REQUEST, Code::RequestInvalid)
        }
        Error::InvalidInstance { .. } => (S::BAD_REQUEST, Code::InstanceInvalid),
        Error::NoSession { .. } => (S::CONFLICT, Code::NodeOffline),
        Error::Rejected { .. } | Error::NodeNotAdopted { .. } => (S::CONFLICT, Code::NodeNotAdopted),
        Error::ReservationState { .. } | Error::ReservationEnded { .. } => (S::CONFLICT, Code::ReservationState),
        Error::NoGpuInventory { .. } | Error::InsufficientGpus { .. } => (S::CONFLICT, Code::GpusUnavailable),
        Error::BindingUnsupported { .. } => (S::CONFLICT, Code::BindingUnsupported),
        Error::ReservationOverlap { .. } => (S::CONFLICT, Code::ReservationOverlap),
        Error::ReservationRoom { .. } => (S::CONFLICT, Code::ReservationRoom),
        Error::ReleaseExists { .. } => (S::CONFLICT, Code::ReleaseExists),
        Error::NoTpmAttestor | Error::NoSignedIntent => (S::CONFLICT, Code::FeatureOff),
        // A stable code's status is its gRPC status's usual HTTP one
        // (`tunnel-limit`, ResourceExhausted: 429), but a precondition
        // (`node-revoked`) is 409 here, like the other states of a node.
        Error::Refused { code, .. } => {
            let status = crate::https::renew::http_status(&crate::status::refuse(*code, ""));
            (if status == S::PRECONDITION_FAILED { S::CONFLICT } else { status }, *code)
        }
        Error::Timeout { .. } => (S::GATEWAY_TIMEOUT, Code::WaitTimeout),
        Error::Shutdown => (S::SERVICE_UNAVAILABLE, Code::Draining),
        _ => (S::INTERNAL_SERVER_ERROR, Code::Internal),
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, code) = status_and_code(&e);
        let message = match e {
            Error::Refused { detail, .. } => detail,
            other => other.to_string(),
        };
        ApiError::new(status, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = api::ErrorBody { error: self.message, code: self.code.as_str().to_string() };
        (self.status, axum::Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_code_once() {
        let e = ApiError::from(Error::Refused { code: Code::NodeRevoked, detail: "node n was revoked".into() });
        assert_eq!(
            (e.status, e.code, e.message.as_str()),
            (StatusCode::CONFLICT, Code::NodeRevoked, "node n was revoked")
        );
        let e = ApiError::conflict(Code::ReservationOverlap, format!("{}: GPUs 1, 2 held", Code::ReservationOverlap));
        assert_eq!(e.message, "GPUs 1, 2 held");
        let e = ApiError::from(Error::UnknownNode { node_id: "node_x".into() });
        assert_eq!((e.status, e.code), (StatusCode::NOT_FOUND, Code::NodeUnknown));
        let e = ApiError::from(Error::Timeout { what: "x".into(), waited_ms: 5 });
        assert_eq!((e.status, e.code), (StatusCode::GATEWAY_TIMEOUT, Code::WaitTimeout));
    }
}
