//! `culedger export`: Chrome/Perfetto trace JSON and PyTorch memory_viz snapshots.

use crate::analysis::{groups, DeviceGroup};
use crate::error::{Fail, Result};
use crate::load::Run;
use crate::model::{Stamped, CATEGORIES};
use crate::units::fmt_bytes;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The earliest process start of the run: time zero of the exported traces.
fn t0(run: &Run) -> i64 {
    run.procs.iter().map(|r| r.process.start_unix_ms).min().unwrap_or(0)
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Fail::input(format!("{}: cannot write: {e}", path.display())))
}

// ---------------------------------------------------------------------------------------
// Perfetto / Chrome trace event format.

/// Builds the trace: per process a `process_name` metadata event, a counter track per
/// device (`GPU <n>`, one series per category), and instant events for probes, failures
/// and the other recorded events (captures, instantiations, IPC, driver costs). A
/// device's counters and instants are written in the process's record order, `(t_ms,
/// seq)`, so viewers keep the order of what happened within one millisecond; `seq` is in
/// the instants' args when the report has it.
pub fn perfetto(run: &Run) -> Value {
    let zero = t0(run);
    let mut events = Vec::new();
    let mut used = std::collections::HashSet::new();
    for (i, r) in run.procs.iter().enumerate() {
        let p = &r.process;
        // Processes of different hosts may share a pid: keep trace pids unique.
        let pid = if used.insert(p.pid) { p.pid } else { 1_000_000 + i as i64 };
        let us = |t_ms: i64| (p.start_unix_ms + t_ms - zero) * 1000;
        events.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
            "args": {"name": format!("{} pid {} on {}", p.role(), p.pid, p.host)}}));
        for d in &r.devices {
            let track = format!("GPU {}", d.index);
            // (record order, event) for this device, sorted (stably) before writing.
            let mut dev_events: Vec<((i64, i64), Value)> = Vec::new();
            for s in &d.timeline {
                let args: Map<String, Value> = CATEGORIES.iter().map(|c| (c.to_string(), json!(s.cat(c)))).collect();
                dev_events.push((
                    s.stamp().key(),
                    json!({"name": track, "ph": "C", "pid": pid, "tid": 0, "ts": us(s.t_ms), "args": args}),
                ));
            }
            let instant = |name: String, at: &dyn Stamped, mut args: Value| {
                let at = at.stamp();
                if let (Some(seq), Some(a)) = (at.seq, args.as_object_mut()) {
                    a.insert("seq".into(), json!(seq));
                }
                let e = json!({"name": name, "ph": "i", "s": "p", "pid": pid, "tid": 0, "ts": us(at.t_ms), "cat": track, "args": args});
                (at.key(), e)
            };
            for pr in &d.probes {
                let free = pr.free_bytes.map_or("unknown".into(), fmt_bytes);
                dev_events.push(instant(
                    format!("probe GPU {}: free {free}", d.index),
                    pr,
                    json!({
                    "device": d.index, "api": pr.api, "free_bytes": pr.free_bytes,
                    "total_bytes": pr.total_bytes, "live_bytes": pr.live_bytes, "error": pr.error}),
                ));
            }
            for f in &d.failures {
                dev_events.push(instant(
                    format!("FAILED {} {} on GPU {}", f.api, fmt_bytes(f.bytes), d.index),
                    f,
                    json!({
                    "device": d.index, "api": f.api, "bytes": f.bytes, "error": f.error,
                    "error_name": f.error_name, "live_bytes": f.live_bytes}),
                ));
            }
            for e in d.events.iter().filter(|e| e.kind != "probe" && e.kind != "failure") {
                dev_events.push(instant(
                    format!("{} {}", e.kind, e.api),
                    e,
                    json!({"device": d.index, "kind": e.kind, "api": e.api, "detail": e.detail}),
                ));
            }
            dev_events.sort_by_key(|(order, _)| *order);
            events.extend(dev_events.into_iter().map(|(_, e)| e));
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms",
           "otherData": {"source": "culedger", "t0_unix_ms": zero}})
}

pub fn write_perfetto(run: &Run, out: &Path) -> Result<()> {
    let text = serde_json::to_vec(&perfetto(run)).map_err(|e| Fail::input(e.to_string()))?;
    write(out, &text)
}

// ---------------------------------------------------------------------------------------
// PyTorch memory_viz snapshot.
//
// culedger/1 keeps per-category timelines, not every allocation's history, so the trace
// is synthesised from them: each rise of a category becomes an `alloc` of that size and
// each fall frees the most recent chunks of that category (a chunk is split when only part
// of it goes). Bytes the device used but no process tracked (from the free-memory queries)
// appear as category "unknown". Addresses are synthetic; sizes and times are exact.

#[derive(Debug, Clone, Serialize)]
pub struct Frame {
    pub filename: String,
    pub line: i64,
    pub name: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TraceEntry {
    pub action: &'static str,
    pub addr: i64,
    pub size: i64,
    pub stream: i64,
    pub time_us: i64,
    pub frames: Vec<Frame>,
    pub category: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Block {
    pub address: i64,
    pub size: i64,
    pub requested_size: i64,
    pub state: &'static str,
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Segment {
    pub device: i64,
    pub address: i64,
    pub total_size: i64,
    pub allocated_size: i64,
    pub active_size: i64,
    pub requested_size: i64,
    pub stream: i64,
    pub segment_type: &'static str,
    pub segment_pool_id: (i64, i64),
    pub is_expandable: bool,
    pub frames: Vec<Frame>,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub segments: Vec<Segment>,
    pub device_traces: Vec<Vec<TraceEntry>>,
    pub allocator_settings: BTreeMap<String, String>,
    pub categories: Vec<String>,
}

/// The category name the viewer requires for memory it cannot attribute.
const UNKNOWN: &str = "unknown";

/// (owner, category) of synthesised memory.
type Owned = (String, String);
/// A synthesised allocation: (address, size).
type Chunk = (i64, i64);

/// Turns "this owner's category now holds N bytes" into alloc/free events.
struct Synth {
    device: i64,
    next_addr: i64,
    /// (owner, category) -> live chunks (addr, size), most recent last.
    chunks: HashMap<Owned, Vec<Chunk>>,
    current: HashMap<Owned, i64>,
    trace: Vec<TraceEntry>,
}

impl Synth {
    fn new(device: i64) -> Self {
        // Synthetic addresses stay far below 2^53 so JavaScript numbers hold them exactly.
        Synth {
            device,
            next_addr: 0x1_0000_0000 + (device << 40),
            chunks: HashMap::new(),
            current: HashMap::new(),
            trace: Vec::new(),
        }
    }

    fn frames(owner: &str, category: &str) -> Vec<Frame> {
        vec![Frame { filename: "culedger".into(), line: 0, name: format!("{owner} {category}") }]
    }

    fn emit(&mut self, action: &'static str, addr: i64, size: i64, time_us: i64, owner: &str, category: &str) {
        self.trace.push(TraceEntry {
            action,
            addr,
            size,
            stream: 0,
            time_us,
            frames: Self::frames(owner, category),
            category: category.into(),
        });
    }

    fn set(&mut self, owner: &str, category: &str, time_us: i64, value: i64) {
        let key = (owner.to_string(), category.to_string());
        let now = *self.current.get(&key).unwrap_or(&0);
        let value = value.max(0);
        if value > now {
            let addr = self.next_addr;
            // 512-byte aligned like the caching allocator's blocks.
            self.next_addr += (value - now + 511) / 512 * 512;
            self.chunks.entry(key.clone()).or_default().push((addr, value - now));
            self.emit("alloc", addr, value - now, time_us, owner, category);
        } else if value < now {
            let mut remaining = now - value;
            while remaining > 0 {
                let Some((addr, size)) = self.chunks.get_mut(&key).and_then(Vec::pop) else {
                    break;
                };
                self.emit("free_completed", addr, size, time_us, owner, category);
                if size > remaining {
                    let keep = size - remaining;
                    let new_addr = self.next_addr;
                    self.next_addr += (keep + 511) / 512 * 512;
                    self.chunks.entry(key.clone()).or_default().push((new_addr, keep));
                    self.emit("alloc", new_addr, keep, time_us, owner, category);
                }
                remaining -= size.min(remaining);
            }
        }
        self.current.insert(key, value);
    }

    fn segments(&self) -> Vec<Segment> {
        let mut all: Vec<(&Owned, &Chunk)> =
            self.chunks.iter().flat_map(|(k, v)| v.iter().map(move |c| (k, c))).collect();
        all.sort_by_key(|(_, (addr, _))| *addr);
        all.into_iter()
            .map(|((owner, cat), &(addr, size))| Segment {
                device: self.device,
                address: addr,
                total_size: size,
                allocated_size: size,
                active_size: size,
                requested_size: size,
                stream: 0,
                segment_type: "large",
                segment_pool_id: (0, 0),
                is_expandable: false,
                frames: Self::frames(owner, cat),
                blocks: vec![Block {
                    address: addr,
                    size,
                    requested_size: size,
                    state: "active_allocated",
                    frames: Self::frames(owner, cat),
                }],
            })
            .collect()
    }
}

/// A category's new live bytes for one owner: (time in µs, member, record order within the
/// member, owner, category, live bytes).
type Step = (i64, usize, (i64, i64), String, &'static str, i64);

fn synthesize(g: &DeviceGroup, zero: i64) -> Synth {
    let mut s = Synth::new(g.index);
    let us = |abs_ms: i64| (abs_ms - zero) * 1000;
    let mut steps: Vec<Step> = Vec::new();
    for (order, m) in g.members.iter().enumerate() {
        let owner = format!("pid {}", m.pid());
        for sample in &m.dev.timeline {
            for c in CATEGORIES {
                steps.push((us(m.abs(sample.t_ms)), order, sample.stamp().key(), owner.clone(), c, sample.cat(c)));
            }
        }
        let p = &m.report.process;
        if p.ended() {
            for c in CATEGORIES {
                steps.push((us(p.end_unix_ms), order, (i64::MAX, 0), owner.clone(), c, 0));
            }
        }
    }
    for (m, p) in g.probes() {
        if let (Some(free), Some(total)) = (p.free_bytes, p.total_bytes) {
            steps.push((
                us(m.abs(p.t_ms)),
                usize::MAX,
                p.stamp().key(),
                "device".into(),
                UNKNOWN,
                total - free - g.tracked_at(m, p),
            ));
        }
    }
    steps.sort_by_key(|(t, member, order, ..)| (*t, *member, *order));
    for (t, _, _, owner, cat, value) in steps {
        s.set(&owner, cat, t, value);
    }
    s
}

pub fn memory_viz(run: &Run) -> Snapshot {
    let zero = t0(run);
    let gs = groups(run);
    let max_index = gs.iter().map(|g| g.index).max().unwrap_or(-1);
    let mut traces: Vec<Vec<TraceEntry>> = (0..=max_index).map(|_| Vec::new()).collect();
    let mut segments = Vec::new();
    for g in &gs {
        let s = synthesize(g, zero);
        segments.extend(s.segments());
        let slot = &mut traces[g.index as usize];
        slot.extend(s.trace);
        slot.sort_by_key(|e| e.time_us);
    }
    // The viewer builds its legend from the trace's categories and breaks unless "unknown"
    // is among them: make sure every non-empty trace mentions it.
    for (i, t) in traces.iter_mut().enumerate() {
        if !t.is_empty() && !t.iter().any(|e| e.category == UNKNOWN) {
            let time_us = t[0].time_us;
            t.insert(
                0,
                TraceEntry {
                    action: "alloc",
                    addr: 0x1000 + i as i64,
                    size: 0,
                    stream: 0,
                    time_us,
                    frames: Synth::frames("device", UNKNOWN),
                    category: UNKNOWN.into(),
                },
            );
        }
    }
    let mut categories: Vec<String> = CATEGORIES.iter().map(|c| c.to_string()).collect();
    categories.push(UNKNOWN.into());
    Snapshot { segments, device_traces: traces, allocator_settings: BTreeMap::new(), categories }
}

pub fn write_memory_viz(run: &Run, out: &Path) -> Result<()> {
    let bytes = serde_pickle::to_vec(&memory_viz(run), serde_pickle::SerOptions::new())
        .map_err(|e| Fail::input(format!("cannot encode the snapshot: {e}")))?;
    write(out, &as_protocol_4(bytes))
}

/// serde-pickle writes protocol 3. Protocol 4 (what `torch.cuda.memory._dump_snapshot`
/// writes) only adds opcodes and makes framing optional, so a protocol-3 opcode stream
/// under a `PROTO 4` header is a valid protocol-4 pickle; only the header changes.
fn as_protocol_4(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.len() >= 2 && bytes[0] == 0x80 && bytes[1] <= 4 {
        bytes[1] = 4;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{report, run};

    #[test]
    fn perfetto_writes_a_device_in_record_order() {
        let mut r = report(true);
        r.devices[0].probes.reverse();
        let trace = perfetto(&run(r));
        // (kind, seq) of the device's events as written: probes carry their seq in args;
        // counters are matched by their live bytes.
        let order: Vec<String> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] != "M")
            .map(|e| match e["ph"].as_str() {
                Some("C") => format!("C{}", e["args"]["other"].as_i64().unwrap() >> 20),
                _ => format!("probe{}", e["args"]["seq"]),
            })
            .collect();
        assert_eq!(order, ["C20", "probe2", "C520", "C620", "probe5"]);
    }
}
