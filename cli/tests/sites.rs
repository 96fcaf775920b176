//! Call sites in the CLI: the report's "Where the memory was allocated" table, the diff's
//! "Call sites that grew", and the frames of the memory_viz export's blocks.

mod common;
use common::*;
use std::process::Command;

#[test]
fn report_shows_live_bytes_by_caller_per_device() {
    // Wide enough that no caller is wrapped (the table's fitting is tested in golden.rs).
    let o = culedger_env(&["report", "tests/fixtures/nccl"], &[("COLUMNS", "200")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.matches("-- Where the memory was allocated").count(), 2, "one table per device");
    // Rank 1 (pid 4102) on GPU 1: its KV pool and weights, named after the engine sim's
    // functions (SGLang's module tree, shim-tests/py/engines/sglang).
    let gpu1 = &out[out.find("== sim-host GPU 1").unwrap()..];
    let table = &gpu1[gpu1.find("Where the memory was allocated").unwrap()..gpu1.find("-- Top allocations").unwrap()];
    let rows: Vec<&str> = table.lines().filter(|l| l.contains(".py:")).collect();
    assert!(rows[0].contains("memory_pool.py:MHATokenToKVPool._create_buffers"), "{table}");
    for f in [
        "memory_pool.py:MHATokenToKVPool._create_buffers",
        "memory_pool.py:ReqToTokenPool.__init__",
        "simmodel.py:Linear.__init__",
        "simcomm.py:NCCLLibraryBase.ncclCommInitRank",
        "simmodel.py:LlamaForCausalLMBase.forward",
    ] {
        assert!(rows.iter().any(|r| r.contains(f) && r.contains("4102")), "{f} in\n{table}");
    }
    // The JSON form carries the same rows.
    let j: serde_json::Value =
        serde_json::from_str(&stdout(&culedger(&["report", "tests/fixtures/nccl", "--format", "json"]))).unwrap();
    let sites = j["devices"][1]["sites"].as_array().unwrap();
    let live: i64 = sites.iter().map(|s| s["live_bytes"].as_i64().unwrap()).sum();
    assert_eq!(live, j["devices"][1]["live_bytes"].as_i64().unwrap(), "every live byte of the ranks has a caller");
}

#[test]
fn diff_lists_the_call_sites_that_grew() {
    let out = stdout(&culedger(&["diff", "tests/fixtures/nccl", "tests/fixtures/custom-ar"]));
    let grew = &out[out.find("-- Call sites that grew").expect(&out)..];
    // The custom all-reduce's meta and buffer (cudaMalloc through its CudaRTLibrary), and its
    // rank_data from the caching allocator.
    for (caller, grown) in [
        ("simcomm.py:CudaRTLibraryBase.cudaMalloc", "+16.00 MiB"),
        ("custom_all_reduce.py:CustomAllreduce.__init__", "+20.00 MiB"),
    ] {
        let row = grew.lines().find(|l| l.contains(caller)).unwrap_or_else(|| panic!("{caller}: {grew}"));
        assert!(row.contains(grown), "{row}");
    }
}

/// Run a Python check over a memory_viz export of `input`; its stdout.
fn viz(input: &str, script: &str) -> String {
    let d = tempdir();
    let out = d.path().join("snap.pickle");
    let o = culedger(&["export", input, "--memory-viz", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let py = Command::new("python3").arg("-c").arg(script).arg(&out).output().expect("python3");
    assert!(py.status.success(), "{}", String::from_utf8_lossy(&py.stderr));
    String::from_utf8_lossy(&py.stdout).into_owned()
}

#[test]
fn memory_viz_allocations_carry_the_frames_of_their_call_site() {
    let text = viz(
        "tests/fixtures/nccl",
        r#"
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
for dev, trace in enumerate(s['device_traces']):
    for e in trace:
        sim = [f for f in e['frames'] if '/engines/' in f['filename'] and '/engines/torch/' not in f['filename']]
        if e['action'] == 'alloc' and sim:
            assert all(f['line'] > 0 for f in sim), sim
            print(dev, ' '.join(f['name'] for f in sim), e['size'])
"#,
    );
    for f in ["ModelRunner.load_model", "MHATokenToKVPool._create_buffers"] {
        assert!(text.lines().any(|l| l.starts_with("1 ") && l.contains(f)), "{f} on GPU 1:\n{text}");
    }
}

#[test]
fn memory_viz_blocks_of_a_running_process_are_split_by_call_site() {
    // A periodic report (the process still running): its memory is live in the snapshot.
    let d = tempdir();
    let mut r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("nccl/culedger-4102.json")).unwrap()).unwrap();
    r["process"]["exit"] = "running".into();
    let input = d.path().join("culedger-4102.json");
    std::fs::write(&input, r.to_string()).unwrap();
    let text = viz(
        input.to_str().unwrap(),
        r#"
import os, pickle, sys, collections
s = pickle.load(open(sys.argv[1], 'rb'))
by = collections.Counter()
for seg in s['segments']:
    addr = seg['address']
    for b in seg['blocks']:
        assert b['address'] == addr, (b['address'], addr)
        addr += b['size']
        # The caller as the report names it: the innermost frame of the engine's own code
        # (not the simulated torch's, not a comprehension's).
        sim = [f for f in b['frames'] if '/engines/' in f['filename'] and '/engines/torch/' not in f['filename']
               and not f['name'].endswith('comp>') and f['name'] != '<genexpr>']
        if sim:
            by[os.path.basename(sim[0]['filename']) + ':' + sim[0]['name']] += b['size']
    assert addr == seg['address'] + seg['total_size'], 'blocks tile the segment'
for k, v in sorted(by.items()):
    print(k, v)
"#,
    );
    // Live bytes per caller (the K and V buffers come from two lines of one function).
    let mut want: std::collections::BTreeMap<String, i64> = Default::default();
    for s in r["devices"][0]["sites"].as_array().unwrap() {
        *want.entry(s["caller"].as_str().unwrap().to_string()).or_default() += s["live_bytes"].as_i64().unwrap();
    }
    let want: Vec<String> = want.into_iter().filter(|(_, b)| *b > 0).map(|(f, b)| format!("{f} {b}")).collect();
    assert_eq!(text.lines().collect::<Vec<_>>(), want);
}
