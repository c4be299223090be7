//! The fleet invariants' own checks (docs/harness.md, "Fleet invariants"):
//! every scenario ends with them (`Env::report`); here a deliberately
//! broken machine (fakehw's `BCD_FAKEHW_EXECUTE_TWICE`: every execution
//! counted twice, as a bcd that ran each command twice leaves it) shows
//! that the I2 checker catches a command run twice, naming the node and
//! the command, and passes the same scenario on a sound machine.

use devstack::invariants::{Heard, Invariant};
use devstack::{CommandOptions, CommandStatus};
use serde_json::json;

use crate::common::{DEADLINE, Env};

/// Runs one `logs.collect` (not retry-safe) on a node whose machine counts
/// each execution `twice` or not; the I2 violations the checkers find.
async fn run_once(env: &Env, name: &str, twice: bool) -> (String, String, Vec<devstack::invariants::Violation>) {
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node(name, "cpu").await;
    if twice {
        node.set_env("BCD_FAKEHW_EXECUTE_TWICE", "1");
    }
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let once = CommandOptions { retry_safe: false, ..Default::default() };
    let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({}), once).await.unwrap();
    assert_eq!(env.stack.await_command(&cmd, DEADLINE).await.unwrap().state, CommandStatus::Succeeded);
    node.stop().await;
    let violations = env.stack.check_invariants(env.agent_facts(), Heard::new()).unwrap();
    (id, cmd, violations.into_iter().filter(|v| v.invariant == Invariant::I2).collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_checkers_catch_a_command_run_twice_and_pass_one_run_once() {
    let name = "the_checkers_catch_a_command_run_twice_and_pass_one_run_once";
    let Some(env) = Env::start(name).await else { return };
    let (node_id, cmd, violations) = run_once(&env, "twice", true).await;
    let caught =
        violations.iter().find(|v| v.subject == cmd).unwrap_or_else(|| panic!("{cmd} not caught: {violations:?}"));
    assert_eq!(caught.node_id, node_id);
    assert!(caught.detail.contains("ran 2 times"), "{caught}");
    let Some(sound) = Env::start(name).await else { return };
    let (_, _, violations) = run_once(&sound, "once", false).await;
    assert!(violations.is_empty(), "{violations:?}");
    sound.report();
}
