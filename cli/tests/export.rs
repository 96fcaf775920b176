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
ooms = 0
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
        elif e['action'] == 'oom':
            # torch's TraceEntry::OOM: the size asked and the free memory last reported.
            assert isinstance(e['device_free'], int) and e['size'] > 0, e
            ooms += 1
        else:
            assert e['action'] == 'free_completed' and live.pop(e['addr']) == e['size']
    assert max(live.values(), default=0) < 2**53
    assert all(a < 2**53 for a in live)
print('devices', devices_with_events, 'ooms', ooms, 'segments', len(s['segments']),
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
    // Each rank's allocation failed twice (the caching allocator retries once).
    assert!(text.starts_with("devices 2 ooms 4 "), "an oom entry at each failed allocation: {text}");
    assert!(stderr(&o).starts_with("culedger: wrote memory_viz snapshot: "), "{}", stderr(&o));
}

#[test]
fn memory_viz_replays_the_category_totals() {
    // The synthesised trace must end where the timelines end: replaying GPU 1's events
    // per category gives the live bytes of the last sample before the process exited.
    let d = tempdir();
    let out = d.path().join("snap.pickle");
    let o = culedger(&["export", "tests/fixtures/nccl/culedger-4102.json", "--memory-viz", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let peaks = replay_peaks(&out, 1);
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
    let err = stderr(&o);
    assert!(err.starts_with(&format!("culedger: wrote Perfetto trace: {} (", out.display())), "{err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let of = |ph: &str| events.iter().filter(move |e| e["ph"] == ph).collect::<Vec<_>>();
    let meta = of("M");
    assert_eq!(meta.len(), 3, "one process_name per process");
    assert!(meta.iter().all(|e| e["name"] == "process_name" && e["args"]["name"].is_string() && e["pid"].is_i64()));
    assert!(meta.iter().any(|e| e["args"]["name"] == "5101 sglang::scheduler_TP0 (rank 0/2) on sim-host"), "{meta:?}");
    let counters = of("C");
    let named = |n: &str| counters.iter().filter(|c| c["name"] == n).collect::<Vec<_>>();
    let categories = named("GPU 0");
    assert!(!categories.is_empty());
    for c in &categories {
        assert!(c["ts"].as_i64().unwrap() >= 0 && c["pid"].is_i64());
        // Only the categories that held memory: no track that stays at zero.
        let keys: Vec<&str> = c["args"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["comm", "ipc", "kv_pool", "other", "weights"], "{c}");
    }
    // Free memory and untracked memory at each query, as counters.
    assert_eq!(named("GPU 0 free").len(), 7, "the launcher's and rank 0's queries on GPU 0");
    assert_eq!(named("GPU 1 untracked").len(), 6, "rank 1's queries");
    assert!(named("GPU 1 untracked").iter().all(|c| c["args"]["untracked"].is_i64()));
    let instants = of("i");
    assert!(instants.iter().all(|e| e["ts"].is_i64() && e["s"] == "p" && e["name"].is_string()));
    let starting = |p: &str| instants.iter().filter(|e| e["name"].as_str().unwrap().starts_with(p)).count();
    assert_eq!(starting("probe"), 13, "every probe of the three processes (1 + 6 + 6)");
    assert_eq!(starting("FAILED"), 4, "each rank's KV allocation, and the allocator's retry");
    assert!(starting("ipc_import cudaIpcOpenMemHandle 8.00 MiB") == 4 && starting("ipc_export") == 4);
    assert_eq!(starting("peer_access cudaDeviceEnablePeerAccess: context on GPU"), 2);
    // Driver costs carry their size in the name.
    assert_eq!(starting("driver_cost cudaIpcOpenMemHandle 2.00 MiB"), 4);
    assert_eq!(starting("driver_cost cudaDeviceEnablePeerAccess 1.00 GiB"), 2);
    // The instants of each process on each device are written in record order.
    for m in &meta {
        for gpu in ["GPU 0", "GPU 1"] {
            let seqs: Vec<i64> = instants
                .iter()
                .filter(|e| e["pid"] == m["pid"] && e["cat"] == gpu)
                .map(|e| e["args"]["seq"].as_i64().expect("seq in args"))
                .collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        }
    }
    // One clock: the first failure is where the report puts it.
    let failed =
        instants.iter().find(|e| e["name"].as_str().unwrap().starts_with("FAILED") && e["cat"] == "GPU 0").unwrap();
    let report = stdout(&culedger(&["report", "tests/fixtures/custom-ar", "--format", "json"]));
    let report: Value = serde_json::from_str(&report).unwrap();
    let at = report["devices"][0]["failures"][0]["at_us"].as_i64().unwrap();
    assert_eq!(failed["ts"].as_i64(), Some(at));
    assert_eq!(v["otherData"]["t0_unix_us"], report["t0_unix_us"]);
}

#[test]
fn perfetto_driver_costs_are_named_with_their_denoised_size() {
    let d = tempdir();
    let out = d.path().join("trace.json");
    let o = culedger(&["export", "tests/fixtures/custom-ar-tp8", "--perfetto", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let noisy: Vec<&Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("driver_cost") && n.contains("(measured")))
        .collect();
    assert!(!noisy.is_empty(), "the 8-rank fixture has a contaminated window");
    for e in noisy {
        assert!(e["args"]["measured_bytes"].as_i64() > e["args"]["bytes"].as_i64(), "{e}");
        assert!(!e["args"]["notes"].as_array().unwrap().is_empty(), "{e}");
    }
}

#[test]
fn exports_write_to_stdout_with_a_dash() {
    let o = culedger(&["export", "tests/fixtures/nccl", "--perfetto", "-"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("the trace on stdout");
    assert!(v["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
    assert!(stderr(&o).starts_with("culedger: wrote Perfetto trace: stdout ("), "{}", stderr(&o));
    let o = culedger(&["export", "tests/fixtures/nccl", "--memory-viz", "-"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(&o.stdout[..2], b"\x80\x04", "a pickle on stdout");
    let o = culedger(&["export", "tests/fixtures/nccl", "--memory-viz", "-", "--perfetto", "-"]);
    assert_eq!(o.status.code(), Some(2));
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
    assert_eq!(stderr(&o), format!("culedger: wrote plot: {} (2 panels, SVG)\n", out.display()));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches(r#"class="panel""#).count(), 2);
    assert_eq!(svg.matches(r#"class="panel-title""#).count(), 2);
    assert!(svg.contains("sim-host GPU 0 (pids 5100-5102) tracked peak"), "{svg}");
    assert!(svg.contains("sim-host GPU 1 (pids 5101, 5102) tracked peak"), "{svg}");
    // The capacity of each GPU, untracked memory as a band up to what the device used.
    assert_eq!(svg.matches(r#"class="capacity""#).count(), 2);
    assert!(svg.contains("capacity 24.00 GiB"));
    assert_eq!(svg.matches(r#"class="band untracked""#).count(), 2);
    assert_eq!(svg.matches(r#"class="line device-used""#).count(), 2);
    // Queries and failures numbered, with a list that says what each is.
    assert_eq!(svg.matches(r#"class="failure""#).count(), 4);
    // The launcher's query before any memory moved is listed, not drawn (the axis starts
    // where the memory starts to move).
    assert_eq!(svg.matches(r#"class="probe""#).count(), 12);
    assert_eq!(svg.matches(r#"class="marker-list""#).count(), 17);
    assert!(svg.contains("\nQ1: 0.001s 5100 cudaMemGetInfo: told free 23.50 GiB"), "{svg}");
    assert!(svg.contains(">F1: "), "{svg}");
    // The hover text is the list's text.
    assert!(svg.contains("<title>F1: "), "{svg}");
    for held in ["weights", "kv_pool", "ipc", "comm", "other"] {
        assert!(svg.contains(&format!(r#"class="area {held}""#)), "{held}");
    }
    // The failing ranks never captured graphs.
    assert!(!svg.contains(">graphs<"), "empty categories are not in the legend");
    assert!(svg.contains("seconds since the run's first process started"));
    // A single process: one panel.
    let o = culedger(&["plot", "tests/fixtures/nccl/culedger-4102.json", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&out).unwrap().matches(r#"class="panel""#).count(), 1);
}

#[test]
fn plot_refuses_other_formats_and_writes_to_stdout() {
    let d = tempdir();
    let png = d.path().join("plot.png");
    let o = culedger(&["plot", "tests/fixtures/nccl", "-o", png.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("plot writes SVG") && stderr(&o).contains("rsvg-convert"), "{}", stderr(&o));
    assert!(!png.exists(), "no SVG in a .png");
    let o = culedger(&["plot", "tests/fixtures/nccl", "-o", "-"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with("<svg"));
    assert_eq!(stderr(&o), "culedger: wrote plot: stdout (2 panels, SVG)\n");
}

/// memory_viz on the 8 ranks: every allocation and free of tracked memory carries the frames
/// of its call site (only the untracked "device unknown" memory keeps culedger's synthetic
/// frame), and each `oom` says the free memory at the failure as explain reconciles it (the
/// query right after it), not the sizing query's 15 GiB.
#[test]
fn memory_viz_frames_are_real_and_oom_free_is_at_the_failure() {
    let d = tempdir();
    let out = d.path().join("snap.pickle");
    let o = culedger(&["export", "tests/fixtures/custom-ar-tp8", "--memory-viz", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let script = r#"
import pickle, sys, collections
s = pickle.load(open(sys.argv[1], 'rb'))
c = collections.Counter()
for dev, t in enumerate(s['device_traces']):
    for e in t:
        synthetic = e['frames'][0]['filename'] == 'culedger'
        if e['action'] == 'oom':
            print('oom', dev, e['device_free'] >> 20, e['frames'][0]['name'])
        elif e['category'] != 'unknown':
            c[synthetic] += 1
print('synthetic', c[True], 'real', c[False])
"#;
    let py = Command::new("python3").arg("-c").arg(script).arg(&out).output().expect("python3");
    assert!(py.status.success(), "{}", String::from_utf8_lossy(&py.stderr));
    let text = String::from_utf8_lossy(&py.stdout).into_owned();
    let last = text.lines().last().unwrap();
    assert!(last.starts_with("synthetic 0 real ") && !last.ends_with(" real 0"), "{text}");
    let ooms: Vec<&str> = text.lines().filter(|l| l.starts_with("oom ")).collect();
    assert_eq!(ooms.len(), 16, "two attempts per rank: {text}");
    assert!(ooms.iter().filter(|l| l.starts_with("oom 0 ")).all(|l| l.starts_with("oom 0 680 ")), "{text}");
    assert!(ooms.iter().filter(|l| !l.starts_with("oom 0 ")).all(|l| l.split(' ').nth(2) == Some("274")), "{text}");
    // The failed allocation's own frames (the KV pool's buffers), not a synthetic one.
    assert!(ooms.iter().all(|l| !l.ends_with(" failed")), "{text}");
}

/// The plot of the 8 ranks marks what explains each failure: the sizing query with what it
/// told, the span to the failure with the hidden costs that arrived (and a tick per driver
/// call), and the failure's size; the title names the pids as a range, the legend sits on
/// its own line; `--device`, `--from`/`--to` choose what is drawn.
#[test]
fn plot_marks_the_cause_of_each_failure() {
    let d = tempdir();
    let out = d.path().join("plot.svg");
    let o = culedger(&["plot", "tests/fixtures/custom-ar-tp8", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert_eq!(svg.matches(r#"class="panel""#).count(), 8);
    assert_eq!(svg.matches(r#"class="sizing""#).count(), 8, "one sizing query per failing rank");
    assert_eq!(svg.matches(r#"class="hidden-costs""#).count(), 8);
    assert!(svg.matches(r#"class="hidden-cost""#).count() >= 8 * 7, "peer access calls ticked");
    assert!(
        svg.contains("S1: sizing query: rank 0 (pid 6101) was told 15.03 GiB free (cudaMemGetInfo) at 0.516s"),
        "{svg}"
    );
    assert!(svg.contains("then, until the failure at 1.075s: "), "{svg}");
    assert!(svg.contains("peer access 1.75 GiB") && svg.contains("other processes' contexts ~3.50 GiB"), "{svg}");
    assert_eq!(svg.matches("\ncudaMalloc of 918.00 MiB failed\n").count(), 8, "{svg}");
    assert!(svg.contains("\nsim-host GPU 0 (pids 6100-6108) tracked peak 17.06 GiB of 24.00 GiB\n"), "{svg}");
    for title in svg.split(r#"class="panel-title""#).skip(1) {
        let text = title[title.find('>').unwrap() + 1..title.find('<').unwrap()].trim();
        assert!(text.chars().count() as f64 * 8.6 <= 850.0, "the title fits the panel: {text}");
    }
    // --device and --pid choose panels; --from/--to the window (ticks at their ends).
    let o =
        culedger(&["plot", "tests/fixtures/custom-ar-tp8", "--device", "3", "--from", "0.4", "--to", "1.2", "-o", "-"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let one = stdout(&o);
    assert_eq!(one.matches(r#"class="panel""#).count(), 1);
    assert!(one.contains("\nsim-host GPU 3 ") && one.contains("\n0.400s\n") && one.contains("\n1.200s\n"), "{one}");
    let o = culedger(&["plot", "tests/fixtures/custom-ar-tp8", "--from", "1", "--to", "0.5", "-o", "-"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--to (0.500s) must come after --from (1.000s)"), "{}", stderr(&o));
}

/// A category of the program's own (a tag's, a user rule's) is replayed by the memory_viz
/// trace like the six: `lora` (6 MiB from the second sample on) added to nccl rank 1's
/// timeline on GPU 1 ends with 6 MiB live in the trace (it was folded away: no event had it).
#[test]
fn memory_viz_keeps_a_programs_own_category() {
    let d = tempdir();
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("nccl/culedger-4102.json")).unwrap()).unwrap();
    let dev = &mut v["devices"][0];
    assert_eq!(dev["index"], 1);
    for s in dev["timeline"].as_array_mut().unwrap().iter_mut().skip(1) {
        s["lora"] = (6 << 20).into();
        s["live_bytes"] = (s["live_bytes"].as_i64().unwrap() + (6 << 20)).into();
    }
    let report = d.path().join("culedger-4102.json");
    std::fs::write(&report, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = d.path().join("snap.pickle");
    let o = culedger(&["export", report.to_str().unwrap(), "--memory-viz", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let peaks = replay_peaks(&out, 1);
    assert_eq!(peaks["lora"].as_i64(), Some(6 << 20), "{peaks}");
    assert!(peaks["kv_pool"].as_i64() > Some(0), "{peaks}");
}

/// The peak live bytes per category of device `device`'s trace in a memory_viz snapshot,
/// replayed by Python from its allocs and frees.
fn replay_peaks(snapshot: &std::path::Path, device: usize) -> Value {
    let script = r#"
import pickle, sys, json
s = pickle.load(open(sys.argv[1], 'rb'))
peak, live = {}, {}
for e in s['device_traces'][int(sys.argv[2])]:
    if e['action'] not in ('alloc', 'free_completed'):
        continue
    sign = 1 if e['action'] == 'alloc' else -1
    live[e['category']] = live.get(e['category'], 0) + sign * e['size']
    peak[e['category']] = max(peak.get(e['category'], 0), live[e['category']])
print(json.dumps(peak, sort_keys=True))
"#;
    let py = Command::new("python3").arg("-c").arg(script).arg(snapshot).arg(device.to_string()).output().expect("python3");
    assert!(py.status.success(), "{}", String::from_utf8_lossy(&py.stderr));
    serde_json::from_slice(&py.stdout).unwrap()
}
