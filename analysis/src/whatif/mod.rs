//! The values of `culedger whatif --format json` (`culedger-whatif/1`, docs/cli-json.md): the
//! recorded start replayed through the engine's sizing formula with another value of its
//! parameter, per rank, computed by [`replay::replay`]. The fields that hold the CLI's words
//! (`never_reached`, `notes`) are filled by the CLI from the replay's typed values
//! ([`replay::NeverReached`], [`replay::Note`]); `process`, `formula` and `refused` are the
//! report's and the rule pack's own.

use crate::process::RankId;
use serde::Serialize;

pub mod replay;

/// The schema id of `culedger whatif --format json`.
pub const WHATIF_SCHEMA: &str = "culedger-whatif/1";

#[derive(Debug, Serialize)]
pub struct RankResult {
    /// Which process on which GPU (`pid`, `process`, `host`, `device`, `mig_index`).
    #[serde(flatten)]
    pub rank: RankId,
    pub pool_bytes: i64,
    pub recorded_pool_bytes: i64,
    pub arrivals_bytes: i64,
    /// Free memory left at the point the recorded run reached, minus what was still needed
    /// there and the margin (negative: it does not fit). Never more than the sizing query
    /// told the rank (the free memory after the weights) less the pool.
    pub left_bytes: i64,
    pub margin_bytes: i64,
    /// `left_bytes` before the margin: what the start-up itself leaves.
    pub startup_left_bytes: i64,
    /// The start-up fits (no refusal, nothing short) without counting what the run never
    /// reached.
    pub fits_at_startup: bool,
    /// The start-up fits and leaves the margin for what the run never reached.
    pub fits: bool,
    /// The engine's own check that would refuse the start, if one does.
    pub refused: Option<String>,
    /// The reports cannot size what the start still needed (weights still loading after the
    /// pool): neither fit is claimed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cannot_tell: bool,
}

#[derive(Debug, Serialize)]
pub struct WhatIf {
    pub schema: &'static str,
    pub label: String,
    pub engine: String,
    pub function: String,
    pub formula: String,
    pub parameter: String,
    pub recorded_value: f64,
    pub value: f64,
    pub ranks: Vec<RankResult>,
    /// Every rank's start-up fits (the margin aside).
    pub fits_at_startup: bool,
    /// What the margin stands for: what comes after the pool, which a failed run never reached.
    pub never_reached: String,
    pub fits: bool,
    pub exit_code: i32,
    /// What the replay could not see, or how it differs from the formula's (the KV cache set
    /// in bytes, the draft model counted whole, weights whose load the reports cannot size);
    /// absent when nothing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
