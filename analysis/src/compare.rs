//! Two runs side by side: one figure of run A and of run B, and how it moved.

use serde::Serialize;

/// One figure of both runs (a category, a total, a driver cost, a call site): its value in
/// A and in B, B minus A, and that in percent of A.
#[derive(Debug, Serialize, Clone)]
pub struct Row {
    pub name: String,
    pub a: i64,
    pub b: i64,
    pub delta: i64,
    /// delta / a in percent; null when a is 0.
    pub pct: Option<f64>,
}

impl Row {
    pub fn new(name: &str, a: i64, b: i64) -> Self {
        let delta = b - a;
        Row { name: name.into(), a, b, delta, pct: (a != 0).then(|| delta as f64 * 100.0 / a as f64) }
    }
}

