//! `culedger run` end to end with a stand-in interposer (an empty shared library built
//! here): environment, exit status, output directories and the summary merge (signals are
//! in run_signals.rs). The child is a shell script that plays the interposer's part by
//! writing a report into $CULEDGER_OUT.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

#[test]
fn environment_exit_status_and_summary() {
    let d = tempdir();
    let (lib, other) = (stub_lib(d.path(), "libstub"), stub_lib(d.path(), "libother"));
    let out = d.path().join("out");
    let fixture = fixtures().join("nccl/culedger-4101.json");
    let script = format!(
        r#"printf '%s\n%s\n%s\n' "$LD_PRELOAD" "$CULEDGER_OUT" "$CULEDGER_RUN_ID" > "$CULEDGER_OUT/env.txt"
sed -e "s/\"pid\": 4101,/\"pid\": $$,/" -e "s/\"nccl-run\"/\"$CULEDGER_RUN_ID\"/" '{}' > "$CULEDGER_OUT/culedger-$$.json"
echo 'not json' > "$CULEDGER_OUT/culedger-1.json"
exit 3"#,
        fixture.display()
    );
    let o = run_cmd(&out, &lib).args(["sh", "-c", &script]).env("LD_PRELOAD", &other).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");

    let env = std::fs::read_to_string(out.join("env.txt")).unwrap();
    let lines: Vec<&str> = env.lines().collect();
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap().display().to_string();
    assert_eq!(lines[0], format!("{}:{}", canon(&lib), other.display()), "LD_PRELOAD prepended");
    assert_eq!(lines[1], canon(&out), "CULEDGER_OUT is the absolute output directory");
    let run_id = lines[2];
    assert_eq!(run_id.len(), "20260101-120000-3fa9c1".len(), "CULEDGER_RUN_ID for the whole tree: {run_id}");

    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["schema"], "culedger-summary/1");
    assert_eq!(summary["run_id"], run_id);
    assert_eq!(summary["exit_code"], 3);
    assert_eq!(summary["signal"], Value::Null);
    assert!(summary["pid"].as_i64().unwrap() > 0);
    assert_eq!(summary["command"][0], "sh");
    assert_eq!(summary["command"][2], script.as_str());
    let procs = summary["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "the broken report is skipped");
    assert_eq!(procs[0]["schema"], "culedger/1");
    assert_ne!(procs[0]["process"]["pid"], 4101);
    assert!(err.contains("skipping") && err.contains("culedger-1.json"), "{err}");
    // The one screen: the run, how CMD ended, the verdict, a line per GPU, where to go next.
    let screen: Vec<&str> = err.lines().skip_while(|l| !l.starts_with("culedger: /")).collect();
    assert!(screen[0].ends_with("/out (1 process, 1 GPU; exit status 3)"), "{err}");
    assert!(screen[1].starts_with("no allocation failed; the fullest device was sim-host GPU 0"), "{err}");
    assert!(screen.iter().any(|l| l.starts_with("| GPU 0 ")), "{err}");
    assert!(screen.iter().any(|l| l.starts_with("  culedger report /") && l.contains("/out ")), "{err}");
    assert!(!err.contains("== sim-host GPU 0"), "the full report only with --report: {err}");
    assert!(err.contains("1 report(s) merged into"), "{err}");

    // The merged summary reads back like the run directory.
    let o = culedger(&["report", out.join("summary.json").to_str().unwrap(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `culedger run` never adds its reports to another run's directory by accident.
#[test]
fn a_directory_of_another_run_is_refused_unless_appending() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let out = d.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(fixtures().join("nccl/culedger-4101.json"), out.join("culedger-4101.json")).unwrap();
    let o = run_cmd(&out, &lib).args(["sh", "-c", "touch \"$CULEDGER_OUT/ran\""]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("holds the reports of another run (1 file, run nccl-run); choose another -o"), "{err}");
    assert!(!out.join("ran").exists(), "the command did not run");
    // --append: this run writes there too, and its summary holds only its own reports,
    // though the other run's file was rewritten (fresh) meanwhile.
    let fixture = fixtures().join("nccl/culedger-4102.json");
    let script = format!(
        r#"touch "$CULEDGER_OUT/culedger-4101.json"
sed -e "s/\"pid\": 4102,/\"pid\": $$,/" -e "s/\"nccl-run\"/\"$CULEDGER_RUN_ID\"/" '{}' > "$CULEDGER_OUT/culedger-$$.json""#,
        fixture.display()
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_culedger"));
    cmd.current_dir(crate_dir()).env("NO_COLOR", "1");
    cmd.args([
        "run",
        "--append",
        "-o",
        out.to_str().unwrap(),
        "--lib",
        lib.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let procs = summary["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "only this run's report");
    assert_eq!(procs[0]["process"]["run_id"], summary["run_id"]);
    // Reading the directory now needs a choice.
    let o = culedger(&["report", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("reports of 2 different runs"), "{}", stderr(&o));
}

#[test]
fn default_directories_are_unique() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let dirs: Vec<String> = (0..3)
        .map(|_| {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_culedger"))
                .current_dir(d.path())
                .args(["run", "--lib", lib.to_str().unwrap(), "--", "sh", "-c", "echo \"$CULEDGER_OUT\""])
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            stdout(&o).trim().to_string()
        })
        .collect();
    let unique: std::collections::BTreeSet<&String> = dirs.iter().collect();
    assert_eq!(unique.len(), 3, "{dirs:?}");
}

/// The command in summary.json is redacted like the per-process reports' argv.
#[test]
fn the_summary_command_is_redacted() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let out = d.path().join("out");
    let o = run_cmd(&out, &lib)
        .args([
            "sh",
            "-c",
            "exit 0",
            "serve",
            "--api-key",
            "sk-secret",
            "--hf-token=hf_abc",
            "HF_TOKEN=x",
            "--port",
            "80",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(!text.contains("sk-secret") && !text.contains("hf_abc") && !text.contains("HF_TOKEN=x"), "{text}");
    let summary: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        summary["command"],
        serde_json::json!([
            "sh",
            "-c",
            "exit 0",
            "serve",
            "--api-key",
            "<redacted>",
            "--hf-token=<redacted>",
            "HF_TOKEN=<redacted>",
            "--port",
            "80"
        ])
    );
}

#[test]
fn interposer_lookup() {
    let d = tempdir();
    let out = d.path().join("out");
    // An explicit --lib that does not exist.
    let o = culedger(&["run", "-o", out.to_str().unwrap(), "--lib", "/nonexistent/libculedger.so", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/libculedger.so: interposer not found (--lib)"), "{}", stderr(&o));
    // CULEDGER_LIB is used when --lib is absent.
    let lib = stub_lib(d.path(), "libstub");
    let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
        .args(["run", "-o", d.path().join("out2").to_str().unwrap(), "--", "sh", "-c", "echo \"$LD_PRELOAD\""])
        .env("CULEDGER_LIB", &lib)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), std::fs::canonicalize(&lib).unwrap().display().to_string());
    // Otherwise the library next to the binary (target/release/libculedger.so).
    let next_to = Path::new(env!("CARGO_BIN_EXE_culedger")).with_file_name("libculedger.so");
    let o = culedger(&["run", "-o", d.path().join("out3").to_str().unwrap(), "--", "true"]);
    if next_to.exists() {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    } else {
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("interposer not found (next to the culedger binary)"), "{}", stderr(&o));
    }
}

#[test]
fn default_output_directory_is_timestamped() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
        .current_dir(d.path())
        .args(["run", "--lib", lib.to_str().unwrap(), "--", "sh", "-c", "echo \"$CULEDGER_OUT\""])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dir = stdout(&o).trim().to_string();
    let name = Path::new(&dir).file_name().unwrap().to_str().unwrap().to_string();
    // culedger-YYYYmmdd-HHMMSS
    assert_eq!(name.len(), "culedger-20260101-000000".len(), "{name}");
    assert!(name.starts_with("culedger-") && name[9..17].chars().all(|c| c.is_ascii_digit()) && &name[17..18] == "-");
    assert!(Path::new(&dir).join("summary.json").is_file());
}

/// `--report` ends with the full report, as before the one screen.
#[test]
fn the_full_report_on_request() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let out = d.path().join("out");
    let fixture = fixtures().join("nccl/culedger-4101.json");
    let script = format!(
        r#"sed -e "s/\"pid\": 4101,/\"pid\": $$,/" -e "s/\"nccl-run\"/\"$CULEDGER_RUN_ID\"/" '{}' > "$CULEDGER_OUT/culedger-$$.json""#,
        fixture.display()
    );
    let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
        .current_dir(crate_dir())
        .env("NO_COLOR", "1")
        .env_remove("CULEDGER_LIB")
        .args(["run", "--report", "-o", out.to_str().unwrap(), "--lib", lib.to_str().unwrap(), "--"])
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("culedger report:") && err.contains("== sim-host GPU 0"), "{err}");
}

#[test]
fn a_command_that_cannot_start() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let o = run_cmd(&d.path().join("out"), &lib).arg("/nonexistent/program").output().unwrap();
    assert_eq!(o.status.code(), Some(127));
    assert!(stderr(&o).contains("/nonexistent/program: cannot run"), "{}", stderr(&o));
    assert!(!d.path().join("out").exists(), "the directory made for it is not left behind");
    // Nor the default one; a directory that was there before stays.
    let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
        .current_dir(d.path())
        .args(["run", "--lib", lib.to_str().unwrap(), "--", "no_such_cmd"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    let left: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("culedger-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::create_dir(d.path().join("mine")).unwrap();
    let o = run_cmd(&d.path().join("mine"), &lib).arg("/nonexistent/program").output().unwrap();
    assert_eq!(o.status.code(), Some(127));
    assert!(d.path().join("mine").is_dir());
}

/// With the real interposer and the simulated CUDA stack built (`make all`), the demo
/// scenario end to end in both configurations. Without them there is nothing to run this
/// against (the CLI is built and tested on its own), and the test says so.
#[test]
fn real_interposer_on_the_simulated_stack() {
    let repo = crate_dir().join("..");
    let lib = Path::new(env!("CARGO_BIN_EXE_culedger")).with_file_name("libculedger.so");
    let sim = repo.join("target/sim/lib");
    if !lib.exists() || !sim.join("libcudart.so.12").exists() {
        eprintln!(
            "real_interposer_on_the_simulated_stack: needs {} and {} (make all): not run",
            lib.display(),
            sim.display()
        );
        return;
    }
    let d = tempdir();
    for (cfg, expected) in [("nccl", 0), ("custom", 1)] {
        let out = d.path().join(cfg);
        let machine = format!("culedger-cli-test-{cfg}-{}", std::process::id());
        let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
            .current_dir(&repo)
            .args(["run", "-o", out.to_str().unwrap(), "--lib", lib.to_str().unwrap(), "--", "python3"])
            .args(["shim-tests/py/engines/sglang_server.py", "--tp", "2", "--model-mib", "1024", "--layers", "4"])
            .args(["--attention-workspace-mib", "64", "--mem-fraction-static", "0.85"])
            .args(["--allreduce", cfg])
            .env("LD_LIBRARY_PATH", &sim)
            .env("FAKECUDA_MACHINE", &machine)
            .env("FAKECUDA_DEVICES", "2")
            .env("FAKECUDA_TOTAL_MIB", "4096")
            .env("FAKECUDA_PEER_MIB", "256")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let _ = std::fs::remove_file(format!("/dev/shm/fakecuda-{machine}"));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(expected), "{cfg}: {}{err}", stdout(&o));
        let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        let procs = summary["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 3, "{cfg}: the launcher and two ranks: {err}");
        let failures: i64 = procs
            .iter()
            .flat_map(|p| p["devices"].as_array().unwrap().iter())
            .map(|d| d["failures_total"].as_i64().unwrap())
            .sum();
        assert_eq!(failures > 0, expected == 1, "{cfg}: failures recorded {failures}");
        assert!(err.contains("| GPU 1 "), "{cfg}: {err}");
        // One run id for the process tree; the ranks named by their titles.
        let ids: std::collections::BTreeSet<&str> =
            procs.iter().map(|p| p["process"]["run_id"].as_str().unwrap()).collect();
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), [summary["run_id"].as_str().unwrap()], "{cfg}");
        let report = stdout(&culedger(&["report", out.to_str().unwrap()]));
        assert!(report.contains("sglang::scheduler_TP1 (rank 1/2)"), "{cfg}: {report}");
        // The program's own output comes first; culedger's screen starts at its title.
        let screen = err.lines().skip_while(|l| !l.starts_with("culedger: /")).count();
        assert!(screen > 5 && screen <= 30, "{cfg}: one screen of {screen} lines: {err}");
    }
    let o = culedger(&["diff", d.path().join("nccl").to_str().unwrap(), d.path().join("custom").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("custom/ ran out of memory:"), "{}", stdout(&o));
}
