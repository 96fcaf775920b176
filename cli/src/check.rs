//! `culedger check`: memory budgets for CI.
//!
//! Grammar of one budget (whitespace is ignored): see [`GRAMMAR`]. Every budget is checked
//! on every device of every host (processes sharing a device are summed). Exit status: 0
//! when all hold, 1 when one is breached or cannot be measured (one line each; unmeasured
//! ones are only notes with `--allow-unmeasured`), 2 on bad input.

use crate::analysis::{DeviceGroup, GroupWords};
use crate::error::{Fail, Result};
use crate::figures::{Figure, FigureWords};
use crate::layout::printable;
use crate::load::load_run;
use crate::model::CATEGORIES;
use crate::runs::Selection;
use crate::units::count;
use crate::units::{fmt_bytes, parse_size};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The schema id of `culedger check --format json` (docs/cli-json.md).
pub const CHECK_SCHEMA: &str = "culedger-check/1";

/// The budget grammar, as `culedger check --help` prints it.
pub const GRAMMAR: &str = "\
Budget grammar (spaces are ignored):
  budget := [\"peak:\"] key op size
  key    := weights | kv_pool | ipc | graphs | comm | other
                            live bytes of a category (with \"peak:\" its peak)
          | live | peak     all tracked bytes now / at the peak
          | untracked       largest (device used - tracked) over the free-memory queries,
                            compared at each query; unmeasured without a query
          | ipc_imported    bytes of peer buffers opened (cumulative)
          | driver_costs    hidden driver memory, de-noised (sum over APIs)
  op     := <= | < | >= | > | ==
  size   := [-] number [unit]   B KiB MiB GiB TiB (powers of 1024), KB MB GB TB (of 1000)
Examples: 'ipc<=64MiB'  'peak:kv_pool>=40GiB'  'untracked<2GiB'  'driver_costs<=1GiB'

Exit status: 0 every budget holds; 1 a budget is breached, cannot be measured (unless
--allow-unmeasured) or, with --no-failures, an allocation failed; 2 bad input.";

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
pub struct Budget {
    /// As written, for messages.
    pub text: String,
    /// The figure it bounds.
    pub key: Figure,
    pub op: Op,
    pub limit: i64,
}

const KEYS_HELP: &str =
    "weights, kv_pool, ipc, graphs, comm, other, live, peak, untracked, ipc_imported, driver_costs (or peak:<category>)";

/// The edit distance between two short words (insertions, deletions, substitutions).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// ` (did you mean `kv_pool`?)` when one key is close to `name`: at most two edits away
/// (one for short names), or `name` a prefix of it.
fn did_you_mean(name: &str) -> String {
    let keys = Figure::budget_keys();
    let near = keys
        .iter()
        .map(|k| (distance(&name.to_ascii_lowercase(), k), k))
        .filter(|(d, k)| *d <= if name.len() <= 4 { 1 } else { 2 } || (name.len() >= 3 && k.starts_with(name)))
        .min_by_key(|(d, _)| *d);
    near.map_or_else(String::new, |(_, k)| format!(" (did you mean `{k}`?)"))
}

/// Operators written the wrong way round or half (`=<`, `=>`, `=`, `!=`, `<>`): where the
/// operator is in `text` and what to write.
fn misplaced_operator(text: &str) -> Option<String> {
    let bad = [("=<", "<="), ("=>", ">="), ("<>", "<, > or =="), ("!=", "<, > or ==")];
    for (wrong, right) in bad {
        if let Some(at) = text.find(wrong) {
            let fixed = if right.len() == 2 {
                format!("; did you mean `{}{right}{}`?", &text[..at].trim_end(), &text[at + 2..].trim_start())
            } else {
                String::new()
            };
            return Some(format!(
                "budget `{text}`: `{wrong}` at character {} is not an operator (use <=, <, >=, > or ==){fixed}",
                text[..at].chars().count() + 1
            ));
        }
    }
    // A lone `=` (not part of <=, >= or ==).
    let bytes = text.as_bytes();
    let lone = (0..bytes.len()).find(|&i| {
        bytes[i] == b'='
            && !matches!(bytes.get(i + 1), Some(b'='))
            && !matches!(i.checked_sub(1).map(|j| bytes[j]), Some(b'<' | b'>' | b'='))
    })?;
    Some(format!(
        "budget `{text}`: `=` at character {} is not an operator (use == for equal, or <=, <, >=, >)",
        text[..lone].chars().count() + 1
    ))
}

/// The units a budget's size takes.
const UNITS: &str = "B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (of 1000)";

/// Parses one budget such as `ipc<=64MiB` or `peak:other <= 1 GiB`.
pub fn parse_budget(text: &str) -> std::result::Result<Budget, String> {
    if let Some(e) = misplaced_operator(text.trim()) {
        return Err(e);
    }
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let (at, op_text, op) = Op::ALL
        .iter()
        .filter_map(|(s, op)| compact.find(s).map(|i| (i, *s, *op)))
        .min_by_key(|(i, s, _)| (*i, std::cmp::Reverse(s.len())))
        .ok_or_else(|| format!("budget `{text}`: no comparison (use <=, <, >=, > or ==), e.g. 'ipc<=64MiB'"))?;
    let (name, size) = (&compact[..at], &compact[at + op_text.len()..]);
    let key = Figure::budgeted(name).ok_or_else(|| {
        if name.starts_with("peak:") {
            format!("budget `{text}`: `peak:` takes a category ({}){}", CATEGORIES.join(", "), did_you_mean(name))
        } else {
            format!("budget `{text}`: unknown key `{name}`{} (keys: {KEYS_HELP})", did_you_mean(name))
        }
    })?;
    let limit = parse_size(size).map_err(|e| format!("budget `{text}`: {e}"))?;
    // A bare number silently meaning bytes turns `ipc<=64` into a 64-byte budget.
    let unitless = !size.is_empty() && size.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if unitless && limit != 0 {
        return Err(format!(
            "budget `{text}`: `{size}` needs a unit: {UNITS}, e.g. `{}{op_text}{size}MiB` (or `{size}B` for bytes)",
            name
        ));
    }
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

/// The outcome of one budget on one device, or of `--no-failures` for one failure.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub device: String,
    /// The budget as written, or `no-failures`.
    pub budget: String,
    pub key: String,
    pub status: Status,
    pub value_bytes: Option<i64>,
    pub limit_bytes: Option<i64>,
    /// One line for people.
    pub message: String,
}

/// Whether a budget held on a device (its `status` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Listed first.
    Breach,
    /// No free-memory query measured it.
    Unmeasured,
    Hold,
}

/// Every budget on every device, and each failed allocation when `no_failures`.
pub fn evaluate(groups: &[DeviceGroup], budgets: &[Budget], no_failures: bool) -> Vec<Outcome> {
    let mut out = Vec::new();
    for g in groups {
        for b in budgets {
            let v = b.key.read(g);
            let (status, message) = match v {
                Some(v) if !b.op.holds(v, b.limit) => {
                    (Status::Breach, format!("{}: {} is {} (budget {})", g.title(), b.key.key(), b.key.fmt(v), b.text))
                }
                Some(v) => {
                    (Status::Hold, format!("{}: {} is {} (budget {})", g.title(), b.key.key(), b.key.fmt(v), b.text))
                }
                None => (
                    Status::Unmeasured,
                    format!(
                        "{}: {} cannot be measured: no free-memory query on this GPU (budget {})",
                        g.title(),
                        b.key.key(),
                        b.text
                    ),
                ),
            };
            out.push(Outcome {
                device: g.title(),
                budget: b.text.clone(),
                key: b.key.key(),
                status,
                value_bytes: v,
                limit_bytes: Some(b.limit),
                message,
            });
        }
        if no_failures {
            // A request and the allocator's retries of it are one failure (`analysis::is_retry`).
            for (m, f, _) in g.failed_requests() {
                out.push(Outcome {
                    device: g.title(),
                    budget: "no-failures".into(),
                    key: Figure::FailedRequests.key(),
                    status: Status::Breach,
                    value_bytes: Some(f.bytes),
                    limit_bytes: None,
                    message: format!(
                        "{}: allocation failed: {} {} at {}: {} of {} ({})",
                        g.title(),
                        m.pid(),
                        m.label(),
                        g.clock.record(m.report, f),
                        f.api,
                        fmt_bytes(f.bytes),
                        f.error_name
                    ),
                });
            }
        }
    }
    out
}

/// What `culedger check` was asked.
pub struct Request<'a> {
    pub path: &'a PathBuf,
    pub budgets: &'a [String],
    pub file: Option<&'a Path>,
    pub no_failures: bool,
    pub allow_unmeasured: bool,
    pub format: crate::doc::Format,
    /// For the text output: BREACH lines red on a terminal.
    pub color: crate::layout::ColorChoice,
    pub selection: &'a Selection,
}

/// `culedger check --format json`.
#[derive(Debug, Serialize)]
pub struct CheckResult {
    pub schema: &'static str,
    pub ok: bool,
    /// Budgets given (plus one for `--no-failures`), devices checked.
    pub checks: usize,
    pub devices: usize,
    pub breaches: usize,
    pub unmeasured: usize,
    pub allow_unmeasured: bool,
    pub outcomes: Vec<Outcome>,
}

pub fn command(req: &Request) -> Result<i32> {
    let mut budgets: Vec<Budget> =
        req.budgets.iter().map(|t| parse_budget(t).map_err(Fail::input)).collect::<Result<_>>()?;
    if let Some(f) = req.file {
        budgets.extend(parse_file(f)?);
    }
    if budgets.is_empty() && !req.no_failures {
        return Err(Fail::input("check: nothing to check: give --budget 'KEY<=SIZE', --budgets FILE or --no-failures"));
    }
    let run = crate::runs::select(load_run(std::slice::from_ref(req.path))?, req.selection)?;
    let analysis = crate::run_analysis::of(&run);
    let gs = analysis.groups();
    let outcomes = evaluate(gs, &budgets, req.no_failures);
    let of = |status: Status| outcomes.iter().filter(|o| o.status == status).count();
    let (breaches, unmeasured) = (of(Status::Breach), of(Status::Unmeasured));
    let ok = breaches == 0 && (unmeasured == 0 || req.allow_unmeasured);
    let checks = budgets.len() + usize::from(req.no_failures);
    if req.format == crate::doc::Format::Json {
        let result = CheckResult {
            schema: CHECK_SCHEMA,
            ok,
            checks,
            devices: gs.len(),
            breaches,
            unmeasured,
            allow_unmeasured: req.allow_unmeasured,
            outcomes,
        };
        let text = serde_json::to_string_pretty(&result).map_err(|e| Fail::input(e.to_string()))? + "\n";
        crate::output::print_stdout(&text)?;
        return Ok(if ok { 0 } else { 1 });
    }
    let style = crate::layout::Style::for_stream(req.color, crate::layout::Stream::Stdout);
    // One line per outcome, wrapped at the width (continuations indented), its word coloured.
    let line = |word: &str, code: &str, message: &str| {
        let wrapped = crate::layout::wrap_indent(&format!("{word} {message}"), style.width, "  ").join("\n");
        format!("{}{}\n", style.paint(code, word), &wrapped[word.len()..])
    };
    let mut text = String::new();
    for o in outcomes.iter().filter(|o| o.status == Status::Breach) {
        text.push_str(&line("BREACH", "1;31", &printable(&o.message)));
    }
    for o in outcomes.iter().filter(|o| o.status == Status::Unmeasured) {
        if req.allow_unmeasured {
            eprintln!("culedger: not checked: {}", printable(&o.message));
        } else {
            text.push_str(&line("UNMEASURED", "1;33", &printable(&o.message)));
        }
    }
    let on = format!("on {}", count(gs.len(), "device", "devices"));
    let checks_text = count(checks, "check", "checks");
    let last = if ok {
        let verb = if checks == 1 { "holds" } else { "hold" };
        let skipped = if unmeasured > 0 { format!(" ({unmeasured} not measured, allowed)") } else { String::new() };
        format!("ok: {checks_text} {verb} {on}{skipped}")
    } else {
        let mut parts = Vec::new();
        if breaches > 0 {
            parts.push(count(breaches, "breach", "breaches"));
        }
        if unmeasured > 0 && !req.allow_unmeasured {
            parts.push(format!("{unmeasured} unmeasured (--allow-unmeasured to accept)"));
        }
        format!("FAILED: {}; {checks_text} {on}", parts.join(" and "))
    };
    if req.format == crate::doc::Format::Markdown {
        crate::output::print_stdout(&markdown(&last, ok, &outcomes, req.allow_unmeasured))?;
        return Ok(if ok { 0 } else { 1 });
    }
    let last = crate::layout::wrap_indent(&last, style.width, "  ").join("\n");
    text.push_str(&style.paint(if ok { "1;32" } else { "1;31" }, &last));
    text.push('\n');
    crate::output::print_stdout(&text)?;
    Ok(if ok { 0 } else { 1 })
}

/// `--format markdown` (a CI job's `$GITHUB_STEP_SUMMARY`): the summary line, then one row
/// per budget and device, breaches first.
fn markdown(summary: &str, ok: bool, outcomes: &[Outcome], allow_unmeasured: bool) -> String {
    use crate::doc::{Block, Doc, Format, Table};
    let mut d = Doc::default();
    d.push(Block::Title("culedger check".into()));
    d.push(Block::Verdict { text: summary.to_string(), bad: !ok });
    let mut t = Table::new(&["status", "device", "budget", "measured"], &[3]);
    let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| o.status);
    for o in sorted {
        let status = match o.status {
            Status::Breach => "BREACH",
            Status::Unmeasured if allow_unmeasured => "not measured (allowed)",
            Status::Unmeasured => "UNMEASURED",
            Status::Hold => "ok",
        };
        let budget = if o.budget == "no-failures" { "--no-failures".to_string() } else { o.budget.clone() };
        let measured = match (o.budget.as_str(), o.value_bytes) {
            ("no-failures", _) => {
                o.message.split_once(": allocation failed: ").map_or(o.message.clone(), |x| x.1.into())
            }
            (_, Some(v)) => fmt_bytes(v),
            (_, None) => "-".into(),
        };
        t.row(vec![status.into(), o.device.clone(), format!("`{budget}`"), measured]);
    }
    d.table(t);
    d.render(Format::Markdown, crate::layout::Style::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_grammar() {
        let b = parse_budget("ipc<=64MiB").unwrap();
        assert_eq!((b.key, b.op, b.limit), (Figure::Category("ipc"), Op::Le, 64 << 20));
        let b = parse_budget(" peak:other <= 1 GiB ").unwrap();
        assert_eq!((b.key, b.op, b.limit), (Figure::CategoryPeak("other"), Op::Le, 1 << 30));
        let b = parse_budget("kv_pool>=40GiB").unwrap();
        assert_eq!((b.key, b.op), (Figure::Category("kv_pool"), Op::Ge));
        assert_eq!(parse_budget("untracked<2GB").unwrap().op, Op::Lt);
        assert_eq!(parse_budget("live>0").unwrap().key, Figure::Live);
        assert_eq!(parse_budget("driver_costs==0").unwrap().op, Op::Eq);
        assert_eq!(parse_budget("ipc_imported<=1MiB").unwrap().key, Figure::IpcImported);
        assert_eq!(parse_budget("peak<=1TiB").unwrap().key, Figure::Peak);
        // Untracked memory can be negative (the driver rounds less than was asked).
        let b = parse_budget("untracked >= -64 MiB").unwrap();
        assert_eq!((b.key, b.op, b.limit), (Figure::UntrackedMax, Op::Ge, -(64 << 20)));
    }

    #[test]
    fn rejects_bad_budgets() {
        for bad in ["ipc", "ipc<=", "foo<=1GiB", "peak:live<=1GiB", "ipc<=64 parsecs", "<=1GiB", "ipc<=--1GiB"] {
            assert!(parse_budget(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn a_misplaced_operator_is_pointed_at() {
        let e = parse_budget("ipc=<64MiB").unwrap_err();
        assert_eq!(
            e,
            "budget `ipc=<64MiB`: `=<` at character 4 is not an operator (use <=, <, >=, > or ==); did you mean \
             `ipc<=64MiB`?"
        );
        assert!(parse_budget("kv_pool => 40GiB").unwrap_err().contains("did you mean `kv_pool>=40GiB`?"));
        assert!(parse_budget("ipc=64MiB").unwrap_err().contains("`=` at character 4 is not an operator (use =="));
        assert!(parse_budget("ipc!=0").unwrap_err().contains("`!=` at character 4"));
        assert!(parse_budget("driver_costs==0").is_ok() && parse_budget("ipc >= 0").is_ok());
    }

    #[test]
    fn unknown_keys_get_a_suggestion() {
        assert!(parse_budget("kv_pol<=1GiB").unwrap_err().contains("unknown key `kv_pol` (did you mean `kv_pool`?)"));
        assert!(parse_budget("peak:grahps<=1GiB").unwrap_err().contains("(did you mean `peak:graphs`?)"));
        assert!(parse_budget("driver<=1GiB").unwrap_err().contains("(did you mean `driver_costs`?)"));
        assert!(parse_budget("untraked<1GiB").unwrap_err().contains("(did you mean `untracked`?)"));
        assert!(!parse_budget("vram<=1GiB").unwrap_err().contains("did you mean"), "nothing close");
    }

    #[test]
    fn sizes_need_a_unit() {
        let e = parse_budget("ipc<=64").unwrap_err();
        assert!(e.contains("`64` needs a unit: B, KiB, MiB, GiB, TiB") && e.contains("e.g. `ipc<=64MiB`"), "{e}");
        assert!(parse_budget("untracked >= -64").unwrap_err().contains("needs a unit"));
        assert_eq!(parse_budget("ipc<=64B").unwrap().limit, 64);
        assert_eq!(parse_budget("live>0").unwrap().limit, 0, "zero is zero in any unit");
    }

    #[test]
    fn comparisons() {
        assert!(Op::Le.holds(5, 5) && !Op::Lt.holds(5, 5) && Op::Ge.holds(5, 5) && !Op::Gt.holds(5, 5));
        assert!(Op::Eq.holds(0, 0) && !Op::Eq.holds(1, 0));
    }

    #[test]
    fn statuses_are_written_as_the_json_names_them() {
        let names = [Status::Breach, Status::Unmeasured, Status::Hold].map(|s| serde_json::to_value(s).unwrap());
        assert_eq!(names, ["breach", "unmeasured", "hold"]);
    }
}
