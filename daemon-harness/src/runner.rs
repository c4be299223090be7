//! Runners: how a bcd process is started. One trait, several places to run
//! (DESIGN.md §7): `native` here; `netns`, `unshare` and `wsl` join it.

use std::ffi::OsString;
use std::path::Path;

/// Starts bcd processes somewhere.
pub trait Runner: Send + Sync {
    /// The runner's name (`native`, `netns`, …).
    fn name(&self) -> &'static str;
    /// The command that runs `program args…` with `env`.
    fn command(&self, program: &Path, args: &[OsString], env: &[(String, String)]) -> tokio::process::Command;
    /// The host bcd dials to reach a listener the test bound on loopback.
    fn gateway_host(&self) -> String {
        "127.0.0.1".to_string()
    }
}

/// bcd as a child process of the test.
pub struct Native;

impl Runner for Native {
    fn name(&self) -> &'static str {
        "native"
    }

    fn command(&self, program: &Path, args: &[OsString], env: &[(String, String)]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

/// The runner `BCD_E2E_RUNNER` names (default `native`).
pub fn from_env() -> anyhow::Result<std::sync::Arc<dyn Runner>> {
    match std::env::var("BCD_E2E_RUNNER").as_deref() {
        Err(_) | Ok("") | Ok("native") => Ok(std::sync::Arc::new(Native)),
        Ok(other) => anyhow::bail!("unknown BCD_E2E_RUNNER {other:?} (known: native)"),
    }
}
