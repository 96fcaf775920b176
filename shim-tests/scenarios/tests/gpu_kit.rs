//! The GPU validation kit's self-test (`shim-tests/gpu/validate.sh --self-test`): every comparison
//! of the kit runs on the simulated stack, against torch-like workloads driving the fake runtime
//! through ctypes, and must pass; the same run with ground truth that is off by 512 bytes must
//! fail. (The kit's own controls, check `C`, also feed each comparison wrong ground truth.)
//!
//! Needs `make` (library, CLI, simulated stack).

use culedger_scenarios::repo_root;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Checks every self-test run reports; those that need [4]/[5] (call sites, rule categories)
/// may say SKIP with an older culedger, never FAIL.
const ALWAYS: &[&str] = &["1a", "1b", "1c", "2a", "2b", "3a", "4", "5b", "6a", "6b", "7", "C"];
const PASS_OR_SKIP: &[&str] = &["3b", "5a"];

/// Whether real PyTorch is installed where the framework tests find it (the kit then runs its
/// real workloads on the simulated driver).
fn real_torch() -> bool {
    repo_root().join("target/frameworks/site/torch/__init__.py").is_file()
}

fn run_kit(out: &Path, sabotage: bool) -> (Output, Value) {
    run_kit_with(out, sabotage, None)
}

/// `site`: KIT_FRAMEWORKS_SITE for the kit (None: its default, target/frameworks/site).
fn run_kit_with(out: &Path, sabotage: bool, site: Option<&Path>) -> (Output, Value) {
    let root = repo_root();
    let lib = root.join("target/release/libculedger.so");
    let cli = root.join("target/release/culedger");
    assert!(lib.is_file() && cli.is_file(), "run `make` first");
    let mut cmd = Command::new(root.join("shim-tests/gpu/validate.sh"));
    cmd.arg("--self-test").arg(out).env("CULEDGER_LIB", &lib).env("CULEDGER_BIN", &cli).env_remove("LD_PRELOAD");
    if sabotage {
        cmd.env("KIT_SABOTAGE", "1");
    }
    if let Some(site) = site {
        cmd.env("KIT_FRAMEWORKS_SITE", site);
    }
    let output = cmd.output().expect("run validate.sh");
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap_or_else(|e| {
        panic!(
            "no summary.json ({e}):\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, serde_json::from_str(&summary).unwrap())
}

fn status<'a>(summary: &'a Value, id: &str) -> &'a str {
    summary["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("missing")
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("culedger-kit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn kit_self_test_passes_on_the_simulated_stack() {
    let out = scratch("selftest");
    let (output, summary) = run_kit(&out, false);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "validate.sh --self-test failed:\n{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(summary["verdict"], "PASS", "{text}");
    assert_eq!(summary["mode"], "self-test");
    for id in ALWAYS {
        // JAX is not among the real frameworks installed: its real workload says so (SKIP).
        let want = if *id == "6b" && real_torch() { "SKIP" } else { "PASS" };
        assert_eq!(status(&summary, id), want, "check {id}:\n{text}");
    }
    for id in PASS_OR_SKIP {
        assert!(matches!(status(&summary, id), "PASS" | "SKIP"), "check {id}:\n{text}");
    }
    assert!(summary["elapsed_s"].as_f64().unwrap() < 300.0);
    // One line per check on stdout, every report and the CLI's rendering in REPORT_DIR.
    for id in ALWAYS.iter().chain(PASS_OR_SKIP) {
        assert!(text.lines().any(|l| l.split_whitespace().nth(1) == Some(id)), "no line for {id}:\n{text}");
    }
    for dir in ["1-native", "1-expandable", "1-async", "2-meminfo", "3-engine", "4-ipc", "5-nccl"] {
        let d = out.join(dir);
        let reports =
            std::fs::read_dir(&d).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".json"));
        assert!(reports.count() >= 1, "no report in {}", d.display());
        assert!(d.join("report.txt").is_file(), "no culedger report rendering in {}", d.display());
    }
    assert!(out.join("summary.txt").is_file());
    if real_torch() {
        assert_eq!(summary["workloads"], "real", "{text}");
        let torch = summary["environment"]["torch"].as_str().unwrap_or_default();
        assert!(torch.starts_with("2.15.0"), "the env check ran real torch: {torch:?}\n{text}");
        assert!(text.contains("INFO  self-test: real workloads"), "{text}");
        assert!(text.lines().any(|l| l.starts_with("INFO  env") && l.contains("torch 2.15.0")), "{text}");
        assert_eq!(summary["stand_ins"], serde_json::json!(["engine.py"]), "{text}");
    } else {
        assert_eq!(summary["workloads"], "stand-ins", "{text}");
        assert!(text.contains("real frameworks not installed"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// Without the real frameworks the self-test runs the ctypes stand-ins in sim/, says so in one
/// line, and its checks pass there too.
#[test]
fn kit_self_test_falls_back_to_the_stand_ins() {
    let out = scratch("standins");
    let empty = scratch("nosite");
    std::fs::create_dir_all(&empty).unwrap();
    let (output, summary) = run_kit_with(&out, false, Some(&empty));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{text}\n{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!((&summary["verdict"], &summary["workloads"]), (&"PASS".into(), &"stand-ins".into()), "{text}");
    assert_eq!(text.matches("real frameworks not installed").count(), 1, "{text}");
    assert!(summary["environment"]["torch"].is_null(), "no real torch ran: {}", summary["environment"]);
    for id in ALWAYS {
        assert_eq!(status(&summary, id), "PASS", "check {id}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn kit_fails_when_the_ground_truth_is_off() {
    let out = scratch("sabotage");
    let (output, summary) = run_kit(&out, true);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert_eq!(summary["verdict"], "FAIL");
    // The torch-like allocator reports 512 bytes more than it reserved: the exact checks fail.
    assert_eq!(status(&summary, "1a"), "FAIL", "{text}");
    assert_eq!(status(&summary, "1b"), "FAIL", "{text}");
    assert_eq!(status(&summary, "2a"), "PASS", "{text}");
    assert!(text.lines().any(|l| l.starts_with("FAIL  1a") && l.contains("!=")), "{text}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn kit_refuses_bad_usage() {
    let kit = repo_root().join("shim-tests/gpu/validate.sh");
    let none = Command::new(&kit).output().unwrap();
    assert_eq!(none.status.code(), Some(2));
    let out = scratch("nolib");
    let missing = Command::new(&kit).arg(&out).env("CULEDGER_LIB", "/nonexistent/libculedger.so").output().unwrap();
    assert_eq!(missing.status.code(), Some(2), "{}", String::from_utf8_lossy(&missing.stderr));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no such library"));
    let _ = std::fs::remove_dir_all(&out);
}
