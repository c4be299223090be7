//! A TCP probe for the runner tests: this test binary, re-executed inside a
//! namespace with a filter that selects only [`probe`], which connects where
//! `BCD_RUNNER_PROBE` says and prints what happened on one marked line.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use daemon_harness::runner::Runner;

/// The variable carrying the probe's task: `connect <addr:port> <message>`.
pub const PROBE_VAR: &str = "BCD_RUNNER_PROBE";
/// The start of the probe's result line.
const MARK: &str = "probe-result:";

#[test]
#[ignore = "started by the runner tests inside namespaces, with BCD_RUNNER_PROBE set"]
fn probe() {
    let Ok(task) = std::env::var(PROBE_VAR) else { return };
    let mut words = task.splitn(3, ' ');
    let (Some("connect"), Some(addr), Some(message)) = (words.next(), words.next(), words.next()) else {
        println!("{MARK} error bad task {task:?}");
        return;
    };
    let result = match addr.parse::<SocketAddr>() {
        Err(e) => format!("error bad address {addr:?}: {e}"),
        Ok(addr) => match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
            Ok(mut stream) => {
                let local = stream.local_addr().map(|a| a.to_string()).unwrap_or_default();
                let mut reply = String::new();
                let exchanged = stream
                    .write_all(message.as_bytes())
                    .and_then(|()| stream.shutdown(std::net::Shutdown::Write))
                    .and_then(|()| stream.read_to_string(&mut reply));
                match exchanged {
                    Ok(_) => format!("connected {local} {reply}"),
                    Err(e) => format!("error after connecting: {e}"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => "refused".to_string(),
            Err(e) => format!("error {e}"),
        },
    };
    println!("{MARK} {result}");
}

/// Runs the probe through `runner`: connects to `target`, sends `message`,
/// and returns the result line (`connected <local addr> <reply>`,
/// `refused`, or `error …`).
pub async fn run(runner: &dyn Runner, target: SocketAddr, message: &str) -> Result<String> {
    let exe = std::env::current_exe().context("locating the test binary")?;
    let args: Vec<OsString> =
        ["probe::probe", "--exact", "--ignored", "--nocapture", "--test-threads=1"].map(OsString::from).to_vec();
    let env = [(PROBE_VAR.to_string(), format!("connect {target} {message}"))];
    let out = tokio::time::timeout(Duration::from_secs(30), runner.command(&exe, &args, &env).output())
        .await
        .context("the probe did not finish within 30 s")?
        .context("starting the probe")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // libtest prints "test probe::probe ... " on the same line, before the mark.
    match stdout.lines().find_map(|line| line.split_once(MARK).map(|(_, result)| result)) {
        Some(result) => Ok(result.trim().to_string()),
        None => {
            bail!("the probe printed no result ({}):\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr))
        }
    }
}

/// A one-connection server on `ip` (an ephemeral port): it reads the
/// client's message, answers `welcome`, and hands back the peer address and
/// the message. Returns the address to dial and the server's thread.
pub fn serve_once(ip: std::net::IpAddr) -> (SocketAddr, std::thread::JoinHandle<(SocketAddr, String)>) {
    let listener = std::net::TcpListener::bind((ip, 0)).expect("a listener on the gateway address");
    let target = listener.local_addr().expect("a bound listener has an address");
    let server = std::thread::spawn(move || {
        let (mut stream, peer) = listener.accept().expect("the probe connects");
        let mut message = String::new();
        stream.read_to_string(&mut message).expect("the probe sends its message");
        stream.write_all(b"welcome").expect("the answer is written");
        (peer, message)
    });
    (target, server)
}
