//! "What to change": the engine's sizing formula (`engines`) evaluated on the run's own
//! queries, and the value of its parameter that makes the failed (or refused) start fit.
//!
//! How the checks and the failures bound the value: `culedger_analysis::advice`.
//!
//! `culedger_analysis::sizing` evaluates the formula on the run (`sizing_words` words it);
//! `culedger_analysis::advice` turns it into the recommendation as typed values; `words` writes
//! its sentences (`Advice`, culedger-explain/1's `what_to_change`).
pub mod sizing_words;
pub mod words;

pub use sizing_words::*;
