//! `whatif`'s replay: the recorded start through the engine's sizing formula (the rule
//! packs' `sizing`, [`crate::engines`]) at another value of its parameter, rank by
//! rank, as typed values. The pool changes by the formula, everything else is taken as the
//! run recorded it (`sizing::outlook`), and for a rank whose start failed the margin of
//! `explain`'s recommendation is kept for what the run never reached. The words (the
//! notes' sentences, what the margin stands for) are written by the CLI's `whatif` from
//! [`Note`] and [`NeverReached`].

use super::{RankResult, WhatIf, WHATIF_SCHEMA};
use crate::engines::Sizing;
use crate::groups::{by_id, DeviceGroup};
use crate::load::Run;
use crate::recon::ReconWords;
use crate::sizing::{self, Evaluation, Outlook, RankSizing};

/// What the replay could not see, or how it differs from the formula's.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// The run set the pool in bytes (`flag bytes`, vLLM's `--kv-cache-memory-bytes`): the
    /// engine skips the profiling its formula reads, the pool is those bytes at any value, and
    /// the value changes only the engine's start-up check, which is replayed.
    PoolSetInBytes { flag: String, bytes: i64 },
    /// The recorded run stopped at that start-up check at its own value: what the start does
    /// past it is unseen.
    StoppedAtCheck,
    /// The recorded run failed with the pool set in bytes: it fails at any value.
    FailsAtAnyValue,
    /// The failed request was part of the draft model's weights (`path`, named by
    /// `sizing::draft::FLAG`), counted whole: `per_rank_bytes` a rank.
    DraftCountedWhole { path: String, per_rank_bytes: i64 },
    /// What failed was part of weights still loading after the pool whose load the reports
    /// cannot size: no value can be said to fit.
    UnsizedWeights,
}

/// What the margin stands for: what follows the pool, which a failed run never reached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NeverReached {
    /// The engine's own estimate of it, measured by a rank without applying it (vLLM's
    /// CUDA-graph estimate with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0): the pack's
    /// `after_pool.estimate`.
    Estimate,
    /// The pack's fixed `after_pool` (`sizing::after_pool::fixed`).
    Fixed,
}

/// The replay: `whatif`'s values with its sentence fields (`never_reached`, `notes`) left
/// empty, and the typed values the command words them from.
#[derive(Debug)]
pub struct Replay {
    pub whatif: WhatIf,
    pub never_reached: NeverReached,
    pub notes: Vec<Note>,
}

/// A rank's row with its process's identity from the replay's outlook, nothing else filled.
fn row(o: &Outlook) -> RankResult {
    RankResult {
        rank: o.rank.clone(),
        pool_bytes: 0,
        recorded_pool_bytes: 0,
        arrivals_bytes: 0,
        left_bytes: 0,
        margin_bytes: 0,
        startup_left_bytes: 0,
        fits_at_startup: false,
        fits: false,
        refused: None,
        cannot_tell: false,
    }
}

fn note(notes: &mut Vec<Note>, n: Note) {
    if !notes.contains(&n) {
        notes.push(n);
    }
}

/// The run `run` (its device groups `gs`) replayed through the formula `s`, evaluated on it
/// as `ev`, with the parameter at `value` (`words`: the reconciliation's, which the outlook's
/// reconciliations are made with).
pub fn replay(run: &Run, gs: &[DeviceGroup], s: &Sizing, ev: &Evaluation, value: f64, words: &dyn ReconWords) -> Replay {
    let estimated = ev.ranks.iter().any(|r| {
        by_id(gs, &r.rank.gpu)
            .and_then(|g| g.member_at(r.rank.pid, r.rank.start_us))
            .is_some_and(|m| sizing::after_pool::estimate(run, s, m).is_some())
    });
    let never_reached = match s.after_pool.estimate {
        Some(_) if estimated => NeverReached::Estimate,
        _ => NeverReached::Fixed,
    };
    let finish = |ranks: Vec<RankResult>, notes: Vec<Note>, fits: bool| Replay {
        whatif: WhatIf {
            schema: WHATIF_SCHEMA,
            label: run.label.clone(),
            engine: s.engine.clone(),
            function: s.function.clone(),
            formula: s.formula.clone(),
            parameter: s.parameter.name.clone(),
            recorded_value: ev.value,
            value,
            fits_at_startup: ranks.iter().all(|r| r.fits_at_startup),
            never_reached: String::new(),
            ranks,
            fits,
            exit_code: i32::from(!fits),
            notes: Vec::new(),
        },
        never_reached,
        notes,
    };
    let same = |o: &Outlook| ev.ranks.iter().find(|r: &&RankSizing| r.rank.pid == o.rank.pid && r.rank.gpu == o.rank.gpu);
    let mut notes = Vec::new();
    // The KV cache set in bytes (vLLM's --kv-cache-memory-bytes): the engine skips the
    // profiling the formula reads and the parameter no longer sizes the pool; it is left with
    // the engine's start-up check (Worker.init_device: the free memory must hold total x
    // utilization), which the run's first query replays.
    let pool_flag = s
        .pool_bytes_flag
        .as_ref()
        .and_then(|p| Some((p.flag.clone(), sizing::command_line::flag_number(run, &p.flag)? as i64)));
    if let Some((flag, bytes)) = pool_flag {
        notes.push(Note::PoolSetInBytes { flag, bytes });
        let mut ranks = Vec::new();
        for o in sizing::outlook(run, gs, ev, words) {
            let Some(r) = same(&o) else { continue };
            let g = by_id(gs, &r.rank.gpu);
            let m = g.and_then(|g| g.member_at(r.rank.pid, r.rank.start_us));
            let failed = m.is_some_and(|m| {
                m.report.process.exit_code.is_some_and(|c| c != 0)
                    || m.report.process.signal.is_some()
                    || !m.dev.failures.is_empty()
            });
            let refused = ev.refusals(r, value).into_iter().find(|x| !x.3).map(|x| x.0);
            // Refused by the check at its own value, the run never got past it: what follows at
            // a value the check lets through is unseen.
            let stopped = ev.refusals(r, ev.value).iter().any(|x| !x.3);
            let cannot_tell = stopped && refused.is_none();
            let left = if failed { -1 } else { o.free_end_bytes };
            ranks.push(RankResult {
                pool_bytes: bytes,
                recorded_pool_bytes: bytes,
                arrivals_bytes: 0,
                left_bytes: left,
                margin_bytes: 0,
                startup_left_bytes: left,
                fits_at_startup: !failed && refused.is_none(),
                fits: !failed && refused.is_none(),
                refused,
                cannot_tell,
                ..row(&o)
            });
        }
        if ranks.iter().any(|r| r.cannot_tell) {
            notes.push(Note::StoppedAtCheck);
        } else if ranks.iter().any(|r| r.startup_left_bytes < 0 && r.refused.is_none()) {
            notes.push(Note::FailsAtAnyValue);
        }
        let fits = !ranks.is_empty() && ranks.iter().all(|r| r.fits);
        return finish(ranks, notes, fits);
    }
    let mut ranks = Vec::new();
    for o in sizing::outlook(run, gs, ev, words) {
        if let Some(b) = o.draft_bytes {
            let path = sizing::draft::named(run).map(|d| d.path).unwrap_or_default();
            note(&mut notes, Note::DraftCountedWhole { path, per_rank_bytes: b });
        }
        if o.unsized_weights {
            note(&mut notes, Note::UnsizedWeights);
        }
        let Some(r) = same(&o) else { continue };
        let pool0 = r.pool_bytes;
        let pool = ev.pool_at(r, value);
        // A pool the formula makes negative takes nothing (the engine refuses it); and nothing
        // is left beyond what the sizing query told the rank was free after the weights.
        let taken = pool.max(0);
        let startup_left = (o.free_end_bytes + (pool0 - taken) - o.still_bytes).min(o.told_bytes - taken);
        // What grows with the pool's tokens (after_pool.per_token) grows and shrinks with it.
        let margin = (o.margin_bytes as f64 + o.margin_per_pool_byte * (taken - pool0) as f64).max(0.0) as i64;
        let left = startup_left - margin;
        let refused = ev.refusals(r, value).into_iter().next().map(|x| x.0);
        // Weights whose load the reports cannot size: no value can be said to fit.
        let seen = !o.unsized_weights;
        ranks.push(RankResult {
            pool_bytes: pool,
            recorded_pool_bytes: pool0,
            arrivals_bytes: o.arrivals_bytes,
            left_bytes: left,
            margin_bytes: margin,
            startup_left_bytes: startup_left,
            fits_at_startup: seen && startup_left >= 0 && refused.is_none(),
            fits: seen && left >= 0 && refused.is_none(),
            refused,
            cannot_tell: !seen,
            ..row(&o)
        });
    }
    let fits = ranks.iter().all(|r| r.fits);
    finish(ranks, notes, fits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{fixture, NoWords};

    /// custom-ar (SGLang, --mem-fraction-static 0.97) failed inside its pool: replayed at its
    /// own value it does not fit; at 0.86 every rank passes start-up but rank 0 not what
    /// follows; at 0.84, explain's recommendation (its golden what_to_change), every rank fits.
    #[test]
    fn the_replay_agrees_with_the_run_and_the_recommendation() {
        let run = fixture("custom-ar");
        let gs = crate::groups::groups(&run);
        let ev = crate::sizing::evaluate_run(&run, &gs, &NoWords).expect("SGLang's formula applies");
        let at = |v: f64| replay(&run, &gs, &ev.sizing, &ev, v, &NoWords);

        let own = at(0.97);
        assert!(!own.whatif.fits && own.whatif.exit_code == 1, "{:?}", own.whatif);
        assert_eq!(own.whatif.ranks.len(), 2);
        assert!(own.whatif.ranks.iter().all(|r| r.pool_bytes == r.recorded_pool_bytes));
        assert_eq!((own.never_reached, own.notes.as_slice()), (NeverReached::Fixed, &[][..]));

        let mid = at(0.86);
        assert!(mid.whatif.fits_at_startup && !mid.whatif.fits, "{:?}", mid.whatif);
        assert!(mid.whatif.ranks.iter().any(|r| r.fits_at_startup && !r.fits));

        let rec = at(0.84);
        assert!(rec.whatif.fits && rec.whatif.exit_code == 0, "{:?}", rec.whatif);
        // The pool shrinks by the formula, as explain's recommendation says (12144271687
        // bytes per rank at 0.84 in cli/tests/golden/explain-custom-ar.json, on the deciding rank).
        assert!(rec.whatif.ranks.iter().any(|r| r.pool_bytes == 12_144_271_687), "{:?}", rec.whatif.ranks);
        assert!(rec.whatif.ranks.iter().all(|r| r.pool_bytes < r.recorded_pool_bytes && r.left_bytes >= 0));
    }
}
