//! The short form of a call site (`caller` in the report, docs/sites.md): the writer names
//! `top_allocations[].caller` and `devices[].sites[].caller` with it, the reader names every
//! other record's site (failures, queries, driver costs) with it, from the frames in
//! `sites[]`. One implementation over two views of the frames: the interposer's own
//! (`src/sites`) and the report's ([`crate::report::SiteRec`]).
//!
//! The rule: `file:function` of the innermost Python frame outside the interpreter's and
//! the frameworks' files ([`runtime_file`]; comprehension frames skipped), the file from its
//! package root when installed, else its base name ([`short_file`]); without one,
//! `object!symbol` of the first native frame outside culedger, CUDA and libc
//! (`object+0xOFFSET` without a symbol); None when nothing is known.

use std::borrow::Cow;

/// A Python frame, as far as the short form reads it.
pub trait PyFrameView {
    /// `co_filename`.
    fn file(&self) -> &str;
    /// `co_qualname` (`co_name` on 3.10).
    fn function(&self) -> &str;
}

/// A native frame, as far as the short form reads it.
pub trait NativeFrameView {
    /// Basename of the shared object or executable.
    fn object(&self) -> &str;
    /// The nearest dynamic symbol, if any.
    fn symbol(&self) -> Option<&str>;
    /// The offset from the object's load base, as [`offset_text`] writes it.
    fn offset(&self) -> Cow<'_, str>;
    /// A frame of culedger, the CUDA runtime or driver, or the C library / loader.
    fn internal(&self) -> bool;
}

/// A native frame's offset as the report writes it (`sites[].native[].offset`): `0x1a2b`.
pub fn offset_text(offset: u64) -> String {
    format!("{offset:#x}")
}

/// Python packages of the frameworks that allocate on a program's behalf: a frame in one of
/// them is plumbing (`torch/cuda/memory.py:mem_get_info`, CuPy's `cupy/_creation/basic.py:empty`),
/// not the caller a user wants named. Matched as a path component (`.../torch/...`), so an
/// installed package and a source checkout count alike.
pub const FRAMEWORK_PACKAGES: &[&str] = &[
    "/torch/",
    "/cupy/",
    "/cupyx/",
    "/cupy_backends/",
    "/cuda/bindings/",
    "/cuda/core/",
    "/cuda/pathfinder/",
    "/triton/",
    "/numba/cuda/",
];

/// Is `file` the interpreter's own (standard library, ctypes and its wrappers included, frozen
/// modules, shims) or a framework's ([`FRAMEWORK_PACKAGES`])?
///
/// CPython 3.13+ runs a specialised call of a class with a Python `__init__`
/// (`CALL_ALLOC_AND_ENTER_INIT`) through the shim code object `_Py_InitCleanup`
/// (Python/specialize.c), whose `co_filename` is `"__init__"`: a frame that is no one's code.
pub fn runtime_file(file: &str) -> bool {
    file.starts_with("<frozen ")
        || file == "__init__"
        || (file.contains("/lib/python3") && !file.contains("-packages/"))
        || FRAMEWORK_PACKAGES.iter().any(|p| file.contains(p))
}

/// A comprehension's own frame (3.11 and older run them as functions): `caller` names the
/// function around it.
pub fn comprehension(function: &str) -> bool {
    ["<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>"].iter().any(|c| function.ends_with(c))
}

/// A file name as shown in `caller`: from the package root when it is installed
/// (`sglang/srt/model_executor/model_runner.py`), else the basename.
pub fn short_file(file: &str) -> &str {
    for marker in ["/site-packages/", "/dist-packages/"] {
        if let Some(i) = file.rfind(marker) {
            return &file[i + marker.len()..];
        }
    }
    file.rsplit('/').next().unwrap_or(file)
}

/// Is this Python frame someone's code, one the short form may name?
pub fn user_frame(f: &(impl PyFrameView + ?Sized)) -> bool {
    !runtime_file(f.file()) && !comprehension(f.function())
}

/// `file:function` of a Python frame, as the short form writes it.
pub fn python_short(f: &(impl PyFrameView + ?Sized)) -> String {
    format!("{}:{}", short_file(f.file()), f.function())
}

/// The short form of a site with these frames, innermost first (see the module head).
pub fn short<'a, P, N>(
    python: impl IntoIterator<Item = &'a P>,
    native: impl IntoIterator<Item = &'a N>,
) -> Option<String>
where
    P: PyFrameView + ?Sized + 'a,
    N: NativeFrameView + ?Sized + 'a,
{
    if let Some(f) = python.into_iter().find(|f| user_frame(*f)) {
        return Some(python_short(f));
    }
    native.into_iter().find(|f| !f.internal()).map(|f| match f.symbol() {
        Some(s) => format!("{}!{s}", f.object()),
        None => format!("{}+{}", f.object(), f.offset()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{NativeRec, PyFrameRec, SiteRec};

    fn py(file: &str, function: &str) -> PyFrameRec {
        PyFrameRec { file: file.into(), function: function.into(), line: 1, line_is_current: true }
    }

    fn nat(object: &str, symbol: Option<&str>, internal: bool) -> NativeRec {
        NativeRec { object: object.into(), symbol: symbol.map(Into::into), offset: offset_text(0x10), internal }
    }

    fn site(python: Vec<PyFrameRec>, native: Vec<NativeRec>) -> SiteRec {
        SiteRec { id: 1, python, native }
    }

    #[test]
    fn short_form_skips_runtime_frames() {
        let s = site(
            vec![
                py("/usr/lib/python3/dist-packages/torch/cuda/memory.py", "caching_allocator_alloc"),
                py("/usr/lib/python3.11/threading.py", "Thread.run"),
                py(
                    "/srv/venv/lib/python3.12/site-packages/sglang/srt/mem_cache/memory_pool.py",
                    "MHATokenToKVPool._create_buffers",
                ),
            ],
            vec![nat("libcudart.so.12", Some("cudaMalloc"), true)],
        );
        assert_eq!(s.short().unwrap(), "sglang/srt/mem_cache/memory_pool.py:MHATokenToKVPool._create_buffers");
        // CuPy's own allocation path and its Cython-generated frames, then the user's script.
        let cupy = site(
            vec![
                py("/srv/venv/lib/python3.11/site-packages/cupy/_creation/basic.py", "empty"),
                py("/srv/venv/lib/python3.11/site-packages/cupyx/scipy/sparse/_coo.py", "coo_matrix.__init__"),
                py("/usr/lib/python3.11/ctypes/__init__.py", "__getitem__"),
                py("/home/u/cupy_pool.py", "make_buffers"),
            ],
            vec![],
        );
        assert_eq!(cupy.short().unwrap(), "cupy_pool.py:make_buffers");
        let info =
            site(vec![py("/opt/torch-src/torch/cuda/memory.py", "mem_get_info"), py("/w/probe.py", "probe")], vec![]);
        assert_eq!(info.short().unwrap(), "probe.py:probe", "a source checkout of torch is torch's too");
        let c = site(vec![py("/a/m.py", "f.<locals>.<listcomp>"), py("/a/m.py", "f")], vec![]);
        assert_eq!(c.short().unwrap(), "m.py:f");
        // CPython 3.13+'s `__init__` shim between a class call and the caller.
        let shim = site(vec![py("__init__", "__init__"), py("/a/m.py", "Pool.__init__")], vec![]);
        assert_eq!(shim.short().unwrap(), "m.py:Pool.__init__");
        let n = site(
            vec![py("<frozen runpy>", "_run_code")],
            vec![nat("libculedger.so", Some("cudaMalloc"), true), nat("libnccl.so.2", Some("ncclCommInitRank"), false)],
        );
        assert_eq!(n.short().unwrap(), "libnccl.so.2!ncclCommInitRank");
        let anon = site(vec![], vec![nat("engine", None, false)]);
        assert_eq!(anon.short().unwrap(), "engine+0x10");
        assert_eq!(SiteRec::default().short(), None);
        assert_eq!(short_file("/home/u/proj/sim.py"), "sim.py");
    }
}
