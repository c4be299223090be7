//! The gateway processes of a chaos run on several gateways: each a
//! `devstack gateway` child on the run's PostgreSQL store, on ports fixed
//! at its first start, so that a gateway killed (SIGKILL) comes back on the
//! same address and its nodes' links still lead to it; a stalled one is
//! stopped (SIGSTOP) until it is resumed (SIGCONT): a zombie that wakes
//! after its nodes moved.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use super::ChaosError;

/// One gateway process.
pub struct GatewayChild {
    exe: PathBuf,
    store_url: String,
    id: String,
    ports: [u16; 3],
    heartbeat_ms: u32,
    child: Option<Child>,
    stalled: bool,
}

/// A free loopback port (bound, then released).
fn free_port() -> Result<u16, ChaosError> {
    let io = |source| ChaosError::Io { what: "find a free port", source };
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).map_err(io)
}

impl GatewayChild {
    /// Starts gateway `id` of `exe` (a devstack binary) on `store_url`.
    pub async fn start(exe: &Path, store_url: &str, id: &str, heartbeat_ms: u32) -> Result<GatewayChild, ChaosError> {
        let ports = [free_port()?, free_port()?, free_port()?];
        let mut g = GatewayChild {
            exe: exe.to_path_buf(),
            store_url: store_url.to_string(),
            id: id.to_string(),
            ports,
            heartbeat_ms,
            child: None,
            stalled: false,
        };
        g.spawn().await?;
        Ok(g)
    }

    /// Where it serves the gateway.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[0]))
    }

    async fn spawn(&mut self) -> Result<(), ChaosError> {
        let [port, http, https] = self.ports.map(|p| p.to_string());
        let mut command = Command::new(&self.exe);
        command.args(["gateway", "--id", &self.id, "--host", "127.0.0.1", "--port", &port]);
        command.args(["--http-port", &http, "--https-port", &https, "--signed-intent"]);
        command.args(["--heartbeat-interval", &format!("{}ms", self.heartbeat_ms)]);
        // The store's URL in the environment, never on the command line.
        command.env("DEVSTACK_DATABASE_URL", &self.store_url).env("RUST_LOG", "error");
        command.stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true);
        let io = |what| move |source| ChaosError::Io { what, source };
        let mut child = command.spawn().map_err(io("start a gateway"))?;
        let stdout = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next_line().await.map_err(io("read a gateway's output"))? {
                Some(line) if line.trim_start().starts_with("gateway:") => break,
                Some(_) => {}
                None => return Err(ChaosError::Sim(format!("gateway {} ended before it served", self.id))),
            }
        }
        // The rest of its output is read (and dropped) so it never blocks.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.child = Some(child);
        self.stalled = false;
        Ok(())
    }

    fn signal(&self, signal: i32) {
        if let Some(pid) = self.child.as_ref().and_then(Child::id).and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) of our own child, not yet waited for.
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// Kills it (SIGKILL: no drain).
    pub async fn kill(&mut self) {
        if self.stalled {
            self.signal(libc::SIGCONT);
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Stops it where it is (SIGSTOP).
    pub fn stall(&mut self) {
        if self.child.is_some() && !self.stalled {
            self.signal(libc::SIGSTOP);
            self.stalled = true;
        }
    }

    /// Lets a stalled one run again (SIGCONT).
    pub fn resume(&mut self) {
        if self.stalled {
            self.signal(libc::SIGCONT);
            self.stalled = false;
        }
    }

    /// Starts a killed one again on its ports (a revival); resumes a stalled one.
    pub async fn revive(&mut self) -> Result<(), ChaosError> {
        self.resume();
        if self.child.is_none() {
            self.spawn().await?;
        }
        Ok(())
    }

    /// Stops it (SIGTERM: it drains) and waits.
    pub async fn stop(mut self) {
        self.resume();
        self.signal(libc::SIGTERM);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait().await;
        }
    }
}
