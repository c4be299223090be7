//! The `devstack` command line as a person uses it, in two "terminals":
//! `devstack serve --memory --sim 3` as a child process (a real fakehw `bcd
//! sim`, so Go is needed: without it the scenario skips locally and fails
//! under `CI=true`), and the admin subcommands against it (`nodes --json`,
//! `command … diag.nvml --wait`, `events --watch`); then SIGINT, a clean
//! exit, and nothing left behind. Without a stack, or with a wrong token,
//! every subcommand fails with a sentence that says so. `devstack console`
//! as a person uses it: inside tmux (keys typed with `send-keys`, the screen
//! read with `capture-pane`) against `devstack serve --signed-intent --sim 1`.

mod bugs;
mod fleet;
mod output;
mod sim;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use devstack::admin::api::{CommandView, NodeSummary};
use support::*;

#[test]
fn serve_sim_adopts_three_nodes_and_the_cli_drives_them_until_sigint() {
    let scenario = "serve_sim_adopts_three_nodes_and_the_cli_drives_them_until_sigint";
    if !require_go(scenario) {
        return;
    }
    let started = Instant::now();
    let home = tempfile::tempdir().unwrap();
    let admin = home.path().join("admin.json");
    let mut serve = Serve::start(&["--memory", "--sim", "3"], &admin);
    let data_dir = serve.await_data_dir();
    assert!(data_dir.is_dir(), "{data_dir:?}");

    // Terminal 1: the progress lines.
    let joined = await_line(&serve.stderr, &mut serve.logged, FIRST_START, |l| l.starts_with("Joined "));
    assert!(joined.starts_with("Joined 3 simulated hgx-h100 node(s) into pool_"), "{joined}");
    await_line(&serve.stderr, &mut serve.logged, DEADLINE, |l| l == "3 simulated node(s) adopted");

    // Terminal 2: the nodes, a watcher, a command.
    let out = serve.cli(&["nodes", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let nodes: Vec<NodeSummary> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    for n in &nodes {
        assert_eq!((n.state.as_str(), n.pool.as_str(), n.gpus), ("adopted", "sim-hgx-h100", Some(8)), "{n:?}");
        assert!(n.session_epoch.is_some() && n.applied_generation >= 1, "{n:?}");
    }
    let table = serve.cli(&["nodes"]);
    assert!(text(&table.stdout).ends_with("3 node(s): 3 adopted\n"), "{}", text(&table.stdout));

    let mut watcher = Reaped(
        devstack().args(["events", "--watch"]).env("DEVSTACK_ADMIN", &admin).stdout(Stdio::piped()).spawn().unwrap(),
    );
    let events = lines(watcher.stdout.take().unwrap());
    let mut watched = Vec::new();
    // The kept events come first: the three joins and adoptions.
    let mut adopted = std::collections::BTreeSet::new();
    while adopted.len() < nodes.len() {
        let line = await_line(&events, &mut watched, DEADLINE, |l| l.contains(r#""event":"adopted""#));
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        adopted.insert(event["node_id"].as_str().unwrap().to_string());
    }
    assert_eq!(adopted, nodes.iter().map(|n| n.id.clone()).collect());

    let target = &nodes[1].id;
    let out = serve.cli(&["command", &target[..12], "diag.nvml", "--wait", "--json"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let command: CommandView = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((command.node_id.as_str(), command.state.as_str()), (target.as_str(), "succeeded"));
    assert_eq!(command.output.as_ref().and_then(|o| o["gpus"].as_u64()), Some(8), "{command:?}");
    let ended = await_line(&events, &mut watched, DEADLINE, |l| l.contains(&command.id) && l.contains("succeeded"));
    let ended: serde_json::Value = serde_json::from_str(&ended).unwrap();
    assert_eq!(ended["event"], "command");
    let seqs: Vec<u64> = watched
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "events in order: {seqs:?}");

    // SIGINT stops the agents, the endpoint and the stack; the watcher's
    // stream ends with the stack.
    let token = std::fs::read_to_string(devstack::admin::discovery::token_path(&admin)).unwrap();
    sigint(&serve.child);
    let status = await_exit(&mut serve.child, DEADLINE);
    assert!(status.success(), "devstack serve exited {status:?}; stderr:\n{}", serve.logged.join("\n"));
    assert!(await_exit(&mut watcher, DEADLINE).success(), "events --watch ends with the stack");
    while let Ok(line) = serve.stderr.recv_timeout(DEADLINE) {
        serve.logged.push(line);
    }
    let logged = serve.logged.join("\n");
    assert!(logged.contains("bcd sim stopped: exit status 0"), "{logged}");
    assert!(!data_dir.exists(), "the temporary directory {data_dir:?} is gone");
    assert!(!admin.exists() && !devstack::admin::discovery::token_path(&admin).exists(), "the admin files are gone");
    assert_no_process_under(&data_dir);
    for output in [serve.printed.join("\n"), logged, watched.join("\n")] {
        assert!(!output.contains(token.trim()), "the admin token was printed");
    }
    let after = serve.cli(&["nodes"]);
    assert!(!after.status.success());
    assert!(text(&after.stderr).contains("no dev stack is running"), "{}", text(&after.stderr));
    eprintln!("scenario {scenario}: {:.2?}", started.elapsed());
}

#[test]
fn without_a_stack_or_with_a_wrong_token_every_subcommand_says_so() {
    let home = tempfile::tempdir().unwrap();
    let admin = home.path().join("admin.json");
    let subcommands: [&[&str]; 15] = [
        &["status"],
        &["nodes"],
        &["node", "node_x"],
        &["token", "--uses", "2"],
        &["command", "node_x", "diag.nvml"],
        &["reserve", "node_x", "--gpus", "1"],
        &["release", "rsv_x"],
        &["revoke", "node_x"],
        &["events", "--watch"],
        &["console", "--node", "node_x"],
        &["commands"],
        &["reservations"],
        &["tokens"],
        &["pools"],
        &["instances"],
    ];
    for args in subcommands {
        let help = devstack().args(args).arg("--help").output().unwrap();
        assert!(help.status.success() && text(&help.stdout).contains("Usage: devstack"), "{args:?} --help");
        let out = devstack().args(args).env("DEVSTACK_ADMIN", &admin).output().unwrap();
        // 5, no stack reachable; a console's own failure is 255.
        let expected = if args[0] == "console" { 255 } else { 5 };
        assert_eq!(out.status.code(), Some(expected), "{args:?} without a stack");
        let said = text(&out.stderr);
        assert!(
            said.starts_with("devstack: no dev stack is running:") && said.contains("admin.json"),
            "{args:?}: {said}"
        );
    }

    let mut serve = Serve::start(&["--memory"], &admin);
    let data_dir = serve.await_data_dir();
    let token_file = devstack::admin::discovery::token_path(&admin);
    let token = std::fs::read_to_string(&token_file).unwrap();
    let out = serve.cli(&["nodes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no nodes yet (join one: devstack token, then bcd join)\n");

    // A minted token goes to a private file, never to the output.
    let out = serve.cli(&["token", "--uses", "4", "--ttl", "30m", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let minted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((minted["uses"].as_u64(), minted["pool"].as_str()), (Some(4), Some("default")));
    let secret = std::fs::read_to_string(minted["file"].as_str().unwrap()).unwrap();
    assert!(secret.starts_with("bc_jt_") && !text(&out.stdout).contains(secret.trim()));
    {
        use std::os::unix::fs::PermissionsExt as _;
        for file in [&token_file, &PathBuf::from(minted["file"].as_str().unwrap())] {
            assert_eq!(std::fs::metadata(file).unwrap().permissions().mode() & 0o777, 0o600, "{file:?}");
        }
    }
    let unknown = serve.cli(&["node", "node_nope"]);
    assert!(!unknown.status.success());
    assert_eq!(unknown.status.code(), Some(3), "not found");
    assert_eq!(
        text(&unknown.stderr),
        "devstack: node-unknown: no node is named \"node_nope\" (by id, id prefix or hostname)\n"
    );

    // A discovery file that names the same endpoint with another token.
    use devstack::admin::discovery::{read, token_path, write_private};
    let forged = home.path().join("wrong-token.json");
    let mut discovery = read(&admin).unwrap();
    discovery.token_file = token_path(&forged);
    write_private(&discovery.token_file, b"bc_admin_wrong\n").unwrap();
    write_private(&forged, &serde_json::to_vec(&discovery).unwrap()).unwrap();
    let refused = devstack().args(["--admin-file"]).arg(&forged).arg("nodes").output().unwrap();
    assert!(!refused.status.success());
    let said = text(&refused.stderr);
    assert!(said.contains("refused the admin token in") && said.contains("wrong-token"), "{said}");
    assert!(!said.contains("bc_admin_wrong") && !said.contains(token.trim()), "no token in the message: {said}");
    // One that names a token file elsewhere is not trusted: nothing is read or sent.
    discovery.token_file = home.path().join("elsewhere");
    write_private(&discovery.token_file, b"bc_admin_elsewhere\n").unwrap();
    write_private(&forged, &serde_json::to_vec(&discovery).unwrap()).unwrap();
    let refused = devstack().args(["--admin-file"]).arg(&forged).arg("nodes").output().unwrap();
    let said = text(&refused.stderr);
    assert!(!refused.status.success() && said.contains("is not trusted"), "{said}");

    sigint(&serve.child);
    assert!(await_exit(&mut serve.child, DEADLINE).success());
    assert!(!data_dir.exists() && !admin.exists() && !token_file.exists());
}

#[test]
fn console_in_tmux_relays_resizes_exits_with_the_shell_status_and_detaches_on_ctrl_bracket() {
    let scenario = "console_in_tmux_relays_resizes_exits_with_the_shell_status_and_detaches_on_ctrl_bracket";
    if !require_go(scenario) {
        return;
    }
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{scenario}: tmux is not on PATH (CI=true)");
        eprintln!("{scenario} skipped: tmux is not on PATH");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let admin = home.path().join("admin.json");
    let mut serve = Serve::start(&["--memory", "--signed-intent", "--sim", "1"], &admin);
    let data_dir = serve.await_data_dir();
    await_line(&serve.stderr, &mut serve.logged, FIRST_START, |l| l == "1 simulated node(s) adopted");
    let out = serve.cli(&["nodes", "--json"]);
    let nodes: Vec<NodeSummary> = serde_json::from_slice(&out.stdout).unwrap();
    let node = nodes[0].id.clone();

    // A person opens the console in a terminal 120 × 40 and types.
    let tmux = Tmux::new(home.path());
    let status = home.path().join("status");
    let console = |status: &Path| {
        format!(
            "DEVSTACK_ADMIN='{}' '{}' console --node '{}'; echo $? > '{}'; exec sleep 600",
            admin.display(),
            env!("CARGO_BIN_EXE_devstack"),
            &node[..12],
            status.display()
        )
    };
    tmux.run(&["new-session", "-d", "-s", "console", "-x", "120", "-y", "40", &console(&status)]);
    tmux.type_line("echo hi-$((6*7))");
    tmux.await_line(|l| l == "hi-42");

    // The shell sees the terminal's size, and each change of it (SIGWINCH).
    let (rows, cols) = tmux.size();
    tmux.type_line("stty size");
    tmux.await_line(|l| l == format!("{rows} {cols}"));
    tmux.run(&["resize-window", "-t", "console", "-x", "100", "-y", "30"]);
    let (rows, cols) = tmux.size();
    assert_eq!(cols, 100, "tmux resized the pane");
    tmux.type_line("stty size");
    tmux.await_line(|l| l == format!("{rows} {cols}"));

    // The shell's exit status is the console's.
    tmux.type_line("exit 5");
    assert_eq!(await_status_file(&status), "5");
    tmux.await_line(|l| l.contains("the shell exited with status 5"));

    // Ctrl-] detaches: exit 254, and the console is hung up.
    tmux.run(&["kill-session", "-t", "console"]);
    let detached = home.path().join("detached");
    tmux.run(&["new-session", "-d", "-s", "console", "-x", "120", "-y", "40", &console(&detached)]);
    tmux.type_line("echo ready-$((2+3))");
    tmux.await_line(|l| l == "ready-5");
    tmux.keys(false, "C-]");
    assert_eq!(await_status_file(&detached), "254");
    tmux.await_line(|l| l.contains("detached from"));
    drop(tmux);

    // An unknown node is the endpoint's sentence and exit 255.
    let out = serve.cli(&["console", "--node", "node_nope"]);
    assert_eq!(out.status.code(), Some(255));
    assert!(text(&out.stderr).contains("no node is named \"node_nope\""), "{}", text(&out.stderr));

    sigint(&serve.child);
    assert!(await_exit(&mut serve.child, DEADLINE).success());
    assert_no_process_under(&data_dir);
}

#[test]
fn serve_postgres_with_three_gateways_lists_them_all_and_leaves_nothing_behind() {
    let scenario = "serve_postgres_with_three_gateways_lists_them_all_and_leaves_nothing_behind";
    // Several gateways need a store they share.
    let alone = devstack().args(["serve", "--memory", "--gateways", "2"]).output().unwrap();
    assert!(!alone.status.success());
    let said = text(&alone.stderr);
    assert!(said.contains("the argument '--memory' cannot be used with") || said.contains("share"), "{said}");
    let alone = devstack().args(["serve", "--gateways", "2"]).env_remove("DEVSTACK_DATABASE_URL").output().unwrap();
    assert!(text(&alone.stderr).contains("--gateways 2 needs a store they share: --postgres or --store URL"));
    if !require_postgres(scenario) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let admin = home.path().join("admin.json");
    let mut serve = Serve::start(&["--postgres", "--gateways", "3"], &admin);
    let data_dir = serve.await_data_dir();
    let printed = serve.printed.join("\n");
    let store = printed.lines().find_map(|l| l.trim_start().strip_prefix("store:")).unwrap().trim().to_string();
    assert!(store.starts_with("PostgreSQL, postgresql://postgres@") && store.ends_with("(throwaway, removed at exit)"));
    let socket_dir = store.split('@').nth(1).unwrap().split('/').next().unwrap().replace("%2F", "/");
    assert!(Path::new(&socket_dir).is_dir(), "{socket_dir}");
    for id in ["g2", "g3"] {
        assert!(printed.lines().any(|l| l.trim_start().starts_with(&format!("gateway {id} "))), "{printed}");
    }
    let config = std::fs::read_to_string(data_dir.join("bcd/config.toml")).unwrap();
    let urls = config.lines().find(|l| l.starts_with("gateway_urls = [")).expect("the config lists the gateways");
    assert_eq!(urls.matches("https://").count(), 3, "{urls}");
    let status = serve.cli(&["status", "--json"]);
    assert!(status.status.success(), "{}", text(&status.stderr));

    sigint(&serve.child.0);
    let exit = await_exit(&mut serve.child.0, DEADLINE);
    assert!(exit.success(), "{exit}");
    assert!(!Path::new(&socket_dir).exists(), "the throwaway cluster is removed");
    assert_no_process_under(Path::new(&socket_dir));
}
