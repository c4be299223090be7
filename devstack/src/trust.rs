//! Signed intent as the API sees it: the command roots nodes receive, the
//! public keys of the approvers and token issuers, the current trust bundle,
//! and the start of a rotation (the next bundle, signed by some of the
//! approvers; publishing it is a spec, [`DevStack::publish_spec`]).

use crate::error::{Error, Result};
use crate::stack::DevStack;

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

impl DevStack {
    /// The command roots nodes receive (empty without signed intent).
    pub fn command_roots(&self) -> Vec<pki::PublicKey> {
        self.shared().keys.command_roots()
    }

    /// The approvers of the trust bundle, and the tunnels and workload token
    /// issuers (under signed intent).
    pub fn intent_public_keys(&self) -> Option<IntentPublicKeys> {
        self.shared().keys.intent.as_ref().map(|i| IntentPublicKeys {
            command_root: pki::Signer::public_key(&i.command_root),
            approvers: i.approvers.iter().map(pki::Signer::public_key).collect(),
            tunnels_issuer: pki::Signer::public_key(&i.tunnels_issuer),
            workload_issuer: pki::Signer::public_key(&i.workload_issuer),
        })
    }

    /// The current trust bundle and its signed envelope (under signed
    /// intent): sequence 1, or the latest rotation the approvers signed that
    /// was published with [`DevStack::publish_spec`].
    pub fn trust_bundle(&self) -> Option<(proto::TrustBundle, pki::dsse::Envelope)> {
        self.shared().keys.intent.as_ref().map(|i| i.trust())
    }

    /// The current trust bundle with the next sequence number: the start of
    /// a rotation (signed intent only).
    pub fn next_trust_bundle(&self) -> Result<proto::TrustBundle> {
        let intent = self.shared().keys.intent.as_ref().ok_or(Error::NoSignedIntent)?;
        let (current, _) = intent.trust();
        Ok(proto::TrustBundle { sequence: current.sequence + 1, ..current })
    }

    /// Signs a trust bundle with the first `approvals` of the stack's
    /// current approvers (signed intent only).
    pub fn sign_trust_bundle(&self, bundle: &proto::TrustBundle, approvals: usize) -> Result<pki::dsse::Envelope> {
        let intent = self.shared().keys.intent.as_ref().ok_or(Error::NoSignedIntent)?;
        let signers: Vec<&dyn pki::Signer> =
            intent.approvers.iter().take(approvals).map(|a| a as &dyn pki::Signer).collect();
        Ok(pki::intent::sign_trust_bundle(&signers, bundle))
    }
}
