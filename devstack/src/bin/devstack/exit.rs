//! The exit statuses of the admin subcommands (docs/devstack.md, "Exit
//! statuses"), stable for scripts, and the one place an error becomes a
//! line on standard error and a status: each error is printed once, with
//! the refusal code the stack gave (`devstack: node-revoked: node … was
//! revoked`), and a reader that went away ends the output quietly.

use std::process::ExitCode;

use devstack::admin::client::ClientError;
use proto::refusal::Code;

/// Success.
pub const OK: u8 = 0;
/// The request was done and failed (a command that ended `failed` under
/// `--wait`), or the CLI failed on its own.
pub const FAILED: u8 = 1;
/// A command line the CLI does not take (clap's, and what the CLI checks
/// itself: `--params` not an object, an unknown kind).
pub const USAGE: u8 = 2;
/// What was named does not exist (`node-unknown`, `command-unknown`, …).
pub const NOT_FOUND: u8 = 3;
/// The stack refused the request with a code (printed with the sentence).
pub const REFUSED: u8 = 4;
/// No stack could be reached (no discovery file, a stale one, nothing answers).
pub const UNREACHABLE: u8 = 5;
/// A wait reached its `--timeout` (`wait-timeout`).
pub const TIMEOUT: u8 = 6;
/// A chaos run found a fleet invariant violated (`invariant-violated`).
pub const VIOLATED: u8 = 7;

/// The `--help` text that lists them.
pub const HELP: &str = "\
Exit statuses (the admin subcommands; `devstack console` exits with the shell's):
  0  success
  1  the request failed (a command that did not succeed under --wait)
  2  usage error (a flag, an argument, --params, an unknown command kind)
  3  not found (no such node, command, reservation, pool, instance)
  4  refused by the stack, with its code printed (node-revoked, node-offline, …)
  5  no dev stack reachable (none running, a stale discovery file, nothing answers)
  6  timeout (a --wait that reached --timeout)
  7  a chaos run found a fleet invariant violated (devstack chaos: invariant-violated)";

/// A command line the CLI refuses itself (exit [`USAGE`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// A usage error as an `anyhow::Error`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    Usage(message.into()).into()
}

/// Whether the error is a write to a reader that went away.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// The status of a refusal by its HTTP status and code.
fn refused(status: u16, code: &str) -> u8 {
    if status == 504 || code == Code::WaitTimeout.as_str() {
        TIMEOUT
    } else if status == 404 {
        NOT_FOUND
    } else {
        REFUSED
    }
}

/// The status an error exits with.
pub fn status_of(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if cause.downcast_ref::<Usage>().is_some() {
            return USAGE;
        }
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            return match client {
                ClientError::Refused { status, code, .. } => refused(*status, code),
                ClientError::Unauthorized { .. } => REFUSED,
                ClientError::Protocol { .. } => FAILED,
                _ => UNREACHABLE,
            };
        }
    }
    FAILED
}

/// The error and its causes as one line, each said once: a cause whose
/// words its error already holds (`bind …: {source}` over that source) is
/// not repeated.
pub fn sentence(e: &anyhow::Error) -> String {
    let mut said = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if said.contains(&text) {
            continue;
        }
        if !said.is_empty() {
            said.push_str(": ");
        }
        said.push_str(&text);
    }
    said
}

/// Prints the error once and gives its status; a closed standard output
/// is the end of the output (0, nothing printed).
pub fn report(e: &anyhow::Error) -> ExitCode {
    if broken_pipe(e) {
        return ExitCode::from(OK);
    }
    eprintln!("devstack: {}", sentence(e));
    ExitCode::from(status_of(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_their_statuses() {
        let refusal = |status, code: &str| {
            anyhow::Error::from(ClientError::Refused { status, code: code.into(), message: "m".into() })
        };
        assert_eq!(status_of(&refusal(404, "node-unknown")), NOT_FOUND);
        assert_eq!(status_of(&refusal(409, "node-revoked")), REFUSED);
        assert_eq!(status_of(&refusal(504, "wait-timeout")), TIMEOUT);
        assert_eq!(status_of(&usage("x")), USAGE);
        let gone = ClientError::NotRunning { path: "/x".into() };
        assert_eq!(status_of(&anyhow::Error::from(gone).context("status")), UNREACHABLE);
        let pipe = anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(broken_pipe(&pipe.context("print")));
        assert_eq!(status_of(&anyhow::anyhow!("other")), FAILED);
    }

    #[test]
    fn a_cause_is_said_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("bind 127.0.0.1:1: {source}")]
        struct Bind {
            source: std::io::Error,
        }
        let e = anyhow::Error::from(Bind { source: std::io::Error::from(std::io::ErrorKind::AddrInUse) });
        let e = e.context("start the dev stack");
        assert_eq!(sentence(&e), "start the dev stack: bind 127.0.0.1:1: address in use");
    }
}
