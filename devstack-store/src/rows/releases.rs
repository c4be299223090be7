//! The rows of published releases and their artifacts.

/// A published release (its artifacts' bytes are in `release_artifacts`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseRow {
    /// The daemon version.
    pub version: String,
    /// The release sequence.
    pub sequence: u64,
    /// The manifest (JSON), as signed.
    pub manifest: Vec<u8>,
    /// The signed manifest, DSSE JSON.
    pub envelope: String,
    /// When it was published.
    pub created_at_ms: i64,
}

/// One artifact of a release, without its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseArtifactRow {
    /// The release.
    pub version: String,
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`.
    pub arch: String,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}
