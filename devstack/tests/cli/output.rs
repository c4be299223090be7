//! The admin CLI as scripts and people use it (issue 34's expectations),
//! without a simulated node: `-o json|wide|name` (and `--json`) on the
//! lists and gets, the lists of pools and tokens, stable exit statuses with
//! the refusal code printed, `GET /v1/stack` naming every URL `serve`
//! printed, the `[websocket] url` in the written `config.toml`, shell
//! completion, and a join hint naming a bcd that exists.

use super::support::*;

#[test]
fn lists_and_gets_print_as_asked_and_fail_with_stable_statuses() {
    let home = tempfile::tempdir().unwrap();
    let admin = home.path().join("admin.json");

    let none = devstack().args(["nodes"]).env("DEVSTACK_ADMIN", &admin).output().unwrap();
    assert_eq!(none.status.code(), Some(5), "no stack: {}", text(&none.stderr));
    let help = text(&devstack().arg("--help").output().unwrap().stdout);
    assert!(help.contains("Exit statuses") && help.contains("6  timeout"), "{help}");

    let mut serve = Serve::start(&["--memory"], &admin);
    let data_dir = serve.await_data_dir();

    // Every URL serve printed is in GET /v1/stack.
    let out = serve.cli(&["status", "-o", "json"]);
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (printed, field) in [
        ("gateway", "gateway_url"),
        ("well-known", "well_known_url"),
        ("websocket session", "websocket_url"),
        ("OTLP metrics", "otlp_url"),
    ] {
        assert_eq!(info[field], serve.printed(printed).as_str(), "{field}");
    }
    let admin_line = serve.printed("admin endpoint");
    assert!(admin_line.starts_with(info["admin_url"].as_str().unwrap()), "{admin_line}");
    // The written config falls back to the WebSocket.
    let config = std::fs::read_to_string(data_dir.join("bcd/config.toml")).unwrap();
    let websocket = format!("\n[websocket]\nurl = \"{}\"\n", info["websocket_url"].as_str().unwrap());
    assert!(config.contains(&websocket), "{config}");
    // The join hint names a bcd that exists, or says how to build one.
    let hint = serve.printed.iter().find(|l| l.starts_with("join a node:")).unwrap().clone();
    let bcd = hint["join a node: ".len()..].split(' ').next().unwrap().to_string();
    let built = std::path::Path::new(&bcd).is_file();
    assert!(built || serve.printed.iter().any(|l| l.contains("cargo xtask build-bcd")), "{hint}");

    let json = serve.cli(&["pools", "--json"]);
    let pools: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(pools[0]["name"], "default");
    assert_eq!(text(&serve.cli(&["pools", "-o", "name"]).stdout), "pool/default\n");
    let table = text(&serve.cli(&["pools", "default", "-o", "wide"]).stdout);
    assert!(table.starts_with("POOL ") && table.contains("CREATED"), "{table}");
    let minted = serve.cli(&["token", "--uses", "3", "-o", "json"]);
    let minted: serde_json::Value = serde_json::from_slice(&minted.stdout).unwrap();
    let tokens = text(&serve.cli(&["tokens", "--state", "valid", "-o", "name"]).stdout);
    assert_eq!(tokens.lines().count(), 2, "serve's and the minted one: {tokens}");
    assert!(tokens.contains(&format!("token/{}", minted["token_id"].as_str().unwrap())), "{tokens}");
    assert_eq!(text(&serve.cli(&["tokens", "-l", "state!=valid"]).stdout), "no join tokens\n");
    assert_eq!(text(&serve.cli(&["commands"]).stdout), "no commands\n");
    assert_eq!(text(&serve.cli(&["reservations", "-o", "json"]).stdout), "[]\n");
    assert_eq!(text(&serve.cli(&["instances", "-o", "name"]).stdout), "");

    // Not found: 3, the code printed with the sentence.
    for (args, code) in [
        (&["node", "node_nope"][..], "node-unknown"),
        (&["commands", "cmd_nope"], "command-unknown"),
        (&["pools", "nope"], "pool-unknown"),
        (&["release", "rsv_nope"], "reservation-unknown"),
    ] {
        let out = serve.cli(args);
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {said}");
        assert!(said.starts_with(&format!("devstack: {code}: ")) && said.lines().count() == 1, "{args:?}: {said}");
    }
    let bash = text(&serve.cli(&["completion", "bash"]).stdout);
    assert!(bash.contains("complete") && bash.contains("reservations"), "{bash}");
    let fish = text(&serve.cli(&["completion", "fish"]).stdout);
    assert!(fish.contains("complete -c devstack"), "{fish}");
    let (exit, logged) = serve.stop();
    assert!(exit.success(), "{logged}");
}
