//! One clock for a run: every time a command shows is seconds since the run's first
//! process started (the earliest `process.start_unix_us`), in the report, the diff, the
//! plot, the Perfetto trace and the memory_viz snapshot alike; wall-clock time only in
//! `report`'s process table and in the header that states the origin.
//!
//! Records are placed on the clock by absolute time: `process.start_unix_us + t_us`
//! (`start_unix_ms` and `t_ms` from writers before microseconds).

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

    /// The sentence that states the origin, for headers.
    pub fn header(&self) -> String {
        format!("Times are seconds since the run's first process started ({}).", fmt_date_time(self.t0_us))
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

/// A duration in microseconds, in words for sentences: `830 ms`, `4.2 s`, `3 min`.
pub fn fmt_age(us: i64) -> String {
    let us = us.max(0);
    if us < 1_000_000 {
        format!("{} ms", us / 1000)
    } else if us < 120_000_000 {
        format!("{:.1} s", us as f64 / 1e6)
    } else if us < 7_200_000_000 {
        format!("{} min", us / 60_000_000)
    } else {
        format!("{:.1} h", us as f64 / 3.6e9)
    }
}

fn local(abs_us: i64) -> chrono::DateTime<chrono::Local> {
    use chrono::TimeZone;
    chrono::Local
        .timestamp_micros(abs_us)
        .single()
        .unwrap_or_else(|| chrono::Local.timestamp_micros(0).single().expect("the epoch is a valid time"))
}

/// Wall-clock time of day (local time zone): `14:03:07.412`.
pub fn fmt_wall(abs_us: i64) -> String {
    local(abs_us).format("%H:%M:%S%.3f").to_string()
}

/// Date and wall-clock time with the zone's offset: `2026-01-01 00:00:00.000 +00:00`.
pub fn fmt_date_time(abs_us: i64) -> String {
    local(abs_us).format("%Y-%m-%d %H:%M:%S%.3f %:z").to_string()
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

    #[test]
    fn ages_in_words() {
        assert_eq!(fmt_age(830_000), "830 ms");
        assert_eq!(fmt_age(4_200_000), "4.2 s");
        assert_eq!(fmt_age(180_000_000), "3 min");
    }
}
