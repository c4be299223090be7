//! What an outside review of the dev stack found, each kept as the test
//! named for it: a store file made owner-only, log lines that cannot be
//! forged, malformed input refused `InvalidArgument` with a code, limits
//! per node.

use devstack::{DevStack, DevStackOptions};

#[cfg(unix)]
#[tokio::test]
async fn a_store_file_is_owner_only_even_when_it_was_world_readable() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stack.sqlite");
    // A store made before the files were owner-only.
    let stack = DevStack::start(DevStackOptions::file(&path)).await.unwrap();
    stack.shutdown().await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        if std::path::Path::new(&file).exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let stack = DevStack::start(DevStackOptions::file(&path)).await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_release_url_cannot_forge_a_log_line() {
    let logs = crate::Logs::capture();
    let stack = DevStack::start(DevStackOptions::memory()).await.unwrap();
    // A newline, a forged line and an escape sequence in the URL-decoded
    // version, and in the file name.
    for path in [
        "/releases/0.9.0%0a2026-01-01T00:00:00Z%20INFO%20forged-by-the-client%1b%5b31m/bcd-linux-amd64",
        "/releases/0.9.0/bcd-linux%0aforged-by-the-client%1b%5b31m",
    ] {
        assert_eq!(crate::node::http_get(&stack, path).await.0, 404, "{path}");
    }
    stack.shutdown().await.unwrap();
    let text = logs.text();
    assert!(text.contains("forged-by-the-client"), "the refusal was logged");
    for line in text.lines().filter(|l| l.contains("forged-by-the-client")) {
        assert!(line.contains("release download refused"), "a forged log line: {line:?}");
        assert!(!line.contains('\u{1b}'), "a raw ESC in the log: {line:?}");
    }
}
