//! Node consoles through a tunnel (issue 12): `DevStack::open_console`
//! mints an exec ticket, bcd checks it, dials `Gateway.Tunnel` over its
//! mTLS identity and runs a real shell on a real PTY. The scenarios assert
//! on what the shell computed (`hi-42` from `hi-$((6*7))`, `stty size`
//! after a resize, the exit status), never on an echo of the input; every
//! refused ticket carries its code and starts no shell (fakehw's shell
//! counter under the fake root); a caller that goes away gets its shell
//! hung up, and killing bcd ends the console; the ticket
//! and the typed bytes never reach bcd's log or the stack's.
//!
//! `bench_console_open_and_keystroke_echo` (ignored) is `cargo xtask bench
//! console`.

use std::time::{Duration, Instant};

use daemon_harness::node::Node;
use devstack::{ConsoleEnd, ConsoleEvent, ConsoleOptions, ConsoleSize, DevStack, LogCapture, TicketChoice};

use crate::common::{DEADLINE, Env};

/// What the scenarios type: a marker that must never reach a log, and an
/// arithmetic the shell must compute.
const TYPED: &str = "marker=typed-c0ffee; echo hi-$((6*7))\n";

/// How many consoles a node's shell counter says were started.
fn shells_started(node: &Node) -> u64 {
    let path = node.data_dir().join("fakehw-root/var/lib/fakehw/shells");
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("{} holds {text:?}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => panic!("reading {}: {e}", path.display()),
    }
}

/// Asserts that `secret` never appears in the dev stack's log lines.
fn assert_never_logged(logs: &LogCapture, secret: &str, what: &str) {
    assert!(!logs.contains(secret), "{what} appears in the dev stack's log");
}

/// Opens a console with `ticket` and returns how it ended (it must end:
/// a refused ticket is a closed console, never a hang).
async fn must_be_refused(stack: &DevStack, node_id: &str, ticket: TicketChoice) -> ConsoleEnd {
    let options = ConsoleOptions { ticket, ..ConsoleOptions::default() };
    let mut console = stack.open_console_with(node_id, options).await.expect("the console is requested");
    console.await_end(DEADLINE).await.expect("a refused console ends")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_console_runs_a_real_shell_that_computes_resizes_and_exits_with_its_status() {
    let logs = LogCapture::global();
    let Some(env) = Env::start("a_console_runs_a_real_shell_that_computes_resizes_and_exits_with_its_status").await
    else {
        return;
    };
    let pool = env.must_create_pool("console", None).await;
    let mut node = env.must_make_node("console", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;

    let mut console = env.stack.open_console(&id, ConsoleSize { rows: 24, cols: 80 }).await.unwrap();
    console.await_opened(DEADLINE).await.unwrap();
    console.write(TYPED).await.unwrap();
    console.await_output("hi-42", DEADLINE).await.unwrap();
    console.resize(ConsoleSize { rows: 40, cols: 120 }).await.unwrap();
    console.write("stty size\n").await.unwrap();
    console.await_output("40 120", DEADLINE).await.unwrap();
    console.write("exit 5\n").await.unwrap();
    assert_eq!(console.await_end(DEADLINE).await.unwrap(), ConsoleEnd::Exited(5));
    assert_eq!(shells_started(&node), 1);
    env.stack
        .await_until("the tunnel to be forgotten", DEADLINE, |_| (env.stack.open_tunnels(&id) == 0).then_some(()))
        .await
        .unwrap();

    node.assert_never_printed(console.ticket(), "the exec ticket");
    node.assert_never_printed("typed-c0ffee", "the typed bytes");
    assert!(node.logs().contains(console.tunnel_id()), "bcd logs the tunnel by its id");
    assert_never_logged(&logs, console.ticket(), "the exec ticket");
    assert_never_logged(&logs, "typed-c0ffee", "the typed bytes");
    assert!(logs.contains(console.tunnel_id()), "the stack logs the tunnel by its id");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_tickets_open_nothing_and_carry_their_codes_and_a_replay_stays_refused_after_a_restart() {
    let logs = LogCapture::global();
    let scenario = "refused_tickets_open_nothing_and_carry_their_codes_and_a_replay_stays_refused_after_a_restart";
    let Some(env) = Env::start(scenario).await else { return };
    let pool = env.must_create_pool("console", None).await;
    let mut node = env.must_make_node("refusals", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;

    for (ticket, code) in [
        (TicketChoice::Expired, "token-expired"),
        (TicketChoice::ForNode("node_another".into()), "token-audience"),
        (TicketChoice::Op("exec".into()), "ticket-op"),
        (TicketChoice::Outsider, "jws-unknown-kid"),
    ] {
        let end = must_be_refused(&env.stack, &id, ticket.clone()).await;
        assert_eq!(end.code(), Some(code), "{ticket:?}: {end}");
        assert_eq!(shells_started(&node), 0, "{ticket:?} started a shell");
    }

    let mut console = env.stack.open_console(&id, ConsoleSize::default()).await.unwrap();
    console.write("exit\n").await.unwrap();
    assert_eq!(console.await_end(DEADLINE).await.unwrap(), ConsoleEnd::Exited(0));
    assert_eq!(shells_started(&node), 1);
    let ticket = console.ticket().to_string();
    let replayed = must_be_refused(&env.stack, &id, TicketChoice::Reuse(ticket.clone())).await;
    assert_eq!(replayed.code(), Some("ticket-replayed"), "{replayed}");

    // bcd restarted remembers the ticket: the replay window stays shut.
    let epoch = env.stack.await_session(&id, 1, DEADLINE).await.unwrap().epoch;
    node.stop().await;
    node.start().unwrap();
    env.stack.await_session(&id, epoch + 1, DEADLINE).await.unwrap();
    let replayed = must_be_refused(&env.stack, &id, TicketChoice::Reuse(ticket.clone())).await;
    assert_eq!(replayed.code(), Some("ticket-replayed"), "after a restart: {replayed}");
    assert_eq!(shells_started(&node), 1, "no refused ticket started a shell");

    node.assert_never_printed(&ticket, "the exec ticket");
    assert_never_logged(&logs, &ticket, "the exec ticket");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn either_side_going_away_ends_the_console_and_its_shell() {
    let Some(env) = Env::start("either_side_going_away_ends_the_console_and_its_shell").await else {
        return;
    };
    let pool = env.must_create_pool("console", None).await;
    let mut node = env.must_make_node("gone", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;

    // The caller goes away: bcd hangs its shell up.
    let mut console = env.stack.open_console(&id, ConsoleSize::default()).await.unwrap();
    let pid = must_shell_pid(&mut console).await;
    let dropped = Instant::now();
    drop(console);
    await_process_gone(pid).await;
    let hung_up = dropped.elapsed();
    assert!(hung_up < Duration::from_secs(2), "the shell outlived its caller by {hung_up:?}");

    // bcd is killed: the caller sees the console end, not a hang.
    let mut console = env.stack.open_console(&id, ConsoleSize::default()).await.unwrap();
    let pid = must_shell_pid(&mut console).await;
    let killed = Instant::now();
    node.supervisor().unwrap().signal(libc::SIGKILL).unwrap();
    let end = console.await_end(DEADLINE).await.expect("the console ends, it does not hang");
    assert_eq!(end.code(), Some("tunnel-gone"), "{end}");
    let ended = killed.elapsed();
    await_process_gone(pid).await;
    println!(
        "shell gone {hung_up:.0?} after its caller; console ended {ended:.0?} and its shell {:.0?} after bcd was killed",
        killed.elapsed()
    );
    node.stop().await;
    env.report();
}

/// Asks the console's shell for its pid, and checks that it runs.
async fn must_shell_pid(console: &mut devstack::Console) -> i32 {
    console.write("echo pid-$$-$((1+1))\n").await.unwrap();
    let out = console.await_output("-2", DEADLINE).await.unwrap();
    let pid = shell_pid(&out);
    assert!(process_runs(pid), "the shell {pid} runs");
    pid
}

/// The shell's pid in the output of `echo pid-$$-…`.
fn shell_pid(out: &str) -> i32 {
    // The typed line echoes `pid-$$-…`; the shell's answer has digits.
    out.split("pid-")
        .filter_map(|rest| rest.split('-').next())
        .find_map(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no pid in the output {out:?}"))
}

/// Whether `pid` runs: in the process table and not a zombie (an exited
/// shell whose parent, the killed bcd, is gone waits there for init).
fn process_runs(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    !matches!(state, None | Some('Z') | Some('X'))
}

/// Polls the process table until `pid` no longer runs, or fails at the
/// deadline.
async fn await_process_gone(pid: i32) {
    let deadline = Instant::now() + DEADLINE;
    while process_runs(pid) {
        assert!(Instant::now() < deadline, "the shell {pid} still runs after bcd was killed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench console"]
async fn bench_console_open_and_keystroke_echo() {
    let runs: usize = std::env::var("BCD_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let Some(env) = Env::start("bench_console_open_and_keystroke_echo").await else { return };
    let pool = env.must_create_pool("console", None).await;
    let mut node = env.must_make_node("bench-console", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let (mut opens, mut echoes) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let started = Instant::now();
        let mut console = env.stack.open_console(&id, ConsoleSize::default()).await.unwrap();
        let mut open = None;
        let mut prompt = Vec::new();
        // The whole prompt (it ends "$ " or "# "), its first byte timed.
        while !(prompt.ends_with(b"$ ") || prompt.ends_with(b"# ")) {
            match tokio::time::timeout(DEADLINE, console.next()).await.expect("the prompt in time") {
                Some(ConsoleEvent::Output(bytes)) => {
                    open.get_or_insert_with(|| started.elapsed());
                    prompt.extend_from_slice(&bytes);
                }
                Some(ConsoleEvent::Ended(end)) => panic!("the console ended before its prompt: {end}"),
                Some(_) => {}
                None => panic!("the console ended before its prompt"),
            }
        }
        let open = open.expect("a prompt byte");
        let typed = Instant::now();
        console.write("z").await.unwrap();
        console.await_output("z", DEADLINE).await.unwrap();
        let echo = typed.elapsed();
        // Ctrl-U drops the typed z, then the shell exits.
        console.write("\u{15}exit\n").await.unwrap();
        assert_eq!(console.await_end(DEADLINE).await.unwrap(), ConsoleEnd::Exited(0));
        println!("run {}: first prompt byte after {open:.1?}, keystroke echo in {echo:.1?}", i + 1);
        opens.push(open);
        echoes.push(echo);
    }
    opens.sort();
    echoes.sort();
    let runner = env.runner.name();
    println!(
        "console ({runner}): open_console to the first prompt byte: median {:.1?} over {runs} runs",
        opens[runs / 2]
    );
    println!("console ({runner}): one keystroke's echo round trip: median {:.1?} over {runs} runs", echoes[runs / 2]);
    node.stop().await;
}
