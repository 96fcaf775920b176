//! Classifying one device's recorded history when the report is written: the phase analysis,
//! the rules (first match wins) on every allocation, and the replay that gives per-category
//! live and peak bytes with the final categories. Pure; what the report writer calls once
//! the ledger keeps call sites ([4]), and what the engine simulations' tests call today on the
//! histories the simulations record (shim-tests/scenarios/tests/engines.rs).

use super::matcher::{Category, NativeFrame, PyFrame, Subject};
use super::phase::{self, AllocRecord, ProbeRecord, Sizing};
use super::replay::{self, Span, Totals};
use super::rules::RuleSet;

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
    let records: Vec<AllocRecord> = allocs
        .iter()
        .map(|a| AllocRecord { seq: a.seq, bytes: a.bytes, h2d_bytes: a.h2d_bytes, freed_seq: a.freed_seq })
        .collect();
    let analysis = phase::analyze(&records, probes);
    let mut categories: Vec<String> = set.categories().iter().map(|c| c.to_string()).collect();
    let mut verdicts = Vec::with_capacity(allocs.len());
    let mut spans = Vec::with_capacity(allocs.len());
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
        verdicts.push((cat, v.rule));
        spans.push(Span { alloc_seq: a.seq, free_seq: a.freed_seq, bytes: a.bytes, cat });
    }
    let (totals, _) = replay::replay(replay::span_changes(&spans), categories.len(), None, 0);
    Classified { categories, totals, verdicts, sizing: analysis.sizing }
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
}
