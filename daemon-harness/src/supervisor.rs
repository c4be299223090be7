//! A supervisor that keeps `bcd node` running the way systemd would
//! (`Restart=always`, `RestartPreventExitStatus=3`): when the process exits
//! for a reboot or a self-update it starts it again; when it exits with
//! status 3 (its certificate was revoked) or the test stops it, it does not.
//!
//! Tests watch its state (starts, exits) through a watch channel and await
//! changes with deadlines.

use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use anyhow::{Result, bail};
use tokio::sync::watch;

use crate::logs::LogSink;

/// The exit status after which bcd must not be restarted (revoked).
pub const NO_RESTART_STATUS: i32 = 3;
/// The pause before a restart (systemd's RestartSec).
pub const RESTART_DELAY: Duration = Duration::from_millis(100);

/// What the supervisor has seen.
#[derive(Clone, Debug, Default)]
pub struct State {
    /// How many times the process was started.
    pub starts: u32,
    /// The exit statuses so far, in order.
    pub exits: Vec<Option<i32>>,
    /// Whether a process is running now.
    pub running: bool,
    /// Whether the supervisor gave up (stopped, or status 3).
    pub finished: bool,
}

/// Builds the command for each (re)start.
pub type CommandFactory = Box<dyn Fn() -> tokio::process::Command + Send + Sync>;

/// A supervised process.
pub struct Supervisor {
    state: watch::Receiver<State>,
    stop: watch::Sender<bool>,
    pid: Arc<AtomicI32>,
    task: tokio::task::JoinHandle<()>,
}

impl Supervisor {
    /// Starts supervising the process `factory` builds, logging into `logs`.
    pub fn start(factory: CommandFactory, logs: LogSink) -> Self {
        let (state_tx, state) = watch::channel(State::default());
        let (stop, mut stop_rx) = watch::channel(false);
        let pid = Arc::new(AtomicI32::new(0));
        let pid_task = pid.clone();
        let task = tokio::spawn(async move {
            loop {
                if *stop_rx.borrow() {
                    break;
                }
                let mut cmd = factory();
                cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
                let mut child = match cmd.spawn() {
                    Ok(child) => child,
                    Err(e) => {
                        logs.push("supervisor", &format!("cannot start bcd: {e}"));
                        break;
                    }
                };
                pid_task.store(child.id().map(|p| p as i32).unwrap_or(0), Ordering::SeqCst);
                let out = logs.follow("bcd", child.stdout.take().expect("piped stdout"));
                let err = logs.follow("bcd", child.stderr.take().expect("piped stderr"));
                state_tx.send_modify(|s| {
                    s.starts += 1;
                    s.running = true;
                });
                let status: Option<ExitStatus> = tokio::select! {
                    status = child.wait() => status.ok(),
                    _ = stop_rx.changed() => {
                        terminate(&mut child).await;
                        None
                    }
                };
                let _ = tokio::join!(out, err);
                pid_task.store(0, Ordering::SeqCst);
                let code = status.and_then(|s| s.code());
                logs.push("supervisor", &format!("bcd exited ({status:?})"));
                state_tx.send_modify(|s| {
                    s.running = false;
                    s.exits.push(code);
                });
                if *stop_rx.borrow() || code == Some(NO_RESTART_STATUS) {
                    break;
                }
                tokio::time::sleep(RESTART_DELAY).await;
            }
            state_tx.send_modify(|s| s.finished = true);
        });
        Supervisor { state, stop, pid, task }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state.borrow().clone()
    }

    /// Waits until `pred` holds for the state, or fails at the deadline.
    pub async fn await_state(&self, timeout: Duration, what: &str, pred: impl Fn(&State) -> bool) -> Result<State> {
        let mut rx = self.state.clone();
        match tokio::time::timeout(timeout, rx.wait_for(|s| pred(s))).await {
            Ok(Ok(s)) => Ok(s.clone()),
            Ok(Err(_)) => bail!("supervisor ended while waiting for {what}"),
            Err(_) => bail!("timed out after {timeout:?} waiting for {what} (state {:?})", self.state()),
        }
    }

    /// Sends `signal` to the running process (SIGKILL for a crash fault).
    pub fn signal(&self, signal: i32) -> Result<()> {
        let pid = self.pid.load(Ordering::SeqCst);
        if pid == 0 {
            bail!("no bcd process is running");
        }
        #[cfg(unix)]
        {
            // SAFETY: kill(2) with a pid we started; a stale pid only fails with ESRCH.
            if unsafe { libc::kill(pid, signal) } != 0 {
                bail!("kill({pid}, {signal}) failed: {}", std::io::Error::last_os_error());
            }
            Ok(())
        }
        #[cfg(not(unix))]
        bail!("signals are a Unix notion: cannot send signal {signal} to process {pid} here")
    }

    /// Stops the process (SIGTERM, then SIGKILL after 5 s) and the supervision.
    pub async fn stop(mut self) -> State {
        let _ = self.stop.send(true);
        let _ = (&mut self.task).await;
        self.state.borrow().clone()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // Dropping the task drops the child, which `kill_on_drop` kills: no
        // test leaves a bcd behind, even when it forgot to stop its node.
        self.task.abort();
    }
}

async fn terminate(child: &mut tokio::process::Child) {
    #[cfg(unix)]
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    // Elsewhere (wsl.exe on Windows) there is no SIGTERM: the process is ended.
    #[cfg(not(unix))]
    let _ = child.start_kill();
    if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}
