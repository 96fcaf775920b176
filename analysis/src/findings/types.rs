//! The findings as typed values ([`crate::explain`]: what each is about, how much it
//! matters, and its figures), and the helpers the findings' modules compute them with.

pub use crate::explain::{
    AfterPool, CatGrowth, Detail, Ended, FailDetail, Finding, GrowthDetail, ImbalanceDetail, Kind, Minimum, Part,
    RankPeaks, Severity, SizedBy, StartRefusal, SizingDetail, SizingRow, Spread, StartDetail, StartRow,
    UntrackedDetail, WhyDiffers,
};

/// A finding with no words yet (its title and text are written from its figures by the
/// words, the CLI's `prose::word`), about the run or about one device group `g`.
pub(super) fn finding(
    kind: Kind,
    severity: Severity,
    g: Option<&crate::groups::DeviceGroup>,
    pids: Vec<i64>,
    callers: Vec<String>,
    detail: Detail,
) -> Finding {
    Finding {
        kind,
        severity,
        title: String::new(),
        text: String::new(),
        host: g.map(|g| g.host.clone()),
        device: g.map(|g| g.index),
        mig_index: g.and_then(|g| g.mig_index),
        gpu: g.map(|g| g.id()),
        pids,
        callers,
        detail,
        folded_into: None,
        folded_title: None,
        gpu_name: None,
    }
}

pub(super) fn pct(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

pub(super) fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    match v.len() {
        0 => 0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2,
    }
}
