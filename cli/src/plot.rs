//! `culedger plot`: an SVG with one panel per host and device, live bytes per category
//! stacked over time, with markers for free-memory queries and failed allocations.
//!
//! Written with the `svg` crate: plain `<text>` elements, no font files needed.

use crate::analysis::{groups, DeviceGroup, Point};
use crate::error::{Fail, Result};
use crate::load::Run;
use crate::model::CATEGORIES;
use crate::units::{fmt_bytes, fmt_ms};
use svg::node::element::{Group, Line, Polygon, Rectangle, Text, Title};
use svg::Document;

const WIDTH: f64 = 960.0;
const PANEL_H: f64 = 280.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 40.0;
/// Tableau 10, one colour per category in schema order.
const COLORS: [&str; 6] = ["#4e79a7", "#f28e2c", "#e15759", "#76b7b2", "#59a14f", "#edc949"];

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
        let h = PANEL_H - TOP - BOTTOM;
        self.top + TOP + h - bytes as f64 / self.ymax.max(1) as f64 * h
    }
}

/// A round axis maximum: 1, 2 or 5 times a power of two of a binary unit.
fn nice_max(v: i64) -> i64 {
    let mut step: i64 = 1 << 20;
    while step * 5 < v {
        step *= 2;
    }
    ((v + step - 1) / step).max(1) * step
}

fn text(x: f64, y: f64, s: impl Into<String>, anchor: &str, size: u32) -> Text {
    Text::new(s.into())
        .set("x", format!("{x:.1}"))
        .set("y", format!("{y:.1}"))
        .set("text-anchor", anchor)
        .set("font-size", size)
        .set("font-family", "sans-serif")
}

fn vline(x: f64, y0: f64, y1: f64, color: &str, dash: &str) -> Line {
    Line::new()
        .set("x1", format!("{x:.1}"))
        .set("x2", format!("{x:.1}"))
        .set("y1", format!("{y0:.1}"))
        .set("y2", format!("{y1:.1}"))
        .set("stroke", color)
        .set("stroke-width", 1.2)
        .set("stroke-dasharray", dash)
}

fn panel(g: &DeviceGroup, i: usize, t0: i64, t1: i64) -> Group {
    let series: Vec<Point> = g.series();
    let peak = series.iter().map(Point::total).max().unwrap_or(0);
    let s = Scale { t0, t1, ymax: nice_max(peak.max(1)), top: i as f64 * PANEL_H };
    let id = format!("panel-{}-gpu-{}", g.host, g.index).replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
    let pids: Vec<String> = g.members.iter().map(|m| m.pid().to_string()).collect();
    let mut grp = Group::new().set("class", "panel").set("id", id);
    grp = grp.add(
        text(
            LEFT,
            s.top + 22.0,
            format!("{} (pids {}) peak {}", g.title(), pids.join(", "), fmt_bytes(peak)),
            "start",
            15,
        )
        .set("class", "panel-title")
        .set("font-weight", "bold"),
    );
    // Legend.
    for (k, c) in CATEGORIES.iter().enumerate() {
        let x = LEFT + 330.0 + k as f64 * 90.0;
        grp = grp
            .add(
                Rectangle::new()
                    .set("x", x)
                    .set("y", s.top + 32.0)
                    .set("width", 10)
                    .set("height", 10)
                    .set("fill", COLORS[k]),
            )
            .add(text(x + 14.0, s.top + 41.0, *c, "start", 11));
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
        grp = grp.add(text(s.x(t), y_bottom + 16.0, fmt_ms(t - t0), "middle", 11));
    }
    // Stacked areas, drawn as step functions (a sample holds until the next one).
    if !series.is_empty() {
        let mut below = vec![0i64; series.len()];
        for (k, color) in COLORS.iter().enumerate() {
            let above: Vec<i64> = series.iter().zip(&below).map(|(p, b)| b + p.cats[k]).collect();
            if above == below {
                continue;
            }
            let mut pts = Vec::new();
            for (j, p) in series.iter().enumerate() {
                let next = series.get(j + 1).map_or(t1, |n| n.t_unix_ms);
                pts.push(format!("{:.1},{:.1}", s.x(p.t_unix_ms), s.y(above[j])));
                pts.push(format!("{:.1},{:.1}", s.x(next), s.y(above[j])));
            }
            for (j, p) in series.iter().enumerate().rev() {
                let next = series.get(j + 1).map_or(t1, |n| n.t_unix_ms);
                pts.push(format!("{:.1},{:.1}", s.x(next), s.y(below[j])));
                pts.push(format!("{:.1},{:.1}", s.x(p.t_unix_ms), s.y(below[j])));
            }
            grp = grp.add(
                Polygon::new()
                    .set("points", pts.join(" "))
                    .set("fill", *color)
                    .set("class", format!("area {}", CATEGORIES[k]))
                    .add(Title::new(CATEGORIES[k])),
            );
            below = above;
        }
    }
    // Markers.
    for (m, p) in g.probes() {
        let x = s.x(m.abs(p.t_ms));
        let free = p.free_bytes.map_or("unknown".into(), fmt_bytes);
        grp = grp.add(
            Group::new()
                .set("class", "probe")
                .add(Title::new(format!("pid {} {} at {}: free {free}", m.pid(), p.api, fmt_ms(p.t_ms))))
                .add(vline(x, y_top, y_bottom, "#3366cc", "4 3")),
        );
    }
    for (m, f) in g.failures() {
        let x = s.x(m.abs(f.t_ms));
        grp = grp.add(
            Group::new()
                .set("class", "failure")
                .add(Title::new(format!(
                    "pid {} {} of {} failed ({})",
                    m.pid(),
                    f.api,
                    fmt_bytes(f.bytes),
                    f.error_name
                )))
                .add(vline(x, y_top, y_bottom, "#d62728", "none"))
                .add(
                    text(x + 3.0, y_top + 12.0, format!("OOM {}", fmt_bytes(f.bytes)), "start", 11)
                        .set("fill", "#d62728"),
                ),
        );
    }
    grp
}

pub fn write_svg(run: &Run, out: &std::path::Path) -> Result<()> {
    let gs = groups(run);
    let t0 = run.procs.iter().map(|r| r.process.start_unix_ms).min().unwrap_or(0);
    let t1 = run.procs.iter().map(|r| r.process.end_unix_ms).max().unwrap_or(t0).max(t0 + 1);
    let height = PANEL_H * gs.len().max(1) as f64;
    let mut doc = Document::new()
        .set("width", WIDTH)
        .set("height", height)
        .set("viewBox", (0, 0, WIDTH, height))
        .add(Rectangle::new().set("width", "100%").set("height", "100%").set("fill", "white"));
    for (i, g) in gs.iter().enumerate() {
        doc = doc.add(panel(g, i, t0, t1));
    }
    svg::save(out, &doc).map_err(|e| Fail::input(format!("{}: cannot write: {e}", out.display())))
}
