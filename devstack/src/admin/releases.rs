//! A release directory (`devstack serve --releases DIR`), published for
//! self-update by hand (docs/devstack.md, "devstack serve"). The layout:
//!
//! ```text
//! DIR/<version>/bcd-<os>-<arch>   one or more artifacts (bcd-linux-amd64, …)
//! DIR/<version>/sequence          optional: the release sequence, a number
//! ```
//!
//! Without a `sequence` file a version's sequence is its place (1, 2, …)
//! among the directory's versions in version order (dot-separated parts,
//! numbers compared as numbers). Every version not yet published is
//! published, signed by the stack's release keys; a published one is never
//! changed.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use crate::DevStack;
use crate::error::{Error, Result};
use crate::releases::Release;

/// The name of the optional sequence file in a version's directory.
pub const SEQUENCE_FILE: &str = "sequence";

/// One version found in the directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirRelease {
    /// The version (the directory's name).
    pub version: String,
    /// Its release sequence.
    pub sequence: u64,
    /// Its artifacts: os, arch and file.
    pub artifacts: Vec<(String, String, PathBuf)>,
}

/// One part of a version, for ordering: numbers before words.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Number(u64),
    Word(String),
}

fn parts(version: &str) -> Vec<Part> {
    version
        .split(['.', '-', '+'])
        .map(|p| p.parse().map(Part::Number).unwrap_or_else(|_| Part::Word(p.to_string())))
        .collect()
}

/// Version order: part by part, numbers as numbers.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    parts(a).cmp(&parts(b)).then_with(|| a.cmp(b))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// The artifacts of one version's directory: `bcd-<os>-<arch>` files.
fn artifacts(dir: &Path) -> Result<Vec<(String, String, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((os, arch)) = name.strip_prefix("bcd-").and_then(|rest| rest.split_once('-')) else { continue };
        if entry.file_type().map_err(io(&entry.path()))?.is_file() {
            found.push((os.to_string(), arch.to_string(), entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// Every version in the directory with its sequence and artifacts, in
/// version order. A version directory without an artifact is an error.
pub fn scan(dir: &Path) -> Result<Vec<DirRelease>> {
    let mut versions = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        if entry.file_type().map_err(io(&entry.path()))?.is_dir() {
            versions.push((entry.file_name().to_string_lossy().into_owned(), entry.path()));
        }
    }
    versions.sort_by(|(a, _), (b, _)| compare_versions(a, b));
    let mut found = Vec::new();
    for (place, (version, path)) in versions.into_iter().enumerate() {
        let artifacts = artifacts(&path)?;
        if artifacts.is_empty() {
            return Err(Error::InvalidRelease { reason: format!("{} holds no bcd-<os>-<arch> file", path.display()) });
        }
        let file = path.join(SEQUENCE_FILE);
        let sequence = match std::fs::read_to_string(&file) {
            Ok(text) => text.trim().parse().map_err(|_| Error::InvalidRelease {
                reason: format!("{} is not a number: {:?}", file.display(), text.trim()),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => place as u64 + 1,
            Err(e) => return Err(io(&file)(e)),
        };
        found.push(DirRelease { version, sequence, artifacts });
    }
    Ok(found)
}

/// Publishes every version of the directory the stack has not published
/// yet; returns those it published.
pub async fn publish_new(stack: &DevStack, dir: &Path) -> Result<Vec<Release>> {
    let mut published = Vec::new();
    for release in scan(dir)? {
        match stack.release_info(&release.version) {
            Ok(_) => continue,
            Err(Error::UnknownRelease { .. }) => {}
            Err(e) => return Err(e),
        }
        let mut bytes = Vec::new();
        for (os, arch, path) in &release.artifacts {
            bytes.push((os.as_str(), arch.as_str(), std::fs::read(path).map_err(io(path))?));
        }
        let artifacts: Vec<(&str, &str, &[u8])> = bytes.iter().map(|(o, a, b)| (*o, *a, b.as_slice())).collect();
        published.push(stack.publish_release(&release.version, release.sequence, &artifacts).await?);
    }
    Ok(published)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_by_their_numbers() {
        let mut v = vec!["0.10.0", "0.9.1", "0.9.0", "1.0.0-rc.1", "0.9.0-beta"];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(v, ["0.9.0", "0.9.0-beta", "0.9.1", "0.10.0", "1.0.0-rc.1"]);
    }

    #[test]
    fn the_layout_gives_versions_sequences_and_artifacts() {
        let dir = tempfile::tempdir().unwrap();
        for (version, files) in
            [("0.10.0", &["bcd-linux-amd64"][..]), ("0.9.1", &["bcd-linux-amd64", "bcd-linux-arm64", "notes.txt"])]
        {
            std::fs::create_dir(dir.path().join(version)).unwrap();
            for f in files {
                std::fs::write(dir.path().join(version).join(f), b"bytes").unwrap();
            }
        }
        let found = scan(dir.path()).unwrap();
        assert_eq!(
            found.iter().map(|r| (r.version.as_str(), r.sequence)).collect::<Vec<_>>(),
            [("0.9.1", 1), ("0.10.0", 2)]
        );
        assert_eq!(
            found[0].artifacts.iter().map(|(o, a, _)| format!("{o}/{a}")).collect::<Vec<_>>(),
            ["linux/amd64", "linux/arm64"]
        );

        std::fs::write(dir.path().join("0.9.1").join(SEQUENCE_FILE), "7\n").unwrap();
        assert_eq!(scan(dir.path()).unwrap()[0].sequence, 7);
        std::fs::create_dir(dir.path().join("0.11.0")).unwrap();
        assert!(matches!(scan(dir.path()), Err(Error::InvalidRelease { .. })), "a version without an artifact");
    }
}
