//! What follows the pool (the pack's `after_pool`): its fixed part, smaller when a flag of the
//! run turns off what it stands for (`without`), and the part in proportion to the pool
//! (`per_token`): the pool's token count read from an allocation the engine sizes by it, and
//! how much of what follows the pool shrinks with the pool when the parameter is lowered.
//!
//! SGLang 0.5.23 allocates after its KV buffers, per token of the pool: the token allocator's
//! free list (`TokenToKVPoolAllocator.clear`: `torch.arange(1, size + 1, dtype=torch.int64)`,
//! 8 bytes) and the EagerRunner's input buffers (48 bytes); on a small model that is a tenth of
//! the pool, so a fixed margin cannot stand for it.

use super::queries::matching_queries;
use crate::engines::{self, Sizing};
use crate::groups::Member;
use crate::load::Run;
use culedger_format::glob::{Glob, Plain};

pub use super::command_line::{flag_number, on_command_line};

/// The fixed part of what follows the pool, in bytes, and what it stands for: the pack's, or
/// that of the first `without` whose flag is on a command line of the run.
pub fn fixed(run: &Run, s: &Sizing) -> (i64, String) {
    match s.after_pool.without.iter().find(|w| w.flags.iter().any(|f| on_command_line(run, f))) {
        Some(w) => (w.mib << 20, w.what.clone()),
        None => (s.after_pool.mib << 20, s.after_pool.what.clone()),
    }
}

/// The number of items `c` counts on the run's command line (a process's, or the command
/// `culedger run` recorded).
fn item_count(run: &Run, c: &engines::ItemCount) -> i64 {
    if let Some(n) = super::command_line::list_len(run, &c.list_flag) {
        return n;
    }
    let top = flag_number(run, &c.max_flag).map_or(c.default_max, |n| n as i64);
    count_up_to(c, top)
}

/// The number of items `c` counts up to the largest `top`.
pub fn count_up_to(c: &engines::ItemCount, top: i64) -> i64 {
    let small = c.small.iter().filter(|&&n| n <= top).count() as i64;
    let ranges: i64 = c
        .ranges
        .iter()
        .map(|&[start, end, step]| {
            let end = if end > 0 { end.min(top + 1) } else { top + 1 };
            if end <= start || step <= 0 {
                0
            } else {
                (end - start + step - 1) / step
            }
        })
        .sum();
    small + ranges
}

/// What follows the pool on member `m` as the engine estimated it before the pool, when the
/// pack has such an estimate and the process measured it without applying it (its input's
/// switch is 0 in the report's environment): the first sample plus the second (at least the
/// pack's minimum) for each further item, as vLLM 0.33's profile_cudagraph_memory computes it.
pub fn estimate(run: &Run, s: &Sizing, m: Member) -> Option<i64> {
    estimate_parts(run, s, m).map(|(first, per, n)| first + (n - 1) * per)
}

/// The parts of [`estimate`]: the first sample, the per-item sample and the item count.
pub fn estimate_parts(run: &Run, s: &Sizing, m: Member) -> Option<(i64, i64, i64)> {
    let e = s.after_pool.estimate.as_ref()?;
    let input = s.inputs.get(&e.input)?;
    let switch = input.applied_unless_env_zero.as_ref()?;
    let off = m.report.process.env.get(switch).and_then(|x| x.trim().parse::<i64>().ok()) == Some(0);
    if !off {
        return None;
    }
    measured_parts(run, s, m)
}

/// The engine's estimate as it computes it from its samples, applied or not: what stands
/// for the first item, the per-item sample (at least the pack's minimum) and the item count,
/// so that the estimate is `first + (count - 1) x per`.
/// - V1 model runner (vllm 0.33 vllm/v1/worker/gpu_model_runner.py
///   GPUModelRunner.profile_cudagraph_memory): the samples are the input's own query pairs;
///   first capture + (graphs - 1) x max(second, 1 MiB).
/// - V2 model runner, vLLM 0.33's default (vllm/v1/worker/gpu/cudagraph_utils.py
///   profile_cudagraph_memory and _extrapolate_full_graph_memory): the samples are taken
///   inside `capture_model(profile_only=True)` (the pack's `samples_in`), whose own first and
///   last queries bracket every graph it captured; the estimate is that drop less the samples
///   plus first + (FULL graphs - 1) x max(second, 1 MiB), and `first` here carries the drop
///   less the samples.
pub fn measured_parts(run: &Run, s: &Sizing, m: Member) -> Option<(i64, i64, i64)> {
    let e = s.after_pool.estimate.as_ref()?;
    let input = s.inputs.get(&e.input)?;
    let st = crate::steps::steps(m);
    let q = matching_queries(m, &st, &input.callers);
    let free = |j: usize| st[j].told().and_then(|p| p.free_bytes).unwrap_or(0);
    let inner: Vec<usize> = if e.samples_in.is_empty() {
        Vec::new()
    } else {
        matching_queries(m, &st, &e.samples_in).into_iter().filter(|i| q.contains(i)).collect()
    };
    let (pairs, whole) = if inner.len() >= 2 {
        let outer: Vec<usize> = q.iter().copied().filter(|i| !inner.contains(i)).collect();
        let whole = match (outer.first(), outer.last()) {
            (Some(&a), Some(&b)) if a != b => free(a) - free(b),
            _ => return None,
        };
        (inner, Some(whole))
    } else {
        (q, None)
    };
    let samples: Vec<i64> = pairs.chunks_exact(2).map(|p| free(p[0]) - free(p[1])).collect();
    estimate_from(&samples, whole, item_count(run, &e.count).max(1), e.min_per_item_mib << 20)
}

/// [`measured_parts`]'s arithmetic: from the samples (free before minus free after, in
/// order), the whole capture's drop where the samples were taken inside one (V2), the item
/// count and the per-item minimum.
fn estimate_from(samples: &[i64], whole: Option<i64>, n: i64, per_min: i64) -> Option<(i64, i64, i64)> {
    let first = *samples.first()?;
    match whole {
        // V1 floors each sample at 0.
        None => Some((first.max(0), samples.get(1).copied().unwrap_or(0).max(0).max(per_min), n)),
        Some(whole) => {
            // V2 subtracts the samples as measured (a negative one too) and returns
            // max(estimate, 0); the per-item part is kept whole.
            let per = samples.get(1).copied().unwrap_or(0).max(per_min);
            let lead = (whole - samples.iter().sum::<i64>() + first).max(-(n - 1) * per);
            Some((lead, per, n))
        }
    }
}

#[cfg(test)]
mod estimate_tests {
    use super::estimate_from;
    const MIB: i64 = 1 << 20;

    #[test]
    fn the_v2_runner_estimate_is_vllms() {
        // The real vLLM 0.33 server (V2 runner, TP 2, graphs, 0.97, the estimate off), rank 0's
        // queries in profile_cudagraph_memory: capture_model's first and last, and the two
        // FULL samples inside it (CudaGraphManager.capture); 51 graphs at the default sizes.
        // vLLM logged "CUDA graph pool memory: 3.24 GiB (actual), 2.77 GiB (estimated)".
        let (start, end) = (83_684_753_408_i64, 80_763_420_672_i64);
        let samples = [80_799_072_256 - 80_784_392_192, 80_765_517_824 - 80_767_614_976];
        let (first, per, n) = estimate_from(&samples, Some(start - end), 51, MIB).unwrap();
        let est = first + (n - 1) * per;
        assert_eq!(format!("{:.2}", est as f64 / (1u64 << 30) as f64), "2.77");
        // Read as V1 pairs (the capture's first query as a sample's), it was 3.57 GiB.
        let v1 = estimate_from(&[start - 80_799_072_256, 80_784_392_192 - 80_765_517_824], None, 51, MIB).unwrap();
        assert_eq!(format!("{:.2}", (v1.0 + 50 * v1.1) as f64 / (1u64 << 30) as f64), "3.57");
    }

    #[test]
    fn the_v1_runner_floors_its_samples() {
        assert_eq!(estimate_from(&[10 * MIB, -MIB], None, 3, MIB), Some((10 * MIB, MIB, 3)));
        assert_eq!(estimate_from(&[], None, 3, MIB), None);
    }
}

/// What follows the pool per token, on one rank at the run's value.
#[derive(Debug, Clone, Copy)]
pub struct Growth {
    /// The pool's token count, as the allocation that shows it says.
    pub tokens: i64,
    /// What follows the pool per token times the tokens.
    pub bytes: i64,
    /// `bytes` per byte of the formula's pool: lowering the parameter shrinks it with the pool.
    pub per_pool_byte: f64,
}

/// The growth on a rank (member `m`, whose sizing query was made from `query_function`) whose
/// formula gave a pool of `pool_bytes`, when the pack sizes one for the version its sizing
/// query shows and the run shows the token count.
pub fn growth(s: &Sizing, m: Member, query_function: Option<&String>, pool_bytes: i64) -> Option<Growth> {
    let pt = s.after_pool.per_token.as_ref()?;
    if pool_bytes <= 0 {
        return None;
    }
    let version = |f: &String| pt.sizing_query.iter().any(|q| Glob::new(q, Plain::Whole).is_ok_and(|g| g.matches(f)));
    if !pt.sizing_query.is_empty() && !query_function.is_some_and(version) {
        return None;
    }
    let runs_through =
        |site: Option<i64>, callers: &[String]| engines::frames(m.report, site).iter().any(|f| engines::frame_matches(callers, f));
    let tokens = pt.tokens_from.iter().find_map(|t| {
        let failed = m.dev.failures.iter().filter(|f| runs_through(f.site, &t.callers)).map(|f| f.bytes);
        let made = m.dev.sites.iter().filter(|d| runs_through(Some(d.site), &t.callers)).map(|d| d.peak_bytes);
        let bytes = failed.chain(made).max()?;
        (bytes > 0 && t.bytes_per_token > 0).then(|| bytes / t.bytes_per_token)
    })?;
    let bytes = tokens * pt.bytes;
    Some(Growth { tokens, bytes, per_pool_byte: bytes as f64 / pool_bytes as f64 })
}

/// What the failed run never reached (the margin) and the deficit at the failure. `fixed` is
/// the pack's fixed margin, `still` what was still to come at the failure (the rest of the pool,
/// or the failed request `need` after it), `pool_end_free` the free memory when the pool was
/// done (None: the failure was inside the pool), `free` the free memory at the failure.
pub fn margin_and_deficit(
    fixed: i64,
    growth: Option<Growth>,
    still: i64,
    need: i64,
    pool_end_free: Option<i64>,
    free: i64,
) -> (i64, i64) {
    let margin = match growth {
        // Everything after the pool, the failed request included, is `fixed + growth`: what
        // arrived after the pool and the failed request are parts of it.
        Some(g) => pool_end_free.map_or(fixed + g.bytes, |fp| (fixed + g.bytes - (fp - free) - need).max(0)),
        None => pool_end_free.map_or(fixed, |fp| (fixed - (fp - free)).max(0)),
    };
    (margin, still + margin - free)
}

/// How far below the run's value the parameter must go to cover `deficit`, when each unit
/// moves the pool by `scale` bytes and what follows the pool shrinks with it.
pub fn lowering(deficit: i64, scale: i64, growth: Option<Growth>) -> f64 {
    deficit as f64 / (scale as f64 * (1.0 + growth.map_or(0.0, |g| g.per_pool_byte)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_growth_shrinks_with_the_pool() {
        let g = Growth { tokens: 1000, bytes: 56_000, per_pool_byte: 0.1 };
        // The free list (8 B a token) failed right after the pool: 2 MiB fixed + 56 kB to come,
        // 1 kB free; nothing arrived between the pool and the failure.
        let fixed = 2 << 20;
        let (margin, deficit) = margin_and_deficit(fixed, Some(g), 8_000, 8_000, Some(1_000), 1_000);
        assert_eq!(margin, fixed + 48_000);
        assert_eq!(deficit, fixed + 56_000 - 1_000);
        // Lowering by d frees d x scale and takes d x scale x 0.1 off what follows.
        let d = lowering(deficit, 1 << 30, Some(g));
        let freed = d * (1u64 << 30) as f64;
        assert!((freed * 1.1 - deficit as f64).abs() < 1.0);
        // Without a per-token part the margin is the fixed one less what arrived.
        assert_eq!(margin_and_deficit(fixed, None, 8_000, 8_000, Some(3_000), 1_000), (fixed - 2_000, fixed - 2_000 + 7_000));
    }
}
