//! `make bench` keeps working: the harness, in its quick mode, measures every figure of the
//! table on the minimal driver (the figures themselves are checked by `make bench`, never here).

use std::process::Command;

#[test]
fn bench_harness_prints_every_figure() {
    let out = Command::new(env!("CARGO_BIN_EXE_culedger_bench")).arg("--quick").output().expect("run culedger_bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "culedger_bench --quick failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for figure in [
        "never touches CUDA: start-up to exit",
        "never touches CUDA: files and directories written, threads",
        "alloc+free pair, 1 thread, dynamic runtime",
        "alloc+free pair, 1 thread, static runtime",
        "alloc+free pair, 16 threads on 8 devices, per pair (CPU time)",
        "alloc+free pair, 16 threads on 8 devices, per pair (wall x",
        "host-to-device copy, cudaMemcpy ",
        "host-to-device copy, cudaMemcpyAsync",
        "free-memory query, cudaMemGetInfo",
        "dlsym of a non-CUDA name, on a handle",
        "dlsym of a non-CUDA name, RTLD_DEFAULT",
        "resident memory per live allocation",
        "report write at exit",
        "report size",
        "call-site capture per large allocation",
        "alloc+free pair, 2 MiB, one call site (site proven), cuGetProcAddress path",
        "alloc+free pair, 2 MiB, CULEDGER_SITE_MIN=1GiB, growing addresses",
        "alloc+free pair, 2 MiB, CULEDGER_SITE_MIN=1GiB, reused addresses",
        "free-memory query, cuMemGetInfo, repeated from one site",
        "host-to-device copy, cuMemcpyHtoD",
    ] {
        let line = stdout.lines().find(|l| l.starts_with(figure)).unwrap_or_else(|| panic!("no {figure:?}:\n{stdout}"));
        let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 6, "{line}");
        // A measured value (with culedger) and a target; "met" is yes or NO, never missing.
        assert!(cells[2].chars().next().is_some_and(|c| c.is_ascii_digit()), "{line}");
        assert!(!cells[4].is_empty() && (cells[5] == "yes" || cells[5] == "NO"), "{line}");
    }
    // The process that never touches CUDA: nothing written, no thread started.
    assert!(stdout.contains("| 0 files, 1 thread(s) |"), "{stdout}");
}
