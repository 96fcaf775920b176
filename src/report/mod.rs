//! The JSON report: atomic writes, the flush thread, exit and fork.
//!
//! API CONTRACT (used by src/hooks):
//! - `activate()`: called by every hook that recorded something; the first call registers
//!   atexit/atfork handlers and starts the flush thread. Cheap after the first call.
//! - `final_write(exit_code: Option<i32>)`: write the final report now (atexit, _exit).
pub fn activate() {}
