//! The `devstack` command line for issue 33, as a person uses it against
//! `devstack serve --memory --sim N [--sim-variant V]` (a real fakehw `bcd
//! sim`, so Go is needed: without it a scenario skips locally and fails
//! under `CI=true`): each simulated variant's progress lines (the GPU
//! counts, the rejected nodes named with why); `cordon` with its
//! `node.cordoned` on `events --watch` and its refusal of `reserve`;
//! `reserve --pool` with a `--duration`; `ssh-cert` and its refusals, the
//! certificate read back with `ssh-keygen -L`. The helpers are this file's
//! own (a copy of `cli.rs`'s few), so the two test binaries stay apart.

use std::io::{BufRead as _, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use devstack::admin::api::{NodeSummary, ReservationView};

/// How long the first start may take: it may build bcd from a cold Go cache.
const FIRST_START: Duration = Duration::from_secs(600);
/// How long anything else may take.
const DEADLINE: Duration = Duration::from_secs(60);

fn devstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_devstack"))
}

/// Whether `tool` runs; without it the scenario skips, except under CI.
fn require(scenario: &str, tool: &str, arg: &str) -> bool {
    let ok = Command::new(tool).arg(arg).output().is_ok();
    if !ok {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{scenario}: {tool} is not installed (CI=true)");
        eprintln!("{scenario} skipped: {tool} is not installed");
    }
    ok
}

/// The lines a child writes to one of its pipes, as they come.
fn lines(pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Reads lines until one satisfies `what`; fails at the deadline with
/// everything read so far.
fn await_line(rx: &Receiver<String>, seen: &mut Vec<String>, within: Duration, what: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + within;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                seen.push(line.clone());
                if what(&line) {
                    return line;
                }
            }
            Err(e) => panic!("no such line ({e}); read so far:\n{}", seen.join("\n")),
        }
    }
}

/// A child killed and reaped when the test ends before it does.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            // SAFETY: a signal to our own child: SIGINT stops serve orderly.
            unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGINT) };
            let deadline = Instant::now() + DEADLINE;
            while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A `devstack serve` child, what it logged, and its admin file.
struct Serve {
    _child: Reaped,
    stderr: Receiver<String>,
    logged: Vec<String>,
    admin: PathBuf,
    _home: tempfile::TempDir,
}

impl Serve {
    fn start(args: &[&str]) -> Serve {
        let home = tempfile::tempdir().unwrap();
        let admin = home.path().join("admin.json");
        let mut child = devstack()
            .arg("serve")
            .args(args)
            .env("DEVSTACK_ADMIN", &admin)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = lines(child.stderr.take().unwrap());
        Serve { _child: Reaped(child), stderr, logged: Vec::new(), admin, _home: home }
    }

    fn await_logged(&mut self, within: Duration, what: impl Fn(&str) -> bool) -> String {
        await_line(&self.stderr, &mut self.logged, within, what)
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        devstack().args(args).env("DEVSTACK_ADMIN", &self.admin).output().unwrap()
    }

    fn nodes(&self) -> Vec<NodeSummary> {
        let out = self.cli(&["nodes", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn each_sim_variant_says_what_a_person_needs() {
    let scenario = "each_sim_variant_says_what_a_person_needs";
    if !require(scenario, "go", "version") {
        return;
    }
    for (variant, gpus, adopted) in
        [("l40s", Some(4), true), ("cpu", None, true), ("hgx-h100-gpu-missing", Some(7), false)]
    {
        let started = Instant::now();
        let mut serve = Serve::start(&["--memory", "--sim", "2", "--sim-variant", variant]);
        let joined = serve.await_logged(FIRST_START, |l| l.starts_with("Joined "));
        assert!(joined.starts_with(&format!("Joined 2 simulated {variant} node(s) into pool_")), "{joined}");
        let done = serve.await_logged(DEADLINE, |l| l.contains("simulated node(s) adopted"));
        let nodes = serve.nodes();
        assert_eq!(nodes.len(), 2, "{nodes:?}");
        assert!(nodes.iter().all(|n| n.pool == format!("sim-{variant}") && n.gpus == gpus), "{variant}: {nodes:?}");
        if adopted {
            assert_eq!(done, "2 simulated node(s) adopted", "{variant}");
            assert!(nodes.iter().all(|n| n.state == "adopted"), "{nodes:?}");
        } else {
            assert!(done.starts_with("0 simulated node(s) adopted; 2 rejected: GpuCountMismatch: "), "{done}");
            // Each rejected node, named with why.
            for n in &nodes {
                let line = serve.await_logged(DEADLINE, |l| l.starts_with(&format!("  rejected {} (", n.id)));
                assert!(line.contains(&n.hostname) && line.contains("GpuCountMismatch: "), "{line}");
                assert_eq!(n.state, "rejected", "{n:?}");
            }
        }
        eprintln!("{scenario}: {variant} in {:.2?}", started.elapsed());
    }
}

#[test]
fn cordon_pool_reservations_and_ssh_certificates_from_the_cli() {
    let scenario = "cordon_pool_reservations_and_ssh_certificates_from_the_cli";
    if !require(scenario, "go", "version") || !require(scenario, "ssh-keygen", "-?") {
        return;
    }
    let mut serve = Serve::start(&["--memory", "--sim", "2"]);
    serve.await_logged(FIRST_START, |l| l == "2 simulated node(s) adopted");
    let nodes = serve.nodes();
    let (a, b) = (&nodes[0].id, &nodes[1].id);

    // A watcher sees the cordon; a booking on the node is refused.
    let mut watcher = Reaped(
        devstack()
            .args(["events", "--watch"])
            .env("DEVSTACK_ADMIN", &serve.admin)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let events = lines(watcher.0.stdout.take().unwrap());
    let out = serve.cli(&["cordon", a, "--reason", "disk swap"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("cordoned (disk swap)"), "{}", text(&out.stdout));
    let mut watched = Vec::new();
    let line = await_line(&events, &mut watched, DEADLINE, |l| l.contains(r#""event":"node.cordoned""#));
    let event: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!((event["node_id"].as_str(), event["reason"].as_str()), (Some(a.as_str()), Some("disk swap")));
    let out = serve.cli(&["reserve", a, "--gpus", "1"]);
    assert!(!out.status.success() && text(&out.stderr).contains("node-cordoned: "), "{}", text(&out.stderr));
    let out = serve.cli(&["cordon", a, "--reason", ""]);
    assert!(!out.status.success() && text(&out.stderr).contains("cordon-reason: "), "{}", text(&out.stderr));

    // The pool form books on the node that is not cordoned, for a while.
    let out = serve.cli(&["reserve", "--pool", "sim-hgx-h100", "--gpus", "2", "--duration", "30m", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let view: ReservationView = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((view.node_id.as_str(), view.gpu_indexes.as_slice()), (b.as_str(), [0, 1].as_slice()));
    let out = serve.cli(&["reserve", "--pool", "sim-hgx-h100", "--gpus", "7"]);
    assert!(text(&out.stderr).contains("reservation-unplaceable: "), "{}", text(&out.stderr));
    assert!(serve.cli(&["uncordon", a]).status.success());

    // A break-glass certificate for a fresh key, read back by ssh-keygen.
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_string_lossy().into_owned();
    let out = serve.cli(&["ssh-cert", a, "--principal", "root", "--ttl", "15m", "--out", &out_dir]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("ssh -i "), "{}", text(&out.stdout));
    let key = dir.path().join("id_ed25519");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the private key is the user's alone");
    let listed = Command::new("ssh-keygen").arg("-L").arg("-f").arg(dir.path().join("id_ed25519-cert.pub")).output();
    let listed = text(&listed.unwrap().stdout);
    assert!(listed.contains("Principals: \n                root\n"), "{listed}");
    assert!(listed.contains("Extensions: \n                permit-pty\n"), "{listed}");
    // The same key again, with --key: written beside it.
    let public = dir.path().join("id_ed25519.pub").to_string_lossy().into_owned();
    std::fs::remove_file(dir.path().join("id_ed25519-cert.pub")).unwrap();
    let out = serve.cli(&["ssh-cert", b, "--principal", "root", "--key", &public]);
    assert!(out.status.success() && dir.path().join("id_ed25519-cert.pub").is_file(), "{}", text(&out.stderr));
    for (args, code) in [
        (vec!["ssh-cert", a, "--principal", "alice", "--key", &public], "ssh-principal: "),
        (vec!["ssh-cert", a, "--principal", "root", "--ttl", "25h", "--key", &public], "ssh-ttl: "),
        (vec!["ssh-cert", "node_nobody", "--principal", "root", "--key", &public], "no node is named"),
    ] {
        let out = serve.cli(&args);
        assert!(!out.status.success() && text(&out.stderr).contains(code), "{args:?}: {}", text(&out.stderr));
    }
}
