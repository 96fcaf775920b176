//! The analysis of a culedger run, shared by every command of the CLI: what it reads
//! ([`load`]), which processes form one run and which part of it a command asked for
//! ([`runs`]), two runs' figures side by side ([`compare`]). Everything here is numbers and typed values; the words that tell them
//! (messages, sentences, tables) are written by the CLI's renderers.
//!
//! The layers only call down: `culedger-format` (the report's types) <- this crate <- the
//! CLI's commands and renderers.

pub mod compare;
pub mod load;
pub mod runs;

/// The report as the analysis reads it: the format crate the interposer writes it with.
pub use culedger_format::report as model;
