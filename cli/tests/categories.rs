//! Report-time categories in `culedger report`: the rule behind each caller's category
//! in "Where the memory was allocated", and categories beyond the six (a user's rules, a
//! program's tags) shown when not empty, or always with --all-categories.

mod common;
use common::*;
use serde_json::Value;

/// tests/fixtures/nccl's rank 1 report with report-time fields: every site of device 1 names a
/// rule (the KV pool's the SGLang pack's), and device 1 has a category of its own, `lora`,
/// holding `lora` bytes.
fn with_rules(dir: &std::path::Path, lora: i64) {
    let text = std::fs::read_to_string("tests/fixtures/nccl/culedger-4102.json").unwrap();
    let mut r: Value = serde_json::from_str(&text).unwrap();
    for d in r["devices"].as_array_mut().unwrap() {
        for s in d["sites"].as_array_mut().unwrap() {
            let caller = s["caller"].as_str().unwrap_or("");
            let (cat, rule) = if caller.contains("KVPool") {
                ("kv_pool", "sglang.kv_pool.init_memory_pool")
            } else if caller.contains("load_model") {
                ("weights", "sglang.weights.load_model")
            } else {
                ("other", "sglang.other.rest")
            };
            (s["category"], s["rule"]) = (cat.into(), rule.into());
        }
        d["categories"]["lora"] =
            serde_json::json!({"live_bytes": lora, "peak_bytes": lora, "allocs": i64::from(lora > 0)});
    }
    std::fs::write(dir.join("culedger-4102.json"), r.to_string()).unwrap();
}

#[test]
fn sites_show_the_rule_behind_their_category() {
    let d = tempdir();
    with_rules(d.path(), 6 << 20);
    let o = culedger_env(&["report", d.path().to_str().unwrap()], &[("COLUMNS", "200")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let table = &out[out.find("-- Where the memory was allocated").expect(&out)..];
    let header = table.lines().find(|l| l.contains("caller")).unwrap();
    assert!(header.contains("caller [rule]") && header.contains("category"), "{table}");
    // The rule on the caller's second line, the category in its own column.
    let lines: Vec<&str> = table.lines().collect();
    let kv = lines.iter().position(|l| l.contains("MHATokenToKVPool._create_buffers")).expect(table);
    assert!(lines[kv].contains(" kv_pool "), "{table}");
    assert!(lines[kv + 1].contains("[sglang.kv_pool.init_memory_pool]"), "{table}");
    // The category of its own is listed with the six.
    let cats = &out[out.find("category").unwrap()..];
    assert!(
        cats.lines().any(|l| l.trim_start_matches(['|', ' ']).starts_with("lora ") && l.contains("6.00 MiB")),
        "{out}"
    );
    // At 100 columns (the default width off a terminal) the table fits; the rule wraps.
    let narrow = stdout(&culedger_env(&["report", d.path().to_str().unwrap()], &[("COLUMNS", "100")]));
    assert!(narrow.lines().all(|l| l.chars().count() <= 100), "{narrow}");
}

#[test]
fn an_empty_category_of_its_own_shows_only_with_all_categories() {
    let d = tempdir();
    with_rules(d.path(), 0);
    let path = d.path().to_str().unwrap();
    let lora =
        |args: &[&str]| stdout(&culedger(args)).lines().any(|l| l.trim_start_matches(['|', ' ']).starts_with("lora "));
    assert!(!lora(&["report", path]));
    assert!(lora(&["report", path, "--all-categories"]));
    let j: Value = serde_json::from_str(&stdout(&culedger(&["report", path, "--format", "json"]))).unwrap();
    assert!(!j["categories_shown"].as_array().unwrap().iter().any(|c| c == "lora"), "{}", j["categories_shown"]);
}
