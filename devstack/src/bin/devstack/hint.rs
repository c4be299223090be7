//! The `bcd` a hint names (docs/devstack.md, "devstack serve"): one that
//! exists, so a person can paste the line. `bcd` when one is on PATH, else
//! the fakehw build the harness and `serve --sim` cache (under
//! `target/bcd-e2e/`), else `bcd` with how to get one (`cargo xtask
//! build-bcd`, which builds that one and prints its path).

use std::path::PathBuf;

use bcd_build::BuildOptions;

/// How to get a bcd when there is none.
pub const BUILD: &str = "no bcd built yet: `cargo xtask build-bcd` builds one (fakehw) and prints its path";

/// A `bcd` on PATH.
fn on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("bcd")).find(|p| p.is_file())
}

/// The bcd to name, and a note when it does not exist yet.
pub fn bcd() -> (String, Option<&'static str>) {
    if on_path().is_some() {
        return ("bcd".into(), None);
    }
    match bcd_build::cached(&BuildOptions::fakehw()) {
        Some(path) => (path.display().to_string(), None),
        None => ("bcd".into(), Some(BUILD)),
    }
}
