//! Tests of the runners themselves: the `netns` runner, and the WSL runner
//! over the `scripts/wsl.exe` shim on Linux (or over the real `wsl.exe` on
//! Windows, with `BCD_E2E=1`). On Linux they need root and iproute2; without
//! them they are skipped with a reason (and fail under `CI=true`).
//!
//! Programs run inside are real tools (`ip`, `sleep`, `printf`, `env`,
//! `sh`), bcd, or this test binary itself, re-executed as a TCP probe
//! ([`probe`]).

#[cfg(target_os = "linux")]
mod netns;
#[cfg(target_os = "linux")]
mod probe;
mod wsl;
