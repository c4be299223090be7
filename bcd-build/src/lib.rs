//! Building bcd once per run, cached by a hash of the Go sources and the
//! build options: a second build with nothing changed is a lookup
//! (docs/harness.md, "Building bcd").
//!
//! The binary lands in `target/bcd-e2e/<hash>/bcd`; it is built into a
//! temporary name and renamed, so concurrent processes never see a
//! half-written file. `BCD_SRC` points the build at another bcd tree.
//!
//! The harness and the `devstack` binary (`devstack serve --sim`) both build
//! bcd through this crate. It links no system library, so anything that
//! needs a bcd can depend on it. A build reports its progress
//! ([`BuildEvent`]): the packages Go compiled out of those the binary needs
//! (`go build -v` against `go list -deps`).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

mod progress;

pub use progress::{Silent, StderrProgress};

/// Why bcd could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The Go executable could not be started.
    #[error("running `{go} {what}` (is Go 1.26 on PATH?): {source}")]
    Go {
        /// The Go executable.
        go: PathBuf,
        /// The subcommand (`build`, `list`).
        what: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `go list` or `go build` failed.
    #[error("go {what} of bcd failed ({status}):\n{stderr}")]
    Failed {
        /// The subcommand (`build`, `list`).
        what: &'static str,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed that was not progress.
        stderr: String,
    },
}

/// A result whose error is a build [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// How to build bcd.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BuildOptions {
    /// Build tags (`nonvml`, `fakehw`, …).
    pub tags: Vec<String>,
    /// The version stamped with `-X main.version=…`, if any.
    pub version: Option<String>,
    /// `GOOS`, when cross-building.
    pub goos: Option<String>,
    /// `GOARCH`, when cross-building.
    pub goarch: Option<String>,
    /// `-X main.neverConnect=true`: a fakehw bcd whose every dial fails, the
    /// release a self-update scenario must see rolled back.
    pub never_connect: bool,
}

impl BuildOptions {
    /// The fakehw build the scenarios and `devstack serve --sim` run: tags
    /// `nonvml,fakehw`.
    pub fn fakehw() -> Self {
        BuildOptions {
            tags: vec!["nonvml".into(), "fakehw".into()],
            version: None,
            goos: None,
            goarch: None,
            never_connect: false,
        }
    }

    /// The host build (tags `nonvml`): the real machine, libvirt through
    /// bcd helper; what the real-guest scenarios run.
    pub fn host() -> Self {
        BuildOptions { tags: vec!["nonvml".into()], ..Self::fakehw() }
    }

    /// The same build, reporting another version.
    pub fn with_version(mut self, version: &str) -> Self {
        self.version = Some(version.to_string());
        self
    }

    /// The same build, never connecting (only fakehw builds honour it).
    pub fn never_connecting(mut self) -> Self {
        self.never_connect = true;
        self
    }

    /// The same build, cross-compiled for WSL (`GOOS=linux GOARCH=amd64`).
    pub fn for_wsl(mut self) -> Self {
        self.goos = Some(wsl::locate::GOOS.to_string());
        self.goarch = Some(wsl::locate::GOARCH.to_string());
        self
    }

    /// The build in words, for progress lines: `bcd (nonvml,fakehw)`.
    pub fn describe(&self) -> String {
        let mut parts = vec![if self.tags.is_empty() { "no tags".to_string() } else { self.tags.join(",") }];
        if let Some(v) = &self.version {
            parts.push(format!("version {v}"));
        }
        if let (Some(os), Some(arch)) = (&self.goos, &self.goarch) {
            parts.push(format!("{os}/{arch}"));
        }
        if self.never_connect {
            parts.push("never connecting".into());
        }
        format!("bcd ({})", parts.join(", "))
    }
}

/// What a build is doing, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildEvent<'a> {
    /// The cache already has this build.
    Cached {
        /// The binary.
        binary: &'a Path,
    },
    /// Go is listing the packages the binary needs (it downloads missing
    /// modules first).
    Listing,
    /// Go started compiling; `packages` is how many the binary needs (Go
    /// compiles only those its own cache lacks).
    Compiling {
        /// How many packages the binary needs.
        packages: usize,
    },
    /// Go compiled one more package.
    Compiled {
        /// Packages compiled so far.
        done: usize,
        /// Packages the binary needs (an upper bound of `done`).
        total: usize,
        /// The package's import path.
        package: &'a str,
    },
    /// The binary is in the cache.
    Finished {
        /// The binary.
        binary: &'a Path,
        /// How long the build took.
        took: Duration,
    },
}

/// Where a build reports what it is doing.
pub trait Progress {
    /// Called at each step of a build.
    fn report(&mut self, what: &BuildOptions, event: BuildEvent<'_>);
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("bcd-build lives in the workspace").to_path_buf()
}

/// The bcd source tree: `BCD_SRC`, or the workspace's `daemon/`.
pub fn bcd_src() -> PathBuf {
    std::env::var_os("BCD_SRC").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("daemon"))
}

/// The cargo target directory (`CARGO_TARGET_DIR`, else the workspace's
/// `target/`), under which the cache lives.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// The cache key: every non-test Go file, go.mod and go.sum under `src`
/// (path and bytes, in path order), and the options.
pub fn source_hash(src: &Path, options: &BuildOptions) -> Result<String> {
    let mut files = Vec::new();
    collect(src, src, &mut files)?;
    files.sort();
    let mut h = Sha256::new();
    for rel in &files {
        h.update(rel.as_bytes());
        h.update([0]);
        let path = src.join(rel);
        h.update(std::fs::read(&path).map_err(io(&path))?);
        h.update([0]);
    }
    h.update(format!("{options:?}").as_bytes());
    Ok(hex::encode(&h.finalize()[..12]))
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().map_err(io(&path))?.is_dir() {
            if name != "testdata" && name != "bin" && !name.starts_with('.') {
                collect(root, &path, out)?;
            }
        } else if (name.ends_with(".go") && !name.ends_with("_test.go")) || name == "go.mod" || name == "go.sum" {
            out.push(path.strip_prefix(root).expect("under the root").to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// Where the cache keeps the build with `options` of the current sources.
pub fn cache_path(options: &BuildOptions) -> Result<PathBuf> {
    let key = source_hash(&bcd_src(), options)?;
    Ok(target_dir().join("bcd-e2e").join(key).join("bcd"))
}

/// The cached build with `options` of the current sources, if it was built.
pub fn cached(options: &BuildOptions) -> Option<PathBuf> {
    cache_path(options).ok().filter(|p| p.is_file())
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Builds bcd with `options` unless the cache has it, and returns its path;
/// a build that compiles prints its progress on standard error
/// ([`StderrProgress`]).
pub fn build_bcd(options: &BuildOptions) -> Result<PathBuf> {
    build_bcd_using(Path::new("go"), options)
}

/// [`build_bcd`] with the Go executable `go` (the WSL runner finds Go where
/// Windows installs it, off `PATH`).
pub fn build_bcd_using(go: &Path, options: &BuildOptions) -> Result<PathBuf> {
    build(go, options, &mut StderrProgress::new())
}

/// Builds bcd with `options` and the Go executable `go` unless the cache has
/// it, reporting to `progress`; returns the binary's path.
pub fn build(go: &Path, options: &BuildOptions, progress: &mut dyn Progress) -> Result<PathBuf> {
    let src = bcd_src();
    let binary = cache_path(options)?;
    let dir = binary.parent().expect("the cache path has a directory").to_path_buf();
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if binary.is_file() {
        progress.report(options, BuildEvent::Cached { binary: &binary });
        return Ok(binary);
    }
    let started = Instant::now();
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    progress.report(options, BuildEvent::Listing);
    let packages = list_packages(go, options, &src)?;
    progress.report(options, BuildEvent::Compiling { packages: packages.len() });
    let partial = dir.join(format!("bcd.partial.{}", std::process::id()));
    let mut cmd = go_command(go, options, &src);
    cmd.arg("build").arg("-v").arg("-trimpath").arg("-o").arg(&partial);
    cmd.args(tag_args(options));
    let mut ldflags = Vec::new();
    if let Some(version) = &options.version {
        ldflags.push(format!("-X main.version={version}"));
    }
    if options.never_connect {
        ldflags.push("-X main.neverConnect=true".to_string());
    }
    if !ldflags.is_empty() {
        cmd.arg("-ldflags").arg(ldflags.join(" "));
    }
    cmd.arg("./cmd/bcd");
    run_build(cmd, go, options, &packages, progress)?;
    std::fs::rename(&partial, &binary).map_err(io(&binary))?;
    progress.report(options, BuildEvent::Finished { binary: &binary, took: started.elapsed() });
    Ok(binary)
}

/// `go` in the bcd tree, with the cross-build environment and no cgo.
fn go_command(go: &Path, options: &BuildOptions, src: &Path) -> Command {
    let mut cmd = Command::new(go);
    if let Some(goos) = &options.goos {
        cmd.env("GOOS", goos);
    }
    if let Some(goarch) = &options.goarch {
        cmd.env("GOARCH", goarch);
    }
    cmd.env("CGO_ENABLED", "0").current_dir(src);
    cmd
}

fn tag_args(options: &BuildOptions) -> Vec<String> {
    if options.tags.is_empty() { Vec::new() } else { vec!["-tags".into(), options.tags.join(",")] }
}

/// The import paths of every package the binary needs (the standard
/// library's included, as `go build -v` names them).
fn list_packages(go: &Path, options: &BuildOptions, src: &Path) -> Result<Vec<String>> {
    let mut cmd = go_command(go, options, src);
    cmd.arg("list").arg("-deps").args(tag_args(options)).arg("./cmd/bcd");
    let out = cmd.output().map_err(|source| Error::Go { go: go.to_path_buf(), what: "list", source })?;
    if !out.status.success() {
        return Err(Error::Failed {
            what: "list",
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect())
}

/// Runs `go build -v`, reporting each package it names; the other lines
/// are the error message when it fails.
fn run_build(
    mut cmd: Command,
    go: &Path,
    options: &BuildOptions,
    packages: &[String],
    progress: &mut dyn Progress,
) -> Result<()> {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| Error::Go { go: go.to_path_buf(), what: "build", source })?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let known: std::collections::HashSet<&str> = packages.iter().map(String::as_str).collect();
    let mut done = 0;
    let mut other = String::new();
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        if known.contains(line.as_str()) {
            done += 1;
            progress.report(options, BuildEvent::Compiled { done, total: packages.len().max(done), package: &line });
        } else {
            other.push_str(&line);
            other.push('\n');
        }
    }
    let status = child.wait().map_err(|source| Error::Go { go: go.to_path_buf(), what: "build", source })?;
    if !status.success() {
        return Err(Error::Failed { what: "build", status, stderr: other });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_follows_sources_and_options() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("go.mod"), "module x\n").unwrap();
        std::fs::write(dir.path().join("a.go"), "package x\n").unwrap();
        std::fs::write(dir.path().join("a_test.go"), "package x\n").unwrap();
        let base = source_hash(dir.path(), &BuildOptions::fakehw()).unwrap();
        assert_eq!(base, source_hash(dir.path(), &BuildOptions::fakehw()).unwrap());
        std::fs::write(dir.path().join("a_test.go"), "package x // changed\n").unwrap();
        assert_eq!(base, source_hash(dir.path(), &BuildOptions::fakehw()).unwrap(), "tests do not change the binary");
        assert_ne!(base, source_hash(dir.path(), &BuildOptions::fakehw().with_version("0.9.0")).unwrap());
        let never = BuildOptions::fakehw().with_version("0.9.1").never_connecting();
        assert_ne!(
            source_hash(dir.path(), &never).unwrap(),
            source_hash(dir.path(), &BuildOptions::fakehw().with_version("0.9.1")).unwrap()
        );
        std::fs::write(dir.path().join("a.go"), "package x // changed\n").unwrap();
        assert_ne!(base, source_hash(dir.path(), &BuildOptions::fakehw()).unwrap());
    }

    #[test]
    fn a_build_is_described_in_words() {
        assert_eq!(BuildOptions::fakehw().describe(), "bcd (nonvml,fakehw)");
        let other = BuildOptions::fakehw().with_version("0.9.1").never_connecting().for_wsl();
        assert_eq!(other.describe(), "bcd (nonvml,fakehw, version 0.9.1, linux/amd64, never connecting)");
    }
}
