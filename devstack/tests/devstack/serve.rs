//! The `devstack serve` binary: what it prints and writes, and a clean stop
//! on SIGTERM.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

#[test]
fn serve_writes_a_ready_config_and_never_prints_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_devstack"))
        .args(["serve", "--data"])
        .arg(dir.path())
        .args(["--signed-intent"])
        .env("RUST_LOG", "debug")
        .env("DEVSTACK_ADMIN", dir.path().join("admin.json"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    while !printed.contains("join a node") {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "serve exited early:\n{printed}");
        printed += &line;
    }
    for label in ["gateway:", "well-known:", "serving CA pin:", "join signing pin:", "join encryption pin:"] {
        assert!(printed.contains(label), "{label} missing from\n{printed}");
    }

    let token_path = dir.path().join("join-token");
    let token = std::fs::read_to_string(&token_path).unwrap().trim().to_string();
    assert!(token.starts_with("bc_jt_"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&token_path).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let config = std::fs::read_to_string(dir.path().join("bcd/config.toml")).unwrap();
    assert!(config.contains("gateway_server_name = \"gw.dev.local\""), "{config}");
    assert!(dir.path().join("bcd/join-encryption.jwk").exists());
    assert!(dir.path().join("devstack.sqlite").exists());

    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut logs = String::new();
    child.stderr.take().unwrap().read_to_string(&mut logs).unwrap();
    assert!(logs.contains("devstack: stopped"), "{logs}");
    for text in [&printed, &rest, &logs] {
        assert!(!text.contains(&token), "the token was printed");
    }
}

#[cfg(unix)]
#[test]
fn serve_data_keeps_its_store_owner_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = parent.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_devstack"))
        .args(["serve", "--data"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    while !printed.contains("join a node") {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "serve exited early:\n{printed}");
        printed += &line;
    }
    let mode = |name: &str| std::fs::metadata(dir.join(name)).unwrap().permissions().mode() & 0o777;
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700, "the data dir");
    for file in ["devstack.sqlite", "devstack.sqlite-wal", "devstack.sqlite-shm", "join-token"] {
        assert_eq!(mode(file), 0o600, "{file}");
    }
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    assert!(child.wait().unwrap().success());
}
