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

/// Every chart draws the categories of the program's own ([23] item 22): rt_tags under
/// culedger with a user rule file, so that device 0 ends with a tag's category (lora_c, 5 MiB)
/// and a rule's (scratch, 7 MiB) beside kv_pool (3 MiB). The HTML page's chart and its picture,
/// `plot`'s SVG and the Perfetto trace each hold both, with their bytes: none is dropped or
/// folded into another, and the page's stack at the last sample is the report's live total.
#[test]
fn charts_draw_the_programs_own_categories() {
    let rules = r#"{"culedger_rules": 1, "pack": "mine", "rules": [
        {"name": "mine.seven", "category": "scratch", "match": {"bytes": {"min": "7MiB", "max": "7MiB"}}}]}"#;
    let mut sim = Sim::new("c_tags_charts");
    let out = sim.scratch().join("out");
    let file = sim.scratch().join("rules.json");
    std::fs::write(&file, rules).unwrap();
    sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out).env("CULEDGER_RULES", &file);
    sim.run_ok(&mut sim.cmd("rt_tags"));
    let report = only_report(&out);
    let last = report["devices"][0]["timeline"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["lora_c"].as_u64(), last["scratch"].as_u64()), (Some(5 * MIB), Some(7 * MIB)), "{last}");
    let live = last["live_bytes"].as_u64().unwrap();
    let dir = out.to_str().unwrap();
    let cli = culedger_scenarios::cli::culedger;

    // The page: the chart's series and the picture of the GPU.
    let page = sim.scratch().join("p.html");
    let (code, _) = cli(&["html", dir, "-o", page.to_str().unwrap()]);
    assert_eq!(code, 0);
    let text = std::fs::read_to_string(&page).unwrap();
    let start = text.find("type=\"application/json\">").unwrap() + "type=\"application/json\">".len();
    let data: Value = serde_json::from_str(&text[start..start + text[start..].find("</script>").unwrap()]).unwrap();
    let chart = &data["runs"][0]["charts"][0];
    let cats = chart["cats"].as_object().unwrap();
    for (name, mib) in [("lora_c", 5), ("scratch", 7), ("kv_pool", 3)] {
        let max = cats[name].as_array().unwrap().iter().filter_map(Value::as_u64).max();
        assert_eq!(max, Some(mib * MIB), "{name} on the page's chart: {cats:?}");
    }
    let stacked = |i: usize| cats.values().map(|v| v[i].as_u64().unwrap()).sum::<u64>();
    assert!((0..chart["t"].as_array().unwrap().len()).any(|i| stacked(i) == live), "the stack reaches {live}: {cats:?}");
    // The picture of the GPU (at its peak) holds what the chart holds then, own categories
    // too. It needs the GPU's capacity, which this 3 ms program's report holds only when the
    // library's usage reading ran before it exited (about half the runs).
    let at = &chart["at"];
    assert_eq!(at.is_null(), report["devices"][0]["total_bytes"].is_null(), "{at}");
    if !at.is_null() {
        let t = chart["t"].as_array().unwrap();
        let i = t.iter().position(|x| x.as_f64() == at["t"].as_f64()).unwrap_or_else(|| panic!("{at} on {t:?}"));
        let pictured: u64 = at["cats"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(pictured, stacked(i), "{at}");
    }

    // plot: an area and a legend entry for each.
    let svg = sim.scratch().join("p.svg");
    let (code, _) = cli(&["plot", dir, "-o", svg.to_str().unwrap()]);
    assert_eq!(code, 0);
    let svg = std::fs::read_to_string(&svg).unwrap();
    for name in ["lora_c", "scratch", "kv_pool"] {
        assert!(svg.contains(&format!("class=\"area {name}\"")), "{name}'s area in the plot");
        assert!(svg.contains(&format!("\n{name}\n</text>")), "{name} in the plot's legend");
    }

    // The Perfetto trace: the GPU's counter track has a series for each.
    let trace = sim.scratch().join("t.json");
    let (code, _) = cli(&["export", dir, "--perfetto", trace.to_str().unwrap()]);
    assert_eq!(code, 0);
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let counters: Vec<&Value> =
        trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "C" && e["name"] == "GPU 0").collect();
    for (name, mib) in [("lora_c", 5), ("scratch", 7), ("kv_pool", 3)] {
        let max = counters.iter().filter_map(|e| e["args"][name].as_u64()).max();
        assert_eq!(max, Some(mib * MIB), "{name} in the trace's GPU 0 counters");
    }
}

/// A program that ends before the writer thread first ran (rt_tags: a few milliseconds, no
/// query of its own) still gets the device's NVML reading in its only report: the final write
/// of a normal exit waits for the writer to name the devices and open NVML. It served the
/// exit first, so the report had no `usage` and no `total_bytes` in 14 of 20 runs (fake NVML
/// on the simulated machine: 96 GiB). Twenty runs, every one complete.
#[test]
fn a_program_shorter_than_the_writers_start_gets_its_devices_reading() {
    let mut missing = Vec::new();
    for i in 0..20 {
        let (_, report) = run_tags(&format!("c_tags_usage_{i}"), None);
        let d = &report["devices"][0];
        let total = d["total_bytes"].as_u64();
        let usage = d["usage"]["total_bytes"].as_u64();
        if total.is_none() || usage != total || d["usage"]["source"] != "nvml" {
            missing.push(format!("run {i}: total_bytes {total:?}, usage {}", d["usage"]));
        }
    }
    assert!(missing.is_empty(), "{} of 20 reports without the device's reading:\n{}", missing.len(), missing.join("\n"));
}
