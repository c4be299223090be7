//! A cargo build that says what it is doing and how far it is: `cargo
//! <subcommand> --message-format=json-render-diagnostics` (diagnostics still
//! go to standard error as cargo renders them), with the crates done out of
//! the crates `cargo tree` lists for the same selection, on standard error.
//! A build with nothing to compile prints nothing.
//!
//! cargo's messages are one JSON object a line; xtask depends on no JSON
//! library (ARCHITECTURE.md, "xtask"), so the few fields read here are
//! picked out of the line by their key.

use std::collections::HashSet;
use std::io::{BufRead as _, BufReader, IsTerminal as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// What to build: a label for people, the cargo subcommand and its
/// arguments, and the `cargo tree` arguments that list the same crates.
pub struct Build<'a> {
    /// What is built, in words (`fixtures (daemon-fixtures)`).
    pub label: &'a str,
    /// The cargo subcommand and its arguments (`build -p fixtures …`).
    pub args: &'a [&'a str],
    /// The selection for `cargo tree` (`-p fixtures -e normal,build`).
    pub tree: &'a [&'a str],
}

/// The value of a string field `"key":"…"` in a JSON line (cargo escapes
/// no quote inside the fields read here: package ids and target names).
fn field<'l>(line: &'l str, key: &str) -> Option<&'l str> {
    let pattern = format!("\"{key}\":\"");
    let start = line.find(&pattern)? + pattern.len();
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// One compiled (or fresh) artifact of cargo's messages.
#[derive(Debug, PartialEq, Eq)]
struct Artifact<'l> {
    package_id: &'l str,
    target: &'l str,
    fresh: bool,
}

/// The package's name in a package id (`registry+…#name@1.0.0`, or
/// `path+file:///…/name#0.1.0` for a path package named as its directory).
fn package_name(package_id: &str) -> &str {
    let (path, tail) = package_id.rsplit_once('#').unwrap_or((package_id, ""));
    match tail.split_once('@') {
        Some((name, _)) => name,
        None => path.rsplit('/').next().unwrap_or(path),
    }
}

fn artifact(line: &str) -> Option<Artifact<'_>> {
    if !line.contains("\"reason\":\"compiler-artifact\"") {
        return None;
    }
    let target = line.find("\"target\":{").map(|at| &line[at..]).and_then(|t| field(t, "name"))?;
    Some(Artifact { package_id: field(line, "package_id")?, target, fresh: line.contains("\"fresh\":true") })
}

/// How many distinct crates `cargo tree` lists for a selection.
fn crates_in(root: &Path, cargo: &str, tree: &[&str]) -> usize {
    let out = Command::new(cargo)
        .args(["tree", "--quiet", "--prefix", "none", "--format", "{p}"])
        .args(tree)
        .current_dir(root)
        .stderr(Stdio::null())
        .output();
    let Ok(out) = out else { return 0 };
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().map(|l| l.trim_end_matches(" (*)")).filter(|l| !l.is_empty()).collect::<HashSet<_>>().len()
}

/// The display: one line updated in place on a terminal, a line per tenth
/// otherwise; silent until a crate actually compiles.
struct Display<'a> {
    label: &'a str,
    terminal: bool,
    total: usize,
    done: HashSet<String>,
    compiled: HashSet<String>,
    tenth: usize,
}

impl Display<'_> {
    fn step(&mut self, a: &Artifact<'_>) {
        self.done.insert(a.package_id.to_string());
        if !a.fresh {
            self.compiled.insert(a.package_id.to_string());
        }
        if self.compiled.is_empty() {
            return;
        }
        let done = self.done.len();
        let total = self.total.max(done);
        let name = package_name(a.package_id);
        let text = format!("building {}: {done}/{total} crates ({name})", self.label);
        if self.terminal {
            eprint!("\r\x1b[2K{text}");
        } else if done * 10 / total > self.tenth {
            self.tenth = done * 10 / total;
            eprintln!("{text}");
        }
    }

    fn finish(&self, took: std::time::Duration) {
        if self.compiled.is_empty() {
            return;
        }
        let clear = if self.terminal { "\r\x1b[2K" } else { "" };
        let (label, secs, compiled, done) = (self.label, took.as_secs_f64(), self.compiled.len(), self.done.len());
        eprintln!("{clear}built {label} in {secs:.1} s ({compiled} of {done} crates compiled)");
    }
}

/// Runs the build, showing its progress on standard error.
pub fn build(root: &Path, cargo: &str, build: &Build<'_>) -> Result<()> {
    let started = Instant::now();
    let (subcommand, rest) = build.args.split_first().context("a cargo subcommand")?;
    // The flags go right after the subcommand: clippy passes what follows
    // `--` to the linter.
    let mut child = Command::new(cargo)
        .arg(subcommand)
        .args(["--quiet", "--message-format=json-render-diagnostics"])
        .args(rest)
        .current_dir(root)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("running cargo {}", build.args.join(" ")))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut display = Display {
        label: build.label,
        terminal: std::io::stderr().is_terminal(),
        total: 0,
        done: HashSet::new(),
        compiled: HashSet::new(),
        tenth: 0,
    };
    let mut counted = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo's messages")?;
        let Some(a) = artifact(&line) else { continue };
        if !a.fresh && !counted {
            // Only a build that compiles is worth the `cargo tree` call.
            display.total = crates_in(root, cargo, build.tree);
            counted = true;
        }
        display.step(&a);
    }
    let status = child.wait().context("waiting for cargo")?;
    if display.terminal && !display.compiled.is_empty() && !status.success() {
        eprintln!();
    }
    if !status.success() {
        bail!("cargo {} failed ({status})", build.args.join(" "));
    }
    display.finish(started.elapsed());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_are_read_off_cargos_json_lines() {
        let line = r#"{"reason":"compiler-artifact","package_id":"registry+https://github.com/rust-lang/crates.io-index#tss-esapi@7.6.0","manifest_path":"/x/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"tss_esapi","src_path":"/x/src/lib.rs"},"profile":{},"features":[],"filenames":[],"executable":null,"fresh":false}"#;
        let a = artifact(line).unwrap();
        assert_eq!(
            a,
            Artifact {
                package_id: "registry+https://github.com/rust-lang/crates.io-index#tss-esapi@7.6.0",
                target: "tss_esapi",
                fresh: false
            }
        );
        assert!(artifact(&line.replace("\"fresh\":false", "\"fresh\":true")).unwrap().fresh);
        assert_eq!(artifact(r#"{"reason":"build-script-executed","package_id":"p"}"#), None);
        assert_eq!(artifact(r#"{"reason":"build-finished","success":true}"#), None);
    }

    #[test]
    fn the_display_counts_distinct_crates() {
        let mut d =
            Display { label: "x", terminal: false, total: 2, done: HashSet::new(), compiled: HashSet::new(), tenth: 0 };
        d.step(&Artifact { package_id: "a", target: "a", fresh: true });
        assert!(d.compiled.is_empty(), "a fresh crate is not compiled");
        d.step(&Artifact { package_id: "b", target: "build-script-build", fresh: false });
        d.step(&Artifact { package_id: "b", target: "b", fresh: false });
        assert_eq!((d.done.len(), d.compiled.len(), d.tenth), (2, 1, 10));
        assert_eq!(package_name("registry+https://github.com/rust-lang/crates.io-index#tss-esapi@7.6.0"), "tss-esapi");
        assert_eq!(package_name("path+file:///work/pki#0.1.0"), "pki");
        assert_eq!(package_name("path+file:///work/proto/codegen#proto-codegen@0.1.0"), "proto-codegen");
    }
}
