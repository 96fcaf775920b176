//! Report-time categories ([5]) on small programs: explicit tags from C (`culedger_push_tag`
//! through a weak lookup) and a user rule file adding a category of its own show up in the
//! report's per-category figures, and every site and top allocation names the rule behind its
//! category. (The engine sims' accuracy is in engines.rs; Python tags and bad rule files in
//! tags_rules.rs.)

use culedger_scenarios::reports::reports_in;
use culedger_scenarios::{repo_root, Run, Sim};
use serde_json::Value;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

fn libculedger() -> PathBuf {
    let p = repo_root().join("target/release/libculedger.so");
    assert!(p.is_file(), "{} is missing: run `make` first", p.display());
    p
}

fn only_report(dir: &Path) -> Value {
    let mut reports = reports_in(dir);
    assert_eq!(reports.len(), 1, "{reports:?}");
    reports.remove(0).1
}

/// rt_tags under culedger (with `CULEDGER_RULES` = a file holding `rules`, if any).
fn run_tags(name: &str, rules: Option<&str>) -> (Run, Value) {
    let mut sim = Sim::new(name);
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out);
    if let Some(text) = rules {
        let file = sim.scratch().join("rules.json");
        std::fs::write(&file, text).unwrap();
        sim.env("CULEDGER_RULES", &file);
    }
    let run = sim.run_ok(&mut sim.cmd("rt_tags"));
    (run, only_report(&out))
}

/// (live, peak) MiB of every category of device 0, in the report's order of keys.
fn figures(report: &Value) -> Vec<(String, u64, u64)> {
    let d = &report["devices"][0];
    let mut v: Vec<(String, u64, u64)> = d["categories"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, c)| (k.clone(), c["live_bytes"].as_u64().unwrap() / MIB, c["peak_bytes"].as_u64().unwrap() / MIB))
        .collect();
    v.sort();
    v
}

fn fig(list: &[(&str, u64)]) -> Vec<(String, u64, u64)> {
    let mut v: Vec<(String, u64, u64)> = list.iter().map(|&(c, n)| (c.to_string(), n, n)).collect();
    v.sort();
    v
}

/// The (category, rule) of the top allocation of `mib` MiB on device 0.
fn top(report: &Value, mib: u64) -> (String, Value) {
    let list = report["devices"][0]["top_allocations"].as_array().unwrap();
    let a = list.iter().find(|a| a["bytes"] == mib * MIB).unwrap_or_else(|| panic!("no {mib} MiB in {list:?}"));
    (a["category"].as_str().unwrap().to_string(), a["rule"].clone())
}

#[test]
fn c_tags_name_categories_with_their_rule() {
    let (run, report) = run_tags("c_tags", None);
    assert_eq!((run.u64("active"), run.u64("depth")), (1, 2), "{}", run.describe());
    // lora_c is a category of the program's own: the 5 MiB allocation (with a site) is in it;
    // the 64 KiB one keeps the live ledger's category (other), below CULEDGER_SITE_MIN.
    assert_eq!(
        figures(&report),
        fig(&[("weights", 0), ("kv_pool", 3), ("ipc", 0), ("graphs", 0), ("comm", 0), ("other", 7), ("lora_c", 5)])
    );
    assert_eq!(top(&report, 3), ("kv_pool".into(), "tag".into()));
    assert_eq!(top(&report, 5), ("lora_c".into(), "tag".into()));
    assert_eq!(top(&report, 7), ("other".into(), Value::Null), "no rule: the default");
    let sites = report["devices"][0]["sites"].as_array().unwrap();
    assert!(sites.iter().any(|s| s["category"] == "lora_c" && s["rule"] == "tag"), "{sites:?}");
    let small = report["devices"][0]["top_allocations"].as_array().unwrap().iter().find(|a| a["bytes"] == 64 << 10);
    // The tag rule named lora_c for it; the live ledger has only the six: other.
    assert_eq!(small.map(|a| (&a["category"], &a["rule"])), Some((&"other".into(), &"tag".into())));
    assert!(report["health"]["warnings"].as_array().unwrap().is_empty(), "{}", report["health"]);
    // The timeline's last sample has the final categories too.
    let last = report["devices"][0]["timeline"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["lora_c"], 5 * MIB, "{last}");
    assert_eq!(last["kv_pool"], 3 * MIB, "{last}");
}

#[test]
fn a_user_rule_file_adds_a_category() {
    let rules = r#"{"culedger_rules": 1, "pack": "mine", "rules": [
        {"name": "mine.seven", "category": "scratch", "match": {"bytes": {"min": "7MiB", "max": "7MiB"}}}]}"#;
    let (run, report) = run_tags("c_tags_user_rules", Some(rules));
    assert!(!run.stderr.contains("culedger:"), "{}", run.describe());
    assert_eq!(
        figures(&report),
        fig(&[
            ("weights", 0),
            ("kv_pool", 3),
            ("ipc", 0),
            ("graphs", 0),
            ("comm", 0),
            ("other", 0),
            ("lora_c", 5),
            ("scratch", 7)
        ])
    );
    assert_eq!(top(&report, 7), ("scratch".into(), "mine.seven".into()));
    let sites = report["devices"][0]["sites"].as_array().unwrap();
    assert!(sites.iter().any(|s| s["category"] == "scratch" && s["rule"] == "mine.seven"), "{sites:?}");
}

#[test]
fn tags_are_no_ops_without_culedger() {
    let sim = Sim::new("c_tags_without");
    let run = sim.run_ok(&mut sim.cmd("rt_tags"));
    assert_eq!((run.u64("active"), run.u64("depth"), run.u64("done")), (0, 0, 1));
}
