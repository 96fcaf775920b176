//! `culedger check`: memory budgets for CI.
//!
//! Grammar of one budget (whitespace is ignored):
//!
//! ```text
//! budget := ["peak:"] key op size
//! key    := weights | kv_pool | ipc | graphs | comm | other      (live bytes of a category;
//!                                                               with "peak:" its peak)
//!         | live | peak            (all tracked bytes now / at the peak)
//!         | untracked              (largest device-used minus tracked over all queries)
//!         | ipc_imported           (bytes of peer buffers opened, cumulative)
//!         | driver_costs           (hidden driver memory, sum over APIs)
//! op     := "<=" | "<" | ">=" | ">" | "=="
//! size   := number [unit]          unit: B KiB MiB GiB TiB (1024) KB MB GB TB (1000)
//! ```
//!
//! Every budget is checked on every device of every host (processes sharing a device are
//! summed). Exit status: 0 when all hold, 1 when one is breached (one line each), 2 on bad
//! input.

use crate::analysis::{groups, DeviceGroup};
use crate::error::{Fail, Result};
use crate::load::load_run;
use crate::model::CATEGORIES;
use crate::units::{fmt_bytes, fmt_ms, parse_size};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Le,
    Lt,
    Ge,
    Gt,
    Eq,
}

impl Op {
    const ALL: [(&'static str, Op); 5] = [("<=", Op::Le), (">=", Op::Ge), ("==", Op::Eq), ("<", Op::Lt), (">", Op::Gt)];

    fn holds(self, value: i64, limit: i64) -> bool {
        match self {
            Op::Le => value <= limit,
            Op::Lt => value < limit,
            Op::Ge => value >= limit,
            Op::Gt => value > limit,
            Op::Eq => value == limit,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Category(&'static str),
    CategoryPeak(&'static str),
    Live,
    Peak,
    Untracked,
    IpcImported,
    DriverCosts,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// As written, for messages.
    pub text: String,
    pub key: Key,
    pub op: Op,
    pub limit: i64,
}

const KEYS_HELP: &str = "weights, kv_pool, ipc, graphs, comm, other, live, peak, untracked, ipc_imported, driver_costs (or peak:<category>)";

/// Parses one budget such as `ipc<=64MiB` or `peak:other <= 1 GiB`.
pub fn parse_budget(text: &str) -> std::result::Result<Budget, String> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let (at, op_text, op) = Op::ALL
        .iter()
        .filter_map(|(s, op)| compact.find(s).map(|i| (i, *s, *op)))
        .min_by_key(|(i, s, _)| (*i, std::cmp::Reverse(s.len())))
        .ok_or_else(|| format!("budget `{text}`: no comparison (use <=, <, >=, > or ==), e.g. 'ipc<=64MiB'"))?;
    let (name, size) = (&compact[..at], &compact[at + op_text.len()..]);
    let category = |n: &str| CATEGORIES.iter().copied().find(|c| *c == n);
    let key = match name.strip_prefix("peak:") {
        Some(c) => Key::CategoryPeak(
            category(c)
                .ok_or_else(|| format!("budget `{text}`: `peak:` takes a category ({})", CATEGORIES.join(", ")))?,
        ),
        None => match name {
            "live" => Key::Live,
            "peak" => Key::Peak,
            "untracked" => Key::Untracked,
            "ipc_imported" => Key::IpcImported,
            "driver_costs" => Key::DriverCosts,
            n => Key::Category(
                category(n).ok_or_else(|| format!("budget `{text}`: unknown key `{n}` (keys: {KEYS_HELP})"))?,
            ),
        },
    };
    let limit = parse_size(size).map_err(|e| format!("budget `{text}`: {e}"))?;
    Ok(Budget { text: text.trim().to_string(), key, op, limit })
}

/// Parses a budgets file: one budget per line, `#` starts a comment, blank lines ignored.
pub fn parse_file(path: &Path) -> Result<Vec<Budget>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Fail::input(format!("{}: cannot read: {e}", path.display())))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if !line.is_empty() {
            out.push(parse_budget(line).map_err(|e| Fail::input(format!("{}:{}: {e}", path.display(), n + 1)))?);
        }
    }
    Ok(out)
}

/// The measured value of a key on a device, or None when it was never measured.
fn value(g: &DeviceGroup, key: &Key) -> Option<i64> {
    Some(match key {
        Key::Category(c) => g.cat_live(c),
        Key::CategoryPeak(c) => g.cat_peak(c),
        Key::Live => g.live(),
        Key::Peak => g.peak(),
        Key::Untracked => return g.untracked().1,
        Key::IpcImported => g.ipc().imported_bytes,
        Key::DriverCosts => g.driver_cost_bytes(),
    })
}

/// The lines of every breach (empty when all hold) and notes about unmeasured values.
pub fn evaluate(groups: &[DeviceGroup], budgets: &[Budget], no_failures: bool) -> (Vec<String>, Vec<String>) {
    let (mut breaches, mut notes) = (Vec::new(), Vec::new());
    for g in groups {
        for b in budgets {
            match value(g, &b.key) {
                Some(v) if !b.op.holds(v, b.limit) => breaches.push(format!(
                    "{}: {} is {} (budget {})",
                    g.title(),
                    key_name(&b.key),
                    fmt_bytes(v),
                    b.text
                )),
                Some(_) => {}
                None => notes.push(format!(
                    "{}: {} not measured (no free-memory query), budget {} not checked",
                    g.title(),
                    key_name(&b.key),
                    b.text
                )),
            }
        }
        if no_failures {
            for (m, f) in g.failures() {
                breaches.push(format!(
                    "{}: allocation failed: pid {} at {}: {} of {} ({})",
                    g.title(),
                    m.pid(),
                    fmt_ms(f.t_ms),
                    f.api,
                    fmt_bytes(f.bytes),
                    f.error_name
                ));
            }
        }
    }
    (breaches, notes)
}

fn key_name(k: &Key) -> String {
    match k {
        Key::Category(c) => c.to_string(),
        Key::CategoryPeak(c) => format!("peak:{c}"),
        Key::Live => "live".into(),
        Key::Peak => "peak".into(),
        Key::Untracked => "untracked".into(),
        Key::IpcImported => "ipc_imported".into(),
        Key::DriverCosts => "driver_costs".into(),
    }
}

pub fn command(path: &PathBuf, texts: &[String], file: Option<&Path>, no_failures: bool) -> Result<i32> {
    let mut budgets: Vec<Budget> = texts.iter().map(|t| parse_budget(t).map_err(Fail::input)).collect::<Result<_>>()?;
    if let Some(f) = file {
        budgets.extend(parse_file(f)?);
    }
    if budgets.is_empty() && !no_failures {
        return Err(Fail::input("check: nothing to check: give --budget 'KEY<=SIZE', --budgets FILE or --no-failures"));
    }
    let run = load_run(std::slice::from_ref(path))?;
    let gs = groups(&run);
    let (breaches, notes) = evaluate(&gs, &budgets, no_failures);
    for n in &notes {
        eprintln!("culedger: {n}");
    }
    for b in &breaches {
        println!("BREACH {b}");
    }
    let checks = budgets.len() + usize::from(no_failures);
    if breaches.is_empty() {
        println!(
            "ok: {checks} check{} hold on {} device{}",
            if checks == 1 { "" } else { "s" },
            gs.len(),
            if gs.len() == 1 { "" } else { "s" }
        );
        Ok(0)
    } else {
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_grammar() {
        let b = parse_budget("ipc<=64MiB").unwrap();
        assert_eq!((b.key, b.op, b.limit), (Key::Category("ipc"), Op::Le, 64 << 20));
        let b = parse_budget(" peak:other <= 1 GiB ").unwrap();
        assert_eq!((b.key, b.op, b.limit), (Key::CategoryPeak("other"), Op::Le, 1 << 30));
        let b = parse_budget("kv_pool>=40GiB").unwrap();
        assert_eq!((b.key, b.op), (Key::Category("kv_pool"), Op::Ge));
        assert_eq!(parse_budget("untracked<2GB").unwrap().op, Op::Lt);
        assert_eq!(parse_budget("live>0").unwrap().key, Key::Live);
        assert_eq!(parse_budget("driver_costs==0").unwrap().op, Op::Eq);
        assert_eq!(parse_budget("ipc_imported<=1MiB").unwrap().key, Key::IpcImported);
        assert_eq!(parse_budget("peak<=1TiB").unwrap().key, Key::Peak);
    }

    #[test]
    fn rejects_bad_budgets() {
        for bad in ["ipc", "ipc<=", "foo<=1GiB", "peak:live<=1GiB", "ipc<=64 parsecs", "<=1GiB"] {
            assert!(parse_budget(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn comparisons() {
        assert!(Op::Le.holds(5, 5) && !Op::Lt.holds(5, 5) && Op::Ge.holds(5, 5) && !Op::Gt.holds(5, 5));
        assert!(Op::Eq.holds(0, 0) && !Op::Eq.holds(1, 0));
    }
}
