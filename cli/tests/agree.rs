//! One set of counts and labels ([24] 2): `report`, `explain`, `diff`, `html` and `metrics`
//! agree on how many ranks failed, also when a rank exited without a failed allocation of
//! its own (the demo's "7 of 8 ranks failed" that explain and the page called "8 failed
//! allocations"), and the page marks as "the sizing query" the query explain and diff
//! reconcile the pool from, not the one before the weights.

mod common;
use common::*;
use serde_json::Value;

/// The JSON document `html` embeds in its page.
fn page_data(dir: &str) -> Value {
    let out = tempdir();
    let page = out.path().join("p.html");
    let o = culedger(&["html", dir, "-o", page.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    let start = html.find("<script id=\"culedger-data\" type=\"application/json\">").expect("data script")
        + "<script id=\"culedger-data\" type=\"application/json\">".len();
    let end = start + html[start..].find("</script>").unwrap();
    serde_json::from_str(&html[start..end]).expect("page data")
}

/// (failed ranks, ranks) as each output says them.
fn counts(dir: &str, failed: usize, ranks: usize) {
    let words = format!("{failed} of {ranks} ranks failed to allocate");
    let report = stdout(&culedger(&["report", dir]));
    assert!(report.lines().any(|l| l.starts_with(&words)), "report:\n{report}");
    let json: Value = serde_json::from_str(&stdout(&culedger(&["report", dir, "--format", "json"]))).unwrap();
    assert_eq!((json["verdict"]["failed_ranks"].as_u64(), json["verdict"]["ranks"].as_u64()), (Some(failed as u64), Some(ranks as u64)));
    let explain = stdout(&culedger(&["explain", dir]));
    assert!(explain.lines().any(|l| l.starts_with(&words)), "explain:\n{explain}");
    let brief = stdout(&culedger(&["report", "--brief", dir]));
    assert!(brief.contains(&format!("culedger explain: {words}")), "the one screen:\n{brief}");
    let metrics = stdout(&culedger(&["metrics", dir]));
    assert!(metrics.lines().any(|l| l == format!("culedger_run_failed_ranks {failed}")), "{metrics}");
    assert!(metrics.lines().any(|l| l == format!("culedger_run_ranks {ranks}")), "{metrics}");
    let data = page_data(dir);
    let run = &data["runs"][0];
    assert_eq!(run["summary"]["verdict"]["failed_ranks"].as_u64(), Some(failed as u64));
    assert!(run["explain"]["verdict"].as_str().unwrap().starts_with(&words), "{}", run["explain"]["verdict"]);
    let diff = stdout(&culedger(&["diff", &fixtures().join("nccl").display().to_string(), dir]));
    let flat = diff.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(&format!("failed on {failed} of {ranks} GPUs")), "diff:\n{diff}");
}

#[test]
fn every_output_counts_the_failed_ranks_alike() {
    counts(&fixtures().join("custom-ar-tp8").display().to_string(), 8, 8);
    counts(&fixtures().join("custom-ar").display().to_string(), 2, 2);
}

/// The demo's other outcome: rank 6 exits with status 1 without a failed allocation (it died
/// of another rank's failure); 7 of 8 ranks failed to allocate, in every output.
#[test]
fn a_rank_that_failed_without_an_allocation_is_not_counted_as_one() {
    let d = mixed_dir(&["custom-ar-tp8"]);
    let path = d.path().join("culedger-6107.json");
    let mut r: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for dev in r["devices"].as_array_mut().unwrap() {
        dev["failures"] = Value::Array(Vec::new());
    }
    assert_eq!(r["process"]["exit_code"], 1);
    std::fs::write(&path, serde_json::to_string(&r).unwrap()).unwrap();
    let dir = d.path().display().to_string();
    counts(&dir, 7, 8);
    let explain = stdout(&culedger(&["explain", &dir]));
    assert!(
        explain.lines().any(|l| l.starts_with("7 of 8 ranks failed to allocate and 1 more process failed without a failed allocation")),
        "{explain}"
    );
}

/// nccl (every pool fit: explain has no failure and no sizing finding) marks the KV pool's
/// sizing query, the one diff reconciles from ("told free at the sizing query"), on every
/// GPU: never the query before the weights.
#[test]
fn the_page_marks_the_sizing_query_diff_names() {
    let nccl = fixtures().join("nccl").display().to_string();
    let data = page_data(&nccl);
    let diff: Value = serde_json::from_str(&stdout(&culedger(&["diff", &nccl, &nccl, "--format", "json"]))).unwrap();
    let charts = data["runs"][0]["charts"].as_array().unwrap();
    assert!(!charts.is_empty());
    for ch in charts {
        let marked: Vec<&Value> = ch["queries"].as_array().unwrap().iter().filter(|q| q["sizing"] == true).collect();
        assert_eq!(marked.len(), 1, "GPU {}: {marked:?}", ch["index"]);
        let dev = diff["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["device"].as_str().is_some_and(|n| n.ends_with(&format!("GPU {}", ch["index"]))))
            .expect("the GPU in diff");
        let told = dev["since_sizing"]["rows"].as_array().unwrap().iter().find(|r| r["kind"] == "told").unwrap();
        assert_eq!(marked[0]["free"], told["a"], "GPU {}: the page's sizing query is not diff's", ch["index"]);
        assert!(ch["sizing"]["why"].as_str().unwrap().contains("sized its pool from it"), "{}", ch["sizing"]["why"]);
    }
}

/// Repeats folded and ranks in order ([24] 4), on the 8-rank fixture: the process tables list
/// rank 0 to 7 (the fixture's reports started 0, 1, 2, 7, 3, 4, 6, 5), the ten identical
/// 918 MiB parts of rank 0's KV pool are one row, and the other ranks' peer contexts show
/// what a context costs on the simulated GPU (512 MiB, the fake driver's context) instead
/// of "0 B".
#[test]
fn ranks_in_order_repeats_folded_and_contexts_priced() {
    let dir = fixtures().join("custom-ar-tp8").display().to_string();
    let text = stdout(&culedger(&["report", &dir, "--no-fold"]));
    let order = |section: &str| -> Vec<usize> {
        let body = text.split(section).nth(1).unwrap();
        let body = &body[..body.find("\n\n").unwrap_or(body.len())];
        body.lines().filter_map(|l| l.split("scheduler_TP").nth(1)).filter_map(|r| r[..1].parse().ok()).collect()
    };
    assert_eq!(order("== Processes =="), (0..8).collect::<Vec<_>>(), "{text}");
    assert_eq!(order("== sim-host GPU 0 "), (0..8).collect::<Vec<_>>(), "{text}");
    assert_eq!(order("== sim-host GPU 5 "), (0..8).collect::<Vec<_>>(), "{text}");
    let gpu1 = text.split("== sim-host GPU 1 ").nth(1).unwrap();
    let gpu1 = &gpu1[..gpu1.find("-- ").unwrap()];
    let priced = gpu1.lines().filter(|l| l.contains("peer context") && l.contains("(~512.00 MiB)")).count();
    assert_eq!(priced, 7, "{gpu1}");
    assert!(gpu1.contains("not in the\nsum (3.50 GiB in all)") || gpu1.contains("not in the sum (3.50 GiB in all)"), "{gpu1}");
    let json: Value = serde_json::from_str(&stdout(&culedger(&["report", &dir, "--format", "json"]))).unwrap();
    let top = json["devices"][0]["top_allocations"].as_array().unwrap();
    let pool = top.iter().find(|a| a["bytes"] == 918 << 20).expect("the KV pool's parts");
    assert_eq!((pool["count"].as_u64(), pool["category"].as_str()), (Some(10), Some("kv_pool")));
    // Each row is one (size, caller) of the process: no two rows alike.
    for (i, a) in top.iter().enumerate() {
        for b in &top[i + 1..] {
            assert!((&a["bytes"], &a["caller"], &a["category"]) != (&b["bytes"], &b["caller"], &b["category"]), "{a}\n{b}");
        }
    }
    assert!(text.contains("10 x 918.00 MiB"), "{text}");
}

/// The page's picture of each GPU at its failure names the driver costs explain reconciles
/// (de-noised: what another process did inside a call's window is not the call's): on the
/// 8-rank fixture GPU 2's IPC opens measured 1.03 GiB because rank 2's context window caught
/// another rank's 1 GiB peer context, and the picture said 2.78 GiB where explain said 1.78.
#[test]
fn the_picture_and_explain_name_the_same_driver_costs() {
    let dir = fixtures().join("custom-ar-tp8").display().to_string();
    let data = page_data(&dir);
    let explained: Value = serde_json::from_str(&stdout(&culedger(&["explain", &dir, "--format", "json"]))).unwrap();
    let mut seen = 0;
    for ch in data["runs"][0]["charts"].as_array().unwrap() {
        let f = explained["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == "failed_allocation" && f["device"] == ch["index"])
            .expect("a failure on every GPU");
        let costs: i64 = f["detail"]["reconciliation"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == "driver_cost")
            .map(|i| i["bytes"].as_i64().unwrap())
            .sum();
        assert_eq!(ch["at"]["driver_costs"].as_i64(), Some(costs), "GPU {}: the picture's driver costs", ch["index"]);
        seen += 1;
    }
    assert_eq!(seen, 8);
}
