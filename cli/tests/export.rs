//! `export --perfetto`, `export --memory-viz` and `plot`, checked against what their
//! viewers need.

mod common;
use common::*;
use serde_json::Value;
use std::process::Command;

/// What pytorch.org/memory_viz (MemoryViz.js) needs from a snapshot, checked in Python
/// after `pickle.load`: its unpickler's opcodes only, segments tiled by their blocks,
/// per-device traces sorted by time with the fields the viewer reads, and "unknown" among
/// the categories (the viewer throws without it).
const VIEWER_RULES: &str = r#"
import pickle, pickletools, sys
raw = open(sys.argv[1], 'rb').read()
allowed = {'PROTO','FRAME','EMPTY_LIST','EMPTY_DICT','EMPTY_TUPLE','MARK','APPEND','APPENDS','SETITEM',
           'SETITEMS','LIST','DICT','TUPLE','TUPLE1','TUPLE2','TUPLE3','BINUNICODE','SHORT_BINUNICODE',
           'BININT','BININT1','BININT2','LONG1','NONE','NEWTRUE','NEWFALSE','BINFLOAT','BINPUT',
           'LONG_BINPUT','BINGET','LONG_BINGET','MEMOIZE','STOP'}
used = {op.name for op, _, _ in pickletools.genops(raw)}
assert used <= allowed, used - allowed
assert raw[:2] == b'\x80\x04', raw[:2]  # protocol 4, as torch.cuda.memory._dump_snapshot
s = pickle.loads(raw)
assert set(s) >= {'segments', 'device_traces', 'allocator_settings', 'categories'}, list(s)
assert 'unknown' in s['categories']
for seg in s['segments']:
    for k in ('device','address','total_size','allocated_size','active_size','requested_size','stream',
              'segment_type','segment_pool_id','is_expandable','frames','blocks'):
        assert k in seg, k
    addr = seg['address']
    for b in seg['blocks']:
        assert b['address'] == addr and b['state'] == 'active_allocated' and b['size'] >= 0
        assert {'requested_size', 'frames'} <= set(b)
        addr += b['size']
    assert addr == seg['address'] + seg['total_size'], 'blocks do not tile the segment'
devices_with_events = 0
for trace in s['device_traces']:
    times = [e['time_us'] for e in trace]
    assert times == sorted(times), 'trace not in time order'
    if trace:
        devices_with_events += 1
        assert 'unknown' in {e['category'] for e in trace}
    live = {}
    for e in trace:
        assert {'action','addr','size','stream','time_us','frames','category'} <= set(e), e
        assert all({'filename','line','name'} <= set(f) for f in e['frames'])
        if e['action'] == 'alloc':
            assert e['addr'] not in live, 'address allocated twice'
            live[e['addr']] = e['size']
        else:
            assert e['action'] == 'free_completed' and live.pop(e['addr']) == e['size']
    assert max(live.values(), default=0) < 2**53
    assert all(a < 2**53 for a in live)
print('devices', devices_with_events, 'segments', len(s['segments']),
      'events', sum(len(t) for t in s['device_traces']))
"#;

#[test]
fn memory_viz_snapshot_follows_the_viewer_rules() {
    let d = tempdir();
    let out = d.path().join("snap.pickle");
    let o = culedger(&["export", "tests/fixtures/custom-ar", "--memory-viz", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let py = Command::new("python3")
        .arg("-c")
        .arg(VIEWER_RULES)
        .arg(&out)
        .output()
        .expect("python3 is needed for this test");
    let text = String::from_utf8_lossy(&py.stdout);
    assert!(py.status.success(), "{}{}", text, String::from_utf8_lossy(&py.stderr));
    assert!(text.starts_with("devices 2 "), "{text}");
}

#[test]
fn memory_viz_replays_the_category_totals() {
    // The synthesised trace must end where the timelines end: replaying GPU 1's events
    // per category gives the live bytes of the last sample before the process exited.
    let d = tempdir();
    let out = d.path().join("snap.pickle");
    let o = culedger(&["export", "tests/fixtures/nccl/culedger-4102.json", "--memory-viz", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let script = r#"
import pickle, sys, json
s = pickle.load(open(sys.argv[1], 'rb'))
peak, live = {}, {}
for e in s['device_traces'][1]:
    sign = 1 if e['action'] == 'alloc' else -1
    live[e['category']] = live.get(e['category'], 0) + sign * e['size']
    peak[e['category']] = max(peak.get(e['category'], 0), live[e['category']])
print(json.dumps(peak, sort_keys=True))
"#;
    let py = Command::new("python3").arg("-c").arg(script).arg(&out).output().expect("python3");
    assert!(py.status.success(), "{}", String::from_utf8_lossy(&py.stderr));
    let peaks: Value = serde_json::from_slice(&py.stdout).unwrap();
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("nccl/culedger-4102.json")).unwrap()).unwrap();
    // A category that never held memory has no events in the trace.
    let cats = &report["devices"][0]["categories"];
    for c in ["weights", "kv_pool", "ipc", "graphs", "comm", "other"] {
        assert_eq!(peaks[c].as_i64().unwrap_or(0), cats[c]["peak_bytes"].as_i64().unwrap(), "{c}");
    }
    assert!(
        cats["graphs"]["peak_bytes"].as_i64() > Some(0) && cats["other"]["peak_bytes"].as_i64() > Some(0),
        "the fixture exercises more than one category"
    );
}

#[test]
fn perfetto_trace_has_the_required_fields() {
    let d = tempdir();
    let out = d.path().join("trace.json");
    let o = culedger(&["export", "tests/fixtures/custom-ar", "--perfetto", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let of = |ph: &str| events.iter().filter(move |e| e["ph"] == ph).collect::<Vec<_>>();
    let meta = of("M");
    assert_eq!(meta.len(), 3, "one process_name per process");
    assert!(meta.iter().all(|e| e["name"] == "process_name" && e["args"]["name"].is_string() && e["pid"].is_i64()));
    let counters = of("C");
    assert!(!counters.is_empty());
    for c in &counters {
        assert!(c["name"].as_str().unwrap().starts_with("GPU "));
        assert!(c["ts"].as_i64().unwrap() >= 0 && c["pid"].is_i64());
        for cat in ["weights", "kv_pool", "ipc", "graphs", "comm", "other"] {
            assert!(c["args"][cat].is_i64(), "{cat} missing in {c}");
        }
    }
    let instants = of("i");
    assert!(instants.iter().all(|e| e["ts"].is_i64() && e["s"] == "p" && e["name"].is_string()));
    let named = |p: &str| instants.iter().filter(|e| e["name"].as_str().unwrap().starts_with(p)).count();
    assert_eq!(named("probe"), 7, "every probe of the three processes (1 + 3 + 3)");
    assert_eq!(named("FAILED"), 2, "each rank's KV allocation");
    assert!(named("driver_cost") > 0 && named("ipc_import") == 4 && named("ipc_export") == 4);
    // The instants of each process are written in record order: their seqs increase.
    for m in &meta {
        let seqs: Vec<i64> = instants
            .iter()
            .filter(|e| e["pid"] == m["pid"])
            .map(|e| e["args"]["seq"].as_i64().expect("seq in args"))
            .collect();
        assert!(!seqs.is_empty() && seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    }
    // Counter timestamps of one process are in time order.
    let pid = counters[0]["pid"].clone();
    let ts: Vec<i64> = counters.iter().filter(|c| c["pid"] == pid).map(|c| c["ts"].as_i64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn export_without_an_output_is_bad_input() {
    let o = culedger(&["export", "tests/fixtures/nccl"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--perfetto"), "{}", stderr(&o));
}

#[test]
fn plot_has_one_panel_per_device() {
    let d = tempdir();
    let out = d.path().join("plot.svg");
    let o = culedger(&["plot", "tests/fixtures/custom-ar", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches(r#"class="panel""#).count(), 2);
    assert_eq!(svg.matches(r#"class="panel-title""#).count(), 2);
    assert!(svg.contains("sim-host GPU 0 (pids 5100, 5101)") && svg.contains("sim-host GPU 1 (pids 5102)"), "{svg}");
    assert_eq!(svg.matches(r#"class="failure""#).count(), 2);
    assert_eq!(svg.matches(r#"class="probe""#).count(), 7);
    assert!(svg.contains(r#"class="area ipc""#) && svg.contains(r#"class="area other""#));
    // A single process: one panel.
    let o = culedger(&["plot", "tests/fixtures/nccl/culedger-4102.json", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&out).unwrap().matches(r#"class="panel""#).count(), 1);
}
