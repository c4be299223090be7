//! Where the bcd that runs under WSL comes from, and the Windows opt-in.
//!
//! WSL runs Linux binaries, so on Windows bcd is cross-compiled with
//! `GOOS=linux GOARCH=amd64`. Go is looked up on `PATH`, then at
//! `%ProgramFiles%\Go\bin\go.exe` and `C:\Program Files\Go\bin\go.exe` (where
//! the Go installer puts it, often not on the `PATH` of a test shell). Without
//! Go, a binary already built at `daemon/bin/bcd-linux-amd64` is used. Go is
//! preferred: a build follows the sources, a prebuilt binary may be stale.
//!
//! The scenarios are opt-in on Windows: they run only with `BCD_E2E=1`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where the Go installer puts `go.exe`.
pub const WINDOWS_GO: &str = r"C:\Program Files\Go\bin\go.exe";
/// The prebuilt bcd for WSL, relative to the bcd source tree (`daemon/`).
pub const PREBUILT_BCD: &str = "bin/bcd-linux-amd64";
/// The `GOOS` of a bcd built for WSL.
pub const GOOS: &str = "linux";
/// The `GOARCH` of a bcd built for WSL.
pub const GOARCH: &str = "amd64";
/// The variable that opts in to the end-to-end scenarios on Windows.
pub const OPT_IN_VAR: &str = "BCD_E2E";

/// How to get a bcd for WSL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BcdSource {
    /// Cross-compile with this `go` (`GOOS=linux GOARCH=amd64`).
    Build {
        /// The Go executable.
        go: PathBuf,
    },
    /// Use this binary as it is.
    Prebuilt {
        /// The `bcd-linux-amd64` binary.
        binary: PathBuf,
    },
}

/// The places to look for Go, in order: every `PATH` entry, then (for
/// Windows) `%ProgramFiles%\Go\bin\go.exe` and [`WINDOWS_GO`].
///
/// `windows` selects the rules (`;` between `PATH` entries, `go.exe`), so
/// that both can be tested anywhere.
pub fn go_candidates(path_var: Option<&OsStr>, program_files: Option<&OsStr>, windows: bool) -> Vec<PathBuf> {
    let (separator, exe) = if windows { (';', "go.exe") } else { (':', "go") };
    let mut out: Vec<PathBuf> = path_var
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
        .split(separator)
        .filter(|dir| !dir.is_empty())
        .map(|dir| join(dir, exe, windows))
        .collect();
    if windows {
        if let Some(pf) = program_files {
            out.push(join(&pf.to_string_lossy(), r"Go\bin\go.exe", true));
        }
        out.push(PathBuf::from(WINDOWS_GO));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

fn join(dir: &str, file: &str, windows: bool) -> PathBuf {
    let separator = if windows { '\\' } else { '/' };
    let dir = dir.trim_end_matches(['/', '\\']);
    PathBuf::from(format!("{dir}{separator}{file}"))
}

/// The first Go among `go_candidates` for which `exists` holds, else the
/// prebuilt binary under `daemon_dir` if `exists` holds for it.
pub fn locate_bcd_with(
    go_candidates: &[PathBuf],
    daemon_dir: &Path,
    exists: impl Fn(&Path) -> bool,
) -> Result<BcdSource> {
    if let Some(go) = go_candidates.iter().find(|p| exists(p)) {
        return Ok(BcdSource::Build { go: go.clone() });
    }
    let binary = daemon_dir.join(PREBUILT_BCD);
    if exists(&binary) {
        return Ok(BcdSource::Prebuilt { binary });
    }
    let mut tried = go_candidates.to_vec();
    tried.push(binary);
    Err(Error::NoBcd { tried })
}

/// [`locate_bcd_with`] on this machine: `PATH` and `ProgramFiles` from the
/// environment, the rules of the platform we run on, and regular files.
pub fn locate_bcd(daemon_dir: &Path) -> Result<BcdSource> {
    let candidates =
        go_candidates(std::env::var_os("PATH").as_deref(), std::env::var_os("ProgramFiles").as_deref(), cfg!(windows));
    locate_bcd_with(&candidates, daemon_dir, Path::is_file)
}

/// Whether the value of `BCD_E2E` opts in (exactly `1`).
pub fn opted_in(value: Option<&str>) -> bool {
    value == Some("1")
}

/// Whether the end-to-end scenarios may run here: always off Windows; on
/// Windows only with `BCD_E2E=1`.
pub fn e2e_enabled() -> bool {
    !cfg!(windows) || opted_in(std::env::var(OPT_IN_VAR).ok().as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_candidates_include_program_files() {
        let found = go_candidates(
            Some(OsStr::new(r"C:\Windows\system32;C:\tools\go\bin\;;")),
            Some(OsStr::new(r"D:\Programs")),
            true,
        );
        let expected = [
            r"C:\Windows\system32\go.exe",
            r"C:\tools\go\bin\go.exe",
            r"D:\Programs\Go\bin\go.exe",
            r"C:\Program Files\Go\bin\go.exe",
        ];
        assert_eq!(found, expected.map(PathBuf::from));
        // The default location is listed once, even when ProgramFiles names it.
        let found = go_candidates(None, Some(OsStr::new(r"C:\Program Files")), true);
        assert_eq!(found, [PathBuf::from(WINDOWS_GO)]);
    }

    #[test]
    fn unix_candidates_are_path_only() {
        let found = go_candidates(Some(OsStr::new("/usr/local/go/bin:/usr/bin")), None, false);
        assert_eq!(found, [PathBuf::from("/usr/local/go/bin/go"), PathBuf::from("/usr/bin/go")]);
    }

    #[test]
    fn go_is_preferred_over_a_prebuilt_binary() {
        let candidates = go_candidates(None, None, true);
        let daemon = Path::new("/w/daemon");
        let prebuilt = daemon.join(PREBUILT_BCD);
        let all = |_: &Path| true;
        assert_eq!(
            locate_bcd_with(&candidates, daemon, all).unwrap(),
            BcdSource::Build { go: PathBuf::from(WINDOWS_GO) }
        );
        let only_prebuilt = |p: &Path| p == prebuilt;
        assert_eq!(
            locate_bcd_with(&candidates, daemon, only_prebuilt).unwrap(),
            BcdSource::Prebuilt { binary: prebuilt.clone() }
        );
    }

    #[test]
    fn nothing_found_lists_what_was_tried() {
        let candidates = go_candidates(None, None, true);
        match locate_bcd_with(&candidates, Path::new("/w/daemon"), |_| false) {
            Err(Error::NoBcd { tried }) => {
                assert_eq!(tried, [PathBuf::from(WINDOWS_GO), Path::new("/w/daemon").join(PREBUILT_BCD)])
            }
            other => panic!("expected NoBcd, got {other:?}"),
        }
    }

    #[test]
    fn opt_in_is_exactly_one() {
        assert!(opted_in(Some("1")));
        for no in [None, Some(""), Some("0"), Some("true"), Some("yes")] {
            assert!(!opted_in(no), "{no:?}");
        }
    }
}
