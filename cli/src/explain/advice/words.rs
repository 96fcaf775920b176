//! The recommendation in words: "What to change", most useful first, written from the typed
//! recommendation (`culedger_analysis::advice::Advised`), and `culedger-explain/1`'s `what_to_change` (`Advice`):
//! the numbers as computed, with the words beside them.

use culedger_analysis::advice::{Advised, Arrived, Choice, Direction, Formula, Lever, Margin, PoolBytesSet, Sentence, Why};
use super::sizing_words::{fraction, gib, value_source, RankWords, ReserveWords};
use culedger_analysis::sizing::{draft, Evaluation};
use crate::words::join_and;
use culedger_analysis::explanation::{AltAdvice, Advice};

/// A part of what arrived (or of what a lever took) in words: `peer access`, `other ranks'
/// contexts`, `weights allocations`, ...
pub fn arrived(a: &Arrived) -> String {
    match a {
        Arrived::Cost(c) => crate::words::api_class(c),
        Arrived::OtherRanks => "other ranks' contexts".to_string(),
        Arrived::Allocations(category) => format!("{category} allocations"),
        Arrived::Unexplained => "memory no report explains".to_string(),
        Arrived::FailedRequest => "the failed request".to_string(),
        Arrived::EstimateRest => "the rest of vLLM's estimate of them".to_string(),
    }
}

/// What the margin stands for, in words.
fn margin_what(m: &Margin) -> String {
    match m {
        Margin::Rules(what) => what.clone(),
        Margin::Measured(x) => format!(
            "what follows the pool, as the run that started measured it ({}, {} on {})",
            x.run,
            x.rank.rank.process,
            x.rank.gpu_words()
        ),
        Margin::Estimate { what, bytes } => format!("{what} ({} GiB in all, the failed request included)", gib(*bytes)),
        Margin::None => String::new(),
    }
}

/// The recommendation `a` for the run `ev` evaluates, in words.
pub fn advice(a: &Advised, ev: &Evaluation) -> Advice {
    let s = &ev.sizing;
    let r = &ev.ranks[a.rank];
    let (reserve_words, lines) = match &a.why {
        Why::Formula(f) => (ev.reserve(r, a.value).0, formula_lines(a, f, ev)),
        Why::PoolBytesSet(p) => (String::new(), pool_bytes_lines(a, p, ev)),
    };
    Advice {
        engine: s.engine.clone(),
        parameter: s.parameter.name.clone(),
        flag: s.parameter.flag.clone(),
        value: a.value,
        value_source: value_source(ev),
        direction: a.direction.as_str(),
        recommended: a.recommended,
        bound: a.bound,
        interval: a.interval,
        pool_before_bytes: a.pool_before_bytes,
        pool_after_bytes: a.pool_after_bytes,
        reserve_bytes: a.reserve_bytes,
        reserve_words,
        arrivals: a.arrivals.iter().map(|(w, b)| (arrived(w), *b)).collect(),
        arrivals_bytes: a.arrivals_bytes,
        margin_bytes: a.margin_bytes,
        margin_what: margin_what(&a.margin),
        alternatives: a.levers.iter().map(alt_advice).collect(),
        choices: a.choices.clone(),
        deciding: format!("{} on {}", r.rank.process, r.gpu_words()),
        lines,
    }
}

fn alt_advice(l: &Lever) -> AltAdvice {
    AltAdvice { flag: l.flag.clone(), what: l.what.clone(), bytes: l.bytes, apis: l.parts.iter().map(arrived).collect() }
}

/// The lines of a run that set the pool's bytes itself: the levers that remove the failed
/// request, the flag's own bound, and where the flag was set.
fn pool_bytes_lines(a: &Advised, p: &PoolBytesSet, ev: &Evaluation) -> Vec<String> {
    let s = &ev.sizing;
    let Some(pb) = s.pool_bytes_flag.as_ref() else { return Vec::new() };
    let set = p.set;
    let mut all: Vec<String> = a
        .choices
        .iter()
        .zip(&p.whats)
        .map(|(c, what)| {
            format!(
                "Or disable {} ({}): the pool keeps {} GiB per rank as set; the failed request ({} GiB) was theirs",
                what,
                c.flag,
                gib(set),
                gib(c.removes_bytes)
            )
        })
        .collect();
    // The flag's value is bounded, not recommended: what the failed step still needed after
    // the failed request (the rest of a graph capture, say) is not in the reports.
    all.push(format!(
        "Or lower {} from {set} to below {}: the pool must shrink by more than the {} GiB the failed request \
         ({} GiB{}) was short by, and what the step still needed after it is not in the reports, so no value is \
         claimed to start; {} does not size the KV cache while {} is set ({} skips memory_profiling in {}), it \
         changes only the start-up check (\"{}\")",
        pb.flag,
        p.to,
        gib(p.short),
        gib(p.failed_bytes),
        p.failed_category.as_deref().map(|c| format!(", {c}")).unwrap_or_default(),
        s.parameter.flag,
        pb.flag,
        s.engine,
        s.function,
        s.refusals.first().map_or("", |x| x.message.as_str())
    ));
    if let Some(first) = all.first_mut() {
        if let Some(rest) = first.strip_prefix("Or disable") {
            *first = format!("Disable{rest}");
        }
    }
    all.push(format!("The run set {} {set}: {}", pb.flag, pb.source));
    all
}

/// "What to change" of a recommendation from the formula, most useful first: the choices
/// (the parameter's line among them), the reserve and what arrived after the sizing query,
/// then what bounds the values (the length check, the levers not enough alone, weights still
/// loading, the margin, what grows with the pool's tokens).
fn formula_lines(a: &Advised, d: &Formula, ev: &Evaluation) -> Vec<String> {
    let s = &ev.sizing;
    let r = &ev.ranks[a.rank];
    let p0 = a.value;
    // The value as the run gave it (0.995 stays 0.995); recommended values are hundredths.
    let p0s = fraction(p0);
    let flag = &s.parameter.flag;
    let (pool_before, pool_after) = (a.pool_before_bytes, a.pool_after_bytes);
    let (direction, recommended, interval, choices, alts) = (a.direction, a.recommended, a.interval, &a.choices, &a.levers);
    let margin = a.margin_bytes;
    let margin_what = margin_what(&a.margin);
    let mut lines = Vec::new();
    // The tokens a pool holds, where the model's config gives the bytes a token takes.
    let tok = |pool: i64| ev.cell.as_ref().map_or(String::new(), |c| format!(" ({} tokens)", c.tokens(pool)));
    let param_line = match (direction, recommended) {
        (Direction::Lower, Some(v)) => format!(
            "Lower {flag} from {p0s} to at most {v:.2}{}{}",
            if pool_before > 0 {
                format!(
                    ": the pool shrinks from {} to {} GiB per rank{}",
                    gib(pool_before),
                    gib(pool_after.unwrap_or(0)),
                    tok(pool_after.unwrap_or(0))
                )
            } else {
                ":".to_string()
            },
            match &d.refusal {
                Some(msg) => format!(
                    "{} {} no longer refuses to start (\"{msg}\")",
                    if pool_before > 0 { " and" } else { "" },
                    s.engine
                ),
                None => format!(
                    ", so that the {} GiB that arrived after the sizing query{} fit and {} GiB stay for what the \
                     failed run never reached",
                    gib(a.arrivals_bytes),
                    match &d.failed_after_pool {
                        Some((b, c)) => format!(
                            " and the failed request ({} GiB{})",
                            gib(*b),
                            c.as_deref().map(|c| format!(", {c}")).unwrap_or_default()
                        ),
                        None => String::new(),
                    },
                    gib(margin)
                ),
            }
        ),
        (Direction::Raise, Some(v)) => format!(
            "Raise {flag} from {p0s} to at least {v:.2}: the formula gave a pool of {} GiB, and {} refused \
             (\"{}\"); at {v:.2} the pool gets {} GiB{}, and each 0.01 more adds {} GiB",
            gib(pool_before),
            s.engine,
            d.refusal.clone().unwrap_or_default(),
            gib(pool_after.unwrap_or(0)),
            tok(pool_after.unwrap_or(0)),
            gib(ev.scale_bytes / 100)
        ),
        _ => {
            let (lo_at, hi_at) = (interval.at_least.unwrap_or(s.parameter.min), interval.at_most.unwrap_or(s.parameter.max));
            let low = d.at_least_refusal.clone().unwrap_or_default();
            match (&d.len_message, &ev.model_len) {
                // The pool holds no request of the longest length below one bound, and the
                // engine's start-up check refuses above the other.
                (Some(m), Some(c)) if *m == low && d.at_most_is_check => format!(
                    "No {flag} starts: above {hi_at:.3} {} refuses to start (\"{}\"), and at {lo_at:.3} or below the \
                     pool holds no request of {} tokens (\"{low}\"); shorten the longest request instead",
                    s.engine,
                    d.at_most_refusal.clone().unwrap_or_default(),
                    c.max_len
                ),
                _ => format!(
                "No {flag} starts: above {hi_at:.3} what comes after the pool does not fit, and at {lo_at:.3} or \
                 below the pool is empty (\"{}\"); shrink what comes after the pool instead{}",
                low,
                if choices.is_empty() { ": a larger tensor-parallel size or a smaller model" } else { "" }
            ),
            }
        }
    };
    let with_value = |c: &Choice| {
        if (c.value - p0).abs() < 1e-9 {
            String::new()
        } else {
            format!(" with {flag} at most {:.2}", c.value)
        }
    };
    let scale_line = |c: &Choice, n: i64, n0: i64| {
        let a = s.alternatives.iter().find(|a| a.flag == c.flag).and_then(|a| a.scales.as_ref());
        let took = alts.iter().find(|x| x.flag == c.flag).map_or(0, |x| x.bytes);
        format!(
            "Or lower {} from {n0} to at most {n}{}: the pool keeps {} GiB per rank{}; what the CUDA graphs took \
             after the sizing query ({} GiB, the failed request included) scales with {}, about {} GiB at {n}; \
             the cost: {}",
            c.flag,
            with_value(c),
            gib(c.pool_bytes),
            tok(c.pool_bytes),
            gib(took),
            a.map_or("it", |x| x.what.as_str()),
            gib(took - c.removes_bytes),
            a.map_or("", |x| x.cost.as_str()),
        )
    };
    let alt_line = |c: &Choice| {
        let a = alts.iter().find(|a| a.flag == c.flag);
        let (what, apis, took) = match a {
            Some(a) => (a.what.clone(), join_and(&a.parts.iter().map(arrived).collect::<Vec<_>>()), a.bytes),
            None => (c.flag.clone(), String::new(), c.removes_bytes),
        };
        // A start refused by a check before its pool: the lever gives back what the check read.
        if let (Some(msg), false) = (&d.refusal, r.complete) {
            return format!(
                "Or disable {what} ({}){}: {} no longer refuses to start (\"{msg}\"); {what} took {} GiB before its \
                 check ({apis})",
                c.flag,
                if (c.value - p0).abs() < 1e-9 { format!(" at {p0s}") } else { format!(" with {flag} at most {:.2}", c.value) },
                s.engine,
                gib(took),
            );
        }
        format!(
            "Or disable {what} ({}){}: the pool keeps {} GiB per rank{}; {what} took {} GiB{} ({apis})",
            c.flag,
            with_value(c),
            gib(c.pool_bytes),
            tok(c.pool_bytes),
            gib(took),
            if d.failure { " after the sizing query" } else { "" },
        )
    };
    let mut param_said = false;
    for c in choices {
        if c.sentence == Sentence::Parameter {
            lines.push(param_line.clone());
            param_said = true;
            continue;
        }
        let (n, n0) = (c.lever_value.unwrap_or(0), c.lever_was.unwrap_or(0));
        let l = match c.sentence {
            Sentence::TensorParallel => format!(
                "Or raise the tensor-parallel size from {n0} to {n} (--tp {n}, on {n} GPUs) with {flag} at most \
                 {:.2}: each rank holds about {n0}/{n} of the weights, {} GiB instead of {} GiB, and the pool gets \
                 about {} GiB per rank{}; the cost: {} more GPUs",
                c.value,
                gib(d.weights_bytes * n0 / n),
                gib(d.weights_bytes),
                gib(c.pool_bytes),
                tok(c.pool_bytes),
                n - n0
            ),
            Sentence::SmallerModel => format!(
                "Or a smaller model: weights of at most {} GiB per rank (they took {} GiB) with {flag} at most \
                 {:.2}, and the pool gets about {} GiB per rank{}, what the run sized at {p0s}; the cost: a \
                 smaller or more quantized model",
                gib(n),
                gib(n0),
                c.value,
                gib(c.pool_bytes),
                tok(c.pool_bytes)
            ),
            Sentence::ModelLen => format!(
                "Or lower {} from {n0}{} to at most {n}{}: the pool keeps {} GiB per rank{}, and {n} tokens is {}'s \
                 own estimate of the longest request it holds (_estimate_max_model_len_from_groups); the cost: {}",
                c.flag,
                if ev.model_len.as_ref().is_some_and(|m| m.from_flag) { "" } else { " (the model's config.json)" },
                with_value(c),
                gib(c.pool_bytes),
                tok(c.pool_bytes),
                s.engine,
                s.model_len.as_ref().map_or("", |m| m.cost.as_str())
            ),
            Sentence::Scale => scale_line(c, n, n0),
            Sentence::PoolBytes => format!(
                "Or set the KV cache's size instead ({} {n}{}): the pool keeps {} GiB per rank{}, what the \
                 failures leave room for; the cost: {}",
                c.flag,
                with_value(c),
                gib(c.pool_bytes),
                tok(c.pool_bytes),
                s.pool_bytes_flag.as_ref().map_or("", |x| x.cost.as_str())
            ),
            Sentence::Disable | Sentence::Parameter => alt_line(c),
        };
        lines.push(match (l.strip_prefix("Or disable"), l.strip_prefix("Or lower")) {
            (Some(rest), _) if lines.is_empty() => format!("Disable{rest}"),
            (_, Some(rest)) if lines.is_empty() => format!("Lower{rest}"),
            _ => l,
        });
    }
    if !param_said {
        lines.insert(0, param_line);
    }
    let (reserve_words, reserve_bytes) = (ev.reserve(r, p0).0, a.reserve_bytes);
    if d.refusal.is_none() || !a.arrivals.is_empty() {
        let parts: Vec<String> = a.arrivals.iter().map(|(w, b)| format!("{} {}", arrived(w), gib(*b))).collect();
        let query = match &d.query_inside {
            Some(f) => format!("{} in {f}", d.query),
            None => d.query.clone(),
        };
        lines.push(format!(
            "The reserve was {reserve_words} = {} GiB ({} on {}); after the sizing query ({}) {} GiB arrived{}",
            gib(reserve_bytes),
            r.rank.process,
            r.gpu_words(),
            query,
            gib(a.arrivals_bytes),
            if parts.is_empty() { String::new() } else { format!(": {}", parts.join(", ")) }
        ));
    } else {
        lines.push(format!(
            "The reserve was {reserve_words} = {} GiB ({} on {})",
            gib(reserve_bytes),
            r.rank.process,
            r.gpu_words()
        ));
    }
    // The length check the run broke, sized: what one request of the longest length takes.
    if let (Some(c), Some(ml), true) = (&ev.model_len, s.model_len.as_ref(), d.len_broken) {
        lines.push(format!(
            "{} refused because its KV cache, less the one block it holds back, cannot hold one request of {} \
             tokens ({}): that takes {} GiB per rank, {} B a token ({} layers x {} KV heads a rank x head size {} \
             x 2 (K and V) x {} B, from {}/config.json), and at {p0s} the pool was {} GiB{} (vllm 0.33 \
             v1/core/kv_cache_planning.py get_kv_cache_configs -> _check_enough_kv_cache_memory)",
            s.engine,
            c.max_len,
            if c.from_flag { format!("{} {}", ml.flag, c.max_len) } else { "the model's config.json".to_string() },
            gib(c.needed(c.max_len)),
            c.cell.token_bytes(),
            c.cell.layers,
            c.cell.kv_heads,
            c.cell.head_size,
            c.cell.dtype_bytes,
            c.cell.model.trim_end_matches('/'),
            gib(pool_before),
            tok(pool_before)
        ));
    }
    // Alternatives that do not make the start fit on their own are still named.
    for a in d.not_enough.iter().map(|&k| &alts[k]) {
        lines.push(format!(
            "Disabling {} ({}) alone is not enough: its {} took {} GiB{}",
            a.what,
            a.flag,
            join_and(&a.parts.iter().map(arrived).collect::<Vec<_>>()),
            gib(a.bytes),
            if d.failure { " after the sizing query" } else { "" }
        ));
    }
    // Weights still loading after the sizing query when the start failed (a draft model of
    // speculative decoding loaded after the target's pool, say): the reports show what that
    // load took until it failed, not how much more it needed, so the value covers only that.
    if let (Some((dr, seen, rest)), Direction::Lower) = (&d.draft, direction) {
        lines.push(format!(
            "The failed request ({} GiB) was part of the draft model's weights, still loading after the sizing query \
             (SGLang before PR 28855 loads them in EAGLEWorker.__init__, after the target's pool): {} {} holds {} GiB \
             of weights, {} GiB a rank at --tp {}; the value counts them whole, the {} GiB the rank had not loaded \
             when it failed included ({} GiB loaded before)",
            gib(d.failed_after_pool.as_ref().map_or(0, |x| x.0)),
            draft::FLAG,
            dr.path,
            gib(dr.total_bytes.unwrap_or(0)),
            gib(dr.per_rank_bytes.unwrap_or(0)),
            dr.tp,
            gib(*rest),
            gib(*seen)
        ));
    } else if let Some((b, Some(c))) = &d.failed_after_pool {
        if c == "weights" && direction == Direction::Lower {
            lines.push(format!(
                "The failed request ({} GiB) was part of weights still loading after the sizing query: the reports \
                 do not show how much more that load needed, so the values above cover only what it took before it \
                 failed; each further 0.01 of {flag} frees {} GiB for the rest of it{}",
                gib(*b),
                gib(ev.scale_bytes / 100),
                match &d.draft_named {
                    Some(dn) => format!(
                        " ({} {} names a draft model whose weight files cannot be read here: their size divided by \
                         --tp is what each rank loads)",
                        draft::FLAG,
                        dn.path
                    ),
                    None if d.speculative => format!(
                        " (with speculative decoding, the draft model's weights: {} names it, and its weight files' size \
                         divided by --tp is what each rank loads)",
                        draft::FLAG
                    ),
                    None => String::new(),
                }
            ));
        }
    }
    if margin > 0 && direction != Direction::Raise && d.refusal.is_none() {
        lines.push(format!(
            "The value leaves a margin of {} GiB for {}, which the failed run never reached, so {}",
            gib(margin),
            margin_what,
            if d.estimate.is_some() {
                format!("it is the engine's own estimate, measured before the pool (rules/{}.json, after_pool.estimate)", ev.pack)
            } else if d.from_rules {
                format!("the reports cannot size it (rules/{}.json, after_pool)", ev.pack)
            } else {
                "its reports cannot size it".to_string()
            }
        ));
    } else if direction == Direction::Lower {
        lines.push(format!("After the pool: {margin_what}"));
    }
    if let (Some(g), Some(pt)) = (d.growth, s.after_pool.per_token.as_ref()) {
        if direction == Direction::Lower && d.refusal.is_none() {
            lines.push(format!(
                "What follows the pool grows with its tokens ({}: {} B a token): {} GiB for the pool's {} tokens \
                 at {p0s}{}; the margin counts it on top of the fixed {} GiB (rules/{}.json, after_pool.per_token)",
                pt.what,
                pt.bytes,
                gib(g.bytes),
                g.tokens,
                pool_after.map_or(String::new(), |pa| format!(
                    ", {} GiB at {:.2}",
                    gib((g.per_pool_byte * pa as f64) as i64),
                    recommended.unwrap_or(p0)
                )),
                gib(d.fixed_margin_bytes),
                ev.pack
            ));
        }
    }
    lines
}
