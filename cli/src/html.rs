//! `culedger html PATH [PATH2] -o OUT.html`: one self-contained page of a run (no network
//! when it is viewed: the chart library, the styles, the script and the data are inlined).
//!
//! The figures are those of `report`, `explain` and `diff` (their JSON documents are embedded
//! as they are), plus what a chart needs: per GPU the categories' merged timeline
//! (`DeviceGroup::series`), the free-memory queries with what they told, the sizing query,
//! the measured driver costs and the failures, and a call-site tree of live bytes. The page
//! (html/page.js) draws them with uPlot (html/vendor/uplot, pinned, MIT), writing every
//! string from the reports as text, never as markup: a report is untrusted input.

use crate::analysis::{self, DeviceGroup};
use crate::error::{Fail, Result};
use crate::load::Run;
use crate::model::CATEGORIES;
use crate::run_analysis::Analysis;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

const UPLOT_JS: &str = include_str!("html/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("html/vendor/uplot/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("html/vendor/uplot/LICENSE");
const PAGE_JS: &str = include_str!("html/page.js");
const PAGE_CSS: &str = include_str!("html/page.css");
/// Timeline points per GPU at most (a longer timeline is thinned, its extremes kept).
const MAX_POINTS: usize = 4000;
/// Call-site tree: deepest level kept.
const MAX_DEPTH: usize = 40;

/// One GPU's chart data.
#[derive(Serialize)]
struct Chart {
    host: String,
    index: i64,
    /// For a MIG device: its index under its GPU (`index`); left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    mig_index: Option<i64>,
    /// The GPU's name where its host's numbering is not known (`DeviceGroup::uuid_name`);
    /// left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    uuid_name: Option<String>,
    capacity: Option<i64>,
    /// Seconds on the run's clock, and per category the live bytes at each time.
    t: Vec<f64>,
    cats: BTreeMap<String, Vec<i64>>,
    /// Untracked bytes at each time (device used minus what the run's processes had
    /// allocated), held from the latest reading at or before it; None before the first.
    untracked: Vec<Option<i64>>,
    /// The device at the failure (or at the peak): capacity split into its parts.
    at: Option<Moment>,
    queries: Vec<Value>,
    failures: Vec<Value>,
    costs: Vec<Value>,
    sizing: Option<Value>,
    /// Live bytes by call frames: `{name, kind, bytes, children}`.
    tree: Node,
}

/// One GPU at one moment, capacity = categories + driver costs + other untracked + free.
#[derive(Serialize)]
struct Moment {
    t: f64,
    /// `failure` or `peak`.
    kind: &'static str,
    /// What happened then, in explain's words (the failed request) or "the peak".
    what: String,
    cats: BTreeMap<String, i64>,
    driver_costs: i64,
    untracked_other: i64,
    used: i64,
    free: i64,
    capacity: i64,
    /// The failed request's size.
    asked: Option<i64>,
}

#[derive(Serialize, Default)]
struct Node {
    name: String,
    /// `python`, `native` or `root`.
    kind: &'static str,
    bytes: i64,
    children: Vec<Node>,
}

impl Node {
    fn add(&mut self, path: &[(String, &'static str)], bytes: i64) {
        self.bytes += bytes;
        let Some(((name, kind), rest)) = path.split_first() else { return };
        let i = match self.children.iter().position(|c| &c.name == name && c.kind == *kind) {
            Some(i) => i,
            None => {
                self.children.push(Node { name: name.clone(), kind, ..Node::default() });
                self.children.len() - 1
            }
        };
        self.children[i].add(rest, bytes);
    }

    fn sort(&mut self) {
        self.children.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
        self.children.iter_mut().for_each(Node::sort);
    }
}

/// Keeps at most [`MAX_POINTS`] of a step series: evenly spaced, plus each bucket's highest
/// total so that peaks survive.
fn thin(points: &[analysis::Point]) -> Vec<analysis::Point> {
    if points.len() <= MAX_POINTS {
        return points.to_vec();
    }
    let per = points.len().div_ceil(MAX_POINTS / 2);
    let mut out = Vec::new();
    for chunk in points.chunks(per) {
        out.push(chunk[0].clone());
        if let Some(max) = chunk.iter().max_by_key(|p| p.total()) {
            if max.t_unix_us != chunk[0].t_unix_us {
                out.push(max.clone());
            }
        }
    }
    out
}

fn secs(us: i64) -> f64 {
    us as f64 / 1e6
}

/// The interpreter's own native frames (its eval loop, ctypes, libffi): the Python frames
/// already say what they ran.
fn interpreter(object: &str) -> bool {
    let base = object.rsplit('/').next().unwrap_or(object);
    ["libpython", "python3", "_ctypes", "libffi"].iter().any(|p| base.starts_with(p))
}

/// The query a process sized its pool from, as `explain`'s sizing finding names it: pid and
/// time on the run's clock, and the sentence to mark it with.
struct SizedFrom {
    pid: i64,
    at_us: i64,
    why: String,
}

/// The sizing queries of one GPU from explain's JSON (`findings[kind=sizing].detail.ranks`).
fn sized_from(explained: &Value, g: &DeviceGroup) -> Vec<SizedFrom> {
    let findings = explained["findings"].as_array().map(Vec::as_slice).unwrap_or_default();
    findings
        .iter()
        .filter(|f| f["kind"] == "sizing")
        .flat_map(|f| f["detail"]["ranks"].as_array().cloned().unwrap_or_default())
        .filter(|r| is_of(r, g))
        .filter_map(|r| {
            let why = format!(
                "{} sized its pool from it: told {} free, its pool took {} ({:.1}%)",
                r["process"].as_str()?,
                crate::units::fmt_bytes(r["told_bytes"].as_i64()?),
                crate::units::fmt_bytes(r["pool_bytes"].as_i64()?),
                r["fraction"].as_f64()? * 100.0
            );
            Some(SizedFrom { pid: r["pid"].as_i64()?, at_us: r["at_us"].as_i64()?, why })
        })
        .collect()
}

/// Whether explain's JSON row (a finding, a sizing row) is about `g`: its host, GPU and MIG
/// device (two MIG devices of one GPU share `device`).
fn is_of(row: &Value, g: &DeviceGroup) -> bool {
    row["host"] == g.host.as_str() && row["device"] == g.index && row["mig_index"].as_i64() == g.mig_index
}

/// The first failure explain tells of on this GPU: (time on the run's clock, bytes asked,
/// free at the failure when known, the words for it).
fn explained_failure(explained: &Value, g: &DeviceGroup) -> Option<(i64, i64, Option<i64>, String)> {
    let f = explained["findings"]
        .as_array()?
        .iter()
        .filter(|f| f["kind"] == "failed_allocation" && is_of(f, g))
        .min_by_key(|f| f["detail"]["at_us"].as_i64().unwrap_or(i64::MAX))?;
    let d = &f["detail"];
    Some((d["at_us"].as_i64()?, d["bytes"].as_i64()?, d["free_bytes"].as_i64(), f["title"].as_str()?.to_string()))
}

/// The GPU at its first failure, else at its highest reading of device used (else its tracked
/// peak): what the picture above the tables shows.
fn moment(g: &DeviceGroup, explained: &Value, readings: &[analysis::Reading], series: &[analysis::Point]) -> Option<Moment> {
    let c = g.clock;
    let capacity = g.total_bytes().or_else(|| readings.iter().map(|r| r.total_bytes).max())?;
    let reading_near = |t: i64| {
        // The first reading at or after the moment, else the last before it.
        readings.iter().find(|r| r.at_us >= t).or_else(|| readings.iter().rev().find(|r| r.at_us <= t))
    };
    let (t, kind, what, asked, used) = if let Some((t, asked, free, what)) = explained_failure(explained, g) {
        let used = free.map(|f| capacity - f).or_else(|| reading_near(t).map(|r| r.used_bytes));
        (t, "failure", what, Some(asked), used)
    } else if let Some((m, f)) = g.failures().into_iter().next() {
        let t = c.since(m.abs_us(f));
        let what = format!("pid {} could not allocate {} ({})", m.pid(), crate::units::fmt_bytes(f.bytes), f.api);
        (t, "failure", what, Some(f.bytes), reading_near(t).map(|r| r.used_bytes))
    } else if let Some(r) = readings.iter().max_by_key(|r| (r.used_bytes, std::cmp::Reverse(r.at_us))) {
        (r.at_us, "peak", "the highest device use a reading saw".to_string(), None, Some(r.used_bytes))
    } else {
        let p = series.iter().max_by_key(|p| p.total())?;
        (c.since(p.t_unix_us), "peak", "the peak of tracked memory".to_string(), None, None)
    };
    let abs = c.t0_us + t;
    let mut live = [0i64; 6];
    for m in &g.members {
        for (k, v) in m.live_at(abs).iter().enumerate() {
            live[k] += v;
        }
    }
    // The categories of the device's own (a user's rules, a program's tags) are tracked too.
    let names = g.other_categories();
    let mut others = vec![0i64; names.len()];
    for m in &g.members {
        for (k, v) in m.live_others_at(abs, &names).iter().enumerate() {
            others[k] += v;
        }
    }
    let tracked: i64 = live.iter().sum::<i64>() + others.iter().sum::<i64>();
    let used = used.unwrap_or(tracked).max(0);
    let untracked = (used - tracked).max(0);
    // De-noised, as explain reconciles them: what another process did inside a call's window
    // (its context created by its peer access) is not this call's cost.
    let estimate = crate::costs::context_estimate(g);
    let costs: i64 = g
        .members
        .iter()
        .flat_map(|m| crate::costs::calls_of(*m))
        .filter(|call| call.end_us <= abs)
        .map(|call| crate::costs::denoise(g, &call, estimate.as_ref()).0.max(0))
        .sum();
    let driver_costs = costs.min(untracked);
    Some(Moment {
        t: secs(t),
        kind,
        what,
        cats: CATEGORIES
            .iter()
            .map(|c| c.to_string())
            .zip(live)
            .chain(names.iter().map(|n| DeviceGroup::shown_category(n).into_owned()).zip(others))
            .filter(|(_, v)| *v != 0)
            .collect(),
        driver_costs,
        untracked_other: untracked - driver_costs,
        used: used.max(tracked),
        free: (capacity - used.max(tracked)).max(0),
        capacity,
        asked,
    })
}

/// The step series with a point at every reading and at the moment, so that the stack's top
/// reaches the device's used memory there; and the untracked bytes at each point.
fn with_untracked(
    series: Vec<analysis::Point>,
    readings: &[analysis::Reading],
    at: Option<&Moment>,
    t0: i64,
) -> (Vec<analysis::Point>, Vec<Option<i64>>) {
    // (time on the absolute clock, untracked bytes from then on)
    let mut anchors: Vec<(i64, i64)> = readings.iter().map(|r| (t0 + r.at_us, r.untracked_bytes.max(0))).collect();
    if let Some(m) = at {
        anchors.push((t0 + (m.t * 1e6).round() as i64, m.driver_costs + m.untracked_other));
    }
    anchors.sort_by_key(|a| a.0);
    let width = series.first().map_or(0, |p| p.others.len());
    let mut points = series;
    for &(t, _) in &anchors {
        let i = points.partition_point(|p| p.t_unix_us <= t);
        if i > 0 && points[i - 1].t_unix_us == t {
            continue;
        }
        let (cats, others) =
            if i > 0 { (points[i - 1].cats, points[i - 1].others.clone()) } else { ([0; 6], vec![0; width]) };
        points.insert(i, analysis::Point { t_unix_us: t, cats, others });
    }
    let untracked = points
        .iter()
        .map(|p| {
            let k = anchors.partition_point(|a| a.0 <= p.t_unix_us);
            k.checked_sub(1).map(|k| anchors[k].1)
        })
        .collect();
    (points, untracked)
}

fn chart(g: &DeviceGroup, explained: &Value) -> Chart {
    let c = g.clock;
    let readings = g.readings();
    let thinned = thin(g.series());
    let at = moment(g, explained, &readings, &thinned);
    let (series, untracked) = with_untracked(thinned, &readings, at.as_ref(), c.t0_us);
    let t = series.iter().map(|p| secs(c.since(p.t_unix_us))).collect();
    // The six, then the device's own categories (a user's rules, a program's tags).
    let cats = CATEGORIES
        .iter()
        .enumerate()
        .map(|(i, name)| (name.to_string(), series.iter().map(|p| p.cats[i]).collect()))
        .chain(g.other_categories().into_iter().enumerate().map(|(i, name)| {
            (DeviceGroup::shown_category(&name).into_owned(), series.iter().map(|p| p.others[i]).collect())
        }))
        .collect();
    // explain's sizing queries; without that finding (one rank), the query the pool's
    // reconciliation starts from (diff's "told free at the sizing query"); without a pool,
    // the report's sizing probe.
    let mut explained_sizing = sized_from(explained, g);
    if explained_sizing.is_empty() {
        if let Some(w) = crate::explain::recon::failure_reconciliation(g) {
            let q = &w.recon.query;
            let pool = w.recon.sum(crate::explain::recon::ItemKind::Pool);
            let why = format!(
                "{} sized its pool from it: told {} free, its pool took {}",
                q.process,
                crate::units::fmt_bytes(q.free_bytes),
                crate::units::fmt_bytes(pool)
            );
            explained_sizing.push(SizedFrom { pid: q.pid, at_us: q.at_us, why });
        }
    }
    let sizing = g.sizing_probe();
    let mut sizing_why = None;
    let queries = g
        .probes()
        .into_iter()
        .map(|(m, p)| {
            let r = g.reading(m, p);
            let at = c.since(m.abs_us(p));
            let is_sizing = if explained_sizing.is_empty() {
                let hit = sizing.as_ref().is_some_and(|(sm, sp, _)| sm.pid() == m.pid() && std::ptr::eq(*sp, p));
                if hit {
                    sizing_why = sizing.as_ref().map(|s| crate::analysis::why(&s.2, &c));
                }
                hit
            } else {
                match explained_sizing.iter().find(|s| s.pid == m.pid() && s.at_us == at) {
                    Some(s) => {
                        sizing_why = Some(s.why.clone());
                        true
                    }
                    None => false,
                }
            };
            json!({
                "t": secs(c.since(m.abs_us(p))), "pid": m.pid(), "api": p.api, "free": p.free_bytes,
                "total": p.total_bytes, "error": p.error, "used": r.as_ref().map(|r| r.used_bytes),
                "tracked": r.as_ref().map(|r| r.tracked_bytes), "untracked": r.as_ref().map(|r| r.untracked_bytes),
                "sizing": is_sizing,
            })
        })
        .collect();
    let failures = g
        .failures()
        .into_iter()
        .map(|(m, f)| {
            json!({"t": secs(c.since(m.abs_us(f))), "pid": m.pid(), "api": f.api, "bytes": f.bytes,
                   "error": f.error_name, "live": f.live_bytes})
        })
        .collect();
    let costs = g
        .members
        .iter()
        .flat_map(|m| crate::costs::calls_of(*m))
        .map(|call| {
            json!({"t": secs(c.since(call.end_us)), "pid": call.member.pid(), "api": call.api, "bytes": call.measured})
        })
        .collect();
    let sizing = sizing_why.map(|why| json!({ "why": why }));
    let mut tree = Node { name: "all live bytes".into(), kind: "root", ..Node::default() };
    for m in &g.members {
        for s in &m.dev.sites {
            if s.live_bytes <= 0 {
                continue;
            }
            let rec = m.report.sites.iter().find(|r| r.id == s.site);
            let mut path: Vec<(String, &'static str)> = Vec::new();
            if let Some(rec) = rec {
                path.extend(rec.python.iter().rev().map(|f| {
                    let file = f.file.rsplit('/').next().unwrap_or(&f.file);
                    (format!("{} ({file}:{})", f.function, f.line), "python")
                }));
                path.extend(rec.native.iter().rev().filter(|n| !n.internal && !interpreter(&n.object)).map(|n| {
                    let object = n.object.rsplit('/').next().unwrap_or(&n.object);
                    (format!("{} ({object})", n.symbol.as_deref().unwrap_or(&n.offset)), "native")
                }));
            }
            if path.is_empty() {
                path.push((s.caller.clone().unwrap_or_else(|| format!("site {}", s.site)), "native"));
            }
            path.truncate(MAX_DEPTH);
            tree.add(&path, s.live_bytes);
        }
    }
    tree.sort();
    Chart {
        host: g.host.clone(),
        index: g.index,
        mig_index: g.mig_index,
        uuid_name: g.uuid_name.clone(),
        capacity: g.total_bytes(),
        t,
        cats,
        untracked,
        at,
        queries,
        failures,
        costs,
        sizing,
        tree,
    }
}

/// The page's data for one run.
fn run_data(a: &Analysis) -> Result<Value> {
    let run = a.run;
    let summary = a.summary(false);
    let explained = to(a.explanation())?;
    let charts: Vec<Chart> = a.groups().iter().map(|g| chart(g, &explained)).collect();
    Ok(json!({
        "label": run.label,
        "summary": to(summary)?,
        "explain": explained,
        "charts": to(&charts)?,
    }))
}

fn to<T: Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Fail::input(format!("html: {e}")))
}

/// JSON that can sit inside a `<script>` element: `<` is escaped (`\u003c`) so that no
/// string from a report can close the element or open a comment.
fn script_json(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into()).replace('<', "\\u003c")
}

/// The whole page.
pub fn page(runs: &[Run]) -> Result<String> {
    let analyses: Vec<Analysis> = runs.iter().map(crate::run_analysis::of).collect();
    let mut data = json!({
        "tool": format!("culedger {}", env!("CARGO_PKG_VERSION")),
        "runs": analyses.iter().map(run_data).collect::<Result<Vec<_>>>()?,
    });
    if let [a, b] = analyses.as_slice() {
        data["diff"] = to(&crate::diff::diff(a, b, false))?;
    }
    let title = runs.iter().map(|r| r.label.as_str()).collect::<Vec<_>>().join(" vs ");
    let title = title.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>culedger: {title}</title>\n<style>{UPLOT_CSS}</style>\n<style>{PAGE_CSS}</style>\n</head><body>\n\
         <main id=\"app\"><p id=\"loading\">Loading…</p></main>\n\
         <script id=\"culedger-data\" type=\"application/json\">{}</script>\n\
         <!-- uPlot 1.6.32, https://github.com/leeoniya/uPlot\n{}-->\n<script>{UPLOT_JS}</script>\n\
         <script>{PAGE_JS}</script>\n</body></html>\n",
        script_json(&data),
        UPLOT_LICENSE.replace("--", "- -"),
    ))
}

/// Writes the page of `runs` (one, or two to compare) to `out`; returns what was written.
pub fn write(runs: &[Run], out: &Path) -> Result<String> {
    if out
        .extension()
        .and_then(|e| e.to_str())
        .is_none_or(|e| !e.eq_ignore_ascii_case("html") && !e.eq_ignore_ascii_case("htm"))
    {
        return Err(Fail::input(format!("html: {}: the output must end in .html", out.display())));
    }
    let text = page(runs)?;
    crate::output::write_file(out, text.as_bytes(), None)
        .map_err(|e| Fail::input(format!("html: cannot write {}: {e}", out.display())))?;
    Ok(format!("{} ({} KiB)", out.display(), text.len().div_ceil(1024)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_strings_cannot_close_the_script() {
        let v = json!({"title": "</script><script>alert(1)</script><!--"});
        let s = script_json(&v);
        assert!(!s.contains('<'), "{s}");
        assert_eq!(serde_json::from_str::<Value>(&s).unwrap(), v);
    }

    #[test]
    fn call_frames_add_up() {
        let mut root = Node::default();
        let a = ("a".to_string(), "python");
        root.add(&[a.clone(), ("b".into(), "native")], 5);
        root.add(&[a.clone(), ("c".into(), "native")], 7);
        root.add(&[("d".into(), "python")], 1);
        root.sort();
        assert_eq!(root.bytes, 13);
        assert_eq!(root.children[0].name, "a");
        assert_eq!(root.children[0].bytes, 12);
        assert_eq!(root.children[0].children[0].name, "c");
    }
}
