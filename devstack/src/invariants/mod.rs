//! The fleet invariants (docs/harness.md, "Fleet invariants"), as pure
//! functions over facts: what the store recorded ([`FleetFacts`], one
//! snapshot read after a meter pass), what the agents' fake hardware
//! recorded ([`AgentFacts`]: fakehw's execution counters, the starts of
//! each agent, the CDI specs it holds) and, where a fault proxy sits in
//! the path, when each node's bytes last reached a gateway ([`Heard`]).
//! Each checker returns the violations it found, each with the node, the
//! command or reservation and the times needed to debug it. The same
//! checks run at the end of every e2e scenario, of the scale scenario and
//! of every chaos run.
//!
//! - I1: no overlapping bookings, and no device held by a node that
//!   another booking owns ([`bookings`]).
//! - I2: at most one execution per command (a retry-safe one again only
//!   after its node restarted while it was open); after a journal loss, an
//!   in-flight command that is not retry-safe fails instead of replaying
//!   ([`commands`]).
//! - I3: a delivered spec is reported observed within 60 s while its node
//!   stays reachable ([`liveness`]).
//! - I4: no node is marked unreachable within 20 s of a gateway hearing
//!   from it ([`liveness`]).
//! - I5: no reservation is released because of connectivity: every
//!   withdrawn or failed booking has a cause the stack knows (tenant,
//!   expired, node-failed), and none failed on a node report while its
//!   node was marked unreachable ([`bookings`]).
//! - I8: usage windows add up to booked time × GPUs, with no duplicate
//!   keys ([`bookings`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

pub use agents::{AgentFacts, NodeAgentFacts};

use crate::error::Result;
use crate::shared::Shared;
use crate::store::rows::FleetFacts;

pub mod agents;
mod bookings;
mod commands;
mod liveness;

/// Times in milliseconds, each a [`Duration`] in [`Thresholds`].
type Ms = i64;

/// One invariant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// No overlapping bookings; no device held for another booking.
    I1,
    /// At most one execution per command.
    I2,
    /// A delivered spec is observed within the bound while reachable.
    I3,
    /// No unreachable mark soon after a gateway heard the node.
    I4,
    /// No release because of connectivity.
    I5,
    /// Usage windows add up to booked time × GPUs, no duplicate keys.
    I8,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One violation: which invariant, of what, when, and what was seen.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// The invariant.
    #[serde(serialize_with = "as_text")]
    pub invariant: Invariant,
    /// The node.
    pub node_id: String,
    /// The command, reservation or spec generation (`generation 4`), if one.
    pub subject: String,
    /// When it was seen (Unix ms), if a time says.
    pub at_ms: Option<Ms>,
    /// What was seen, for a person.
    pub detail: String,
}

fn as_text<S: serde::Serializer>(i: &Invariant, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(i)
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}", self.invariant, self.node_id)?;
        if !self.subject.is_empty() {
            write!(f, " ({})", self.subject)?;
        }
        if let Some(at) = self.at_ms {
            write!(f, " at {at}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

impl Violation {
    fn new(invariant: Invariant, node_id: &str, subject: impl Into<String>, at_ms: Option<Ms>, detail: String) -> Self {
        Violation { invariant, node_id: node_id.to_string(), subject: subject.into(), at_ms, detail }
    }
}

/// When each node's bytes were seen reaching a gateway (a fault proxy's
/// record, Unix ms): witnesses for I4 beside the store's own.
pub type Heard = BTreeMap<String, Vec<Ms>>;

/// The bounds the invariants name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// I3: how soon a delivered spec must be observed.
    pub observe_within: Duration,
    /// I4: how long after a gateway heard a node no mark may come.
    pub heard_grace: Duration,
}

impl Default for Thresholds {
    /// The product's: 60 s and 20 s.
    fn default() -> Self {
        Thresholds { observe_within: Duration::from_secs(60), heard_grace: Duration::from_secs(20) }
    }
}

/// Everything the checkers read.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The store's.
    pub store: FleetFacts,
    /// The agents' (nodes absent here are not checked where only their
    /// fake hardware could tell).
    pub agents: AgentFacts,
    /// A fault proxy's witnesses, if one ran.
    pub heard: Heard,
}

/// Reads the store's facts: a meter pass, then the snapshot, in one
/// transaction (so an ended booking is metered to its end).
pub fn read(shared: &Shared) -> Result<FleetFacts> {
    let window = ms(shared.settings.options.usage_window);
    shared.ledger.write(|c| {
        crate::store::usage::meter(c, window)?;
        Ok(crate::store::facts::snapshot(c)?)
    })
}

/// Checks every invariant; the violations, in invariant order.
pub fn check(facts: &Facts, t: Thresholds) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(bookings::i1(facts));
    out.extend(commands::i2(facts));
    out.extend(liveness::i3(facts, t.observe_within));
    out.extend(liveness::i4(facts, t.heard_grace));
    out.extend(bookings::i5(facts));
    out.extend(bookings::i8(facts));
    out
}

/// The milliseconds of a threshold.
fn ms(d: Duration) -> Ms {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The spans during which `node_id` was marked unreachable (a mark not
/// cleared runs to `until`).
fn unreachable_spans(facts: &FleetFacts, node_id: &str, until: Ms) -> Vec<(Ms, Ms)> {
    facts
        .marks
        .iter()
        .filter(|m| m.node_id == node_id)
        .map(|m| (m.marked_at_ms, m.cleared_at_ms.unwrap_or(until)))
        .collect()
}

/// Whether any of `spans` overlaps `[from, to]`.
fn overlaps(spans: &[(Ms, Ms)], from: Ms, to: Ms) -> bool {
    spans.iter().any(|&(a, b)| a <= to && from <= b)
}
