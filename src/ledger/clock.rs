//! The ledger's clock: microseconds since the ledger was created, read on every record.
//!
//! On a VM a monotonic clock read (`clock_gettime`, through the vDSO and the hypervisor's
//! clock page) is a visible part of an alloc+free pair, and reading the processor's
//! time-stamp counter costs a fraction of it (BENCHMARKS.md). So, where the counter is invariant
//! (x86_64 with CPUID's "invariant TSC": constant rate, not stopped in sleep states, the same
//! on every core), times are the counter scaled to the monotonic clock: until the first
//! calibration (20 ms after the start) every read is the monotonic clock itself; then the
//! scale is the monotonic time elapsed over the ticks elapsed since the start, measured again
//! at 8x longer horizons (0.16 s, 1.3 s, 10 s, 84 s, 11 min, 89 min), each new line starting
//! where the previous one was (the series stays continuous and increasing; the offset from the
//! monotonic clock stays within a few microseconds). Elsewhere every read is the monotonic
//! clock. Pure Rust; no lock (a calibration is claimed with a compare-exchange).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// First calibration, and the factor between calibrations.
const FIRST_CALIBRATION_NS: u64 = 20_000_000;
const HORIZON_FACTOR: u64 = 8;
/// Lines after the uncalibrated start (slot 0 is unused: index 0 means "not calibrated").
const SLOTS: usize = 8;
/// Fractional bits of a line's scale: its rounding error is below 2^-48 ns per tick, under a
/// nanosecond a day at a few GHz (the last line is used for the rest of the run), and a scale
/// of up to 65536 ns per tick fits in 64 bits. Ticks times scale always fit in 128 bits.
const SCALE_BITS: u32 = 48;

/// One line of the mapping from ticks to nanoseconds: `ns = base_ns + (tsc - base_tsc) * scale`,
/// `scale` in nanoseconds per tick as a fixed-point number with [`SCALE_BITS`] fractional bits
/// (one integer multiplication per read: converting to and from `f64` cost more than the
/// counter read itself). Written once, before its index is published.
#[derive(Default)]
struct Line {
    base_tsc: AtomicU64,
    base_ns: AtomicU64,
    scale: AtomicU64,
    /// The same line in microseconds (what a stamp reads, without dividing by 1000):
    /// `base_ns / 1000`, and the scale in microseconds per tick with [`US_SCALE_BITS`]
    /// fractional bits.
    base_us: AtomicU64,
    scale_us: AtomicU64,
}

/// Fractional bits of a line's microsecond scale: 2^-58 us per tick (the same relative
/// resolution as the nanosecond scale's 48 bits); up to 64 ns per tick fits in 64 bits.
const US_SCALE_BITS: u32 = 58;

pub(crate) struct Clock {
    start: Instant,
    /// The wall clock at `start`, in microseconds since the Unix epoch.
    unix_us: u64,
    /// The counter at `start` (0 when no invariant counter: every read is the monotonic clock).
    tsc0: u64,
    /// The line in use (0: not calibrated yet).
    current: AtomicUsize,
    lines: [Line; SLOTS],
    /// The counter value at which the next calibration is due (u64::MAX: none).
    next_tsc: AtomicU64,
    /// Elapsed monotonic nanoseconds at which the first calibration is due.
    next_ns: AtomicU64,
    calibrating: AtomicBool,
}

#[cfg(target_arch = "x86_64")]
fn counter() -> Option<u64> {
    // SAFETY: RDTSC has no preconditions on x86_64.
    Some(unsafe { core::arch::x86_64::_rdtsc() })
}

#[cfg(not(target_arch = "x86_64"))]
fn counter() -> Option<u64> {
    None
}

/// Whether the time-stamp counter ticks at a constant rate on every core (CPUID
/// 0x80000007 EDX bit 8, "invariant TSC").
#[cfg(target_arch = "x86_64")]
fn invariant_counter() -> bool {
    #[allow(unused_unsafe)]
    // SAFETY: CPUID is available on every x86_64 processor.
    let (max, leaf) = unsafe {
        let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
        (max, if max >= 0x8000_0007 { core::arch::x86_64::__cpuid(0x8000_0007).edx } else { 0 })
    };
    max >= 0x8000_0007 && leaf & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_counter() -> bool {
    false
}

/// Tries at taking the origin; the narrowest is kept.
const ORIGIN_TRIES: usize = 8;

/// The clock's origin: the monotonic clock, the counter (0 without one) and the wall clock
/// (microseconds since the Unix epoch), read as one instant. Reports of different processes
/// are compared on `start_unix_us + t_us`, and every calibration scales the counter from
/// `tsc0`, so a preemption between these reads (several processes starting on few cores)
/// would put the whole run of this process off by it: each try brackets the reads between two
/// monotonic readings, and the narrowest try is kept, its readings taken as its midpoint.
fn origin(use_counter: bool) -> (Instant, u64, u64) {
    origin_from(|| {
        let a = Instant::now();
        let tsc = if use_counter { counter().unwrap_or(0) } else { 0 };
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        (a, tsc, wall, Instant::now())
    })
}

/// [`origin`] over a reading of (monotonic before, counter, wall clock, monotonic after).
fn origin_from(mut read: impl FnMut() -> (Instant, u64, std::time::Duration, Instant)) -> (Instant, u64, u64) {
    let mut best: Option<(std::time::Duration, Instant, u64, u64)> = None;
    for _ in 0..ORIGIN_TRIES {
        let (a, tsc, wall, b) = read();
        let width = b.saturating_duration_since(a);
        if best.as_ref().is_none_or(|(w, ..)| width < *w) {
            let unix_us = u64::try_from(wall.as_micros()).unwrap_or(u64::MAX);
            best = Some((width, a + width / 2, tsc, unix_us));
        }
        if width.as_nanos() < 1_000 {
            break;
        }
    }
    let (_, start, tsc, unix_us) = best.unwrap_or_else(|| (Default::default(), Instant::now(), 0, 0));
    (start, tsc, unix_us)
}

impl Clock {
    pub(crate) fn new() -> Clock {
        Self::with_counter(invariant_counter())
    }

    fn with_counter(use_counter: bool) -> Clock {
        let (start, tsc0, unix_us) = origin(use_counter);
        Clock {
            start,
            tsc0,
            unix_us,
            current: AtomicUsize::new(0),
            lines: Default::default(),
            next_tsc: AtomicU64::new(u64::MAX),
            next_ns: AtomicU64::new(if tsc0 != 0 { FIRST_CALIBRATION_NS } else { u64::MAX }),
            calibrating: AtomicBool::new(false),
        }
    }

    /// The wall clock at the origin of every reading, in microseconds since the Unix epoch.
    pub(crate) fn start_unix_us(&self) -> u64 {
        self.unix_us
    }

    fn elapsed_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Nanoseconds on line `i` at counter value `tsc`.
    fn on_line(&self, i: usize, tsc: u64) -> u64 {
        let l = &self.lines[i];
        let (base_tsc, base_ns) = (l.base_tsc.load(Ordering::Relaxed), l.base_ns.load(Ordering::Relaxed));
        let scale = u128::from(l.scale.load(Ordering::Relaxed));
        let ns = (u128::from(tsc.saturating_sub(base_tsc)) * scale) >> SCALE_BITS;
        base_ns.saturating_add(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Microseconds since the start: on the current line when the counter is in use and no
    /// calibration is due (one multiplication, no division), else `now_ns / 1000`.
    #[inline]
    pub(crate) fn now_us(&self) -> u64 {
        self.annotate();
        let i = self.current.load(Ordering::Acquire);
        if i != 0 {
            if let Some(tsc) = counter().filter(|&t| t < self.next_tsc.load(Ordering::Relaxed)) {
                let l = &self.lines[i];
                let ticks = u128::from(tsc.saturating_sub(l.base_tsc.load(Ordering::Relaxed)));
                let us = (ticks * u128::from(l.scale_us.load(Ordering::Relaxed))) >> US_SCALE_BITS;
                return l.base_us.load(Ordering::Relaxed).saturating_add(u64::try_from(us).unwrap_or(u64::MAX));
            }
        }
        self.now_ns() / 1000
    }

    /// For helgrind (`valgrind` feature; a no-op otherwise): every field here is an atomic
    /// read by all threads without a lock.
    #[inline(always)]
    fn annotate(&self) {
        crate::sync::atomic(&self.current);
        crate::sync::atomic(&self.lines);
        crate::sync::atomic(&self.next_tsc);
        crate::sync::atomic(&self.next_ns);
        crate::sync::atomic(&self.calibrating);
    }

    fn now_ns(&self) -> u64 {
        self.annotate();
        let i = self.current.load(Ordering::Acquire);
        if i != 0 {
            if let Some(tsc) = counter() {
                if tsc >= self.next_tsc.load(Ordering::Relaxed) {
                    self.calibrate(tsc);
                }
                return self.on_line(self.current.load(Ordering::Acquire), tsc);
            }
        }
        let ns = self.elapsed_ns();
        if ns >= self.next_ns.load(Ordering::Relaxed) {
            if let Some(tsc) = counter() {
                self.calibrate(tsc);
            }
        }
        ns
    }

    /// A new line from now on: the scale measured over everything since the start, starting
    /// where the current line is at this moment (or at the monotonic clock, the first time).
    #[cold]
    fn calibrate(&self, _seen: u64) {
        if self.calibrating.swap(true, Ordering::Acquire) {
            return;
        }
        let i = self.current.load(Ordering::Acquire);
        if i + 1 < SLOTS {
            // The counter read closest to the monotonic one: a preemption between the two
            // would skew the scale, so keep the pair whose bracketing reads are nearest.
            let mut best: Option<(u64, u64, u64)> = None;
            for _ in 0..4 {
                let (Some(a), ns, Some(b)) = (counter(), self.elapsed_ns(), counter()) else { break };
                let width = b.saturating_sub(a);
                if best.is_none_or(|(w, _, _)| width < w) {
                    best = Some((width, a / 2 + b / 2, ns));
                }
            }
            if let Some((_, tsc, ns)) = best.filter(|&(_, tsc, _)| tsc > self.tsc0) {
                let scale = (u128::from(ns) << SCALE_BITS) / u128::from(tsc - self.tsc0);
                let scale = u64::try_from(scale).unwrap_or(u64::MAX);
                let base_ns = if i == 0 { ns } else { self.on_line(i, tsc) };
                let l = &self.lines[i + 1];
                l.base_tsc.store(tsc, Ordering::Relaxed);
                l.base_ns.store(base_ns, Ordering::Relaxed);
                l.scale.store(scale, Ordering::Relaxed);
                let scale_us = (u128::from(ns) << US_SCALE_BITS) / 1000 / u128::from(tsc - self.tsc0);
                l.base_us.store(base_ns / 1000, Ordering::Relaxed);
                l.scale_us.store(u64::try_from(scale_us).unwrap_or(u64::MAX), Ordering::Relaxed);
                self.current.store(i + 1, Ordering::Release);
                let next = if i + 2 < SLOTS {
                    let horizon = (tsc - self.tsc0).saturating_mul(HORIZON_FACTOR);
                    self.tsc0.saturating_add(horizon)
                } else {
                    u64::MAX
                };
                self.next_tsc.store(next, Ordering::Relaxed);
            }
        }
        self.next_ns.store(u64::MAX, Ordering::Relaxed);
        self.calibrating.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_is_the_try_no_preemption_split() {
        // The first try is preempted for 5 ms between its reads; the second is not.
        let t0 = Instant::now();
        let ms = std::time::Duration::from_millis;
        let mut tries = vec![
            (t0, 1_000, ms(1_000), t0 + ms(5)),
            (t0 + ms(6), 20_000, ms(1_006), t0 + ms(6)),
            (t0 + ms(7), 30_000, ms(1_007), t0 + ms(8)),
        ]
        .into_iter();
        let (start, tsc, unix_us) = origin_from(|| tries.next().unwrap());
        assert_eq!((start, tsc, unix_us), (t0 + ms(6), 20_000, 1_006_000));
        assert_eq!(tries.len(), 1, "stops at the first try narrower than a microsecond");
    }

    #[test]
    fn a_line_stays_within_a_nanosecond_over_a_day() {
        // 2.5 GHz (0.4 ns per tick, not a power of two), a day after the line's base.
        let c = Clock::with_counter(false);
        let l = &c.lines[1];
        l.base_tsc.store(1_000, Ordering::Relaxed);
        l.base_ns.store(7, Ordering::Relaxed);
        let scale = (1u128 << SCALE_BITS) * 2 / 5;
        l.scale.store(u64::try_from(scale).unwrap(), Ordering::Relaxed);
        let day_ticks: u64 = 86_400 * 2_500_000_000;
        let exact = 7 + day_ticks / 5 * 2;
        let got = c.on_line(1, 1_000 + day_ticks);
        assert!(got <= exact && exact - got <= 1, "{got} vs {exact}");
        assert_eq!(c.on_line(1, 500), 7, "before the base: the base");
    }

    #[test]
    fn the_microsecond_reading_agrees_with_the_nanosecond_one() {
        let c = Clock::new();
        if c.tsc0 == 0 {
            return; // no invariant counter here: both are the monotonic clock
        }
        let mut last = 0;
        let started = Instant::now();
        // Past the first calibrations (20 ms, then 8 times as long: two lines).
        while c.current.load(Ordering::Acquire) < 2 && started.elapsed().as_secs() < 2 {
            let ns = c.now_ns();
            let us = c.now_us();
            let after = c.now_ns();
            // Read between the two nanosecond readings, within a microsecond of rounding.
            assert!(us + 1 >= ns / 1000 && us <= after / 1000 + 1, "{ns} ns, {us} us, {after} ns");
            assert!(us >= last, "went back: {last} -> {us}");
            last = us;
        }
        assert!(c.current.load(Ordering::Acquire) >= 2, "two lines calibrated");
    }

    #[test]
    fn follows_the_monotonic_clock_and_never_goes_back() {
        for use_counter in [false, true] {
            let c = Clock::with_counter(use_counter && invariant_counter());
            let mut last = 0;
            let t0 = Instant::now();
            let mut checked = 0;
            while t0.elapsed().as_millis() < 200 {
                let before = c.elapsed_ns();
                let t = c.now_ns();
                let after = c.elapsed_ns();
                assert!(t >= last, "went back: {last} -> {t}");
                last = t;
                // Between the monotonic readings around it, within 20 us, when nothing
                // preempted this thread in between (a loaded machine).
                if after - before < 50_000 {
                    checked += 1;
                    assert!(t + 20_000 >= before && t <= after + 20_000, "clock {t} ns outside [{before}, {after}]");
                }
            }
            assert!(checked > 1000, "{checked} readings checked");
            if use_counter && invariant_counter() {
                // Calibrated at 20 ms (later when preempted: the next one is 8x as late).
                assert!(c.current.load(Ordering::Acquire) >= 1, "calibrated");
            }
        }
    }
}
