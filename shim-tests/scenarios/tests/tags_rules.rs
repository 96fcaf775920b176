//! Explicit tags (`culedger_push_tag`/`culedger_pop_tag`, Python `culedger.tag`) and the user's
//! rule file (`CULEDGER_RULES`) under the interposer, on the simulated stack. What the live
//! ledger can decide from tags, exports and captures shows in the report's categories now.

use culedger_scenarios::{repo_root, Run, Sim};
use serde_json::Value;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

fn libculedger() -> PathBuf {
    let p = std::env::var_os("CULEDGER_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/release/libculedger.so"));
    assert!(p.is_file(), "{} is missing: run `make` first", p.display());
    p
}

/// Runs tags_rt.py under culedger with `env`; returns the run and its only report.
fn run_tags(name: &str, env: &[(&str, &str)]) -> (Run, Value) {
    let mut sim = Sim::new(name);
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out).env("FAKECUDA_DEVICES", "2");
    for (k, v) in env {
        sim.env(k, v);
    }
    let run = sim.run_ok(&mut sim.python("tags_rt.py"));
    (run, only_report(&out))
}

/// tags_rt.py under culedger with `CULEDGER_RULES` naming a file that holds `rules`; the run,
/// its report and the file's path.
fn run_with_rules(name: &str, rules: &str) -> (Run, Value, String) {
    let holder = Sim::new(&format!("{name}_file"));
    let file = holder.scratch().join("rules.json");
    std::fs::write(&file, rules).unwrap();
    let path = file.display().to_string();
    let (run, report) = run_tags(name, &[("CULEDGER_RULES", &path)]);
    (run, report, path)
}

fn only_report(dir: &Path) -> Value {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("culedger-")))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap()
}

/// Live MiB per category of device 0.
fn categories(report: &Value) -> Vec<(String, u64)> {
    let d = &report["devices"][0];
    assert_eq!(d["index"], 0);
    ["weights", "kv_pool", "ipc", "graphs", "comm", "other"]
        .iter()
        .map(|c| (c.to_string(), d["categories"][c]["live_bytes"].as_u64().unwrap() / MIB))
        .collect()
}

fn cats(list: [(&str, u64); 6]) -> Vec<(String, u64)> {
    list.iter().map(|(c, n)| (c.to_string(), *n)).collect()
}

/// What tags_rt.py's allocations come to with the shipped rules: untagged 8 + the worker's
/// untagged 14; kv_pool 16 + 4; weights 2 + 10 (exported, the tag wins); graphs 12 (the
/// worker's tag); comm 4 (VMM); and my_lora 6, a category of its own (an extra key of the
/// report's categories, [`extra`]).
const SHIPPED: [(&str, u64); 6] =
    [("weights", 12), ("kv_pool", 20), ("ipc", 0), ("graphs", 12), ("comm", 4), ("other", 22)];

/// Live MiB of a category beyond the six, on device 0.
fn extra(report: &Value, name: &str) -> Option<u64> {
    report["devices"][0]["categories"][name]["live_bytes"].as_u64().map(|b| b / MIB)
}

#[test]
fn tags_attribute_allocations_per_thread_and_nest() {
    let (run, report) = run_tags("tags", &[]);
    assert_eq!(run.u64("active"), 1, "the Python module found the library's tag functions");
    assert_eq!(categories(&report), cats(SHIPPED));
    assert_eq!(extra(&report, "my_lora"), Some(6));
    // Every tagged allocation's category comes from the tag rule, in the top allocations and
    // the sites alike.
    let d = &report["devices"][0];
    for a in d["top_allocations"].as_array().unwrap() {
        let untagged = [8 * MIB, 14 * MIB].contains(&a["bytes"].as_u64().unwrap());
        assert_eq!(a["rule"], if untagged { Value::Null } else { "tag".into() }, "{a}");
    }
    assert!(d["sites"].as_array().unwrap().iter().any(|s| s["category"] == "my_lora" && s["rule"] == "tag"), "{d}");
    assert_eq!(report["devices"][0]["ipc"]["exported_count"], 1);
    assert!(report["health"]["warnings"].as_array().unwrap().is_empty(), "{}", report["health"]);
}

#[test]
fn tags_are_no_ops_without_culedger() {
    let sim = Sim::new("tags_without");
    let run = sim.run_ok(&mut sim.python("tags_rt.py"));
    assert_eq!(run.u64("active"), 0);
    assert_eq!(run.u64("done"), 1);
}

#[test]
fn a_user_rule_file_goes_first() {
    let (run, report, _) = run_with_rules(
        "user_rules",
        r#"{"culedger_rules": 1, "pack": "mine",
            "rules": [{"name": "mine.lora_is_kv", "category": "kv_pool", "match": {"tag": "my_lo*"}}]}"#,
    );
    assert_eq!(
        categories(&report),
        cats([("weights", 12), ("kv_pool", 26), ("ipc", 0), ("graphs", 12), ("comm", 4), ("other", 22)])
    );
    assert!(!run.stderr.contains("culedger:"), "{}", run.describe());
}

#[test]
fn a_replacing_rule_file_drops_the_shipped_rules() {
    let (_, report, _) = run_with_rules(
        "replace_rules",
        r#"{"culedger_rules": 1, "replace": true,
            "rules": [{"name": "only", "category": "graphs", "match": {"tag": "comm"}}]}"#,
    );
    // No tag rule left but this one: every other allocation is other, the export included.
    assert_eq!(
        categories(&report),
        cats([("weights", 0), ("kv_pool", 0), ("ipc", 0), ("graphs", 4), ("comm", 0), ("other", 72)])
    );
}

#[test]
fn a_bad_rule_file_gives_one_warning_naming_the_line_and_the_shipped_rules() {
    let (run, report, file) = run_with_rules(
        "bad_rules",
        "{\"culedger_rules\": 1,\n \"rules\": [\n  {\"name\": \"typo\", \"category\": \"kv_pool\",\n   \"match\": {\"tags\": \"x\"}}\n]}\n",
    );
    let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("culedger:")).collect();
    assert_eq!(lines.len(), 1, "{}", run.describe());
    let want = format!("culedger: CULEDGER_RULES={file}: line 3: rule 1 (\"typo\"): unknown condition \"tags\"");
    assert!(lines[0].starts_with(&want), "{}\nwanted {want}", lines[0]);
    assert!(lines[0].ends_with("; using the built-in rules"), "{}", lines[0]);
    let warnings = report["health"]["warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| lines[0].ends_with(w.as_str().unwrap())), "{warnings:?}");
    assert_eq!(categories(&report), cats(SHIPPED), "the shipped rules are in effect");
    // A file that cannot be read: the same, one warning.
    let (run, _) = run_tags("missing_rules", &[("CULEDGER_RULES", "/nonexistent/rules.json")]);
    let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("culedger:")).collect();
    assert_eq!(lines.len(), 1, "{}", run.describe());
    assert!(lines[0].contains("CULEDGER_RULES=/nonexistent/rules.json: cannot read it"), "{}", lines[0]);
}

/// `CULEDGER_RULES` naming something that is not a regular file of at most 4 MiB (a FIFO
/// nobody writes, `/dev/zero`, `/dev/urandom`, a directory, a 5 MiB file): the program runs
/// as always, at once and without growing (a 4 GiB address-space limit holds), with one
/// warning saying why the file was not read, and the shipped rules in effect.
#[test]
fn a_rules_path_that_blocks_or_never_ends_gives_one_warning() {
    let holder = Sim::new("odd_rules_paths");
    let fifo = holder.scratch().join("rules.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let big = holder.scratch().join("big.json");
    std::fs::write(&big, format!("{{\"culedger_rules\": 1, \"rules\": []{}}}", " ".repeat(5 << 20))).unwrap();
    let not_regular = "not a regular file";
    let cases = [
        (fifo.clone(), not_regular),
        ("/dev/zero".into(), not_regular),
        ("/dev/urandom".into(), not_regular),
        (holder.scratch().to_path_buf(), not_regular),
        (big, "larger than 4 MiB"),
    ];
    for (n, (path, why)) in cases.into_iter().enumerate() {
        let path = path.display().to_string();
        let mut sim = Sim::new(&format!("odd_rules_{n}"));
        let out = sim.scratch().join("out");
        sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out).env("CULEDGER_RULES", &path);
        sim.timeout(std::time::Duration::from_secs(30));
        let mut cmd = sim.cmd("rt_tags");
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                let limit = libc::rlimit { rlim_cur: 4 << 30, rlim_max: 4 << 30 };
                libc::setrlimit(libc::RLIMIT_AS, &limit);
                Ok(())
            });
        }
        let run = sim.run(&mut cmd);
        run.assert_success();
        let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("culedger:")).collect();
        let want = format!("culedger: CULEDGER_RULES={path}: cannot read it ({why}); using the built-in rules");
        assert_eq!(lines, [want], "{path}");
        let report = only_report(&out);
        assert_eq!(report["health"]["warnings"].as_array().unwrap().len(), 1, "{path}");
    }
}
