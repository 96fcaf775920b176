//! Settings from CULEDGER_* environment variables.
