//! Prerequisites of a scenario (Go, swtpm, root for namespaces): present, or
//! a one-line skip locally and a failure under `CI=true`.

use std::process::Command;

/// Whether we run under CI (`CI=true`), where a missing prerequisite fails.
pub fn under_ci() -> bool {
    std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false)
}

/// Whether `program --version` (or `version`) runs.
pub fn have_program(program: &str, version_arg: &str) -> bool {
    Command::new(program).arg(version_arg).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Whether we are root.
#[cfg(unix)]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether we are root: never, off Unix.
#[cfg(not(unix))]
pub fn is_root() -> bool {
    false
}

/// Checks one prerequisite for `scenario`. Returns true when present; when
/// missing, panics under CI and otherwise prints why the scenario is skipped
/// and returns false.
pub fn require(scenario: &str, what: &str, present: bool) -> bool {
    if present {
        return true;
    }
    if under_ci() {
        panic!("{scenario}: missing prerequisite: {what} (CI=true makes this a failure)");
    }
    eprintln!("skipped {scenario}: missing prerequisite: {what}");
    false
}

/// Go on PATH.
pub fn require_go(scenario: &str) -> bool {
    require(scenario, "go (Go 1.26 on PATH)", have_program("go", "version"))
}

/// Root and iproute2, for the `netns` runner and the WSL shim.
#[cfg(target_os = "linux")]
pub fn require_netns(scenario: &str) -> bool {
    require(scenario, "root and iproute2 (`ip netns`) for network namespaces", crate::netns::available())
}
