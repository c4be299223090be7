//! Progress displays for a build: [`StderrProgress`] (one line that
//! updates in place on a terminal, a line per tenth of the packages
//! otherwise) and [`Silent`].

use std::io::IsTerminal as _;
use std::time::Duration;

use crate::{BuildEvent, BuildOptions, Progress};

/// Reports nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Progress for Silent {
    fn report(&mut self, _: &BuildOptions, _: BuildEvent<'_>) {}
}

/// Reports a build on standard error (nothing when the cache has it): what
/// is built, then how many packages Go compiled out of those the binary
/// needs, then the time it took.
#[derive(Debug)]
pub struct StderrProgress {
    terminal: bool,
    /// The last tenth of the packages reported (off a terminal).
    tenth: usize,
    compiled: usize,
}

impl Default for StderrProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl StderrProgress {
    /// A display that updates one line in place when standard error is a
    /// terminal.
    pub fn new() -> Self {
        StderrProgress { terminal: std::io::stderr().is_terminal(), tenth: 0, compiled: 0 }
    }

    /// A display that prints whole lines only (for logs and tests).
    pub fn lines() -> Self {
        StderrProgress { terminal: false, tenth: 0, compiled: 0 }
    }
}

/// The line of one step; `None` for a step this display does not show.
pub(crate) fn line(what: &BuildOptions, event: &BuildEvent<'_>) -> Option<String> {
    let name = what.describe();
    Some(match event {
        BuildEvent::Cached { .. } => return None,
        BuildEvent::Listing => format!("building {name}: listing its packages (Go downloads missing modules first)"),
        BuildEvent::Compiling { packages } => {
            format!("building {name}: compiling what Go's cache lacks of {packages} packages")
        }
        BuildEvent::Compiled { done, total, package } => {
            format!("building {name}: {done}/{total} packages ({package})")
        }
        BuildEvent::Finished { binary, took } => {
            format!("built {name} in {}: {}", seconds(*took), binary.display())
        }
    })
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

impl Progress for StderrProgress {
    fn report(&mut self, what: &BuildOptions, event: BuildEvent<'_>) {
        let Some(text) = line(what, &event) else { return };
        match event {
            BuildEvent::Compiled { done, total, .. } => {
                self.compiled = done;
                if self.terminal {
                    // \x1b[2K clears the line, so a shorter one leaves no tail.
                    eprint!("\r\x1b[2K{text}");
                } else if done * 10 / total.max(1) > self.tenth {
                    self.tenth = done * 10 / total.max(1);
                    eprintln!("{text}");
                }
            }
            BuildEvent::Finished { .. } if self.terminal && self.compiled > 0 => eprintln!("\r\x1b[2K{text}"),
            _ => eprintln!("{text}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn each_step_says_what_and_how_far() {
        let o = BuildOptions::fakehw();
        assert_eq!(line(&o, &BuildEvent::Cached { binary: Path::new("/b") }), None);
        let step = BuildEvent::Compiled { done: 3, total: 120, package: "bcd/internal/agent" };
        assert_eq!(line(&o, &step).unwrap(), "building bcd (nonvml,fakehw): 3/120 packages (bcd/internal/agent)");
        let end = BuildEvent::Finished { binary: Path::new("/t/bcd"), took: Duration::from_millis(41_230) };
        assert_eq!(line(&o, &end).unwrap(), "built bcd (nonvml,fakehw) in 41.2 s: /t/bcd");
    }
}
