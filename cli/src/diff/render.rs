//! `culedger diff` as a document: the headline, then each device pair (alike pairs folded),
//! from the figures [`super::diff`] gathered.

use super::since::SinceSizing;
use super::{short, DevDiff, Diff, ProbeSide, Row};
use crate::clock::fmt_secs;
use crate::doc::{Block, Doc, Table};
use crate::units::{fmt_bytes, fmt_delta, fmt_opt};

fn rows_table(first: &str, rows: &[Row], sa: &str, sb: &str) -> Table {
    let mut t = Table::new(&[first, sa, sb, "delta", "%"], &[1, 2, 3, 4]);
    for r in rows {
        t.row(vec![
            r.name.clone(),
            fmt_bytes(r.a),
            fmt_bytes(r.b),
            fmt_delta(r.delta),
            r.pct.map_or("-".into(), |p| format!("{p:+.1}%")),
        ]);
    }
    t
}

fn side(p: &Option<ProbeSide>) -> String {
    match p {
        Some(p) => {
            format!("{} of {} ({} at {})", fmt_opt(p.free_bytes), fmt_opt(p.total_bytes), p.pid, fmt_secs(p.at_us))
        }
        None => "-".into(),
    }
}

/// What makes two device pairs alike for folding: present on the same sides, the same
/// categories held on either side, failures on the same sides, a pool sized from a query on
/// both or neither.
fn fold_key(d: &DevDiff) -> (Option<String>, Vec<String>, bool, bool, bool) {
    (
        d.only_in.clone(),
        d.categories.iter().filter(|r| r.a != 0 || r.b != 0).map(|r| r.name.clone()).collect(),
        !d.failures_a.is_empty(),
        !d.failures_b.is_empty(),
        d.since_sizing.is_some(),
    )
}

/// Device pairs grouped into classes of alike pairs, each in device order.
fn fold_classes(devices: &[DevDiff]) -> Vec<Vec<usize>> {
    crate::report::classes_by(devices, fold_key)
}

/// The pairs folded under `first`: one row each with the figures that tell them apart.
fn folded(doc: &mut Doc, first: &DevDiff, others: &[&DevDiff], sa: &str, sb: &str) {
    let names: Vec<&str> = others.iter().map(|o| o.device.as_str()).collect();
    doc.push(Block::Heading(format!(
        "{} (folded: alike {}, same categories and failures)",
        names.join(", "),
        first.device
    )));
    let tracked = format!("tracked {sa}");
    let mut t = Table::new(
        &["GPU", &tracked, sb, "delta", "untracked delta", "driver costs delta", "failed"],
        &[1, 2, 3, 4, 5],
    );
    let total = |d: &DevDiff, name: &str| d.totals.iter().find(|r| r.name == name).cloned();
    for o in others {
        let live = total(o, "tracked live").unwrap_or_else(|| Row::new("", 0, 0));
        let delta = |name: &str| total(o, name).map_or("-".into(), |r| fmt_delta(r.delta));
        let failed = match (o.failures_a.len(), o.failures_b.len()) {
            (0, 0) => "-".to_string(),
            (a, 0) => format!("{a} in {sa}"),
            (0, b) => format!("{b} in {sb}"),
            (a, b) => format!("{a} in {sa}, {b} in {sb}"),
        };
        t.row(vec![
            o.device.clone(),
            fmt_bytes(live.a),
            fmt_bytes(live.b),
            fmt_delta(live.delta),
            delta("untracked (last query)"),
            delta("hidden driver costs"),
            failed,
        ]);
    }
    doc.table(t);
}

/// The diff as a document; `fold`: `Some` as asked (`--fold`, `--no-fold`), `None` to fold
/// alike device pairs when there are more than [`crate::report::FOLD_ABOVE`].
pub fn document(d: &Diff, fold: Option<bool>) -> Doc {
    let (sa, sb) = (short(&d.a), short(&d.b));
    let mut doc = Doc::default();
    doc.push(Block::Title(d.headline.clone()));
    if let Some(w) = &d.what_to_change {
        doc.para(format!("What to change: {w}"));
    }
    if let Some(m) = &d.what_to_change_margin {
        doc.para(m.clone());
    }
    doc.para(format!("culedger diff: A = {}, B = {}", d.a, d.b));
    doc.para(format!(
        "Times are seconds since each run's first process started (A: {}, B: {}).",
        crate::clock::fmt_date_time(d.a_t0_unix_us),
        crate::clock::fmt_date_time(d.b_t0_unix_us)
    ));
    let classes = if fold.unwrap_or(d.devices.len() > crate::report::FOLD_ABOVE) {
        fold_classes(&d.devices)
    } else {
        (0..d.devices.len()).map(|i| vec![i]).collect()
    };
    for class in classes {
        let dev = &d.devices[class[0]];
        device_pair(&mut doc, d, dev, &sa, &sb);
        if class.len() > 1 {
            let others: Vec<&DevDiff> = class[1..].iter().map(|&i| &d.devices[i]).collect();
            folded(&mut doc, dev, &others, &sa, &sb);
        }
    }
    doc
}

/// One device pair in full.
fn device_pair(doc: &mut Doc, d: &Diff, dev: &DevDiff, sa: &str, sb: &str) {
    let (sa, sb) = (sa.to_string(), sb.to_string());
    {
        doc.push(Block::Heading(match dev.only_in.as_deref() {
            Some("a") => format!("{} (only in {sa})", dev.device),
            Some(_) => format!("{} (only in {sb})", dev.device),
            None => dev.device.clone(),
        }));
        let shown: Vec<Row> = dev.categories.iter().filter(|r| d.categories_shown.contains(&r.name)).cloned().collect();
        doc.table(rows_table("category", &shown, &sa, &sb));
        doc.table(rows_table("", &dev.totals, &sa, &sb));
        doc.push(Block::Sub("What each side was told".into()));
        let mut t = Table::new(&["query", &sa, &sb, "free delta"], &[3]);
        for p in &dev.probes {
            let category = p.b.as_ref().or(p.a.as_ref()).and_then(|s| s.before_category.clone());
            let name = match (p.which.as_str(), category) {
                ("sizing", Some(c)) => format!("before the largest allocation ({c})"),
                ("sizing", None) => "before the largest allocation".into(),
                (w, _) => format!("{w} query"),
            };
            t.row(vec![name, side(&p.a), side(&p.b), p.free_delta.map_or("-".into(), fmt_delta)]);
        }
        doc.table(t);
        for (fails, name) in [(&dev.failures_a, &sa), (&dev.failures_b, &sb)] {
            for f in fails {
                doc.push(Block::Alert(format!("failed in {name}: {f}")));
            }
        }
        if let Some(s) = &dev.since_sizing {
            since_sizing_table(doc, s, &sa, &sb);
        }
        if !dev.driver_costs.is_empty() {
            doc.push(Block::Sub("Hidden driver costs that changed".into()));
            doc.table(rows_table("api", &dev.driver_costs, &sa, &sb));
        }
        sites_section(doc, &dev.sites, &sa, &sb);
    }
}

/// The pools reconciled from their sizing queries, side by side (`culedger explain`).
fn since_sizing_table(doc: &mut Doc, s: &SinceSizing, sa: &str, sb: &str) {
    doc.push(Block::Sub("From the sizing query to the pool (or its failure)".into()));
    let side = |p: &Option<String>, f: &Option<String>| match (p, f) {
        (Some(p), Some(f)) => format!("{p}: {f} failed"),
        (Some(p), None) => format!("{p}: its pool fit"),
        (None, _) => "no pool sized from a query".into(),
    };
    doc.para(format!("{sa} {}; {sb} {}.", side(&s.a_process, &s.a_failed), side(&s.b_process, &s.b_failed)));
    let mut t = Table::new(&["", sa, sb, "delta"], &[1, 2, 3]);
    for r in &s.rows {
        t.row(vec![r.name.clone(), fmt_opt(r.a), fmt_opt(r.b), r.delta.map_or("-".into(), fmt_delta)]);
    }
    doc.table(t);
}

/// The diff's "Call sites that grew" section of one device.
fn sites_section(doc: &mut Doc, rows: &[Row], sa: &str, sb: &str) {
    if rows.is_empty() {
        return;
    }
    doc.push(Block::Sub("Call sites that grew".into()));
    doc.table(rows_table("caller", rows, sa, sb));
}
