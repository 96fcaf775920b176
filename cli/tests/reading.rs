//! What a person reads at the widths terminals have: every command on the 8-rank fixture at
//! COLUMNS=80 and 100 breaks lines only at spaces or frame separators (no identifier cut
//! inside it, no name shortened into a stub) and never shows two processes under one name.

mod common;

use common::{culedger_env, fixtures, stdout};
use std::collections::BTreeSet;

/// The runs of identifier characters in `text` (`MHATokenToKVPool`, `_create_buffers`,
/// `cudaDeviceEnablePeerAccess`, `918`).
fn tokens(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|t| !t.is_empty()).collect()
}

fn commands(tp8: &str, nccl: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["report", tp8]),
        v(&["report", "--brief", tp8]),
        v(&["report", "--no-fold", tp8]),
        v(&["explain", tp8]),
        v(&["diff", nccl, tp8]),
        v(&["whatif", tp8, "--set", "mem_fraction_static=0.6"]),
        v(&["check", tp8, "--budget", "untracked<=2GiB", "--no-failures"]),
        v(&["top", "--once", tp8]),
    ]
}

#[test]
fn names_are_never_cut_at_80_and_100_columns() {
    let tp8 = fixtures().join("custom-ar-tp8");
    let nccl = fixtures().join("nccl");
    let (tp8, nccl) = (tp8.to_str().unwrap(), nccl.to_str().unwrap());
    // Every token the outputs may hold: those of the outputs where nothing wraps, and of the
    // reports themselves.
    let mut known: BTreeSet<String> = BTreeSet::new();
    for entry in std::fs::read_dir(fixtures().join("custom-ar-tp8")).unwrap().chain(std::fs::read_dir(fixtures().join("nccl")).unwrap()) {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        known.extend(tokens(&text).into_iter().map(String::from));
    }
    for cmd in commands(tp8, nccl) {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let wide = stdout(&culedger_env(&args, &[("COLUMNS", "1000")]));
        known.extend(tokens(&wide).into_iter().map(String::from));
    }
    // A rank's short name (`sglang::scheduler_TP0` shown as `TP0`).
    let short: Vec<String> =
        known.iter().filter_map(|t| t.rsplit_once('_')).map(|(_, tail)| tail.to_string()).collect();
    known.extend(short);
    let mut bad = Vec::new();
    for cmd in commands(tp8, nccl) {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        for cols in ["80", "100"] {
            let out = stdout(&culedger_env(&args, &[("COLUMNS", cols)]));
            assert!(!out.is_empty(), "{cmd:?} at {cols}");
            for t in tokens(&out) {
                if t.len() >= 3 && !known.contains(t) {
                    bad.push(format!("{} at COLUMNS={cols}: `{t}`", cmd[..cmd.len().min(2)].join(" ")));
                }
            }
            // The ranks' processes apart wherever a process name is shown: no stub names.
            assert!(!out.contains("sglang::s..."), "{cmd:?} at {cols}:\n{out}");
        }
    }
    bad.sort();
    bad.dedup();
    assert!(bad.is_empty(), "identifiers cut inside a token:\n{}", bad.join("\n"));
}
