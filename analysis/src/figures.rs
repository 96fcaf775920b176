//! The device figures the commands name, in one vocabulary: what `culedger check` budgets,
//! what `culedger diff` compares below the categories and what the run summary states per
//! device are the same [`Figure`]s, each with its key (as a budget and the JSON name it), its
//! unit, and how it is read from a device's group. The CLI words each (`cli/src/figures.rs`).

use crate::groups::DeviceGroup;
use crate::model::CATEGORIES;

/// A figure of one device (summed over the processes that used it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// Tracked live bytes of a category, at each process's last report.
    Category(&'static str),
    /// A category's peak (`DeviceGroup::cat_peak`).
    CategoryPeak(&'static str),
    /// Tracked live bytes, at each process's last report.
    Live,
    /// The peak of the tracked live bytes (`DeviceGroup::peak`).
    Peak,
    /// Untracked memory at the last free-memory query; unmeasured without one.
    UntrackedLast,
    /// The most untracked memory a free-memory query saw; unmeasured without one.
    UntrackedMax,
    /// Hidden driver memory, de-noised ([`crate::costs`]).
    DriverCosts,
    /// Peer buffers opened through IPC (another process's memory), cumulative.
    IpcImported,
    /// Failed allocation requests, an allocator's retries of a request folded into it
    /// ([`crate::groups::is_retry`]).
    FailedRequests,
}

/// What a figure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Count,
}

/// The device-wide figures `culedger diff` compares below the categories, in its order.
pub const DIFF_TOTALS: [Figure; 5] =
    [Figure::Live, Figure::Peak, Figure::UntrackedLast, Figure::DriverCosts, Figure::IpcImported];

/// The device-wide figures a budget of `culedger check` may name (besides the categories
/// and their peaks), in the order its help lists them.
pub const BUDGET_TOTALS: [Figure; 5] =
    [Figure::Live, Figure::Peak, Figure::UntrackedMax, Figure::IpcImported, Figure::DriverCosts];

impl Figure {
    /// Its name as a budget key and in the JSON: `live`, `peak:kv_pool`, `untracked`.
    pub fn key(self) -> String {
        match self {
            Figure::Category(c) => c.to_string(),
            Figure::CategoryPeak(c) => format!("peak:{c}"),
            Figure::Live => "live".into(),
            Figure::Peak => "peak".into(),
            Figure::UntrackedLast => "untracked_last".into(),
            Figure::UntrackedMax => "untracked".into(),
            Figure::DriverCosts => "driver_costs".into(),
            Figure::IpcImported => "ipc_imported".into(),
            Figure::FailedRequests => "failures".into(),
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            Figure::FailedRequests => Unit::Count,
            _ => Unit::Bytes,
        }
    }

    /// The figure on a device; None when it was never measured there (untracked memory
    /// without a free-memory query).
    pub fn read(self, g: &DeviceGroup) -> Option<i64> {
        Some(match self {
            Figure::Category(c) => g.cat_live(c),
            Figure::CategoryPeak(c) => g.cat_peak(c),
            Figure::Live => g.live(),
            Figure::Peak => g.peak(),
            Figure::UntrackedLast => return g.last_reading().map(|r| r.untracked_bytes),
            Figure::UntrackedMax => return g.max_untracked().map(|r| r.untracked_bytes),
            Figure::DriverCosts => crate::costs::total(g),
            Figure::IpcImported => g.ipc().imported_bytes,
            Figure::FailedRequests => g.failed_request_count(),
        })
    }

    /// The figure a budget key names: one of [`BUDGET_TOTALS`], a category or `peak:` one.
    pub fn budgeted(key: &str) -> Option<Figure> {
        if let Some(c) = key.strip_prefix("peak:") {
            return CATEGORIES.iter().find(|x| **x == c).map(|c| Figure::CategoryPeak(c));
        }
        let category = CATEGORIES.iter().find(|x| **x == key).map(|c| Figure::Category(c));
        category.or_else(|| BUDGET_TOTALS.into_iter().find(|f| f.key() == key))
    }

    /// Every budget key, for did-you-mean: the categories, the totals, the categories' peaks.
    pub fn budget_keys() -> Vec<String> {
        let mut keys: Vec<String> = CATEGORIES.iter().map(|c| c.to_string()).collect();
        keys.extend(BUDGET_TOTALS.map(Figure::key));
        keys.extend(CATEGORIES.iter().map(|c| format!("peak:{c}")));
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_budget_key_names_its_figure() {
        for k in Figure::budget_keys() {
            assert_eq!(Figure::budgeted(&k).map(Figure::key), Some(k.clone()), "{k}");
        }
        assert_eq!(Figure::budgeted("untracked"), Some(Figure::UntrackedMax));
        assert_eq!(Figure::budgeted("untracked_last"), None, "not a budget");
        assert_eq!(Figure::budgeted("peak:nope"), None);
    }
}
