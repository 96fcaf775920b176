//! Classifying one device's recorded history when the report is written: the phase analysis,
//! the rules (first match wins) on every allocation, and the replay that gives per-category
//! live and peak bytes with the final categories. Pure. [`classify_history`] is what the report
//! writer runs (src/ledger/final_categories.rs); [`classify_device`] classifies a history of
//! allocations alone (the engine simulations' tests run it on the histories the simulations
//! record, shim-tests/scenarios/tests/engines.rs).

use super::matcher::{Category, NativeFrame, PyFrame, Subject};
use super::phase::{self, AllocRecord, ProbeRecord, Sizing};
use super::replay::{self, Span, Totals};
use super::rules::RuleSet;
use std::collections::HashMap;

/// A call site: frames innermost first.
#[derive(Clone, Debug, Default)]
pub struct Site<'a> {
    pub python: Vec<PyFrame<'a>>,
    pub native: Vec<NativeFrame<'a>>,
}

/// One allocation of the history (live or freed).
#[derive(Clone, Copy, Debug, Default)]
pub struct AllocView<'a> {
    pub seq: u64,
    pub freed_seq: Option<u64>,
    pub bytes: u64,
    pub h2d_bytes: u64,
    pub api: &'a str,
    pub tag: Option<&'a str>,
    pub captured: bool,
    pub exported: bool,
    /// None: no call site was recorded (below the threshold): frame rules cannot match.
    pub site: Option<&'a Site<'a>>,
    /// The site's id when it has one (allocations of one id with the same facts share a
    /// verdict); 0: none or not known.
    pub site_id: u32,
}

/// The outcome for one device.
#[derive(Clone, Debug)]
pub struct Classified {
    /// Category names: the rule set's, then categories named only by tags.
    pub categories: Vec<String>,
    /// Live and peak per category (indices into `categories`) and for the device.
    pub totals: Totals,
    /// Per allocation, in the order given: its category and the rule behind it (None: the
    /// default).
    pub verdicts: Vec<(usize, Option<usize>)>,
    pub sizing: Option<Sizing>,
}

impl Classified {
    /// Live and peak bytes of the category called `name` (zeros when unknown).
    pub fn category(&self, name: &str) -> (u64, u64) {
        match self.categories.iter().position(|c| c == name) {
            Some(i) => (self.totals.live.get(i).copied().unwrap_or(0), self.totals.peak.get(i).copied().unwrap_or(0)),
            None => (0, 0),
        }
    }
}

/// Classify `allocs` (one device of one process) with `set`, using `probes` (the same
/// device's free-memory queries) for the phase fallback.
pub fn classify_device(set: &RuleSet, allocs: &[AllocView<'_>], probes: &[ProbeRecord]) -> Classified {
    let (categories, verdicts, sizing) = verdicts(set, allocs, probes);
    let spans: Vec<Span> = allocs
        .iter()
        .zip(&verdicts)
        .map(|(a, &(cat, _))| Span { alloc_seq: a.seq, free_seq: a.freed_seq, bytes: a.bytes, cat })
        .collect();
    let (totals, _) = replay::replay(replay::span_changes(&spans), categories.len(), None, 0);
    Classified { categories, totals, verdicts, sizing }
}

/// What decides a verdict, for memoising: allocations from one site with the same facts
/// get the same one (the frames are matched once per distinct key, not per allocation).
#[derive(Clone, PartialEq, Eq, Hash)]
struct MemoKey<'a> {
    site: u32,
    tag: Option<&'a str>,
    api: &'a str,
    bytes: u64,
    flags: u8,
    phase: (bool, bool, bool),
}

/// Category names, per allocation its (category, rule), the sizing query.
type Verdicts = (Vec<String>, Vec<(usize, Option<usize>)>, Option<Sizing>);

/// The phase analysis and the rules on every allocation: category names (the set's, then
/// categories named only by tags), per allocation its category index and rule, the sizing.
fn verdicts(set: &RuleSet, allocs: &[AllocView<'_>], probes: &[ProbeRecord]) -> Verdicts {
    let records: Vec<AllocRecord> = allocs
        .iter()
        .map(|a| AllocRecord { seq: a.seq, bytes: a.bytes, h2d_bytes: a.h2d_bytes, freed_seq: a.freed_seq })
        .collect();
    let analysis = phase::analyze(&records, probes);
    let mut categories: Vec<String> = set.categories().iter().map(|c| c.to_string()).collect();
    let mut verdicts = Vec::with_capacity(allocs.len());
    let mut memo: HashMap<MemoKey<'_>, (usize, Option<usize>)> = HashMap::new();
    for (a, ph) in allocs.iter().zip(&analysis.phases) {
        let subject = Subject {
            tag: a.tag,
            captured: a.captured,
            exported: a.exported,
            api: a.api,
            bytes: a.bytes,
            h2d_bytes: a.h2d_bytes,
            live: Some(a.freed_seq.is_none()),
            native: a.site.map(|s| s.native.as_slice()),
            python: a.site.map(|s| s.python.as_slice()),
            phase: Some(*ph),
        };
        // Only allocations whose site is known by id share verdicts.
        let key = (a.site_id != 0).then(|| MemoKey {
            site: a.site_id,
            tag: a.tag,
            api: a.api,
            bytes: a.bytes,
            flags: u8::from(a.captured)
                | u8::from(a.exported) << 1
                | u8::from(subject.host_filled()) << 2
                | u8::from(a.freed_seq.is_none()) << 3
                | u8::from(a.h2d_bytes > 0) << 4,
            phase: (ph.after_first_probe, ph.before_sizing, ph.in_burst),
        });
        if let Some(v) = key.as_ref().and_then(|k| memo.get(k)) {
            verdicts.push(*v);
            continue;
        }
        let v = set.classify(&subject);
        let cat = match v.category {
            Category::Known(id) => id.index(),
            Category::Tag(name) => match categories.iter().position(|c| c == name) {
                Some(i) => i,
                None => {
                    categories.push(name.to_string());
                    categories.len() - 1
                }
            },
        };
        if let Some(k) = key {
            memo.insert(k, (cat, v.rule));
        }
        verdicts.push((cat, v.rule));
    }
    (categories, verdicts, analysis.sizing)
}

/// A large allocation as the live ledger saw it: the online category it counted it in
/// (index into the built-in six), and from its export on (`export_seq`) the one after.
#[derive(Clone, Copy, Debug, Default)]
pub struct Large<'a> {
    pub view: AllocView<'a>,
    pub online: usize,
    pub online_exported: usize,
    pub export_seq: Option<u64>,
}

impl Large<'_> {
    fn online_at(&self, seq: u64) -> usize {
        match self.export_seq {
            Some(e) if e <= seq => self.online_exported,
            _ => self.online,
        }
    }
}

/// A point of the device's history where the live ledger knew its per-category totals
/// (online categories, all allocations, small ones included): a timeline sample, a query,
/// a failure, the current state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    pub seq: u64,
    pub online: [u64; 6],
}

/// [`classify_history`]'s outcome.
#[derive(Clone, Debug)]
pub struct History {
    pub categories: Vec<String>,
    /// Per large allocation, in the order given: its category and rule.
    pub verdicts: Vec<(usize, Option<usize>)>,
    /// Per point, in the order given: live bytes per category with final categories.
    pub points: Vec<Vec<u64>>,
    /// Per category: the maximum over the points and the large allocations' changes.
    pub peak: Vec<u64>,
    pub sizing: Option<Sizing>,
}

/// Report-time categories for one device whose large allocations are kept one by one
/// (`large`) and whose small ones are known only through the live ledger's online totals at
/// `points`. At each point, the small allocations' share of a category is the point's online
/// figure minus the large allocations' online figure then; the final figure adds the large
/// allocations' final one. Between points (at a change of a large allocation) the small
/// share of the latest point stands. Peaks are the maxima of the final figures over both.
pub fn classify_history(set: &RuleSet, large: &[Large<'_>], probes: &[ProbeRecord], points: &[Point]) -> History {
    let views: Vec<AllocView<'_>> = large.iter().map(|l| l.view).collect();
    let (categories, verdicts, sizing) = verdicts(set, &views, probes);
    let ncat = categories.len().max(6);
    // (seq, kind, cat, delta): kind 0 = final, 1 = online.
    let mut changes: Vec<(u64, u8, usize, i64)> = Vec::with_capacity(large.len() * 4);
    for (l, &(cat, _)) in large.iter().zip(&verdicts) {
        let (a, b) = (l.view.seq, l.view.bytes as i64);
        changes.push((a, 0, cat, b));
        changes.push((a, 1, l.online, b));
        if let Some(e) = l.export_seq.filter(|&e| l.view.freed_seq.is_none_or(|f| e < f) && e >= a) {
            if l.online_exported != l.online {
                changes.push((e, 1, l.online, -b));
                changes.push((e, 1, l.online_exported, b));
            }
        }
        if let Some(f) = l.view.freed_seq {
            changes.push((f, 0, cat, -b));
            changes.push((f, 1, l.online_at(f), -b));
        }
    }
    changes.sort_unstable_by_key(|c| c.0);
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by_key(|&i| points[i].seq);

    let (mut fin, mut onl) = (vec![0i64; ncat], [0i64; 6]);
    let mut small = [0i64; 6];
    let mut peak = vec![0u64; ncat];
    let mut out = vec![Vec::new(); points.len()];
    let settle = |fin: &[i64], small: &[i64; 6], peak: &mut [u64]| -> Vec<u64> {
        let v: Vec<u64> = (0..fin.len()).map(|c| (fin[c] + small.get(c).copied().unwrap_or(0)).max(0) as u64).collect();
        for (p, x) in peak.iter_mut().zip(&v) {
            *p = (*p).max(*x);
        }
        v
    };
    let (mut ci, mut pi) = (0, 0);
    while ci < changes.len() || pi < order.len() {
        let next_change = changes.get(ci).map(|c| c.0);
        let next_point = order.get(pi).map(|&i| points[i].seq);
        // Changes at or before the next point's seq go first (a point shows the state after
        // the record that took it).
        if next_change.is_some_and(|c| next_point.is_none_or(|p| c <= p)) {
            let seq = changes[ci].0;
            while ci < changes.len() && changes[ci].0 == seq {
                let (_, kind, cat, d) = changes[ci];
                if kind == 0 {
                    fin[cat] += d;
                } else if cat < 6 {
                    onl[cat] += d;
                }
                ci += 1;
            }
            if next_point != Some(seq) {
                settle(&fin, &small, &mut peak);
            }
        } else {
            let i = order[pi];
            for c in 0..6 {
                small[c] = (points[i].online[c] as i64 - onl[c]).max(0);
            }
            out[i] = settle(&fin, &small, &mut peak);
            pi += 1;
        }
    }
    History { categories, verdicts, points: out, peak, sizing }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::rules::parse_pack;

    const MIB: u64 = 1 << 20;

    #[test]
    fn frames_phases_tags_and_exports_together() {
        let text = r#"{"culedger_rules": 1, "rules": [
            {"name": "tag", "category": "$tag", "match": {"tag": "*"}},
            {"name": "exp", "category": "ipc", "match": {"exported": true}},
            {"name": "loader", "category": "weights", "match": {"python": {"function": "Runner.load_model"}}},
            {"name": "w", "category": "weights", "match": {"probe": "before_sizing", "host_filled": true, "live": true}},
            {"name": "kv", "category": "kv_pool", "match": {"probe": "sizing_burst"}}]}"#;
        let set = RuleSet::build(&[parse_pack(text, "t").unwrap()]).unwrap();
        let loader = Site { python: vec![PyFrame { file: "/r.py", function: "Runner.load_model" }], native: vec![] };
        let allocs = [
            // 1: weights by frame, 2: weights by the fallback, 3: a scratch freed again.
            AllocView { seq: 1, bytes: 100 * MIB, site: Some(&loader), ..Default::default() },
            AllocView { seq: 2, bytes: 50 * MIB, h2d_bytes: 50 * MIB, ..Default::default() },
            AllocView { seq: 3, freed_seq: Some(4), bytes: 30 * MIB, h2d_bytes: 30 * MIB, ..Default::default() },
            // 6, 7: the KV burst after the query at 5; 8: exported after; 9: a tag of its own.
            AllocView { seq: 6, bytes: 400 * MIB, ..Default::default() },
            AllocView { seq: 7, bytes: 400 * MIB, exported: true, ..Default::default() },
            AllocView { seq: 9, bytes: 10 * MIB, tag: Some("lora"), ..Default::default() },
        ];
        let probes = [ProbeRecord { seq: 5, free: Some(1000 * MIB) }];
        let c = classify_device(&set, &allocs, &probes);
        assert_eq!(c.sizing.map(|s| s.probe), Some(0));
        assert_eq!(c.category("weights"), (150 * MIB, 150 * MIB));
        assert_eq!(c.category("kv_pool"), (400 * MIB, 400 * MIB));
        assert_eq!(c.category("ipc"), (400 * MIB, 400 * MIB), "the export wins over the burst");
        assert_eq!(c.category("lora"), (10 * MIB, 10 * MIB));
        assert_eq!(c.category("other"), (0, 30 * MIB), "the freed scratch: no rule, peak only");
        assert_eq!(c.category("nope"), (0, 0));
        assert_eq!(c.categories.len(), 7);
        let rules: Vec<&str> =
            c.verdicts.iter().map(|&(_, r)| r.map_or("default", |i| &*set.rules()[i].name)).collect();
        assert_eq!(rules, ["loader", "w", "default", "kv", "exp", "tag"]);
        assert_eq!((c.totals.total_live, c.totals.total_peak), (960 * MIB, 960 * MIB));
    }

    /// Small allocations come in through the online totals at the points; large ones are
    /// classified and replayed; a later export moves a large one's online category.
    #[test]
    fn small_shares_from_points_and_large_ones_by_rule() {
        let text = r#"{"culedger_rules": 1, "rules": [
            {"name": "exp", "category": "ipc", "match": {"exported": true}},
            {"name": "kv", "category": "kv_pool", "match": {"bytes": {"min": "100MiB"}}}]}"#;
        let set = RuleSet::build(&[parse_pack(text, "t").unwrap()]).unwrap();
        const IPC: usize = 2;
        const OTHER: usize = 5;
        let large = [
            // 1: 200 MiB, kv by rule, online other; freed at 6.
            Large {
                view: AllocView { seq: 1, freed_seq: Some(6), bytes: 200 * MIB, ..Default::default() },
                online: OTHER,
                online_exported: OTHER,
                export_seq: None,
            },
            // 3: 10 MiB exported at 4: online other, then ipc.
            Large {
                view: AllocView { seq: 3, bytes: 10 * MIB, exported: true, ..Default::default() },
                online: OTHER,
                online_exported: IPC,
                export_seq: Some(4),
            },
        ];
        let online = |other: u64, ipc: u64| {
            let mut v = [0u64; 6];
            v[OTHER] = other * MIB;
            v[IPC] = ipc * MIB;
            v
        };
        // Small: 1 MiB at seq 2 (other), freed at 5; 3 MiB at 7 (other).
        let points = [
            Point { seq: 1, online: online(200, 0) },
            Point { seq: 2, online: online(201, 0) },
            Point { seq: 3, online: online(211, 0) },
            Point { seq: 4, online: online(201, 10) },
            Point { seq: 5, online: online(200, 10) },
            Point { seq: 6, online: online(0, 10) },
            Point { seq: 7, online: online(3, 10) },
            Point { seq: u64::MAX, online: online(3, 10) },
        ];
        let h = classify_history(&set, &large, &[], &points);
        let at = |i: usize, c: usize| h.points[i][c] / MIB;
        assert_eq!((at(2, 1), at(2, IPC), at(2, OTHER)), (200, 10, 1), "the export counts from the start");
        assert_eq!((at(6, 1), at(6, IPC), at(6, OTHER)), (0, 10, 3));
        assert_eq!(h.peak[1] / MIB, 200);
        assert_eq!(h.peak[IPC] / MIB, 10);
        assert_eq!(h.peak[OTHER] / MIB, 3, "other never held the large ones");
        let rules: Vec<Option<&str>> = h.verdicts.iter().map(|v| v.1.map(|i| &*set.rules()[i].name)).collect();
        assert_eq!(rules, [Some("kv"), Some("exp")]);
    }
}
