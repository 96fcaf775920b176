//! `culedger whatif PATH --set NAME=VALUE...`: the recorded start replayed through the
//! engine's sizing formula (the rule packs' `sizing`, `explain::engines`) with other values
//! of its parameter. Per rank: the pool it would get, what arrived after its sizing query in
//! the recorded run, the free memory left, and whether it fits: the pool changes by the
//! formula, everything else is taken as the run recorded it, and for a rank whose start
//! failed the margin of `explain`'s recommendation is kept for what the run never reached.
//! Exit status 0 when every rank fits, 1 when one does not, 2 on bad input.

use crate::doc::{Block, Doc, Table};
use crate::error::{Fail, Result};
use crate::explain::{advice, engines};
use crate::run_analysis::Analysis;
use crate::units::fmt_bytes;
use serde::Serialize;

/// The schema id of `culedger whatif --format json`.
pub const WHATIF_SCHEMA: &str = "culedger-whatif/1";

#[derive(Debug, Serialize)]
pub struct RankResult {
    pub pid: i64,
    pub process: String,
    pub host: String,
    pub device: i64,
    pub pool_bytes: i64,
    pub recorded_pool_bytes: i64,
    pub arrivals_bytes: i64,
    /// Free memory left at the point the recorded run reached, minus what was still needed
    /// there and the margin (negative: it does not fit).
    pub left_bytes: i64,
    pub margin_bytes: i64,
    pub fits: bool,
    /// The engine's own check that would refuse the start, if one does.
    pub refused: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct WhatIf {
    pub schema: &'static str,
    pub label: String,
    pub engine: String,
    pub function: String,
    pub formula: String,
    pub parameter: String,
    pub recorded_value: f64,
    pub value: f64,
    pub ranks: Vec<RankResult>,
    pub fits: bool,
    pub exit_code: i32,
}

fn known() -> String {
    engines::all()
        .iter()
        .map(|(p, s)| format!("{p} ({}: {} {})", s.engine, s.parameter.name, s.parameter.flag))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The parameter `name` names for the engine (`mem_fraction_static`, `--mem-fraction-static`,
/// `mem-fraction-static`).
fn names_parameter(name: &str, s: &engines::Sizing) -> bool {
    let bare = name.trim_start_matches('-').replace('-', "_");
    bare == s.parameter.name || bare == s.parameter.flag.trim_start_matches('-').replace('-', "_")
}

pub fn whatif(a: &Analysis, sets: &[String], engine: Option<&str>) -> Result<WhatIf> {
    let (run, gs) = (a.run, a.groups());
    let (pack, s) = match engine {
        Some(e) => engines::by_name(e)
            .ok_or_else(|| Fail::input(format!("whatif: unknown engine \"{e}\"; known: {}", known())))?,
        None => engines::recognize(&run.procs.iter().collect::<Vec<_>>()).ok_or_else(|| {
            Fail::input(format!(
                "whatif: the reports show no engine with a sizing formula (their call sites run through none of \
                 the engines' packages); name one with --engine; known: {}",
                known()
            ))
        })?,
    };
    if sets.is_empty() {
        return Err(Fail::input(format!("whatif: name a value with --set {}=VALUE", s.parameter.name)));
    }
    let mut value = None;
    for set in sets {
        let (name, v) =
            set.split_once('=').ok_or_else(|| Fail::input(format!("whatif: --set {set}: expected NAME=VALUE")))?;
        if !names_parameter(name, &s) {
            return Err(Fail::input(format!(
                "whatif: {} has no parameter \"{name}\" in its sizing formula; it knows {} ({}); known engines: {}",
                s.engine,
                s.parameter.name,
                s.parameter.flag,
                known()
            )));
        }
        let v: f64 = v
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite())
            .ok_or_else(|| Fail::input(format!("whatif: --set {set}: \"{v}\" is not a number")))?;
        if v < s.parameter.min || v > s.parameter.max {
            return Err(Fail::input(format!(
                "whatif: {} = {v} is outside {}..{}",
                s.parameter.name, s.parameter.min, s.parameter.max
            )));
        }
        value = Some(v);
    }
    let value = value.expect("a value");
    let ev = advice::evaluate(run, gs, &pack, &s).ok_or_else(|| {
        Fail::input(format!(
            "whatif: no rank of this run made the queries {}'s formula reads ({}: {})",
            s.engine,
            s.function,
            s.inputs.iter().map(|(k, i)| format!("{k} from {}", i.callers.join("/"))).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let mut ranks = Vec::new();
    for o in advice::outlook(gs, &ev) {
        let Some(r) = ev.ranks.iter().find(|r| r.pid == o.pid && r.device == o.device) else { continue };
        let pool0 = r.pool_bytes;
        let pool = ev.pool_at(r, value);
        let left = o.free_end_bytes + (pool0 - pool) - o.still_bytes - o.margin_bytes;
        let refused = ev.refusals(r, value).into_iter().next().map(|x| x.0);
        ranks.push(RankResult {
            pid: o.pid,
            process: o.process,
            host: o.host,
            device: o.device,
            pool_bytes: pool,
            recorded_pool_bytes: pool0,
            arrivals_bytes: o.arrivals_bytes,
            left_bytes: left,
            margin_bytes: o.margin_bytes,
            fits: left >= 0 && refused.is_none(),
            refused,
        });
    }
    let fits = ranks.iter().all(|r| r.fits);
    Ok(WhatIf {
        schema: WHATIF_SCHEMA,
        label: run.label.clone(),
        engine: s.engine.clone(),
        function: s.function.clone(),
        formula: s.formula.clone(),
        parameter: s.parameter.name.clone(),
        recorded_value: ev.value,
        value,
        ranks,
        fits,
        exit_code: i32::from(!fits),
    })
}

pub fn document(w: &WhatIf) -> Doc {
    let mut d = Doc::default();
    d.push(Block::Title(format!("culedger whatif: {} with {} = {}", w.label, w.parameter, w.value)));
    let bad = w.ranks.iter().filter(|r| !r.fits).count();
    d.push(Block::Verdict {
        text: if bad == 0 {
            format!("every rank fits at {} = {} (the run had {})", w.parameter, w.value, w.recorded_value)
        } else {
            format!("{bad} of {} ranks do not fit at {} = {}", w.ranks.len(), w.parameter, w.value)
        },
        bad: bad > 0,
    });
    d.para(format!(
        "{} sizes its pool in {}: {}. The pool changes by the formula; what arrived after the sizing query is \
         taken as the run recorded it; a rank whose start failed keeps a margin for what it never reached.",
        w.engine, w.function, w.formula
    ));
    let mut t = Table::new(
        &["process", "GPU", "pool", "recorded pool", "arrived after", "margin", "left", "fits"],
        &[2, 3, 4, 5, 6],
    );
    for r in &w.ranks {
        t.row(vec![
            r.process.clone(),
            r.device.to_string(),
            fmt_bytes(r.pool_bytes),
            fmt_bytes(r.recorded_pool_bytes),
            fmt_bytes(r.arrivals_bytes),
            fmt_bytes(r.margin_bytes),
            crate::units::fmt_delta(r.left_bytes),
            match (&r.refused, r.fits) {
                (Some(m), _) => format!("no: refused (\"{m}\")"),
                (None, true) => "yes".into(),
                (None, false) => "no".into(),
            },
        ]);
    }
    d.table(t.abbreviate(&[0]));
    d
}
