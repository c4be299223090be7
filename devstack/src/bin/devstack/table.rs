//! Tables a person reads: columns padded to their widest cell, two spaces
//! apart; and times as ages (`3m 12s ago`).

use std::fmt::Write as _;

/// A table with a header line.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column names.
    pub fn new(headers: &[&'static str]) -> Self {
        Table { headers: headers.to_vec(), rows: Vec::new() }
    }

    /// Adds a row (one cell per column).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, the last column unpadded.
    pub fn render(&self) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let headers: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for cells in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in cells.iter().enumerate().take(columns) {
                if i + 1 == columns {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// How long ago `at_ms` was, to the second (`3m 12s ago`).
pub fn ago(at_ms: i64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
    let secs = (now - at_ms).max(0) as u64 / 1000;
    format!("{} ago", humantime::format_duration(std::time::Duration::from_secs(secs)))
}

/// A duration as a person writes it: `24h`, `30m`, `90s`, `1h30m`.
pub fn duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if n > 0 {
            let _ = write!(out, "{n}{unit}");
        }
    }
    if out.is_empty() { format!("{}ms", d.as_millis()) } else { out }
}

/// `-` for an empty cell.
pub fn or_dash(s: impl Into<String>) -> String {
    let s = s.into();
    if s.is_empty() { "-".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let mut t = Table::new(&["ID", "STATE", "REASON"]);
        t.row(vec!["node_1".into(), "adopted".into(), "-".into()]);
        t.row(vec!["n2".into(), "rejected".into(), "GpuCountMismatch: expected 8 GPUs, found 7".into()]);
        assert_eq!(
            t.render(),
            "ID      STATE     REASON\nnode_1  adopted   -\nn2      rejected  GpuCountMismatch: expected 8 GPUs, found 7\n"
        );
        assert_eq!(or_dash(""), "-");
        assert_eq!(duration(std::time::Duration::from_secs(24 * 3600)), "24h");
        assert_eq!(duration(std::time::Duration::from_secs(5400)), "1h30m");
        assert_eq!(duration(std::time::Duration::from_millis(1500)), "1s");
    }
}
