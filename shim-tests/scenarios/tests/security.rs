//! culedger reads no file the user did not name: under `strace -f`, every file system call a
//! program makes with culedger preloaded and not without it is one of the documented few
//! (docs/reliability.md, "Limits, bad input and security"): the dynamic loader mapping the
//! library, `/proc/self/cmdline`, the `/proc/self/exe` link, and the output directory.
//!
//! Needs `strace`: the machine's, or Debian's that `make test-deps` unpacks into target/; skipped
//! with a notice where neither is there.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use culedger_scenarios::reports::libculedger;
use culedger_scenarios::Sim;

/// `s` with every run of digits replaced by one `N` (pids, sequence numbers).
fn normalize(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('N') {
            out.push('N');
        }
    }
    out
}

/// `(syscall, path)` of every call with a path argument in an `strace -f` log, normalised.
fn path_calls(log: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for line in log.lines() {
        // "1234  openat(AT_FDCWD, \"/path\", O_RDONLY) = 3"
        let rest = line.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ');
        let Some((call, args)) = rest.split_once('(') else { continue };
        let Some(start) = args.find('"') else { continue };
        let Some(len) = args[start + 1..].find('"') else { continue };
        out.insert((call.to_string(), normalize(&args[start + 1..start + 1 + len])));
    }
    out
}

/// The machine's strace, else the one `make test-deps` unpacked into target/test-deps/strace.
fn strace() -> Command {
    let local = culedger_scenarios::repo_root().join("target/test-deps/strace");
    let bin = local.join("usr/bin/strace");
    if Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success()) || !bin.exists() {
        return Command::new("strace");
    }
    let mut cmd = Command::new(bin);
    cmd.env("LD_LIBRARY_PATH", local.join(format!("usr/lib/{}-linux-gnu", std::env::consts::ARCH)));
    cmd
}

fn traced(sim: &Sim, log: &Path, program: &str, args: &[&str]) -> BTreeSet<(String, String)> {
    let mut cmd = strace();
    cmd.args(["-f", "-qq", "-e", "trace=%file", "-e", "signal=none", "-o"])
        .arg(log)
        .arg(culedger_scenarios::bin(program))
        .args(args);
    // strace's own libraries (a fetched strace) stay on its path after the simulation's.
    let own = cmd.get_envs().find(|(k, _)| *k == "LD_LIBRARY_PATH").and_then(|(_, v)| v.map(|v| v.to_owned()));
    sim.apply_env(&mut cmd);
    if let Some(own) = own {
        let sim_path = cmd.get_envs().find(|(k, _)| *k == "LD_LIBRARY_PATH").and_then(|(_, v)| v.map(|v| v.to_owned()));
        let mut path = sim_path.unwrap_or_default();
        path.push(":");
        path.push(own);
        cmd.env("LD_LIBRARY_PATH", path);
    }
    sim.run_ok(&mut cmd);
    path_calls(&std::fs::read_to_string(log).unwrap().replace(sim.machine(), "MACHINE"))
}

#[test]
fn culedger_reads_no_file_the_user_did_not_name() {
    if strace().arg("-V").output().map(|o| !o.status.success()).unwrap_or(true) {
        eprintln!(
            "culedger_reads_no_file_the_user_did_not_name: strace is not installed nor fetched (make test-deps); skipped"
        );
        return;
    }
    for (program, args) in [("rt_ledger", &["basic"][..]), ("drv_ledger", &["basic"][..]), ("rt_ledger", &["fork"][..])]
    {
        let plain = Sim::new("files_plain");
        let without = traced(&plain, &plain.scratch().join("strace.log"), program, args);
        let mut sim = Sim::new("files");
        let out = sim.scratch().join("reports");
        let lib = libculedger();
        sim.env("LD_PRELOAD", &lib).env("CULEDGER_OUT", &out).env("CULEDGER_FLUSH_MS", "20");
        let with = traced(&sim, &sim.scratch().join("strace.log"), program, args);
        let out = normalize(&out.to_string_lossy().replace(sim.machine(), "MACHINE"));
        let lib = normalize(&lib.to_string_lossy());
        let unexpected: Vec<_> = with
            .difference(&without)
            .filter(|(call, path)| {
                let allowed = path == &lib // the dynamic loader maps the preloaded library
                    || call == "getcwd" // a relative CULEDGER_OUT is made absolute
                    || path.starts_with(&out) // the output directory, its files
                    || path == "/proc/self/cmdline" // process.argv, process.title
                    || path == "/proc/self/comm" // process.comm
                    || path == "/proc/self/stat" // the process's start time (report names, temporaries)
                    || path == "/proc/self/maps" // call sites: which memory is readable (docs/sites.md)
                    // the flush thread's liveness poll every 25 ms: is it the last thread left
                    // (docs/reliability.md); a program that lives that long shows it
                    || (call.contains("stat") && path == "/proc/self/task")
                    || (call == "readlink" && path == "/proc/self/ns/pid") // a writer's pid namespace
                    || path == "/proc/sys/kernel/random/boot_id" // a writer's boot, for stale temporaries
                    || (call == "readlink" && path == "/proc/self/exe") // process.exe
                    // the flush thread's NVML reading of device usage (docs/reliability.md): the
                    // loader's search for libnvidia-ml.so.1, and the library it maps
                    || path.contains("libnvidia-ml.so")
                    || (call == "execve" && path.ends_with(program)); // strace starting the program
                !allowed
            })
            .collect();
        assert!(unexpected.is_empty(), "{program} {args:?}: culedger touched {unexpected:#?}");
        // And it did write where it was told to.
        // (The first write links its temporary to a fresh name; later ones rename over it.)
        let wrote = |(call, p): &(String, String)| (call == "rename" || call == "linkat") && p.starts_with(&out);
        assert!(with.iter().any(wrote), "{with:#?}");
    }
}
