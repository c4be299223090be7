//! No refusal code typed by hand: a string literal that is a code of
//! `proto/refusals.toml` (or starts with one and a colon, `"tunnel-limit:
//! …"`) appears only where the code is data, not logic: generated files,
//! tests, and the fixture factory's cases (each states the code it
//! expects). Elsewhere the code is the generated constant (`Code::X` in
//! Rust, `pkg.CodeX` in Go), so that a renamed code cannot leave a stale
//! copy behind.

use super::layers::code;
use super::tests::{is_generated, is_vendored, report, tracked};

/// Literals that spell a code but are not one, and why.
const NOT_CODES: &[(&str, &str, &str)] =
    &[("daemon/cmd/bcd/helper.go", "release-threshold", "the flag `--release-threshold`, not the refusal")];

/// Where a code may be spelled out: generated code, tests, fixture data.
fn exempt(path: &str) -> bool {
    path.ends_with("_test.go")
        || path.contains("/tests/")
        || path.starts_with("fixtures/src/")
        || path.starts_with("fuzz/")
        || path.starts_with("testdata/")
        || path.starts_with("xtask/src/tidy/")
}

/// Every code of `proto/refusals.toml`.
fn codes(refusals: &str) -> Vec<String> {
    let table: toml::Table = refusals.parse().expect("proto/refusals.toml is TOML");
    let domains = table.get("domain").and_then(toml::Value::as_array).cloned().unwrap_or_default();
    domains
        .iter()
        .filter_map(|d| d.get("codes").and_then(toml::Value::as_array).cloned())
        .flatten()
        .filter_map(|c| c.get("code").and_then(toml::Value::as_str).map(str::to_string))
        .collect()
}

/// The string literals of a line that spell a code, with the code.
fn spelled<'a>(line: &str, codes: &'a [String]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for (start, _) in line.match_indices('"') {
        let rest = &line[start + 1..];
        let word: String =
            rest.chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-').collect();
        let after = rest[word.len()..].chars().next();
        if matches!(after, Some('"') | Some(':'))
            && let Some(code) = codes.iter().find(|c| **c == word)
        {
            out.push(code.as_str());
        }
    }
    out
}

#[test]
fn no_refusal_code_is_typed_by_hand() {
    let files = tracked();
    let refusals = files.iter().find(|(p, _)| p == "proto/refusals.toml").and_then(|(_, t)| t.clone());
    let codes = codes(&refusals.expect("proto/refusals.toml"));
    let mut problems = Vec::new();
    for (path, text) in &files {
        let Some(text) = text else { continue };
        let source = path.ends_with(".rs") || path.ends_with(".go");
        if !source || is_vendored(path) || is_generated(text) || exempt(path) {
            continue;
        }
        let code = if path.ends_with(".rs") { code(text) } else { text.clone() };
        for (i, line) in code.lines().enumerate().filter(|(_, l)| !l.trim_start().starts_with("//")) {
            for c in spelled(line, &codes) {
                if !NOT_CODES.iter().any(|(p, n, _)| p == path && *n == c) {
                    problems.push(format!("{path}: \"{c}\" in `{}`", line.trim()));
                }
            }
            let _ = i;
        }
    }
    report(
        "Refusal codes typed by hand",
        "Use the generated constant (`proto::refusal::Code::X` / `status::Code::X` in Rust, `pkg.CodeX` in Go), \
         formatting it into the message; a literal that only looks like a code goes into NOT_CODES with why.",
        &problems,
    );
}

#[test]
fn a_code_is_found_alone_or_before_a_colon() {
    let codes = vec!["tunnel-limit".to_string(), "jwe-kid".to_string()];
    assert_eq!(spelled(r#"x("tunnel-limit"), y("jwe-kid: bad")"#, &codes), ["tunnel-limit", "jwe-kid"]);
    assert!(spelled(r#"x("tunnel-limits") "a tunnel-limit" "jwe-kid2""#, &codes).is_empty());
}
