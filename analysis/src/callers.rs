//! Call sites in words: the short form of a site id (`file:function`), as the interposer
//! writes it in `top_allocations[].caller`.
//!
//! Reports carry the frames of every referenced site in the top-level `sites[]`, and a short
//! `caller` only on top allocations (and per-device sites). For the other records (failures,
//! queries, driver costs) the short form is computed by the interposer's own rule, from the
//! format crate (`culedger_format::site`). Reports from writers before call sites have none:
//! callers then say "call site unknown".
//!
//! The frame shown is the one that explains the call (`explaining`): the innermost frame an
//! engine pack names (its sizing formula's query functions: `profile_max_num_token`, not
//! `get_available_gpu_memory`), else the innermost frame outside the interpreter, PyTorch and
//! thin API wrappers (a ctypes binding named after the CUDA or NCCL call it wraps:
//! `CudaRTLibrary.cudaDeviceEnablePeerAccess`), with a short chain of its callers.

use crate::model::{PyFrameRec, Report, SiteRec};
use culedger_format::site::{python_short, user_frame};

/// A function named after the API it wraps (`CudaRTLibrary.cudaIpcOpenMemHandle`,
/// `NCCLLibrary.ncclCommInitRank`): a binding, not the code that decided to call it.
fn api_wrapper(function: &str) -> bool {
    let last = function.rsplit('.').next().unwrap_or(function);
    ["cuda", "cu", "nccl"]
        .iter()
        .any(|p| last.strip_prefix(p).and_then(|r| r.chars().next()).is_some_and(|c| c.is_ascii_uppercase()))
}

/// The frame that explains a call, and its callers as a short chain.
#[derive(Debug, Clone, PartialEq)]
pub struct Explaining {
    /// `file:function`, as the short form writes it.
    pub short: String,
    pub function: String,
    /// `a <- b <- c`: the frame and its callers up to the frame an engine pack names (at
    /// most five frames, the middle elided).
    pub chain: String,
}

/// The explaining frame of site `id` of `report` (see the module head). For a free-memory
/// query (`query`) the frame an engine pack names is the one that explains it (the query's
/// own helper, `get_available_gpu_memory`, says nothing); for other calls the first frame
/// outside the wrappers, with the chain of its callers up to that named frame when it lies
/// below (peer access opened inside `profile_max_num_token`'s query).
pub fn explaining(report: &Report, id: Option<i64>, query: bool) -> Option<Explaining> {
    let id = id.filter(|&i| i != 0)?;
    let site = report.sites.iter().find(|s| s.id == id)?;
    let frames: Vec<&PyFrameRec> = site.python.iter().filter(|f| user_frame(*f)).collect();
    let named = crate::engines::query_functions();
    let anchor = frames.iter().position(|f| crate::engines::frame_matches(named, f));
    let first = frames.iter().position(|f| !api_wrapper(&f.function))?;
    let explains = match anchor {
        Some(a) if query => a,
        _ => first,
    };
    let end = match anchor {
        Some(a) if a >= explains => a,
        _ => (explains + 2).min(frames.len() - 1),
    };
    let names: Vec<&str> = frames[explains..=end].iter().map(|f| f.function.as_str()).collect();
    let chain = if names.len() > 5 {
        format!("{} <- ... <- {}", names[..2].join(" <- "), names[names.len() - 2..].join(" <- "))
    } else {
        names.join(" <- ")
    };
    let f = frames[explains];
    Some(Explaining { short: python_short(f), function: f.function.clone(), chain })
}

/// The short form followed by the caller chain (`file:function (a <- b <- c)`) when the
/// chain reaches beyond the frame itself.
pub fn with_chain(report: &Report, id: Option<i64>) -> Option<String> {
    match explaining(report, id, false) {
        Some(e) if e.chain.contains(" <- ") => Some(format!("{} ({})", e.short, e.chain)),
        _ => caller(report, id),
    }
}

/// The explaining frame of a query's site.
pub fn query_caller(report: &Report, id: Option<i64>) -> Option<String> {
    explaining(report, id, true).map(|e| e.short).or_else(|| caller(report, id))
}

/// The short form of site `id` of `report`: its explaining frame when the report keeps its
/// frames, else the `caller` the report gives for it, else one computed from its frames.
pub fn caller(report: &Report, id: Option<i64>) -> Option<String> {
    if let Some(e) = explaining(report, id, false) {
        return Some(e.short);
    }
    let id = id.filter(|&i| i != 0)?;
    let given = report.devices.iter().flat_map(|d| &d.top_allocations).find(|a| a.site == Some(id));
    if let Some(c) = given.and_then(|a| a.caller.clone()) {
        return Some(c);
    }
    report.sites.iter().find(|s| s.id == id).and_then(SiteRec::short)
}

/// Whether the report records call sites at all.
pub fn recorded(report: &Report) -> bool {
    !report.sites.is_empty()
        || report.devices.iter().flat_map(|d| &d.top_allocations).any(|a| a.site.is_some() || a.caller.is_some())
}

/// The function of a short form, for titles: `MHATokenToKVPool._create_buffers` of
/// `sglang/srt/mem_cache/memory_pool.py:MHATokenToKVPool._create_buffers` (native forms stay
/// whole).
pub fn function(caller: &str) -> &str {
    match caller.rsplit_once(':') {
        Some((file, f)) if file.ends_with(".py") && !f.is_empty() => f,
        _ => caller,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NativeRec;

    fn py(file: &str, function: &str) -> PyFrameRec {
        PyFrameRec { file: file.into(), function: function.into(), line: 1, ..Default::default() }
    }

    #[test]
    fn short_forms_follow_the_interposer() {
        let s = SiteRec {
            id: 3,
            python: vec![
                py("/usr/lib/python3/dist-packages/torch/cuda/memory.py", "caching_allocator_alloc"),
                py("/usr/lib/python3.11/threading.py", "Thread.run"),
                py(
                    "/srv/venv/lib/python3.12/site-packages/sglang/srt/mem_cache/memory_pool.py",
                    "MHATokenToKVPool._create_buffers",
                ),
            ],
            native: vec![],
        };
        let c = s.short().unwrap();
        assert_eq!(c, "sglang/srt/mem_cache/memory_pool.py:MHATokenToKVPool._create_buffers");
        assert_eq!(function(&c), "MHATokenToKVPool._create_buffers");
        assert_eq!(function("libnccl.so.2!ncclCommInitRank"), "libnccl.so.2!ncclCommInitRank");
        let n = SiteRec {
            id: 4,
            python: vec![py("<frozen runpy>", "_run_code")],
            native: vec![
                NativeRec { object: "libculedger.so".into(), symbol: None, offset: "0x10".into(), internal: true },
                NativeRec {
                    object: "libnccl.so.2".into(),
                    symbol: Some("ncclCommInitRank".into()),
                    offset: "0x20".into(),
                    internal: false,
                },
            ],
        };
        assert_eq!(n.short().unwrap(), "libnccl.so.2!ncclCommInitRank");
        assert_eq!(SiteRec::default().short(), None);
    }
}
