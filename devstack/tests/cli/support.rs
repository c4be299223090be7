//! What the CLI scenarios share: the `devstack` binary under test (the
//! build's, or `DEVSTACK_TEST_BIN` to run the scenarios against another
//! build, e.g. one from before a fix), child processes read line by line
//! and reaped, a `devstack serve` child, polls with a deadline, and a tmux
//! server of its own for the terminal cases.

use std::io::{BufRead as _, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// How long the first start may take: it may build bcd from a cold Go cache.
pub const FIRST_START: Duration = Duration::from_secs(600);
/// How long anything else may take.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The binary under test: this build's, or `DEVSTACK_TEST_BIN`.
pub fn bin() -> std::ffi::OsString {
    std::env::var_os("DEVSTACK_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_devstack").into())
}

pub fn devstack() -> Command {
    Command::new(bin())
}

/// Whether Go is on PATH; without it the scenario skips, except under CI.
pub fn require_go(scenario: &str) -> bool {
    let ok = Command::new("go").arg("version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{scenario}: Go is not on PATH (CI=true)");
        eprintln!("{scenario} skipped: Go is not on PATH");
    }
    ok
}

/// The lines a child writes to one of its pipes, as they come.
pub fn lines(pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Reads lines until one satisfies `what`; fails at the deadline (or at
/// the end of the output) with everything read so far.
pub fn await_line(
    rx: &Receiver<String>,
    seen: &mut Vec<String>,
    within: Duration,
    what: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if what(&line) {
                    return line;
                }
            }
            Err(e) => panic!("no such line ({e}); read so far:\n{}", seen.join("\n")),
        }
    }
}

/// Checks `check` every `step` until it is `Ok`, failing at `within` with
/// its last `Err`: for what has no notification to await here (a child's
/// exit, a tmux screen, a file another process writes).
pub fn poll<T>(within: Duration, step: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(done) => return done,
            Err(why) => assert!(Instant::now() < deadline, "{why}"),
        }
        std::thread::sleep(step);
    }
}

/// Waits for a child's exit within the deadline.
pub fn await_exit(child: &mut Child, within: Duration) -> ExitStatus {
    poll(within, Duration::from_millis(20), || {
        child.try_wait().unwrap().ok_or_else(|| format!("the process did not exit within {within:?}"))
    })
}

pub fn sigint(child: &Child) {
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
}

/// Fails if a process still runs with `dir` in its command line.
pub fn assert_no_process_under(dir: &Path) {
    let needle = dir.to_string_lossy().into_owned();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            left.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// A child process killed (and reaped) if the test ends before it does,
/// so a failing test leaves nothing running.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// A `devstack serve` child and what it printed.
pub struct Serve {
    pub child: Reaped,
    pub stdout: Receiver<String>,
    pub stderr: Receiver<String>,
    pub printed: Vec<String>,
    pub logged: Vec<String>,
    pub admin: PathBuf,
}

impl Serve {
    pub fn start(args: &[&str], admin: &Path) -> Serve {
        let mut child = devstack()
            .arg("serve")
            .args(args)
            .env("DEVSTACK_ADMIN", admin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        Serve {
            child: Reaped(child),
            stdout,
            stderr,
            printed: Vec::new(),
            logged: Vec::new(),
            admin: admin.to_path_buf(),
        }
    }

    /// The data directory it printed (once it printed its block).
    pub fn await_data_dir(&mut self) -> PathBuf {
        let line = await_line(&self.stdout, &mut self.printed, DEADLINE, |l| l.trim_start().starts_with("data dir:"));
        let path = line.split_once(':').unwrap().1.trim().trim_end_matches(" (temporary)");
        await_line(&self.stdout, &mut self.printed, DEADLINE, |l| l.starts_with("look around"));
        PathBuf::from(path)
    }

    /// Runs a client subcommand against this stack.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        devstack().args(args).env("DEVSTACK_ADMIN", &self.admin).output().unwrap()
    }

    /// The value of a line `  key: value` of the printed block.
    pub fn printed(&self, key: &str) -> String {
        let prefix = format!("{key}:");
        let line = self.printed.iter().find(|l| l.trim_start().starts_with(&prefix));
        line.unwrap_or_else(|| panic!("no {key:?} in {:#?}", self.printed)).trim_start()[prefix.len()..]
            .trim()
            .to_string()
    }

    /// SIGINT, its exit awaited, and everything it wrote to standard error.
    pub fn stop(&mut self) -> (ExitStatus, String) {
        sigint(&self.child);
        let status = await_exit(&mut self.child, DEADLINE);
        while let Ok(line) = self.stderr.recv_timeout(DEADLINE) {
            self.logged.push(line);
        }
        (status, self.logged.join("\n"))
    }
}

/// Runs a client subcommand whose standard output is a pipe nobody reads
/// (its reader closed at once, as `| head -0` would): its status and
/// standard error.
pub fn with_closed_stdout(admin: &Path, args: &[&str]) -> (ExitStatus, String) {
    let mut child = devstack()
        .args(args)
        .env("DEVSTACK_ADMIN", admin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (await_exit(&mut child, DEADLINE), stderr)
}

pub fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// A tmux server of its own (its socket in a temporary directory), killed
/// with everything in it on drop.
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    pub fn new(dir: &Path) -> Tmux {
        Tmux { socket: dir.join("tmux.sock") }
    }

    pub fn run(&self, args: &[&str]) -> std::process::Output {
        let out =
            Command::new("tmux").arg("-S").arg(&self.socket).arg("-f").arg("/dev/null").args(args).output().unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", text(&out.stderr));
        out
    }

    /// Types `keys` into the pane (`literal`: as text, else as key names).
    pub fn keys(&self, literal: bool, keys: &str) {
        let mut args = vec!["send-keys", "-t", "console"];
        if literal {
            args.push("-l");
        }
        args.push(keys);
        self.run(&args);
    }

    /// The pane's rows and columns, as tmux has them now.
    pub fn size(&self) -> (u32, u32) {
        let out = self.run(&["display-message", "-p", "-t", "console", "#{pane_height} #{pane_width}"]);
        let said = text(&out.stdout);
        let (rows, cols) = said.trim().split_once(' ').unwrap();
        (rows.parse().unwrap(), cols.parse().unwrap())
    }

    /// Types `line` and Enter at the node's shell once its prompt is the
    /// screen's last line, as a person would: keys typed ahead are echoed by
    /// the local terminal (cooked until `devstack console` goes raw) and by
    /// the node's PTY before the prompt, which garbles the lines the test
    /// then looks for.
    pub fn type_line(&self, line: &str) {
        self.await_screen(|screen| {
            screen.lines().map(str::trim_end).rfind(|l| !l.is_empty()).is_some_and(|l| l.ends_with(['#', '$']))
        });
        self.keys(true, line);
        self.keys(false, "Enter");
    }

    /// Reads the screen until one of its lines satisfies `what`.
    pub fn await_line(&self, what: impl Fn(&str) -> bool) -> String {
        let screen = self.await_screen(|screen| screen.lines().any(|l| what(l.trim_end())));
        screen.lines().map(str::trim_end).find(|l| what(l)).unwrap().to_string()
    }

    /// Reads the screen until it satisfies `what`, and returns it.
    pub fn await_screen(&self, what: impl Fn(&str) -> bool) -> String {
        poll(DEADLINE, Duration::from_millis(50), || {
            let screen = text(&self.run(&["capture-pane", "-p", "-t", "console"]).stdout);
            if what(&screen) { Ok(screen) } else { Err(format!("the screen did not change as awaited:\n{screen}")) }
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-S").arg(&self.socket).arg("kill-server").output();
    }
}

/// Waits for the exit status `devstack console` left in `file`.
pub fn await_status_file(file: &Path) -> String {
    poll(DEADLINE, Duration::from_millis(20), || match std::fs::read_to_string(file) {
        Ok(said) if said.ends_with('\n') => Ok(said.trim().to_string()),
        _ => Err(format!("devstack console did not exit within {DEADLINE:?}")),
    })
}

/// Whether PostgreSQL's server programs are installed; without them the
/// scenario skips, except under CI.
pub fn require_postgres(scenario: &str) -> bool {
    let ok = std::fs::read_dir("/usr/lib/postgresql")
        .is_ok_and(|versions| versions.flatten().any(|v| v.path().join("bin/initdb").exists()));
    if !ok {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{scenario}: PostgreSQL is not installed (CI=true)");
        eprintln!("{scenario} skipped: PostgreSQL is not installed");
    }
    ok
}
