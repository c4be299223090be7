//! Release manifests (docs/formats.md, "Releases"): JSON in a DSSE envelope signed by
//! release keys, checked against bcd's `[update]` pins (the keys, the
//! threshold and the lowest acceptable sequence), the highest sequence it
//! installed, and the time of the check.
//!
//! Checks, in order: the signatures (`dsse-bad-signature` for a pinned key
//! whose signature fails, `release-threshold` for too few pinned signers),
//! the JSON (`release-malformed`), the sequence (`release-sequence` below the
//! pinned minimum, `release-rollback` below the highest installed), the
//! expiry (`release-expired`), the artifact for this platform
//! (`release-missing-artifact`), then its size (`release-size`) and digest
//! (`release-digest`).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::dsse::Envelope;
use crate::error::{DsseError, ReleaseError};
use crate::{Error, PublicKey, Result, Signer};

/// A release manifest, members in their serialized order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The daemon version.
    pub version: String,
    /// The release sequence; bcd refuses one below its lowest acceptable,
    /// or below the highest it installed.
    pub sequence: u64,
    /// When the manifest stops being good (Unix ms): no release is taken
    /// at or after it.
    pub expires_at_ms: i64,
    /// One artifact per platform.
    pub artifacts: Vec<Artifact>,
}

/// One downloadable binary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`.
    pub arch: String,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// Where to download it.
    pub url: String,
}

/// bcd's `[update]` pins.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The pinned release keys.
    pub keys: Vec<PublicKey>,
    /// How many of them must sign.
    pub threshold: usize,
    /// The lowest acceptable sequence.
    pub min_sequence: u64,
    /// The highest sequence installed (0: none yet); a release below it is
    /// a rollback.
    pub installed_sequence: u64,
}

/// Signs a manifest with release keys.
pub fn sign(keys: &[&dyn Signer], manifest: &Manifest) -> Envelope {
    let payload = serde_json::to_vec(manifest).expect("a manifest serializes");
    Envelope::sign(proto::payload_type::RELEASE, payload, keys)
}

/// Verifies a manifest's signatures, sequence and expiry at `now_ms`, and
/// returns it.
pub fn verify_manifest(env: &Envelope, policy: &Policy, now_ms: i64) -> Result<Manifest> {
    let threshold = policy.threshold.max(1);
    let payload = env.verify(proto::payload_type::RELEASE, &policy.keys, threshold).map_err(|e| match e {
        Error::Dsse(DsseError::Unsigned | DsseError::UnknownKey { .. }) => {
            ReleaseError::Threshold { valid: 0, threshold }.into()
        }
        Error::Dsse(DsseError::Threshold { valid, threshold }) => ReleaseError::Threshold { valid, threshold }.into(),
        other => other,
    })?;
    let manifest = parse_manifest(payload)?;
    if manifest.sequence < policy.min_sequence {
        return Err(ReleaseError::Sequence { sequence: manifest.sequence, min_sequence: policy.min_sequence }.into());
    }
    if manifest.sequence < policy.installed_sequence {
        return Err(ReleaseError::Rollback { sequence: manifest.sequence, installed: policy.installed_sequence }.into());
    }
    if now_ms >= manifest.expires_at_ms {
        return Err(ReleaseError::Expired { expires_at_ms: manifest.expires_at_ms, now_ms }.into());
    }
    Ok(manifest)
}

/// Parses a manifest's JSON, the signed payload (`release-malformed`): every
/// member required, no other, strict JSON (docs/formats.md, "JSON").
pub fn parse_manifest(payload: &[u8]) -> Result<Manifest> {
    crate::json::object(payload).map_err(|reason| ReleaseError::Malformed { reason }.into())
}

/// The manifest's artifact for a platform.
pub fn artifact<'a>(manifest: &'a Manifest, os: &str, arch: &str) -> Result<&'a Artifact> {
    manifest
        .artifacts
        .iter()
        .find(|a| a.os == os && a.arch == arch)
        .ok_or_else(|| ReleaseError::MissingArtifact { os: os.to_string(), arch: arch.to_string() }.into())
}

/// Checks downloaded bytes against their artifact entry.
pub fn check_artifact(artifact: &Artifact, bytes: &[u8]) -> Result<()> {
    if bytes.len() as u64 != artifact.size {
        return Err(ReleaseError::Size { expected: artifact.size, found: bytes.len() as u64 }.into());
    }
    let found = hex::encode(Sha256::digest(bytes));
    if found != artifact.sha256.to_ascii_lowercase() {
        return Err(ReleaseError::Digest { expected: artifact.sha256.clone(), found }.into());
    }
    Ok(())
}

/// Everything at once, at `now_ms`: the manifest, the platform's artifact
/// and its bytes.
pub fn verify_release(
    env: &Envelope,
    policy: &Policy,
    os: &str,
    arch: &str,
    bytes: &[u8],
    now_ms: i64,
) -> Result<Manifest> {
    let manifest = verify_manifest(env, policy, now_ms)?;
    check_artifact(artifact(&manifest, os, arch)?, bytes)?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;

    #[test]
    fn a_release_needs_the_threshold_the_sequence_and_the_bytes() {
        let (a, b) = (keys::ed25519("s", "release/0"), keys::ed25519("s", "release/1"));
        let bytes = b"binary";
        let now = 1_000_000;
        let manifest = Manifest {
            version: "0.9.0".into(),
            sequence: 7,
            expires_at_ms: now + 1,
            artifacts: vec![Artifact {
                os: "linux".into(),
                arch: "amd64".into(),
                sha256: hex::encode(Sha256::digest(bytes)),
                size: bytes.len() as u64,
                url: "http://x/bcd".into(),
            }],
        };
        let policy =
            Policy { keys: vec![a.public_key(), b.public_key()], threshold: 2, min_sequence: 5, installed_sequence: 0 };
        let both = sign(&[&a, &b], &manifest);
        let code = |env: &Envelope, policy: &Policy, arch: &str, bytes: &[u8], now: i64| {
            verify_release(env, policy, "linux", arch, bytes, now).unwrap_err().code()
        };
        assert_eq!(verify_release(&both, &policy, "linux", "amd64", bytes, now).unwrap(), manifest);
        assert_eq!(code(&sign(&[&a], &manifest), &policy, "amd64", bytes, now), "release-threshold");
        assert_eq!(code(&both, &policy, "arm64", bytes, now), "release-missing-artifact");
        assert_eq!(code(&both, &policy, "amd64", b"binarz", now), "release-digest");
        let old = Manifest { sequence: 4, ..manifest.clone() };
        assert_eq!(code(&sign(&[&a, &b], &old), &policy, "amd64", bytes, now), "release-sequence");
        let installed = Policy { installed_sequence: 8, ..policy.clone() };
        assert_eq!(code(&both, &installed, "amd64", bytes, now), "release-rollback");
        assert_eq!(code(&both, &policy, "amd64", bytes, now + 1), "release-expired");
    }
}
