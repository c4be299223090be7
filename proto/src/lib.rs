//! The `bc.agent.v1` protocol shared by bcd and the control plane.
//!
//! The code under `gen/` is generated from `proto/bc/agent/v1/agent.proto` by
//! `cargo xtask codegen` and committed; `cargo xtask codegen --check` (and the
//! `proto-codegen` crate's test) fails when it drifts from the `.proto` file.
//! The tonic services are behind the `grpc` feature (on by default), and
//! decode with [`codec::StrictCodec`]: a message that does not decode is
//! refused `InvalidArgument` `message-malformed`, not `Internal`.
//! [`refusal`] holds the refusal codes of `proto/refusals.toml`, and
//! [`kind`] the command kinds of `proto/kinds.toml`, generated the same way.

/// Messages and services of package `bc.agent.v1`.
pub mod agent {
    #![allow(clippy::all, missing_docs)]
    include!("gen/bc.agent.v1.rs");
}

pub use agent::*;

#[cfg(feature = "grpc")]
pub mod codec;
pub mod kind;
pub mod refusal;

/// DSSE payload types of the signed objects (docs/formats.md, "Payload types").
pub mod payload_type {
    /// A `JoinResponse` signed by the JoinService.
    pub const JOIN_RESPONSE: &str = "application/vnd.bc.join-response+proto";
    /// A `Command` signed by a command root.
    pub const COMMAND: &str = "application/vnd.bc.command+proto";
    /// A `NodeSpec` signed by a command root.
    pub const NODE_SPEC: &str = "application/vnd.bc.node-spec+proto";
    /// A `TrustBundle` signed by approvers.
    pub const TRUST_BUNDLE: &str = "application/vnd.bc.trust-bundle+proto";
    /// A `BatchApproval` signed by approvers.
    pub const BATCH_APPROVAL: &str = "application/vnd.bc.batch-approval+proto";
    /// A `NodeStatement` signed by a node key.
    pub const NODE_STATEMENT: &str = "application/vnd.bc.node-statement+proto";
    /// A release manifest (JSON) signed by release keys.
    pub const RELEASE: &str = "application/vnd.bc.release+json";
}
