//! A device's events, bounded without losing what they add up to: the first
//! [`EVENTS_KEPT`](super::EVENTS_KEPT) are kept as they came; once the list is full, alike
//! events (same kind, API and what their detail says besides a size) between the same two
//! free-memory queries or failures are folded into one, which keeps their count (`calls`),
//! their summed size and the span from the first one's start to the last one's end. A
//! measured call's cost is then never dropped because other calls came first (a run's 3000
//! lazy library loads of 0 bytes once filled the list before its graph captures), and a sum
//! between two queries stays exact. An event that fits nowhere (the list full of events that
//! do not fold) is counted in `total` only, as before.

use super::stats::{Event, EventKind};

#[derive(Clone, Debug, Default)]
pub(crate) struct Events<const N: usize> {
    items: Vec<Event>,
    total: u64,
    /// `total` when the whole list was last folded: it is folded again only once
    /// [`Self::FOLD_EVERY`] more events have come (a list of events that do not fold is not
    /// folded on every push).
    folded_at: Option<u64>,
}

/// Whether events of this kind are folded (probes and failures are each a moment of their own).
fn folds(kind: EventKind) -> bool {
    !matches!(kind, EventKind::Probe | EventKind::Failure)
}

/// What an event's detail says besides its size: the detail after a leading `N bytes`
/// (`N bytes: lazy loading of libX.so ...` -> `: lazy loading of libX.so ...`).
fn detail_key(e: &Event) -> &str {
    match e.bytes {
        Some(b) => {
            let lead = b.to_string();
            match e.detail.strip_prefix(lead.as_str()).and_then(|r| r.strip_prefix(" bytes")) {
                Some(rest) => rest,
                None => &e.detail,
            }
        }
        None => &e.detail,
    }
}

fn alike(a: &Event, b: &Event) -> bool {
    folds(a.kind)
        && a.kind == b.kind
        && a.epoch == b.epoch
        && a.api == b.api
        && a.bytes.is_some() == b.bytes.is_some()
        && detail_key(a) == detail_key(b)
}

/// Fold `earlier` into `later` (alike): the later one's moment, the earlier one's start.
fn fold_into(later: &mut Event, earlier: &Event) {
    let start = earlier.t0_us.unwrap_or(earlier.t_us);
    later.t0_us = Some(later.t0_us.map_or(start, |t| t.min(start)));
    later.calls = later.calls.saturating_add(earlier.calls);
    if let (Some(a), Some(b)) = (later.bytes, earlier.bytes) {
        let sum = a.saturating_add(b);
        // A detail that leads with the size says the sum; another one is kept as it is.
        let lead = format!("{a} bytes");
        if let Some(rest) = later.detail.strip_prefix(lead.as_str()) {
            later.detail = format!("{sum} bytes{rest}");
        }
        later.bytes = Some(sum);
    }
}

impl<const N: usize> Events<N> {
    const FOLD_EVERY: u64 = if N >= 16 { (N / 16) as u64 } else { 1 };

    /// Count one event made by `make` and keep it: as it is while there is room; once the
    /// list is full, after folding the list (at most once per [`Self::FOLD_EVERY`] events),
    /// or into the last alike event.
    #[inline]
    pub(crate) fn push_with(&mut self, make: impl FnOnce() -> Event) {
        self.total += 1;
        if self.items.len() >= N && self.folded_at.is_none_or(|at| self.total - at >= Self::FOLD_EVERY) {
            self.fold_all();
            self.folded_at = Some(self.total);
        }
        if self.items.len() < N {
            self.items.push(make());
            return;
        }
        let e = make();
        // The last alike event takes it, and moves to its place in record order.
        if let Some(i) = self.items.iter().rposition(|x| alike(x, &e)) {
            let mut e = e;
            fold_into(&mut e, &self.items[i]);
            self.items.remove(i);
            self.items.push(e);
        }
    }

    /// Fold every event into the last alike one after it, keeping record order.
    fn fold_all(&mut self) {
        let mut out: Vec<Event> = Vec::with_capacity(self.items.len());
        let mut last: std::collections::HashMap<(&'static str, &'static str, u64, bool, String), usize> =
            std::collections::HashMap::new();
        for e in std::mem::take(&mut self.items).into_iter().rev() {
            if !folds(e.kind) {
                out.push(e);
                continue;
            }
            let key = (e.kind.name(), e.api, e.epoch, e.bytes.is_some(), detail_key(&e).to_string());
            match last.get(&key) {
                Some(&i) => fold_into(&mut out[i], &e),
                None => {
                    last.insert(key, out.len());
                    out.push(e);
                }
            }
        }
        out.reverse();
        self.items = out;
    }

    pub(crate) fn items(&self) -> &[Event] {
        &self.items
    }

    /// Every event counted, kept, folded or not.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(t: u64, bytes: i64, epoch: u64, lib: Option<&str>) -> Event {
        Event {
            t_ms: t / 1000,
            t_us: t,
            seq: t,
            kind: EventKind::DriverCost,
            api: "cuLibraryLoadData",
            bytes: Some(bytes),
            t0_us: Some(t - 1),
            detail: match lib {
                Some(l) => format!("{bytes} bytes: lazy loading of {l} (first used by cuLaunchKernel)"),
                None => format!("{bytes} bytes"),
            },
            calls: 1,
            epoch,
        }
    }

    fn probe(t: u64, epoch: u64) -> Event {
        Event {
            t_ms: t / 1000,
            t_us: t,
            seq: t,
            kind: EventKind::Probe,
            api: "cuMemGetInfo",
            bytes: None,
            t0_us: None,
            detail: "free=1 total=2 error=0".into(),
            calls: 1,
            epoch,
        }
    }

    #[test]
    fn under_the_bound_nothing_folds() {
        let mut ev: Events<8> = Events::default();
        for t in 1..=8 {
            ev.push_with(|| cost(t * 10, 0, 0, None));
        }
        assert_eq!(ev.items().len(), 8);
        assert!(ev.items().iter().all(|e| e.calls == 1));
    }

    #[test]
    fn past_the_bound_alike_costs_fold_and_sums_between_queries_stay_exact() {
        let mut ev: Events<6> = Events::default();
        // 100 zero-byte loads, a query, then 50 measured costs of 16 bytes and a library's.
        for t in 1..=100 {
            ev.push_with(|| cost(t * 10, 0, 0, None));
        }
        ev.push_with(|| probe(2000, 0));
        for t in 0..50 {
            ev.push_with(|| cost(3000 + t * 10, 16, 1, None));
        }
        ev.push_with(|| cost(4000, 8, 1, Some("libx.so")));
        assert_eq!(ev.total(), 152);
        let kept = ev.items();
        assert!(kept.len() <= 6, "{kept:#?}");
        let calls: u32 = kept.iter().map(|e| e.calls).sum();
        assert_eq!(calls, 152, "every event is counted in a kept one: {kept:#?}");
        // Before the query: the zero-byte loads; after it: 50 x 16 bytes, and the library apart.
        let after: Vec<&Event> = kept.iter().filter(|e| e.t_us > 2000).collect();
        let plain: i64 = after.iter().filter(|e| e.detail.ends_with(" bytes")).map(|e| e.bytes.unwrap()).sum();
        assert_eq!(plain, 800);
        let lib = after.iter().find(|e| e.detail.contains("libx.so")).unwrap();
        assert_eq!((lib.bytes, lib.calls, lib.detail.as_str()), (Some(8), 1, "8 bytes: lazy loading of libx.so (first used by cuLaunchKernel)"));
        let folded = after.iter().find(|e| e.calls > 1 && e.detail == format!("{} bytes", e.bytes.unwrap())).unwrap();
        assert_eq!(folded.t0_us, Some(2999), "the span starts at the first call's start: {folded:?}");
        // Nothing folds across the query, and the list stays in record order.
        assert!(kept.iter().filter(|e| e.t_us < 2000).all(|e| e.epoch == 0));
        assert!(kept.windows(2).all(|w| w[0].seq < w[1].seq), "{kept:#?}");
    }

    #[test]
    fn probes_never_fold_and_a_full_list_of_them_drops_the_rest() {
        let mut ev: Events<4> = Events::default();
        for t in 0..10 {
            ev.push_with(|| probe(t, t));
        }
        assert_eq!((ev.items().len(), ev.total()), (4, 10));
        ev.push_with(|| cost(100, 5, 10, None));
        assert_eq!(ev.items().len(), 4);
    }
}
