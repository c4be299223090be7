//! A node handle: one bcd machine under test, with its own directory
//! (`config.toml`, `join-encryption.jwk`, the data dir, `bcd.log`), the
//! `bcd` commands a scenario runs (`must_join`, `start`, `status`, `stop`),
//! and a supervisor for `bcd node`.
//!
//! On a failing test (a panic) the node prints its log and keeps its
//! directory; otherwise the directory is removed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::AsyncWriteExt;

use crate::logs::LogSink;
use crate::runner::Runner;
use crate::supervisor::{State, Supervisor};

/// The output of one bcd command.
#[derive(Debug, Clone)]
pub struct Output {
    /// The exit status code (None when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Output {
    /// Whether it exited 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// One bcd machine.
pub struct Node {
    name: String,
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    bcd: PathBuf,
    runner: Arc<dyn Runner>,
    env: Vec<(String, String)>,
    logs: LogSink,
    supervisor: Option<Supervisor>,
}

impl Node {
    /// A node named `name` running `bcd` through `runner`, with fakehw knobs in `env`.
    pub fn new(name: &str, bcd: &Path, runner: Arc<dyn Runner>, env: Vec<(String, String)>) -> Result<Self> {
        Self::new_in(&std::env::temp_dir(), name, bcd, runner, env)
    }

    /// Like [`Node::new`], with the node's directory under `parent` (a
    /// tmpfs for a `bcd sim` of thousands of agents, whose files would
    /// otherwise make the run measure the disk).
    pub fn new_in(
        parent: &Path,
        name: &str,
        bcd: &Path,
        runner: Arc<dyn Runner>,
        env: Vec<(String, String)>,
    ) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix(&format!("bcd-e2e-{name}-")).tempdir_in(parent)?;
        let root = dir.path().to_path_buf();
        let logs = LogSink::new(name, &root.join("bcd.log"));
        Ok(Node {
            name: name.to_string(),
            dir: Some(dir),
            root,
            bcd: bcd.to_path_buf(),
            runner,
            env,
            logs,
            supervisor: None,
        })
    }

    /// The node's directory.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// Where `config.toml` lives.
    pub fn config(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// bcd's data dir.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The captured log (commands and the supervised daemon).
    pub fn logs(&self) -> &LogSink {
        &self.logs
    }

    /// Adds or replaces an environment variable for later commands.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        self.runner.command(&self.bcd, &args, &self.env)
    }

    /// Starts `bcd args…` with its output piped and `stdin` written to it
    /// (then closed).
    async fn start_child(&self, args: &[&str], stdin: Option<&str>) -> Result<tokio::process::Child> {
        let mut cmd = self.command(args);
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| format!("starting bcd {}", args.join(" ")))?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("piped stdin");
            pipe.write_all(input.as_bytes()).await?;
        }
        Ok(child)
    }

    /// The log label of `bcd args…`.
    fn label(args: &[&str]) -> String {
        format!("bcd {}", args.first().copied().unwrap_or(""))
    }

    /// Runs `bcd args…` to completion, with `stdin` piped in, and logs its output.
    pub async fn run(&self, args: &[&str], stdin: Option<&str>, timeout: Duration) -> Result<Output> {
        let child = self.start_child(args, stdin).await?;
        let out = tokio::time::timeout(timeout, child.wait_with_output())
            .await
            .with_context(|| format!("bcd {} did not finish within {timeout:?}", args.join(" ")))??;
        let output = Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        let label = Self::label(args);
        for line in output.stdout.lines().chain(output.stderr.lines()) {
            self.logs.push(&label, line);
        }
        self.logs.push(&label, &format!("exit {:?}", output.code));
        Ok(output)
    }

    /// Starts `bcd args…` in the background (not supervised), with `stdin`
    /// piped in and its output captured live; for long-running commands such
    /// as `bcd sim`.
    pub async fn spawn(&self, args: &[&str], stdin: Option<&str>) -> Result<Background> {
        let mut child = self.start_child(args, stdin).await?;
        let label = Self::label(args);
        let readers = vec![
            self.logs.follow(&label, child.stdout.take().expect("piped stdout")),
            self.logs.follow(&label, child.stderr.take().expect("piped stderr")),
        ];
        Ok(Background { child, readers })
    }

    /// Like [`Node::spawn`], with the output appended to `bcd.log` only,
    /// never held in memory: for a `bcd sim` of thousands of agents, whose
    /// lines would otherwise grow the test process (and a scale run
    /// measures that process's memory). [`Node::log_file_text`] reads it.
    pub async fn spawn_to_file(&self, args: &[&str], stdin: Option<&str>) -> Result<Background> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.logs.path())?;
        let mut cmd = self.command(args);
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| format!("starting bcd {}", args.join(" ")))?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("piped stdin");
            pipe.write_all(input.as_bytes()).await?;
        }
        Ok(Background { child, readers: Vec::new() })
    }

    /// What `bcd.log` holds (the output of [`Node::spawn_to_file`] too).
    pub fn log_file_text(&self) -> String {
        std::fs::read_to_string(self.logs.path()).unwrap_or_default()
    }

    /// Installs bcd behind an entrypoint it may replace (self-update):
    /// `<dir>/bin/bcd-a` a copy of the binary, `<dir>/bin/bcd` a relative
    /// symlink to it; later commands run the entrypoint. Returns the slot
    /// directory.
    pub fn install_entrypoint(&mut self) -> Result<PathBuf> {
        let slots = self.root.join("bin");
        std::fs::create_dir_all(&slots)?;
        std::fs::copy(&self.bcd, slots.join("bcd-a")).context("copying bcd into slot a")?;
        #[cfg(unix)]
        std::os::unix::fs::symlink("bcd-a", slots.join("bcd")).context("linking the entrypoint")?;
        self.bcd = slots.join("bcd");
        Ok(slots)
    }

    /// `bcd join --config …` with the token on standard input; fails unless it exits 0.
    pub async fn must_join(&self, token: &str) -> Result<Output> {
        let config = self.config();
        let out =
            self.run(&["join", "--config", &config.to_string_lossy()], Some(token), Duration::from_secs(60)).await?;
        if !out.success() {
            bail!("bcd join failed ({:?}):\n{}{}", out.code, out.stdout, out.stderr);
        }
        Ok(out)
    }

    /// Starts `bcd node --config …` under the supervisor.
    pub fn start(&mut self) -> Result<()> {
        if self.supervisor.is_some() {
            bail!("node {} is already running", self.name);
        }
        let config = self.config().to_string_lossy().into_owned();
        let runner = self.runner.clone();
        let bcd = self.bcd.clone();
        let env = self.env.clone();
        let factory = Box::new(move || {
            let args = [OsString::from("node"), OsString::from("--config"), OsString::from(&config)];
            runner.command(&bcd, &args, &env)
        });
        self.supervisor = Some(Supervisor::start(factory, self.logs.clone()));
        Ok(())
    }

    /// The supervisor of `bcd node`.
    pub fn supervisor(&self) -> Result<&Supervisor> {
        self.supervisor.as_ref().with_context(|| format!("node {} is not running", self.name))
    }

    /// Stops `bcd node` and returns what the supervisor saw.
    pub async fn stop(&mut self) -> Option<State> {
        match self.supervisor.take() {
            Some(s) => Some(s.stop().await),
            None => None,
        }
    }

    /// `bcd status --json`, parsed.
    pub async fn status(&self) -> Result<serde_json::Value> {
        let config = self.config();
        let out = self
            .run(&["status", "--json", "--config", &config.to_string_lossy()], None, Duration::from_secs(10))
            .await?;
        if !out.success() {
            bail!("bcd status failed ({:?}): {}", out.code, out.stderr);
        }
        serde_json::from_str(&out.stdout).with_context(|| format!("bcd status printed no JSON: {}", out.stdout))
    }

    /// Polls `bcd status --json` until `pred` holds, or fails at the deadline.
    pub async fn await_status(
        &self,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = None;
        loop {
            if let Ok(status) = self.status().await {
                if pred(&status) {
                    return Ok(status);
                }
                last = Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("timed out after {timeout:?} waiting for {what}; last status {last:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Fails if `secret` appears in anything this node printed or logged.
    pub fn assert_never_printed(&self, secret: &str, what: &str) {
        assert!(!self.logs.contains(secret), "{what} appears in the output of node {}", self.name);
        let on_disk = std::fs::read_to_string(self.logs.path()).unwrap_or_default();
        assert!(!on_disk.contains(secret), "{what} appears in {}", self.logs.path().display());
    }
}

/// A bcd process started with [`Node::spawn`].
pub struct Background {
    child: tokio::process::Child,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl Background {
    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops it with SIGTERM (SIGKILL after 5 s), waits until its output is
    /// captured, and returns its exit status code.
    pub async fn stop(mut self) -> Option<i32> {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child.
            #[cfg(unix)]
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM)
            };
        }
        let status = match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = self.child.kill().await;
                None
            }
        };
        for reader in self.readers.drain(..) {
            let _ = reader.await;
        }
        status.and_then(|s| s.code())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- log of node {} ({}) ----\n{}\n---- end of log ----",
                self.name,
                self.runner.name(),
                self.logs.text()
            );
            if let Some(dir) = self.dir.take() {
                eprintln!("node {} keeps its directory: {}", self.name, dir.keep().display());
            }
        }
    }
}
