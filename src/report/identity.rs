//! What identifies a process in a report beyond its pid: the run it belongs to, its title,
//! its `comm`, and the rank hints of its environment (see docs/schema.md, `process`).
//!
//! Run ids: `culedger run` puts `CULEDGER_RUN_ID` into the environment of the command it
//! starts, so every process of that tree inherits it. A process preloaded without it makes
//! its own id from its host, pid and start time (`<host>-<pid>-<start_unix_ms>`) and
//! writes it in its report only: culedger never calls `setenv` inside the program (another
//! thread may be reading the environment at that moment, which glibc does not make safe),
//! so children of such a process, forked or spawned, make their own ids too. The CLI puts
//! such processes back together by their parent pids (`ppid`, `forked_from`).
//!
//! The environment is read once, when reporting starts (in the thread of the first hook,
//! like the settings), never from the flush thread.

use once_cell::sync::OnceCell;

/// The environment variable `culedger run` sets for the whole process tree.
pub const ENV_RUN_ID: &str = "CULEDGER_RUN_ID";

/// Environment variables kept as rank hints (values of these only, nothing else).
pub const RANK_HINTS: [&str; 4] = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"];

/// Environment switches of the engines that change how they size their pools, kept beside the
/// rank hints (their values only) so that the CLI evaluates the formula the process ran:
/// vLLM's VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (vllm 0.33 envs.py, read in
/// vllm/v1/worker/gpu_worker.py Worker.determine_available_memory: whether the CUDA-graph
/// estimate is subtracted from the KV cache).
pub const ENGINE_SWITCHES: [&str; 1] = ["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"];

/// Longest run id accepted from the environment, and longest hint value kept.
const MAX_LEN: usize = 128;

/// What was read from the environment when reporting started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// `CULEDGER_RUN_ID`, when set and well formed.
    pub run_id: Option<String>,
    /// The allow-listed rank hints that are set, in [`RANK_HINTS`] order, then the
    /// [`ENGINE_SWITCHES`] that are set.
    pub hints: Vec<(&'static str, String)>,
    /// One line per ignored value.
    pub warnings: Vec<String>,
}

/// A run id is 1 to 128 characters of `A-Z a-z 0-9 . _ : @ -`.
pub fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-'))
}

impl Identity {
    /// Parse from an environment lookup. Pure: prints nothing.
    pub fn parse(env: impl Fn(&str) -> Option<String>) -> Identity {
        let mut warnings = Vec::new();
        let run_id = env(ENV_RUN_ID).filter(|v| !v.is_empty()).and_then(|v| {
            if valid_run_id(&v) {
                Some(v)
            } else {
                let shown: String = v.chars().take(40).collect();
                warnings.push(format!(
                    "{ENV_RUN_ID}={shown:?} is not 1-{MAX_LEN} characters of letters, digits and . _ : @ -; \
                     using this process's own run id"
                ));
                None
            }
        });
        let hints = RANK_HINTS
            .iter()
            .chain(ENGINE_SWITCHES.iter())
            .filter_map(|&k| {
                let v = env(k)?;
                (!v.is_empty()).then(|| (k, v.chars().take(MAX_LEN).collect()))
            })
            .collect();
        Identity { run_id, hints, warnings }
    }

    /// The run id of the process `pid` of `host` that started at `start_unix_ms`, and where
    /// it came from: `("env")` or `("process")`.
    pub fn run_id_for(&self, host: Option<&str>, pid: i32, start_unix_ms: u64) -> (String, &'static str) {
        match &self.run_id {
            Some(id) => (id.clone(), "env"),
            None => (own_run_id(host, pid, start_unix_ms), "process"),
        }
    }
}

/// The id a process makes for itself: unique per host, pid and start time.
pub fn own_run_id(host: Option<&str>, pid: i32, start_unix_ms: u64) -> String {
    let host: String = host
        .unwrap_or("unknown")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    format!("{host}-{pid}-{start_unix_ms}")
}

static IDENTITY: OnceCell<Identity> = OnceCell::new();

/// The process's identity, read from the environment on first call.
pub fn get() -> &'static Identity {
    let identity = IDENTITY.get_or_init(|| Identity::parse(|k| std::env::var(k).ok()));
    // For helgrind: made by one thread, read by others (a `OnceCell` it cannot see through).
    crate::sync::published(identity);
    identity
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Identity {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        Identity::parse(|k| map.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn run_id_from_the_environment() {
        let i = parse(&[(ENV_RUN_ID, "20260101-000000-ab12")]);
        assert_eq!(i.run_id.as_deref(), Some("20260101-000000-ab12"));
        assert_eq!(i.run_id_for(Some("h"), 7, 1000), ("20260101-000000-ab12".to_string(), "env"));
        assert!(i.warnings.is_empty());
    }

    #[test]
    fn own_run_id_without_one() {
        let i = parse(&[]);
        assert_eq!(i.run_id_for(Some("node-1"), 42, 1767225600000), ("node-1-42-1767225600000".into(), "process"));
        assert_eq!(own_run_id(Some("a b/c"), 1, 2), "a_b_c-1-2");
        assert_eq!(own_run_id(None, 1, 2), "unknown-1-2");
        assert!(valid_run_id(&own_run_id(Some("x.y-z"), 3, 4)));
    }

    #[test]
    fn malformed_run_id_warns_and_is_ignored() {
        for bad in ["has space", "semi;colon", &"x".repeat(129), "new\nline"] {
            let i = parse(&[(ENV_RUN_ID, bad)]);
            assert_eq!(i.run_id, None, "{bad}");
            assert_eq!(i.warnings.len(), 1, "{bad}");
            assert!(i.warnings[0].starts_with("CULEDGER_RUN_ID="), "{:?}", i.warnings);
        }
        assert_eq!(parse(&[(ENV_RUN_ID, "")]).warnings.len(), 0, "empty means unset");
    }

    #[test]
    fn only_allow_listed_hints() {
        let i =
            parse(&[("RANK", "3"), ("WORLD_SIZE", "8"), ("HF_TOKEN", "secret"), ("LOCAL_RANK", ""), ("PATH", "/bin")]);
        assert_eq!(i.hints, [("RANK", "3".to_string()), ("WORLD_SIZE", "8".to_string())]);
        let long = parse(&[("CUDA_VISIBLE_DEVICES", &"7,".repeat(100))]);
        assert_eq!(long.hints[0].1.len(), 128);
        let vllm = parse(&[("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "0"), ("VLLM_USE_V1", "1"), ("RANK", "1")]);
        assert_eq!(vllm.hints, [("RANK", "1".to_string()), ("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "0".to_string())]);
    }
}
