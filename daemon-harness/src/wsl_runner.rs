//! The `wsl` runner: bcd inside a WSL distribution, started with
//! `wsl.exe -d <distro> -e <bcd> <args…>` (never a shell), reaching the
//! test's listeners at the distribution's default gateway
//! (`BCD_E2E_RUNNER=wsl`).
//!
//! The `wsl.exe` it runs is configurable: on Windows the real one; on Linux
//! `scripts/wsl.exe`, a shim that plays a distribution with a network
//! namespace ([`WslRunner::with_shim`] creates that namespace and removes it
//! when dropped). Everything else — discovery, the argv, `WSLENV`, path
//! translation, the default route — is the `wsl` crate's, the same code on
//! both platforms.
//!
//! What crosses into the distribution:
//! - arguments, one argv entry each; when paths are translated (the real
//!   WSL), the program and every argument that is an absolute Windows path
//!   become paths inside the distribution (`C:\x` → `/mnt/c/x`);
//! - the environment given to [`Runner::command`], listed in `WSLENV` (the
//!   only way a variable reaches Linux through `wsl.exe`).
//!
//! Under real WSL, files under `/mnt/c` have no Unix permissions; a data dir
//! for bcd is better inside the distribution, which Windows sees at
//! [`WslRunner::windows_path_of`] (`\\wsl.localhost\<distro>\tmp\…`).
//!
//! Environment of [`WslRunner::from_env`]: `BCD_E2E_WSL_EXE` (the `wsl.exe`
//! to run; default `wsl.exe` on Windows, the shim elsewhere) and
//! `BCD_E2E_WSL_DISTRO` (default: the first distribution listed that is not
//! Docker Desktop's; under the shim, its namespace).

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::build::{BuildOptions, bcd_src, build_bcd_using, workspace_root};
use crate::runner::Runner;

/// The shim's knob naming the namespace that plays the distribution.
pub const SHIM_NETNS_VAR: &str = "WSL_SHIM_NETNS";

/// bcd inside a WSL distribution.
#[derive(Debug)]
pub struct WslRunner {
    wsl: wsl::Wsl,
    distro: String,
    gateway: IpAddr,
    translate_paths: bool,
    #[cfg(target_os = "linux")]
    shim_netns: Option<crate::netns::Netns>,
}

impl WslRunner {
    /// The runner over `wsl` in `distro` (or the one [`wsl::pick_distro`]
    /// picks from `wsl.exe --list --quiet`), with its default gateway read
    /// through `wsl.exe -e ip route show default`. `translate_paths` turns
    /// absolute Windows paths in the program and arguments into paths inside
    /// the distribution (on for the real `wsl.exe`).
    pub fn new(wsl: wsl::Wsl, distro: Option<&str>, translate_paths: bool) -> Result<Self> {
        let installed = wsl.list().with_context(|| format!("listing WSL distributions with {:?}", wsl.exe()))?;
        let distro = wsl::pick_distro(&installed, distro)?;
        let gateway = wsl.default_gateway(&distro).with_context(|| format!("reading the default route of {distro}"))?;
        Ok(WslRunner {
            wsl,
            distro,
            gateway,
            translate_paths,
            #[cfg(target_os = "linux")]
            shim_netns: None,
        })
    }

    /// On Linux: the runner over the shim `scripts/wsl.exe` (or `shim`), in a
    /// fresh namespace `bcdwsl-<pid>-<n>` that plays the distribution of the
    /// same name. No path translation: the paths are Linux paths already.
    #[cfg(target_os = "linux")]
    pub fn with_shim(shim: Option<&Path>) -> Result<Self> {
        let netns = crate::netns::Netns::create(crate::netns::WSL_SHIM_PREFIX)
            .context("creating the namespace that plays the WSL distribution")?;
        let exe = shim.map(Path::to_path_buf).unwrap_or_else(shim_path);
        let wsl = wsl::Wsl::new(exe).with_env(SHIM_NETNS_VAR, netns.name());
        let mut runner = WslRunner::new(wsl, Some(netns.name()), false)?;
        runner.shim_netns = Some(netns);
        Ok(runner)
    }

    /// The runner `BCD_E2E_WSL_EXE` and `BCD_E2E_WSL_DISTRO` describe (see
    /// the module documentation). On Windows it refuses to run without the
    /// `BCD_E2E=1` opt-in.
    pub fn from_env() -> Result<Self> {
        let exe = std::env::var_os("BCD_E2E_WSL_EXE").map(PathBuf::from);
        let distro = std::env::var("BCD_E2E_WSL_DISTRO").ok().filter(|d| !d.is_empty());
        if cfg!(windows) {
            if !wsl::e2e_enabled() {
                bail!("the WSL scenarios are opt-in on Windows: set BCD_E2E=1");
            }
            let exe = exe.unwrap_or_else(|| PathBuf::from("wsl.exe"));
            return WslRunner::new(wsl::Wsl::new(exe), distro.as_deref(), true);
        }
        #[cfg(target_os = "linux")]
        {
            if distro.is_some() {
                bail!("BCD_E2E_WSL_DISTRO has no meaning under the shim: it plays one distribution, its namespace");
            }
            WslRunner::with_shim(exe.as_deref())
        }
        #[cfg(not(target_os = "linux"))]
        bail!("the WSL runner runs on Windows, or on Linux over the shim")
    }

    /// The distribution bcd runs in.
    pub fn distro(&self) -> &str {
        &self.distro
    }

    /// The distribution's default gateway: where bcd reaches the test.
    pub fn gateway(&self) -> IpAddr {
        self.gateway
    }

    /// The `wsl.exe` this runs.
    pub fn wsl(&self) -> &wsl::Wsl {
        &self.wsl
    }

    /// The namespace that plays the distribution, under the shim.
    #[cfg(target_os = "linux")]
    pub fn shim_netns(&self) -> Option<&crate::netns::Netns> {
        self.shim_netns.as_ref()
    }

    /// The path of `path` inside the distribution: translated from Windows
    /// when this runner translates paths, else unchanged.
    pub fn distro_path(&self, path: &Path) -> Result<String> {
        if self.translate_paths {
            Ok(wsl::path_to_wsl(path, &self.distro)?)
        } else {
            path.to_str().map(str::to_string).with_context(|| format!("{} is not valid Unicode", path.display()))
        }
    }

    /// How the test sees `linux_path` (absolute, inside the distribution):
    /// `\\wsl.localhost\<distro>\…` under real WSL, unchanged under the shim.
    pub fn windows_path_of(&self, linux_path: &str) -> PathBuf {
        if self.translate_paths {
            PathBuf::from(format!(r"\\wsl.localhost\{}{}", self.distro, linux_path.replace('/', "\\")))
        } else {
            PathBuf::from(linux_path)
        }
    }

    fn translate_arg(&self, arg: &OsString) -> OsString {
        if !self.translate_paths {
            return arg.clone();
        }
        match arg.to_str() {
            Some(s) if wsl::is_windows_absolute(s) => match wsl::to_wsl_path(s, &self.distro) {
                Ok(translated) => OsString::from(translated),
                Err(e) => {
                    // Passed on unchanged: the program inside reports the path it cannot open.
                    eprintln!("wsl runner: {e}; passing {s:?} unchanged");
                    arg.clone()
                }
            },
            _ => arg.clone(),
        }
    }
}

impl Runner for WslRunner {
    fn name(&self) -> &'static str {
        "wsl"
    }

    fn command(&self, program: &Path, args: &[OsString], env: &[(String, String)]) -> tokio::process::Command {
        let program = self.translate_arg(&program.as_os_str().to_os_string());
        let args: Vec<OsString> = args.iter().map(|a| self.translate_arg(a)).collect();
        let argv = wsl::exec_args(&self.distro, &program, &args).unwrap_or_else(|e| {
            // The distro was validated when the runner was made; what is left
            // (an empty program, a NUL) fails at spawn or in wsl.exe itself.
            eprintln!("wsl runner: {e}");
            let mut argv = vec!["-d".into(), self.distro.clone().into(), "-e".into(), program.clone()];
            argv.extend(args.iter().cloned());
            argv
        });
        let mut cmd = tokio::process::Command::new(self.wsl.exe());
        cmd.args(argv).envs(self.wsl.env().iter().map(|(k, v)| (k, v)));
        if !env.is_empty() {
            let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
            let existing = std::env::var("WSLENV").ok();
            match wsl::wslenv(existing.as_deref(), &names) {
                Ok(list) => {
                    cmd.env("WSLENV", list);
                }
                Err(e) => eprintln!("wsl runner: {e}; the environment does not reach the distribution"),
            }
            cmd.envs(env.iter().map(|(k, v)| (k, v)));
        }
        cmd
    }

    /// The distribution's default gateway; a listener must bind to it (or
    /// to 0.0.0.0) and its serving certificate must name it.
    fn gateway_host(&self) -> String {
        self.gateway.to_string()
    }

    fn daemon_path(&self, path: &Path) -> Result<String> {
        self.distro_path(path)
    }
}

/// The Linux `wsl.exe` shim: `scripts/wsl.exe` in the workspace.
pub fn shim_path() -> PathBuf {
    workspace_root().join("scripts").join("wsl.exe")
}

/// The bcd to run under WSL: cross-compiled for `linux/amd64` with the Go
/// the `wsl` crate locates (cached like every build), or an existing
/// `daemon/bin/bcd-linux-amd64` when there is no Go.
pub fn bcd_for_wsl() -> Result<PathBuf> {
    match wsl::locate_bcd(&bcd_src())? {
        wsl::BcdSource::Build { go } => Ok(build_bcd_using(&go, &BuildOptions::fakehw().for_wsl())?),
        wsl::BcdSource::Prebuilt { binary } => Ok(binary),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runner as on Windows (paths translated), without running wsl.exe.
    fn windows_like() -> WslRunner {
        WslRunner {
            wsl: wsl::Wsl::new("wsl.exe"),
            distro: "Ubuntu".into(),
            gateway: "172.22.96.1".parse().unwrap(),
            translate_paths: true,
            #[cfg(target_os = "linux")]
            shim_netns: None,
        }
    }

    #[test]
    fn windows_paths_are_translated_in_program_and_arguments() {
        let runner = windows_like();
        let args: Vec<OsString> = [
            "node",
            "--config",
            r"C:\Users\me\AppData\Local\Temp\bcd-e2e-n1\config.toml",
            r"\\wsl.localhost\Ubuntu\tmp\bcd e2e",
            r"--flag=C:\x",
            r"\\server\share\x",
            "$HOME and 'quotes'",
        ]
        .map(OsString::from)
        .to_vec();
        let env = [("BCD_FAKEHW_SEED".to_string(), "seed".to_string())];
        let cmd = runner.command(Path::new(r"C:\work\target\bcd-e2e\abc\bcd"), &args, &env);
        let cmd = cmd.as_std();
        assert_eq!(cmd.get_program(), "wsl.exe");
        let argv: Vec<_> = cmd.get_args().collect();
        assert_eq!(
            argv,
            [
                "-d",
                "Ubuntu",
                "-e",
                "/mnt/c/work/target/bcd-e2e/abc/bcd",
                "node",
                "--config",
                "/mnt/c/Users/me/AppData/Local/Temp/bcd-e2e-n1/config.toml",
                "/tmp/bcd e2e",
                r"--flag=C:\x",
                r"\\server\share\x",
                "$HOME and 'quotes'",
            ]
        );
        let envs: Vec<_> = cmd.get_envs().collect();
        let wslenv = wsl::wslenv(std::env::var("WSLENV").ok().as_deref(), &["BCD_FAKEHW_SEED"]).unwrap();
        assert!(envs.contains(&("WSLENV".as_ref(), Some(wslenv.as_ref()))), "{envs:?}");
        assert!(envs.contains(&("BCD_FAKEHW_SEED".as_ref(), Some("seed".as_ref()))), "{envs:?}");
    }

    #[test]
    fn paths_for_the_daemon_and_back() {
        let runner = windows_like();
        assert_eq!(runner.daemon_path(Path::new(r"C:\x\data")).unwrap(), "/mnt/c/x/data");
        assert!(runner.daemon_path(Path::new(r"\\server\share\x")).is_err());
        assert_eq!(runner.windows_path_of("/tmp/bcd"), PathBuf::from(r"\\wsl.localhost\Ubuntu\tmp\bcd"));
        assert_eq!(runner.gateway_host(), "172.22.96.1");
    }

    #[test]
    fn without_translation_everything_is_passed_as_is() {
        let runner = WslRunner { translate_paths: false, ..windows_like() };
        let args = [OsString::from(r"C:\x")];
        let cmd = runner.command(Path::new("/usr/bin/printf"), &args, &[]);
        let argv: Vec<_> = cmd.as_std().get_args().collect();
        assert_eq!(argv, ["-d", "Ubuntu", "-e", "/usr/bin/printf", r"C:\x"]);
        assert!(cmd.as_std().get_envs().all(|(k, _)| k != "WSLENV"), "no WSLENV without an environment");
        assert_eq!(runner.daemon_path(Path::new("/tmp/x")).unwrap(), "/tmp/x");
    }
}
