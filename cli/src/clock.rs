//! The run's clock in the CLI's words: the clock itself (seconds since the run's first
//! process started, every record placed on it by absolute time) is the analysis crate's
//! (`culedger_analysis::clock`); wall-clock time only in `report`'s process table and in the
//! header that states the origin.

pub use culedger_analysis::clock::*;

/// The clock's words: the sentence that states its origin.
pub trait ClockWords {
    /// The sentence that states the origin, for headers.
    fn header(&self) -> String;
}

impl ClockWords for Clock {
    fn header(&self) -> String {
        format!("Times are seconds since the run's first process started ({}).", fmt_date_time(self.t0_us))
    }
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
    fn ages_in_words() {
        assert_eq!(fmt_age(830_000), "830 ms");
        assert_eq!(fmt_age(4_200_000), "4.2 s");
        assert_eq!(fmt_age(180_000_000), "3 min");
    }
}
