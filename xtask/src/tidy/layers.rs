//! The dev stack's layers, checked from its own imports (ARCHITECTURE.md,
//! "devstack"): each top-level module of `devstack/src` has one place in
//! [`LAYERS`], from the ground up; a module imports only from its own layer
//! or below (a `crate::x` path, `use crate::{x, …}`), no modules import
//! each other round a cycle, and only the facade and what stands on it name
//! `DevStack`. Comments and `#[cfg(test)]` modules are not read: a test may
//! build what it tests from anywhere.

use std::collections::{BTreeMap, BTreeSet};

use super::tests::{report, tracked};

/// Where the dev stack's library lives.
const SRC: &str = "devstack/src/";

/// The layers, from the ground up, and the top-level modules of each. A new
/// module takes its place here: that is where a reader looks for it.
const LAYERS: &[(&str, &[&str])] = &[
    ("leaves", &["clock", "ids", "limits", "listen", "log_escape"]),
    ("ground", &["changes", "error", "events", "frames", "log_capture", "options", "status"]),
    ("core", &["hub", "issuance", "keys", "ledger", "shared", "tickets", "tls", "view"]),
    ("gateway", &["connections", "gateway"]),
    (
        "features",
        &[
            "adoption",
            "capabilities",
            "cluster",
            "commands",
            "config",
            "cordon",
            "fleet",
            "instances",
            "inventory",
            "invariants",
            "join",
            "nodes",
            "otlp",
            "placement",
            "policy",
            "pool_reservations",
            "pools",
            "releases",
            "reservation_ends",
            "reservations",
            "secrets",
            "sections",
            "spec",
            "ssh_ca",
            "tpm",
            "trust",
            "tunnels",
            "workload",
        ],
    ),
    ("transports", &["http", "https"]),
    ("composition root", &["compose"]),
    ("facade", &["stack"]),
    ("users of the facade", &["admin", "chaos", "client"]),
];

/// The first layer whose modules may name `DevStack`.
const FACADE: &str = "facade";

/// The top-level module a file of the library belongs to (`None`: the crate
/// root or the binary).
fn module_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix(SRC)?;
    if rest == "lib.rs" || rest.starts_with("bin/") || !rest.ends_with(".rs") {
        return None;
    }
    Some(rest.split('/').next().unwrap_or(rest).trim_end_matches(".rs"))
}

/// A file's code as tidy reads it: up to its `#[cfg(test)]` module, without
/// comment lines.
pub(super) fn code(text: &str) -> String {
    let end = text.find("\n#[cfg(test)]").map_or(text.len(), |i| i + 1);
    text[..end].lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The top-level modules `code` names through `crate::`: `crate::x…` and
/// each top-level item of `crate::{x, y::z, …}`.
fn imports(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `devstack_crate::` or the like
        }
        let rest = &code[at + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.insert(ident(rest));
            continue;
        };
        let (mut depth, mut item_start) = (0usize, true);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => item_start = true,
                c if item_start && !c.is_whitespace() => {
                    out.insert(ident(&group[i..]));
                    item_start = false;
                }
                _ => {}
            }
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

/// Whether `code` names the facade type `DevStack` (not `DevStackOptions`).
fn names_facade(code: &str) -> bool {
    code.match_indices("DevStack").any(|(at, m)| {
        let after = code[at + m.len()..].chars().next();
        let before = code[..at].chars().next_back();
        !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Every cycle of `graph`, each as the modules on it (Tarjan's strongly
/// connected components of more than one module).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.graph.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    self.low.insert(v, self.low[v].min(self.low[w]));
                } else if self.stack.contains(&w) {
                    self.low.insert(v, self.low[v].min(self.index[w]));
                }
            }
            if self.low[v] == self.index[v] {
                let at = self.stack.iter().rposition(|m| *m == v).unwrap_or(0);
                let component: Vec<String> = self.stack.drain(at..).map(str::to_string).collect();
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn the_dev_stack_is_layered() {
    let layer_of: BTreeMap<&str, usize> =
        LAYERS.iter().enumerate().flat_map(|(i, (_, mods))| mods.iter().map(move |m| (*m, i))).collect();
    let facade = LAYERS.iter().position(|(name, _)| *name == FACADE).expect("the facade has a layer");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for (path, text) in tracked() {
        let (Some(module), Some(text)) = (module_of(&path), text) else { continue };
        let Some(&layer) = layer_of.get(module) else {
            problems.push(format!("{path}: module `{module}` has no layer"));
            continue;
        };
        let code = code(&text);
        for import in imports(&code).into_iter().filter(|i| i != module) {
            match layer_of.get(import.as_str()) {
                Some(&to) if to > layer => problems.push(format!(
                    "{path}: `{module}` ({}) imports `{import}` from a higher layer ({})",
                    LAYERS[layer].0, LAYERS[to].0
                )),
                _ => {}
            }
            graph.entry(module.to_string()).or_default().insert(import);
        }
        graph.entry(module.to_string()).or_default();
        if layer < facade && names_facade(&code) {
            problems.push(format!("{path}: `{module}` names `DevStack`, which only the facade and its users may"));
        }
    }
    for cycle in cycles(&graph) {
        problems.push(format!("an import cycle: {}", cycle.join(" -> ")));
    }
    for module in layer_of.keys().filter(|m| !graph.contains_key(**m)) {
        problems.push(format!("LAYERS names `{module}`, which is not a module of {SRC}"));
    }
    report(
        "The dev stack's layering is broken",
        "A module imports from its own layer or below (xtask/src/tidy/layers.rs, LAYERS); move what it needs down, \
         or hand it in from the composition root (compose.rs). Only stack.rs and its users name DevStack.",
        &problems,
    );
}

#[test]
fn the_store_crate_depends_on_nothing_of_the_stack() {
    let manifest: toml::Table = tracked()
        .into_iter()
        .find(|(p, _)| p == "devstack-store/Cargo.toml")
        .and_then(|(_, t)| t)
        .expect("devstack-store/Cargo.toml")
        .parse()
        .expect("a TOML manifest");
    let deps = manifest.get("dependencies").and_then(toml::Value::as_table).cloned().unwrap_or_default();
    let stack: Vec<&String> = deps.keys().filter(|d| d.starts_with("devstack") || *d == "daemon-harness").collect();
    assert!(stack.is_empty(), "devstack-store depends on {stack:?}: the store is the ground floor");
}

#[test]
fn imports_are_read_from_paths_and_groups() {
    let src = "use crate::error::{Error, Result};\nuse crate::{hub::Hub, store::{Db, rows::X}, ids};\n\
               let x = crate::clock::now_ms(); devstack_crate::y; crate::SERVER_NAME";
    let found: Vec<String> = imports(src).into_iter().collect();
    assert_eq!(found, ["SERVER_NAME", "clock", "error", "hub", "ids", "store"]);
    assert_eq!(code("a\n// crate::x\nb\n#[cfg(test)]\nmod tests { crate::y }"), "a\nb");
}

#[test]
fn a_cycle_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .into_iter()
        .map(|(f, t)| (f.to_string(), BTreeSet::from([t.to_string()])))
        .collect();
    let mut found = cycles(&graph);
    found.iter_mut().for_each(|c| c.sort());
    assert_eq!(found, [vec!["a".to_string(), "b".to_string(), "c".to_string()]]);
}
