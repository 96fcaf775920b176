//! What a library asks of its modules besides kernels: the library a kernel belongs to, the
//! address of a global variable (`cuLibraryGetGlobal`, behind the runtime's
//! `cudaGetSymbolAddress`/`cudaMemcpyToSymbol`; `cuModuleGetGlobal`), and the JIT linker
//! (`cuLink*`). cuBLAS 13 and cuBLASLt `dlsym` `cuKernelGetLibrary`, `cuModuleGetGlobal_v2` and
//! the linker straight from `libcuda.so.1` and fail `cublasCreate` with
//! `CUBLAS_STATUS_INTERNAL_ERROR` when one is missing; their runtime's `cudaGetSymbolAddress`
//! needs `cuLibraryGetGlobal`.
//!
//! The fake reads no images: any name is a global of the module ([`Proc::global`]: a device
//! range of the module in the context, which a copy may target and nothing may free), and the
//! linker's "cubin" is its inputs laid end to end (the fake's module loads accept any image).

use crate::api::exec::kernel_library;
use crate::out;
use crate::state::{handle, tag, tag_of, with_init, Link, Proc, GLOBAL_BYTES, R};
use crate::types::*;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_uint, c_void};

/// `name` as text (NULL: `CUDA_ERROR_INVALID_VALUE`).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn symbol<'a>(name: *const c_char) -> R<&'a str> {
    if name.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    CStr::from_ptr(name).to_str().map_err(|_| CUDA_ERROR_NOT_FOUND)
}

/// A global of module `hmod`: a module loaded into a context, or a library's module in the
/// current context (`cuLibraryGetModule`), which loading it there charges if it was not yet.
fn module_global(p: &mut Proc, hmod: u64, name: &str) -> R<u64> {
    match tag_of(hmod) {
        tag::MODULE => {
            let m = p.modules.get(&hmod).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            let (ctx, dev) = (m.ctx, m.dev);
            p.global(hmod, ctx, dev, name)
        }
        tag::LIBRARY_MODULE => {
            let lib = handle(tag::LIBRARY, hmod);
            let (ctx, dev) = p.use_library(lib)?;
            p.global(lib, ctx, dev, name)
        }
        _ => Err(CUDA_ERROR_INVALID_HANDLE),
    }
}

/// `cuModuleGetGlobal_v2`'s body: `dptr` or `bytes` may be NULL, not both.
unsafe fn get_global(hmod: u64, name: *const c_char, null_outs: bool) -> R<u64> {
    let name = symbol(name)?;
    if null_outs {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    with_init(|p| module_global(p, hmod, name))
}

/// Writes a global's address and size through whichever out-pointer is not NULL.
unsafe fn write_global(dptr: *mut CUdeviceptr, bytes: *mut usize, d: u64) {
    if !dptr.is_null() {
        dptr.write(d);
    }
    if !bytes.is_null() {
        bytes.write(GLOBAL_BYTES as usize);
    }
}

/// Options of a link call: `num` entries in both arrays.
fn options_ok(num: c_uint, options: *mut c_int, values: *mut *mut c_void) -> bool {
    num == 0 || (!options.is_null() && !values.is_null())
}

/// `cuLinkCreate`/`_v2`: a pending link for the current context.
unsafe fn link_create(num: c_uint, options: *mut c_int, values: *mut *mut c_void, state_out: *mut *mut c_void) -> R {
    let h = with_init(|p| {
        p.current()?;
        if state_out.is_null() || !options_ok(num, options, values) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = p.new_handle(tag::LINK);
        p.links.insert(h, Link::default());
        Ok(h)
    })?;
    state_out.write(h as *mut c_void);
    Ok(())
}

/// `cuLinkAddData`/`_v2`: an input of a known `CUjitInputType` (CUBIN..NVVM), non-empty.
#[allow(clippy::too_many_arguments)]
unsafe fn link_add(
    state: *mut c_void,
    input_type: c_int,
    data: *mut c_void,
    size: usize,
    num: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> R {
    with_init(|p| {
        let link = p.links.get_mut(&(state as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if data.is_null() || size == 0 || !(0..=5).contains(&input_type) || !options_ok(num, options, values) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        link.inputs.extend_from_slice(std::slice::from_raw_parts(data.cast::<u8>(), size));
        Ok(())
    })
}

entry! {
    fn cuKernelGetLibrary(p_lib: *mut CUlibrary, kernel: *mut c_void) {
        let lib = with_init(|p| {
            if p_lib.is_null() {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            kernel_library(p, kernel)
        })?;
        out(p_lib, lib as CUlibrary)
    }

    /// A global of `library` in the current context (loading the library there).
    fn cuLibraryGetGlobal(dptr: *mut CUdeviceptr, bytes: *mut usize, library: CUlibrary, name: *const c_char) {
        let name = symbol(name)?;
        if dptr.is_null() && bytes.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let lib = library as u64;
        let d = with_init(|p| {
            if tag_of(lib) != tag::LIBRARY || !p.libraries.contains_key(&lib) {
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
            let (ctx, dev) = p.use_library(lib)?;
            p.global(lib, ctx, dev, name)
        })?;
        write_global(dptr, bytes, d);
        Ok(())
    }

    fn cuModuleGetGlobal_v2(dptr: *mut CUdeviceptr, bytes: *mut usize, hmod: CUmodule, name: *const c_char) {
        let d = get_global(hmod as u64, name, dptr.is_null() && bytes.is_null())?;
        write_global(dptr, bytes, d);
        Ok(())
    }

    /// The 32-bit ABI: a global above 4 GiB does not fit its device pointer.
    fn cuModuleGetGlobal(dptr: *mut CUdeviceptrV1, bytes: *mut c_uint, hmod: CUmodule, name: *const c_char) {
        let d = get_global(hmod as u64, name, dptr.is_null() && bytes.is_null())?;
        if !dptr.is_null() {
            dptr.write(CUdeviceptrV1::try_from(d).map_err(|_| CUDA_ERROR_INVALID_VALUE)?);
        }
        if !bytes.is_null() {
            bytes.write(GLOBAL_BYTES as c_uint);
        }
        Ok(())
    }

    fn cuLinkCreate_v2(num_options: c_uint, options: *mut c_int, option_values: *mut *mut c_void, state_out: *mut *mut c_void) {
        link_create(num_options, options, option_values, state_out)
    }

    fn cuLinkCreate(num_options: c_uint, options: *mut c_int, option_values: *mut *mut c_void, state_out: *mut *mut c_void) {
        link_create(num_options, options, option_values, state_out)
    }

    fn cuLinkAddData_v2(state: *mut c_void, input_type: c_int, data: *mut c_void, size: usize, name: *const c_char, num_options: c_uint, options: *mut c_int, option_values: *mut *mut c_void) {
        let _ = name;
        link_add(state, input_type, data, size, num_options, options, option_values)
    }

    fn cuLinkAddData(state: *mut c_void, input_type: c_int, data: *mut c_void, size: usize, name: *const c_char, num_options: c_uint, options: *mut c_int, option_values: *mut *mut c_void) {
        let _ = name;
        link_add(state, input_type, data, size, num_options, options, option_values)
    }

    /// The image is owned by the link: valid until `cuLinkDestroy` (or the next completion).
    fn cuLinkComplete(state: *mut c_void, cubin_out: *mut *mut c_void, size_out: *mut usize) {
        let (ptr, len) = with_init(|p| {
            let link = p.links.get_mut(&(state as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if cubin_out.is_null() {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            link.image = link.inputs.clone();
            Ok((link.image.as_mut_ptr(), link.image.len()))
        })?;
        cubin_out.write(ptr.cast());
        if !size_out.is_null() {
            size_out.write(len);
        }
        Ok(())
    }

    fn cuLinkDestroy(state: *mut c_void) {
        with_init(|p| p.links.remove(&(state as u64)).map(|_| ()).ok_or(CUDA_ERROR_INVALID_HANDLE))
    }
}
