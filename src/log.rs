//! Logging to stderr, only when asked (CULEDGER_LOG).

// Placeholder until the report/config work lands (replaced by the real module).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Level { Off, Warn, Info, Debug }
pub fn enabled(_: Level) -> bool { false }
pub fn warn(msg: &str) { let _ = msg; }
