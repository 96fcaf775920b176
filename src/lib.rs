//! culedger: an LD_PRELOAD library that accounts every byte of GPU memory a process
//! allocates, per device and per category, and writes `culedger-<pid>.json`.
//!
//! Layout: `hooks` (C ABI face, symbol table, resolution paths), `ledger` (pure
//! bookkeeping), `classify` (facts to categories), `report` (JSON, files, lifecycle),
//! `config` and `log` (environment settings, stderr logging).

pub mod classify;
pub mod config;
pub mod hooks;
pub mod ledger;
pub mod log;
pub mod report;
pub mod sync;
