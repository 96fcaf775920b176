//! Call sites: who allocated. The reports carry them (docs/schema.md: top-level `sites`, per
//! device `sites` with a short `caller`); this module gathers
//! - the rows of the "Where the memory was allocated" table of `culedger report` (live
//!   bytes by caller, per device, all processes of the device together),
//! - the "Call sites that grew" rows of `culedger diff`.
//!
//! The CLI's renderers write them (`report`, `diff::render`); the memory_viz export gathers
//! its own frames (the CLI's `export::frames`).

use crate::compare::Row;
use crate::groups::DeviceGroup;
use crate::model::DevSite;
use serde::Serialize;
use std::collections::BTreeMap;

/// Rows shown in the diff per device.
const DIFF_ROWS: usize = 10;

/// A row of the report's table: one caller on one device, summed over its processes.
#[derive(Debug, Clone, Serialize)]
pub struct SiteRow {
    pub caller: String,
    /// The category of most of the caller's live bytes.
    pub category: String,
    /// The rule behind that category (None: the default rule, or not recorded).
    pub rule: Option<String>,
    pub live_bytes: i64,
    /// Sum of the per-process peaks.
    pub peak_bytes: i64,
    pub allocs: i64,
    pub total_allocs: i64,
    pub pids: Vec<i64>,
}

/// The caller of a device site: its short form, else `site N`.
fn caller(s: &DevSite) -> String {
    s.caller.clone().unwrap_or_else(|| format!("site {}", s.site))
}

/// Live bytes by caller on one device, largest first.
pub fn rows(g: &DeviceGroup) -> Vec<SiteRow> {
    type ByCategory = BTreeMap<(String, Option<String>), i64>;
    let mut by: BTreeMap<String, (SiteRow, ByCategory)> = BTreeMap::new();
    for m in &g.members {
        for s in &m.dev.sites {
            let name = caller(s);
            let (row, cats) = by.entry(name.clone()).or_insert_with(|| {
                let row = SiteRow {
                    caller: name,
                    category: String::new(),
                    rule: None,
                    live_bytes: 0,
                    peak_bytes: 0,
                    allocs: 0,
                    total_allocs: 0,
                    pids: Vec::new(),
                };
                (row, BTreeMap::new())
            });
            row.live_bytes += s.live_bytes;
            row.peak_bytes += s.peak_bytes;
            row.allocs += s.allocs;
            row.total_allocs += s.total_allocs;
            if !row.pids.contains(&m.pid()) {
                row.pids.push(m.pid());
            }
            *cats.entry((s.category.clone(), s.rule.clone())).or_default() += s.live_bytes.max(1);
        }
    }
    let mut v: Vec<SiteRow> = by
        .into_values()
        .map(|(mut row, cats)| {
            let (category, rule) = cats.into_iter().max_by_key(|(_, b)| *b).map(|(c, _)| c).unwrap_or_default();
            (row.category, row.rule) = (category, rule);
            row
        })
        .collect();
    v.sort_by(|a, b| {
        b.live_bytes.cmp(&a.live_bytes).then(b.peak_bytes.cmp(&a.peak_bytes)).then(a.caller.cmp(&b.caller))
    });
    v
}

/// Callers whose live bytes grew from A to B on one device, most first.
pub fn grew(a: Option<&DeviceGroup>, b: Option<&DeviceGroup>) -> Vec<Row> {
    let live = |g: Option<&DeviceGroup>| -> BTreeMap<String, i64> {
        g.map(rows).unwrap_or_default().into_iter().map(|r| (r.caller, r.live_bytes)).collect()
    };
    let (la, lb) = (live(a), live(b));
    let mut v: Vec<Row> = lb
        .iter()
        .map(|(c, &bytes)| Row::new(c, la.get(c).copied().unwrap_or(0), bytes))
        .filter(|r| r.delta > 0)
        .collect();
    v.sort_by(|x, y| y.delta.cmp(&x.delta).then(x.name.cmp(&y.name)));
    v.truncate(DIFF_ROWS);
    v
}
