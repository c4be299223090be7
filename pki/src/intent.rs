//! Signed intent (docs/formats.md, "Signed intent"): commands and NodeSpecs signed by a command
//! root, trust bundles rotated by a quorum of approvers, and batch approvals
//! for destructive commands.
//!
//! Single-signer objects (commands, specs) keep the DSSE codes
//! (`dsse-unsigned`, `dsse-bad-signature`, `dsse-unknown-key`); bcd reports
//! them as BAD_SIGNATURE. Quorum objects map "not enough valid signatures"
//! (unknown signers included) to their own code: `trust-quorum`,
//! `batch-unapproved`; a signature by a trusted key that fails stays
//! `dsse-bad-signature`.

use prost::Message as _;
use sha2::{Digest, Sha256};

use crate::dsse::{self, Envelope};
use crate::error::{DsseError, IntentError};
use crate::{Error, PublicKey, Result, Signer};

/// How bcd treats unsigned NodeSpecs (`signedSpecs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignedSpecs {
    /// Every spec must be signed (the default when bcd has command roots).
    Always,
    /// Only a spec that changes the access section must be signed.
    Access,
}

/// Signs a command with a command root.
pub fn sign_command(root: &dyn Signer, command: &proto::Command) -> Envelope {
    Envelope::sign(proto::payload_type::COMMAND, command.encode_to_vec(), &[root])
}

/// Verifies a command: signed by one of `roots`, for `node_id`, not past its
/// `not_after` at `now_ms`.
pub fn verify_command(env: &Envelope, roots: &[PublicKey], node_id: &str, now_ms: i64) -> Result<proto::Command> {
    let payload = env.verify(proto::payload_type::COMMAND, roots, 1)?;
    let command: proto::Command = dsse::decode(payload)?;
    if command.node_id != node_id {
        return Err(IntentError::CommandWrongNode { expected: node_id.to_string(), found: command.node_id }.into());
    }
    if command.not_after_ms != 0 && now_ms > command.not_after_ms {
        return Err(IntentError::CommandExpired { not_after_ms: command.not_after_ms, now_ms }.into());
    }
    Ok(command)
}

/// The digest an approver signs for a command: SHA-256 of its payload bytes.
pub fn command_digest(env: &Envelope) -> Vec<u8> {
    Sha256::digest(&env.payload).to_vec()
}

/// Signs a NodeSpec with a command root.
pub fn sign_spec(root: &dyn Signer, spec: &proto::NodeSpec) -> Envelope {
    Envelope::sign(proto::payload_type::NODE_SPEC, spec.encode_to_vec(), &[root])
}

/// Verifies a NodeSpec for `node_id` under `policy`. Under `Access`, an
/// unsigned spec is taken unless its access section differs from
/// `applied_access` (the section of the spec applied now).
pub fn verify_spec(
    env: &Envelope,
    roots: &[PublicKey],
    node_id: &str,
    policy: SignedSpecs,
    applied_access: Option<&proto::AccessSection>,
) -> Result<proto::NodeSpec> {
    let spec: proto::NodeSpec = if env.signatures.is_empty() && policy == SignedSpecs::Access {
        if env.payload_type != proto::payload_type::NODE_SPEC {
            return Err(DsseError::PayloadType {
                expected: proto::payload_type::NODE_SPEC.to_string(),
                found: env.payload_type.clone(),
            }
            .into());
        }
        let spec: proto::NodeSpec = dsse::decode(&env.payload)?;
        if spec.access.as_ref() != applied_access {
            return Err(IntentError::SpecUnsignedAccess.into());
        }
        spec
    } else {
        dsse::decode(env.verify(proto::payload_type::NODE_SPEC, roots, 1)?)?
    };
    if spec.node_id != node_id {
        return Err(IntentError::SpecWrongNode { expected: node_id.to_string(), found: spec.node_id }.into());
    }
    Ok(spec)
}

/// Signs a trust bundle with approvers.
pub fn sign_trust_bundle(approvers: &[&dyn Signer], bundle: &proto::TrustBundle) -> Envelope {
    Envelope::sign(proto::payload_type::TRUST_BUNDLE, bundle.encode_to_vec(), approvers)
}

/// The public keys of a quorum's approvers.
pub fn approver_keys(quorum: Option<&proto::Quorum>) -> Result<Vec<PublicKey>> {
    quorum.map(|q| q.approvers.iter().map(PublicKey::from_proto).collect()).unwrap_or_else(|| Ok(Vec::new()))
}

/// Checks that a bundle's own quorum can be met: a threshold of at least 1
/// and at most its approvers (`trust-invalid`), each approver a key that
/// parses (`bad-public-key`: a key that cannot verify cannot approve).
pub fn check_quorum(bundle: &proto::TrustBundle) -> Result<()> {
    let (threshold, approvers) = bundle.quorum.as_ref().map(|q| (q.threshold, q.approvers.len())).unwrap_or((0, 0));
    if threshold == 0 || threshold as usize > approvers {
        return Err(IntentError::TrustInvalid { threshold, approvers }.into());
    }
    approver_keys(bundle.quorum.as_ref()).map(|_| ())
}

/// Checks that every other key of a bundle parses (`bad-public-key`): its
/// command roots, and its tunnels and workload issuers when it names them.
pub fn check_bundle_keys(bundle: &proto::TrustBundle) -> Result<()> {
    let issuers = bundle.tunnels_issuer.iter().chain(bundle.workload_issuer.iter());
    for key in bundle.command_roots.iter().chain(issuers) {
        PublicKey::from_proto(key)?;
    }
    Ok(())
}

/// Decides whether to take a newer trust bundle. It must be signed by at least
/// `threshold` of the *current* approvers (`trust-quorum`), be for the same
/// trust domain (`trust-domain`), not roll the sequence back
/// (`trust-rollback`), have a quorum that can be met (`trust-invalid`), and
/// hold only keys that parse (`bad-public-key`: approvers, command roots,
/// issuers). The same sequence is accepted only for the same bytes (a
/// re-delivery).
pub fn accept_trust_bundle(current: &proto::TrustBundle, env: &Envelope) -> Result<proto::TrustBundle> {
    let approvers = approver_keys(current.quorum.as_ref())?;
    let threshold = current.quorum.as_ref().map(|q| q.threshold as usize).unwrap_or(0).max(1);
    let payload = env.verify(proto::payload_type::TRUST_BUNDLE, &approvers, threshold).map_err(|e| match e {
        Error::Dsse(DsseError::Unsigned | DsseError::UnknownKey { .. }) => {
            IntentError::TrustQuorum { valid: 0, threshold }.into()
        }
        Error::Dsse(DsseError::Threshold { valid, threshold }) => IntentError::TrustQuorum { valid, threshold }.into(),
        other => other,
    })?;
    let next: proto::TrustBundle = dsse::decode(payload)?;
    if next.trust_domain != current.trust_domain {
        return Err(
            IntentError::TrustDomain { expected: current.trust_domain.clone(), found: next.trust_domain }.into()
        );
    }
    if next.sequence < current.sequence || (next.sequence == current.sequence && next != *current) {
        return Err(IntentError::TrustRollback { current: current.sequence, found: next.sequence }.into());
    }
    check_quorum(&next)?;
    check_bundle_keys(&next)?;
    Ok(next)
}

/// The number of approvals a batch of `size` commands needs: the highest
/// threshold among the tiers it reaches, else the quorum's threshold.
pub fn batch_threshold(quorum: &proto::Quorum, size: usize) -> usize {
    quorum
        .tiers
        .iter()
        .filter(|t| size >= t.min_commands as usize)
        .map(|t| t.threshold)
        .chain(std::iter::once(quorum.threshold))
        .max()
        .unwrap_or(1)
        .max(1) as usize
}

/// Signs a batch approval with approvers.
pub fn sign_batch_approval(approvers: &[&dyn Signer], approval: &proto::BatchApproval) -> Envelope {
    Envelope::sign(proto::payload_type::BATCH_APPROVAL, approval.encode_to_vec(), approvers)
}

/// Verifies that `command` (its envelope, already verified) is approved by
/// `approval` under `quorum` of `trust_domain` at `now_ms`.
pub fn verify_batch_approval(
    approval: &Envelope,
    quorum: &proto::Quorum,
    trust_domain: &str,
    command_env: &Envelope,
    command: &proto::Command,
    now_ms: i64,
) -> Result<proto::BatchApproval> {
    let approvers = approver_keys(Some(quorum))?;
    // The threshold depends on the batch size, which is inside the payload:
    // decode first to size it, then verify the signatures before trusting it.
    let size = dsse::decode::<proto::BatchApproval>(&approval.payload).map(|a| a.command_digests.len()).unwrap_or(1);
    let threshold = batch_threshold(quorum, size);
    let payload = approval.verify(proto::payload_type::BATCH_APPROVAL, &approvers, threshold).map_err(|e| match e {
        Error::Dsse(DsseError::Unsigned | DsseError::UnknownKey { .. }) => {
            IntentError::BatchUnapproved { valid: 0, threshold }.into()
        }
        Error::Dsse(DsseError::Threshold { valid, threshold }) => {
            IntentError::BatchUnapproved { valid, threshold }.into()
        }
        other => other,
    })?;
    let batch: proto::BatchApproval = dsse::decode(payload)?;
    if batch.batch_id != command.batch || batch.trust_domain != trust_domain {
        return Err(IntentError::BatchMismatch {
            expected: format!("{}@{}", command.batch, trust_domain),
            found: format!("{}@{}", batch.batch_id, batch.trust_domain),
        }
        .into());
    }
    if !batch.command_digests.contains(&command_digest(command_env)) {
        return Err(IntentError::BatchCommandMissing { command_id: command.id.clone() }.into());
    }
    if batch.not_after_ms != 0 && now_ms > batch.not_after_ms {
        return Err(IntentError::BatchExpired { not_after_ms: batch.not_after_ms, now_ms }.into());
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;

    fn bundle(seq: u64, approvers: &[&ed25519_dalek::SigningKey], threshold: u32) -> proto::TrustBundle {
        proto::TrustBundle {
            trust_domain: "td".into(),
            sequence: seq,
            quorum: Some(proto::Quorum {
                approvers: approvers.iter().map(|a| Signer::public_key(*a).to_proto()).collect(),
                threshold,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn trust_rotation_needs_the_current_quorum() {
        let (a, b, c) = (keys::ed25519("s", "a"), keys::ed25519("s", "b"), keys::ed25519("s", "c"));
        let current = bundle(1, &[&a, &b], 2);
        let next = bundle(2, &[&b, &c], 2);
        assert!(accept_trust_bundle(&current, &sign_trust_bundle(&[&a, &b], &next)).is_ok());
        let code = |signers: &[&dyn Signer], b: &proto::TrustBundle| {
            accept_trust_bundle(&current, &sign_trust_bundle(signers, b)).unwrap_err().code()
        };
        assert_eq!(code(&[&a], &next), "trust-quorum");
        assert_eq!(code(&[&b, &c], &next), "trust-quorum");
        assert_eq!(code(&[&a, &b], &bundle(0, &[&a, &b], 2)), "trust-rollback");
        assert_eq!(code(&[&a, &b], &bundle(3, &[&a], 2)), "trust-invalid");
    }

    #[test]
    fn commands_are_checked_for_node_and_deadline() {
        let root = keys::ed25519("s", "command-root/0");
        let cmd = proto::Command {
            id: "c".into(),
            node_id: "n".into(),
            kind: "diag.nvml".into(),
            not_after_ms: 100,
            ..Default::default()
        };
        let env = sign_command(&root, &cmd);
        let roots = [root.public_key()];
        assert_eq!(verify_command(&env, &roots, "n", 50).unwrap(), cmd);
        assert_eq!(verify_command(&env, &roots, "m", 50).unwrap_err().code(), "command-wrong-node");
        assert_eq!(verify_command(&env, &roots, "n", 101).unwrap_err().code(), "command-expired");
    }

    #[test]
    fn tiers_raise_the_batch_threshold() {
        let q = proto::Quorum {
            threshold: 1,
            tiers: vec![proto::QuorumTier { min_commands: 10, threshold: 3 }],
            ..Default::default()
        };
        assert_eq!(batch_threshold(&q, 2), 1);
        assert_eq!(batch_threshold(&q, 10), 3);
    }
}
