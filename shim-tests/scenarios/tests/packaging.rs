//! What `pip install culedger` and the tarballs ship: built by `make dist` (scripts/package.sh,
//! zig from PyPI) into `target/wheels/` and `target/dist/`, for x86_64 and aarch64.
//!
//! - every shipped binary needs at most glibc 2.17's symbol versions and only the libraries
//!   manylinux2014 allows, and is built for the architecture its file name says;
//! - the x86_64 wheel installed into a fresh venv runs programs of the simulated stack under
//!   `culedger run` (a C program and a Python one) with no setting naming the library, imports
//!   as `culedger`, and `python -m culedger` forwards to the command line;
//! - the x86_64 tarball's command line finds the library next to itself.

use culedger_scenarios::elf::{dyn_info, max_glibc, parse_glibc};
use culedger_scenarios::reports::{only_report, report_of_pid};
use culedger_scenarios::{repo_root, Run, Sim};
use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const ARCHES: [(&str, u16); 2] = [("x86_64", 62), ("aarch64", 183)];
/// The libraries manylinux2014 (PEP 599) lets a wheel link against that these binaries may use.
const ALLOWED_NEEDED: [&str; 8] = [
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

fn wheel(arch: &str) -> PathBuf {
    let dir = repo_root().join("target/wheels");
    let prefix = format!("culedger-{VERSION}-py3-none-");
    let found = std::fs::read_dir(&dir).ok().and_then(|rd| {
        rd.flatten().map(|e| e.path()).find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with(&prefix) && n.ends_with(&format!("manylinux_2_17_{arch}.whl"))
        })
    });
    found.unwrap_or_else(|| panic!("no culedger {VERSION} {arch} wheel in {}: run `make dist`", dir.display()))
}

fn tarball(arch: &str) -> PathBuf {
    let p = repo_root().join(format!("target/dist/culedger-{VERSION}-{arch}-linux.tar.gz"));
    assert!(p.is_file(), "{} missing: run `make dist`", p.display());
    p
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

fn run_checked(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{cmd:?} failed\n{text}\n{}", String::from_utf8_lossy(&o.stderr));
    text
}

/// Unpacks the members of `wheel` into `dest` (keeping their paths); returns their names.
fn unzip(wheel: &Path, dest: &Path) -> Vec<String> {
    let script = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nz.extractall(sys.argv[2])\n\
                  print('\\n'.join(z.namelist()))";
    let out = run_checked(Command::new(python()).args(["-c", script]).arg(wheel).arg(dest));
    out.lines().map(str::to_string).collect()
}

/// Why `path` would not run on every manylinux2014 system of `machine`, if it would not.
fn portability_problems(path: &Path, machine: u16) -> Vec<String> {
    let info = dyn_info(path).unwrap();
    let mut bad = Vec::new();
    if info.machine != machine {
        bad.push(format!("machine {} (expected {machine})", info.machine));
    }
    if let Some(v) = max_glibc(&info).filter(|&v| v > (2, 17)) {
        let syms: Vec<String> = info
            .undefined_versions
            .iter()
            .filter(|(_, ver)| parse_glibc(ver).is_some_and(|x| x > (2, 17)))
            .map(|(s, ver)| format!("{s}@{ver}"))
            .collect();
        bad.push(format!("needs GLIBC_{}.{}: {}", v.0, v.1, syms.join(" ")));
    }
    for need in &info.version_needs {
        let ok =
            need.version.starts_with("GLIBC_") || (need.file == "libgcc_s.so.1" && need.version.starts_with("GCC_"));
        if !ok {
            bad.push(format!("needs {} from {}", need.version, need.file));
        }
    }
    for lib in &info.needed {
        if !ALLOWED_NEEDED.contains(&lib.as_str()) {
            bad.push(format!("links {lib}, which manylinux2014 does not provide"));
        }
    }
    bad
}

#[test]
fn shipped_binaries_need_at_most_glibc_2_17() {
    // The check itself: the native build of this machine (glibc 2.36) is refused.
    let native = repo_root().join("target/release/libculedger.so");
    let native_problems =
        portability_problems(&native, ARCHES.iter().find(|a| a.0 == std::env::consts::ARCH).unwrap().1);
    assert!(native_problems.iter().any(|p| p.contains("needs GLIBC_2.3")), "{native_problems:?}");

    let sim = Sim::new("wheel_glibc");
    for (arch, machine) in ARCHES {
        let dest = sim.scratch().join(arch);
        let names = unzip(&wheel(arch), &dest);
        let shipped = ["culedger/libculedger.so".to_string(), format!("culedger-{VERSION}.data/scripts/culedger")];
        for want in shipped.iter().map(String::as_str).chain(["culedger/__init__.py", "culedger/__main__.py"]) {
            assert!(names.iter().any(|n| n == want), "{arch} wheel lacks {want}: {names:?}");
        }
        for bin in &shipped {
            let problems = portability_problems(&dest.join(bin), machine);
            assert!(problems.is_empty(), "{arch} wheel, {bin}: {problems:?}");
        }
        // The tarball ships the same two binaries.
        let t = sim.scratch().join(format!("tar-{arch}"));
        std::fs::create_dir_all(&t).unwrap();
        run_checked(Command::new("tar").arg("-xzf").arg(tarball(arch)).arg("-C").arg(&t));
        let top = t.join(format!("culedger-{VERSION}-{arch}-linux"));
        for f in ["culedger", "libculedger.so", "README.md", "docs/schema.md", "docs/hooks.md", "docs/configuration.md"]
        {
            assert!(top.join(f).is_file(), "{arch} tarball lacks {f}");
        }
        for bin in ["culedger", "libculedger.so"] {
            let a = std::fs::read(top.join(bin)).unwrap();
            let b = std::fs::read(dest.join(shipped.iter().find(|s| s.ends_with(bin)).unwrap())).unwrap();
            assert!(a == b, "{arch}: the tarball's {bin} differs from the wheel's");
        }
    }
}

/// `LAUNCHER... run -o OUT -- PROGRAM...` on `sim`, without `CULEDGER_LIB` (the command line
/// must find its library itself): the program's results and its one report.
fn under_culedger_run(sim: &Sim, launcher: &[&OsStr], out: &Path, program: &[&OsStr]) -> (Run, Value) {
    let mut cmd = sim.cmd(launcher[0]);
    cmd.env_remove("CULEDGER_LIB").args(&launcher[1..]).arg("run").arg("-o").arg(out).arg("--").args(program);
    let run = sim.run(&mut cmd);
    run.assert_success();
    let report = only_report(out);
    (run, report)
}

fn live(report: &Value) -> u64 {
    report["devices"][0]["live_bytes"].as_u64().unwrap()
}

#[test]
fn the_wheel_installs_into_a_fresh_venv_and_runs() {
    let arch = std::env::consts::ARCH;
    let mut sim = Sim::new("wheel_venv");
    let venv = sim.scratch().join("venv");
    run_checked(Command::new(python()).args(["-m", "venv", "--without-pip"]).arg(&venv));
    let vpy = venv.join("bin/python");
    run_checked(
        Command::new(python())
            .args(["-m", "pip", "--disable-pip-version-check", "--python"])
            .arg(&vpy)
            .args(["install", "--quiet", "--no-index", "--no-deps"])
            .arg(wheel(arch)),
    );
    let exe = venv.join("bin/culedger");
    assert!(exe.is_file(), "the wheel installed no {}", exe.display());

    // The package: the library inside it, the version from Cargo.
    let probe = "import culedger; print(culedger.library_path()); print(culedger.__version__)";
    let out = run_checked(Command::new(&vpy).args(["-c", probe]).env_remove("CULEDGER_LIB"));
    let mut lines = out.lines();
    let lib = PathBuf::from(lines.next().unwrap());
    assert_eq!(lines.next(), Some(VERSION));
    assert!(lib.starts_with(&venv) && lib.ends_with("site-packages/culedger/libculedger.so"), "{}", lib.display());
    assert!(lib.is_file());
    let printed = run_checked(Command::new(&vpy).args(["-m", "culedger", "--library-path"]));
    assert_eq!(printed.trim(), lib.to_str().unwrap());
    let version = run_checked(Command::new(&vpy).args(["-m", "culedger", "--version"]));
    assert_eq!(version.trim(), format!("culedger {VERSION}"));

    // No CULEDGER_LIB anywhere below: the command line finds the wheel's library itself.
    sim.env("CULEDGER_FLUSH_MS", "100");
    let c_bin = culedger_scenarios::bin("rt_ledger");
    let c_prog = c_bin.as_os_str();
    let ctypes_prog = repo_root().join("shim-tests/py/ledger_ctypes.py");
    // `culedger run` on a C program of the simulated stack; on a Python program (the runtime
    // through ctypes); and `python -m culedger run`, which forwards to the same command line.
    let cases: [(&str, Vec<&OsStr>, Vec<&OsStr>); 3] = [
        ("run-c", vec![exe.as_os_str()], vec![c_prog, "basic".as_ref()]),
        ("run-py", vec![exe.as_os_str()], vec![vpy.as_os_str(), ctypes_prog.as_os_str()]),
        ("run-m", vec![vpy.as_os_str(), "-m".as_ref(), "culedger".as_ref()], vec![c_prog, "basic".as_ref()]),
    ];
    for (name, launcher, program) in cases {
        let out = sim.scratch().join(name);
        let (run, report) = under_culedger_run(&sim, &launcher, &out, &program);
        assert_eq!(live(&report), run.u64("live"), "{name}: {}", run.describe());
        assert!(out.join("summary.json").is_file(), "{name}");
    }

    // A container entrypoint: LD_PRELOAD=$(python -m culedger --library-path).
    let out4 = sim.scratch().join("preload");
    let mut cmd = sim.cmd(c_prog);
    cmd.arg("basic").env("LD_PRELOAD", &lib).env("CULEDGER_OUT", &out4);
    let run = sim.run(&mut cmd);
    run.assert_success();
    assert_eq!(live(&report_of_pid(&out4, run.pid)), run.u64("live"));
}

#[test]
fn the_tarball_runs_from_where_it_is_unpacked() {
    let arch = std::env::consts::ARCH;
    let sim = Sim::new("tarball");
    run_checked(Command::new("tar").arg("-xzf").arg(tarball(arch)).arg("-C").arg(sim.scratch()));
    let exe = sim.scratch().join(format!("culedger-{VERSION}-{arch}-linux/culedger"));
    let prog = culedger_scenarios::bin("rt_ledger");
    let out = sim.scratch().join("out");
    let (run, report) = under_culedger_run(&sim, &[exe.as_os_str()], &out, &[prog.as_os_str(), "basic".as_ref()]);
    assert_eq!(live(&report), run.u64("live"), "{}", run.describe());
}
