//! The thresholds of `culedger explain`'s findings (docs/explain.md): numbers the analysis
//! decides by, and the words quote.

/// Untracked memory rising by more than this between two queries is a finding.
pub const UNTRACKED_GROWTH: i64 = 256 << 20;
/// A rank whose pool differs from the median of the ranks' pools by more than this
/// fraction (in percent) is flagged.
pub const POOL_DIFF_PCT: f64 = 1.0;
/// Ranks whose category peaks differ by more than this (percent of the largest) are
/// imbalanced...
pub const IMBALANCE_PCT: f64 = 5.0;
/// ... and by at least this much (smaller differences are noise).
pub const NOISE: i64 = 64 << 20;
