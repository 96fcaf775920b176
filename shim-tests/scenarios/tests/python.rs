//! The ctypes scenario (SGLang / vLLM `CudaRTLibrary` style) on the fake runtime.

mod common;

use common::*;

#[test]
fn ctypes_runtime_ipc_with_subprocess_and_spawn_children() {
    let sim = machine("ctypes_rt");
    let run = sim.run_ok(&mut sim.python("ctypes_rt.py"));
    assert!(run.value("lib_path").ends_with("/libcudart.so.12"), "{}", run.describe());
    assert_eq!(run.u64("alloc_delta"), 16 * MIB);
    assert_eq!(run.u64("copy_ok"), 1);
    assert_eq!(run.value("handle_hex").len(), 128);
    for who in ["child", "mp"] {
        assert_eq!(run.u64(&format!("{who}_open_error")), 0, "{who}\n{}", run.describe());
        assert_eq!(run.u64(&format!("{who}_device")), 1);
        assert_eq!(run.u64(&format!("{who}_close_error")), 0);
        assert_eq!(run.u64(&format!("{who}_status")), 0);
    }
    assert_eq!(run.u64("bad_free_error"), err::INVALID_VALUE);
    assert_eq!(run.u64("freed_delta"), 0);
}
