//! Node-signed statements (docs/formats.md, "Node-signed statements"): command results, AllocationBound
//! reports and SecretRequests, signed by the node's P-256 key (ASN.1 DER
//! ECDSA signatures, which Go draws at random, so they are verified, never
//! compared), and the sealed SecretResponse that answers a SecretRequest.

use prost::Message as _;

use crate::dsse::{self, Envelope};
use crate::error::{KeyError, StatementError};
use crate::{Error, PublicKey, Result, Signer, jwe};

/// Signs a statement with a node key.
pub fn sign(node_key: &dyn Signer, statement: &proto::NodeStatement) -> Envelope {
    Envelope::sign(proto::payload_type::NODE_STATEMENT, statement.encode_to_vec(), &[node_key])
}

/// Verifies a statement signed by the node key `node_key` of node `node_id`.
pub fn verify(env: &Envelope, node_key: &PublicKey, node_id: &str) -> Result<proto::NodeStatement> {
    let payload = env.verify(proto::payload_type::NODE_STATEMENT, std::slice::from_ref(node_key), 1)?;
    let statement: proto::NodeStatement = dsse::decode(payload)?;
    if statement.node_id != node_id {
        return Err(StatementError::WrongNode { expected: node_id.to_string(), found: statement.node_id }.into());
    }
    Ok(statement)
}

/// The name of a statement's body, for messages and checks.
pub fn body_name(statement: &proto::NodeStatement) -> &'static str {
    use proto::node_statement::Body;
    match statement.body {
        Some(Body::CommandResult(_)) => "command_result",
        Some(Body::AllocationBound(_)) => "allocation_bound",
        Some(Body::SecretRequest(_)) => "secret_request",
        None => "none",
    }
}

fn wrong_kind(expected: &str, statement: &proto::NodeStatement) -> Error {
    StatementError::Kind { expected: expected.to_string(), found: body_name(statement).to_string() }.into()
}

/// Verifies a node-signed command result.
pub fn verify_command_result(env: &Envelope, node_key: &PublicKey, node_id: &str) -> Result<proto::CommandResult> {
    let statement = verify(env, node_key, node_id)?;
    match statement.body {
        Some(proto::node_statement::Body::CommandResult(r)) => Ok(r),
        _ => Err(wrong_kind("command_result", &statement)),
    }
}

/// Verifies a node-signed AllocationBound.
pub fn verify_allocation_bound(env: &Envelope, node_key: &PublicKey, node_id: &str) -> Result<proto::AllocationBound> {
    let statement = verify(env, node_key, node_id)?;
    match statement.body {
        Some(proto::node_statement::Body::AllocationBound(a)) => Ok(a),
        _ => Err(wrong_kind("allocation_bound", &statement)),
    }
}

/// Verifies a node-signed SecretRequest and returns it with its ephemeral key.
pub fn verify_secret_request(
    env: &Envelope,
    node_key: &PublicKey,
    node_id: &str,
) -> Result<(proto::SecretRequest, p256::PublicKey)> {
    let statement = verify(env, node_key, node_id)?;
    let request = match statement.body {
        Some(proto::node_statement::Body::SecretRequest(r)) => r,
        _ => return Err(wrong_kind("secret_request", &statement)),
    };
    let ephemeral = match PublicKey::from_spki_der(&request.ephemeral_spki_der)? {
        PublicKey::P256(k) => k,
        PublicKey::Ed25519(_) => {
            return Err(KeyError::BadPublicKey { reason: "the ephemeral key is not P-256".into() }.into());
        }
    };
    Ok((request, ephemeral))
}

/// Seals a secret to the ephemeral key of a verified SecretRequest.
pub fn seal_secret_response(ephemeral: &p256::PublicKey, secret: &[u8], rnd: &jwe::SealRandomness) -> String {
    jwe::seal(ephemeral, &PublicKey::P256(*ephemeral).pin(), secret, rnd)
}
