//! The `releases` and `release_artifacts` tables: published daemon releases,
//! their signed manifests and the artifacts' bytes served over HTTP.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::{ReleaseArtifactRow, ReleaseRow};
use crate::{Db, Error, Result};

const COLUMNS: &str = "version, sequence, manifest, envelope, created_at_ms";

fn row(r: &Row) -> Result<ReleaseRow, SqlError> {
    Ok(ReleaseRow {
        version: r.get(0)?,
        sequence: r.get(1)?,
        manifest: r.get(2)?,
        envelope: r.get(3)?,
        created_at_ms: r.get(4)?,
    })
}

/// Inserts a release.
pub fn insert(c: &Db<'_>, r: &ReleaseRow) -> Result<()> {
    c.execute(
        &format!("INSERT INTO releases ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)"),
        params![r.version, r.sequence, r.manifest, r.envelope, r.created_at_ms],
    )
    .map_err(Error::at("insert release"))?;
    Ok(())
}

/// Inserts an artifact of a release.
pub fn insert_artifact(c: &Db<'_>, a: &ReleaseArtifactRow, bytes: &[u8]) -> Result<()> {
    c.execute(
        "INSERT INTO release_artifacts (version, os, arch, sha256, size, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![a.version, a.os, a.arch, a.sha256, a.size, bytes],
    )
    .map_err(Error::at("insert release artifact"))?;
    Ok(())
}

/// A release by version.
pub fn get(c: &Db<'_>, version: &str) -> Result<Option<ReleaseRow>> {
    optional(
        c.query_row(&format!("SELECT {COLUMNS} FROM releases WHERE version = ?1"), params![version], row),
        "read release",
    )
}

/// The artifacts of a release (without bytes), by platform.
pub fn artifacts(c: &Db<'_>, version: &str) -> Result<Vec<ReleaseArtifactRow>> {
    c.query_map(
        "SELECT version, os, arch, sha256, size FROM release_artifacts WHERE version = ?1 ORDER BY os, arch",
        params![version],
        |r| {
            Ok(ReleaseArtifactRow {
                version: r.get(0)?,
                os: r.get(1)?,
                arch: r.get(2)?,
                sha256: r.get(3)?,
                size: r.get(4)?,
            })
        },
    )
    .map_err(Error::at("list release artifacts"))
}

/// The bytes of an artifact.
pub fn artifact_bytes(c: &Db<'_>, version: &str, os: &str, arch: &str) -> Result<Option<Vec<u8>>> {
    optional(
        c.query_row(
            "SELECT bytes FROM release_artifacts WHERE version = ?1 AND os = ?2 AND arch = ?3",
            params![version, os, arch],
            |r| r.get(0),
        ),
        "read release artifact",
    )
}
