//! Call sites in words: the short form of a site id (`file:function`), as the interposer
//! writes it in `top_allocations[].caller` (issue [4]).
//!
//! Reports carry the frames of every referenced site in the top-level `sites[]`, and a short
//! `caller` only on top allocations (and per-device sites). For the other records (failures,
//! queries, driver costs) the short form is computed here by the interposer's rule: the
//! innermost Python frame outside the interpreter's own files and PyTorch's (comprehension
//! frames skipped), as `file:function` with the file from its package root when installed,
//! else its base name; without one, the first native frame outside culedger, CUDA and libc,
//! as `object!symbol` (`object+offset` without a symbol). Reports from writers before call
//! sites have none: callers then say "call site unknown".

use crate::model::{Report, SiteRec};

/// Is `file` the interpreter's own (standard library, frozen modules) or PyTorch's?
fn runtime_file(file: &str) -> bool {
    file.starts_with("<frozen ")
        || (file.contains("/lib/python3") && !file.contains("-packages/"))
        || file.contains("/torch/")
}

fn comprehension(function: &str) -> bool {
    ["<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>"].iter().any(|c| function.ends_with(c))
}

fn short_file(file: &str) -> &str {
    for marker in ["/site-packages/", "/dist-packages/"] {
        if let Some(i) = file.rfind(marker) {
            return &file[i + marker.len()..];
        }
    }
    file.rsplit('/').next().unwrap_or(file)
}

/// The short form of a site.
pub fn short(site: &SiteRec) -> Option<String> {
    if let Some(f) = site.python.iter().find(|f| !runtime_file(&f.file) && !comprehension(&f.function)) {
        return Some(format!("{}:{}", short_file(&f.file), f.function));
    }
    site.native.iter().find(|f| !f.internal).map(|f| match &f.symbol {
        Some(s) => format!("{}!{s}", f.object),
        None => format!("{}+{}", f.object, f.offset),
    })
}

/// The short form of site `id` of `report`: the `caller` the report gives for it, else one
/// computed from its frames.
pub fn caller(report: &Report, id: Option<i64>) -> Option<String> {
    let id = id.filter(|&i| i != 0)?;
    let given = report.devices.iter().flat_map(|d| &d.top_allocations).find(|a| a.site == Some(id));
    if let Some(c) = given.and_then(|a| a.caller.clone()) {
        return Some(c);
    }
    report.sites.iter().find(|s| s.id == id).and_then(short)
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
    use crate::sites::{NativeRec, PyFrameRec};

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
        let c = short(&s).unwrap();
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
        assert_eq!(short(&n).unwrap(), "libnccl.so.2!ncclCommInitRank");
        assert_eq!(short(&SiteRec::default()), None);
    }
}
