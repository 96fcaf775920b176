//! Logging to stderr, only when asked (CULEDGER_LOG).
