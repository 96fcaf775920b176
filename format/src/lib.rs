//! What the writer of a culedger report (the interposer, `libculedger.so`) and its reader
//! (the `culedger` command line) must agree on, kept in one place so that the two cannot
//! drift apart:
//! - [`report`]: the `culedger/1` report's types as serde structs (docs/schema.md) and the
//!   `culedger-summary/1` tag;
//! - [`category`]: the memory categories, in the order the schema fixes;
//! - [`site`]: the short form of a call site (`caller`), from its frames;
//! - [`redact`]: the redaction of secrets in the command line written to `process.argv`;
//! - [`glob`]: the patterns of the rule language (`rules/*.json`), which the classifier
//!   and `culedger explain` both match with;
//! - [`rules`]: the one reader of the rule packs (the shipped `rules/*.json` and a user's
//!   file), with the engines' sizing formulas typed, for the classifier and the CLI alike.
//!
//! The interposer links this crate, so it depends on nothing but serde and serde_json, and
//! nothing here may panic on any input.

pub mod category;
pub mod glob;
pub mod redact;
pub mod report;
pub mod rules;
pub mod site;

pub use category::{Category, ALL, CATEGORIES};
