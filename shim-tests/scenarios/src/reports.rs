//! Reading what culedger left behind, for tests that run programs under the interposer: the
//! library's path, the reports in an output directory (checked to be complete `culedger/1`
//! documents), leftover temporary files, and the `culedger:` lines a run printed.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Run;

/// The `libculedger.so` under test, in [`crate::build_dir`] (`target/release` unless the
/// aarch64 run points elsewhere); panics with a hint when it is not built.
pub fn libculedger() -> PathBuf {
    let p = crate::build_dir().join("libculedger.so");
    assert!(p.is_file(), "{} is missing: run `make` first", p.display());
    p
}

/// Is `name` a report file name (`culedger-*.json`)?
pub fn is_report_name(name: &str) -> bool {
    name.starts_with("culedger-") && name.ends_with(".json")
}

/// Every report in `dir` (none when it does not exist), sorted by file name. Panics unless each
/// one is a complete `culedger/1` document: valid JSON, schema, `process`, `devices`, `health`.
pub fn reports_in(dir: &Path) -> Vec<(PathBuf, Value)> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| is_report_name(&n.to_string_lossy())))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let doc: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not complete JSON ({e}), {} bytes", p.display(), text.len()));
            assert_eq!(doc["schema"], "culedger/1", "{}", p.display());
            for key in ["process", "settings", "health", "host"] {
                assert!(doc[key].is_object(), "{}: no {key} object", p.display());
            }
            assert!(doc["devices"].is_array(), "{}: no devices array", p.display());
            (p, doc)
        })
        .collect()
}

/// The one report in `dir` (panics unless there is exactly one, complete).
pub fn only_report(dir: &Path) -> Value {
    let mut all = reports_in(dir);
    let names: Vec<&PathBuf> = all.iter().map(|(p, _)| p).collect();
    assert_eq!(all.len(), 1, "one report expected in {}: {names:?}", dir.display());
    all.pop().map(|(_, doc)| doc).unwrap()
}

/// The report of process `pid` in `dir`.
pub fn report_of_pid(dir: &Path, pid: u32) -> Value {
    reports_in(dir)
        .into_iter()
        .map(|(_, doc)| doc)
        .find(|doc| doc["process"]["pid"] == pid)
        .unwrap_or_else(|| panic!("{}: no report of pid {pid}", dir.display()))
}

/// Temporary files of the atomic writer left in `dir` (`.culedger-*.tmp.*`).
pub fn temporaries_in(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.contains(".tmp")).collect()
}

/// The lines culedger printed on the run's stderr.
pub fn culedger_lines(run: &Run) -> Vec<String> {
    run.stderr.lines().filter(|l| l.starts_with("culedger:")).map(str::to_string).collect()
}

/// The device with `index` in a report.
pub fn device(report: &Value, index: u64) -> &Value {
    report["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["index"].as_u64() == Some(index)))
        .unwrap_or_else(|| panic!("no device {index} in {report:#}"))
}

/// An integer field (panics with the value otherwise).
pub fn int(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// Permission bits of a file.
pub fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o7777
}
