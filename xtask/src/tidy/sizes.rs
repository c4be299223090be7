//! Short files and short functions: no Rust or Go source file over
//! [`MAX_FILE_LINES`] lines (a Rust file's `#[cfg(test)]` module not
//! counted) and no non-test function over [`MAX_FN_LINES`], but those in
//! the allow-lists below, each with the reason it may be longer. Generated
//! and vendored files are exempt.

use super::tests::{is_generated, is_vendored, report, tracked};

/// The most lines a source file may have.
pub const MAX_FILE_LINES: usize = 600;
/// The most lines a non-test function may have, its signature and closing
/// brace included.
pub const MAX_FN_LINES: usize = 100;

/// Files that may be longer, and why.
const LONG_FILES: &[(&str, &str)] = &[
    ("devstack/src/stack.rs", "the facade: the dev stack's whole public API, one-liners in one file by design"),
    ("pki/src/error.rs", "every refusal of pki: one enum per domain, each variant and its code documented"),
];

/// Functions that may be longer (`path`, name), and why.
const LONG_FNS: &[(&str, &str, &str)] = &[];

/// The part of a file that counts: a Rust file up to its `#[cfg(test)]`
/// module.
fn counted(path: &str, text: &str) -> usize {
    let end =
        if path.ends_with(".rs") { text.find("\n#[cfg(test)]").map_or(text.len(), |i| i + 1) } else { text.len() };
    text[..end].lines().count()
}

/// Whether a file holds only tests (whose functions may be long: a scenario
/// reads top to bottom).
fn is_test_file(path: &str) -> bool {
    path.ends_with("_test.go") || path.contains("/tests/") || path.starts_with("fuzz/")
}

/// The functions of a file longer than [`MAX_FN_LINES`]: name and length.
/// A function runs from its `fn`/`func` line to the first line that closes
/// it at its own indentation (rustfmt and gofmt both write it so).
fn long_functions(path: &str, text: &str) -> Vec<(String, usize)> {
    let end =
        if path.ends_with(".rs") { text.find("\n#[cfg(test)]").map_or(text.len(), |i| i + 1) } else { text.len() };
    let lines: Vec<&str> = text[..end].lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let indent = &line[..line.len() - line.trim_start().len()];
        let Some(name) = function_name(path, line.trim_start()) else { continue };
        if line.trim_end().ends_with(';') || line.trim_end().ends_with('}') {
            continue; // a declaration without a body, or a one-line body
        }
        // Its closing brace, unless the scope around it closes first (a
        // declaration over several lines, without a body).
        let close = format!("{indent}}}");
        let outer = |l: &&str| l.trim_start().starts_with('}') && l.len() - l.trim_start().len() < indent.len();
        let end = lines[i + 1..].iter().position(|l| *l == close || outer(l));
        if let Some(j) = end
            && lines[i + 1 + j] == close
            && j + 2 > MAX_FN_LINES
        {
            out.push((name, j + 2));
        }
    }
    out
}

/// The name of the function a trimmed line starts, if it starts one.
fn function_name(path: &str, line: &str) -> Option<String> {
    let rest = if path.ends_with(".go") {
        let rest = line.strip_prefix("func ")?;
        // A method: `func (r *T) Name(`.
        if rest.starts_with('(') { &rest[rest.find(')')? + 1..] } else { rest }
    } else {
        let mut rest = line;
        for prefix in ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe ", "extern \"C\" "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        rest.strip_prefix("fn ")?
    };
    let name: String = rest.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty()).then_some(name)
}

#[test]
fn files_and_functions_stay_short() {
    let mut problems = Vec::new();
    for (path, text) in tracked() {
        let Some(text) = text else { continue };
        if !(path.ends_with(".rs") || path.ends_with(".go")) || is_vendored(&path) || is_generated(&text) {
            continue;
        }
        let lines = counted(&path, &text);
        if lines > MAX_FILE_LINES && !LONG_FILES.iter().any(|(p, _)| *p == path) {
            problems.push(format!("{path}: {lines} lines (at most {MAX_FILE_LINES})"));
        }
        if is_test_file(&path) {
            continue;
        }
        for (name, len) in long_functions(&path, &text) {
            if !LONG_FNS.iter().any(|(p, n, _)| *p == path && *n == name) {
                problems.push(format!("{path}: fn {name} is {len} lines (at most {MAX_FN_LINES})"));
            }
        }
    }
    report(
        "Files or functions over their length",
        "Split the file by concern, or the function into named steps; where the length is the point, add an \
         entry with its reason to LONG_FILES or LONG_FNS in xtask/src/tidy/sizes.rs.",
        &problems,
    );
}

#[test]
fn functions_are_measured_to_their_closing_brace() {
    let body = |n: usize| "    x();\n".repeat(n);
    let rust = format!("//! A file.\n\npub fn long() {{\n{}}}\n\nfn short() {{\n}}\n", body(MAX_FN_LINES));
    assert_eq!(long_functions("a.rs", &rust), [("long".to_string(), MAX_FN_LINES + 2)]);
    let go = format!("// A file.\npackage a\n\nfunc (s *S) Long() {{\n{}}}\n", body(MAX_FN_LINES - 1));
    assert_eq!(long_functions("a.go", &go), [("Long".to_string(), MAX_FN_LINES + 1)]);
    let tests = format!("//! A file.\n\n#[cfg(test)]\nmod tests {{\nfn long() {{\n{}}}\n}}\n", body(200));
    assert!(long_functions("a.rs", &tests).is_empty());
    assert_eq!(counted("a.rs", &tests), 2);
}
