//! What a first-time user broke (issue 34), each as the person did it,
//! without a simulated node: a second `serve` on a running stack's data
//! directory or discovery file is refused before it writes anything, naming
//! the holder's pid, and says so once; a port in use is said once; a closed
//! pipe ends the output; an empty node name is a usage error; input the CLI
//! can check (params, kinds) is refused before anything is sent.

use std::process::ExitStatus;

use super::support::*;

/// A file's bytes and modification time.
fn snapshot(path: &std::path::Path) -> (Vec<u8>, std::time::SystemTime) {
    (std::fs::read(path).unwrap(), std::fs::metadata(path).unwrap().modified().unwrap())
}

/// Runs `devstack serve ARGS`, which must be refused: its status and
/// standard error (a serve that runs fails the test at the deadline).
fn refused_serve(args: &[&str], admin: &std::path::Path) -> (ExitStatus, String) {
    use std::io::Read as _;
    let mut child = Reaped(
        devstack()
            .arg("serve")
            .args(args)
            .env("DEVSTACK_ADMIN", admin)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (stdout, stderr) = (lines(child.stdout.take().unwrap()), child.stderr.take().unwrap());
    let status = poll(std::time::Duration::from_secs(20), std::time::Duration::from_millis(20), || {
        child.try_wait().unwrap().ok_or_else(|| format!("serve {args:?} was not refused: it runs"))
    });
    let mut said = String::new();
    std::io::BufReader::new(stderr).read_to_string(&mut said).unwrap();
    let printed: Vec<String> = stdout.iter().collect();
    assert!(printed.is_empty(), "a refused serve prints no block: {printed:?}");
    (status, said)
}

#[test]
fn a_second_serve_is_refused_before_it_writes_anything_naming_the_holder_once() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let admin = home.path().join("admin.json");
    let mut serve = Serve::start(&["--data", data.to_str().unwrap()], &admin);
    serve.await_data_dir();
    let pid = serve.child.id();
    let gateway = serve.printed("gateway");
    let files = [data.join("bcd/config.toml"), data.join("join-token"), admin.clone()];
    let before: Vec<_> = files.iter().map(|f| snapshot(f)).collect();

    // The same data directory and discovery file.
    let (status, said) = refused_serve(&["--data", data.to_str().unwrap()], &admin);
    assert!(!status.success(), "{said}");
    assert!(said.contains(&format!("pid {pid}")), "the refusal names the holder: {said}");
    assert_eq!(said.lines().count(), 1, "said once: {said}");
    // The same data directory with another discovery file: two stacks on one store.
    let other_admin = home.path().join("other.json");
    let (status, said) = refused_serve(&["--data", data.to_str().unwrap()], &other_admin);
    assert!(!status.success() && said.contains(&format!("pid {pid}")), "{said}");
    assert!(said.contains("devstack.lock"), "{said}");
    assert!(!other_admin.exists(), "nothing written");
    // Another data directory with the same discovery file.
    let elsewhere = home.path().join("elsewhere");
    let (status, said) = refused_serve(&["--data", elsewhere.to_str().unwrap()], &admin);
    assert!(!status.success() && said.contains(&format!("pid {pid}")), "{said}");
    assert_eq!(said.matches(admin.to_str().unwrap()).count(), 1, "the file is named once: {said}");
    assert!(!elsewhere.exists(), "nothing written: {elsewhere:?}");
    // A port in use, said once.
    let port = gateway.rsplit(':').next().unwrap();
    let (status, said) = refused_serve(&["--memory", "--port", port], &home.path().join("third.json"));
    assert!(!status.success(), "{said}");
    assert_eq!(said.matches("in use").count(), 1, "said once: {said}");
    assert_eq!(said.matches(&format!(":{port}")).count(), 1, "the address once: {said}");

    let after: Vec<_> = files.iter().map(|f| snapshot(f)).collect();
    assert!(before == after, "the running stack's files are untouched");
    let status = serve.cli(&["status", "-o", "json"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(info["gateway_url"], gateway.as_str());
    let (exit, _) = serve.stop();
    assert!(exit.success());
    assert!(data.join("devstack.lock").exists(), "the lock file stays (its lock went with the process)");
}

#[test]
fn a_closed_pipe_ends_the_output_and_bad_arguments_are_refused_before_any_request() {
    let home = tempfile::tempdir().unwrap();
    let admin = home.path().join("admin.json");
    let mut serve = Serve::start(&["--memory"], &admin);
    serve.await_data_dir();
    for args in [&["status"][..], &["pools"], &["tokens", "-o", "wide"], &["completion", "bash"], &["--help"]] {
        let (status, said) = with_closed_stdout(&admin, args);
        assert_eq!(status.code(), Some(0), "{args:?}: {said}");
        assert!(said.is_empty(), "{args:?}: {said}");
    }

    // Checked before a URL is built or a request sent: exit 2, one sentence.
    let cases: [(&[&str], &str); 6] = [
        (&["node", ""], "the node is empty"),
        (&["revoke", ""], "the node is empty"),
        (&["command", "", "diag.nvml"], "the node is empty"),
        (&["command", "n", "diag.nvml", "--params", "[1,2]"], "params must be a JSON object, not array"),
        (&["command", "n", "daemon.upgrade", "--params", r#"{"version": 9}"#], "must be a string, not integer"),
        (&["command", "n", "diag.nvm"], "did you mean \"diag.nvml\""),
    ];
    for (args, expected) in cases {
        let out = serve.cli(args);
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
        assert!(said.contains(expected) && said.lines().count() == 1, "{args:?}: {said}");
        assert!(!said.contains("no such admin route"), "{args:?}: {said}");
    }
    let (exit, logged) = serve.stop();
    assert!(exit.success(), "{logged}");
}
