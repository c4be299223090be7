//! What one node may make the stack store and compute (docs/devstack.md,
//! "Limits"): how many inventory sections and section statuses it may keep
//! (distinct names, each a short plain name), how many node-signed
//! statements one StatusReport may carry, and how many certificates it may
//! renew in an hour. Beyond a report's limits the excess is not stored (nor
//! verified) and is logged with the code `report-limit`; a renewal beyond
//! its limit is refused `ResourceExhausted` `renew-limit`.

/// The per-node limits of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    /// Distinct inventory section names a node may keep (16; bcd reports
    /// three).
    pub inventory_sections: usize,
    /// Distinct section names a node may keep a status of (16; a NodeSpec
    /// has seven sections).
    pub section_statuses: usize,
    /// Node-signed statements (AllocationBound) one StatusReport may carry
    /// (64; one per hold).
    pub statements_per_report: usize,
    /// Certificates a node may renew in the last hour (60; bcd renews once
    /// in 16 hours, or every `BCD_RENEW_AFTER` in fakehw tests).
    pub renewals_per_hour: u32,
    /// OTLP exports the stack keeps of a node (the newest 256; an export
    /// every 10 s is 40 minutes of them).
    pub otlp_exports_per_node: u32,
    /// Bytes of OTLP exports the stack keeps in all, every node's (the
    /// newest 64 MiB).
    pub otlp_total_bytes: u64,
    /// Sessions the stack keeps the row of per node (the newest 64; the
    /// open one always).
    pub sessions_kept: u32,
    /// Journals the stack keeps the recorded seq of per node (the newest
    /// 16; a node has one, and a new one after its journal was lost).
    pub journals_kept: u32,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            inventory_sections: 16,
            section_statuses: 16,
            statements_per_report: 64,
            renewals_per_hour: 60,
            otlp_exports_per_node: 256,
            otlp_total_bytes: 64 * 1024 * 1024,
            sessions_kept: 64,
            journals_kept: 16,
        }
    }
}

/// What a report part refused, for its one log line: how many, and the
/// first name (cut to [`MAX_NAME_BYTES`]), so that a report of thousands of
/// names is one line, not thousands.
#[derive(Debug, Default)]
pub struct Refused {
    /// How many were refused.
    pub count: usize,
    /// The first refused name, cut.
    pub first: Option<String>,
}

impl Refused {
    /// Counts a refused name.
    pub fn add(&mut self, name: &str) {
        self.count += 1;
        if self.first.is_none() {
            let mut end = name.len().min(MAX_NAME_BYTES);
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            self.first = Some(name[..end].to_string());
        }
    }
}

/// The longest section name (inventory or NodeSpec) a node may report.
pub const MAX_NAME_BYTES: usize = 64;

/// Whether a node-chosen section name may be stored: 1 to 64 bytes of
/// lowercase letters, digits, `.`, `_` and `-`, starting with a letter or
/// digit.
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME_BYTES
        && bytes[0].is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(b))
}

/// Whether a name may be stored for a node that keeps `kept` names, at most
/// `limit`: names it keeps already may always be updated.
pub fn admits(kept: &[String], name: &str, limit: usize) -> bool {
    kept.iter().any(|k| k == name) || kept.len() < limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_and_plain() {
        for good in ["system", "gpus", "network", "trust", "a", "x.y_z-1"] {
            assert!(valid_name(good), "{good}");
        }
        let long = "a".repeat(MAX_NAME_BYTES + 1);
        for bad in ["", "GPUs", "-x", ".x", "a b", "a\nb", "a\u{1b}", long.as_str()] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        let kept = vec!["a".to_string(), "b".to_string()];
        assert!(admits(&kept, "a", 2) && !admits(&kept, "c", 2) && admits(&kept, "c", 3));
    }
}
