//! The reconciliation: from what a free-memory query told a process to what was free when
//! its allocation failed (or its pool was allocated), item by item (docs/explain.md).
//!
//! Over the window from the query to the end (the failed attempt, or the query that closes
//! the window: the process's own next record, when it is a query):
//! - `pool`: the attempts of the burst that succeeded before the end (the first half of a
//!   pool whose second half failed);
//! - `allocated`: the process's other tracked allocations on the device, net of its frees,
//!   by category;
//! - `driver_cost`: its hidden driver costs on the device, by API, de-noised (`costs`);
//! - `other_processes`: what the run's other processes did on the device: their tracked
//!   allocations (net), their own measured driver costs, and the contexts they created on it
//!   (a process whose first record on the device falls in the window; its size estimated as
//!   `costs::context_estimate` does);
//! - `unexplained`: when a closing query measured the free memory, the rest: told minus free
//!   minus the items. Memory that no report of the run explains: a process outside the run
//!   (or whose report could not be read), allocation rounding, unmeasured driver memory.
//!
//! Also which part of its burst a failed attempt is ([`part_of`]) and the reconciliation a
//! device's pool went through ([`failure_reconciliation`], `culedger diff`'s side by side).
//!
//! Typed values only: what a query's process is called, what each item is and its notes are
//! written by the renderer ([`ReconWords`], the CLI's `explain::recon`).

use crate::callers;
use crate::clock::Clock;
use crate::costs::{self, Call, CostNote};
use crate::explain::{ContextOf, Item, ItemKind, Note, Part, QueryRef, Recon, Subject, Who};
use crate::groups::{DeviceGroup, Member};
use crate::model::{Probe, Report, CATEGORIES};
use crate::steps::{self, burst_ending_at, query_before, Kind, Step};

/// The words of a reconciliation, written by the renderer.
pub trait ReconWords {
    /// A process in a sentence (a query's `process`).
    fn who(&self, r: &Report) -> String;
    /// Each item's `what` and `notes`, from its subject and noted values; times on the run's
    /// clock.
    fn items(&self, items: &mut [Item], c: &Clock);
}

/// A free-memory query of `m` as the reconciliation shows it.
pub fn query_ref(g: &DeviceGroup, m: Member, p: &Probe, words: &dyn ReconWords) -> QueryRef {
    QueryRef {
        pid: m.pid(),
        process: words.who(m.report),
        at_us: g.clock.since(m.abs_us(p)),
        api: p.api.clone(),
        free_bytes: p.free_bytes.unwrap_or(0),
        total_bytes: p.total_bytes,
        caller: callers::query_caller(m.report, p.site),
        caller_chain: callers::explaining(m.report, p.site, true).map(|e| e.chain),
    }
}

/// A reconciliation line with nothing but its kind, subject and bytes (its words come last,
/// from the subject: [`ReconWords::items`]).
fn item(kind: ItemKind, subject: Subject, bytes: i64) -> Item {
    Item {
        kind,
        what: String::new(),
        subject,
        pids: Vec::new(),
        category: None,
        api: None,
        calls: 0,
        bytes,
        measured_bytes: None,
        estimated: false,
        uncertain: false,
        expected: false,
        callers: Vec::new(),
        notes: Vec::new(),
        noted: Vec::new(),
    }
}

/// A de-noised measured call and its notes.
struct Measured<'a> {
    call: Call<'a>,
    bytes: i64,
    uncertain: bool,
    notes: Vec<CostNote>,
}

/// Every member's measured calls on the device that ended in `(t0, t1]`, de-noised.
fn measured_calls<'a>(g: &DeviceGroup<'a>, t0: i64, t1: i64) -> Vec<(Member<'a>, Vec<Measured<'a>>)> {
    let est = costs::context_estimate(g);
    g.members
        .iter()
        .map(|m| {
            let calls = costs::calls_of(*m)
                .into_iter()
                .filter(|c| c.end_us > t0 && c.end_us <= t1)
                .map(|call| {
                    let (bytes, uncertain, notes) = costs::denoise(g, &call, est.as_ref());
                    Measured { call, bytes, uncertain, notes }
                })
                .collect();
            (*m, calls)
        })
        .collect()
}

/// One item per API of one process's measured calls.
fn cost_items(m: Member, calls: &[Measured]) -> Vec<Item> {
    let mut apis: Vec<&str> = Vec::new();
    for c in calls {
        if !apis.contains(&c.call.api) {
            apis.push(c.call.api);
        }
    }
    apis.into_iter()
        .map(|api| {
            let mine: Vec<&Measured> = calls.iter().filter(|c| c.call.api == api).collect();
            let calls: i64 = mine.iter().map(|c| c.call.calls).sum();
            let by = Who::of(m.report);
            let mut it = item(ItemKind::DriverCost, Subject::DriverCost { api: api.to_string(), calls, by }, 0);
            it.bytes = mine.iter().map(|c| c.bytes).sum();
            it.api = Some(api.to_string());
            it.calls = calls;
            it.pids = vec![m.pid()];
            it.measured_bytes = Some(mine.iter().map(|c| c.call.measured).sum());
            it.uncertain = mine.iter().any(|c| c.uncertain);
            it.noted.extend(mine.iter().flat_map(|c| &c.notes).map(|n| Note::Cost(n.clone())));
            let sites =
                m.dev.driver_costs.iter().filter(|d| costs::cost_label(d) == api).flat_map(|d| d.sites.iter().copied());
            for s in sites {
                push_unique(&mut it.callers, callers::with_chain(m.report, Some(s)));
            }
            it
        })
        .collect()
}

/// A context another process created on the device inside the window.
struct ContextPart {
    /// Its estimated size, when it is counted here (not inside another figure).
    bytes: Option<i64>,
    uncertain: bool,
    note: Option<Note>,
    /// Created by peer access (else by the process starting to use the GPU).
    peer: bool,
}

impl ContextPart {
    fn of(&self) -> ContextOf {
        ContextOf { peer: self.peer, size_known: self.bytes.is_some() }
    }
}

/// The window of a context process `o` created on the device: its first record there (a
/// `peer_access` event's measured window when that is the first record).
fn context_window(o: Member) -> Option<(i64, i64)> {
    let first = o.first_us()?;
    let peer = o.dev.events.iter().find(|e| e.kind == "peer_access" && e.t0_us.map(|t| o.abs_of(t)) == Some(first));
    Some(match peer {
        Some(e) => (first, o.abs_us(e)),
        None => (first, first),
    })
}

/// The context `o` created on the device in `(t0, t1]`, if it did, counted with the
/// estimated context size (`costs::context_estimate`); of unknown size without an estimate.
fn context_part(g: &DeviceGroup, o: Member, t0: i64, t1: i64) -> Option<ContextPart> {
    let ctx = context_window(o).filter(|(first, _)| *first > t0 && *first <= t1)?;
    // With an estimate, `costs::denoise` subtracts a context from the one measured call
    // that holds it, if any: it belongs to `o` either way. Without one, a call whose window
    // holds it is marked uncertain: that figure may include it.
    let peer = ctx.1 > ctx.0;
    Some(match costs::context_estimate(g) {
        Some(est) => ContextPart { bytes: Some(est.bytes), uncertain: false, note: None, peer },
        None => ContextPart { bytes: None, uncertain: true, note: Some(Note::ContextSizeUnknown), peer },
    })
}

/// What process `o` did on the device in `(t0, t1]` besides the process reconciled: its
/// tracked allocations (net), its own measured costs, and its context if it created one.
/// The flag says whether the item is a context alone.
fn other_item(
    g: &DeviceGroup,
    o: Member,
    t0: i64,
    t1: i64,
    measured: &[(Member, Vec<Measured>)],
) -> Option<(Item, bool)> {
    let calls =
        measured.iter().find(|(x, _)| std::ptr::eq(x.report, o.report)).map(|(_, v)| v.as_slice()).unwrap_or(&[]);
    let total = |at: i64| o.live_at(at).iter().sum::<i64>();
    let tracked = total(t1) - total(t0);
    let cost: i64 = calls.iter().map(|c| c.bytes).sum();
    let costs = (!calls.is_empty()).then(|| {
        let mut apis: Vec<String> = calls.iter().map(|c| c.call.api.to_string()).collect();
        apis.dedup();
        (cost, apis)
    });
    let context = context_part(g, o, t0, t1);
    let who = Who::of(o.report);
    let context_only = tracked == 0 && costs.is_none() && context.as_ref().is_some_and(|c| c.bytes.is_some());
    let subject = match &context {
        Some(c) if context_only => Subject::Context { who, peer: c.peer },
        None if tracked == 0 && costs.is_none() => return None,
        _ => Subject::Process { who, tracked, costs, context: context.as_ref().map(ContextPart::of) },
    };
    let mut it = item(ItemKind::OtherProcesses, subject, tracked + cost);
    it.pids = vec![o.pid()];
    it.uncertain = calls.iter().any(|c| c.uncertain);
    if let Some(c) = context {
        if let Some(b) = c.bytes {
            it.bytes += b;
            it.estimated = true;
        }
        it.uncertain |= c.uncertain;
        it.noted.extend(c.note);
    }
    Some((it, context_only))
}

/// Items of other processes; contexts alone are put together in one item.
fn others_items(
    g: &DeviceGroup,
    skip: Option<Member>,
    t0: i64,
    t1: i64,
    measured: &[(Member, Vec<Measured>)],
) -> Vec<Item> {
    let mut items = Vec::new();
    let mut contexts: Vec<Item> = Vec::new();
    for o in g.members.iter().filter(|o| skip.is_none_or(|s| !std::ptr::eq(o.report, s.report))) {
        match other_item(g, *o, t0, t1, measured) {
            Some((it, true)) => contexts.push(it),
            Some((it, false)) => items.push(it),
            None => {}
        }
    }
    items.extend(merge_contexts(contexts));
    items
}

/// Contexts of several processes as one item (one alone stays as it is).
fn merge_contexts(contexts: Vec<Item>) -> Vec<Item> {
    if contexts.len() <= 1 {
        return contexts;
    }
    if contexts.iter().any(|c| c.expected != contexts[0].expected) {
        let (expected, peer): (Vec<Item>, Vec<Item>) = contexts.into_iter().partition(|c| c.expected);
        let mut out = merge_contexts(peer);
        out.extend(merge_contexts(expected));
        return out;
    }
    let peer = contexts.iter().all(|c| matches!(c.subject, Subject::Context { peer: true, .. }));
    let subject = Subject::Contexts { count: contexts.len(), peer };
    let mut it = item(contexts[0].kind, subject, contexts.iter().map(|c| c.bytes).sum());
    it.pids = contexts.iter().flat_map(|c| c.pids.clone()).collect();
    it.estimated = true;
    it.expected = contexts[0].expected;
    vec![it]
}

/// The changes per category of the steps `[from, to)` (rises and falls of the timeline).
fn cats_between(steps: &[Step], from: usize, to: usize) -> [i64; 6] {
    let mut out = [0i64; 6];
    for s in &steps[from.min(steps.len())..to.min(steps.len())] {
        for (o, c) in out.iter_mut().zip(s.cats) {
            *o += c;
        }
    }
    out
}

fn push_unique(v: &mut Vec<String>, s: Option<String>) {
    if let Some(s) = s {
        if !v.contains(&s) {
            v.push(s);
        }
    }
}

/// The caller of an allocation step, when the report kept it.
fn step_caller(m: Member, s: &Step) -> Option<String> {
    s.top().and_then(|a| a.caller.clone().or_else(|| callers::caller(m.report, a.site)))
}

/// The reconciliation of process `m` on device `g` from the query at `steps[query]` to the
/// step `steps[end]` (a failed attempt, or the last attempt of a pool). `pool` lists the
/// burst's attempts up to `end` (their successful ones are the `pool` item).
pub fn reconcile<'a>(
    g: &DeviceGroup<'a>,
    m: Member<'a>,
    steps: &[Step<'a>],
    query: usize,
    end: usize,
    pool: &[usize],
    words: &dyn ReconWords,
) -> Recon {
    let Kind::Query(probe) = steps[query].kind else { unreachable!("the window starts at a query") };
    let told = probe.free_bytes.unwrap_or(0);
    let t0 = steps[query].abs_us;
    // The process's next record after the end, when it is a query, closes the window. Failed
    // attempts of the same size in between are the allocator's retry (PyTorch's caching
    // allocator releases its cache and tries once more before it raises, and its
    // out-of-memory message asks the driver then): the query after them still closes it.
    let mut next = end + 1;
    if matches!(steps[end].kind, Kind::Failed(_)) {
        while steps.get(next).is_some_and(|s| matches!(s.kind, Kind::Failed(_)) && s.bytes == steps[end].bytes) {
            next += 1;
        }
    }
    let closing = steps.get(next).and_then(|s| s.told());
    let (last, t1) = match closing {
        Some(_) => (next + 1, steps[next].abs_us),
        None => (end + 1, steps[end].abs_us),
    };
    let mut items: Vec<Item> = Vec::new();

    // The pool so far.
    let in_pool = |i: usize| pool.contains(&i) && matches!(steps[i].kind, Kind::Alloc { .. });
    let pool_idx: Vec<usize> = (query + 1..last.min(steps.len())).filter(|&i| in_pool(i)).collect();
    let pool_cats = pool_idx.iter().fold([0i64; 6], |mut acc, &i| {
        for (a, c) in acc.iter_mut().zip(steps[i].cats) {
            *a += c;
        }
        acc
    });
    if !pool_idx.is_empty() {
        let main = (0..6).max_by_key(|&i| pool_cats[i]).unwrap_or(5);
        let subject = Subject::Pool { category: CATEGORIES[main].to_string(), allocations: pool_idx.len() };
        let mut it = item(ItemKind::Pool, subject, 0);
        it.bytes = pool_idx.iter().map(|&i| steps[i].bytes).sum();
        it.category = Some(CATEGORIES[main].to_string());
        it.calls = pool_idx.len() as i64;
        it.pids = vec![m.pid()];
        for &i in &pool_idx {
            push_unique(&mut it.callers, step_caller(m, &steps[i]));
        }
        items.push(it);
    }

    // The process's other tracked allocations, by category.
    let own = cats_between(steps, query + 1, last);
    for (c, cat) in CATEGORIES.iter().enumerate() {
        let bytes = own[c] - pool_cats[c];
        if bytes == 0 {
            continue;
        }
        let subject = Subject::Allocated { category: cat.to_string(), by: Who::of(m.report), net: bytes };
        let mut it = item(ItemKind::Allocated, subject, bytes);
        it.category = Some(cat.to_string());
        it.pids = vec![m.pid()];
        for i in (query + 1..last.min(steps.len())).filter(|&i| !in_pool(i)) {
            if matches!(steps[i].kind, Kind::Alloc { category, .. } if category == *cat) {
                push_unique(&mut it.callers, step_caller(m, &steps[i]));
            }
        }
        items.push(it);
    }

    let measured = measured_calls(g, t0, t1);
    if let Some((_, mine)) = measured.iter().find(|(o, _)| std::ptr::eq(o.report, m.report)) {
        items.extend(cost_items(m, mine));
    }
    items.extend(others_items(g, Some(m), t0, t1, &measured));
    words.items(&mut items, &g.clock);

    let explained: i64 = items.iter().map(|i| i.bytes).sum();
    let (free_bytes, closed_by, unexplained) = match closing {
        Some(p) => {
            let free = p.free_bytes.unwrap_or(0);
            (free, Some(query_ref(g, m, p, words)), Some(told - free - explained))
        }
        None => (told - explained, None, None),
    };
    Recon { query: query_ref(g, m, probe, words), items, free_bytes, closed_by, unexplained_bytes: unexplained }
}

/// The hidden memory of a device in `(t0, t1]` (absolute µs): every process's measured
/// driver costs by API (`driver_cost` items), and the contexts processes created there
/// (`context` items, estimated).
pub fn hidden_in_window(g: &DeviceGroup, t0: i64, t1: i64, words: &dyn ReconWords) -> Vec<Item> {
    let measured = measured_calls(g, t0, t1);
    let mut items: Vec<Item> = measured.iter().flat_map(|(m, calls)| cost_items(*m, calls)).collect();
    let mut contexts = Vec::new();
    for o in &g.members {
        let Some(c) = context_part(g, *o, t0, t1) else { continue };
        let who = Who::of(o.report);
        let what = match c.bytes {
            Some(_) => Subject::Context { who, peer: c.peer },
            None => Subject::Process { who, tracked: 0, costs: None, context: Some(c.of()) },
        };
        let mut it = item(ItemKind::Context, what, c.bytes.unwrap_or(0));
        it.pids = vec![o.pid()];
        it.expected = !c.peer;
        it.estimated = c.bytes.is_some();
        it.uncertain = c.uncertain;
        it.noted.extend(c.note);
        if c.bytes.is_some() {
            contexts.push(it);
        } else {
            items.push(it);
        }
    }
    items.extend(merge_contexts(contexts));
    words.items(&mut items, &g.clock);
    items
}

/// The category of a burst: that of its allocations, else (a burst of failed attempts only)
/// the one the failed attempt's own call site gives it, as the report says; and whether it
/// came from the attempt's own site.
pub fn burst_category<'a>(steps: &'a [Step], burst: &[usize]) -> (Option<&'a str>, bool) {
    let alloc = burst.iter().find_map(|&j| match steps[j].kind {
        Kind::Alloc { category, .. } => Some(category),
        _ => None,
    });
    match alloc {
        Some(c) => (Some(c), false),
        None => (burst.iter().find_map(|&j| steps[j].failure().and_then(|f| f.category.as_deref())), true),
    }
}

/// Which part of its burst a failed attempt is. A burst whose call site names a category
/// other than the KV pool's (a collective library's window after the pool, draft weights
/// loaded after it) is no pool, whatever its size against the last query.
pub fn part_of(steps: &[Step], burst: &[usize], told: Option<i64>, category: Option<&str>, own: bool) -> Part {
    let total: i64 = burst.iter().map(|&i| steps[i].bytes).sum();
    let kv = category == Some("kv_pool");
    // A run of allocations the rules named for something else than a pool (weights loaded
    // after the sizing query, a communication window) is no pool either; the default
    // category (other) says nothing, and the size against the last query decides.
    let other_site = category.is_some_and(|c| c != "kv_pool" && (own || c != "other"));
    let is_pool =
        (!other_site && told.is_some_and(|t| total.saturating_mul(2) > t)) || category == Some("kv_pool");
    let n = burst.len();
    let equal = burst.iter().all(|&i| (steps[i].bytes - steps[burst[0]].bytes).abs() * 100 <= steps[burst[0]].bytes);
    match (is_pool, n) {
        (false, 1) => Part::Allocation,
        (false, _) => Part::OfBurst(n),
        (true, 1) => Part::Pool { kv },
        (true, 2) if equal => Part::SecondHalf { kv },
        (true, _) => Part::PartOf { n, kv },
    }
}

/// What failed of a pool: the call, its size and which part of the pool it was.
#[derive(Debug, Clone)]
pub struct FailedPart {
    pub api: String,
    pub bytes: i64,
    pub part: Part,
}

/// The reconciliation a device's pool went through: that of the earliest failed allocation on
/// the device, else of the largest pool sized there (to the end of its burst).
#[derive(Debug, Clone)]
pub struct PoolWindow {
    pub process: String,
    /// The failed attempt, when the pool failed.
    pub failed: Option<FailedPart>,
    pub category: Option<String>,
    pub recon: Recon,
}

/// See [`PoolWindow`].
pub fn failure_reconciliation(g: &DeviceGroup, words: &dyn ReconWords) -> Option<PoolWindow> {
    let mut best: Option<(i64, PoolWindow)> = None;
    for m in &g.members {
        let st = steps::steps(*m);
        if let Some(i) = st.iter().position(|s| s.failure().is_some()) {
            let burst = burst_ending_at(&st, i);
            let Some(q) = query_before(&st, burst[0]) else { continue };
            let recon = reconcile(g, *m, &st, q, i, &burst, words);
            let (category, own) = burst_category(&st, &burst);
            let part = part_of(&st, &burst, Some(recon.query.free_bytes), category, own);
            let f = st[i].failure().map(|f| FailedPart { api: f.api.clone(), bytes: f.bytes, part });
            // The earliest failure wins over any pool.
            let key = -st[i].abs_us - (1 << 60);
            if best.as_ref().is_none_or(|(k, _)| key > *k) {
                let category = category.map(str::to_string);
                best = Some((key, PoolWindow { process: words.who(m.report), failed: f, category, recon }));
            }
            continue;
        }
        let Some(sz) = steps::sizing(&st) else { continue };
        let end = *sz.burst.last().unwrap_or(&sz.query);
        let recon = reconcile(g, *m, &st, sz.query, end, &sz.burst, words);
        let category = sz.burst.iter().find_map(|&j| match st[j].kind {
            Kind::Alloc { category, .. } => Some(category.to_string()),
            _ => None,
        });
        if best.as_ref().is_none_or(|(k, _)| sz.pool > *k && *k >= 0) {
            best = Some((sz.pool, PoolWindow { process: words.who(m.report), failed: None, category, recon }));
        }
    }
    best.map(|(_, w)| w)
}
