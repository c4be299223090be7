//! The chaos run's agents: one `bcd sim` process (fakehw) whose agents each
//! dial the gateways through their own links of the fault proxy, and the
//! sim's control socket, through which a crash, a reboot or a journal loss
//! strikes one agent (docs/daemon.md, "The command line", `bcd sim`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

use super::ChaosError;
use super::schedule::FaultKind;

/// A running `bcd sim`.
pub struct SimProcess {
    child: Child,
    control: SimControl,
}

/// The client of a `bcd sim`'s control socket.
pub struct SimControl {
    path: PathBuf,
    conn: Option<BufReader<UnixStream>>,
}

impl SimControl {
    /// The control socket at `path` (connected on first use).
    pub fn new(path: &Path) -> SimControl {
        SimControl { path: path.to_path_buf(), conn: None }
    }

    /// Strikes agent `i` with a process fault (crash, reboot, journal
    /// loss); an agent between two lives answers an error ([`ChaosError::Sim`]).
    pub async fn fault(&mut self, kind: FaultKind, i: u32) -> Result<(), ChaosError> {
        let name = fault_name(kind)?;
        if self.conn.is_none() {
            let stream = UnixStream::connect(&self.path)
                .await
                .map_err(|source| ChaosError::Io { what: "connect to bcd sim's control socket", source })?;
            self.conn = Some(BufReader::new(stream));
        }
        let conn = self.conn.as_mut().expect("connected");
        let io = |source| ChaosError::Io { what: "ask bcd sim's control socket", source };
        conn.get_mut().write_all(format!("{name} {i}\n").as_bytes()).await.map_err(io)?;
        let mut answer = String::new();
        conn.read_line(&mut answer).await.map_err(io)?;
        match answer.trim() {
            "ok" => Ok(()),
            other => Err(ChaosError::Sim(format!("{name} {i}: {other}"))),
        }
    }

    /// Strikes agents `0..n` with one fault at once (a fleet's power
    /// cycle): the requests go out on a connection of their own without
    /// waiting for each answer (one at a time, 10,000 reboots took 25 s
    /// while the rebooted agents kept the sim busy); returns how many
    /// were struck (an agent between two lives is not).
    pub async fn fault_all(&self, kind: FaultKind, n: u32) -> Result<u32, ChaosError> {
        let name = fault_name(kind)?;
        let stream = UnixStream::connect(&self.path)
            .await
            .map_err(|source| ChaosError::Io { what: "connect to bcd sim's control socket", source })?;
        let (reader, mut writer) = stream.into_split();
        let io = |source| ChaosError::Io { what: "ask bcd sim's control socket", source };
        let send = async move {
            let requests: String = (0..n).map(|i| format!("{name} {i}\n")).collect();
            writer.write_all(requests.as_bytes()).await.map_err(io)
        };
        let answers = async {
            let mut lines = BufReader::new(reader).lines();
            let mut struck = 0;
            for _ in 0..n {
                match lines.next_line().await.map_err(io)? {
                    Some(answer) if answer.trim() == "ok" => struck += 1,
                    Some(_) => {}
                    None => return Err(ChaosError::Sim(format!("{name}: the control socket closed"))),
                }
            }
            Ok(struck)
        };
        let ((), struck) = tokio::try_join!(send, answers)?;
        Ok(struck)
    }
}

/// A process fault's name on bcd sim's control socket.
fn fault_name(kind: FaultKind) -> Result<&'static str, ChaosError> {
    match kind {
        FaultKind::Crash => Ok("crash"),
        FaultKind::Reboot => Ok("reboot"),
        FaultKind::JournalLoss => Ok("lose-journal"),
        other => Err(ChaosError::Sim(format!("{other} is not a fault of bcd sim"))),
    }
}

/// How long the agents get to stop on SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(20);

impl SimProcess {
    /// Starts `bcd sim` for `nodes` agents on `config` with the join token
    /// on its standard input (never an argument or a file), its output in
    /// `log`, its control socket at `control`, the agents powering on
    /// within `spread` (none when zero).
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        bcd: &Path,
        config: &Path,
        nodes: u32,
        seed: &str,
        token: &str,
        control: &Path,
        log: &Path,
        spread: Duration,
    ) -> Result<SimProcess, ChaosError> {
        let io = |what: &'static str| move |source| ChaosError::Io { what, source };
        let out = std::fs::File::create(log).map_err(io("create the bcd sim log"))?;
        let err = out.try_clone().map_err(io("create the bcd sim log"))?;
        let mut cmd = Command::new(bcd);
        cmd.arg("sim").arg("--config").arg(config).arg("--nodes").arg(nodes.to_string()).arg("--seed").arg(seed);
        cmd.arg("--control").arg(control).stdin(Stdio::piped()).stdout(out).stderr(err).kill_on_drop(true);
        if !spread.is_zero() {
            cmd.arg("--power-on-spread").arg(format!("{}ms", spread.as_millis()));
        }
        let mut child = cmd.spawn().map_err(io("start bcd sim"))?;
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(format!("{token}\n").as_bytes()).await.map_err(io("hand bcd sim the token"))?;
        drop(stdin);
        Ok(SimProcess { child, control: SimControl::new(control) })
    }

    /// Whether bcd sim still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its control socket's client.
    pub fn control(&mut self) -> &mut SimControl {
        &mut self.control
    }

    /// Stops bcd sim (SIGTERM, then SIGKILL after a grace) and returns its exit code.
    pub async fn stop(mut self) -> Option<i32> {
        if let Some(pid) = self.child.id() {
            // SAFETY: a plain kill(2) of our own child.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => {
                let _ = self.child.kill().await;
                None
            }
        }
    }
}
