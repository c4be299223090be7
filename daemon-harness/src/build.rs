//! Building bcd once per run, cached by a hash of the Go sources and the
//! build options: a second build with nothing changed is a lookup.
//!
//! The binary lands in `target/bcd-e2e/<hash>/bcd`; it is built into a
//! temporary name and renamed, so concurrent test processes never see a
//! half-written file. `BCD_SRC` points the harness at another bcd tree.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

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
    /// The fakehw build the scenarios run: tags `nonvml,fakehw`.
    pub fn fakehw() -> Self {
        BuildOptions {
            tags: vec!["nonvml".into(), "fakehw".into()],
            version: None,
            goos: None,
            goarch: None,
            never_connect: false,
        }
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
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the harness lives in the workspace").to_path_buf()
}

/// The bcd source tree: `BCD_SRC`, or the workspace's `daemon/`.
pub fn bcd_src() -> PathBuf {
    std::env::var_os("BCD_SRC").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("daemon"))
}

fn target_dir() -> PathBuf {
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
        h.update(std::fs::read(src.join(rel)).with_context(|| format!("reading {rel}"))?);
        h.update([0]);
    }
    h.update(format!("{options:?}").as_bytes());
    Ok(hex::encode(&h.finalize()[..12]))
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            if name != "testdata" && name != "bin" && !name.starts_with('.') {
                collect(root, &path, out)?;
            }
        } else if (name.ends_with(".go") && !name.ends_with("_test.go")) || name == "go.mod" || name == "go.sum" {
            out.push(path.strip_prefix(root).expect("under the root").to_string_lossy().into_owned());
        }
    }
    Ok(())
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Builds bcd with `options` unless the cache has it, and returns its path.
pub fn build_bcd(options: &BuildOptions) -> Result<PathBuf> {
    build_bcd_using(Path::new("go"), options)
}

/// [`build_bcd`] with the Go executable `go` (the WSL runner finds Go where
/// Windows installs it, off `PATH`).
pub fn build_bcd_using(go: &Path, options: &BuildOptions) -> Result<PathBuf> {
    let src = bcd_src();
    let key = source_hash(&src, options)?;
    let dir = target_dir().join("bcd-e2e").join(&key);
    let binary = dir.join("bcd");
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if binary.is_file() {
        return Ok(binary);
    }
    std::fs::create_dir_all(&dir)?;
    let partial = dir.join(format!("bcd.partial.{}", std::process::id()));
    let mut cmd = Command::new(go);
    cmd.arg("build").arg("-trimpath").arg("-o").arg(&partial);
    if !options.tags.is_empty() {
        cmd.arg("-tags").arg(options.tags.join(","));
    }
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
    if let Some(goos) = &options.goos {
        cmd.env("GOOS", goos);
    }
    if let Some(goarch) = &options.goarch {
        cmd.env("GOARCH", goarch);
    }
    cmd.env("CGO_ENABLED", "0").arg("./cmd/bcd").current_dir(&src);
    let out = cmd.output().with_context(|| format!("running `{} build` (is Go 1.26 on PATH?)", go.display()))?;
    if !out.status.success() {
        bail!("go build of bcd failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    std::fs::rename(&partial, &binary)?;
    Ok(binary)
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
}
