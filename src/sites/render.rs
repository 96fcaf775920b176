//! A site in the report's words: its short form (`caller`) by the format crate's one rule,
//! which the reader applies to the frames the report keeps, its record (`sites[]`), and the
//! table as the report's rendering asks it ([`TableResolver`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use culedger_format::report::{Health, NativeRec, PyFrameRec, SiteRec};
use culedger_format::site::{self as form, NativeFrameView, PyFrameView};

use super::{misses, native, python_version, NativeFrame, PyFrame, Site, IN_DLOPEN_SKIPS, TABLE};

impl PyFrameView for PyFrame {
    fn file(&self) -> &str {
        &self.file
    }
    fn function(&self) -> &str {
        &self.function
    }
}

impl NativeFrameView for NativeFrame {
    fn object(&self) -> &str {
        &self.object
    }
    fn symbol(&self) -> Option<&str> {
        self.symbol.as_deref()
    }
    fn offset(&self) -> Cow<'_, str> {
        Cow::Owned(form::offset_text(self.offset))
    }
    fn internal(&self) -> bool {
        self.internal
    }
}

/// The short form of a site (`culedger_format::site`); None when nothing is known.
pub fn short(site: &Site) -> Option<String> {
    form::short(site.python.iter().map(|f| &**f), site.native.iter().map(|f| &**f))
}

/// One site as the report writes it (docs/schema.md, `sites[]`).
pub fn site_rec(id: u32, s: &Site) -> SiteRec {
    SiteRec {
        id: i64::from(id),
        python: s
            .python
            .iter()
            .map(|f| PyFrameRec {
                file: f.file.clone(),
                function: f.function.clone(),
                line: i64::from(f.line),
                line_is_current: f.line_is_current,
            })
            .collect(),
        native: s
            .native
            .iter()
            .map(|f| NativeRec {
                object: f.object.to_string(),
                symbol: f.symbol.as_deref().map(str::to_string),
                offset: form::offset_text(f.offset),
                internal: f.internal,
            })
            .collect(),
    }
}

/// The process's call-site table as the report's rendering asks it (`ledger::SiteResolver`):
/// the sites the records name, their short forms, and the call sites' health fields.
pub struct TableResolver;

impl crate::ledger::SiteResolver for TableResolver {
    fn resolve(&self, ids: &BTreeSet<u32>) -> BTreeMap<u32, (SiteRec, Option<String>)> {
        // One lock to copy the sites out; they are rendered without it.
        let found: Vec<(u32, Arc<Site>)> = {
            let t = TABLE.get().lock();
            ids.iter().filter_map(|&id| t.get(id).map(|s| (id, s))).collect()
        };
        found.into_iter().map(|(id, s)| (id, (site_rec(id, &s), short(&s)))).collect()
    }

    fn health(&self, h: &mut Health) {
        h.site_misses = misses();
        h.sites_dropped = TABLE.get().lock().dropped;
        h.native_skipped_in_dlopen = IN_DLOPEN_SKIPS.load(Ordering::Relaxed);
        h.native_unwind_fallbacks = native::FALLBACKS.load(Ordering::Relaxed);
        h.python_version = python_version();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn py(file: &str, function: &str) -> Arc<PyFrame> {
        Arc::new(PyFrame { file: file.into(), function: function.into(), line: 1, line_is_current: true })
    }

    fn nat(object: &str, symbol: Option<&str>, internal: bool) -> Arc<NativeFrame> {
        Arc::new(NativeFrame { object: object.into(), symbol: symbol.map(Into::into), offset: 0x10, internal })
    }

    /// The short form of `s` as the writer names it, checked to be the one the reader gives
    /// for the site as the report writes it.
    fn short_both(s: &Site) -> Option<String> {
        let written = short(s);
        let json = serde_json::to_string(&site_rec(7, s)).expect("a site serializes");
        let read: SiteRec = serde_json::from_str(&json).expect("the report's site parses");
        assert_eq!(read.short(), written, "writer and reader disagree on {s:?}");
        written
    }

    #[test]
    fn short_form_skips_runtime_frames_and_the_reader_agrees() {
        let short = short_both;
        let s = Site {
            python: vec![
                py("/usr/lib/python3/dist-packages/torch/cuda/memory.py", "caching_allocator_alloc"),
                py("/usr/lib/python3.11/threading.py", "Thread.run"),
                py(
                    "/srv/venv/lib/python3.12/site-packages/sglang/srt/mem_cache/memory_pool.py",
                    "MHATokenToKVPool._create_buffers",
                ),
            ],
            native: vec![nat("libcudart.so.12", Some("cudaMalloc"), true)],
        };
        assert_eq!(short(&s).unwrap(), "sglang/srt/mem_cache/memory_pool.py:MHATokenToKVPool._create_buffers");
        // CuPy's own allocation path and its Cython-generated frames, then the user's script.
        let cupy = Site {
            python: vec![
                py("/srv/venv/lib/python3.11/site-packages/cupy/_creation/basic.py", "empty"),
                py("/srv/venv/lib/python3.11/site-packages/cupyx/scipy/sparse/_coo.py", "coo_matrix.__init__"),
                py("/usr/lib/python3.11/ctypes/__init__.py", "__getitem__"),
                py("/home/u/cupy_pool.py", "make_buffers"),
            ],
            native: vec![],
        };
        assert_eq!(short(&cupy).unwrap(), "cupy_pool.py:make_buffers");
        let info = Site {
            python: vec![py("/opt/torch-src/torch/cuda/memory.py", "mem_get_info"), py("/w/probe.py", "probe")],
            native: vec![],
        };
        assert_eq!(short(&info).unwrap(), "probe.py:probe", "a source checkout of torch is torch's too");
        let c = Site { python: vec![py("/a/m.py", "f.<locals>.<listcomp>"), py("/a/m.py", "f")], native: vec![] };
        assert_eq!(short(&c).unwrap(), "m.py:f");
        // CPython 3.13+'s `__init__` shim between a class call and the caller.
        let shim = Site { python: vec![py("__init__", "__init__"), py("/a/m.py", "Pool.__init__")], native: vec![] };
        assert_eq!(short(&shim).unwrap(), "m.py:Pool.__init__");
        let n = Site {
            python: vec![py("<frozen runpy>", "_run_code")],
            native: vec![
                nat("libculedger.so", Some("cudaMalloc"), true),
                nat("libnccl.so.2", Some("ncclCommInitRank"), false),
            ],
        };
        assert_eq!(short(&n).unwrap(), "libnccl.so.2!ncclCommInitRank");
        let anon = Site { python: vec![], native: vec![nat("engine", None, false)] };
        assert_eq!(short(&anon).unwrap(), "engine+0x10");
        assert_eq!(short(&Site::default()), None);
    }

    #[test]
    fn the_resolver_names_known_sites_and_fills_the_health_fields() {
        use crate::ledger::SiteResolver;
        let id =
            TABLE.get().lock().intern(&[0xdead_beef, 1], Site { python: vec![py("/a/m.py", "f")], native: vec![] });
        let unknown = u32::MAX;
        let got = TableResolver.resolve(&[id, unknown].into_iter().collect());
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), [id], "an id the table does not know is left out");
        let (rec, caller) = &got[&id];
        assert_eq!(caller.as_deref(), Some("m.py:f"));
        assert_eq!((rec.id, rec.python[0].function.as_str()), (i64::from(id), "f"));
        let mut h = Health { site_misses: u64::MAX, ..Health::default() };
        TableResolver.health(&mut h);
        assert_eq!(h.site_misses, misses());
    }
}
