//! The call-site sections of `culedger report` ("Where the memory was allocated") and of
//! `culedger diff` ("Call sites that grew"), from the rows [`super`] gathered.

use super::SiteRow;
use crate::diff::{rows_table, Row};
use crate::doc::{Block, Doc, Table};
use crate::units::fmt_bytes;

/// Rows shown in the report's table (the rest are summed in one line).
const REPORT_ROWS: usize = 20;

/// The report's "Where the memory was allocated" section of one device.
pub fn report_section(d: &mut Doc, rows: &[SiteRow]) {
    if rows.is_empty() {
        return;
    }
    d.push(Block::Sub("Where the memory was allocated".into()));
    // Live and all allocations share a column, so the caller keeps its room at 80 columns.
    // The rule behind each category goes with the caller, in brackets (the one free-text column
    // wraps; the category stays a short column): only when a report names rules (reports
    // written before report-time categories do not).
    let rules = rows.iter().take(REPORT_ROWS).any(|r| r.rule.is_some());
    let caller = if rules { "caller [rule]" } else { "caller" };
    let mut t = Table::new(&[caller, "category", "live", "peak", "allocs live/all", "pids"], &[2, 3, 4]);
    for r in rows.iter().take(REPORT_ROWS) {
        let pids: Vec<String> = r.pids.iter().map(i64::to_string).collect();
        let mut cells = vec![match (&r.rule, rules) {
            (Some(rule), _) => format!("{}\n[{rule}]", r.caller),
            (None, true) => format!("{}\n[default]", r.caller),
            (None, false) => r.caller.clone(),
        }];
        cells.push(r.category.clone());
        cells.extend([
            fmt_bytes(r.live_bytes),
            fmt_bytes(r.peak_bytes),
            format!("{}/{}", r.allocs, r.total_allocs),
            pids.join(" "),
        ]);
        t.row(cells);
    }
    d.table(t);
    if rows.len() > REPORT_ROWS {
        let rest = &rows[REPORT_ROWS..];
        d.para(format!("{} more callers hold {}", rest.len(), fmt_bytes(rest.iter().map(|r| r.live_bytes).sum())));
    }
}

/// The diff's "Call sites that grew" section of one device.
pub fn diff_section(doc: &mut Doc, rows: &[Row], sa: &str, sb: &str) {
    if rows.is_empty() {
        return;
    }
    doc.push(Block::Sub("Call sites that grew".into()));
    doc.table(rows_table("caller", rows, sa, sb));
}
