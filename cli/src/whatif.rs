//! `culedger whatif PATH --set NAME=VALUE...`: the recorded start replayed through the
//! engine's sizing formula (the rule packs' `sizing`, `culedger_analysis::engines`) with other values
//! of its parameter. Per rank: the pool it would get, what arrived after its sizing query in
//! the recorded run, the free memory left, and whether it fits: the pool changes by the
//! formula, everything else is taken as the run recorded it, and for a rank whose start
//! failed the margin of `explain`'s recommendation is kept for what the run never reached.
//! The replay is the analysis crate's (`culedger_analysis::whatif::replay`, typed values);
//! this reads the flags, says what is wrong with them, and words the notes and the table.
//! Exit status 0 when every rank fits, 1 when one does not, 2 on bad input.

use crate::doc::{Block, Doc, Table};
use crate::error::{Fail, Result};
use crate::explain::advice;
use culedger_analysis::engines;
use crate::run_analysis::Analysis;
use crate::units::fmt_bytes;
pub use culedger_analysis::whatif::WhatIf;
use culedger_analysis::whatif::replay::{replay, NeverReached, Note};

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
    let r = replay(run, gs, &s, &ev, value, &crate::explain::recon::Words);
    let mut w = r.whatif;
    // What the margin stands for, in explain's words: the engine's own estimate of what follows
    // the pool when a rank measured it without applying it, else the pack's fixed after_pool.
    w.never_reached = match (r.never_reached, s.after_pool.estimate.as_ref()) {
        (NeverReached::Estimate, Some(e)) => e.what.clone(),
        _ => advice::after_pool::fixed(run, &s).1,
    };
    for n in &r.notes {
        let n = note_words(n, &s, w.recorded_value);
        if !w.notes.contains(&n) {
            w.notes.push(n);
        }
    }
    Ok(w)
}

/// A note of the replay in words (`recorded`: the run's value of the parameter).
fn note_words(n: &Note, s: &engines::Sizing, recorded: f64) -> String {
    match n {
        Note::PoolSetInBytes { flag, bytes } => format!(
            "The run set {flag} {bytes}: {} skips the profiling its formula reads and the KV cache is {} at any {}; \
             the value changes only the start-up check (\"{}\"), which is replayed; everything else is as the run \
             recorded it ({})",
            s.engine,
            fmt_bytes(*bytes),
            s.parameter.name,
            s.refusals.first().map_or("", |x| x.message.as_str()),
            s.pool_bytes_flag.as_ref().map_or("", |p| p.source.as_str())
        ),
        Note::StoppedAtCheck => {
            format!("The recorded run stopped at that check at {recorded}: what the start does past it is unseen")
        }
        Note::FailsAtAnyValue => "The recorded run failed with this KV cache size: it fails at any value".to_string(),
        Note::DraftCountedWhole { path, per_rank_bytes } => format!(
            "The failed request was part of the draft model's weights ({} {path}): counted whole, {} a rank, as \
             explain counts them",
            advice::draft::FLAG,
            fmt_bytes(*per_rank_bytes)
        ),
        Note::UnsizedWeights => format!(
            "What failed was part of weights still loading after the pool (a speculative-decoding draft model, \
             say): the reports do not show how much more that load needed, so whatif cannot tell whether any \
             value fits ({} names a draft model whose weight files, readable here, let it count them whole)",
            advice::draft::FLAG
        ),
    }
}

pub fn document(w: &WhatIf) -> Doc {
    let mut d = Doc::default();
    d.push(Block::Title(format!("culedger whatif: {} with {} = {}", w.label, w.parameter, w.value)));
    let n = w.ranks.len();
    let short = w.ranks.iter().filter(|r| !r.fits_at_startup).count();
    let uncovered = w.ranks.iter().filter(|r| r.fits_at_startup && !r.fits).count();
    let margin = w.ranks.iter().map(|r| r.margin_bytes).max().unwrap_or(0);
    let at = format!("{} = {}", w.parameter, w.value);
    let unseen = w.ranks.iter().filter(|r| r.cannot_tell).count();
    d.push(Block::Verdict {
        text: if unseen > 0 {
            format!("whatif cannot tell whether {unseen} of {n} ranks fit at {} = {}: see below", w.parameter, w.value)
        } else if short > 0 {
            format!("{short} of {n} ranks do not fit at start-up at {at}")
        } else if uncovered > 0 {
            format!(
                "every rank fits at start-up at {at}, but {uncovered} of {n} ranks leave less than the margin for \
                 what the run never reached"
            )
        } else if margin > 0 {
            format!(
                "every rank fits at start-up at {at} (the run had {}) and leaves the margin for what the run never \
                 reached",
                w.recorded_value
            )
        } else {
            format!("every rank fits at {at} (the run had {})", w.recorded_value)
        },
        bad: short + uncovered + unseen > 0,
    });
    d.para(format!(
        "{} sizes its pool in {}: {}. The pool changes by the formula; what arrived after the sizing query is \
         taken as the run recorded it, and nothing is left beyond what the sizing query found free after the \
         weights.",
        w.engine, w.function, w.formula
    ));
    for n in &w.notes {
        d.para(format!("{n}."));
    }
    if margin > 0 {
        d.para(format!(
            "Margin: {} for {}, which the failed run never reached, so the reports cannot show it; \
             \"start-up left\" is before the margin, \"left\" after it.",
            fmt_bytes(margin),
            w.never_reached
        ));
    }
    let mut t = Table::new(
        &["process", "GPU", "pool", "arrived after", "start-up left", "margin", "left", "fits"],
        &[2, 3, 4, 5, 6],
    );
    for r in &w.ranks {
        t.row(vec![
            r.rank.process.clone(),
            crate::analysis::id_token(r.rank.device, r.rank.mig_index, Some(&r.rank.gpu)),
            if r.pool_bytes > 0 { fmt_bytes(r.pool_bytes) } else { "none".into() },
            fmt_bytes(r.arrivals_bytes),
            crate::units::fmt_delta(r.startup_left_bytes),
            fmt_bytes(r.margin_bytes),
            crate::units::fmt_delta(r.left_bytes),
            match (&r.refused, r.fits_at_startup, r.fits) {
                _ if r.cannot_tell => "cannot tell".into(),
                (Some(m), _, _) => format!("no: refused (\"{m}\")"),
                (None, _, true) => "yes".into(),
                (None, true, false) => "no margin".into(),
                (None, false, false) => "no".into(),
            },
        ]);
    }
    d.table(t.abbreviate(&[0]));
    d
}
