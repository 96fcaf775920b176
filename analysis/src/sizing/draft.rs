//! A speculative-decoding draft model whose weights were still loading after the sizing query
//! when the start failed. SGLang before its PR 28855 built the draft worker after the target's
//! pool (speculative/eagle_worker.py `EAGLEWorker.__init__` -> `TpModelWorker.__init__(
//! is_draft_worker=True)`, after the target `ModelRunner` had sized and allocated its pool), so
//! the draft's weights are not in the sizing at all; sglang 0.5.23 builds it before
//! `init_memory_pools` and counts them. When that load fails, the reports show what it took
//! before the failure and the failed request, not the rest of it: a value that makes room for
//! only those still fails.
//!
//! The rest is known when the command line names the draft model
//! (`--speculative-draft-model-path`, SGLang's own flag) and its weight files can be read here:
//! their size on disk (`*.safetensors`, else `*.bin`) split over the `--tp` ranks (SGLang shards
//! the draft like the target, in the same tensor-parallel group) is what each rank loads. The
//! value then counts the draft whole; when the files cannot be read, explain says which flag
//! names them.

use super::command_line::flag_number;
use crate::load::Run;

pub use super::command_line::flag_text;

/// The flag that names the draft model (SGLang's `ServerArgs.speculative_draft_model_path`).
pub const FLAG: &str = "--speculative-draft-model-path";

/// The draft model a failed run named, as far as it can be read here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    /// The directory the command line names.
    pub path: String,
    /// Its weight files' bytes on disk, and per rank (split over `--tp`); None when they
    /// cannot be read here.
    pub total_bytes: Option<i64>,
    pub per_rank_bytes: Option<i64>,
    pub tp: i64,
}

/// The bytes of the weight files in `dir`: `*.safetensors`, else `*.bin` (what SGLang's loader
/// reads, `model_loader/weight_utils.py`); None when there are none or the directory cannot
/// be read.
fn weights_on_disk(dir: &std::path::Path) -> Option<i64> {
    let entries: Vec<(String, u64)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| Some((e.file_name().to_string_lossy().into_owned(), e.metadata().ok().filter(|m| m.is_file())?.len())))
        .collect();
    for ext in [".safetensors", ".bin"] {
        let sum: u64 = entries.iter().filter(|(n, _)| n.ends_with(ext)).map(|(_, l)| *l).sum();
        if sum > 0 {
            return i64::try_from(sum).ok();
        }
    }
    None
}

/// The draft model the run's command line names (None without the flag).
pub fn named(run: &Run) -> Option<Draft> {
    let path = flag_text(run, FLAG)?;
    let tp = flag_number(run, "--tp")
        .or_else(|| flag_number(run, "--tp-size"))
        .filter(|t| *t >= 1.0)
        .map_or(1, |t| t as i64);
    let total = weights_on_disk(std::path::Path::new(&path));
    Some(Draft { path, total_bytes: total, per_rank_bytes: total.map(|t| (t + tp - 1) / tp), tp })
}

/// What a rank's draft load still needed when it failed: its whole per-rank size less the
/// weights it had loaded after the sizing query (`seen`), when that is more than the failed
/// request (`need`); else None.
pub fn rest(d: &Draft, seen: i64, need: i64) -> Option<i64> {
    let rest = d.per_rank_bytes? - seen.max(0);
    (rest > need).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_files_on_disk_and_the_rest_of_a_load() {
        let dir = std::env::temp_dir().join(format!("culedger-draft-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(weights_on_disk(&dir), None, "no weight files");
        std::fs::write(dir.join("config.json"), b"{}").unwrap();
        std::fs::write(dir.join("pytorch_model.bin"), vec![0u8; 10]).unwrap();
        assert_eq!(weights_on_disk(&dir), Some(10), "*.bin when there is no *.safetensors");
        let f = std::fs::File::create(dir.join("model-00001-of-00002.safetensors")).unwrap();
        f.set_len(3 << 30).unwrap();
        let f = std::fs::File::create(dir.join("model-00002-of-00002.safetensors")).unwrap();
        f.set_len(3 << 30).unwrap();
        assert_eq!(weights_on_disk(&dir), Some(6 << 30), "the safetensors shards, not the .bin beside them");
        std::fs::remove_dir_all(&dir).unwrap();
        let d = Draft { path: "x".into(), total_bytes: Some(6 << 30), per_rank_bytes: Some(3 << 30), tp: 2 };
        assert_eq!(rest(&d, 1 << 30, 512 << 20), Some(2 << 30), "3 GiB a rank, 1 GiB loaded: 2 GiB to come");
        assert_eq!(rest(&d, 3 << 30, 512 << 20), None, "all of it seen: the failed request decides");
        assert_eq!(rest(&Draft { per_rank_bytes: None, ..d }, 0, 1), None, "unreadable: unknown");
    }
}
