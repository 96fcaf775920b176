//! The bytes a token of the pool takes (the pack's `kv_cell`), from the model's `config.json`,
//! and the engine's check that its KV cache holds one request of the longest length it serves
//! (the pack's `model_len`: vLLM's `--max-model-len`).
//!
//! sglang 0.5.23 sizes its pool in tokens of `cell_size` bytes
//! (`model_executor/pool_configurator.py` `_compute_cell_size`: KV heads a rank x (head_dim +
//! v_head_dim) x layers x the KV dtype's size; `calculate_pool_sizes`: available bytes //
//! cell_size, whole pages); vLLM in blocks of `block_size` tokens of the same bytes.
//!
//! vllm 0.33.0 checks each worker's available KV cache memory before allocating any
//! (`v1/core/kv_cache_planning.py` `get_kv_cache_configs` -> `_check_enough_kv_cache_memory`):
//! less the one block `BlockPool` holds back (`_pool_bytes_per_block_from_builder`), it must
//! hold `ceil(max_model_len / block_size)` blocks (`FullAttentionSpec.max_memory_usage_bytes`,
//! `_max_memory_usage_bytes_from_groups`), where a block is every attention layer's page
//! (`_get_kv_cache_bytes_per_block`) and a page is `block_size` tokens of K and V for the
//! rank's KV heads (`AttentionSpec`: `num_kv_heads x (head_size + head_size_v) x dtype size`
//! a token; `ModelConfig.get_num_kv_heads`: `max(1, num_key_value_heads // tp)`). Else it
//! refuses with its estimate of the longest length that fits (`_estimate_max_model_len_from_
//! groups`: the largest length whose blocks fit, found by a binary search over 1..max_model_len).
//! `max_model_len` is the flag's, else what the model's config allows (`config/model.py`
//! `_get_and_verify_max_len`: the smallest of the length keys, RoPE scaling's factor for the
//! rope types that do not scale it already, `tokenizer_config.json`'s `model_max_length`).
//!
//! Only what a plain decoder's config says is sized: one group of full-attention layers. A
//! config with multi-head latent attention (`kv_lora_rank`), sliding windows or layer types
//! other than full attention is not, and then nothing is said of the check.

use super::command_line::{argument_after, flag_number, flag_text};
use crate::engines::KvCell;
use crate::load::Run;
use serde_json::Value;

/// The bytes a token of the pool takes on one rank, as the model's config gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// The model's directory, as the command line names it.
    pub model: String,
    pub layers: i64,
    /// KV heads a rank.
    pub kv_heads: i64,
    pub head_size: i64,
    pub dtype_bytes: i64,
    /// Tokens per block (vLLM's `--block-size`, SGLang's `--page-size`).
    pub block_size: i64,
}

impl Cell {
    /// K and V of every layer for one token.
    pub fn token_bytes(&self) -> i64 {
        self.layers * self.kv_heads * self.head_size * 2 * self.dtype_bytes
    }

    pub fn block_bytes(&self) -> i64 {
        self.token_bytes() * self.block_size
    }

    /// The tokens a pool of `pool` bytes holds: whole blocks.
    pub fn tokens(&self, pool: i64) -> i64 {
        let b = self.block_bytes();
        if b <= 0 {
            return 0;
        }
        pool.max(0) / b * self.block_size
    }
}

/// The check for one run: the cell, and the longest length the run asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub cell: Cell,
    pub max_len: i64,
    /// Whether `max_len` came from the flag (else from the model's config).
    pub from_flag: bool,
}

impl Check {
    /// The KV cache a request of `len` tokens needs per rank (whole blocks).
    pub fn needed(&self, len: i64) -> i64 {
        let bs = self.cell.block_size.max(1);
        (len + bs - 1) / bs * self.cell.block_bytes()
    }

    /// Whether a pool of `pool` bytes passes the check (less the block held back, the run's
    /// length fits).
    #[cfg(test)]
    pub fn passes(&self, pool: i64) -> bool {
        let b = self.cell.block_bytes();
        pool - b > 0 && self.needed(self.max_len) <= pool - b
    }

    /// The pool the check needs: one block held back and the run's length.
    pub fn pool_needed(&self) -> i64 {
        self.needed(self.max_len) + self.cell.block_bytes()
    }

    /// vLLM's estimate of the longest length a pool of `pool` bytes holds (0: not one token).
    pub fn longest(&self, pool: i64) -> i64 {
        let b = self.cell.block_bytes();
        let avail = pool - b;
        if avail <= 0 || b <= 0 {
            return 0;
        }
        ((avail / b) * self.cell.block_size).min(self.max_len)
    }
}

/// The model's directory the command line names: a flag of `m`, else the argument after
/// `m.model_after` (`vllm serve MODEL`).
fn model_dir(run: &Run, m: &KvCell) -> Option<String> {
    if let Some(d) = m.model_flags.iter().find_map(|f| flag_text(run, f)) {
        return Some(d);
    }
    argument_after(run, m.model_after.as_deref()?)
}

fn int(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64).filter(|n| *n > 0)
}

/// The longest length the model's config allows (vllm 0.33 `_get_and_verify_max_len`).
fn derived_len(c: &Value, tokenizer: Option<&Value>) -> Option<i64> {
    let keys = [
        "max_position_embeddings",
        "n_positions",
        "max_seq_len",
        "seq_length",
        "model_max_length",
        "max_target_positions",
        "max_sequence_length",
        "max_seq_length",
        "seq_len",
    ];
    let mut len = keys.iter().filter_map(|k| int(c, k)).min().unwrap_or(2048);
    if let Some(t) = tokenizer.and_then(|t| int(t, "model_max_length")) {
        len = len.min(t);
    }
    let rope = c.get("rope_scaling").or_else(|| c.get("rope_parameters")).filter(|r| r.is_object());
    if let Some(r) = rope {
        let ty = r.get("rope_type").or_else(|| r.get("type")).and_then(Value::as_str).unwrap_or("default");
        if ty == "longrope" {
            return int(c, "original_max_position_embeddings").or(Some(len));
        }
        let scaled_already = ["su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"];
        if !scaled_already.contains(&ty) {
            if let Some(f) = r.get("factor").and_then(Value::as_f64).filter(|f| *f > 0.0) {
                len = (len as f64 * f) as i64;
            }
        }
    }
    Some(len)
}

/// A JSON file of the model's directory, read as reports are (`read_bounded`: a regular file
/// of bounded size; a FIFO or a device the recorded command line names is refused, never
/// waited on or read without end); None when it is not one or not JSON.
fn json_file(path: &std::path::Path) -> Option<Value> {
    serde_json::from_slice(&crate::load::read_bounded(path).ok()?).ok()
}

/// The model's config (its language part) in the directory the command line names, when it
/// describes a plain decoder (one group of full-attention layers), and that directory.
fn config(run: &Run, kc: &KvCell) -> Option<(String, Value)> {
    let model = model_dir(run, kc)?;
    let raw = json_file(&std::path::Path::new(&model).join("config.json"))?;
    // A multimodal model's language part (`hf_text_config`).
    let c = raw.get("text_config").filter(|t| t.is_object()).cloned().unwrap_or(raw);
    let sliding = c.get("sliding_window").is_some_and(|w| !w.is_null())
        || c.get("use_sliding_window").and_then(Value::as_bool) == Some(true);
    let other_layers = c
        .get("layer_types")
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|t| t.as_str() != Some("full_attention")));
    if c.get("kv_lora_rank").is_some_and(|v| !v.is_null()) || sliding || other_layers {
        return None;
    }
    Some((model, c))
}

/// The cell of `run`'s model, when the pack has `kv_cell`, the command line names the model's
/// directory and its `config.json` there describes a plain decoder.
pub fn cell(run: &Run, kc: &KvCell, tp_default: i64) -> Option<Cell> {
    let (model, c) = config(run, kc)?;
    let layers = int(&c, "num_hidden_layers")?;
    let heads = int(&c, "num_attention_heads")?;
    let kv_total = int(&c, "num_key_value_heads").unwrap_or(heads);
    let head_size = int(&c, "head_dim").or_else(|| Some(int(&c, "hidden_size")? / heads))?;
    let tp = kc
        .tp_flags
        .iter()
        .find_map(|f| flag_number(run, f))
        .filter(|t| *t >= 1.0)
        .map_or(tp_default, |t| t as i64);
    let kv_dtype = flag_text(run, &kc.kv_dtype_flag).unwrap_or_default();
    let dtype_bytes = if kv_dtype.starts_with("fp8") {
        1
    } else if matches!(flag_text(run, "--dtype").as_deref(), Some("float32" | "float")) {
        4
    } else {
        2
    };
    let block_size = kc
        .block_size_flag
        .as_ref()
        .and_then(|f| flag_number(run, f))
        .filter(|b| *b >= 1.0)
        .map_or(kc.block_size_default.max(1), |b| b as i64);
    Some(Cell { model, layers, kv_heads: (kv_total / tp).max(1), head_size, dtype_bytes, block_size })
}

/// The length check for `run`, when the pack has one and the cell is known; None for a run
/// that asks the engine to fit the length (`-1`).
pub fn check(run: &Run, flag: &str, kc: &KvCell, cell: &Cell) -> Option<Check> {
    let (max_len, from_flag) = match flag_number(run, flag) {
        Some(n) if n < 1.0 => return None,
        Some(n) => (n as i64, true),
        None => {
            let (model, c) = config(run, kc)?;
            let dir = std::path::Path::new(&model);
            let tok = json_file(&dir.join("tokenizer_config.json"));
            (derived_len(&c, tok.as_ref())?, false)
        }
    };
    Some(Check { cell: cell.clone(), max_len, from_flag })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model's directory is named by a report: a FIFO there is refused at once, not
    /// waited on (`std::fs::read` waited for a writer that never comes), and a file is read.
    #[test]
    fn a_fifo_in_the_model_directory_is_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("config.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(json_file(&fifo), None);
        let file = dir.path().join("tokenizer_config.json");
        std::fs::write(&file, br#"{"model_max_length": 4096}"#).unwrap();
        assert_eq!(json_file(&file).and_then(|v| v["model_max_length"].as_i64()), Some(4096));
    }

    fn check(max_len: i64) -> Check {
        let cell = Cell { model: "m".into(), layers: 32, kv_heads: 4, head_size: 128, dtype_bytes: 2, block_size: 16 };
        Check { cell, max_len, from_flag: false }
    }

    /// vLLM's figures: Llama 3.1 8B at --tp 2 (32 layers, 4 KV heads a rank, head size 128,
    /// bf16) takes 64 KiB a token a rank, 1 MiB a block of 16; 131072 tokens need 8 GiB.
    #[test]
    fn vllm_s_check_and_its_estimate() {
        let c = check(131072);
        assert_eq!(c.cell.block_bytes(), 1 << 20);
        assert_eq!(c.needed(131072), 8 << 30);
        assert_eq!(c.needed(131057), 8 << 30, "whole blocks");
        assert!(c.passes((8 << 30) + (1 << 20)), "the block held back and the request's");
        assert!(!c.passes((8 << 30) + (1 << 20) - 1));
        assert_eq!(c.longest((8 << 30) + (1 << 20)), 131072);
        assert_eq!(c.longest(6 << 30), (6144 - 1) * 16, "one block held back");
        assert_eq!(c.longest(1 << 20), 0, "not one block after the one held back");
        assert_eq!(c.cell.tokens(6 << 30), 6144 * 16);
        // vLLM's binary search over 1..max_model_len finds the same: the largest length whose
        // blocks fit in what is left after the block held back.
        let avail = (6 << 30) - c.cell.block_bytes();
        let (mut lo, mut hi, mut best) = (1, c.max_len, 0);
        while lo <= hi {
            let mid = (lo + hi) / 2;
            if c.needed(mid) <= avail {
                best = mid;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        assert_eq!(best, c.longest(6 << 30));
    }

    #[test]
    fn the_length_a_config_allows() {
        let c: Value = serde_json::json!({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}});
        assert_eq!(derived_len(&c, None), Some(131072), "llama3 scaling is in max_position_embeddings already");
        let c: Value = serde_json::json!({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}});
        assert_eq!(derived_len(&c, None), Some(8192));
        let c: Value = serde_json::json!({"max_position_embeddings": 32768, "seq_length": 8192});
        assert_eq!(derived_len(&c, Some(&serde_json::json!({"model_max_length": 4096}))), Some(4096));
        assert_eq!(derived_len(&serde_json::json!({}), None), Some(2048), "vLLM's default");
    }
}
