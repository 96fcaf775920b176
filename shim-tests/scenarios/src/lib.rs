//! Shared helpers for scenario programs and integration tests.
