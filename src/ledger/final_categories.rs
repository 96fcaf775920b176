//! Report-time categories of one device (docs/categories.md "Implementation"): the
//! rules, the phase fallback and the replay over the device's history, run by the report
//! writer on copies taken under the shard lock (never under it). What `json.rs` renders
//! in place of the live ledger's online categories.

use std::collections::{BTreeSet, HashMap};

use culedger_format::report::SiteRec;

use super::device::{Allocation, DeviceStats};
use super::history::{Floor, HistoryView};
use super::SiteResolver;
use crate::classify::matcher::{NativeFrame, PyFrame, Subject};
use crate::classify::phase::ProbeRecord;
use crate::classify::report_time::{classify_history, AllocView, Large, Point, Site};
use crate::classify::rules::RuleSet;
use crate::classify::tags;

/// Per-category figures with final categories, the categories of everything the device
/// renders, and the peaks to keep for a later freeze.
#[derive(Clone, Debug)]
pub(crate) struct Final {
    /// The six built-in categories first, in order, then the others.
    pub names: Vec<String>,
    pub live: Vec<u64>,
    pub peak: Vec<u64>,
    pub allocs: Vec<u64>,
    /// Per timeline sample, probe, failure (and its last probe): live per category.
    pub timeline: Vec<Vec<u64>>,
    pub probes: Vec<Vec<u64>>,
    pub failures: Vec<(Vec<u64>, Option<Vec<u64>>)>,
    /// Per site id: its category (index into `names`) and rule name (None: the default).
    pub sites: HashMap<u32, (usize, Option<String>)>,
    /// Per top allocation, in order: category and rule.
    pub top: Vec<(usize, Option<String>)>,
    pub floor: Floor,
}

/// One site's live bytes per (category, rule), and its latest allocation's (seq, category, rule).
type SiteTally = (Vec<(usize, Option<usize>, u64)>, (u64, usize, Option<usize>));

/// The call sites of `ids`, read once through the caller's resolver (the ledger records
/// site ids only): owned frames, for the borrowed views the rules use.
struct Sites {
    owned: Vec<SiteRec>,
    index: HashMap<u32, usize>,
}

impl Sites {
    fn read(resolver: &dyn SiteResolver, ids: impl Iterator<Item = u32>) -> Sites {
        let ids: BTreeSet<u32> = ids.filter(|&id| id != 0).collect();
        let (mut owned, mut index) = (Vec::new(), HashMap::new());
        for (id, (rec, _)) in resolver.resolve(&ids) {
            index.insert(id, owned.len());
            owned.push(rec);
        }
        Sites { owned, index }
    }

    fn views(&self) -> Vec<Site<'_>> {
        self.owned
            .iter()
            .map(|s| Site {
                python: s.python.iter().map(|f| PyFrame { file: &f.file, function: &f.function }).collect(),
                native: s
                    .native
                    .iter()
                    .map(|f| NativeFrame { object: &f.object, symbol: f.symbol.as_deref(), internal: f.internal })
                    .collect(),
            })
            .collect()
    }
}

fn point(seq: u64, cats: [u64; 6]) -> Point {
    Point { seq, online: cats }
}

/// Classify one device: `stats` and `top` as the shard rendered them, `hist` its history,
/// the call sites its records name through `resolver`.
pub(crate) fn compute(
    set: &RuleSet,
    stats: &DeviceStats,
    top: &[Allocation],
    hist: &HistoryView,
    resolver: &dyn SiteResolver,
) -> Final {
    let sites = Sites::read(resolver, hist.recs.iter().map(|r| r.site));
    let views = sites.views();
    let large: Vec<Large<'_>> = hist
        .recs
        .iter()
        .map(|r| {
            let site = sites.index.get(&r.site).map(|&i| &views[i]);
            Large {
                view: AllocView {
                    seq: r.alloc_seq,
                    freed_seq: (r.free_seq != 0).then_some(r.free_seq),
                    bytes: r.bytes,
                    h2d_bytes: r.h2d_bytes,
                    api: hist.api(r),
                    tag: r.tag.map(tags::name),
                    captured: r.captured,
                    exported: r.export_seq != 0,
                    site,
                    site_id: if site.is_some() { r.site } else { 0 },
                },
                online: usize::from(r.online),
                online_exported: usize::from(r.online_exported),
                export_seq: (r.export_seq != 0).then_some(r.export_seq),
            }
        })
        .collect();
    let probes: Vec<ProbeRecord> = stats
        .probes
        .iter()
        .map(|p| ProbeRecord { seq: p.seq, free: if p.error == 0 { p.free } else { None } })
        .collect();

    // The points: the current state first, then timeline, probes, failures (and their
    // last probes), in that order.
    let mut points = vec![point(u64::MAX, stats.cats.map(|c| c.live))];
    points.extend(stats.timeline.iter().map(|s| point(s.seq, s.cats)));
    points.extend(stats.probes.iter().map(|p| point(p.seq, p.cats)));
    for f in stats.failures.items() {
        points.push(point(f.seq, f.cats));
        if let Some(p) = &f.last_probe {
            points.push(point(p.seq, p.cats));
        }
    }
    let h = classify_history(set, &large, &probes, &points);
    let ncat = h.categories.len();
    let mut vals = h.points.into_iter().map(|mut v| {
        v.resize(ncat, 0);
        v
    });
    let live = vals.next().unwrap_or_else(|| vec![0; ncat]);
    let timeline: Vec<Vec<u64>> = vals.by_ref().take(stats.timeline.iter().count()).collect();
    let probes_out: Vec<Vec<u64>> = vals.by_ref().take(stats.probes.iter().count()).collect();
    let failures: Vec<(Vec<u64>, Option<Vec<u64>>)> = stats
        .failures
        .items()
        .iter()
        .map(|f| {
            let at = vals.next().unwrap_or_default();
            (at, f.last_probe.as_ref().map(|_| vals.next().unwrap_or_default()))
        })
        .collect();

    let mut peak = h.peak;
    peak.resize(ncat, 0);
    if hist.frozen > 0 {
        // The frozen stretch's peaks, as the last write before the freeze computed them.
        for (name, p) in hist.floor.iter().flat_map(|f| f.peaks.iter()) {
            if let Some(i) = h.categories.iter().position(|c| c == name) {
                peak[i] = peak[i].max(*p);
            }
        }
    }
    for (p, l) in peak.iter_mut().zip(&live) {
        *p = (*p).max(*l);
    }

    // Live allocations per category: the small ones as the live ledger counts them (its
    // count less the large live records it holds), plus the large ones by final category.
    let mut allocs = vec![0u64; ncat];
    let mut large_online = [0u64; 6];
    for (c, s) in stats.cats.iter().enumerate() {
        allocs[c] = s.allocs;
    }
    let rule_name = |r: Option<usize>| r.and_then(|i| set.rules().get(i)).map(|r| r.name.to_string());
    // Per site: live bytes per (category, rule), and the latest verdict.
    let mut per_site: HashMap<u32, SiteTally> = HashMap::new();
    for (r, &(cat, rule)) in hist.recs.iter().zip(&h.verdicts) {
        let live_now = r.free_seq == 0;
        if live_now {
            let o = usize::from(if r.export_seq != 0 { r.online_exported } else { r.online });
            large_online[o.min(5)] += 1;
            allocs[cat] += 1;
        }
        if r.site != 0 {
            let e = per_site.entry(r.site).or_insert_with(|| (Vec::new(), (0, cat, rule)));
            if r.alloc_seq >= e.1 .0 {
                e.1 = (r.alloc_seq, cat, rule);
            }
            if live_now {
                match e.0.iter_mut().find(|x| x.0 == cat && x.1 == rule) {
                    Some(x) => x.2 += r.bytes,
                    None => e.0.push((cat, rule, r.bytes)),
                }
            }
        }
    }
    for c in 0..6 {
        allocs[c] = allocs[c].saturating_sub(large_online[c]);
    }
    let sites_out = per_site
        .into_iter()
        .map(|(id, (held, (_, last_cat, last_rule)))| {
            let best = held.iter().max_by_key(|x| (x.2, std::cmp::Reverse(x.0))).map(|x| (x.0, x.1));
            let (cat, rule) = best.unwrap_or((last_cat, last_rule));
            (id, (cat, rule_name(rule)))
        })
        .collect();
    let top_out = top
        .iter()
        .map(|a| match hist.by_seq(a.seq).and_then(|i| h.verdicts.get(i)) {
            Some(&(cat, rule)) => (cat, rule_name(rule)),
            // A small allocation: the live ledger's category, by the insert-time rules.
            None => {
                let subject = Subject {
                    tag: a.facts.tag.map(tags::name),
                    captured: a.facts.captured,
                    exported: a.facts.exported,
                    ..Subject::default()
                };
                (a.category.index(), rule_name(set.classify_insert_time(&subject).rule))
            }
        })
        .collect();
    let upto_seq = stats.timeline.iter().map(|s| s.seq).max().unwrap_or(0);
    let floor = Floor { upto_seq, peaks: h.categories.iter().cloned().zip(peak.iter().copied()).collect() };
    Final {
        names: h.categories,
        live,
        peak,
        allocs,
        timeline,
        probes: probes_out,
        failures,
        sites: sites_out,
        top: top_out,
        floor,
    }
}
