//! Signed intent as the API sees it: the command roots nodes receive, the
//! public keys of the approvers and token issuers, the current trust bundle,
//! and the start of a rotation (the next bundle, signed by some of the
//! approvers; publishing it is a spec, [`DevStack::publish_spec`]).

use crate::error::{Error, Result};
use crate::shared::Shared;

/// The public keys of signed intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentPublicKeys {
    /// The command root.
    pub command_root: pki::PublicKey,
    /// The trust bundle's approvers.
    pub approvers: Vec<pki::PublicKey>,
    /// The exec ticket issuer.
    pub tunnels_issuer: pki::PublicKey,
    /// The workload token issuer.
    pub workload_issuer: pki::PublicKey,
}

/// The approvers of the trust bundle, and the tunnels and workload token
/// issuers (under signed intent).
pub fn intent_public_keys(shared: &Shared) -> Option<IntentPublicKeys> {
    shared.keys.intent.as_ref().map(|i| IntentPublicKeys {
        command_root: pki::Signer::public_key(&i.command_root),
        approvers: i.approvers.iter().map(pki::Signer::public_key).collect(),
        tunnels_issuer: pki::Signer::public_key(&i.tunnels_issuer),
        workload_issuer: pki::Signer::public_key(&i.workload_issuer),
    })
}

/// The current trust bundle with the next sequence number: the start of
/// a rotation (signed intent only).
pub fn next_trust_bundle(shared: &Shared) -> Result<proto::TrustBundle> {
    let intent = shared.keys.intent.as_ref().ok_or(Error::NoSignedIntent)?;
    let (current, _) = intent.trust();
    Ok(proto::TrustBundle { sequence: current.sequence + 1, ..current })
}

/// Signs a trust bundle with the first `approvals` of the stack's
/// current approvers (signed intent only).
pub fn sign_trust_bundle(
    shared: &Shared,
    bundle: &proto::TrustBundle,
    approvals: usize,
) -> Result<pki::dsse::Envelope> {
    let intent = shared.keys.intent.as_ref().ok_or(Error::NoSignedIntent)?;
    let signers: Vec<&dyn pki::Signer> =
        intent.approvers.iter().take(approvals).map(|a| a as &dyn pki::Signer).collect();
    Ok(pki::intent::sign_trust_bundle(&signers, bundle))
}
