//! The refusals of the `wsl` crate: one variant per defect, with the input
//! that caused it.

use std::path::PathBuf;

use thiserror::Error;

/// Why a WSL operation failed or an input was refused.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    // ---- discovery ----
    /// The output of `wsl.exe --list --quiet` has an odd number of bytes, so it is not UTF-16LE.
    #[error("`wsl.exe --list --quiet` printed {len} bytes, an odd count: not UTF-16LE")]
    ListOddLength {
        /// The number of bytes printed.
        len: usize,
    },
    /// The output of `wsl.exe --list --quiet` is not valid UTF-16 (an unpaired surrogate).
    #[error("`wsl.exe --list --quiet` printed invalid UTF-16LE (unpaired surrogate at code unit {unit})")]
    ListInvalidUtf16 {
        /// The index of the first offending code unit.
        unit: usize,
    },
    /// No WSL distribution is installed (or all of them are Docker Desktop's).
    #[error("no usable WSL distribution is installed (found {installed:?})")]
    NoDistribution {
        /// What `--list --quiet` printed, possibly empty.
        installed: Vec<String>,
    },
    /// The distribution asked for is not installed.
    #[error("WSL distribution {wanted:?} is not installed (found {installed:?})")]
    DistroNotInstalled {
        /// The distribution asked for.
        wanted: String,
        /// What `--list --quiet` printed.
        installed: Vec<String>,
    },

    // ---- command lines ----
    /// A distribution name that `wsl.exe -d` would not take as one argument naming a distribution.
    #[error("invalid WSL distribution name {name:?} (letters, digits, '.', '_', '-'; not starting with '-')")]
    InvalidDistroName {
        /// The refused name.
        name: String,
    },
    /// An empty program, or one containing a NUL.
    #[error("invalid program {program:?} for `wsl.exe -e` (empty or contains NUL)")]
    InvalidProgram {
        /// The refused program, lossily converted.
        program: String,
    },
    /// An argument containing a NUL, which no argv can carry.
    #[error("argument {index} contains a NUL byte")]
    ArgumentContainsNul {
        /// The index of the argument after the program.
        index: usize,
    },
    /// An environment variable name that `WSLENV` cannot carry.
    #[error("environment variable name {name:?} cannot be listed in WSLENV (empty, or contains ':', '/', '=' or NUL)")]
    InvalidEnvName {
        /// The refused name.
        name: String,
    },

    // ---- paths ----
    /// An empty path.
    #[error("an empty path has no WSL equivalent")]
    PathEmpty,
    /// A relative path (`x\y`), which depends on a current directory.
    #[error("{path:?} is relative; only absolute Windows paths translate")]
    PathRelative {
        /// The refused path.
        path: String,
    },
    /// A drive-relative path (`C:x`, `C:`) or a root-relative one (`\x`), which depend on a current directory.
    #[error("{path:?} is relative to a current drive or directory; only fully qualified paths translate")]
    PathDriveRelative {
        /// The refused path.
        path: String,
    },
    /// A UNC path to another host or share than `\\wsl$` / `\\wsl.localhost`, or a device path (`\\.\`).
    #[error("{path:?} is a network or device path outside WSL; it has no path inside the distribution")]
    PathNotInWsl {
        /// The refused path.
        path: String,
    },
    /// A `\\wsl$\<distro>\…` path into another distribution than the one the program runs in.
    #[error("{path:?} lies in WSL distribution {found:?}, not in {expected:?}")]
    PathOtherDistro {
        /// The refused path.
        path: String,
        /// The distribution the path names.
        found: String,
        /// The distribution the program runs in.
        expected: String,
    },
    /// A path that is not valid Unicode, which no Windows path translation can represent.
    #[error("{path:?} is not valid Unicode")]
    PathNotUnicode {
        /// The refused path.
        path: PathBuf,
    },

    // ---- default route ----
    /// `ip route show default` printed no default route.
    #[error("no default route in `ip route show default` output {output:?}")]
    NoDefaultRoute {
        /// What it printed.
        output: String,
    },
    /// Default routes exist, but none goes through a gateway (`default dev wg0`).
    #[error("the default route {line:?} has no gateway (`via`)")]
    DefaultRouteWithoutGateway {
        /// The first default route line.
        line: String,
    },
    /// The gateway of a default route is not an IP address.
    #[error("the default route {line:?} names gateway {address:?}, which is not an IP address")]
    BadGatewayAddress {
        /// The route line.
        line: String,
        /// The word after `via`.
        address: String,
    },

    // ---- running wsl.exe ----
    /// `wsl.exe` could not be started.
    #[error("cannot start {exe:?}: {source}")]
    Spawn {
        /// The `wsl.exe` that was run.
        exe: PathBuf,
        /// Why it could not be started.
        source: std::io::Error,
    },
    /// `wsl.exe` (or the program it ran) exited unsuccessfully.
    #[error("{exe:?} {args:?} exited with {status:?}: {output}")]
    Failed {
        /// The `wsl.exe` that was run.
        exe: PathBuf,
        /// Its arguments, lossily converted.
        args: Vec<String>,
        /// The exit code (None when killed by a signal).
        status: Option<i32>,
        /// Its standard error, or its standard output when that is empty
        /// (`wsl.exe` prints its own errors there), decoded from UTF-16LE or UTF-8.
        output: String,
    },
    /// A program run through `wsl.exe` printed something that is not UTF-8.
    #[error("{what} printed output that is not UTF-8")]
    NotUtf8 {
        /// The command, for the message.
        what: String,
    },

    // ---- bcd for WSL ----
    /// Neither Go nor a prebuilt `bcd-linux-amd64` was found.
    #[error("no Go toolchain and no prebuilt bcd for WSL; tried {tried:?}")]
    NoBcd {
        /// Every path looked at, in order.
        tried: Vec<PathBuf>,
    },
}

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;
