//! The fleet subcommands and the simulated variants, as a person uses them
//! against `devstack serve --memory --sim N [--sim-variant V]` (a real
//! fakehw `bcd sim`): each variant's progress lines (the GPU counts, the
//! rejections grouped and each rejected node named with why); `cordon`
//! with its `node.cordoned` on `events --watch` and its refusal of
//! `reserve`; `reserve --pool` with a `--duration`; `ssh-cert` and its
//! refusals, the certificate read back with `ssh-keygen -L`.

use std::process::{Command, Stdio};
use std::time::Instant;

use devstack::admin::api::{NodeSummary, ReservationView};

use super::support::*;

/// A stack of its own: `serve ARGS` with an admin file in a directory kept as long as it runs.
fn serve(args: &[&str]) -> (Serve, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    let serve = Serve::start(args, &home.path().join("admin.json"));
    (serve, home)
}

fn nodes(serve: &Serve) -> Vec<NodeSummary> {
    let out = serve.cli(&["nodes", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Whether ssh-keygen runs; without it the scenario skips, except under CI.
fn require_ssh_keygen(scenario: &str) -> bool {
    let ok = Command::new("ssh-keygen").arg("-?").output().is_ok();
    if !ok {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{scenario}: ssh-keygen is not installed (CI=true)");
        eprintln!("{scenario} skipped: ssh-keygen is not installed (openssh-client)");
    }
    ok
}

#[test]
fn each_sim_variant_says_what_a_person_needs() {
    let scenario = "each_sim_variant_says_what_a_person_needs";
    if !require_go(scenario) {
        return;
    }
    for (variant, gpus, adopted) in
        [("l40s", Some(4), true), ("cpu", None, true), ("hgx-h100-gpu-missing", Some(7), false)]
    {
        let started = Instant::now();
        let (mut serve, _home) = serve(&["--memory", "--sim", "2", "--sim-variant", variant]);
        let joined = await_line(&serve.stderr, &mut serve.logged, FIRST_START, |l| l.starts_with("Joined "));
        assert!(joined.starts_with(&format!("Joined 2 simulated {variant} node(s) into pool_")), "{joined}");
        let done = await_line(&serve.stderr, &mut serve.logged, DEADLINE, |l| l.contains("simulated node(s) adopted"));
        let nodes = nodes(&serve);
        assert_eq!(nodes.len(), 2, "{nodes:?}");
        assert!(nodes.iter().all(|n| n.pool == format!("sim-{variant}") && n.gpus == gpus), "{variant}: {nodes:?}");
        if adopted {
            assert_eq!(done, "2 simulated node(s) adopted", "{variant}");
            assert!(nodes.iter().all(|n| n.state == "adopted"), "{nodes:?}");
        } else {
            assert!(done.starts_with("0 simulated node(s) adopted; 2 nodes rejected: GpuCountMismatch: "), "{done}");
            // Each rejected node, named with why.
            for n in &nodes {
                let named = |l: &str| l.starts_with(&format!("  rejected {} (", n.id));
                let line = match serve.logged.iter().find(|l| named(l)) {
                    Some(line) => line.clone(),
                    None => await_line(&serve.stderr, &mut serve.logged, DEADLINE, named),
                };
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
    if !require_go(scenario) || !require_ssh_keygen(scenario) {
        return;
    }
    let (mut serve, _home) = serve(&["--memory", "--sim", "2"]);
    await_line(&serve.stderr, &mut serve.logged, FIRST_START, |l| l == "2 simulated node(s) adopted");
    let nodes = nodes(&serve);
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
