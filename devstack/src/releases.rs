//! Releases and self-update (docs/formats.md, "Releases"): the release keys, publishing a
//! release (artifacts stored and served over the plain HTTP listener, a
//! manifest signed by the release keys), manifests with chosen defects for
//! tests of bcd's refusals, and the two ways a release reaches a node
//! (docs/protocol.md, "Self-update"): the `daemon.upgrade` command, and the
//! NodeSpec's daemon section carrying the signed manifest.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::clock::now_ms;
use crate::commands::{self, CommandOptions};
use crate::error::{Error, Result};
use crate::shared::Shared;
use crate::store::releases as release_rows;
use crate::store::rows::{NodeSessionRow, ReleaseArtifactRow, ReleaseRow};
use crate::view::StackView;

/// The command kind that rolls a release out to a node.
pub const UPGRADE_KIND: &str = "daemon.upgrade";
/// What bcd's `[update]` section pins: the release keys, how many of them
/// must sign, and the lowest acceptable sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdatePins {
    /// The release keys.
    pub keys: Vec<pki::PublicKey>,
    /// How many of them must sign a manifest.
    pub threshold: u32,
    /// The lowest release sequence bcd accepts.
    pub min_sequence: u64,
}

impl UpdatePins {
    /// The keys' pins (`sha256:…`), in order.
    pub fn pins(&self) -> Vec<String> {
        self.keys.iter().map(pki::PublicKey::pin).collect()
    }

    /// The keys as standard base64 of their SPKI DER, in order.
    pub fn spki_b64(&self) -> Vec<String> {
        self.keys.iter().map(|k| pki::b64::std(&k.spki_der())).collect()
    }

    /// The same pins as a `pki` release policy.
    pub fn policy(&self) -> pki::release::Policy {
        pki::release::Policy {
            keys: self.keys.clone(),
            threshold: self.threshold as usize,
            min_sequence: self.min_sequence,
            installed_sequence: 0,
        }
    }
}

/// A published release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// The daemon version.
    pub version: String,
    /// The release sequence.
    pub sequence: u64,
    /// The manifest, as signed.
    pub manifest: pki::release::Manifest,
    /// The manifest signed by every release key.
    pub envelope: pki::dsse::Envelope,
    /// Where the signed manifest is served (DSSE JSON).
    pub manifest_url: String,
}

/// How to sign a release's manifest for a rollout; the default is the
/// published manifest. The other choices make manifests bcd must refuse.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManifestOptions {
    /// Sign with only the first `n` release keys (`release-threshold`).
    pub signers: Option<usize>,
    /// Claim this sequence instead of the release's (`release-sequence`).
    pub sequence: Option<u64>,
    /// Claim a digest that is not the artifacts' (`release-digest`).
    pub wrong_digest: bool,
    /// Claim this expiry instead of the release's (`release-expired` for
    /// one in the past).
    pub expires_at_ms: Option<i64>,
}

/// The path of an artifact on the HTTP listener.
pub fn artifact_path(version: &str, os: &str, arch: &str) -> String {
    format!("/releases/{version}/bcd-{os}-{arch}")
}

/// The path of a release's signed manifest on the HTTP listener.
pub fn manifest_path(version: &str) -> String {
    format!("/releases/{version}/manifest.dsse.json")
}

/// Whether `s` may be a version (letters, digits, `.`, `_`, `+`, `-`).
pub(crate) fn valid_version(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
}

/// Whether `s` may be an os or arch (lowercase letters, digits, `_`: no `-`,
/// which separates them in the file name).
fn valid_platform(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The pins of the stack's release keys.
pub fn pins(shared: &Shared) -> UpdatePins {
    UpdatePins {
        keys: shared.keys.release.iter().map(pki::Signer::public_key).collect(),
        threshold: shared.settings.options.release_threshold,
        min_sequence: shared.settings.options.release_min_sequence,
    }
}

/// The manifest of stored artifacts, good until `expires_at_ms`.
fn manifest(
    shared: &Shared,
    version: &str,
    sequence: u64,
    expires_at_ms: i64,
    artifacts: &[ReleaseArtifactRow],
) -> pki::release::Manifest {
    pki::release::Manifest {
        version: version.to_string(),
        sequence,
        expires_at_ms,
        artifacts: artifacts
            .iter()
            .map(|a| pki::release::Artifact {
                os: a.os.clone(),
                arch: a.arch.clone(),
                sha256: a.sha256.clone(),
                size: a.size,
                url: format!("{}{}", shared.settings.http_base_url, artifact_path(version, &a.os, &a.arch)),
            })
            .collect(),
    }
}

/// Signs a manifest with the first `n` release keys (all by default).
fn sign(shared: &Shared, manifest: &pki::release::Manifest, n: Option<usize>) -> pki::dsse::Envelope {
    let keys = &shared.keys.release;
    let signers: Vec<&dyn pki::Signer> = keys.iter().take(n.unwrap_or(keys.len())).map(|k| k as _).collect();
    pki::release::sign(&signers, manifest)
}

fn invalid(reason: String) -> Error {
    Error::InvalidRelease { reason }
}

/// Publishes a release: stores its artifacts (`(os, arch, bytes)`) and its
/// manifest signed by every release key.
pub fn publish(shared: &Shared, version: &str, sequence: u64, artifacts: &[(&str, &str, &[u8])]) -> Result<Release> {
    if !valid_version(version) {
        return Err(invalid(format!("version {version:?} is not letters, digits, '.', '_', '+', '-'")));
    }
    if artifacts.is_empty() {
        return Err(invalid(format!("release {version} has no artifact")));
    }
    let mut stored: Vec<(ReleaseArtifactRow, &[u8])> = Vec::new();
    for (os, arch, bytes) in artifacts {
        if !valid_platform(os) || !valid_platform(arch) {
            return Err(invalid(format!("platform {os:?}/{arch:?} is not lowercase letters, digits, '_'")));
        }
        if stored.iter().any(|(r, _)| r.os == *os && r.arch == *arch) {
            return Err(invalid(format!("release {version} has two artifacts for {os}/{arch}")));
        }
        let row = ReleaseArtifactRow {
            version: version.to_string(),
            os: os.to_string(),
            arch: arch.to_string(),
            sha256: hex::encode(Sha256::digest(bytes)),
            size: bytes.len() as u64,
        };
        stored.push((row, bytes));
    }
    stored.sort_by(|(a, _), (b, _)| (&a.os, &a.arch).cmp(&(&b.os, &b.arch)));
    let rows: Vec<ReleaseArtifactRow> = stored.iter().map(|(r, _)| r.clone()).collect();
    let now = now_ms();
    let expires_at_ms = now.saturating_add(shared.settings.options.release_expiry.as_millis() as i64);
    let manifest = manifest(shared, version, sequence, expires_at_ms, &rows);
    let envelope = sign(shared, &manifest, None);
    let row = ReleaseRow {
        version: version.to_string(),
        sequence,
        manifest: serde_json::to_vec(&manifest).unwrap_or_default(),
        envelope: envelope.to_json(),
        created_at_ms: now,
    };
    shared.ledger.write(|c| {
        if release_rows::get(c, version)?.is_some() {
            return Err(Error::ReleaseExists { version: version.to_string() });
        }
        release_rows::insert(c, &row)?;
        for (a, bytes) in &stored {
            release_rows::insert_artifact(c, a, bytes)?;
        }
        c.publish(crate::events::StackEvent::ReleasePublished { version: version.to_string(), sequence });
        Ok(())
    })?;
    tracing::info!(version, sequence, artifacts = rows.len(), signers = shared.keys.release.len(), "release published");
    Ok(Release {
        version: version.to_string(),
        sequence,
        manifest,
        envelope,
        manifest_url: format!("{}{}", shared.settings.http_base_url, manifest_path(version)),
    })
}

/// A published release.
pub fn get(shared: &Shared, version: &str) -> Result<Release> {
    let (row, artifacts) = shared.ledger.read(|c| {
        let row = release_rows::get(c, version)?.ok_or_else(|| Error::UnknownRelease { version: version.into() })?;
        Ok::<_, Error>((row, release_rows::artifacts(c, version)?))
    })?;
    let envelope = pki::dsse::Envelope::from_json(&row.envelope)
        .map_err(|e| Error::from(crate::store::Error::corrupt("releases", "envelope", version.to_string(), e)))?;
    // The manifest as published (its expiry); a row from before manifests
    // expired is rebuilt from its artifacts, good from its publication.
    let published = serde_json::from_slice::<pki::release::Manifest>(&row.manifest).unwrap_or_else(|_| {
        let expires = row.created_at_ms.saturating_add(shared.settings.options.release_expiry.as_millis() as i64);
        manifest(shared, version, row.sequence, expires, &artifacts)
    });
    Ok(Release {
        version: row.version,
        sequence: row.sequence,
        manifest: published,
        envelope,
        manifest_url: format!("{}{}", shared.settings.http_base_url, manifest_path(version)),
    })
}

/// A release's manifest signed as `options` say (the published one by default).
pub fn manifest_with(shared: &Shared, version: &str, options: &ManifestOptions) -> Result<pki::dsse::Envelope> {
    let release = get(shared, version)?;
    if *options == ManifestOptions::default() {
        return Ok(release.envelope);
    }
    let mut manifest = release.manifest;
    if let Some(sequence) = options.sequence {
        manifest.sequence = sequence;
    }
    if let Some(expires_at_ms) = options.expires_at_ms {
        manifest.expires_at_ms = expires_at_ms;
    }
    if options.wrong_digest {
        for a in &mut manifest.artifacts {
            // The digest of other bytes of the same size: bcd downloads the
            // right size and then refuses the digest.
            a.sha256 = hex::encode(Sha256::digest(format!("not {}", a.sha256)));
        }
    }
    Ok(sign(shared, &manifest, options.signers))
}

/// The parameters of a `daemon.upgrade` command: the signed manifest as a
/// DSSE JSON object (docs/protocol.md, "Self-update").
pub fn upgrade_params(envelope: &pki::dsse::Envelope) -> serde_json::Value {
    // The envelope's JSON form always parses back.
    let manifest: serde_json::Value = serde_json::from_str(&envelope.to_json()).unwrap_or(serde_json::Value::Null);
    serde_json::json!({ "manifest": manifest })
}

/// Enqueues a `daemon.upgrade` of a node to a published release; returns
/// the command id.
pub fn rollout(shared: &Shared, node_id: &str, version: &str, options: &ManifestOptions) -> Result<String> {
    let envelope = manifest_with(shared, version, options)?;
    let opts = CommandOptions { retry_safe: true, ..CommandOptions::default() };
    let id = commands::enqueue(shared, node_id, UPGRADE_KIND, &upgrade_params(&envelope), &opts)?;
    tracing::info!(node_id, version, command_id = %id, defects = ?options, "upgrade rolled out");
    Ok(id)
}

/// The daemon section naming a published release, its manifest signed as
/// `options` say (the published one by default).
pub fn daemon_section(shared: &Shared, version: &str, options: &ManifestOptions) -> Result<proto::DaemonSection> {
    let release = get(shared, version)?;
    let envelope = manifest_with(shared, version, options)?;
    Ok(proto::DaemonSection {
        version: release.version,
        sequence: release.sequence,
        manifest: Some(envelope.to_proto()),
    })
}

/// Publishes the next spec generation of a node with a daemon section
/// naming a published release; returns the generation.
pub fn converge_daemon(shared: &Shared, node_id: &str, version: &str, options: &ManifestOptions) -> Result<u64> {
    let daemon = daemon_section(shared, version, options)?;
    let row =
        crate::spec::publish(shared, node_id, &crate::spec::SpecUpdate { daemon: Some(daemon), ..Default::default() })?;
    tracing::info!(node_id, version, generation = row.generation, defects = ?options, "daemon section published");
    Ok(row.generation)
}

impl StackView<'_> {
    /// The artifacts of a published release (without their bytes).
    pub fn release_artifacts(&self, version: &str) -> Vec<ReleaseArtifactRow> {
        self.read(|c| release_rows::artifacts(c, version))
    }
}

/// Waits until a node has a live session whose Hello reported
/// `version` (a self-update confirmed by its Welcome); returns its row.
pub async fn await_daemon_version(
    shared: &Shared,
    node_id: &str,
    version: &str,
    timeout: Duration,
) -> Result<NodeSessionRow> {
    shared
        .await_until(format!("node {node_id} to run {version}"), timeout, |v| {
            if let Some(last) = v.node_sessions(node_id).last() {
                v.note(format_args!("the last session's version {:?}", last.daemon_version));
            }
            v.live_session(node_id).filter(|s| s.daemon_version == version)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::ReleaseKeys;

    #[test]
    fn names_are_checked_and_keys_never_printed() {
        assert!(valid_version("0.9.0") && valid_version("1.0.0-rc.1+g1234"));
        assert!(!valid_version("") && !valid_version("../x") && !valid_version("a/b"));
        assert!(valid_platform("linux") && valid_platform("amd64") && valid_platform("arm64"));
        assert!(!valid_platform("linux-gnu") && !valid_platform("Linux"));
        let keys = ReleaseKeys::from_seed("bc-interop-v1", 2);
        assert_eq!(format!("{keys:?}"), "Given(2 keys)");
        let ReleaseKeys::Given(seeds) = keys else { panic!() };
        // testdata/release/release.json: release/0's SPKI.
        let public = pki::Signer::public_key(&ed25519_dalek::SigningKey::from_bytes(&seeds[0]));
        assert_eq!(pki::b64::std(&public.spki_der()), "MCowBQYDK2VwAyEAiM9rB9INjAzl/pj91aBxBnPGQNV4b/JhVdQIfGLs7TY=");
        assert_eq!(artifact_path("0.9.0", "linux", "amd64"), "/releases/0.9.0/bcd-linux-amd64");
    }
}
