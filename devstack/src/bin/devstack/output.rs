//! The output every list and get shares (docs/devstack.md, "Output
//! formats"): `-o table` (the default: a table a person reads), `-o wide`
//! (more columns), `-o json` (what the admin endpoint answered, for
//! scripts; `--json` is the same) and `-o name` (`kind/name`, one a line,
//! for `xargs`); `--selector key=value,key!=value` and `--state S` filter
//! rows, which are sorted. A subcommand describes its rows once ([`Row`])
//! and calls [`Output::list`] or [`Output::one`].
//!
//! Everything goes to standard output through [`outln!`]: a reader that
//! went away (`devstack nodes | head -1`) ends the output, and `main`
//! exits 0 without a word.

use anyhow::Result;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::table::Table;
use crate::usage;

/// `writeln!` to standard output, as an `io::Result` (use `?`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `write!` to standard output, as an `io::Result` (use `?`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        write!(stdout, $($arg)*).and_then(|()| stdout.flush())
    }};
}

/// A line on standard output for a server (`serve`, `gateway`): a reader
/// that went away does not stop it.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = outln!($($arg)*);
    }};
}

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table a person reads.
    Table,
    /// The table with more columns.
    Wide,
    /// JSON, as the admin endpoint answered (a list is an array; a stream, one object a line).
    Json,
    /// `kind/name`, one a line.
    Name,
}

/// `-o FORMAT` and `--json`.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct Output {
    /// Output format: table, wide, json or name.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    format: Option<Format>,
    /// The same as `-o json`.
    #[arg(long, conflicts_with = "format")]
    json: bool,
}

impl Output {
    /// The format asked (table when none).
    pub fn format(&self) -> Format {
        if self.json { Format::Json } else { self.format.unwrap_or(Format::Table) }
    }

    /// Whether JSON was asked.
    pub fn json(&self) -> bool {
        self.format() == Format::Json
    }

    /// Prints a list: the table (`empty` when there is no row), JSON, or names.
    pub fn list<T: Row>(&self, items: &[T], empty: &str) -> Result<()> {
        match self.format() {
            Format::Json => print_json(&items)?,
            Format::Name => {
                for item in items {
                    outln!("{}/{}", T::KIND, item.name())?;
                }
            }
            format @ (Format::Table | Format::Wide) => {
                if items.is_empty() {
                    outln!("{empty}")?;
                } else {
                    out!("{}", table(items, format == Format::Wide).render())?;
                }
            }
        }
        Ok(())
    }

    /// Prints one item: JSON, its name, or as `detail` prints it for people.
    pub fn one<T: Row>(&self, item: &T, detail: impl FnOnce(&T, bool) -> Result<()>) -> Result<()> {
        match self.format() {
            Format::Json => print_json(item),
            Format::Name => Ok(outln!("{}/{}", T::KIND, item.name())?),
            format => detail(item, format == Format::Wide),
        }
    }
}

/// Pretty JSON on standard output.
pub fn print_json(value: &impl Serialize) -> Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

/// The table of `items`.
pub fn table<T: Row>(items: &[T], wide: bool) -> Table {
    let mut t = Table::new(&T::headers(wide));
    for item in items {
        t.row(item.cells(wide));
    }
    t
}

/// How a subcommand's rows print.
pub trait Row: Serialize {
    /// The kind in `-o name` (`node`, `command`, …).
    const KIND: &'static str;
    /// Its name in `-o name`.
    fn name(&self) -> String;
    /// The columns (more with `wide`).
    fn headers(wide: bool) -> Vec<&'static str>;
    /// One cell per column.
    fn cells(&self, wide: bool) -> Vec<String>;
    /// The fields `--selector` matches (`pool`, `hostname`, …) and their values.
    fn fields(&self) -> Vec<(&'static str, String)>;
}

/// `--selector` and `--state`.
#[derive(Args, Clone, Debug, Default)]
pub struct Filter {
    /// Only rows whose fields match: `key=value` or `key!=value`, comma-separated
    /// (`pool=sim-hgx-h100,state!=adopted`); the keys are the columns' names in lowercase.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    selector: Option<String>,
    /// Only rows in these states (comma-separated: `adopted,rejected`).
    #[arg(long, value_name = "STATE", value_delimiter = ',')]
    state: Vec<String>,
}

/// One term of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Term {
    key: String,
    value: String,
    equal: bool,
}

impl Filter {
    fn terms(&self) -> Result<Vec<Term>> {
        let Some(selector) = &self.selector else { return Ok(Vec::new()) };
        selector
            .split(',')
            .filter(|t| !t.trim().is_empty())
            .map(|t| {
                let (key, value, equal) = match (t.split_once("!="), t.split_once("==").or_else(|| t.split_once('='))) {
                    (Some((k, v)), _) => (k, v, false),
                    (None, Some((k, v))) => (k, v, true),
                    (None, None) => return Err(usage(format!("--selector {t:?} is not key=value or key!=value"))),
                };
                Ok(Term { key: key.trim().to_string(), value: value.trim().to_string(), equal })
            })
            .collect()
    }

    /// Keeps the rows that match; a selector key no row has is a usage error.
    pub fn apply<T: Row>(&self, items: Vec<T>) -> Result<Vec<T>> {
        let terms = self.terms()?;
        let keys: Vec<&str> = items.first().map(|i| i.fields().iter().map(|(k, _)| *k).collect()).unwrap_or_default();
        if let Some(unknown) = terms.iter().find(|t| !keys.is_empty() && !keys.contains(&t.key.as_str())) {
            return Err(usage(format!("--selector: no field {:?} (the fields: {})", unknown.key, keys.join(", "))));
        }
        Ok(items
            .into_iter()
            .filter(|item| {
                let fields = item.fields();
                let value = |key: &str| fields.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str());
                let state_ok =
                    self.state.is_empty() || value("state").is_some_and(|s| self.state.iter().any(|w| w == s));
                state_ok && terms.iter().all(|t| (value(&t.key) == Some(t.value.as_str())) == t.equal)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Thing(&'static str, &'static str);

    impl Row for Thing {
        const KIND: &'static str = "thing";
        fn name(&self) -> String {
            self.0.into()
        }
        fn headers(_: bool) -> Vec<&'static str> {
            vec!["NAME", "STATE"]
        }
        fn cells(&self, _: bool) -> Vec<String> {
            vec![self.0.into(), self.1.into()]
        }
        fn fields(&self) -> Vec<(&'static str, String)> {
            vec![("name", self.0.into()), ("state", self.1.into())]
        }
    }

    fn names(filter: Filter) -> Vec<&'static str> {
        let things = vec![Thing("a", "adopted"), Thing("b", "rejected"), Thing("c", "adopted")];
        filter.apply(things).unwrap().into_iter().map(|t| t.0).collect()
    }

    #[test]
    fn selectors_and_states_filter_rows() {
        let f = |selector: Option<&str>, state: &[&str]| Filter {
            selector: selector.map(str::to_string),
            state: state.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(names(f(None, &[])), ["a", "b", "c"]);
        assert_eq!(names(f(Some("state=adopted"), &[])), ["a", "c"]);
        assert_eq!(names(f(Some("state!=adopted,name!=x"), &[])), ["b"]);
        assert_eq!(names(f(None, &["rejected", "adopted"])), ["a", "b", "c"]);
        assert_eq!(names(f(Some("name=c"), &["adopted"])), ["c"]);
        assert!(f(Some("color=red"), &[]).apply(vec![Thing("a", "x")]).is_err());
        assert!(f(Some("nonsense"), &[]).apply(vec![Thing("a", "x")]).is_err());
    }
}
