//! The node lifecycle (issue 5): a reboot that completes from the next boot,
//! a 2-GPU reservation bound by a node-signed AllocationBound, bootstrap from
//! a token file and the stack's base URL, `bcd sim` with one five-use token,
//! and an unsigned command refused BAD_SIGNATURE.

use std::collections::BTreeSet;

use devstack::{CommandOptions, CommandStatus, ReservationState, Signing};
use serde_json::json;

use crate::common::{DEADLINE, Env, execution_count, node_id};

#[tokio::test(flavor = "multi_thread")]
async fn node_reboot_completes_from_the_next_boot() {
    let Some(env) = Env::start("node_reboot_completes_from_the_next_boot").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("rebooter", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let before = env.stack.await_session(&id, 1, DEADLINE).await.unwrap();
    let marker = node.data_dir().join("fakehw-root/run/marker");
    std::fs::write(&marker, b"cleared by a reboot").unwrap();

    let cmd = env.stack.enqueue_command(&id, "node.reboot", json!({}), CommandOptions::default()).await.unwrap();
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    assert!(outcome.reason.contains("rebooted"), "completed from the next boot: {outcome:?}");

    // The process exited and its supervisor started it again, on a new boot.
    let state = node.supervisor().unwrap().state();
    assert!(state.starts >= 2, "{state:?}");
    let after = env.stack.await_session(&id, before.epoch + 1, DEADLINE).await.unwrap();
    assert_ne!(after.boot_id, before.boot_id, "a new boot id in node_sessions");
    assert!(!marker.exists(), "/run under the fake root is cleared");
    let sessions = env.stack.node_sessions(&id).unwrap();
    assert!(sessions.iter().any(|s| s.boot_id == after.boot_id));
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_turns_active_on_a_node_signed_allocation_bound() {
    let Some(env) = Env::start("a_reservation_turns_active_on_a_node_signed_allocation_bound").await else { return };
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut node = env.must_make_node("holder", "hgx-h100").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;

    let reservation = env.stack.reserve(&id, 2).await.unwrap();
    let active = env.stack.await_reservation(&reservation, ReservationState::Active, DEADLINE).await.unwrap();
    assert_eq!(active.gpu_indexes.len(), 2, "{active:?}");
    let cdi = node.data_dir().join(format!("fakehw-root/etc/cdi/bcd-alloc-{reservation}.json"));
    assert!(cdi.is_file(), "the CDI hold appears under the fake root");

    env.stack.release(&reservation).await.unwrap();
    env.stack.await_reservation(&reservation, ReservationState::Released, DEADLINE).await.unwrap();
    assert!(!cdi.exists(), "the CDI hold disappears on release");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn bootstrap_with_a_token_file_and_the_base_url() {
    let Some(env) = Env::start("bootstrap_with_a_token_file_and_the_base_url").await else { return };
    let pool = env.must_create_pool("any", None).await;
    // Nothing but the stack's base URL and a token file: no config.toml, no pins.
    let mut node = env.must_make_node("bootstrapped", "cpu").await;
    std::fs::remove_file(node.config()).unwrap();
    std::fs::remove_file(node.dir().join("join-encryption.jwk")).unwrap();
    let token = env.must_mint_token(&pool, 1).await;
    let token_file = node.dir().join("join-token");
    std::fs::write(&token_file, &token).unwrap();
    let config = node.config().to_string_lossy().into_owned();
    let base = env.stack.http_url();
    let args = ["join", "--server", &base, "--token-file", &token_file.to_string_lossy(), "--config", &config];
    let out = node.run(&args, None, DEADLINE).await.unwrap();
    assert!(out.success(), "{out:?}");
    assert!(!token_file.exists(), "the token file is removed");
    assert!(node.config().is_file() && node.dir().join("join-encryption.jwk").is_file());

    // A re-run without a token succeeds.
    let again = node.run(&["join", "--server", &base, "--config", &config], None, DEADLINE).await.unwrap();
    assert!(again.success() && format!("{}{}", again.stdout, again.stderr).contains("already joined"), "{again:?}");

    // bcd node connects on the written configuration alone.
    let id = node_id(&node).unwrap();
    node.start().unwrap();
    env.stack.await_adopted(&id, DEADLINE).await.unwrap();
    node.assert_never_printed(&token, "the join token");
    node.stop().await;
    env.report();
}

/// What a provisioned OS runs: `bcd join --server` with a token file and
/// the three pins, checked against the well-known document; a wrong pin is
/// refused and writes nothing (the token file stays for the next try).
#[tokio::test(flavor = "multi_thread")]
async fn bootstrap_with_the_three_pins_refuses_a_wrong_one() {
    let Some(env) = Env::start("bootstrap_with_the_three_pins_refuses_a_wrong_one").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("provisioned", "cpu").await;
    std::fs::remove_file(node.config()).unwrap();
    std::fs::remove_file(node.dir().join("join-encryption.jwk")).unwrap();
    let token = env.must_mint_token(&pool, 1).await;
    let token_file = node.dir().join("join-token");
    std::fs::write(&token_file, &token).unwrap();
    let (config, token_path, base) =
        (node.config().to_string_lossy().into_owned(), token_file.to_string_lossy().into_owned(), env.stack.http_url());
    let pins = env.stack.pins();
    // The bootstrap's arguments with `serving` as the serving CA pin.
    let join = |serving: &str| -> Vec<String> {
        let pinned = ["--serving-ca-pin", serving, "--join-signing-pin", &pins.join_signing];
        ["join", "--server", &base, "--token-file", &token_path, "--config", &config]
            .into_iter()
            .chain(pinned)
            .chain(["--join-encryption-pin", &pins.join_encryption])
            .map(str::to_string)
            .collect()
    };
    // Another serving CA's pin: refused, nothing written.
    let wrong = pins.join_signing.clone();
    let args = join(&wrong);
    let out = node.run(&args.iter().map(String::as_str).collect::<Vec<_>>(), None, DEADLINE).await.unwrap();
    assert!(!out.success(), "{out:?}");
    assert!(out.stderr.contains("serving CA pin"), "{out:?}");
    assert!(!node.config().exists() && token_file.exists(), "a refused bootstrap wrote something or took the token");
    // The three right pins: joined, the token file removed.
    let args = join(&pins.serving_ca);
    let out = node.run(&args.iter().map(String::as_str).collect::<Vec<_>>(), None, DEADLINE).await.unwrap();
    assert!(out.success(), "{out:?}");
    assert!(!token_file.exists(), "the token file is removed");
    let written = std::fs::read_to_string(node.config()).unwrap();
    assert!(written.contains(&format!("serving_ca_spki_pin = \"{}\"", pins.serving_ca)), "{written}");
    let id = node_id(&node).unwrap();
    node.start().unwrap();
    env.stack.await_adopted(&id, DEADLINE).await.unwrap();
    node.assert_never_printed(&token, "the join token");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn bcd_sim_joins_five_distinct_nodes_with_one_token() {
    let Some(env) = Env::start("bcd_sim_joins_five_distinct_nodes_with_one_token").await else { return };
    let pool = env.must_create_pool("sim", Some(8)).await;
    let node = env.must_make_node("sim", "hgx-h100").await;
    let token = env.must_mint_token(&pool, 5).await;
    let mark = env.stack.join_mark().unwrap();
    let config = node.config().to_string_lossy().into_owned();

    // bcd sim runs until stopped: watch the stack while it runs, then stop it.
    let mut sim =
        node.spawn(&["sim", "--config", &config, "--nodes", "5", "--seed", "100"], Some(&token)).await.unwrap();
    // Re-checked on every change of the stack; the sim's sessions closing
    // is one, so a sim that ends early is seen.
    let nodes = env
        .stack
        .await_until("five nodes to join", DEADLINE, |v| {
            let nodes = v.nodes_joined_since(mark);
            if nodes.len() == 5 {
                return Some(Ok(nodes));
            }
            v.note(format_args!("only {} node(s) joined", nodes.len()));
            (!sim.running()).then(|| Err(format!("bcd sim ended early; {} node(s) joined", nodes.len())))
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    for n in &nodes {
        env.stack.await_adopted(&n.id, DEADLINE).await.unwrap();
    }
    assert_eq!(sim.stop().await, Some(0), "bcd sim stops cleanly on SIGTERM");
    let mut keys = BTreeSet::new();
    let mut hardware = BTreeSet::new();
    for n in &nodes {
        let certs = env.stack.node_certs(&n.id).unwrap();
        keys.insert(certs[0].spki_pin.clone());
        hardware.insert(n.hardware_id.clone());
    }
    assert_eq!(keys.len(), 5, "five distinct keys");
    assert_eq!(hardware.len(), 5, "five distinct machines");
    let tokens = env.stack.join_tokens(&pool).unwrap();
    assert_eq!(tokens[0].uses, 5);
    node.assert_never_printed(&token, "the join token");
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unsigned_command_is_refused_bad_signature() {
    let Some(env) = Env::start("an_unsigned_command_is_refused_bad_signature").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("strict", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;

    for signing in [Signing::Unsigned, Signing::Outsider] {
        let options = CommandOptions { signing, retry_safe: true, ..Default::default() };
        let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({}), options).await.unwrap();
        let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
        assert_eq!(outcome.state, CommandStatus::Failed, "{signing:?}: {outcome:?}");
        assert!(outcome.reason.starts_with("BAD_SIGNATURE"), "{signing:?}: {outcome:?}");
        assert_eq!(execution_count(&node, &cmd), 0, "{signing:?}: never executed");
    }
    // A signed one still runs.
    let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
    assert_eq!(env.stack.await_command(&cmd, DEADLINE).await.unwrap().state, CommandStatus::Succeeded);
    assert_eq!(execution_count(&node, &cmd), 1);
    node.stop().await;
    env.report();
}
