//! A short memcheck run in `make test`: scenario programs under culedger (the release library,
//! as users preload it) with valgrind's memcheck, following forks, with the suppressions of
//! `make valgrind` (shim-tests/valgrind/culedger.supp, each with its reason). Any error
//! (uninitialised value, invalid access, definite leak) in any process fails the test. The
//! full set of runs, and helgrind, is `make valgrind` (docs/reliability.md).
//!
//! Needs valgrind: the machine's, or Debian's that `make test-deps` unpacks into
//! target/test-deps/valgrind. Not skipped when missing: the test fails and says how to get it.
//! Skipped only for a simulated stack run behind an emulator (`CULEDGER_SIM_RUNNER`, the
//! aarch64 run), where valgrind cannot follow.

use std::path::PathBuf;
use std::process::Command;

use culedger_scenarios::reports::libculedger;
use culedger_scenarios::Sim;

/// The machine's valgrind, else the one `make test-deps` unpacked.
fn valgrind() -> Command {
    if Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Command::new("valgrind");
    }
    let local = culedger_scenarios::repo_root().join("target/test-deps/valgrind");
    let bin = local.join("usr/bin/valgrind.bin");
    assert!(
        bin.is_file(),
        "valgrind is not installed and {} is missing: run `make test-deps` (it unpacks Debian's valgrind)",
        bin.display()
    );
    let mut cmd = Command::new(bin);
    cmd.env("VALGRIND_LIB", local.join("usr/libexec/valgrind"));
    cmd
}

/// Runs `program args` under memcheck and returns (exit code, per-process error counts, log).
fn memcheck(sim: &Sim, program: &str, args: &[&str]) -> (Option<i32>, Vec<u64>, String) {
    let log = sim.scratch().join(format!("memcheck-{program}-%p.log"));
    let mut cmd = valgrind();
    cmd.args([
        "--tool=memcheck",
        "--trace-children=yes",
        "--num-callers=50",
        "--error-exitcode=99",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--show-leak-kinds=definite",
    ])
    .arg(format!("--suppressions={}", suppressions().display()))
    .arg(format!("--log-file={}", log.display()))
    .arg(culedger_scenarios::bin(program))
    .args(args);
    sim.apply_env(&mut cmd);
    cmd.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", sim.scratch().join("out")).env("CULEDGER_FLUSH_MS", "20");
    let run = sim.run(&mut cmd);
    let mut counts = Vec::new();
    let mut text = String::new();
    for entry in std::fs::read_dir(sim.scratch()).expect("scratch").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&format!("memcheck-{program}-")) {
            continue;
        }
        let body = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in body.lines() {
            if let Some(rest) = line.split("ERROR SUMMARY: ").nth(1) {
                counts.push(rest.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(u64::MAX));
            }
        }
        text.push_str(&body);
        let _ = std::fs::remove_file(entry.path());
    }
    (run.status.and_then(|s| s.code()), counts, text)
}

fn suppressions() -> PathBuf {
    culedger_scenarios::repo_root().join("shim-tests/valgrind/culedger.supp")
}

fn check(program: &str, args: &[&str], processes: usize) {
    if !culedger_scenarios::runner().is_empty() {
        eprintln!("valgrind_smoke: skipped behind CULEDGER_SIM_RUNNER (an emulated stack)");
        return;
    }
    let mut sim = Sim::new(&format!("valgrind {program} {}", args.join(" ")));
    sim.timeout(std::time::Duration::from_secs(300));
    let (code, counts, log) = memcheck(&sim, program, args);
    let clean = code == Some(0) && counts.len() == processes && counts.iter().all(|&n| n == 0);
    assert!(clean, "memcheck on {program} {args:?}: exit {code:?}, errors per process {counts:?}\n{log}");
}

/// One process through the runtime: allocations with call sites, queries, the report.
#[test]
fn memcheck_runtime_basic() {
    check("rt_ledger", &["basic"], 1);
}

/// A fork child: it replaces the parent's ledger and call-site tables (kept reachable on
/// purpose) and writes its own report.
#[test]
fn memcheck_fork_child() {
    check("rt_ledger", &["fork"], 2);
}

/// The driver API resolved through cuGetProcAddress.
#[test]
fn memcheck_driver_entry_points() {
    check("rt_ledger", &["entry"], 1);
}
