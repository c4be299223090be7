//! fakehw failure knob scenarios (issue 13; docs/harness.md, "Scenarios"):
//! each knob of `internal/fakehw/faults.go` set on a real fakehw bcd, and
//! the stack's reaction: a node whose `diag.nvml` cannot start NVML, finds
//! failing GPUs or errs is never adopted; a `logs.collect` whose upload
//! fails ends FAILED `logs-upload` with the bundle still collected; a hold
//! whose CDI write fails ends AllocationFailed (the next one binds); the
//! opt-in `fakeGpuReset` runs once, is unsupported without its knob, and is
//! never run twice after a crash, being not retry-safe.

use std::time::Duration;

use daemon_harness::node::Node;
use devstack::{CommandOptions, CommandStatus, NodeState, ReservationState};
use serde_json::json;

use crate::common::{DEADLINE, Env, SEED, await_command_state};

/// A fakehw node of `variant` with the knobs `knobs` set.
async fn must_make_knobbed_node(env: &Env, name: &str, variant: &str, knobs: &[(&str, &str)]) -> Node {
    let mut vars = vec![
        ("BCD_FAKEHW_SEED".to_string(), SEED.to_string()),
        ("BCD_FAKEHW_VARIANT".to_string(), variant.to_string()),
    ];
    vars.extend(knobs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let node = Node::new(name, &env.bcd, env.runner.clone(), vars).expect("a node directory");
    env.must_configure(&node).await;
    node
}

/// Joins and starts a node with `knobs` and waits until the stack rejects it.
async fn must_be_rejected(env: &Env, knobs: &[(&str, &str)]) -> String {
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut node = must_make_knobbed_node(env, "sick", "hgx-h100", knobs).await;
    let id = env.must_join(&node, &pool).await;
    node.start().unwrap();
    let row = env.stack.await_node_state(&id, NodeState::Rejected, DEADLINE).await.unwrap();
    assert!(env.stack.await_adopted(&id, Duration::from_millis(500)).await.is_err(), "never adopted");
    let cmd = env.stack.command(row.acceptance_command_id.as_deref().unwrap()).unwrap().unwrap();
    node.stop().await;
    format!("{} | {} {}", row.reason, cmd.state, cmd.reason)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_nvml_cannot_start_is_never_adopted() {
    let Some(env) = Env::start("a_node_whose_nvml_cannot_start_is_never_adopted").await else { return };
    let why = must_be_rejected(&env, &[("BCD_FAKEHW_NVML_INIT_FAILS", "1")]).await;
    assert!(
        why.starts_with("AcceptanceFailed: diag.nvml ended failed: nvml-init: NVML could not be initialized"),
        "{why}"
    );
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_with_failing_gpus_is_never_adopted() {
    let Some(env) = Env::start("a_node_with_failing_gpus_is_never_adopted").await else { return };
    let why = must_be_rejected(&env, &[("BCD_FAKEHW_FAIL_GPUS", "5,1")]).await;
    assert!(why.starts_with("GpuUnhealthy: 2 of 8 GPUs failed diag.nvml: [1,5] | succeeded"), "{why}");
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_diagnosis_errs_is_never_adopted() {
    let Some(env) = Env::start("a_node_whose_diagnosis_errs_is_never_adopted").await else { return };
    let why = must_be_rejected(&env, &[("BCD_FAKEHW_DIAG_ERROR", "1")]).await;
    assert!(why.starts_with("AcceptanceFailed: diag.nvml ended failed: diag-error: "), "{why}");
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_bundle_that_cannot_be_uploaded_fails_the_command() {
    let Some(env) = Env::start("a_log_bundle_that_cannot_be_uploaded_fails_the_command").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut node = must_make_knobbed_node(&env, "logs", "cpu", &[("BCD_FAKEHW_LOGS_UPLOAD_FAILS", "1")]).await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Failed, "{outcome:?}");
    assert!(outcome.reason.contains("logs-upload: the log bundle"), "{outcome:?}");
    let bundle = node.data_dir().join("fakehw-root/var/log/bcd-logs.txt");
    assert!(bundle.is_file(), "the bundle was collected before the upload failed");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hold_whose_cdi_write_fails_ends_allocation_failed() {
    let Some(env) = Env::start("a_hold_whose_cdi_write_fails_ends_allocation_failed").await else { return };
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut node = must_make_knobbed_node(&env, "cdi", "hgx-h100", &[("BCD_FAKEHW_CDI_WRITE_FAILURES", "1")]).await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let first = env.stack.reserve(&id, 2).await.unwrap();
    let row = env.stack.await_reservation(&first, ReservationState::Failed, DEADLINE).await.unwrap();
    assert!(row.reason.starts_with("cdi-write: fakehw: CDI write failure 1 of 1"), "{row:?}");
    let cdi = node.data_dir().join(format!("fakehw-root/etc/cdi/bcd-alloc-{first}.json"));
    assert!(!cdi.exists(), "no CDI spec for the failed hold");
    // The knob is spent: the next hold, on the same GPUs, binds.
    let second = env.stack.reserve(&id, 2).await.unwrap();
    let active = env.stack.await_reservation(&second, ReservationState::Active, DEADLINE).await.unwrap();
    assert_eq!(active.gpu_indexes, [0, 1]);
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn fake_gpu_reset_is_opt_in_and_never_runs_twice() {
    let Some(env) = Env::start("fake_gpu_reset_is_opt_in_and_never_runs_twice").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut plain = env.must_make_node("plain", "hgx-h100").await;
    let plain_id = env.must_join_and_adopt(&mut plain, &pool).await;
    let cmd = env
        .stack
        .enqueue_command(&plain_id, "fakeGpuReset", json!({"gpu": 0}), CommandOptions::default())
        .await
        .unwrap();
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Unsupported, "without its knob: {outcome:?}");
    plain.stop().await;

    let mut node = must_make_knobbed_node(&env, "resetter", "hgx-h100", &[("BCD_FAKEHW_GPU_RESET", "1")]).await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let resets = |gpu: u32| -> u64 {
        std::fs::read_to_string(node.data_dir().join(format!("fakehw-root/var/lib/fakehw/gpu-resets/{gpu}")))
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(0)
    };
    let cmd =
        env.stack.enqueue_command(&id, "fakeGpuReset", json!({"gpu": 3}), CommandOptions::default()).await.unwrap();
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    assert_eq!(outcome.output_json().unwrap(), json!({"gpu": 3, "resets": 1}));
    assert_eq!(resets(3), 1);

    // Killed while it is held: the restarted bcd fails it and never resets again.
    let epoch = env.stack.await_session(&id, 1, DEADLINE).await.unwrap().epoch;
    let held = json!({"gpu": 4, "hold_ms": 1_500});
    let options = CommandOptions { retry_safe: true, ..Default::default() };
    let cmd = env.stack.enqueue_command(&id, "fakeGpuReset", held, options).await.unwrap();
    await_command_state(&env.stack, &cmd, CommandStatus::Running).await;
    node.supervisor().unwrap().signal(libc::SIGKILL).unwrap();
    node.supervisor().unwrap().await_state(DEADLINE, "bcd to be started again", |s| s.starts >= 2).await.unwrap();
    env.stack.await_session(&id, epoch + 1, DEADLINE).await.unwrap();
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Failed, "the kind is not retry-safe: {outcome:?}");
    assert!(outcome.reason.contains("interrupted"), "{outcome:?}");
    assert_eq!(resets(4), 0, "never reset after the crash");
    node.stop().await;
    env.report();
}
