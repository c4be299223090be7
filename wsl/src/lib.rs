//! WSL from the Windows side, for running bcd in a WSL distribution under
//! test (docs/harness.md, "wsl").
//!
//! - [`list`]: discovery from the UTF-16LE output of `wsl.exe --list --quiet`;
//! - [`command`]: `wsl.exe -d <distro> -e <program> <args…>` as an argv, never
//!   a shell string, and `WSLENV` for the environment;
//! - [`path`]: Windows paths to paths inside the distribution;
//! - [`route`]: the distribution's default gateway, where it reaches Windows;
//! - [`locate`]: Go or a prebuilt `bcd-linux-amd64`, and the `BCD_E2E=1` opt-in.
//!
//! [`Wsl`] runs a `wsl.exe`: the real one on Windows, or on Linux the shim
//! `scripts/wsl.exe`, which plays it over a network namespace. Everything but
//! [`Wsl`]'s methods is pure and tested on any platform.

pub mod command;
pub mod error;
pub mod list;
pub mod locate;
pub mod path;
pub mod route;

use std::ffi::{OsStr, OsString};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use command::{exec_args, validate_distro, wslenv};
pub use error::{Error, Result};
pub use list::{parse_list, pick_distro};
pub use locate::{BcdSource, e2e_enabled, locate_bcd};
pub use path::{is_windows_absolute, path_to_wsl, to_wsl_path};
pub use route::parse_default_route;

/// The variable that makes `wsl.exe` print UTF-8 instead of UTF-16LE.
const UTF8_VAR: &str = "WSL_UTF8";

/// A `wsl.exe` to run, with environment variables set on every run of it.
#[derive(Debug, Clone)]
pub struct Wsl {
    exe: PathBuf,
    env: Vec<(OsString, OsString)>,
}

impl Wsl {
    /// The `wsl.exe` at `exe` (on Windows usually just `wsl.exe`, found on
    /// `PATH`; on Linux the shim's path).
    pub fn new(exe: impl Into<PathBuf>) -> Self {
        Wsl { exe: exe.into(), env: Vec::new() }
    }

    /// Sets `key=value` in the environment of every run of `wsl.exe` (the
    /// shim's knobs, for instance). This does not reach programs inside the
    /// distribution unless `WSLENV` lists it.
    pub fn with_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        let key = key.into();
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.into()));
        self
    }

    /// The `wsl.exe` this runs.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// The environment set on every run.
    pub fn env(&self) -> &[(OsString, OsString)] {
        &self.env
    }

    /// A bare `wsl.exe` command with this environment.
    pub fn base_command(&self) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// The command `wsl.exe -d <distro> -e <program> <args…>`, without a shell.
    pub fn exec_command(&self, distro: &str, program: &OsStr, args: &[OsString]) -> Result<Command> {
        let argv = exec_args(distro, program, args)?;
        let mut cmd = self.base_command();
        cmd.args(argv);
        Ok(cmd)
    }

    /// The installed distributions, from `wsl.exe --list --quiet`.
    pub fn list(&self) -> Result<Vec<String>> {
        let mut cmd = self.base_command();
        cmd.args(["--list", "--quiet"]).env_remove(UTF8_VAR);
        let stdout = self.output(cmd)?;
        parse_list(&stdout)
    }

    /// Runs `program args…` in `distro` and returns its standard output;
    /// fails unless it exits 0.
    pub fn run(&self, distro: &str, program: &OsStr, args: &[OsString]) -> Result<Vec<u8>> {
        self.output(self.exec_command(distro, program, args)?)
    }

    /// The gateway of `distro`'s default route, from `ip route show default`
    /// run inside it: where it reaches a listener on the Windows side.
    pub fn default_gateway(&self, distro: &str) -> Result<IpAddr> {
        let args = ["route", "show", "default"].map(OsString::from);
        let out = self.run(distro, OsStr::new("ip"), &args)?;
        let text = String::from_utf8(out).map_err(|_| Error::NotUtf8 { what: "ip route show default".into() })?;
        parse_default_route(&text)
    }

    fn output(&self, mut cmd: Command) -> Result<Vec<u8>> {
        let out = cmd.output().map_err(|source| Error::Spawn { exe: self.exe.clone(), source })?;
        if !out.status.success() {
            return Err(Error::Failed {
                exe: self.exe.clone(),
                args: cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect(),
                status: out.status.code(),
                output: match list::decode_console_lossy(&out.stderr) {
                    stderr if stderr.is_empty() => list::decode_console_lossy(&out.stdout),
                    stderr => stderr,
                },
            });
        }
        Ok(out.stdout)
    }
}
