//! Self-update end to end (issue 6 item 1): a second fakehw build reporting
//! 0.9.0 is published by the dev stack (artifact over HTTP, manifest signed by
//! the release keys bcd pins in `[update]`); a `daemon.upgrade` rollout stages
//! it in slot b behind the entrypoint and execs it, and its Welcome confirms
//! it, and a signed release of a lower sequence is then refused as a
//! downgrade. Refusals (under threshold, lower sequence, another digest, an
//! expired manifest) fail the command with their code and swap nothing; a
//! build that never connects is rolled back to slot a, also when the machine
//! reboots between the swap and the confirmation. The NodeSpec's daemon
//! section converges the same way: a section naming 0.9.0 (its signed
//! manifest carried) is swapped in and APPLIED once the Welcome confirmed
//! it, a manifest under the threshold is FAILED `ReleaseRefused` with
//! nothing swapped, and a section naming a build that never connects is
//! rolled back and FAILED `RolledBack`, for that generation and the next.

use std::path::Path;
use std::time::{Duration, Instant};

use daemon_harness::build::{BuildOptions, build_bcd};
use daemon_harness::node::Node;
use devstack::{CommandStatus, ManifestOptions, SectionState, SectionStatus};

use crate::common::{DEADLINE, Env};

/// The version every scenario node starts from (the default fakehw build).
const BASE_VERSION: &str = "0.1.0-dev";

fn current_slot(slots: &Path) -> String {
    std::fs::read_link(slots.join("bcd")).unwrap().to_string_lossy().into_owned()
}

/// An adopted node running from slot a, with `[update]` pinning the stack's release keys.
async fn upgradable_node(env: &Env, name: &str, confirm_timeout: Option<&str>) -> (Node, String, std::path::PathBuf) {
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node(name, "cpu").await;
    let slots = node.install_entrypoint().unwrap();
    let data_dir = env.runner.daemon_path(&node.data_dir()).unwrap();
    env.stack.write_bcd_config_with(node.dir(), Path::new(&data_dir), Some(&env.stack.release_keys())).await.unwrap();
    if let Some(timeout) = confirm_timeout {
        node.set_env("BCD_UPDATE_CONFIRM_TIMEOUT", timeout);
    }
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let session = env.stack.await_session(&id, 1, DEADLINE).await.unwrap();
    assert_eq!(session.daemon_version, BASE_VERSION);
    (node, id, slots)
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_upgrade_swaps_to_slot_b_and_is_confirmed_by_its_welcome() {
    let Some(env) = Env::start("daemon_upgrade_swaps_to_slot_b_and_is_confirmed_by_its_welcome").await else { return };
    let next = build_bcd(&BuildOptions::fakehw().with_version("0.9.0")).unwrap();
    let (mut node, id, slots) = upgradable_node(&env, "upgraded", None).await;
    env.stack.publish_release("0.9.0", 7, &[("linux", "amd64", &std::fs::read(&next).unwrap())]).await.unwrap();

    let enqueued = Instant::now();
    let cmd = env.stack.rollout_upgrade(&id, "0.9.0").await.unwrap();
    let confirmed = env.stack.await_daemon_version(&id, "0.9.0", DEADLINE).await.unwrap();
    eprintln!("daemon.upgrade enqueued to confirmed in {:.2?}", enqueued.elapsed());
    assert_eq!(confirmed.daemon_version, "0.9.0");
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    let output = outcome.output_json().unwrap();
    assert_eq!(
        (output["version"].as_str(), output["previous"].as_str()),
        (Some("0.9.0"), Some(BASE_VERSION)),
        "{output}"
    );
    assert_eq!(current_slot(&slots), "bcd-b", "current is bcd-b");
    assert!(!slots.join("upgrade.json").exists(), "upgrade.json is gone");
    let status = node.await_status(DEADLINE, "0.9.0 connected", |s| s["daemonVersion"] == "0.9.0").await.unwrap();
    assert_eq!(status["session"]["state"], "connected");

    // A signed release of a lower sequence than the installed one is a
    // downgrade: refused before anything is downloaded, nothing swapped.
    let older = build_bcd(&BuildOptions::fakehw()).unwrap();
    env.stack.publish_release("0.5.0", 6, &[("linux", "amd64", &std::fs::read(&older).unwrap())]).await.unwrap();
    let downgrade = env.stack.rollout_upgrade(&id, "0.5.0").await.unwrap();
    let refused = env.stack.await_command(&downgrade, DEADLINE).await.unwrap();
    assert_eq!(refused.state, CommandStatus::Failed, "{refused:?}");
    assert!(refused.reason.starts_with("release-rollback: "), "{refused:?}");
    assert_eq!(current_slot(&slots), "bcd-b", "still on the installed release");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_upgrade_refuses_bad_manifests_and_swaps_nothing() {
    let Some(env) = Env::start("daemon_upgrade_refuses_bad_manifests_and_swaps_nothing").await else { return };
    let next = build_bcd(&BuildOptions::fakehw().with_version("0.9.0")).unwrap();
    let (mut node, id, slots) = upgradable_node(&env, "refuser", None).await;
    env.stack.publish_release("0.9.0", 7, &[("linux", "amd64", &std::fs::read(&next).unwrap())]).await.unwrap();
    let min_sequence = env.stack.release_keys().min_sequence;

    let cases = [
        ("release-threshold", ManifestOptions { signers: Some(1), ..Default::default() }),
        ("release-sequence", ManifestOptions { sequence: Some(min_sequence.saturating_sub(1)), ..Default::default() }),
        ("release-digest", ManifestOptions { wrong_digest: true, ..Default::default() }),
        ("release-expired", ManifestOptions { expires_at_ms: Some(1_000), ..Default::default() }),
    ];
    for (code, options) in cases {
        let cmd = env.stack.rollout_upgrade_with(&id, "0.9.0", &options).await.unwrap();
        let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
        assert_eq!(outcome.state, CommandStatus::Failed, "{code}: {outcome:?}");
        assert!(outcome.reason.starts_with(code), "{code}: {outcome:?}");
        assert_eq!(current_slot(&slots), "bcd-a", "{code}: nothing swapped");
    }
    let session = env.stack.node_sessions(&id).unwrap().into_iter().last().unwrap();
    assert_eq!(session.daemon_version, BASE_VERSION);
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_build_that_never_connects_is_rolled_back_to_slot_a() {
    let Some(env) = Env::start("a_build_that_never_connects_is_rolled_back_to_slot_a").await else { return };
    let broken = build_bcd(&BuildOptions::fakehw().with_version("0.9.1").never_connecting()).unwrap();
    let (mut node, id, slots) = upgradable_node(&env, "rolled-back", Some("1s")).await;
    env.stack.publish_release("0.9.1", 8, &[("linux", "amd64", &std::fs::read(&broken).unwrap())]).await.unwrap();

    let started = Instant::now();
    let cmd = env.stack.rollout_upgrade(&id, "0.9.1").await.unwrap();
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Failed, "{outcome:?}");
    assert!(outcome.reason.starts_with("rollback:"), "{outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "rolled back within a bounded time: {:.2?}",
        started.elapsed()
    );
    assert_eq!(current_slot(&slots), "bcd-a", "back on slot a");
    let status =
        node.await_status(DEADLINE, "connected again", |s| s["session"]["state"] == "connected").await.unwrap();
    assert_eq!(status["daemonVersion"], BASE_VERSION);
    // Preparing the failed release again is refused.
    let again = env.stack.rollout_upgrade(&id, "0.9.1").await.unwrap();
    let refused = env.stack.await_command(&again, DEADLINE).await.unwrap();
    assert_eq!(refused.state, CommandStatus::Failed, "{refused:?}");
    assert_eq!(current_slot(&slots), "bcd-a");
    node.stop().await;
    env.report();
}

/// Polls `done` until it holds, or fails at the deadline.
async fn poll_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A reboot between swap and confirmation (issue 16, "Faults end to end"):
/// a `daemon.upgrade` to a build that never connects is swapped into slot b
/// and not yet confirmed when the machine reboots (a new boot id, `run/`
/// cleared, bcd killed and started again by its supervisor). The node comes
/// back on a slot that works (slot a, rolled back at the confirmation
/// deadline the swap set), connected under the new boot, and the upgrade's
/// outcome is recorded once.
#[tokio::test(flavor = "multi_thread")]
async fn a_reboot_between_swap_and_confirmation_comes_back_on_a_working_slot_with_one_outcome() {
    let scenario = "a_reboot_between_swap_and_confirmation_comes_back_on_a_working_slot_with_one_outcome";
    let Some(env) = Env::start(scenario).await else { return };
    let broken = build_bcd(&BuildOptions::fakehw().with_version("0.9.1").never_connecting()).unwrap();
    let (node, id, slots) = upgradable_node(&env, "rebooted-mid-upgrade", Some("3s")).await;
    let before = env.stack.await_session(&id, 1, DEADLINE).await.unwrap();
    env.stack.publish_release("0.9.1", 8, &[("linux", "amd64", &std::fs::read(&broken).unwrap())]).await.unwrap();
    let cmd = env.stack.rollout_upgrade(&id, "0.9.1").await.unwrap();
    // Between swap and confirmation: slot b current, upgrade.json kept.
    poll_until("the swap to slot b", || current_slot(&slots) == "bcd-b" && slots.join("upgrade.json").exists()).await;

    // The machine reboots: fakehw's boot id and run/ as after a real
    // reboot, and bcd killed (its supervisor starts it again).
    let root = node.data_dir().join("fakehw-root");
    let boot_id = root.join("proc/sys/kernel/random/boot_id");
    let old_boot = std::fs::read_to_string(&boot_id).unwrap();
    std::fs::write(&boot_id, "rebooted-mid-upgrade-boot-2\n").unwrap();
    let _ = std::fs::remove_dir_all(root.join("run"));
    std::fs::create_dir_all(root.join("run")).unwrap();
    node.supervisor().unwrap().signal(libc::SIGKILL).unwrap();
    node.supervisor().unwrap().await_state(DEADLINE, "bcd to be started again", |s| s.starts >= 2).await.unwrap();

    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Failed, "{outcome:?}");
    assert!(outcome.reason.starts_with("rollback:"), "{outcome:?}");
    assert_eq!(current_slot(&slots), "bcd-a", "back on the working slot");
    assert!(!slots.join("upgrade.json").exists(), "the upgrade is settled");
    let after = env.stack.await_session(&id, before.epoch + 1, DEADLINE).await.unwrap();
    assert_eq!(after.daemon_version, BASE_VERSION);
    assert_ne!(after.boot_id, before.boot_id, "connected under the new boot ({old_boot:?} before)");
    let updates = env.stack.command_updates(&cmd).unwrap();
    assert_eq!(updates.iter().filter(|u| u.state.is_terminal()).count(), 1, "one outcome: {updates:?}");
    assert_eq!(crate::common::execution_count(&node, &cmd), 1, "the upgrade ran once (I2)");
    let mut node = node;
    node.stop().await;
    env.report();
}

/// Waits for the daemon section's status of `generation` in `state` with `reason`.
async fn await_daemon_section(
    env: &Env,
    id: &str,
    generation: u64,
    state: SectionState,
    reason: &str,
) -> SectionStatus {
    env.stack
        .await_until(format!("the daemon section of generation {generation} {state} {reason}"), DEADLINE, |v| {
            v.section_status(id, "daemon").filter(|s| s.generation == generation && s.is(state, reason))
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_section_converges_to_its_release_once_the_welcome_confirms_it() {
    let Some(env) = Env::start("the_daemon_section_converges_to_its_release_once_the_welcome_confirms_it").await else {
        return;
    };
    let next = build_bcd(&BuildOptions::fakehw().with_version("0.9.0")).unwrap();
    let (mut node, id, slots) = upgradable_node(&env, "section-upgraded", None).await;
    env.stack.publish_release("0.9.0", 7, &[("linux", "amd64", &std::fs::read(&next).unwrap())]).await.unwrap();

    // A manifest one release key signed, under the threshold of two: refused, nothing swapped.
    let weak = ManifestOptions { signers: Some(1), ..Default::default() };
    let refused = env.stack.converge_daemon_with(&id, "0.9.0", &weak).await.unwrap();
    let status = await_daemon_section(&env, &id, refused, SectionState::Failed, "ReleaseRefused").await;
    assert!(status.message.starts_with("release-threshold: "), "{status:?}");
    assert_eq!(current_slot(&slots), "bcd-a", "nothing swapped");

    let enqueued = Instant::now();
    let generation = env.stack.converge_daemon(&id, "0.9.0").await.unwrap();
    let confirmed = env.stack.await_daemon_version(&id, "0.9.0", DEADLINE).await.unwrap();
    let status = await_daemon_section(&env, &id, generation, SectionState::Applied, "Applied").await;
    eprintln!("daemon section published to APPLIED in {:.2?}", enqueued.elapsed());
    assert_eq!(confirmed.daemon_version, "0.9.0");
    assert_eq!(status.message, "bcd runs 0.9.0 (sequence 7)", "{status:?}");
    assert_eq!(current_slot(&slots), "bcd-b", "current is bcd-b");
    assert!(!slots.join("upgrade.json").exists(), "upgrade.json is gone");
    let installed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(slots.join("installed.json")).unwrap()).unwrap();
    assert_eq!((installed["version"].as_str(), installed["sequence"].as_u64()), (Some("0.9.0"), Some(7)));
    let commands = env.stack.commands(&id).unwrap();
    assert!(commands.iter().all(|c| c.kind != "daemon.upgrade"), "no command did it: {commands:?}");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_section_naming_a_build_that_never_connects_is_rolled_back_and_failed() {
    let scenario = "a_daemon_section_naming_a_build_that_never_connects_is_rolled_back_and_failed";
    let Some(env) = Env::start(scenario).await else { return };
    let broken = build_bcd(&BuildOptions::fakehw().with_version("0.9.1").never_connecting()).unwrap();
    let (mut node, id, slots) = upgradable_node(&env, "section-rolled-back", Some("1s")).await;
    let before = env.stack.await_session(&id, 1, DEADLINE).await.unwrap();
    env.stack.publish_release("0.9.1", 8, &[("linux", "amd64", &std::fs::read(&broken).unwrap())]).await.unwrap();

    let started = Instant::now();
    let generation = env.stack.converge_daemon(&id, "0.9.1").await.unwrap();
    let status = await_daemon_section(&env, &id, generation, SectionState::Failed, "RolledBack").await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "rolled back within a bounded time: {:.2?}",
        started.elapsed()
    );
    assert!(status.message.contains("0.9.1 (sequence 8) was rolled back"), "{status:?}");
    assert_eq!(current_slot(&slots), "bcd-a", "back on slot a");
    assert!(!slots.join("upgrade.json").exists(), "the upgrade is settled");
    let after = env.stack.await_session(&id, before.epoch + 1, DEADLINE).await.unwrap();
    assert_eq!(after.daemon_version, BASE_VERSION);
    let status =
        node.await_status(DEADLINE, "connected again", |s| s["session"]["state"] == "connected").await.unwrap();
    assert_eq!(status["daemonVersion"], BASE_VERSION);

    // The next generation naming it again is refused at once: not tried again.
    let again = env.stack.converge_daemon(&id, "0.9.1").await.unwrap();
    await_daemon_section(&env, &id, again, SectionState::Failed, "RolledBack").await;
    assert_eq!(current_slot(&slots), "bcd-a");
    let sessions = env.stack.node_sessions(&id).unwrap();
    assert!(sessions.iter().all(|s| s.daemon_version == BASE_VERSION), "0.9.1 never connected: {sessions:?}");
    node.stop().await;
    env.report();
}
