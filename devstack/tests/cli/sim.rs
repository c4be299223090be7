//! What a first-time user broke with simulated nodes (issue 34), as the
//! person did it (a real fakehw `bcd sim`; without Go these skip, except
//! under CI): a stack restarted on its data directory is found again by
//! its nodes and reports adoption only as it sees it; piped input to a
//! console that ends before the shell is up, and one-shot commands;
//! revocation shown, refused work, an idempotent revoke and bcd sim's exit
//! status explained; rejections grouped apart from the progress line; a
//! quiet Ctrl-C during startup; `nodes --watch` and human `events`.

use std::process::{Command, Stdio};

use devstack::admin::api::NodeSummary;

use super::support::*;

fn nodes(serve: &Serve) -> Vec<NodeSummary> {
    let out = serve.cli(&["nodes", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn connected(serve: &Serve) -> u64 {
    let out = serve.cli(&["status", "--json"]);
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["connected"].as_u64().unwrap()
}

#[test]
fn a_restarted_stack_keeps_its_ports_and_its_nodes_find_it_again() {
    if !require_go("a_restarted_stack_keeps_its_ports_and_its_nodes_find_it_again") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let (data, admin) = (home.path().join("data"), home.path().join("admin.json"));
    let args = ["--data", data.to_str().unwrap(), "--sim", "2"];
    let mut serve = Serve::start(&args, &admin);
    serve.await_data_dir();
    let gateway = serve.printed("gateway");
    await_line(&serve.stderr, &mut serve.logged, FIRST_START, |l| l == "2 simulated node(s) adopted");
    assert!(serve.stop().0.success());

    let mut again = Serve::start(&args, &admin);
    again.await_data_dir();
    assert_eq!(again.printed("gateway"), gateway, "the same port");
    await_line(&again.stderr, &mut again.logged, DEADLINE, |l| l == "2 simulated node(s) adopted");
    // Reported from what the stack sees: both are connected when it says so.
    assert_eq!(connected(&again), 2, "{:#?}", again.logged);
    assert!(again.stop().0.success());
}

#[test]
fn a_console_takes_piped_input_and_one_shot_commands_and_revocation_is_visible() {
    if !require_go("a_console_takes_piped_input_and_one_shot_commands_and_revocation_is_visible") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let admin = home.path().join("admin.json");
    let mut serve = Serve::start(&["--memory", "--signed-intent", "--sim", "2"], &admin);
    serve.await_data_dir();
    await_line(&serve.stderr, &mut serve.logged, FIRST_START, |l| l == "2 simulated node(s) adopted");
    let all = nodes(&serve);
    let (node, other) = (all[0].id.clone(), all[1].id.clone());
    let console = |args: &[&str], input: &[u8]| {
        let mut child = Reaped(
            devstack()
                .arg("console")
                .args(args)
                .env("DEVSTACK_ADMIN", &admin)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input).unwrap();
        let (out, err) = (lines(child.stdout.take().unwrap()), lines(child.stderr.take().unwrap()));
        let status = await_exit(&mut child, DEADLINE);
        (status, out.iter().collect::<Vec<_>>().join("\n"), err.iter().collect::<Vec<_>>().join("\n"))
    };
    // Input that ended before the shell was up: delivered, and its end.
    let (status, out, err) = console(&[&node], b"echo piped-$((6*7))\n");
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
    assert!(out.lines().any(|l| l.trim_end().ends_with("piped-42")), "{out}");
    let (status, _, err) = console(&["--node", &node[..12]], b"");
    assert_eq!(status.code(), Some(0), "an empty input ends the shell: {err}");
    // One command: only its output, its status.
    let (status, out, err) = console(&[&node, "--", "echo one-$((1+1)); exit 7"], b"");
    assert_eq!((status.code(), out.as_str()), (Some(7), "one-2"), "{err}");
    let (status, out, _) = console(&[&node, "--", "cat"], b"fed\n");
    assert_eq!((status.code(), out.as_str()), (Some(0), "fed"));

    // Revocation: shown, new work refused with its code, idempotent.
    let first = serve.cli(&["revoke", &node]);
    assert!(text(&first.stdout).contains("revoked 1 certificate(s); its live session got a RevocationNotice"));
    let again = serve.cli(&["revoke", &node]);
    assert!(text(&again.stdout).contains("already revoked"), "{}", text(&again.stdout));
    let revoked = nodes(&serve).into_iter().find(|n| n.id == node).unwrap();
    assert_eq!(revoked.state, "revoked", "{revoked:?}");
    for args in [&["command", &node, "diag.nvml"][..], &["reserve", &node, "--gpus", "1"]] {
        let out = serve.cli(args);
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {said}");
        assert!(said.starts_with("devstack: node-revoked: "), "{args:?}: {said}");
    }
    let events = text(&serve.cli(&["events", "--kind", "revoked", "-o", "json"]).stdout);
    assert_eq!(events.lines().count(), 1, "one revoked event: {events}");
    let listed = text(&serve.cli(&["nodes", "--state", "revoked", "-o", "name"]).stdout);
    assert_eq!(listed, format!("node/{node}\n"));
    // A wait that times out: exit 6, said once with its code.
    let out = serve.cli(&["command", &other, "diag.nvml", "--wait", "--timeout", "0s"]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{said}");
    let last = said.lines().last().unwrap_or_default();
    assert!(last.starts_with("devstack: wait-timeout: ") && last.matches("timed out").count() == 1, "{said}");
    assert_eq!(last.matches("cmd_").count(), 1, "the command named once: {said}");
    let other_host = nodes(&serve).into_iter().find(|n| n.id == other).unwrap().hostname;
    let selected = text(&serve.cli(&["nodes", "-l", &format!("hostname={other_host}"), "-o", "name"]).stdout);
    assert_eq!(selected, format!("node/{other}\n"));
    let (exit, logged) = serve.stop();
    assert!(exit.success(), "{logged}");
    assert!(logged.contains("bcd sim stopped: exit status 3: an agent was revoked"), "{logged}");
}

#[test]
fn rejections_are_grouped_apart_from_the_progress_line_on_a_terminal() {
    let scenario = "rejections_are_grouped_apart_from_the_progress_line_on_a_terminal";
    if !require_go(scenario) || Command::new("tmux").arg("-V").output().is_err() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{scenario}: Go and tmux are needed under CI");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let admin = home.path().join("admin.json");
    let tmux = Tmux::new(home.path());
    let serve = format!(
        "DEVSTACK_ADMIN='{}' '{}' serve --memory --sim 3 --sim-variant hgx-h100-gpu-missing; echo serve exited $?; exec sleep 600",
        admin.display(),
        bin().to_string_lossy()
    );
    tmux.run(&["new-session", "-d", "-s", "console", "-x", "200", "-y", "50", &serve]);
    let done = tmux.await_line(|l| l.starts_with("0 simulated node(s) adopted"));
    assert_eq!(done, "0 simulated node(s) adopted; 3 nodes rejected: GpuCountMismatch: expected 8 GPUs, found 7");
    let screen = tmux.await_screen(|_| true);
    for line in screen.lines() {
        assert!(
            !(line.contains("Adopting:") && line.len() > "Adopting: 0/3 adopted, 3 rejected".len() + 20),
            "{screen}"
        );
        assert!(!line.contains("WARN"), "no warning per node: {screen}");
    }
    tmux.keys(false, "C-c");
    tmux.await_line(|l| l.starts_with("devstack: bcd sim stopped"));
}

#[test]
fn ctrl_c_during_startup_is_quiet() {
    if !require_go("ctrl_c_during_startup_is_quiet") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    // 200 agents: dozens are mid-handshake when their bcd sim gets SIGTERM.
    let mut serve = Serve::start(&["--memory", "--sim", "200"], &home.path().join("admin.json"));
    serve.await_data_dir();
    await_line(&serve.stderr, &mut serve.logged, FIRST_START, |l| l.starts_with("Joining simulated"));
    let (exit, logged) = serve.stop();
    assert!(exit.success(), "{logged}");
    let warnings: Vec<&str> = logged.lines().filter(|l| l.contains("WARN")).collect();
    assert!(warnings.is_empty(), "{} warnings at the stop:\n{}", warnings.len(), warnings.join("\n"));
}

#[test]
fn nodes_watch_and_events_follow_a_revocation_on_a_terminal() {
    let scenario = "nodes_watch_and_events_follow_a_revocation_on_a_terminal";
    if !require_go(scenario) || Command::new("tmux").arg("-V").output().is_err() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{scenario}: Go and tmux are needed under CI");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let admin = home.path().join("admin.json");
    let mut serve = Serve::start(&["--memory", "--sim", "2"], &admin);
    serve.await_data_dir();
    await_line(&serve.stderr, &mut serve.logged, FIRST_START, |l| l == "2 simulated node(s) adopted");
    let node = nodes(&serve)[0].id.clone();

    // A person watches the nodes and the revocations in one terminal.
    let tmux = Tmux::new(home.path());
    let bin = bin().to_string_lossy().into_owned();
    let watch = format!(
        "export DEVSTACK_ADMIN='{}'; '{bin}' events --watch --kind revoked & '{bin}' nodes --watch; exec sleep 600",
        admin.display()
    );
    tmux.run(&["new-session", "-d", "-s", "console", "-x", "220", "-y", "40", &watch]);
    let header = tmux.await_line(|l| l.starts_with("ID ") && l.contains("HOSTNAME"));
    assert!(header.contains("STATE") && header.contains("REASON"), "{header}");
    tmux.await_screen(|s| s.lines().filter(|l| l.contains(" adopted ")).count() == 2);

    let out = serve.cli(&["revoke", &node]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The watch prints the node again, revoked; the events line reads as words.
    let row = tmux.await_line(|l| l.starts_with(&node) && l.contains(" revoked "));
    assert!(row.contains("sim-hgx-h100"), "{row}");
    let event = tmux.await_line(|l| l.contains("revoked: every certificate"));
    assert!(event.contains(&node) && event.as_bytes()[2] == b':', "a time first: {event}");
    drop(tmux);
    assert!(serve.stop().0.success());
}

#[test]
fn simulated_nodes_under_chaos_are_struck_keep_the_invariants_and_find_the_stack_again_without_it() {
    let name = "simulated_nodes_under_chaos_are_struck_keep_the_invariants_and_find_the_stack_again_without_it";
    if !require_go(name) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let (data, admin) = (home.path().join("data"), home.path().join("admin.json"));
    let data = data.to_str().unwrap();
    let mut serve = Serve::start(&["--data", data, "--sim", "3", "--chaos", "heavy", "--sim-seed", "7"], &admin);
    serve.await_data_dir();
    await_line(&serve.stderr, &mut serve.logged, FIRST_START, |l| l == "3 simulated node(s) adopted");
    // Heavy chaos draws every 5 s: the first fault that strikes is printed.
    await_line(&serve.stderr, &mut serve.logged, DEADLINE, |l| l.starts_with("chaos: "));
    let (status, _) = serve.stop();
    assert!(status.success(), "{:#?}", serve.logged);
    assert!(serve.logged.iter().any(|l| l.starts_with("Chaos stopped after ")), "{:#?}", serve.logged);
    assert!(serve.logged.iter().any(|l| l == "Fleet invariants: every one held"), "{:#?}", serve.logged);

    // Without --chaos the agents are pointed back at the stack: the proxy is gone.
    let mut again = Serve::start(&["--data", data, "--sim", "3"], &admin);
    again.await_data_dir();
    await_line(&again.stderr, &mut again.logged, DEADLINE, |l| l == "3 simulated node(s) adopted");
    assert_eq!(connected(&again), 3, "{:#?}", again.logged);
    assert!(again.stop().0.success());
}
