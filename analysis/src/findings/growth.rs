//! Peaks, and categories that kept growing at the end of the run.

use crate::callers;
use super::types::{CatGrowth, Detail, Finding, GrowthDetail, Kind, Severity};
use crate::groups::{DeviceGroup, Point};
use crate::model::CATEGORIES;
use crate::thresholds::NOISE;

fn value_at(points: &[Point], c: usize, t: i64) -> i64 {
    let n = points.partition_point(|p| p.t_unix_us <= t);
    n.checked_sub(1).map_or(0, |i| points[i].cats[c])
}

/// Categories that rose in each of the three parts of the last third of the run on a device,
/// by at least [`NOISE`], with every category's peak.
pub(super) fn growth(g: &DeviceGroup) -> Option<Finding> {
    let clock = g.clock;
    let points = g.series();
    let start = g.members.iter().filter_map(|m| m.first_us()).min()?;
    let end = g.end_us();
    let span = end - start;
    if span <= 0 || points.is_empty() {
        return None;
    }
    let third = end - span / 3;
    let bounds = [third, third + span / 9, third + 2 * span / 9, end];
    let mut cats: Vec<CatGrowth> = Vec::new();
    for (c, name) in CATEGORIES.iter().enumerate() {
        let (mut peak, mut peak_at) = (0i64, start);
        for p in points {
            if p.cats[c] > peak {
                (peak, peak_at) = (p.cats[c], p.t_unix_us);
            }
        }
        if peak == 0 {
            continue;
        }
        let at = |t: i64| value_at(&points, c, t);
        let rising = bounds.windows(2).all(|w| at(w[1]) > at(w[0]));
        let growth = at(end) - at(third);
        cats.push(CatGrowth {
            name: name.to_string(),
            peak_bytes: peak,
            peak_at_us: clock.since(peak_at),
            third_bytes: at(third),
            end_bytes: at(end),
            growth_bytes: growth,
            bytes_per_s: (growth as f64 / ((end - third).max(1) as f64 / 1e6)) as i64,
            kept_growing: rising && growth >= NOISE,
        });
    }
    let growing: Vec<&CatGrowth> = cats.iter().filter(|c| c.kept_growing).collect();
    if growing.is_empty() {
        return None;
    }
    let mut callers: Vec<String> = Vec::new();
    let mut pids: Vec<i64> = Vec::new();
    for m in &g.members {
        for a in &m.dev.top_allocations {
            if m.abs_us(a) >= third && growing.iter().any(|c| c.name == a.category) {
                if !pids.contains(&m.pid()) {
                    pids.push(m.pid());
                }
                if let Some(c) = a.caller.clone().or_else(|| callers::caller(m.report, a.site)) {
                    if !callers.contains(&c) {
                        callers.push(c);
                    }
                }
            }
        }
    }
    // Without top allocations in the window, the processes that allocate here.
    if pids.is_empty() {
        pids = g.members.iter().filter(|m| m.dev.alloc_count > 0).map(|m| m.pid()).collect();
    }
    let detail = GrowthDetail { from_us: clock.since(third), to_us: clock.since(end), categories: cats };
    Some(super::types::finding(Kind::Growth, Severity::Warning, Some(g), pids, callers, Detail::Growth(detail)))
}
