//! Bounded containers used by the device ledgers: they never grow past a fixed size, so a
//! long-running process keeps a report of constant size.

/// Keeps the first `N` items pushed and counts the rest.
#[derive(Clone, Debug)]
pub(crate) struct FirstN<T, const N: usize> {
    items: Vec<T>,
    total: u64,
}

impl<T, const N: usize> Default for FirstN<T, N> {
    fn default() -> Self {
        FirstN { items: Vec::new(), total: 0 }
    }
}

impl<T, const N: usize> FirstN<T, N> {
    /// Whether the next push would be stored (callers skip building the item otherwise).
    pub(crate) fn has_room(&self) -> bool {
        self.items.len() < N
    }

    /// Count one item, and keep it if there is still room (inlined: once full, a push is an
    /// increment and a comparison, and the item is not even described).
    #[inline]
    pub(crate) fn push_with(&mut self, make: impl FnOnce() -> T) {
        self.total += 1;
        if self.has_room() {
            self.items.push(make());
        }
    }

    pub(crate) fn items(&self) -> &[T] {
        &self.items
    }

    /// Everything ever pushed, kept or not.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }
}

/// Keeps the first `N` and the last `N` items pushed (a ring for the latter, overwritten in
/// place once full) and counts all.
#[derive(Clone, Debug)]
pub(crate) struct FirstLast<T, const N: usize> {
    first: Vec<T>,
    last: Vec<T>,
    /// Once `last` is full: the position of its oldest item (the next one overwritten).
    head: usize,
    total: u64,
}

impl<T, const N: usize> Default for FirstLast<T, N> {
    fn default() -> Self {
        FirstLast { first: Vec::new(), last: Vec::new(), head: 0, total: 0 }
    }
}

impl<T, const N: usize> FirstLast<T, N> {
    #[cfg(test)]
    pub(crate) fn push(&mut self, item: T) {
        self.push_with(|| item)
    }

    /// Push the item `make` builds, straight into its place once the ring is full (a large
    /// item is then written once, not built aside and copied).
    #[inline]
    pub(crate) fn push_with(&mut self, make: impl FnOnce() -> T) {
        self.total += 1;
        if self.first.len() < N {
            self.first.push(make());
        } else if self.last.len() < N {
            self.last.push(make());
        } else {
            let at = self.head;
            self.head = if at + 1 == N { 0 } else { at + 1 };
            if let Some(slot) = self.last.get_mut(at) {
                *slot = make();
            }
        }
    }

    /// The kept items in push order: the first ones, then the most recent ones.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        // Once the ring has wrapped, its oldest items start at `head`.
        let (newest, oldest) = self.last.split_at(self.head);
        self.first.iter().chain(oldest).chain(newest)
    }

    /// The item pushed last.
    pub(crate) fn last(&self) -> Option<&T> {
        match self.last.len() {
            0 => self.first.last(),
            n => self.last.get((self.head + n - 1) % n),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.first.len() + self.last.len()
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }
}

/// One timeline sample: a device's live bytes, total and per category, at `t_ms`, taken
/// by the record with sequence number `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    pub t_ms: u64,
    pub t_us: u64,
    pub seq: u64,
    pub live: u64,
    pub cats: [u64; 6],
}

/// At most this many timeline samples are rendered.
pub(crate) const TIMELINE_CAP: usize = 2048;

/// A time series bounded by decimation: one sample per change while there is room; when
/// full, every other sample is dropped and later changes are sampled at half the rate. The
/// latest state is kept aside when it was not sampled, so the rendered series always ends
/// with the current state.
#[derive(Clone, Debug)]
pub(crate) struct Timeline {
    samples: Vec<Sample>,
    /// Record one change out of `stride`.
    stride: u64,
    /// Changes seen since the last recorded one.
    skipped: u64,
    /// The latest state when it was not recorded.
    pending: Option<Sample>,
    /// `pending` holds only the stamp of the latest change ([`Timeline::push_with`]): its
    /// totals are the owner's current ones, filled in by [`Timeline::fill_pending`].
    lazy: bool,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline { samples: Vec::new(), stride: 1, skipped: 0, pending: None, lazy: false }
    }
}

impl Timeline {
    pub(crate) fn push(&mut self, sample: Sample) {
        self.skipped += 1;
        if self.skipped < self.stride {
            self.pending = Some(sample);
            self.lazy = false;
            return;
        }
        self.store(sample);
    }

    /// A change stamped (`t_ms`, `t_us`, `seq`) whose totals `sample` gives. When the change
    /// is not recorded (a decimated stretch) only its stamp is kept: its totals stay the
    /// owner's current ones until the next change, so they are read when rendered
    /// ([`Timeline::fill_pending`]), not copied on every change.
    #[inline]
    pub(crate) fn push_with(&mut self, t_us: u64, seq: u64, sample: impl FnOnce() -> Sample) {
        self.skipped += 1;
        if self.skipped < self.stride {
            match self.pending.as_mut() {
                Some(p) => {
                    (p.t_us, p.seq) = (t_us, seq);
                }
                None => self.pending = Some(Sample { t_ms: 0, t_us, seq, live: 0, cats: [0; 6] }),
            }
            self.lazy = true;
            return;
        }
        self.store(sample());
    }

    /// Record `sample` (the stride's turn), halving the series when it is full.
    fn store(&mut self, sample: Sample) {
        self.skipped = 0;
        self.pending = None;
        self.lazy = false;
        self.samples.push(sample);
        // Keep the stored samples strictly below the cap so the pending one always fits.
        if self.samples.len() >= TIMELINE_CAP {
            // Keep the samples at even positions; the newest (at an odd position, the cap
            // being even) stays as the pending current state.
            self.pending = self.samples.last().copied();
            let mut i = 0;
            self.samples.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride = self.stride.saturating_mul(2);
        }
    }

    /// The change the record `seq` sampled was undone, leaving the state `current`. When
    /// that sample is the newest stored one it is dropped (the series is as if the change
    /// never happened); when it is the pending current state, it takes `current`'s values;
    /// otherwise other changes came after it and `current` is pushed as a change of its own.
    pub(crate) fn undo(&mut self, seq: u64, current: Sample) {
        if let Some(p) = self.pending.as_mut() {
            if p.seq == seq {
                p.t_ms = p.t_us / 1000;
                p.live = current.live;
                p.cats = current.cats;
                self.lazy = false;
                return;
            }
        } else if self.samples.last().is_some_and(|s| s.seq == seq) {
            self.samples.pop();
            return;
        }
        self.push(current);
    }

    /// Give a pending change kept by its stamp alone the owner's current totals (before the
    /// series is read: rendering works on a copy filled in this way).
    pub(crate) fn fill_pending(&mut self, live: u64, cats: [u64; 6]) {
        if let Some(p) = self.pending.as_mut().filter(|_| self.lazy) {
            p.t_ms = p.t_us / 1000;
            p.live = live;
            p.cats = cats;
        }
        self.lazy = false;
    }

    /// The samples to render, ending with the current state; at most `TIMELINE_CAP`. A
    /// pending change kept by its stamp alone must have been filled in first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Sample> {
        debug_assert!(!self.lazy, "Timeline::fill_pending before reading");
        self.samples.iter().chain(self.pending.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_last_keeps_both_ends() {
        let mut b: FirstLast<u32, 4> = FirstLast::default();
        for i in 0..100 {
            b.push(i);
        }
        assert_eq!(b.total(), 100);
        assert_eq!(b.len(), 8);
        assert_eq!(b.iter().copied().collect::<Vec<_>>(), vec![0, 1, 2, 3, 96, 97, 98, 99]);
        // At every count: the first 4, then the latest up to 4 in order, and the last one.
        let mut b: FirstLast<u32, 4> = FirstLast::default();
        assert_eq!(b.last(), None);
        for i in 0..20u32 {
            b.push(i);
            let want: Vec<u32> = (0..=i).filter(|&k| k < 4 || k + 4 > i).collect();
            assert_eq!(b.iter().copied().collect::<Vec<_>>(), want, "after {i}");
            assert_eq!(b.last(), Some(&i));
        }
    }

    #[test]
    fn first_n_counts_all_keeps_first() {
        let mut b: FirstN<u32, 3> = FirstN::default();
        let mut built = 0;
        for i in 0..10 {
            b.push_with(|| {
                built += 1;
                i
            });
        }
        assert_eq!(b.items(), &[0, 1, 2]);
        assert_eq!(b.total(), 10);
        assert_eq!(built, 3, "items past the bound are never built");
    }

    fn sample(i: u64) -> Sample {
        Sample { t_ms: i, t_us: i * 1000, seq: i, live: i, cats: [0, 0, 0, 0, 0, i] }
    }

    #[test]
    fn undoing_the_newest_change() {
        let mut t = Timeline::default();
        t.push(sample(1));
        t.push(sample(2));
        // The change of seq 2 was undone: the series is as if it never happened.
        t.undo(2, Sample { t_ms: 9, seq: 9, ..sample(1) });
        assert_eq!(t.iter().map(|s| s.seq).collect::<Vec<_>>(), [1]);
        // Another change came in between: the undo is a change of its own.
        t.push(sample(2));
        t.push(sample(3));
        t.undo(2, sample(4));
        assert_eq!(t.iter().map(|s| s.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
        // When the newest sample is the pending one (a decimated series), it is amended.
        let mut t = Timeline::default();
        for n in 1..=(TIMELINE_CAP as u64 + 1) {
            t.push(sample(n));
        }
        let last = TIMELINE_CAP as u64 + 1;
        t.undo(last, Sample { live: 0, ..sample(last) });
        assert_eq!(t.iter().last().map(|s| (s.seq, s.live)), Some((last, 0)));
        assert!(t.iter().count() <= TIMELINE_CAP);
    }

    #[test]
    fn a_change_kept_by_its_stamp_takes_the_current_totals() {
        let mut t = Timeline::default();
        let last = TIMELINE_CAP as u64 + 3;
        for n in 1..=last {
            t.push_with(n * 1000, n, || sample(n));
        }
        // Decimated by now: the latest change is pending, its totals not copied.
        t.fill_pending(77, [0, 0, 0, 0, 0, 77]);
        let end = *t.iter().last().unwrap();
        assert_eq!((end.t_ms, end.t_us, end.seq, end.live, end.cats[5]), (last, last * 1000, last, 77, 77));
        // An undone pending change is amended in place, and a later fill leaves it as it is.
        let mut n = last;
        while !t.lazy {
            n += 1;
            t.push_with(n * 1000, n, || sample(n));
        }
        t.undo(n, Sample { live: 5, ..sample(n) });
        t.fill_pending(99, [0; 6]);
        assert_eq!(t.iter().last().map(|s| (s.t_ms, s.seq, s.live)), Some((n, n, 5)));
        // A recorded change is copied at once.
        let mut u = Timeline::default();
        u.push_with(1000, 1, || sample(1));
        assert_eq!(u.iter().copied().collect::<Vec<_>>(), [sample(1)]);
    }

    #[test]
    fn timeline_bounded_and_ends_with_current_state() {
        let mut t = Timeline::default();
        for n in 1..=20_000u64 {
            t.push(sample(n));
            let v: Vec<_> = t.iter().copied().collect();
            assert!(v.len() <= TIMELINE_CAP, "{} samples after {n} changes", v.len());
            assert_eq!(*v.last().unwrap(), sample(n), "last sample is the current state");
            if n % 997 == 0 {
                assert!(v.windows(2).all(|w| w[0].t_ms < w[1].t_ms), "samples in order");
            }
        }
        let v: Vec<_> = t.iter().collect();
        assert!(v.len() > TIMELINE_CAP / 2, "decimation keeps at least half: {}", v.len());
        assert_eq!(v[0].t_ms, 1, "the first change is kept");
    }
}
