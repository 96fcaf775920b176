//! Bad input: one clear line on stderr and exit status 2; a bad file inside a directory is
//! reported and skipped.

mod common;
use common::*;
use std::path::Path;

/// Runs `report PATH` and expects exit 2 with exactly one stderr line containing `needle`.
fn rejects(path: &Path, needle: &str) {
    let o = culedger(&["report", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "stdout: {}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "one line expected: {err}");
    assert!(err.starts_with("culedger: ") && err.contains(needle), "{err}");
    assert!(stdout(&o).is_empty());
}

fn good_report() -> String {
    std::fs::read_to_string(fixtures().join("nccl/culedger-4101.json")).unwrap()
}

#[test]
fn missing_file() {
    rejects(Path::new("/nonexistent/culedger-1.json"), "no such file or directory");
}

#[test]
fn another_schema() {
    let d = tempdir();
    let p = d.path().join("other.json");
    std::fs::write(&p, r#"{"schema": "memray/1", "devices": []}"#).unwrap();
    rejects(&p, "not a culedger report (schema \"memray/1\"");
    std::fs::write(&p, r#"{"traceEvents": []}"#).unwrap();
    rejects(&p, "not a culedger report (no \"schema\" field)");
}

#[test]
fn another_version() {
    let d = tempdir();
    let p = d.path().join("culedger-7.json");
    std::fs::write(&p, good_report().replacen("culedger/1", "culedger/2", 1)).unwrap();
    rejects(&p, "unsupported report version \"culedger/2\"");
}

#[test]
fn truncated_file() {
    let d = tempdir();
    let p = d.path().join("culedger-7.json");
    let text = good_report();
    std::fs::write(&p, &text[..text.len() / 2]).unwrap();
    rejects(&p, "truncated JSON");
}

#[test]
fn malformed_report() {
    let d = tempdir();
    let p = d.path().join("culedger-7.json");
    std::fs::write(&p, r#"{"schema": "culedger/1", "process": {"pid": 1}}"#).unwrap();
    rejects(&p, "malformed culedger/1 report: missing field `devices`");
}

#[test]
fn empty_directory() {
    let d = tempdir();
    rejects(d.path(), "no culedger-*.json reports or summary.json in this directory");
}

#[test]
fn bad_file_in_directory_is_skipped() {
    let d = tempdir();
    std::fs::write(d.path().join("culedger-4101.json"), good_report()).unwrap();
    std::fs::write(d.path().join("culedger-9999.json"), "{\"schema\": \"culedger/1\", ").unwrap();
    let o = culedger(&["report", d.path().to_str().unwrap(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("skipping") && err.contains("culedger-9999.json") && err.contains("truncated JSON"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["processes"].as_array().unwrap().len(), 1);
    assert_eq!(v["processes"][0]["pid"], 4101);
}

#[test]
fn directory_of_only_bad_files() {
    let d = tempdir();
    std::fs::write(d.path().join("culedger-1.json"), "nope").unwrap();
    let o = culedger(&["report", d.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("skipping") && err.contains("no readable culedger/1 report"), "{err}");
}

#[test]
fn summary_json_is_read_when_alone() {
    let d = tempdir();
    let report: serde_json::Value = serde_json::from_str(&good_report()).unwrap();
    let summary =
        serde_json::json!({"schema": "culedger-summary/1", "command": ["x"], "exit_code": 0, "processes": [report]});
    std::fs::write(d.path().join("summary.json"), summary.to_string()).unwrap();
    let o = culedger(&["report", d.path().to_str().unwrap(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["processes"][0]["pid"], 4101);
    assert_eq!(v["devices"][0]["index"], 0);
}

#[test]
fn check_bad_input_exits_2() {
    let nccl = "tests/fixtures/nccl";
    for (args, needle) in [
        (vec!["check", nccl, "--budget", "ipc 64MiB"], "no comparison"),
        (vec!["check", nccl, "--budget", "ipc=<64MiB"], "`=<` at character 4 is not an operator"),
        (vec!["check", nccl, "--budget", "kv_pol<=1GiB"], "unknown key `kv_pol` (did you mean `kv_pool`?)"),
        (vec!["check", nccl, "--budget", "ipc<=64"], "`64` needs a unit: B, KiB, MiB"),
        (vec!["check", nccl, "--budget", "vram<=1GiB"], "unknown key `vram`"),
        (vec!["check", nccl, "--budget", "ipc<=64 parsecs"], "unknown unit"),
        // A unit in the wrong case gets the spelling it means ([24] item 6).
        (
            vec!["check", nccl, "--budget", "untracked<=2 gib"],
            "budget `untracked<=2 gib`: unknown unit `gib` in `2gib`: did you mean `GiB`? (units are case-sensitive)",
        ),
        (vec!["check", nccl, "--budget", "peak:other<=1.5mib"], "did you mean `MiB`?"),
        (vec!["check", nccl, "--budget", "kv_pool>=40gb"], "did you mean `GB`?"),
        (vec!["check", "/nonexistent", "--budget", "ipc<=64MiB"], "no such file or directory"),
        (vec!["check", nccl], "nothing to check"),
        (vec!["check", nccl, "--budgets", "/nonexistent/budgets.txt"], "cannot read"),
    ] {
        let o = culedger(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn check_budgets_file() {
    let d = tempdir();
    let f = d.path().join("budgets.txt");
    std::fs::write(&f, "# limits for the nccl configuration\nipc <= 64MiB\n\nkv_pool >= 14GiB  # the KV pool must fit\npeak:graphs<=128MiB\n").unwrap();
    let o = culedger(&["check", "tests/fixtures/nccl", "--budgets", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o), "ok: 3 checks hold on 2 devices\n");
    let o = culedger(&["check", "tests/fixtures/custom-ar", "--budgets", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        "BREACH sim-host GPU 0: kv_pool is 12.65 GiB (budget kv_pool >= 14GiB)\n\
         BREACH sim-host GPU 1: kv_pool is 13.54 GiB (budget kv_pool >= 14GiB)\n\
         FAILED: 2 breaches; 3 checks on 2 devices\n"
    );
    std::fs::write(&f, "ipc <= 64MiB\nkv_pool => 1GiB\n").unwrap();
    let o = culedger(&["check", "tests/fixtures/nccl", "--budgets", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("budgets.txt:2: budget `kv_pool => 1GiB`"), "{}", stderr(&o));
    // A unit in the wrong case in a budgets file: its line and the spelling it means.
    std::fs::write(&f, "ipc <= 64MiB\nuntracked <= 2 gib\n").unwrap();
    let o = culedger(&["check", "tests/fixtures/nccl", "--budgets", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("budgets.txt:2: budget `untracked <= 2 gib`: unknown unit `gib`"), "{}", stderr(&o));
    assert!(stderr(&o).contains("did you mean `GiB`?"), "{}", stderr(&o));
}

/// A report file is untrusted input: terminal control sequences in a process's argv, title,
/// comm or host (OSC title, CSI clear screen, BEL, a C1 CSI, a carriage return) are shown
/// escaped in every text output, never sent to the terminal raw.
#[test]
fn terminal_control_sequences_in_a_report_are_escaped() {
    let evil = "x\u{1b}]0;owned\u{7}y\u{1b}[2J\u{9b}31mz\rw";
    let mut doc: serde_json::Value = serde_json::from_str(&good_report()).unwrap();
    doc["process"]["argv"] = serde_json::json!([evil, format!("--model={evil}")]);
    doc["process"]["title"] = evil.into();
    doc["process"]["comm"] = evil.into();
    doc["process"]["exe"] = format!("/usr/bin/{evil}").into();
    let d = tempdir();
    let dir = d.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("culedger-4101.json"), serde_json::to_string(&doc).unwrap()).unwrap();
    let other = fixtures().join("nccl");
    let p = dir.to_str().unwrap();
    let commands: [&[&str]; 7] = [
        &["report", p],
        &["report", p, "--format", "markdown"],
        &["report", p, "--fold"],
        &["explain", p],
        &["diff", p, other.to_str().unwrap()],
        &["diff", other.to_str().unwrap(), p],
        &["check", p, "--budget", "untracked<=1KiB", "--no-failures"],
    ];
    for args in commands {
        let o = culedger_env(args, &[("COLUMNS", "200")]);
        for (stream, text) in [("stdout", stdout(&o)), ("stderr", stderr(&o))] {
            let raw: Vec<char> = text.chars().filter(|&c| c != '\n' && c.is_control()).collect();
            assert!(raw.is_empty(), "{args:?} {stream}: raw control characters {raw:?} in\n{text}");
        }
        assert!(!stdout(&o).is_empty(), "{args:?}: {}", stderr(&o));
    }
    let o = culedger_env(&["report", p], &[("COLUMNS", "200")]);
    assert!(stdout(&o).contains(r"x\x1b]0;owned\x07y\x1b[2J\u{9b}31mz\rw"), "shown escaped:\n{}", stdout(&o));
}
