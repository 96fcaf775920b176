//! Report-time categories with consistent live and peak (docs/categories.md,
//! "Implementation: applying the rules when the report is written"): the replay of spans
//! used by `report_time::classify_device` (the engine tests' check on the sims' own
//! histories); the report writer's replay, with the live ledger's points, is
//! `report_time::classify_history`. Pure code.
//!
//! The rules decide an allocation's category only when the report is written (its call
//! site, its phase and whether it was exported later are known then). The peak of a
//! category must be its maximum over the run *with the final categories*, so the history
//! is replayed: every allocation contributes `+bytes` at its `seq` and `-bytes` at its
//! free, under its final category, and the per-category maxima are taken along the way.
//!
//! Memory stays bounded two ways:
//! - allocations below the call-site threshold are not kept one by one: their changes are
//!   logged per *class key* ([`KeyedLog`]); all allocations of a key get one category, and
//!   a later fact change (an export) moves one allocation to another key retroactively by
//!   two compensating events;
//! - history older than a point can be *frozen* ([`Frozen`]): replayed once with the
//!   categories known then, keeping only the per-category live and peak at that point.

use std::collections::HashMap;
use std::hash::Hash;

/// One allocation kept individually, with its final category.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub alloc_seq: u64,
    pub free_seq: Option<u64>,
    pub bytes: u64,
    pub cat: usize,
}

/// A change of live bytes in a category at a point of the process order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub seq: u64,
    pub cat: usize,
    pub delta: i64,
}

/// Live bytes per category at one point, for the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub seq: u64,
    pub live: u64,
    pub cats: Vec<u64>,
}

/// Per-category live and peak after a replay (or at a frozen point).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Every change at or before this seq is included.
    pub upto_seq: u64,
    pub live: Vec<u64>,
    pub peak: Vec<u64>,
    pub total_live: u64,
    pub total_peak: u64,
}

/// A frozen prefix of the history: its totals, computed with the categories known when it
/// was frozen. Later categories apply only to what happens after it.
pub type Frozen = Totals;

impl Totals {
    fn new(ncat: usize) -> Totals {
        Totals { upto_seq: 0, live: vec![0; ncat], peak: vec![0; ncat], total_live: 0, total_peak: 0 }
    }

    /// Apply one change; peaks are taken by [`Totals::settle`] once every change of the
    /// same `seq` is in (a move is a `-` and a `+` at one seq: never a peak in between).
    fn apply(&mut self, c: &Change) {
        if c.cat >= self.live.len() {
            self.live.resize(c.cat + 1, 0);
            self.peak.resize(c.cat + 1, 0);
        }
        let add = |v: &mut u64| {
            *v = if c.delta >= 0 { v.saturating_add(c.delta as u64) } else { v.saturating_sub(c.delta.unsigned_abs()) }
        };
        add(&mut self.live[c.cat]);
        add(&mut self.total_live);
        self.upto_seq = self.upto_seq.max(c.seq);
    }

    fn settle(&mut self) {
        for (p, l) in self.peak.iter_mut().zip(&self.live) {
            *p = (*p).max(*l);
        }
        self.total_peak = self.total_peak.max(self.total_live);
    }
}

/// The changes of individually kept allocations: `+bytes` at the allocation, `-bytes` at
/// the free.
pub fn span_changes(spans: &[Span]) -> impl Iterator<Item = Change> + '_ {
    spans.iter().flat_map(|s| {
        let add = Change { seq: s.alloc_seq, cat: s.cat, delta: s.bytes as i64 };
        let free = s.free_seq.map(|seq| Change { seq, cat: s.cat, delta: -(s.bytes as i64) });
        std::iter::once(add).chain(free)
    })
}

/// Replay `changes` (any order) after `base` (changes at or before `base.upto_seq` are
/// skipped: they are in it). `sample_every`: keep a timeline sample after every n-th change
/// (0: none), plus the last state.
pub fn replay(
    changes: impl IntoIterator<Item = Change>,
    ncat: usize,
    base: Option<&Frozen>,
    sample_every: usize,
) -> (Totals, Vec<Sample>) {
    let mut t = base.cloned().unwrap_or_else(|| Totals::new(ncat));
    let floor = base.map_or(0, |b| b.upto_seq);
    let mut cs: Vec<Change> = changes.into_iter().filter(|c| base.is_none() || c.seq > floor).collect();
    // Within one seq, additions first: live never dips below zero in between.
    cs.sort_by_key(|c| (c.seq, std::cmp::Reverse(c.delta)));
    let mut samples = Vec::new();
    let mut group = 0;
    for (i, c) in cs.iter().enumerate() {
        t.apply(c);
        if cs.get(i + 1).is_some_and(|n| n.seq == c.seq) {
            continue;
        }
        t.settle();
        if sample_every > 0 && (group % sample_every == 0 || i + 1 == cs.len()) {
            samples.push(Sample { seq: c.seq, live: t.total_live, cats: t.live.clone() });
        }
        group += 1;
    }
    (t, samples)
}

/// Freeze everything at or before `upto` (on top of an earlier freeze, if any).
pub fn freeze(changes: impl IntoIterator<Item = Change>, ncat: usize, prior: Option<&Frozen>, upto: u64) -> Frozen {
    let (mut t, _) = replay(changes.into_iter().filter(|c| c.seq <= upto), ncat, prior, 0);
    t.upto_seq = t.upto_seq.max(upto);
    t
}

/// Changes of small allocations, aggregated per class key (for example: tag, captured,
/// exported, API, query epoch). Every allocation of a key gets the key's category.
#[derive(Clone, Debug)]
pub struct KeyedLog<K> {
    log: HashMap<K, Vec<(u64, i64)>>,
}

impl<K> Default for KeyedLog<K> {
    fn default() -> Self {
        KeyedLog { log: HashMap::new() }
    }
}

impl<K: Hash + Eq + Clone> KeyedLog<K> {
    pub fn alloc(&mut self, key: &K, seq: u64, bytes: u64) {
        self.log.entry(key.clone()).or_default().push((seq, bytes as i64));
    }

    pub fn free(&mut self, key: &K, seq: u64, bytes: u64) {
        self.log.entry(key.clone()).or_default().push((seq, -(bytes as i64)));
    }

    /// An allocation made at `alloc_seq` (freed at `free_seq`, if it was) belongs to `to`
    /// from its beginning, not to `from`: its whole history moves (what an IPC export of an
    /// allocation made long before does).
    pub fn move_allocation(&mut self, from: &K, to: &K, alloc_seq: u64, free_seq: Option<u64>, bytes: u64) {
        let b = bytes as i64;
        let f = self.log.entry(from.clone()).or_default();
        f.push((alloc_seq, -b));
        if let Some(s) = free_seq {
            f.push((s, b));
        }
        let t = self.log.entry(to.clone()).or_default();
        t.push((alloc_seq, b));
        if let Some(s) = free_seq {
            t.push((s, -b));
        }
    }

    /// Number of logged changes (the memory this costs).
    pub fn len(&self) -> usize {
        self.log.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every change, with the category `category(key)` gives each key.
    pub fn changes(&self, mut category: impl FnMut(&K) -> usize) -> Vec<Change> {
        let mut out = Vec::with_capacity(self.len());
        for (k, v) in &self.log {
            let cat = category(k);
            out.extend(v.iter().map(|&(seq, delta)| Change { seq, cat, delta }));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: live per category at every seq, by brute force.
    fn brute(spans: &[Span], ncat: usize) -> (Vec<u64>, Vec<u64>, u64) {
        let last = spans.iter().flat_map(|s| [s.alloc_seq, s.free_seq.unwrap_or(0)]).max().unwrap_or(0);
        let (mut peak, mut total_peak) = (vec![0u64; ncat], 0);
        let mut live = vec![0u64; ncat];
        for t in 0..=last {
            live = vec![0; ncat];
            for s in spans {
                if s.alloc_seq <= t && s.free_seq.is_none_or(|f| f > t) {
                    live[s.cat] += s.bytes;
                }
            }
            for c in 0..ncat {
                peak[c] = peak[c].max(live[c]);
            }
            total_peak = total_peak.max(live.iter().sum());
        }
        (live, peak, total_peak)
    }

    fn random_spans(seed: &mut u64, n: usize, ncat: usize) -> Vec<Span> {
        let mut next = || {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        };
        // Distinct seqs: allocation i at 2i+1; frees at even seqs after it.
        (0..n as u64)
            .map(|i| {
                let alloc_seq = 2 * i + 1;
                let free_seq = (next() % 3 != 0).then(|| alloc_seq + 1 + 2 * (next() % 6));
                Span { alloc_seq, free_seq, bytes: 1 + next() % 1000, cat: (next() % ncat as u64) as usize }
            })
            .collect()
    }

    #[test]
    fn replay_matches_brute_force() {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200 {
            // Frees of several spans may share a seq: replay settles a seq's changes together.
            let spans = random_spans(&mut seed, 20, 4);
            let (t, samples) = replay(span_changes(&spans), 4, None, 1);
            let (live, peak, total_peak) = brute(&spans, 4);
            assert_eq!(t.live, live);
            assert_eq!(t.peak, peak);
            assert_eq!(t.total_peak, total_peak);
            assert_eq!(t.total_live, live.iter().sum::<u64>());
            assert_eq!(samples.last().map(|s| &s.cats), Some(&live));
        }
    }

    /// The reason for replaying: an allocation exported long after it was made counts as
    /// `ipc` over its whole life, so `ipc` peaks with it and `other` never held it.
    #[test]
    fn a_later_export_moves_the_whole_history() {
        const OTHER: usize = 5;
        const IPC: usize = 2;
        #[derive(Clone, PartialEq, Eq, Hash)]
        struct Key {
            exported: bool,
        }
        let (plain, exported) = (Key { exported: false }, Key { exported: true });
        let mut log = KeyedLog::default();
        log.alloc(&plain, 1, 100); // A
        log.alloc(&plain, 2, 50); // B
        log.free(&plain, 3, 50); // B freed
                                 // At seq 5, A is exported: the live ledger would have had other = 150 at seq 2.
        log.move_allocation(&plain, &exported, 1, None, 100);
        let cat = |k: &Key| if k.exported { IPC } else { OTHER };
        let (t, _) = replay(log.changes(cat), 6, None, 0);
        assert_eq!((t.live[IPC], t.peak[IPC]), (100, 100));
        assert_eq!((t.live[OTHER], t.peak[OTHER]), (0, 50), "other only ever held B");
        assert_eq!((t.total_live, t.total_peak), (100, 150));
        assert_eq!(log.len(), 5);
    }

    #[test]
    fn freezing_a_prefix_gives_the_same_totals_when_categories_do_not_change() {
        let mut seed = 0x1234_5678_9abc_def1;
        for _ in 0..100 {
            let spans = random_spans(&mut seed, 30, 3);
            let (full, _) = replay(span_changes(&spans), 3, None, 0);
            let f1 = freeze(span_changes(&spans), 3, None, 20);
            let f2 = freeze(span_changes(&spans), 3, Some(&f1), 40);
            let (after, _) = replay(span_changes(&spans), 3, Some(&f2), 0);
            assert_eq!(after, Totals { upto_seq: after.upto_seq, ..full.clone() });
            assert!(f2.upto_seq >= 40);
        }
    }

    #[test]
    fn samples_follow_the_changes() {
        let spans = [
            Span { alloc_seq: 1, free_seq: Some(4), bytes: 10, cat: 0 },
            Span { alloc_seq: 2, free_seq: None, bytes: 5, cat: 1 },
            Span { alloc_seq: 3, free_seq: None, bytes: 7, cat: 0 },
        ];
        let (t, samples) = replay(span_changes(&spans), 2, None, 2);
        assert_eq!(samples.iter().map(|s| s.seq).collect::<Vec<_>>(), [1, 3, 4]);
        assert_eq!(samples[1], Sample { seq: 3, live: 22, cats: vec![17, 5] });
        assert_eq!((t.peak, t.total_peak), (vec![17, 5], 22));
        let (none, s) = replay(std::iter::empty(), 2, None, 1);
        assert!(s.is_empty() && none.total_peak == 0);
    }
}
