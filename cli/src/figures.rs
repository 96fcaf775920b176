//! The device figures in the CLI's words: the analysis crate holds the figures the commands
//! name (`culedger_analysis::figures`: each one's key, unit and how it is read from a device's
//! group); this gives each its label, as the text says it, and writes its values.

use crate::units::fmt_bytes;
pub use culedger_analysis::figures::*;

/// A figure's words.
pub trait FigureWords {
    /// Its name in a sentence or a table row: `tracked live`, `untracked (last query)`.
    fn label(self) -> String;
    /// A value of the figure in words: `1.50 GiB`, `3`.
    fn fmt(self, value: i64) -> String;
}

impl FigureWords for Figure {
    fn label(self) -> String {
        match self {
            Figure::Category(c) => c.to_string(),
            Figure::CategoryPeak(c) => format!("{c} peak"),
            Figure::Live => "tracked live".into(),
            Figure::Peak => "tracked peak".into(),
            Figure::UntrackedLast => "untracked (last query)".into(),
            Figure::UntrackedMax => "untracked (most at a query)".into(),
            Figure::DriverCosts => "hidden driver costs".into(),
            Figure::IpcImported => "IPC opened from peers".into(),
            Figure::FailedRequests => "failed allocations".into(),
        }
    }

    fn fmt(self, value: i64) -> String {
        match self.unit() {
            Unit::Bytes => fmt_bytes(value),
            Unit::Count => value.to_string(),
        }
    }
}
