//! The exported driver entry points, grouped by area. Every function has the exact C signature of
//! `cuda.h` 12.9 (the `_v1` ABIs those of the `__CUDA_API_VERSION_INTERNAL` section).
//!
//! Private helpers declared `unsafe fn` receive the caller's raw C pointers: they check NULL where
//! the API allows it and otherwise rely on the C contract (valid, writable out-pointers).

pub mod copy;
pub mod ctx;
pub mod exec;
pub mod export;
pub mod ipc;
pub mod mem;
pub mod module;
pub mod occupancy;
pub mod stream;
pub mod tensormap;
pub mod vmm;
