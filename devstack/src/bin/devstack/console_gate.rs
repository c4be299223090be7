//! When `devstack console` lets input through (docs/devstack.md, "devstack
//! console"). Bytes that reach the node's terminal before its shell set it
//! up are read in the terminal's cooked mode: a Ctrl-D there becomes a NUL
//! the shell later reads as nothing, and a piped `echo cmd | devstack
//! console NODE` hung for ever. So input is held until the shell is up
//! (its first output, the prompt) and then sent, with the Ctrl-D of the
//! input's end; after that end, each new prompt gets one more Ctrl-D (the
//! first may have reached a command instead of the shell), so the shell
//! always sees the end. An input that did not end with a newline gets one,
//! so its last line runs.
//!
//! A one-shot command (`-- CMD…`) is one line typed at the first prompt:
//! `stty` (no echo of piped input; no CR before LF when the output is no
//! terminal), a marker printed, then `exec $SHELL -c 'CMD'`. Everything
//! before the marker (the prompt, the line's echo) is dropped; the input is
//! held until the marker, when CMD runs on the cooked terminal.

use std::io::IsTerminal as _;

/// Ctrl-D: what a standard input that is no terminal sends at its end.
pub const EOT: u8 = 0x04;
/// What the one-shot line prints once CMD is about to run (what its
/// `printf` makes of `\036devstack-%s\036` and `run`: the echo of the line
/// shows the escapes, never these bytes).
const MARKER: &[u8] = b"\x1edevstack-run\x1e";

/// What the output showed of the shell so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// The shell printed something: it is up.
    pub up: bool,
    /// The one-shot command started (its marker came).
    pub started: bool,
    /// How many outputs ended like a prompt (`$ `, `# `, `> `, `% `).
    pub prompts: u64,
}

/// `s` in single quotes for a POSIX shell.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The line that runs `command` alone (see the module's doc).
pub fn one_shot(command: &str, stdin_terminal: bool) -> Vec<u8> {
    let mut modes = Vec::new();
    if !stdin_terminal {
        modes.push("-echo");
    }
    if !std::io::stdout().is_terminal() {
        modes.push("-onlcr");
    }
    let stty = if modes.is_empty() { String::new() } else { format!("stty {} 2>/dev/null; ", modes.join(" ")) };
    format!(r#"{stty}printf '\036devstack-%s\036' run; exec "${{SHELL:-/bin/sh}}" -c {}"#, quoted(command))
        .into_bytes()
        .into_iter()
        .chain(*b"\n")
        .collect()
}

/// Whether an output ends like a shell's prompt.
fn prompt_like(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    let end = text.trim_end_matches(|c: char| c != ' ' && c.is_whitespace());
    ["$ ", "# ", "> ", "% "].iter().any(|p| end.ends_with(p))
}

/// What of the console's output is shown, and what it says of the shell.
#[derive(Debug)]
pub struct OutputFilter {
    one_shot: bool,
    seen: Seen,
    /// Output before the marker, kept while it may still come.
    carry: Vec<u8>,
}

impl OutputFilter {
    /// A filter; a one-shot one drops everything up to the marker.
    pub fn new(one_shot: bool) -> Self {
        OutputFilter { one_shot, seen: Seen::default(), carry: Vec::new() }
    }

    /// The bytes to show of `bytes`, and what was seen so far.
    pub fn pass(&mut self, bytes: &[u8]) -> (Vec<u8>, Seen) {
        self.seen.up = true;
        if self.one_shot && !self.seen.started {
            self.carry.extend_from_slice(bytes);
            if let Some(at) = self.carry.windows(MARKER.len()).position(|w| w == MARKER) {
                self.seen.started = true;
                let rest = self.carry.split_off(at + MARKER.len());
                self.carry.clear();
                return (rest, self.seen);
            }
            let keep = self.carry.len().saturating_sub(MARKER.len() - 1);
            self.carry.drain(..keep);
            return (Vec::new(), self.seen);
        }
        if prompt_like(bytes) {
            self.seen.prompts += 1;
        }
        (bytes.to_vec(), self.seen)
    }
}

/// Holds input until the shell (or the one-shot command) takes it.
#[derive(Debug)]
pub struct Gate {
    line: Option<Vec<u8>>,
    one_shot: bool,
    terminal: bool,
    seen: Seen,
    held: Vec<Vec<u8>>,
    /// The input ended.
    ended: bool,
    /// The last byte sent was a newline (or nothing was sent).
    at_line_start: bool,
    /// The prompt count when the last Ctrl-D went.
    eot_at: Option<u64>,
}

impl Gate {
    /// A gate; `line` is the one-shot line, `terminal` whether standard input is one.
    pub fn new(line: Option<Vec<u8>>, terminal: bool) -> Self {
        let one_shot = line.is_some();
        Gate {
            line,
            one_shot,
            terminal,
            seen: Seen::default(),
            held: Vec::new(),
            ended: false,
            at_line_start: true,
            eot_at: None,
        }
    }

    fn open(&self) -> bool {
        if self.one_shot { self.seen.started } else { self.seen.up }
    }

    fn note(&mut self, out: &[Vec<u8>]) {
        if let Some(last) = out.iter().rev().find_map(|c| c.last()) {
            self.at_line_start = *last == b'\n';
        }
    }

    /// The end of a piped input: a newline if its last line had none, then Ctrl-D.
    fn eot(&mut self) -> Vec<Vec<u8>> {
        self.eot_at = Some(self.seen.prompts);
        let mut out = Vec::new();
        if !self.at_line_start {
            out.push(b"\n".to_vec());
            self.at_line_start = true;
        }
        out.push(vec![EOT]);
        out
    }

    /// Typed or piped bytes: what to send now.
    pub fn input(&mut self, chunk: Vec<u8>) -> Vec<Vec<u8>> {
        if !self.open() {
            self.held.push(chunk);
            return Vec::new();
        }
        let out = vec![chunk];
        self.note(&out);
        out
    }

    /// The input ended: what to send now (nothing from a terminal, whose
    /// person types Ctrl-D).
    pub fn end(&mut self) -> Vec<Vec<u8>> {
        self.ended = true;
        if self.terminal || !self.open() { Vec::new() } else { self.eot() }
    }

    /// The output showed `now`: what to send now.
    pub fn seen(&mut self, now: Seen) -> Vec<Vec<u8>> {
        let was_open = self.open();
        self.seen = now;
        let mut out = Vec::new();
        if now.up
            && let Some(line) = self.line.take()
        {
            out.push(line);
        }
        if !was_open && self.open() {
            out.append(&mut self.held);
            self.note(&out);
            if self.ended && !self.terminal {
                out.extend(self.eot());
            }
        } else if self.open() && !self.one_shot && !self.terminal && self.eot_at.is_some_and(|at| now.prompts > at) {
            // A prompt after the end: the shell reads now, and gets the end again.
            out.extend(self.eot());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(prompts: u64) -> Seen {
        Seen { up: true, started: false, prompts }
    }

    #[test]
    fn input_that_ended_before_the_shell_is_sent_with_its_end_once_it_is_up() {
        let mut g = Gate::new(None, false);
        assert!(g.input(b"echo hi".to_vec()).is_empty());
        assert!(g.end().is_empty(), "held until the shell is up");
        assert_eq!(g.seen(up(1)), [b"echo hi".to_vec(), b"\n".to_vec(), vec![EOT]]);
        assert!(g.seen(up(1)).is_empty());
        assert_eq!(g.seen(up(2)), [vec![EOT]], "a prompt after the end gets the end again");
    }

    #[test]
    fn a_terminal_types_through_and_sends_no_end() {
        let mut g = Gate::new(None, true);
        assert!(g.seen(up(1)).is_empty());
        assert_eq!(g.input(b"ls\r".to_vec()), [b"ls\r".to_vec()]);
        assert!(g.end().is_empty());
    }

    #[test]
    fn a_one_shot_types_its_line_then_waits_for_its_marker() {
        let line = one_shot("echo it's", false);
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(text.ends_with(concat!(r#"exec "${SHELL:-/bin/sh}" -c 'echo it'\''s'"#, "\n")), "{text}");
        let mut g = Gate::new(Some(line.clone()), false);
        assert!(g.input(b"data\n".to_vec()).is_empty());
        assert_eq!(g.seen(up(1)), [line]);
        let mut f = OutputFilter::new(true);
        let (shown, seen) = f.pass(b"$ stty -echo; printf '\\036devstack-%s\\036' run\r\n\x1edevstack-");
        assert!(shown.is_empty() && !seen.started);
        let (shown, seen) = f.pass(b"run\x1eout\n");
        assert_eq!((shown.as_slice(), seen.started), (&b"out\n"[..], true));
        assert_eq!(g.seen(seen), [b"data\n".to_vec()]);
        assert_eq!(g.end(), [vec![EOT]], "after a newline, the end alone");
    }

    #[test]
    fn prompts_are_counted() {
        let mut f = OutputFilter::new(false);
        assert_eq!(f.pass(b"root@node:~# ").1.prompts, 1);
        assert_eq!(f.pass(b"hello\r\n").1.prompts, 1);
        assert_eq!(f.pass(b"\r\n$ ").1.prompts, 2);
    }
}
