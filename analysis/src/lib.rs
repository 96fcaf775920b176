//! The analysis of a culedger run, shared by every command of the CLI: what it reads
//! ([`load`]), which processes form one run and which part of it a command asked for
//! ([`runs`]), the run's clock ([`clock`]), the engines' sizing formulas read from the rule
//! packs ([`engines`]), call sites and the frames that explain them ([`callers`]), one
//! process's records on one device as steps, with its bursts and sizing queries ([`steps`]),
//! the processes of each physical GPU together ([`groups`]), the hidden driver costs de-noised
//! ([`costs`]), two runs' figures side by side ([`compare`]), who allocated ([`sites`]: the
//! callers' rows of a device, the callers that grew between two runs), how a process is named
//! ([`process`]), the device figures the commands name ([`figures`]), a failure's or a
//! window's reconciliation item by item ([`recon`]), the engine's sizing formula evaluated on
//! the run ([`sizing`]), the findings of `explain` ([`findings`]), how many times each part
//! was computed
//! ([`counts`]), and the thresholds the findings decide by ([`thresholds`]), and the values of
//! the CLI's JSON outputs (`report`'s [`summary`], `explain`'s [`explain`] and [`explanation`], [`diff`],
//! [`whatif`]), and one run's analysis with each part computed once ([`run_analysis`]).
//! Everything here is numbers and typed values; the words that tell them (messages,
//! sentences, tables) are written by the CLI's renderers.
//!
//! The layers only call down: `culedger-format` (the report's types) <- this crate <- the
//! CLI's commands and renderers.

pub mod advice;
pub mod callers;
pub mod clock;
pub mod costs;
pub mod engines;
pub mod compare;
pub mod counts;
pub mod diff;
pub mod explain;
pub mod explanation;
pub mod figures;
pub mod findings;
pub mod groups;
pub mod load;
pub mod process;
pub mod recon;
pub mod run_analysis;
pub mod runs;
pub mod sites;
pub mod sizing;
pub mod steps;
pub mod summary;
#[cfg(test)]
mod testing;
pub mod thresholds;
pub mod whatif;

/// The report as the analysis reads it: the format crate the interposer writes it with.
pub use culedger_format::report as model;
