//! Property-based fuzzing of every reader of the command line: reports that are truncated,
//! corrupted byte by byte, with values replaced by anything JSON can hold, deeply nested, huge,
//! or from a future `culedger/1` with fields this version does not know. Whatever the input,
//! `report`, `diff`, `check`, `export` and `plot` end with status 0, 1 or 2 and a message, never
//! a panic or a signal; extra fields change nothing.
//!
//! `make test` runs a few dozen cases per property; a longer run:
//! `CULEDGER_FUZZ_CASES=2000 cargo test --release -p culedger-cli --test fuzz`.

mod common;
use common::*;

use std::path::Path;
use std::process::{Command, Output};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value};

fn cases(default: u32) -> u32 {
    std::env::var("CULEDGER_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(Config { cases: cases(default_cases), failure_persistence: None, ..Config::default() })
}

/// The fixture reports (real reports of the simulated stack) the mutations start from.
fn seeds() -> Vec<Value> {
    let mut v = Vec::new();
    for run in ["nccl", "custom-ar"] {
        let mut files: Vec<_> = std::fs::read_dir(fixtures().join(run)).unwrap().flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            v.push(serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap());
        }
    }
    v
}

/// `culedger ARGS` with the outcome checked: a status of 0, 1 or 2, no panic.
fn run_ok(args: &[&str], what: &str) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
        .args(args)
        .current_dir(crate_dir())
        .env("NO_COLOR", "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run culedger");
    let err = stderr(&o);
    assert!(
        matches!(o.status.code(), Some(0..=2)) && !err.contains("panicked"),
        "culedger {args:?} on {what}: status {:?}\n{err}",
        o.status
    );
    o
}

/// Every reading command on `file` (alone, and inside a directory next to a good report).
fn every_reader(dir: &Path, file: &Path, what: &str) {
    let f = file.to_str().unwrap();
    let d = dir.to_str().unwrap();
    let good = fixtures().join("nccl");
    let out = |name: &str| dir.join(name).to_string_lossy().into_owned();
    for format in ["text", "markdown", "json"] {
        run_ok(&["report", f, "--format", format], what);
    }
    run_ok(&["report", d], what);
    run_ok(&["diff", good.to_str().unwrap(), d], what);
    run_ok(&["diff", f, f, "--format", "json"], what);
    run_ok(&["check", f, "--budget", "ipc<=64MiB", "--budget", "peak:other>=1GiB", "--no-failures"], what);
    run_ok(&["export", f, "--perfetto", &out("t.json"), "--memory-viz", &out("m.pickle")], what);
    run_ok(&["plot", f, "-o", &out("p.svg")], what);
}

/// Write `text` as a report of its own directory (with a valid report beside it) and run every
/// reader on it.
fn check_text(text: &[u8], what: &str) {
    let tmp = tempdir();
    let file = tmp.path().join("culedger-7.json");
    std::fs::write(&file, text).unwrap();
    std::fs::copy(fixtures().join("nccl/culedger-4101.json"), tmp.path().join("culedger-1.json")).unwrap();
    every_reader(tmp.path(), &file, what);
}

/// Paths (as index lists) of every node of `v`, containers included.
fn nodes(v: &Value, at: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    out.push(at.clone());
    let children: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) => o.values().collect(),
        _ => return,
    };
    for (i, c) in children.into_iter().enumerate() {
        at.push(i);
        nodes(c, at, out);
        at.pop();
    }
}

fn node_mut<'a>(v: &'a mut Value, path: &[usize]) -> &'a mut Value {
    path.iter().fold(v, |v, &i| match v {
        Value::Array(a) => &mut a[i],
        Value::Object(o) => o.values_mut().nth(i).unwrap(),
        _ => unreachable!("paths only go through containers"),
    })
}

/// Any JSON value, a few levels deep, with the numbers and strings that break naive code.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![0u64, 1, u64::MAX, u64::MAX - 1, 1 << 63, 1 << 53]).prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        prop::sample::select(vec!["culedger/1", "culedger/2", "running", "exit", "other", "0x7f00", ""])
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

#[test]
fn truncated_and_corrupted_reports_never_crash_a_reader() {
    let seeds = seeds();
    let strategy =
        (0..seeds.len(), any::<bool>(), 0.0f64..1.0, prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8));
    runner(24)
        .run(&strategy, |(seed, pretty, cut, flips)| {
            let v = &seeds[seed];
            let mut text = if pretty { serde_json::to_vec_pretty(v) } else { serde_json::to_vec(v) }.unwrap();
            // Corrupt some bytes, then maybe cut the file short.
            for (at, byte) in &flips {
                let i = ((text.len() - 1) as f64 * at) as usize;
                text[i] = *byte;
            }
            if flips.is_empty() || cut < 0.5 {
                text.truncate((text.len() as f64 * cut) as usize);
            }
            check_text(&text, &format!("seed {seed}, {} bytes, {} flips", text.len(), flips.len()));
            Ok(())
        })
        .unwrap();
}

#[test]
fn any_value_anywhere_never_crashes_a_reader() {
    let seeds = seeds();
    let strategy = (0..seeds.len(), prop::collection::vec((any::<prop::sample::Index>(), any_json()), 1..4));
    runner(40)
        .run(&strategy, |(seed, changes)| {
            let mut v = seeds[seed].clone();
            for (at, value) in &changes {
                let mut all = Vec::new();
                nodes(&v, &mut Vec::new(), &mut all);
                let path = at.get(&all).clone();
                *node_mut(&mut v, &path) = value.clone();
            }
            check_text(&serde_json::to_vec(&v).unwrap(), &format!("seed {seed} with {changes:?}"));
            Ok(())
        })
        .unwrap();
}

/// A report from a later `culedger/1` writer: fields added anywhere (the schema only ever adds
/// fields) are ignored, so every command prints exactly what it prints for the original.
#[test]
fn extra_fields_of_a_future_writer_change_nothing() {
    let seeds = seeds();
    let categories = ["weights", "kv_pool", "ipc", "graphs", "comm", "other"];
    let strategy =
        (0..seeds.len(), prop::collection::vec((any::<prop::sample::Index>(), "x_[a-z]{1,8}", any_json()), 1..6));
    runner(24)
        .run(&strategy, |(seed, additions)| {
            let mut v = seeds[seed].clone();
            for (at, key, value) in &additions {
                let mut all = Vec::new();
                nodes(&v, &mut Vec::new(), &mut all);
                // Objects only, except the maps whose keys are data, not fields: the category
                // maps (their keys are the categories) and a process's `env` (variable names).
                let objects: Vec<Vec<usize>> = all
                    .into_iter()
                    .filter(|p| {
                        let env = p.split_last().is_some_and(|(&last, parent)| {
                            node_mut(&mut v, parent)
                                .as_object()
                                .and_then(|o| o.keys().nth(last))
                                .is_some_and(|k| k == "env")
                        });
                        !env && node_mut(&mut v, p)
                            .as_object()
                            .is_some_and(|o| !o.keys().any(|k| categories.contains(&k.as_str())))
                    })
                    .collect();
                let path = at.get(&objects).clone();
                node_mut(&mut v, &path).as_object_mut().unwrap().insert(key.clone(), value.clone());
            }
            let tmp = tempdir();
            let (a, b) = (tmp.path().join("culedger-1.json"), tmp.path().join("culedger-2.json"));
            std::fs::write(&a, serde_json::to_vec(&seeds[seed]).unwrap()).unwrap();
            std::fs::write(&b, serde_json::to_vec(&v).unwrap()).unwrap();
            for format in ["text", "json"] {
                let oa = run_ok(&["report", a.to_str().unwrap(), "--format", format], "original");
                let ob = run_ok(&["report", b.to_str().unwrap(), "--format", format], "with extra fields");
                prop_assert_eq!(ob.status.code(), Some(0), "{}", stderr(&ob));
                let strip = |s: String, p: &Path| s.replace(p.to_str().unwrap(), "REPORT");
                prop_assert_eq!(strip(stdout(&oa), &a), strip(stdout(&ob), &b));
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn deeply_nested_and_huge_reports_are_refused_or_read_never_crash() {
    let seed = &seeds()[1];
    assert!(seed["devices"][0]["probes"][0].is_object() && seed["devices"][0]["top_allocations"][0].is_object());
    // Nesting past serde_json's recursion limit (128), at the top and inside a report.
    for depth in [100, 127, 129, 1000, 100_000] {
        let nested = "[".repeat(depth) + &"]".repeat(depth);
        check_text(nested.as_bytes(), &format!("{depth} nested arrays"));
        let mut text = serde_json::to_string(seed).unwrap();
        text = text.replacen("\"devices\":", &format!("\"devices\":{nested},\"was_devices\":"), 1);
        check_text(text.as_bytes(), &format!("devices nested {depth} deep"));
    }
    // Huge: a 256 KiB argument, 5,000 probes and allocations, byte counts at the limit of i64
    // (sums overflow), then past it (refused: the schema's integers are i64).
    let mut v = seed.clone();
    v["process"]["argv"] = Value::from(vec!["x".repeat(256 << 10)]);
    let probe = v["devices"][0]["probes"][0].clone();
    v["devices"][0]["probes"] = Value::Array(vec![probe; 5_000]);
    let top = v["devices"][0]["top_allocations"][0].clone();
    v["devices"][0]["top_allocations"] = Value::Array(vec![top; 5_000]);
    for limit in [Value::from(i64::MAX), Value::from(u64::MAX)] {
        let d = &mut v["devices"][0];
        for key in ["total_bytes", "live_bytes", "peak_bytes"] {
            d[key] = limit.clone();
        }
        for c in d["categories"].as_object_mut().unwrap().values_mut() {
            c["live_bytes"] = limit.clone();
            c["peak_bytes"] = limit.clone();
        }
        let tmp = tempdir();
        let file = tmp.path().join("culedger-9.json");
        std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
        let what = format!("a huge report with byte counts of {limit}");
        if limit.is_i64() {
            every_reader(tmp.path(), &file, &what);
        } else {
            let o = run_ok(&["report", file.to_str().unwrap()], &what);
            assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        }
    }
    // A summary.json whose processes are not reports, and an empty file.
    check_text(br#"{"schema":"culedger-summary/1","processes":[1,null,{"schema":"culedger/1"}]}"#, "bad summary");
    check_text(b"", "an empty file");
}
