//! culedger: an LD_PRELOAD library that accounts every byte of GPU memory a process
//! allocates, per device and per category, and writes one JSON report per process
//! (`culedger-<host>-<pid>-<start_ms>.json`).
//!
//! Layout: `hooks` (C ABI face, symbol table, resolution paths), `ledger` (pure
//! bookkeeping), `classify` (facts to categories), `report` (JSON, files, lifecycle),
//! `config` and `log` (environment settings, stderr logging), `gpu` (what the driver and NVML
//! say about the physical devices, asked by the report writer), `sites` (who allocated: Python
//! and native frames of the calling thread, read without the GIL), `rt` (the ground floor
//! all of them stand on: the per-thread state of a hooked call, the `dlopen` ring, the real
//! libc and loader entry points). The report's types, categories, a site's short form and
//! redaction are the `culedger_format` crate's, shared with the CLI.

pub mod classify;
pub mod config;
pub mod gpu;
pub mod hooks;
pub mod ledger;
pub mod log;
mod pages;
pub mod report;
pub mod rt;
pub mod sites;
pub mod sync;
