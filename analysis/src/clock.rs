//! One clock for a run: every time a command shows is seconds since the run's first
//! process started (the earliest `process.start_unix_us`), in the report, the diff, the
//! plot, the Perfetto trace and the memory_viz snapshot alike.
//!
//! Records are placed on the clock by absolute time: `process.start_unix_us + t_us`
//! (`start_unix_ms` and `t_ms` from writers before microseconds). Wall-clock dates and the
//! sentence that states the origin are the CLI's (`cli/src/clock.rs`).

use crate::model::{Report, Stamped};

/// The time base of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    /// Microseconds since the Unix epoch when the run's first process started.
    pub t0_us: i64,
}

impl Clock {
    /// The clock of a set of processes (one run).
    pub fn of(procs: &[Report]) -> Clock {
        Clock { t0_us: procs.iter().map(|r| r.process.start_us()).min().unwrap_or(0) }
    }

    /// Microseconds since the origin of an absolute time.
    pub fn since(&self, abs_us: i64) -> i64 {
        abs_us - self.t0_us
    }

    /// An absolute time on this clock: `4.230s`.
    pub fn at(&self, abs_us: i64) -> String {
        fmt_secs(self.since(abs_us))
    }

    /// A record of `report` on this clock.
    pub fn record(&self, report: &Report, rec: &dyn Stamped) -> String {
        self.at(abs_us(report, rec))
    }
}

/// Absolute time (µs since the epoch) of a record of `report`.
pub fn abs_us(report: &Report, rec: &dyn Stamped) -> i64 {
    report.process.start_us() + rec.rel_us()
}

/// Microseconds as seconds with millisecond precision: `4230000` -> `4.230s`.
pub fn fmt_secs(us: i64) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let ms = us.unsigned_abs() / 1000;
    format!("{sign}{}.{:03}s", ms / 1000, ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_with_milliseconds() {
        assert_eq!(fmt_secs(4_230_999), "4.230s");
        assert_eq!(fmt_secs(0), "0.000s");
        assert_eq!(fmt_secs(-5_000), "-0.005s");
        let c = Clock { t0_us: 1_000_000 };
        assert_eq!(c.at(1_080_000), "0.080s");
    }
}
