//! Lazy module loading (`CUDA_MODULE_LOADING=LAZY`, the default since CUDA 12.2): a library
//! loaded with `cuLibraryLoadData`/`cuLibraryLoadFromFile` takes no device memory then; the
//! driver loads it into a context, taking its memory there, when something first needs it in
//! that context: a launch of one of its kernels, `cuKernelGetFunction`, `cuLibraryGetModule`,
//! `cuLibraryGetGlobal`. The hooks measure that first use per (library, context) and record it
//! as a driver cost named for the library; this table is what they need to tell a first use:
//! where each library came from, which library each kernel handle belongs to, and which
//! (library, context) pairs are loaded (or being loaded by a measured call).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Kernel handles remembered at most (beyond, a kernel's first launch is not measured; its
/// library's other triggers still are).
const KERNELS_KEPT: usize = 1 << 20;
/// Libraries remembered at most.
const LIBRARIES_KEPT: usize = 1 << 16;

/// Where a library's image came from: the address of the image in memory (a fatbin inside a
/// shared object: named by the object's file when first used), or the file it was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LibrarySource {
    Image(u64),
    File(Arc<str>),
}

/// What a first use of something in a context means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirstUse {
    /// Not a kernel of a known library (a `CUfunction`, whose getter was the first use), or
    /// a library not known: nothing to measure.
    Unknown,
    /// The library is loaded in the context already (or being loaded by another call).
    Loaded,
    /// The first use of `library` in the context: the caller measures it, then calls
    /// [`super::Ledger::lazy_release`] if the call failed.
    First { library: u64, source: LibrarySource },
}

#[derive(Debug, Default)]
pub(crate) struct LazyTable {
    libraries: HashMap<u64, LibrarySource>,
    kernels: HashMap<u64, u64>,
    loaded: HashSet<(u64, u64)>,
}

impl LazyTable {
    pub(crate) fn library(&mut self, library: u64, source: LibrarySource) {
        self.unload(library);
        if self.libraries.len() < LIBRARIES_KEPT {
            self.libraries.insert(library, source);
        }
    }

    pub(crate) fn kernel(&mut self, kernel: u64, library: u64) {
        if self.libraries.contains_key(&library)
            && (self.kernels.len() < KERNELS_KEPT || self.kernels.contains_key(&kernel))
        {
            self.kernels.insert(kernel, library);
        }
    }

    pub(crate) fn unload(&mut self, library: u64) {
        if self.libraries.remove(&library).is_some() {
            self.kernels.retain(|_, l| *l != library);
            self.loaded.retain(|(l, _)| *l != library);
        }
    }

    /// `library` used in `ctx`: its first use there is claimed by the caller.
    pub(crate) fn claim_library(&mut self, library: u64, ctx: u64) -> FirstUse {
        let Some(source) = self.libraries.get(&library) else {
            return FirstUse::Unknown;
        };
        if self.loaded.insert((library, ctx)) {
            FirstUse::First { library, source: source.clone() }
        } else {
            FirstUse::Loaded
        }
    }

    /// Kernel (or function) handle `f` used in `ctx`.
    pub(crate) fn claim_kernel(&mut self, f: u64, ctx: u64) -> FirstUse {
        match self.kernels.get(&f) {
            Some(&library) => self.claim_library(library, ctx),
            None => FirstUse::Unknown,
        }
    }

    /// A claimed first use whose call failed: the library is not loaded in `ctx`.
    pub(crate) fn release(&mut self, library: u64, ctx: u64) {
        self.loaded.remove(&(library, ctx));
    }

    /// Is `f` a kernel handle of a known library?
    pub(crate) fn is_kernel(&self, f: u64) -> bool {
        self.kernels.contains_key(&f)
    }
}

impl super::Ledger {
    /// `library` was loaded (context-independent, lazily) from `source`.
    pub fn lazy_library(&self, library: u64, source: LibrarySource) {
        self.lazy.lock().library(library, source);
    }

    /// `kernel` is a kernel of `library` (`cuLibraryGetKernel`).
    pub fn lazy_kernel(&self, kernel: u64, library: u64) {
        self.lazy.lock().kernel(kernel, library);
    }

    /// `library` was unloaded: forget it, its kernels and where it was loaded.
    pub fn lazy_unload(&self, library: u64) {
        self.lazy.lock().unload(library);
    }

    /// `library` is used in context `ctx`; [`FirstUse::First`] claims its first use there.
    pub fn lazy_claim_library(&self, library: u64, ctx: u64) -> FirstUse {
        self.lazy.lock().claim_library(library, ctx)
    }

    /// Kernel handle `f` (or a function handle: [`FirstUse::Unknown`]) is used in `ctx`.
    pub fn lazy_claim_kernel(&self, f: u64, ctx: u64) -> FirstUse {
        self.lazy.lock().claim_kernel(f, ctx)
    }

    /// A claimed first use failed: `library` is not loaded in `ctx`.
    pub fn lazy_release(&self, library: u64, ctx: u64) {
        self.lazy.lock().release(library, ctx);
    }

    /// Is `f` a kernel handle of a known library?
    pub fn lazy_is_kernel(&self, f: u64) -> bool {
        self.lazy.lock().is_kernel(f)
    }

    /// The measured lazy loading of `library` (its file's name) on `dev`, first used there by
    /// `api`: a driver cost named for the library.
    pub fn lazy_load_cost(
        &self,
        dev: i32,
        api: &'static str,
        library: &Arc<str>,
        bytes: i64,
        site: u32,
        start_us: u64,
    ) {
        self.on_device(dev, api, |d, now| d.driver_cost_of(api, Some(library), bytes, site, Some(start_us), now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_use_per_library_and_context() {
        let mut t = LazyTable::default();
        let src = LibrarySource::Image(0x1000);
        t.library(0xa, src.clone());
        t.kernel(0x1a, 0xa);
        t.kernel(0x2a, 0xa);
        t.kernel(0x1b, 0xb); // library not known: not kept
        assert_eq!(t.claim_kernel(0x1b, 1), FirstUse::Unknown);
        assert_eq!(t.claim_kernel(0x1a, 1), FirstUse::First { library: 0xa, source: src.clone() });
        assert_eq!(t.claim_kernel(0x2a, 1), FirstUse::Loaded, "another kernel of the loaded library");
        assert_eq!(t.claim_library(0xa, 1), FirstUse::Loaded);
        assert_eq!(t.claim_kernel(0x2a, 2), FirstUse::First { library: 0xa, source: src.clone() }, "another context");
        t.release(0xa, 2);
        assert_eq!(t.claim_library(0xa, 2), FirstUse::First { library: 0xa, source: src.clone() }, "a failed load");
        t.unload(0xa);
        assert!(!t.is_kernel(0x1a));
        assert_eq!(t.claim_library(0xa, 1), FirstUse::Unknown);
        let file = LibrarySource::File(Arc::from("k.cubin"));
        t.library(0xa, file.clone());
        assert_eq!(t.claim_library(0xa, 1), FirstUse::First { library: 0xa, source: file }, "loaded again: new");
    }
}
