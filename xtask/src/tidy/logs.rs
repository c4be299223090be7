//! Every log subscriber escapes what peers chose: each
//! `tracing_subscriber::fmt()` builder in the repository's Rust code sets
//! the dev stack's escaping field formatter (`fmt_fields(…EscapedFields)`,
//! docs/devstack.md, "Logs"), so a node's, a client's or a sender's string
//! never reaches a log line raw, whichever form its call site logs it in.

use super::tests::{is_vendored, report, tracked};

/// The builder, and what it must be given.
const BUILDER: &str = "tracing_subscriber::fmt()";
const ESCAPING: &str = "EscapedFields";

#[test]
fn every_log_subscriber_escapes_what_peers_chose() {
    let mut problems = Vec::new();
    for (path, text) in tracked() {
        let Some(text) = text else { continue };
        if !path.ends_with(".rs") || is_vendored(&path) || path.starts_with("xtask/src/tidy/") {
            continue;
        }
        for (at, _) in text.match_indices(BUILDER) {
            // The builder chain: up to the statement's end.
            let chain = &text[at..text[at..].find(';').map_or(text.len(), |end| at + end)];
            if !chain.contains(&format!(".fmt_fields({ESCAPING}")) && !chain.contains(&format!("::{ESCAPING})")) {
                let line = text[..at].lines().count() + 1;
                problems.push(format!("{path}:{line}: a log subscriber without the escaping field formatter"));
            }
        }
    }
    report(
        "Log subscribers that write what peers chose unescaped",
        "Add `.fmt_fields(devstack::EscapedFields)` to the builder (`crate::log_escape::EscapedFields` inside \
         the dev stack).",
        &problems,
    );
}
