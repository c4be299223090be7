//! Gateway processes of one shared PostgreSQL store (docs/harness.md,
//! "Several gateways"): each an `e2e-gateway` process (the dev stack's
//! gateway, built beside the e2e suite) that the scenarios kill (SIGKILL),
//! pause (SIGSTOP, SIGCONT), stop (SIGTERM: it drains) and start again on
//! the same ports, with its log captured to check what it said. The store's
//! URL goes to it in its environment; it exits by itself when this process
//! is gone (its standard input, a pipe from here, ends).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};

/// How long a gateway may take to drain and exit after SIGTERM before a
/// stop kills it and fails: its drain is bounded well below this.
const STOP_WITHIN: Duration = Duration::from_secs(60);

/// How one gateway runs.
#[derive(Clone, Debug)]
pub struct GatewaySpec {
    /// Its id among the store's gateways (`g1`, …).
    pub id: String,
    /// Where it listens (and what its serving certificate names).
    pub host: IpAddr,
    /// The Welcome's heartbeat interval, also its beat.
    pub heartbeat_ms: u32,
    /// When a node no gateway heard from is marked unreachable.
    pub liveness_ms: u64,
    /// How far its wall clock runs off, in seconds (a test knob).
    pub clock_offset_s: i64,
    /// Whether it signs intent (as the scenarios' stacks do).
    pub signed_intent: bool,
}

impl GatewaySpec {
    /// Gateway `id` on loopback: a 500 ms heartbeat, the 30 s liveness
    /// timeout, its clock on time, signed intent.
    pub fn new(id: &str) -> GatewaySpec {
        GatewaySpec {
            id: id.to_string(),
            host: IpAddr::from([127, 0, 0, 1]),
            heartbeat_ms: 500,
            liveness_ms: 30_000,
            clock_offset_s: 0,
            signed_intent: true,
        }
    }
}

/// Where a running gateway serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayUrls {
    /// The gRPC gateway (`https://host:port`).
    pub gateway: String,
    /// The HTTP side (the well-known document).
    pub http: String,
    /// The HTTPS listener (WebSocket session, renewal).
    pub https: String,
}

/// One gateway process (killed when dropped).
pub struct GatewayProcess {
    spec: GatewaySpec,
    exe: PathBuf,
    store_url: String,
    child: Child,
    /// Held so the gateway's standard input stays open while this lives.
    _stdin: ChildStdin,
    urls: GatewayUrls,
    /// What it logged (standard error), line by line, since it first started.
    log: Arc<Mutex<Vec<String>>>,
}

/// The port of `https://host:port` or `http://host:port`.
fn port_of(url: &str) -> Result<u16> {
    let port = url.rsplit(':').next().and_then(|p| p.split('/').next()).context("a URL with a port")?;
    port.parse().with_context(|| format!("the port of {url}"))
}

impl GatewayProcess {
    /// Starts gateway `spec` of the store at `store_url` (`exe`: the
    /// e2e-gateway binary) and waits until it serves.
    pub async fn start(exe: &Path, store_url: &str, spec: GatewaySpec) -> Result<GatewayProcess> {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (child, stdin, urls) = Self::spawn(exe, store_url, &spec, None, &log).await?;
        Ok(GatewayProcess {
            spec,
            exe: exe.to_path_buf(),
            store_url: store_url.to_string(),
            child,
            _stdin: stdin,
            urls,
            log,
        })
    }

    async fn spawn(
        exe: &Path,
        store_url: &str,
        spec: &GatewaySpec,
        ports: Option<[u16; 3]>,
        log: &Arc<Mutex<Vec<String>>>,
    ) -> Result<(Child, ChildStdin, GatewayUrls)> {
        let [port, http, https] = ports.unwrap_or([0, 0, 0]);
        let mut command = Command::new(exe);
        command
            .args(["--id", &spec.id, "--host", &spec.host.to_string()])
            .args(["--port", &port.to_string(), "--http-port", &http.to_string(), "--https-port", &https.to_string()])
            .args(["--heartbeat-ms", &spec.heartbeat_ms.to_string(), "--liveness-ms", &spec.liveness_ms.to_string()])
            .args(["--clock-offset", &spec.clock_offset_s.to_string()]);
        if spec.signed_intent {
            command.arg("--signed-intent");
        }
        command
            .env("DEVSTACK_DATABASE_URL", store_url)
            .env("RUST_LOG", std::env::var("BCD_E2E_GATEWAY_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().with_context(|| format!("start gateway {} ({})", spec.id, exe.display()))?;
        let stdin = child.stdin.take().context("its standard input")?;
        let stderr = child.stderr.take().context("its standard error")?;
        let kept = log.clone();
        let id = spec.id.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if std::env::var_os("BCD_E2E_LOG").is_some() {
                    eprintln!("[{id}] {line}");
                }
                kept.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().context("its standard output")?).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), stdout.next_line()).await;
        let line = match ready {
            Ok(Ok(Some(line))) => line,
            _ => {
                let _ = child.kill().await;
                let said = log.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
                bail!("gateway {} did not start:\n{said}", spec.id);
            }
        };
        let parts: Vec<&str> = line.split_whitespace().collect();
        let ["ready", gateway, http, https] = parts.as_slice() else {
            bail!("gateway {} said {line:?}, not ready", spec.id);
        };
        let urls = GatewayUrls { gateway: gateway.to_string(), http: http.to_string(), https: https.to_string() };
        Ok((child, stdin, urls))
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.spec.id
    }

    /// Where it serves.
    pub fn urls(&self) -> &GatewayUrls {
        &self.urls
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    fn signal(&self, signal: i32) -> Result<()> {
        let pid = self.child.id().context("the gateway has exited")?;
        // SAFETY: kill(2) on our own child, not yet reaped.
        if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
            bail!("kill({pid}, {signal}): {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// SIGKILL, and waits until it is gone (its sockets closed).
    pub async fn kill(&mut self) -> Result<()> {
        self.signal(libc::SIGKILL)?;
        self.child.wait().await.context("reap the gateway")?;
        Ok(())
    }

    /// SIGSTOP: it stops where it is, its connections open and silent.
    pub fn pause(&self) -> Result<()> {
        self.signal(libc::SIGSTOP)
    }

    /// SIGCONT: it runs on from where it stopped.
    pub fn resume(&self) -> Result<()> {
        self.signal(libc::SIGCONT)
    }

    /// SIGTERM: it drains its sessions and exits; waits for that.
    pub async fn stop(&mut self) -> Result<std::process::ExitStatus> {
        self.signal(libc::SIGTERM)?;
        match tokio::time::timeout(STOP_WITHIN, self.child.wait()).await {
            Ok(status) => status.context("wait for the gateway"),
            Err(_) => {
                self.kill().await?;
                bail!("gateway {} did not exit within {STOP_WITHIN:?} of SIGTERM (killed)", self.spec.id)
            }
        }
    }

    /// Starts it again (after a kill or a stop) with the same id and on the
    /// same ports, so the nodes' configurations still name it; retries
    /// while the old listeners' ports are still being released.
    pub async fn restart(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_none() {
            bail!("gateway {} still runs", self.spec.id);
        }
        let ports = [port_of(&self.urls.gateway)?, port_of(&self.urls.http)?, port_of(&self.urls.https)?];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match Self::spawn(&self.exe, &self.store_url, &self.spec, Some(ports), &self.log).await {
                Ok((child, stdin, urls)) => {
                    (self.child, self._stdin, self.urls) = (child, stdin, urls);
                    return Ok(());
                }
                Err(e) if tokio::time::Instant::now() < deadline && format!("{e:#}").contains("bind") => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Every line it logged so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether it logged a line containing `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|l| l.contains(needle))
    }
}
