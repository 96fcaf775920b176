"""A package whose named functions allocate on the simulated stack (tests/call_sites.rs)."""
