//! Bad input around the interposer (docs/reliability.md, "Limits, bad input and security"):
//! output directories that are symlinks, files, read-only, another user's or full; report and
//! temporary names planted as symlinks; drivers missing entry points; the resolver and `dlsym`
//! asked for odd things. In every case the program behaves exactly as without culedger, culedger
//! says at most one line, and any report on disk is a complete document.
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use culedger_scenarios::reports::{culedger_lines, device, int, libculedger, mode_of, reports_in, temporaries_in};
use culedger_scenarios::{repo_root, sim_dir, Run, Sim};

const MIB: u64 = 1 << 20;

/// A machine whose programs run under culedger (flushing every 50 ms) into `out` unless the
/// test points `CULEDGER_OUT` elsewhere.
fn preloaded(name: &str) -> (Sim, PathBuf) {
    let mut sim = Sim::new(name);
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out).env("CULEDGER_FLUSH_MS", "50");
    (sim, out)
}

/// The same command on a machine without culedger, for comparison.
fn plain_run(name: &str, program: &str, args: &[&str], envs: &[(&str, &str)]) -> Run {
    let mut sim = Sim::new(name);
    for (k, v) in envs {
        sim.env(k, v);
    }
    sim.run(sim.cmd(program).args(args))
}

/// The program behaved as without culedger: same exit status and the same stdout.
fn unharmed(plain: &Run, with: &Run) {
    let status = |r: &Run| r.status.map(|s| (s.code(), s.signal()));
    assert_eq!(status(plain), status(with), "exit status differs\n{}\n{}", plain.describe(), with.describe());
    assert_eq!(plain.stdout, with.stdout, "stdout differs under culedger\n{}", with.describe());
}

fn one_warning(run: &Run, about: &str) -> String {
    let lines = culedger_lines(run);
    assert_eq!(lines.len(), 1, "expected exactly one culedger line:\n{}", run.stderr);
    assert!(lines[0].contains(about), "{lines:?} should mention {about:?}");
    lines[0].clone()
}

// ---- output directories ---------------------------------------------------------------------

#[test]
fn output_directory_that_is_a_file_or_a_dangling_symlink_warns_once() {
    let plain = plain_run("out_plain", "rt_ledger", &["basic"], &[]);
    // Also a FIFO nobody reads and /dev/null: nothing blocks, nothing is written there.
    for case in ["file", "dangling-symlink", "fifo", "dev-null"] {
        let (mut sim, _) = preloaded(case);
        let mut out = sim.scratch().join("out");
        let nowhere = sim.scratch().join("nowhere");
        match case {
            "file" => std::fs::write(&out, b"not a directory").unwrap(),
            "fifo" => {
                let c = std::ffi::CString::new(out.to_str().unwrap()).unwrap();
                // SAFETY: a NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            }
            "dev-null" => out = PathBuf::from("/dev/null"),
            _ => symlink(&nowhere, &out).unwrap(),
        }
        sim.env("CULEDGER_OUT", &out);
        let with = sim.run(sim.cmd("rt_ledger").arg("basic"));
        unharmed(&plain, &with);
        one_warning(&with, "cannot write the report");
        assert!(!nowhere.exists(), "{case}: the symlink's target was created");
        if case == "file" {
            assert_eq!(std::fs::read(&out).unwrap(), b"not a directory", "the file was touched");
        }
        let leftovers: Vec<_> = std::fs::read_dir(sim.scratch()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), usize::from(case != "dev-null"), "{case}: {leftovers:?}");
    }
}

#[test]
fn output_directory_behind_a_symlink_is_used_silently() {
    let plain = plain_run("link_plain", "rt_ledger", &["basic"], &[]);
    let (mut sim, _) = preloaded("link");
    let real = sim.scratch().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = sim.scratch().join("link");
    symlink(&real, &link).unwrap();
    sim.env("CULEDGER_OUT", &link);
    let with = sim.run(sim.cmd("rt_ledger").arg("basic"));
    unharmed(&plain, &with);
    assert!(culedger_lines(&with).is_empty(), "{}", with.stderr);
    let reports = reports_in(&real);
    assert_eq!(reports.len(), 1);
    assert_eq!(int(&device(&reports[0].1, 0)["live_bytes"]), with.u64("live"));
    assert_eq!(mode_of(&reports[0].0), 0o600);
}

/// Runs `cmd` as an unprivileged user when we are root (permissions do not stop root).
fn as_unprivileged(cmd: &mut Command) -> Option<u32> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    cmd.uid(65534).gid(65534);
    Some(65534)
}

/// `program` and what it loads (the fake runtime and driver, libculedger) copied into the
/// scratch directory for another user, who may not reach the checkout (a clone in root's
/// home or in a `mktemp -d` directory), and the command that runs the copy with culedger
/// preloaded; or why that user cannot reach the scratch directory either.
fn reachable_copy(sim: &mut Sim, program: &str) -> Result<Command, String> {
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode()).unwrap_or(0);
    std::fs::set_permissions(sim.scratch(), std::fs::Permissions::from_mode(0o755)).unwrap();
    if let Some(closed) = sim.scratch().ancestors().skip(1).find(|a| mode(a) & 0o001 == 0) {
        return Err(format!("{} is not traversable by other users", closed.display()));
    }
    let dir = sim.scratch().join("reach");
    let (bin, lib) = (dir.join("bin"), dir.join("lib"));
    for (from, to) in [
        (culedger_scenarios::bin(program), bin.join(program)),
        (culedger_scenarios::lib_dir().join("libcudart.so.12"), lib.join("libcudart.so.12")),
        (culedger_scenarios::lib_dir().join("libcuda.so.1"), lib.join("libcuda.so.1")),
        (libculedger(), lib.join("libculedger.so")),
    ] {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
    for p in [&dir, &bin, &lib] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    sim.env("LD_PRELOAD", lib.join("libculedger.so")).env("LD_LIBRARY_PATH", &lib);
    Ok(sim.cmd(bin.join(program)))
}

#[test]
fn read_only_or_foreign_output_directory_warns_once() {
    let plain = plain_run("ro_plain", "rt_ledger", &["basic"], &[]);
    for case in ["read-only", "another-user"] {
        let (mut sim, _) = preloaded(case);
        let out = sim.scratch().join("out");
        std::fs::create_dir(&out).unwrap();
        let mut cmd = sim.cmd("rt_ledger");
        // Root runs the program as another user, who may not reach the checkout.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            match reachable_copy(&mut sim, "rt_ledger") {
                Ok(copy) => cmd = copy,
                Err(why) => {
                    eprintln!("read_only_or_foreign_output_directory_warns_once: {case} not run: {why}");
                    continue;
                }
            }
        }
        cmd.arg("basic");
        let user = as_unprivileged(&mut cmd);
        match (case, user) {
            // Our own directory, without write permission.
            ("read-only", Some(uid)) => std::os::unix::fs::chown(&out, Some(uid), Some(uid)).unwrap(),
            // Root's directory (0755) seen by another user.
            ("another-user", Some(_)) => {}
            // Not root: a directory we cannot write and cannot chown away; `/` is root's.
            ("another-user", None) => {
                sim.env("CULEDGER_OUT", "/");
                cmd = sim.cmd("rt_ledger");
                cmd.arg("basic");
            }
            _ => {}
        }
        let mode = if case == "read-only" { 0o555 } else { 0o755 };
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(mode)).unwrap();
        let with = sim.run(&mut cmd);
        unharmed(&plain, &with);
        one_warning(&with, "cannot write the report");
        assert!(reports_in(&out).is_empty() && temporaries_in(&out).is_empty(), "{case}");
    }
}

#[test]
fn full_file_system_leaves_no_partial_report() {
    // RLIMIT_FSIZE: every report write fails (EFBIG; the flush thread blocks SIGXFSZ).
    let plain = plain_run("fsize_plain", "rt_ledger", &["basic"], &[]);
    let (sim, out) = preloaded("fsize");
    // The fake driver's machine file is created (and sized) by a first process without the limit.
    sim.run_ok(sim.cmd("rt_ledger").arg("multi").env_remove("LD_PRELOAD"));
    let mut cmd = sim.cmd("rt_ledger");
    cmd.arg("basic");
    // SAFETY: setrlimit is async-signal-safe; it only changes the child's own limit.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 512, rlim_max: 512 };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let with = sim.run(&mut cmd);
    unharmed(&plain, &with);
    one_warning(&with, "File too large");
    assert!(reports_in(&out).is_empty(), "a report larger than the limit exists");
    assert!(temporaries_in(&out).is_empty(), "{:?}", temporaries_in(&out));

    // A small tmpfs that fills up while the program runs (its reports grow to about 440 KB; a
    // rewrite needs room for the old and the new one): the writes that no longer fit fail,
    // the last complete report stays. Needs mount privileges; without them this half is skipped.
    let (mut sim, _) = preloaded("tmpfs");
    let Some(fs) = Tmpfs::mount(&sim.scratch().join("fs"), 640 << 10) else {
        eprintln!("full_file_system_leaves_no_partial_report: cannot mount a tmpfs here; RLIMIT_FSIZE half only");
        return;
    };
    sim.env("CULEDGER_OUT", &fs.0).env("CULEDGER_FLUSH_MS", "10");
    let args = ["churn", "150000", "0"];
    let plain = plain_run("tmpfs_plain", "bench_rt", &args, &[]);
    let with = sim.run(sim.cmd("bench_rt").args(args));
    unharmed(&plain, &with);
    one_warning(&with, "No space left on device");
    let reports = reports_in(&fs.0);
    assert_eq!(reports.len(), 1, "the last report that fitted stays");
    assert_eq!(reports[0].1["process"]["exit"], "running", "the final write cannot have fitted");
    assert!(temporaries_in(&fs.0).is_empty(), "{:?}", temporaries_in(&fs.0));
}

/// A tmpfs mounted for one test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, bytes: u64) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "culedger-test", &at.to_string_lossy()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

// ---- planted symlinks, file modes --------------------------------------------------------------

#[test]
fn planted_symlinks_are_never_followed_and_reports_are_private() {
    for mode in [None, Some("0640")] {
        let (mut sim, out) = preloaded("planted");
        if let Some(m) = mode {
            sim.env("CULEDGER_MODE", m);
        }
        std::fs::create_dir(&out).unwrap();
        let victim = sim.scratch().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let nowhere = sim.scratch().join("nowhere");
        let mut cmd = sim.cmd("rt_ledger");
        cmd.arg("basic");
        let (o, v, n) = (out.clone(), victim.clone(), nowhere.clone());
        // Today's names are culedger-<host>-<pid>-<start_ms>.json: plant the names of the next
        // two seconds of start times too (the ledger starts right after exec).
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim().to_string();
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        // In the child, before exec: its pid is the one culedger names its files after.
        // SAFETY: only symlink(2) calls on paths prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let pid = std::process::id();
                symlink(&v, o.join(format!("culedger-{pid}.json")))?;
                symlink(&v, o.join(format!(".culedger-{pid}.json.tmp.0")))?;
                symlink(&n, o.join(format!(".culedger-{pid}.json.tmp.1")))?;
                for ms in now_ms..now_ms + 2000 {
                    let stem = culedger::report::naming::report_stem(Some(&host), pid as i32, ms);
                    symlink(&v, o.join(format!("{stem}.json")))?;
                }
                Ok(())
            });
        }
        let run = sim.run_ok(&mut cmd);
        assert!(culedger_lines(&run).is_empty(), "{}", run.stderr);
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!nowhere.exists(), "a dangling temp-name symlink was followed");
        // The planted links are still links (never replaced nor followed); then out of the way.
        for e in std::fs::read_dir(&out).unwrap().flatten() {
            if e.file_type().unwrap().is_symlink() {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        let reports = reports_in(&out);
        assert_eq!(reports.len(), 1);
        let (path, doc) = &reports[0];
        assert!(std::fs::symlink_metadata(path).unwrap().file_type().is_file(), "{}", path.display());
        assert_eq!(mode_of(path), mode.map_or(0o600, |m| u32::from_str_radix(m, 8).unwrap()));
        assert_eq!(doc["settings"]["mode"], mode.unwrap_or("0600"));
        assert_eq!(int(&device(doc, 0)["live_bytes"]), run.u64("live"));
    }
}

#[test]
fn malformed_mode_warns_once_and_stays_private() {
    let (mut sim, out) = preloaded("badmode");
    sim.env("CULEDGER_MODE", "0666x");
    let run = sim.run_ok(sim.cmd("rt_ledger").arg("basic"));
    one_warning(&run, "CULEDGER_MODE=\"0666x\"");
    let reports = reports_in(&out);
    assert_eq!(mode_of(&reports[0].0), 0o600);
}

// ---- drivers missing entry points --------------------------------------------------------------

/// A machine over a variant of the minimal driver (`target/sim/<dir>`), hiding `hide`.
fn over_driver(sim: &mut Sim, dir: &str, hide: &str) {
    let lib = sim_dir().join(dir);
    let path = format!("{}:{}", lib.display(), sim_dir().join("lib").display());
    sim.env("LD_LIBRARY_PATH", path).env("MINCUDA_HIDE", hide);
}

#[test]
fn driver_missing_entry_points_changes_nothing_for_the_program() {
    let static_ledger = repo_root().join("target/release/static_ledger");
    let cases: &[(&str, &str, &str, &[&str])] = &[
        ("min-sparse", "", "rt_ledger", &["multi"]),
        ("min-sparse", "cuCtxGetDevice,cuMemGetAddressRange", "rt_ledger", &["multi"]),
        ("min-sparse", "cuCtxGetDevice,cuMemGetInfo,cuMemGetAddressRange", "rt_ledger", &["multi"]),
        ("min-noresolver", "", "rt_ledger", &["multi"]),
        ("min-sparse", "cuCtxGetDevice", "static", &[]),
        ("min-noresolver", "", "static", &[]),
    ];
    for &(driver, hide, program, args) in cases {
        let what = format!("{driver} without [{hide}], {program} {args:?}");
        let program = if program == "static" { static_ledger.to_str().unwrap() } else { program };
        let mut plain = Sim::new("missing_plain");
        over_driver(&mut plain, driver, hide);
        let a = plain.run(plain.cmd(program).args(args));
        let (mut sim, out) = preloaded("missing");
        over_driver(&mut sim, driver, hide);
        let b = sim.run(sim.cmd(program).args(args));
        unharmed(&a, &b);
        let reports = reports_in(&out);
        let lines = culedger_lines(&b);
        match (driver, hide, program.ends_with("static_ledger")) {
            // No resolver: the runtime refuses the driver before any allocation is made.
            ("min-noresolver", _, _) => assert!(lines.is_empty() && reports.len() <= 1, "{what}: {lines:?}"),
            // The dynamic runtime's cudaGetDevice stands in for a missing cuCtxGetDevice.
            (_, _, false) => {
                assert!(lines.is_empty(), "{what}: {lines:?}");
                let r = &reports[0].1;
                assert_eq!(int(&device(r, 0)["live_bytes"]), 10 * MIB, "{what}");
                assert_eq!(int(&device(r, 1)["live_bytes"]), 22 * MIB, "{what}");
            }
            // The embedded runtime exports nothing: no way to tell the device; said once.
            (_, _, true) => {
                one_warning(&b, "cannot tell the current device");
                let r = &reports[0].1;
                // 24 + 8 MiB cudaMalloc and 6 MiB cudaMallocAsync on device 1, before the program
                // stops at cuMemCreate, which the minimal driver lacks.
                assert_eq!(int(&device(r, 0)["live_bytes"]), 38 * MIB, "{what}: counted on device 0");
                assert_eq!(r["health"]["warnings"].as_array().map(Vec::len), Some(1), "{what}");
            }
        }
    }
}

// ---- the resolver and dlsym asked for odd things -----------------------------------------------

#[test]
fn resolver_and_dlsym_bad_input_behave_as_without_culedger() {
    for mode in ["getproc", "dlsym", "dlsym_null"] {
        let plain = plain_run("odd_plain", "drv_badinput", &[mode], &[]);
        let (sim, out) = preloaded("odd");
        let with = sim.run(sim.cmd("drv_badinput").arg(mode));
        unharmed(&plain, &with);
        assert!(culedger_lines(&with).is_empty(), "{mode}: {}", with.stderr);
        match mode {
            // glibc itself crashes on a NULL name; culedger does not change how.
            "dlsym_null" => assert_eq!(with.status.and_then(|s| s.signal()), Some(libc::SIGSEGV)),
            "getproc" => {
                with.assert_success();
                assert!(plain.all("case").len() >= 14);
                // An entry resolved at cudaVersion INT_MAX is wrapped, and its allocation counted.
                let reports = reports_in(&out);
                assert_eq!(int(&device(&reports[0].1, 0)["live_bytes"]), with.u64("live"));
            }
            _ => with.assert_success(),
        }
    }
}
