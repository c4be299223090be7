//! Runners: how a bcd process is started. One trait, several places to run
//! (docs/harness.md, "Runners"): `native` here, `netns` ([`crate::netns`])
//! and `wsl` ([`crate::wsl_runner`]). The private namespaces of
//! `cargo xtask helper-e2e` are not a runner: `scripts/helper-e2e-ns.sh`
//! makes them (docs/harness.md, "The unshare place").
//!
//! A scenario binds its listeners (the dev stack's external TLS listener) to
//! [`Runner::gateway_host`] and puts that address in the serving
//! certificate: 127.0.0.1 natively, the host side of the veth pair under
//! `netns`, the distribution's default gateway under `wsl`. Paths it writes
//! into bcd's configuration go through [`Runner::daemon_path`].

use std::ffi::OsString;
use std::path::Path;

/// Starts bcd processes somewhere.
pub trait Runner: Send + Sync {
    /// The runner's name (`native`, `netns`, …).
    fn name(&self) -> &'static str;
    /// The command that runs `program args…` with `env`.
    fn command(&self, program: &Path, args: &[OsString], env: &[(String, String)]) -> tokio::process::Command;
    /// The address bcd dials to reach a listener of the test. The listener
    /// must bind to this address (it is one of the host's), and a TLS
    /// listener's certificate must name it.
    fn gateway_host(&self) -> String {
        "127.0.0.1".to_string()
    }
    /// How bcd sees the test's `path` (for `config.toml`): unchanged, except
    /// under WSL on Windows, where `C:\x` is `/mnt/c/x`.
    fn daemon_path(&self, path: &Path) -> anyhow::Result<String> {
        path.to_str().map(str::to_string).ok_or_else(|| anyhow::anyhow!("{} is not valid Unicode", path.display()))
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

/// The runner `BCD_E2E_RUNNER` names (default `native`): `native`, `netns`
/// (a fresh network namespace, removed when the runner is dropped) or `wsl`
/// ([`crate::wsl_runner::WslRunner::from_env`]; on Linux over the shim).
pub fn from_env() -> anyhow::Result<std::sync::Arc<dyn Runner>> {
    match std::env::var("BCD_E2E_RUNNER").as_deref() {
        Err(_) | Ok("") | Ok("native") => Ok(std::sync::Arc::new(Native)),
        #[cfg(target_os = "linux")]
        Ok("netns") => Ok(std::sync::Arc::new(crate::netns::NetnsRunner::new()?)),
        Ok("wsl") => Ok(std::sync::Arc::new(crate::wsl_runner::WslRunner::from_env()?)),
        Ok(other) => anyhow::bail!("unknown BCD_E2E_RUNNER {other:?} (known: native, netns, wsl)"),
    }
}

/// The prerequisites of the runner `BCD_E2E_RUNNER` names, checked with
/// [`crate::prereq::require`]: false (skip) when missing locally, a panic
/// under CI.
pub fn require_runner(scenario: &str) -> bool {
    match std::env::var("BCD_E2E_RUNNER").as_deref() {
        #[cfg(target_os = "linux")]
        Ok("netns") | Ok("wsl") => crate::prereq::require_netns(scenario),
        #[cfg(not(target_os = "linux"))]
        Ok("wsl") if !wsl::e2e_enabled() => {
            eprintln!(
                "skipped {scenario}: the WSL scenarios are opt-in on Windows (set {}=1)",
                wsl::locate::OPT_IN_VAR
            );
            false
        }
        _ => true,
    }
}
