//! Contract tests in both directions live in `tests/`: the committed
//! fixtures are what the generators write and verify in Rust
//! (`committed_fixtures`), what Go wrote verifies in Rust
//! (`go_wrote`), and Go's own contract tests pass against the same files
//! (`go_contract`). This library is empty on purpose.

/// The workspace's `testdata/` directory.
pub fn testdata() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}
