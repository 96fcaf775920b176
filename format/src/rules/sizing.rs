//! An engine's pool-sizing formula, the `sizing` object of the engine rule packs
//! (rules/sglang.json, rules/vllm.json, rules/trtllm.json; each cites the engine's file,
//! function and versions), typed. A formula is a sum of terms over named inputs, some
//! multiplied by the engine's parameter (`--mem-fraction-static`, `--gpu-memory-utilization`,
//! ...); each input is read from the free-memory query whose call stack runs through one of
//! its functions. What the command line evaluates them with is in its `explain`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Param {
    /// The engine's name for it (`mem_fraction_static`).
    pub name: String,
    /// On the command line (`--mem-fraction-static`).
    pub flag: String,
    /// The value when the flag is absent.
    pub default: f64,
    pub default_note: String,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Input {
    pub what: String,
    /// Function globs: the query whose Python frames run through one of them.
    pub callers: Vec<String>,
    /// `first` or `last` of the process's matching queries on the device.
    pub pick: String,
    /// `free` or `total` of that query, or `peak_rise`: the largest rise of the process's
    /// tracked memory on the device from the query named by `since` to this one, or
    /// `peak_headroom`: that rise above what is tracked at this query, or `drop`:
    /// the free memory of the first matching query less that of the last (what the engine
    /// measured across a span it brackets with queries, vLLM's CUDA-graph estimate).
    pub value: String,
    /// `min`: the engine takes the minimum over the ranks.
    #[serde(default)]
    pub over_ranks: Option<String>,
    #[serde(default)]
    pub since: Option<String>,
    /// The engine skips it in some configurations (vLLM's CUDA-graph estimate with
    /// `--enforce-eager`): no matching query means 0, and the rank's inputs are still complete.
    #[serde(default)]
    pub optional: bool,
    /// An environment switch of the engine (kept in the report's `process.env`) that, set to
    /// 0, makes the engine measure the input without applying it: it counts 0 then (vLLM's
    /// VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; unset means on).
    #[serde(default)]
    pub applied_unless_env_zero: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Term {
    pub input: String,
    pub coef: f64,
    #[serde(default)]
    pub times_parameter: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Refusal {
    /// `"pool"` (the pool must come out positive) or terms that must not be negative.
    pub when: serde_json::Value,
    pub message: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Margin {
    pub mib: i64,
    pub what: String,
    /// What follows the pool and grows with the pool's token count, on top of `mib`.
    #[serde(default)]
    pub per_token: Option<PerToken>,
    /// A smaller fixed part when a flag on the run's command line turns off what `mib` stands
    /// for (the first that applies).
    #[serde(default)]
    pub without: Vec<MarginWithout>,
    /// What follows the pool as the engine estimated it before the pool, when the engine
    /// measured its estimate without applying it (vLLM's CUDA graphs with
    /// VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0): everything after the pool, the failed
    /// request included, instead of `mib`.
    #[serde(default)]
    pub estimate: Option<Estimate>,
}

/// An estimate the engine measures from samples: the free memory across the first of the
/// input's matching query pairs, plus the second pair's (at least `min_per_item_mib`) for each
/// further item, the items counted from the command line (`count`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Estimate {
    /// The formula input (`cudagraph_estimate`) whose queries bracket the samples.
    pub input: String,
    pub what: String,
    pub min_per_item_mib: i64,
    /// Where the samples are taken inside one capture measured as a whole (vLLM 0.33's V2
    /// model runner: `CudaGraphManager.capture` inside `GPUModelRunner.capture_model`): the
    /// sampling queries' callers. When the input's queries include such samples, the estimate
    /// is the whole capture's drop (its first query to its last, the samples left out) less
    /// the samples, plus the first sample and the second (at least `min_per_item_mib`) for
    /// each further item. Empty: the pairs are the input's own queries (the V1 runner).
    #[serde(default)]
    pub samples_in: Vec<String>,
    pub count: ItemCount,
    pub source: String,
}

/// How many items (CUDA graphs) the engine makes: the values of `list_flag` (comma-separated),
/// else `small` up to the largest (`max_flag`, default `default_max`) and each range
/// `[start, end, step]` (end exclusive, 0: none) below the largest plus one.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ItemCount {
    pub list_flag: String,
    pub max_flag: String,
    pub default_max: i64,
    pub small: Vec<i64>,
    pub ranges: Vec<[i64; 3]>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct MarginWithout {
    /// Any of these on a command line of the run (`--flag` or `--flag=...`).
    pub flags: Vec<String>,
    pub mib: i64,
    pub what: String,
}

/// After-pool memory that scales with the pool's tokens (SGLang 0.5.23: the token allocator's
/// free list and the EagerRunner's input buffers), and the allocations that show the count.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PerToken {
    /// Bytes per token of the pool.
    pub bytes: i64,
    pub what: String,
    /// The engine's code each part is keyed on (file, function, version).
    #[serde(default)]
    pub source: String,
    /// Function globs: it applies when the sizing query ran through one of them (the versions
    /// that allocate so); empty: always.
    #[serde(default)]
    pub sizing_query: Vec<String>,
    /// Allocations (failed or not) whose size is the pool's token count times
    /// `bytes_per_token`; the first that the run shows gives the count.
    pub tokens_from: Vec<TokenSite>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct TokenSite {
    /// Function or file globs of the allocation's Python frames.
    pub callers: Vec<String>,
    pub bytes_per_token: i64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Alternative {
    pub flag: String,
    pub what: String,
    /// File or function globs of the frames that show the feature caused a cost.
    pub callers: Vec<String>,
    /// Categories of the process's allocations after the sizing query that the feature
    /// accounts for (`graphs`).
    #[serde(default)]
    pub categories: Vec<String>,
    /// A lever that scales what the feature took instead of turning it off: the flag takes a
    /// number (`--cuda-graph-max-bs N`) and what the feature took is taken to scale with it.
    #[serde(default)]
    pub scales: Option<Scales>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Scales {
    /// What the number is (`the largest batch the CUDA graphs capture`).
    pub what: String,
    /// What a smaller number costs.
    pub cost: String,
    /// The engine's code the proportion is keyed on.
    pub source: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Sizing {
    pub engine: String,
    pub function: String,
    pub formula: String,
    pub versions: String,
    pub source: String,
    pub parameter: Param,
    pub recognize: Vec<String>,
    pub inputs: BTreeMap<String, Input>,
    pub sizing_query: String,
    pub pool: Vec<Term>,
    #[serde(default)]
    pub pool_over_ranks: Option<String>,
    pub reserve: String,
    pub refusals: Vec<Refusal>,
    pub after_pool: Margin,
    pub alternatives: Vec<Alternative>,
    /// When the weights alone leave too little: the flags that split them over more GPUs.
    #[serde(default)]
    pub weights_split: Option<WeightsSplit>,
    /// A flag that sets the pool's bytes instead of the formula (vLLM's
    /// `--kv-cache-memory-bytes`).
    #[serde(default)]
    pub pool_bytes_flag: Option<PoolBytesFlag>,
    /// The bytes a token of the pool takes, from the model's own `config.json`.
    #[serde(default)]
    pub kv_cell: Option<KvCell>,
    /// The engine's check that its pool holds one request of the longest length it serves
    /// (vLLM's `--max-model-len`), sized with `kv_cell`.
    #[serde(default)]
    pub model_len: Option<ModelLen>,
}

/// Where the bytes a token of the pool takes come from: the model's directory (named by
/// `model_flags`, or the argument after `model_after`), whose `config.json` gives the layers,
/// the KV heads (over the tensor-parallel size of `tp_flags`, at least one a rank) and the head
/// size; K and V at 2 bytes each (1 with an fp8 `kv_dtype_flag`); tokens counted in whole
/// blocks of `block_size_flag` (default `block_size_default`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct KvCell {
    pub model_flags: Vec<String>,
    #[serde(default)]
    pub model_after: Option<String>,
    pub tp_flags: Vec<String>,
    pub kv_dtype_flag: String,
    #[serde(default)]
    pub block_size_flag: Option<String>,
    #[serde(default = "one")]
    pub block_size_default: i64,
    pub source: String,
}

fn one() -> i64 {
    1
}

/// A check of the pool against one request of the model's longest length: the pool less one
/// block must hold `ceil(len / block_size)` blocks of the pack's `kv_cell`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ModelLen {
    /// The flag of the longest length (`--max-model-len`).
    pub flag: String,
    /// The start of the engine's refusal (`{max_len}`: the run's length).
    pub message: String,
    /// What a shorter length costs, in words.
    pub cost: String,
    pub source: String,
}

/// The flag that sizes the pool in bytes, what it costs, and the engine's code.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PoolBytesFlag {
    pub flag: String,
    pub cost: String,
    pub source: String,
}

/// The tensor-parallel size that divides the weights among the ranks (`--tp-size`, `--tp`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct WeightsSplit {
    pub flags: Vec<String>,
    pub source: String,
}
