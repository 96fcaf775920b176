//! `culedger plot`: an SVG with one panel per host and device: live bytes per category
//! stacked over time, the untracked memory as a band above them up to what the device
//! used at each free-memory query (held until the next query), the device's capacity as a
//! line, and the queries (`Q1`, `Q2`, ...) and failures (`F1`, ...) marked with numbers
//! that a list under the panel explains, in the run's clock (seconds since its first
//! process started) like the report. What explains a failure is marked on the chart (from
//! `culedger explain`): the sizing query with what it told (`S`), the span from it to the
//! failure with the hidden costs that arrived in between (peer access, IPC opens, other
//! processes' contexts) and a tick at each measured driver call, and the failure's size.
//! The time axis starts where the devices' memory starts to move (a launcher's seconds
//! before the ranks start would squeeze what matters), unless `--from`/`--to` say otherwise.
//!
//! Written with the `svg` crate: plain `<text>` elements, no font files needed.

use crate::analysis::{DeviceGroup, GroupWords, Point};
use crate::clock::{Clock, ClockWords};
use crate::error::{Fail, Result};
use crate::model::CATEGORIES;
use crate::run_analysis::Analysis;
use crate::units::fmt_bytes;
use svg::node::element::{Group, Line, Polygon, Polyline, Rectangle, Text, Title};
use svg::Document;

const WIDTH: f64 = 960.0;
const CHART_H: f64 = 280.0;
/// Height of one line of the marker list under a chart.
const LIST_LINE: f64 = 15.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 40.0;
/// Tableau 10, one colour per category in schema order.
const COLORS: [&str; 6] = ["#4e79a7", "#f28e2c", "#e15759", "#76b7b2", "#59a14f", "#edc949"];
/// The colours of a run's own categories (a user's rules, a program's tags), in name order.
const OWN_COLORS: [&str; 8] = ["#ff9da7", "#9c755f", "#b07aa1", "#d37295", "#a0cbe8", "#ffbe7d", "#8cd17d", "#86bcb6"];
const UNTRACKED: &str = "#bab0ac";
const USED: &str = "#333333";
const CAPACITY: &str = "#7f7f7f";
const QUERY: &str = "#3366cc";
const FAILURE: &str = "#d62728";
const SIZING: &str = "#9467bd";
const HIDDEN: &str = "#ff7f0e";
/// Roughly the width of a character of the 15 px bold title, and of the 11 px legend.
const TITLE_CHAR: f64 = 8.6;
const LEGEND_CHAR: f64 = 7.0;
/// The pixel columns of a chart's plot area.
const COLUMNS: usize = (WIDTH - LEFT - RIGHT) as usize;
/// Marker lists longer than this are laid out in two columns.
const ONE_COLUMN: usize = 8;

/// What part of the run to plot.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    /// Seconds on the run's clock; `None`: where the memory starts to move / the end.
    pub from_s: Option<f64>,
    pub to_s: Option<f64>,
}

/// Linear mapping of time and bytes onto a panel's plot area.
struct Scale {
    t0: i64,
    t1: i64,
    ymax: i64,
    top: f64,
}

impl Scale {
    /// Clamped to the plot area: step functions that begin before `t0` or end after `t1`
    /// are drawn clipped to the window.
    fn x(&self, t: i64) -> f64 {
        let span = (self.t1 - self.t0).max(1) as f64;
        let t = t.clamp(self.t0, self.t1);
        LEFT + (t - self.t0) as f64 / span * (WIDTH - LEFT - RIGHT)
    }
    fn y(&self, bytes: i64) -> f64 {
        let h = CHART_H - TOP - BOTTOM;
        self.top + TOP + h - bytes.max(0) as f64 / self.ymax.max(1) as f64 * h
    }
}

/// The time axis's ticks, on the run's clock (µs): multiples of a round step (1, 2 or 5 times
/// a power of ten), at most six from `from` to `to` (0.300s, 0.350s, ... rather than fifths of
/// the span such as 0.301s, 0.370s).
fn time_ticks(from: i64, to: i64) -> Vec<i64> {
    let span = (to - from).max(1);
    let mut step: i64 = 1;
    'found: for _ in 0..18 {
        for m in [1, 2, 5] {
            if span / (step * m) <= 5 {
                step *= m;
                break 'found;
            }
        }
        step = step.saturating_mul(10);
    }
    let first = from.div_euclid(step) * step + if from.rem_euclid(step) == 0 { 0 } else { step };
    (0..).map(|k| first + k * step).take_while(|t| *t <= to).collect()
}

/// A time tick's label: seconds with milliseconds (`0.350s`), or with as many more digits as
/// ticks under a millisecond apart need to differ (`0.0004s`, `0.0006s`).
fn tick_label(t_us: i64, step_us: i64) -> String {
    if step_us >= 1000 {
        return culedger_analysis::clock::fmt_secs(t_us);
    }
    let digits = if step_us >= 100 { 4 } else if step_us >= 10 { 5 } else { 6 };
    let sign = if t_us < 0 { "-" } else { "" };
    let us = t_us.unsigned_abs();
    let frac = format!("{:06}", us % 1_000_000);
    format!("{sign}{}.{}s", us / 1_000_000, &frac[..digits])
}

/// A round axis maximum: 1, 2 or 5 times a power of two of a binary unit.
/// Saturates at `i64::MAX` (byte counts at the limit of the schema must not wrap into a loop).
fn nice_max(v: i64) -> i64 {
    let mut step: i64 = 1 << 20;
    while step.saturating_mul(5) < v && step <= i64::MAX / 2 {
        step *= 2;
    }
    (v.saturating_add(step - 1) / step).max(1).saturating_mul(step).max(v)
}

fn text(x: f64, y: f64, s: impl Into<String>, anchor: &str, size: u32) -> Text {
    Text::new(s.into())
        .set("x", format!("{x:.1}"))
        .set("y", format!("{y:.1}"))
        .set("text-anchor", anchor)
        .set("font-size", size)
        .set("font-family", "sans-serif")
}

fn line(x1: f64, y1: f64, x2: f64, y2: f64, color: &str, dash: &str) -> Line {
    Line::new()
        .set("x1", format!("{x1:.1}"))
        .set("x2", format!("{x2:.1}"))
        .set("y1", format!("{y1:.1}"))
        .set("y2", format!("{y2:.1}"))
        .set("stroke", color)
        .set("stroke-width", 1.2)
        .set("stroke-dasharray", dash)
}

/// A step polygon between two step functions over the same times.
fn band(s: &Scale, times: &[i64], t_end: i64, below: &[i64], above: &[i64]) -> String {
    let mut pts = Vec::new();
    for (j, t) in times.iter().enumerate() {
        let next = times.get(j + 1).copied().unwrap_or(t_end);
        pts.push(format!("{:.1},{:.1}", s.x(*t), s.y(above[j])));
        pts.push(format!("{:.1},{:.1}", s.x(next), s.y(above[j])));
    }
    for (j, t) in times.iter().enumerate().rev() {
        let next = times.get(j + 1).copied().unwrap_or(t_end);
        pts.push(format!("{:.1},{:.1}", s.x(next), s.y(below[j])));
        pts.push(format!("{:.1},{:.1}", s.x(*t), s.y(below[j])));
    }
    pts.join(" ")
}

/// One marker: its number, time, hover text and colour.
struct Marker {
    tag: String,
    t: i64,
    text: String,
    color: &'static str,
}

/// The queries and failures of a device as numbered markers, in time order.
fn markers(g: &DeviceGroup, c: &Clock) -> Vec<Marker> {
    let mut out = Vec::new();
    for (k, (m, p)) in g.probes().into_iter().enumerate() {
        let t = m.abs_us(p);
        let free = p.free_bytes.map_or("unknown".into(), fmt_bytes);
        let used = g.reading(m, p).map(|r| format!(", device used {}", fmt_bytes(r.used_bytes))).unwrap_or_default();
        out.push(Marker {
            tag: format!("Q{}", k + 1),
            t,
            text: format!("{} {} {}: told free {free}{used}", c.at(t), m.pid(), p.api).replace("device used", "used"),
            color: QUERY,
        });
    }
    for (k, (m, f)) in g.failures().into_iter().enumerate() {
        let t = m.abs_us(f);
        out.push(Marker {
            tag: format!("F{}", k + 1),
            t,
            text: format!("{} {} {} of {} failed ({})", c.at(t), m.pid(), f.api, fmt_bytes(f.bytes), f.error_name),
            color: FAILURE,
        });
    }
    out
}

/// What explains one failure on the chart: the sizing query, the hidden costs that arrived
/// between it and the failure, the failure itself (absolute µs).
struct Cause {
    query_us: i64,
    query_text: String,
    fail_us: i64,
    fail_text: String,
    /// `peer access 1.75 GiB`, ...
    costs: Vec<String>,
    /// The measured driver calls in between: (absolute µs, API).
    calls: Vec<(i64, String)>,
}

/// The causes of the failures explain finds on this device, one per failed burst.
fn causes(g: &DeviceGroup, findings: &[crate::explain::Finding]) -> Vec<Cause> {
    use crate::explain::recon::{api_words, ItemKind};
    let mut out = Vec::new();
    for f in findings.iter().filter(|f| f.kind == crate::explain::Kind::FailedAllocation) {
        if f.device != Some(g.index) || f.host.as_deref().is_some_and(|h| h != g.host) {
            continue;
        }
        let Some(fd) = failure_detail(f) else { continue };
        let Some(r) = &fd.reconciliation else { continue };
        let (query_us, fail_us) = (g.clock.t0_us + r.query.at_us, g.clock.t0_us + fd.at_us);
        let costs = r
            .items
            .iter()
            .filter(|i| matches!(i.kind, ItemKind::DriverCost | ItemKind::OtherProcesses))
            .map(|i| {
                let what = match (&i.api, i.kind) {
                    (Some(api), ItemKind::DriverCost) => api_words(api),
                    _ if i.subject.holds_context() => "other processes' contexts".to_string(),
                    _ => "other processes".to_string(),
                };
                format!("{what} {}{}", if i.estimated { "~" } else { "" }, fmt_bytes(i.bytes))
            })
            .collect();
        let mut calls: Vec<(i64, String)> = g
            .members
            .iter()
            .flat_map(|m| crate::costs::calls_of(*m))
            .filter(|c| c.end_us >= query_us && c.end_us <= fail_us && c.measured != 0)
            .map(|c| (c.end_us, c.api.to_string()))
            .collect();
        calls.sort();
        out.push(Cause {
            query_us,
            query_text: format!(
                "sizing query: {} was told {} free ({})",
                r.query.process,
                fmt_bytes(r.query.free_bytes),
                r.query.api
            ),
            fail_us,
            fail_text: format!("{} of {} failed", fd.api, fmt_bytes(fd.bytes)),
            costs,
            calls,
        });
    }
    out
}

fn failure_detail(f: &crate::explain::Finding) -> Option<&crate::explain::FailDetail> {
    match &f.detail {
        crate::explain::Detail::Failure(d) => Some(d),
        _ => None,
    }
}

/// The untracked band: from the tracked total to what the device used, at each query,
/// held until the next one. Returns (times, tracked, used).
fn untracked_steps(g: &DeviceGroup) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let mut times = Vec::new();
    let (mut tracked, mut used) = (Vec::new(), Vec::new());
    for (m, p) in g.probes() {
        if let Some(r) = g.reading(m, p) {
            times.push(m.abs_us(p));
            tracked.push(r.tracked_bytes);
            used.push(r.used_bytes);
        }
    }
    (times, tracked, used)
}

/// The untracked band stacked on the tracked areas: from the first query on, at every
/// sample and query, from the tracked total then to that plus the untracked memory of the
/// last query (device used minus tracked, held until the next query). Drawn from the
/// query's own tracked figure instead, it lay over the areas when they grew between two
/// queries (a grey band over the weights loaded after a query). Returns (times, below,
/// above).
fn untracked_band(series: &[Point], q_times: &[i64], q_tracked: &[i64], q_used: &[i64]) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let mut queries: Vec<(i64, i64)> =
        q_times.iter().zip(q_tracked.iter().zip(q_used)).map(|(t, (tr, u))| (*t, (u - tr).max(0))).collect();
    queries.sort_by_key(|q| q.0);
    let first = queries[0].0;
    let mut times: Vec<i64> =
        series.iter().map(|p| p.t_unix_us).filter(|t| *t >= first).chain(queries.iter().map(|q| q.0)).collect();
    times.sort_unstable();
    times.dedup();
    let (mut below, mut above) = (Vec::with_capacity(times.len()), Vec::with_capacity(times.len()));
    let (mut i, mut j, mut tracked, mut untracked) = (0, 0, 0, 0);
    for t in &times {
        while i < series.len() && series[i].t_unix_us <= *t {
            tracked = series[i].total();
            i += 1;
        }
        while j < queries.len() && queries[j].0 <= *t {
            untracked = queries[j].1;
            j += 1;
        }
        below.push(tracked);
        above.push(tracked + untracked);
    }
    (times, below, above)
}

/// A series as drawn: at most three points per pixel column of the plot area, the first,
/// the highest and the last of the column in time order, so that what a column ends on
/// (held into the next) is exact and its peak is drawn. A series with no more points than
/// that is drawn as it is. Drawn point by point, a timeline-heavy report (235,000 samples
/// on one device) gave a 90 MB SVG, and `plot` took 8 times the report's size in memory
/// where the other commands take about twice.
fn per_column(series: &[Point], s: &Scale) -> Vec<Point> {
    let columns = COLUMNS;
    if series.len() <= 3 * columns {
        return series.to_vec();
    }
    // Which column a time falls in, as `Scale::x` places it (clamped to the window), in
    // integers: no point moves a column by a rounding.
    let span = (s.t1 - s.t0).max(1) as i128;
    let column = |p: &Point| {
        let t = p.t_unix_us.clamp(s.t0, s.t1.max(s.t0)) - s.t0;
        ((t as i128 * columns as i128 / span) as usize).min(columns - 1)
    };
    let mut out = Vec::with_capacity(3 * columns);
    let mut start = 0;
    while start < series.len() {
        let col = column(&series[start]);
        let end = start + series[start..].iter().take_while(|p| column(p) == col).count();
        let top = (start..end).max_by_key(|&i| (series[i].total(), std::cmp::Reverse(i))).unwrap_or(start);
        let mut keep = [start, top, end - 1];
        keep.sort_unstable();
        let mut last = None;
        for i in keep {
            if last != Some(i) {
                out.push(series[i].clone());
                last = Some(i);
            }
        }
        start = end;
    }
    out
}

/// The lines of a marker list (two columns when long).
fn list_lines(n: usize) -> usize {
    if n > ONE_COLUMN {
        n.div_ceil(2)
    } else {
        n
    }
}

/// The height of a device's panel: the chart and the list of its markers.
fn panel_height(g: &DeviceGroup, c: &Clock, causes: usize) -> f64 {
    CHART_H + (list_lines(markers(g, c).len()) + 2 * causes) as f64 * LIST_LINE + 10.0
}

/// `6100-6108`, `5100, 5101, 5102`: pids in words, runs of consecutive pids as ranges.
fn pid_ranges(mut pids: Vec<i64>) -> String {
    pids.sort_unstable();
    pids.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut k = 0;
    while k < pids.len() {
        let mut j = k;
        while j + 1 < pids.len() && pids[j + 1] == pids[j] + 1 {
            j += 1;
        }
        parts.push(if j >= k + 2 { format!("{}-{}", pids[k], pids[j]) } else { pids[k].to_string() });
        if j < k + 2 && j > k {
            parts.push(pids[j].to_string());
        }
        k = j + 1;
    }
    parts.join(", ")
}

fn panel(g: &DeviceGroup, top: f64, t0: i64, t1: i64, shown: &[usize], causes: &[Cause]) -> Group {
    let c = &g.clock;
    let series: &[Point] = g.series();
    let peak = series.iter().map(Point::total).max().unwrap_or(0);
    let (q_times, q_tracked, q_used) = untracked_steps(g);
    let used_max = q_used.iter().copied().max().unwrap_or(0);
    let capacity = g.total_bytes();
    // The device's own categories, each with a colour of its own and whether it held memory.
    let own: Vec<(String, &str, bool)> = g
        .other_categories()
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let n = DeviceGroup::shown_category(&n).into_owned();
            (n, OWN_COLORS[i % OWN_COLORS.len()], series.iter().any(|p| p.others[i] != 0))
        })
        .collect();
    let s = Scale { t0, t1, ymax: nice_max(peak.max(used_max).max(capacity.unwrap_or(0)).max(1)), top };
    // What is drawn: at most three points per pixel column (the peak and the title above
    // are of every sample).
    let series = &per_column(series, &s)[..];
    let id = format!("panel-{}-gpu-{}", g.host, g.index).replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
    let pids = pid_ranges(g.members.iter().map(|m| m.pid()).collect());
    let mut grp = Group::new().set("class", "panel").set("id", id);
    let cap_text = capacity.map(|c| format!(" of {}", fmt_bytes(c))).unwrap_or_default();
    // The title fits the panel: the pids give way to their count when it would not.
    let room = ((WIDTH - LEFT - RIGHT) / TITLE_CHAR) as usize;
    let mut title = format!("{} (pids {pids}) tracked peak {}{cap_text}", g.title(), fmt_bytes(peak));
    if title.chars().count() > room {
        title = format!(
            "{} ({}) tracked peak {}{cap_text}",
            g.title(),
            crate::units::count(g.members.len(), "process", "processes"),
            fmt_bytes(peak)
        );
    }
    grp = grp.add(
        text(LEFT, top + 22.0, title, "start", 15)
            .set("class", "panel-title")
            .set("font-weight", "bold")
            .add(Title::new(format!("{} (pids {pids})", g.title()))),
    );
    // Legend: the categories shown, then the bands and lines, on its own line under the
    // title from the left edge of the chart.
    let mut legend: Vec<(&str, String)> = shown.iter().map(|&k| (COLORS[k], CATEGORIES[k].to_string())).collect();
    legend.extend(own.iter().filter(|(_, _, held)| *held).map(|(n, c, _)| (*c, n.clone())));
    legend.push((UNTRACKED, "untracked".into()));
    legend.push((USED, "device used".into()));
    if capacity.is_some() {
        legend.push((CAPACITY, "capacity".into()));
    }
    if !causes.is_empty() {
        legend.push((SIZING, "sizing query".into()));
        legend.push((HIDDEN, "hidden costs after it".into()));
    }
    let mut x = LEFT;
    for (color, name) in legend {
        grp = grp
            .add(
                Rectangle::new().set("x", x).set("y", top + 32.0).set("width", 10).set("height", 10).set("fill", color),
            )
            .add(text(x + 14.0, top + 41.0, name.clone(), "start", 11).set("class", "legend"));
        x += 22.0 + LEGEND_CHAR * name.len() as f64;
    }
    // Axes and grid.
    let (y_bottom, y_top) = (s.y(0), s.y(s.ymax));
    grp = grp.add(
        Rectangle::new()
            .set("x", LEFT)
            .set("y", format!("{y_top:.1}"))
            .set("width", WIDTH - LEFT - RIGHT)
            .set("height", format!("{:.1}", y_bottom - y_top))
            .set("fill", "none")
            .set("stroke", "#999"),
    );
    for k in 0..=4 {
        let v = s.ymax / 4 * k;
        grp = grp.add(text(LEFT - 6.0, s.y(v) + 4.0, fmt_bytes(v), "end", 11));
    }
    let ticks = time_ticks(c.since(t0), c.since(t1));
    let step = ticks.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(1000);
    for t in ticks {
        let at = c.t0_us + t;
        grp = grp.add(text(s.x(at), y_bottom + 16.0, tick_label(t, step), "middle", 11));
    }
    grp = grp.add(text(WIDTH - RIGHT, y_bottom + 32.0, "seconds since the run's first process started", "end", 10));
    // What follows each sizing query up to its failure, tinted behind the areas (drawn over
    // them, it greyed the memory below it: the dark overlay of [24] item 6).
    for cause in causes {
        let (xq, xf) = (s.x(cause.query_us.max(t0)), s.x(cause.fail_us.min(t1)));
        grp = grp.add(
            Rectangle::new()
                .set("class", "hidden-costs-span")
                .set("x", format!("{xq:.1}"))
                .set("y", format!("{y_top:.1}"))
                .set("width", format!("{:.1}", (xf - xq).max(1.0)))
                .set("height", format!("{:.1}", y_bottom - y_top))
                .set("fill", HIDDEN)
                .set("fill-opacity", 0.12)
                .add(Title::new(format!(
                    "between the sizing query and the failure: {}",
                    if cause.costs.is_empty() { "none measured".to_string() } else { cause.costs.join(", ") }
                ))),
        );
    }
    // Stacked areas, drawn as step functions (a sample holds until the next one).
    if !series.is_empty() {
        let times: Vec<i64> = series.iter().map(|p| p.t_unix_us).collect();
        let mut below = vec![0i64; series.len()];
        // The six, then the device's own categories (a user's rules, a program's tags).
        for (k, (name, color)) in CATEGORIES.iter().copied().zip(COLORS).chain(own.iter().map(|(n, c, _)| (n.as_str(), *c))).enumerate() {
            let above: Vec<i64> =
                series.iter().zip(&below).map(|(p, b)| b + if k < 6 { p.cats[k] } else { p.others[k - 6] }).collect();
            if above == below {
                continue;
            }
            grp = grp.add(
                Polygon::new()
                    .set("points", band(&s, &times, t1, &below, &above))
                    .set("fill", color)
                    .set("class", format!("area {name}"))
                    .add(Title::new(name)),
            );
            below = above;
        }
    }
    // Untracked band and device used, from the queries.
    if !q_times.is_empty() {
        let (b_times, b_below, b_above) = untracked_band(&series, &q_times, &q_tracked, &q_used);
        grp = grp.add(
            Polygon::new()
                .set("points", band(&s, &b_times, t1, &b_below, &b_above))
                .set("fill", UNTRACKED)
                .set("fill-opacity", 0.6)
                .set("class", "band untracked")
                .add(Title::new("untracked: device used minus tracked, at each free-memory query")),
        );
        let mut pts = Vec::new();
        for (j, t) in q_times.iter().enumerate() {
            let next = q_times.get(j + 1).copied().unwrap_or(t1);
            pts.push(format!("{:.1},{:.1}", s.x(*t), s.y(q_used[j])));
            pts.push(format!("{:.1},{:.1}", s.x(next), s.y(q_used[j])));
        }
        grp = grp.add(
            Polyline::new()
                .set("points", pts.join(" "))
                .set("fill", "none")
                .set("stroke", USED)
                .set("stroke-width", 1.5)
                .set("class", "line device-used")
                .add(Title::new("device used (total - free) at each free-memory query")),
        );
    }
    if let Some(cap) = capacity {
        grp = grp.add(
            Group::new()
                .set("class", "capacity")
                .add(Title::new(format!("capacity {}", fmt_bytes(cap))))
                .add(line(LEFT, s.y(cap), WIDTH - RIGHT, s.y(cap), CAPACITY, "6 3"))
                .add(text(WIDTH - RIGHT - 4.0, s.y(cap) + 13.0, format!("capacity {}", fmt_bytes(cap)), "end", 11)),
        );
    }
    // What explains each failure: the span from the sizing query to the failure, the
    // hidden costs in between (ticks at the driver calls), the query and the failure's size.
    for (k, cause) in causes.iter().enumerate() {
        let (xq, xf) = (s.x(cause.query_us.max(t0)), s.x(cause.fail_us.min(t1)));
        let tag = format!("S{}", k + 1);
        let costs = if cause.costs.is_empty() { "none measured".to_string() } else { cause.costs.join(", ") };
        let mut span = Group::new()
            .set("class", "hidden-costs")
            .add(Title::new(format!("between the sizing query and the failure: {costs}")));
        for (t, api) in &cause.calls {
            let x = s.x(*t);
            span = span.add(
                line(x, y_bottom - 10.0, x, y_bottom, HIDDEN, "none")
                    .set("class", "hidden-cost")
                    .add(Title::new(format!("{} {api}", c.at(*t)))),
            );
        }
        grp = grp.add(span);
        grp = grp.add(
            Group::new()
                .set("class", "sizing")
                .add(Title::new(format!("{tag}: {}", cause.query_text)))
                .add(line(xq, y_top, xq, y_bottom, SIZING, "none").set("stroke-width", 2.5))
                .add(text(xq + 3.0, y_bottom - 14.0, tag.clone(), "start", 11).set("fill", SIZING)),
        );
        // The failure's size beside it, inside the chart.
        let anchor = if xf > WIDTH - RIGHT - 120.0 { "end" } else { "start" };
        let dx = if anchor == "end" { -4.0 } else { 4.0 };
        grp = grp.add(
            text(xf + dx, y_top + 50.0, cause.fail_text.clone(), anchor, 11)
                .set("class", "failure-size")
                .set("fill", FAILURE)
                .set("font-weight", "bold")
                // A white halo keeps it legible over the areas.
                .set("stroke", "white")
                .set("stroke-width", 3)
                .set("paint-order", "stroke"),
        );
        let line_y = top + CHART_H + (2 * k) as f64 * LIST_LINE;
        grp = grp
            .add(
                text(LEFT, line_y, format!("{tag}: {} at {}", cause.query_text, c.at(cause.query_us)), "start", 11)
                    .set("class", "marker-list cause")
                    .set("fill", SIZING),
            )
            .add(
                text(
                    LEFT + 24.0,
                    line_y + LIST_LINE,
                    format!("then, until the failure at {}: {costs}", c.at(cause.fail_us)),
                    "start",
                    11,
                )
                .set("class", "marker-list cause")
                .set("fill", HIDDEN),
            );
    }
    // Markers, numbered; the list under the chart (under the causes) says what each is.
    let marks = markers(g, c);
    let list_top = top + CHART_H + (2 * causes.len()) as f64 * LIST_LINE;
    let two = marks.len() > ONE_COLUMN;
    let rows = list_lines(marks.len());
    for (k, mk) in marks.iter().enumerate() {
        let (col, row) = if two { (k / rows, k % rows) } else { (0, k) };
        let x = if col == 0 { LEFT } else { LEFT + (WIDTH - LEFT - RIGHT) / 2.0 };
        grp = grp.add(
            // Two columns in a smaller font, so the longest line (a failure) fits its half.
            text(
                x,
                list_top + row as f64 * LIST_LINE,
                format!("{}: {}", mk.tag, mk.text),
                "start",
                if two { 9 } else { 11 },
            )
            .set("class", "marker-list")
            .set("fill", mk.color),
        );
    }
    for (k, mk) in marks.iter().enumerate() {
        if mk.t < t0 || mk.t > t1 {
            continue;
        }
        let x = s.x(mk.t);
        let class = if mk.tag.starts_with('Q') { "probe" } else { "failure" };
        let dash = if class == "probe" { "4 3" } else { "none" };
        // Stagger the numbers of markers close together.
        let label_y = y_top + 12.0 + (k % 3) as f64 * 12.0;
        grp = grp.add(
            Group::new()
                .set("class", class)
                .add(Title::new(format!("{}: {}", mk.tag, mk.text)))
                .add(line(x, y_top, x, y_bottom, mk.color, dash))
                .add(text(x + 2.0, label_y, mk.tag.clone(), "start", 10).set("fill", mk.color)),
        );
    }
    grp
}

/// Where the memory of these devices starts to move: their first tracked bytes, else their
/// first query (a launcher's early queries are listed, not plotted).
fn first_movement(gs: &[&DeviceGroup]) -> Option<i64> {
    let first_bytes = gs.iter().filter_map(|g| g.series().iter().find(|p| p.total() > 0).map(|p| p.t_unix_us)).min();
    first_bytes.or_else(|| gs.iter().filter_map(|g| g.probes().first().map(|(m, p)| m.abs_us(*p))).min())
}

/// Builds the SVG of a run.
pub fn svg(a: &Analysis, all_categories: bool, window: Window) -> Result<Document> {
    let run = a.run;
    let gs = a.groups();
    let clock = Clock::of(&run.procs);
    let refs: Vec<&DeviceGroup> = gs.iter().collect();
    // The end of the run: its last process's end, or its last record where that is later (an
    // end written in milliseconds can fall before records in microseconds: a short program's
    // whole run then ended before its first movement and the plot was refused).
    let last_record = refs.iter().filter_map(|g| g.series().last().map(|p| p.t_unix_us)).max();
    let end = run
        .procs
        .iter()
        .map(|r| r.process.end_us())
        .max()
        .unwrap_or(clock.t0_us)
        .max(last_record.map_or(i64::MIN, |t| t.saturating_add(1)))
        .max(clock.t0_us + 1);
    let secs = |s: f64| clock.t0_us + (s * 1e6).round() as i64;
    let t0 = match window.from_s {
        Some(s) => secs(s),
        // A little before the first movement, so the first sample is not on the axis.
        None => first_movement(&refs).map_or(clock.t0_us, |t| (t - (end - t) / 50).max(clock.t0_us)),
    };
    let mut t1 = window.to_s.map_or(end, secs);
    if t1 <= t0 && window.to_s.is_none() && window.from_s.is_none() {
        // Everything within one microsecond: a millisecond of axis.
        t1 = t0.saturating_add(1000);
    }
    if t1 <= t0 {
        return Err(Fail::input(format!(
            "plot: --to ({}) must come after --from ({})",
            crate::clock::fmt_secs(t1 - clock.t0_us),
            crate::clock::fmt_secs(t0 - clock.t0_us)
        )));
    }
    let shown: Vec<usize> = crate::analysis::shown_categories(run, all_categories)
        .iter()
        .filter_map(|c| CATEGORIES.iter().position(|x| x == c))
        .collect();
    let all_causes: Vec<Vec<Cause>> = gs.iter().map(|g| causes(g, a.findings())).collect();
    let height: f64 =
        gs.iter().zip(&all_causes).map(|(g, c)| panel_height(g, &clock, c.len())).sum::<f64>().max(CHART_H) + 24.0;
    let mut doc = Document::new()
        .set("width", WIDTH)
        .set("height", height)
        .set("viewBox", (0, 0, WIDTH, height))
        .add(Rectangle::new().set("width", "100%").set("height", "100%").set("fill", "white"))
        .add(text(LEFT, 16.0, clock.header(), "start", 11).set("class", "clock"));
    let mut top = 24.0;
    for (g, c) in gs.iter().zip(&all_causes) {
        doc = doc.add(panel(g, top, t0, t1, &shown, c));
        top += panel_height(g, &clock, c.len());
    }
    Ok(doc)
}

/// The characters XML 1.0 allows (`Char`): a control character from a report (a host name,
/// a title) is written as a visible `\xNN`, as the text outputs write it, never raw.
fn xml_chars(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// Writes the SVG to `out` (`-` for stdout) and returns what to tell the user.
pub fn write_svg(a: &Analysis, out: &std::path::Path, all_categories: bool, window: Window) -> Result<String> {
    let ext = out.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    if out.as_os_str() != "-" && ext.as_deref() != Some("svg") {
        return Err(Fail::input(format!(
            "{}: plot writes SVG; name the output *.svg or - (stdout){}",
            out.display(),
            match ext.as_deref() {
                Some("png" | "pdf" | "jpg" | "jpeg") => ", and convert it, e.g. `rsvg-convert -o plot.png plot.svg`",
                _ => "",
            }
        )));
    }
    let doc = svg(a, all_categories, window)?;
    let n = a.groups().len();
    crate::output::write(out, (xml_chars(&doc.to_string()) + "\n").as_bytes())?;
    Ok(format!("plot: {} ({}, SVG)", crate::export::shown_path(out), crate::units::count(n, "panel", "panels")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_as_ranges() {
        assert_eq!(pid_ranges(vec![6108, 6100, 6101, 6102, 6103]), "6100-6103, 6108");
        assert_eq!(pid_ranges(vec![5100, 5101]), "5100, 5101");
        assert_eq!(pid_ranges(vec![1, 2, 3, 5, 7, 8]), "1-3, 5, 7, 8");
    }

    #[test]
    fn control_characters_are_not_written_raw() {
        assert_eq!(xml_chars("a\u{1b}[2J\u{0}b\tc\u{ffff}"), "a\\x1b[2J\\x00b\tc\\xffff");
    }

    #[test]
    fn time_ticks_fall_on_round_values() {
        // 0.301s to 0.670s: every 0.1 s (was fifths of the span: 0.301s, 0.375s, ...).
        assert_eq!(time_ticks(301_000, 670_000), [400_000, 500_000, 600_000]);
        assert_eq!(time_ticks(0, 9_017_000), [0, 2_000_000, 4_000_000, 6_000_000, 8_000_000]);
        assert_eq!(time_ticks(4_200_000, 4_300_000), [4_200_000, 4_220_000, 4_240_000, 4_260_000, 4_280_000, 4_300_000]);
        assert_eq!(time_ticks(5, 5), [5]);
        for (a, b) in [(0, 1), (17, 123_456_789), (3_000_001, 3_000_900)] {
            let t = time_ticks(a, b);
            assert!(!t.is_empty() && t.len() <= 6 && t.iter().all(|x| (a..=b).contains(x)), "{a} {b}: {t:?}");
        }
    }

    #[test]
    fn per_column_keeps_each_columns_first_peak_and_last() {
        // One column per millisecond.
        let s = Scale { t0: 0, t1: COLUMNS as i64 * 1000, ymax: 1 << 30, top: 0.0 };
        let point = |t: i64, v: i64| Point { t_unix_us: t, cats: [v, 0, 0, 0, 0, 0], others: vec![v % 7] };
        // No more than three per column: drawn as they are.
        let few: Vec<Point> = (0..3 * COLUMNS as i64).map(|k| point(k * 333, k)).collect();
        assert!(per_column(&few, &s) == few);
        // 100 points per column: its first, its highest (the one at 37) and its last.
        let v = |k: i64| if k % 100 == 37 { 1000 + k } else { k % 100 };
        let many: Vec<Point> = (0..100 * COLUMNS as i64).map(|k| point(k * 10, v(k))).collect();
        let kept = per_column(&many, &s);
        assert_eq!(kept.len(), 3 * COLUMNS);
        for (col, three) in kept.chunks(3).enumerate() {
            let c = col as i64 * 100;
            let want = [point(c * 10, 0), point((c + 37) * 10, 1037 + c), point((c + 99) * 10, 99)];
            assert!(three == want, "column {col}: {three:?}");
        }
        // Points before and after the window fall in its first and last columns.
        let wide: Vec<Point> = (-10_000..100 * COLUMNS as i64 + 10_000).map(|k| point(k * 10, 1)).collect();
        let kept = per_column(&wide, &s);
        assert_eq!(kept.len(), 2 * COLUMNS);
        assert_eq!((kept[0].t_unix_us, kept[kept.len() - 1].t_unix_us), (-100_000, (100 * COLUMNS as i64 + 9_999) * 10));
    }

    #[test]
    fn nice_max_ends_at_the_limit_of_i64() {
        assert_eq!(nice_max(0), 1 << 20);
        assert_eq!(nice_max(3 << 20), 3 << 20);
        assert_eq!(nice_max(i64::MAX), i64::MAX);
    }
}
