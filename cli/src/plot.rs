//! `culedger plot`: an SVG with one panel per host and device: live bytes per category
//! stacked over time, the untracked memory as a band above them up to what the device
//! used at each free-memory query (held until the next query), the device's capacity as a
//! line, and the queries (`Q1`, `Q2`, ...) and failures (`F1`, ...) marked with numbers
//! that a list under the panel explains, in the run's clock (seconds since its first
//! process started) like the report.
//!
//! Written with the `svg` crate: plain `<text>` elements, no font files needed.

use crate::analysis::{groups, DeviceGroup, Point};
use crate::clock::Clock;
use crate::error::{Fail, Result};
use crate::load::Run;
use crate::model::CATEGORIES;
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
const UNTRACKED: &str = "#bab0ac";
const USED: &str = "#333333";
const CAPACITY: &str = "#7f7f7f";
const QUERY: &str = "#3366cc";
const FAILURE: &str = "#d62728";

/// Linear mapping of time and bytes onto a panel's plot area.
struct Scale {
    t0: i64,
    t1: i64,
    ymax: i64,
    top: f64,
}

impl Scale {
    fn x(&self, t: i64) -> f64 {
        let span = (self.t1 - self.t0).max(1) as f64;
        LEFT + (t - self.t0) as f64 / span * (WIDTH - LEFT - RIGHT)
    }
    fn y(&self, bytes: i64) -> f64 {
        let h = CHART_H - TOP - BOTTOM;
        self.top + TOP + h - bytes.max(0) as f64 / self.ymax.max(1) as f64 * h
    }
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
            text: format!("{} {} {}: told free {free}{used}", c.at(t), m.pid(), p.api),
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

/// The height of a device's panel: the chart and the list of its markers.
fn panel_height(g: &DeviceGroup, c: &Clock) -> f64 {
    CHART_H + markers(g, c).len() as f64 * LIST_LINE + 10.0
}

fn panel(g: &DeviceGroup, top: f64, t0: i64, t1: i64, shown: &[usize]) -> Group {
    let c = &g.clock;
    let series: Vec<Point> = g.series();
    let peak = series.iter().map(Point::total).max().unwrap_or(0);
    let (q_times, q_tracked, q_used) = untracked_steps(g);
    let used_max = q_used.iter().copied().max().unwrap_or(0);
    let capacity = g.total_bytes();
    let s = Scale { t0, t1, ymax: nice_max(peak.max(used_max).max(capacity.unwrap_or(0)).max(1)), top };
    let id = format!("panel-{}-gpu-{}", g.host, g.index).replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
    let pids: Vec<String> = g.members.iter().map(|m| m.pid().to_string()).collect();
    let mut grp = Group::new().set("class", "panel").set("id", id);
    let cap_text = capacity.map(|c| format!(" of {}", fmt_bytes(c))).unwrap_or_default();
    grp = grp.add(
        text(
            LEFT,
            top + 22.0,
            format!("{} (pids {}) tracked peak {}{cap_text}", g.title(), pids.join(", "), fmt_bytes(peak)),
            "start",
            15,
        )
        .set("class", "panel-title")
        .set("font-weight", "bold"),
    );
    // Legend: the categories shown, then the bands and lines.
    let mut legend: Vec<(&str, String)> = shown.iter().map(|&k| (COLORS[k], CATEGORIES[k].to_string())).collect();
    legend.push((UNTRACKED, "untracked".into()));
    legend.push((USED, "device used".into()));
    if capacity.is_some() {
        legend.push((CAPACITY, "capacity".into()));
    }
    let mut x = WIDTH - RIGHT - legend.iter().map(|(_, n)| 22.0 + 6.5 * n.len() as f64).sum::<f64>();
    for (color, name) in legend {
        grp = grp
            .add(
                Rectangle::new().set("x", x).set("y", top + 32.0).set("width", 10).set("height", 10).set("fill", color),
            )
            .add(text(x + 14.0, top + 41.0, name.clone(), "start", 11));
        x += 22.0 + 6.5 * name.len() as f64;
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
    for k in 0..=5 {
        let t = t0 + (t1 - t0) * k / 5;
        grp = grp.add(text(s.x(t), y_bottom + 16.0, c.at(t), "middle", 11));
    }
    grp = grp.add(text(WIDTH - RIGHT, y_bottom + 32.0, "seconds since the run's first process started", "end", 10));
    // Stacked areas, drawn as step functions (a sample holds until the next one).
    if !series.is_empty() {
        let times: Vec<i64> = series.iter().map(|p| p.t_unix_us).collect();
        let mut below = vec![0i64; series.len()];
        for (k, color) in COLORS.iter().enumerate() {
            let above: Vec<i64> = series.iter().zip(&below).map(|(p, b)| b + p.cats[k]).collect();
            if above == below {
                continue;
            }
            grp = grp.add(
                Polygon::new()
                    .set("points", band(&s, &times, t1, &below, &above))
                    .set("fill", *color)
                    .set("class", format!("area {}", CATEGORIES[k]))
                    .add(Title::new(CATEGORIES[k])),
            );
            below = above;
        }
    }
    // Untracked band and device used, from the queries.
    if !q_times.is_empty() {
        let top_band: Vec<i64> = q_tracked.iter().zip(&q_used).map(|(t, u)| (*u).max(*t)).collect();
        grp = grp.add(
            Polygon::new()
                .set("points", band(&s, &q_times, t1, &q_tracked, &top_band))
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
                .add(text(WIDTH - RIGHT - 4.0, s.y(cap) - 4.0, format!("capacity {}", fmt_bytes(cap)), "end", 11)),
        );
    }
    // Markers, numbered; the list under the chart says what each is.
    let marks = markers(g, c);
    for (k, mk) in marks.iter().enumerate() {
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
        grp = grp.add(
            text(LEFT, top + CHART_H + k as f64 * LIST_LINE, format!("{}: {}", mk.tag, mk.text), "start", 11)
                .set("class", "marker-list")
                .set("fill", mk.color),
        );
    }
    grp
}

/// Builds the SVG of a run.
pub fn svg(run: &Run, all_categories: bool) -> Document {
    let gs = groups(run);
    let clock = Clock::of(&run.procs);
    let t0 = clock.t0_us;
    let t1 = run.procs.iter().map(|r| r.process.end_us()).max().unwrap_or(t0).max(t0 + 1);
    let shown: Vec<usize> = crate::analysis::shown_categories(run, all_categories)
        .iter()
        .filter_map(|c| CATEGORIES.iter().position(|x| x == c))
        .collect();
    let height: f64 = gs.iter().map(|g| panel_height(g, &clock)).sum::<f64>().max(CHART_H) + 24.0;
    let mut doc = Document::new()
        .set("width", WIDTH)
        .set("height", height)
        .set("viewBox", (0, 0, WIDTH, height))
        .add(Rectangle::new().set("width", "100%").set("height", "100%").set("fill", "white"))
        .add(text(LEFT, 16.0, clock.header(), "start", 11).set("class", "clock"));
    let mut top = 24.0;
    for g in &gs {
        doc = doc.add(panel(g, top, t0, t1, &shown));
        top += panel_height(g, &clock);
    }
    doc
}

/// Writes the SVG to `out` (`-` for stdout) and returns what to tell the user.
pub fn write_svg(run: &Run, out: &std::path::Path, all_categories: bool) -> Result<String> {
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
    let doc = svg(run, all_categories);
    let n = groups(run).len();
    if out.as_os_str() == "-" {
        crate::print_stdout(&(doc.to_string() + "\n"));
    } else {
        svg::save(out, &doc).map_err(|e| Fail::input(format!("{}: cannot write: {e}", out.display())))?;
    }
    Ok(format!("plot: {} ({}, SVG)", crate::export::shown_path(out), crate::report::count(n, "panel", "panels")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_max_ends_at_the_limit_of_i64() {
        assert_eq!(nice_max(0), 1 << 20);
        assert_eq!(nice_max(3 << 20), 3 << 20);
        assert_eq!(nice_max(i64::MAX), i64::MAX);
    }
}
