//! `culedger export`: Chrome/Perfetto trace JSON and PyTorch memory_viz snapshots.

use crate::analysis::{DeviceGroup, GroupWords};
use crate::clock::Clock;
use crate::error::{Fail, Result};
use crate::model::{Stamped, CATEGORIES};
use crate::run_analysis::Analysis;
use crate::units::fmt_bytes;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

mod frames;
mod snapshot;

pub use snapshot::{Block, Frame, Segment, Snapshot, TraceEntry};

/// How an output path is named in messages: `-` is stdout.
pub fn shown_path(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "stdout".into()
    } else {
        path.display().to_string()
    }
}

use crate::output::write;

// ---------------------------------------------------------------------------------------
// Perfetto / Chrome trace event format.

/// Builds the trace: per process a `process_name` metadata event; per process and device a
/// counter track `GPU <n>` with one series per category that held memory (categories that
/// stay zero are left out, and so is a track with nothing), counters `GPU <n> free` (what
/// each free-memory query told) and `GPU <n> untracked` (device used minus tracked at the
/// query); and instant events for probes, failures and the other recorded events
/// (captures, instantiations, IPC, driver costs named with their de-noised size, peer
/// access). Timestamps are microseconds on the run's clock (since its first process
/// started). A device's events are written in the process's record order, `(t_ms, seq)`,
/// so viewers keep the order of what happened within one millisecond; `seq` is in the
/// instants' args when the report has it.
pub fn perfetto(a: &Analysis) -> Value {
    let run = a.run;
    let clock = Clock::of(&run.procs);
    let gs = a.groups();
    let mut events = Vec::new();
    let mut used = std::collections::HashSet::new();
    for (i, r) in run.procs.iter().enumerate() {
        let p = &r.process;
        // Processes of different hosts may share a pid: keep trace pids unique.
        let pid = if used.insert(p.pid) { p.pid } else { 1_000_000 + i as i64 };
        let us = |rec: &dyn Stamped| clock.since(crate::clock::abs_us(r, rec));
        events.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
            "args": {"name": format!("{} {} on {}", p.pid, p.label(), p.host)}}));
        for d in &r.devices {
            let g = gs.iter().find(|g| g.has(r, d));
            let member = g.and_then(|g| g.members.iter().copied().find(|m| std::ptr::eq(m.report, r)));
            let number = g.map_or_else(
                || d.index.to_string(),
                |g| crate::analysis::gpu_token(g.index, g.mig_index, g.uuid_name.as_deref()),
            );
            let track = crate::analysis::gpu_words(&number);
            // The physical GPU as every other view names it, and this process's own ordinal
            // where it differs (`CUDA_VISIBLE_DEVICES`).
            let gpu = if number != d.index.to_string() {
                format!("{track} (its device {})", d.index)
            } else {
                format!("GPU {}", d.index)
            };
            // (record order, event) for this device, sorted (stably) before writing.
            let mut dev_events: Vec<((i64, i64), Value)> = Vec::new();
            // The six, then the categories of the report's own (a user's rules, a program's
            // tags), each a series of its own.
            let mut own: Vec<&str> = d.timeline.iter().flat_map(|s| s.cats.others()).collect();
            own.sort_unstable();
            own.dedup();
            let held: Vec<&str> = CATEGORIES
                .iter()
                .copied()
                .chain(own)
                .filter(|c| d.timeline.iter().any(|s| s.cat(c) != 0))
                .collect();
            if !held.is_empty() {
                for s in &d.timeline {
                    let args: Map<String, Value> = held.iter().map(|c| (c.to_string(), json!(s.cat(c)))).collect();
                    dev_events.push((
                        s.stamp().key(),
                        json!({"name": track, "ph": "C", "pid": pid, "tid": 0, "ts": us(s), "args": args}),
                    ));
                }
            }
            let instant = |name: String, at: &dyn Stamped, mut args: Value| {
                let stamp = at.stamp();
                if let (Some(seq), Some(a)) = (stamp.seq, args.as_object_mut()) {
                    a.insert("seq".into(), json!(seq));
                }
                let e = json!({"name": name, "ph": "i", "s": "p", "pid": pid, "tid": 0, "ts": us(at), "cat": track, "args": args});
                (stamp.key(), e)
            };
            for pr in &d.probes {
                let free = pr.free_bytes.map_or("unknown".into(), fmt_bytes);
                dev_events.push(instant(
                    format!("probe {gpu}: free {free}"),
                    pr,
                    json!({
                    "device": d.index, "api": pr.api, "free_bytes": pr.free_bytes,
                    "total_bytes": pr.total_bytes, "live_bytes": pr.live_bytes, "error": pr.error}),
                ));
                if let Some(free) = pr.free_bytes.filter(|_| pr.error == 0) {
                    dev_events.push((
                        pr.stamp().key(),
                        json!({"name": format!("{track} free"), "ph": "C", "pid": pid, "tid": 0, "ts": us(pr),
                               "args": {"free": free}}),
                    ));
                }
                if let Some(reading) = member.and_then(|m| g.and_then(|g| g.reading(m, pr))) {
                    dev_events.push((
                        pr.stamp().key(),
                        json!({"name": format!("{track} untracked"), "ph": "C", "pid": pid, "tid": 0, "ts": us(pr),
                               "args": {"untracked": reading.untracked_bytes}}),
                    ));
                }
            }
            for f in &d.failures {
                dev_events.push(instant(
                    format!("FAILED {} {} on {gpu}", f.api, fmt_bytes(f.bytes)),
                    f,
                    json!({
                    "device": d.index, "api": f.api, "bytes": f.bytes, "error": f.error,
                    "error_name": f.error_name, "live_bytes": f.live_bytes}),
                ));
            }
            let calls = member.map(crate::costs::calls_of).unwrap_or_default();
            let estimate = g.and_then(crate::costs::context_estimate);
            let mut call_iter = calls.iter();
            for e in d.events.iter().filter(|e| e.kind != "probe" && e.kind != "failure") {
                let mut args = json!({"device": d.index, "kind": e.kind, "api": e.api, "detail": e.detail});
                let name = match e.kind.as_str() {
                    "driver_cost" => {
                        let call = call_iter.next();
                        let measured = e.bytes.or_else(|| call.map(|c| c.measured));
                        let denoised = match (g, call) {
                            (Some(g), Some(c)) => {
                                let (bytes, uncertain, notes) = crate::costs::denoise(g, c, estimate.as_ref());
                                Some((bytes, uncertain, crate::costs::notes(&notes, &g.clock)))
                            }
                            _ => None,
                        };
                        args["measured_bytes"] = json!(measured);
                        let size = match &denoised {
                            Some((bytes, uncertain, notes)) => {
                                args["bytes"] = json!(bytes);
                                args["uncertain"] = json!(uncertain);
                                args["notes"] = json!(notes);
                                let shown = fmt_bytes(*bytes);
                                match measured.filter(|m| m != bytes) {
                                    Some(m) => format!("{shown} (measured {})", fmt_bytes(m)),
                                    None => shown,
                                }
                            }
                            None => measured.map_or("size unknown".into(), fmt_bytes),
                        };
                        format!("driver_cost {} {size}", e.api)
                    }
                    "peer_access" => format!("peer_access {}: context on {gpu}", e.api),
                    _ => match e.bytes {
                        Some(b) => format!("{} {} {}", e.kind, e.api, fmt_bytes(b)),
                        None => format!("{} {}", e.kind, e.api),
                    },
                };
                dev_events.push(instant(name, e, args));
            }
            dev_events.sort_by_key(|(order, _)| *order);
            events.extend(dev_events.into_iter().map(|(_, e)| e));
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms",
           "otherData": {"source": "culedger", "t0_unix_us": clock.t0_us,
                         "clock": "microseconds since the run's first process started"}})
}

/// Writes the trace; returns what to tell the user.
pub fn write_perfetto(a: &Analysis, out: &Path) -> Result<String> {
    let trace = perfetto(a);
    let n = trace["traceEvents"].as_array().map_or(0, Vec::len);
    let text = serde_json::to_vec(&trace).map_err(|e| Fail::input(e.to_string()))?;
    write(out, &text)?;
    Ok(format!("Perfetto trace: {} ({n} events; open in ui.perfetto.dev)", shown_path(out)))
}

// ---------------------------------------------------------------------------------------
// PyTorch memory_viz snapshot.
//
// culedger/1 keeps per-category timelines, not every allocation's history, so the trace
// is synthesised from them: each rise of a category becomes an `alloc` of that size and
// each fall frees the most recent chunks of that category (a chunk is split when only part
// of it goes). Bytes the device used but no process tracked (from the free-memory queries)
// appear as category "unknown". Addresses are synthetic; sizes and times are exact.

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
    /// Frames for the next `alloc` event, when the rise is one known allocation.
    alloc_frames: Option<Vec<Frame>>,
    /// The frames each live chunk was allocated with (by address): its free, and the part
    /// of it kept when only part goes, carry them too.
    chunk_frames: HashMap<i64, Vec<Frame>>,
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
            alloc_frames: None,
            chunk_frames: HashMap::new(),
        }
    }

    fn frames(owner: &str, category: &str) -> Vec<Frame> {
        vec![Frame { filename: "culedger".into(), line: 0, name: format!("{owner} {category}") }]
    }

    fn emit(&mut self, action: &'static str, addr: i64, size: i64, time_us: i64, owner: &str, category: &str) {
        let frames = match (action, &self.alloc_frames) {
            ("alloc", Some(f)) => {
                self.chunk_frames.insert(addr, f.clone());
                f.clone()
            }
            ("free_completed", _) => self.chunk_frames.remove(&addr).unwrap_or_else(|| Self::frames(owner, category)),
            _ => Self::frames(owner, category),
        };
        self.trace.push(TraceEntry {
            action,
            addr,
            size,
            stream: 0,
            time_us,
            frames,
            category: category.into(),
            device_free: None,
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
                let kept_frames = self.chunk_frames.get(&addr).cloned();
                self.emit("free_completed", addr, size, time_us, owner, category);
                if size > remaining {
                    let keep = size - remaining;
                    let new_addr = self.next_addr;
                    self.next_addr += (keep + 511) / 512 * 512;
                    self.chunks.entry(key.clone()).or_default().push((new_addr, keep));
                    self.alloc_frames = kept_frames;
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
type Step<'c> = (i64, usize, (i64, i64), String, &'c str, i64);

/// The device's memory as a snapshot's segments and trace, at place `slot` of the snapshot.
fn synthesize(g: &DeviceGroup, slot: i64) -> Synth {
    let mut s = Synth::new(slot);
    let us = |abs_us: i64| g.clock.since(abs_us);
    // The six, then the device's own categories (a user's rules, a program's tags): none is
    // folded away.
    // (name in the report, name in the snapshot: one of the program's own called `unknown` is
    // not the viewer's unattributed memory).
    let others = g.other_categories();
    let cats: Vec<(&str, std::borrow::Cow<str>)> = CATEGORIES
        .iter()
        .map(|c| (*c, std::borrow::Cow::Borrowed(*c)))
        .chain(others.iter().map(|c| (c.as_str(), DeviceGroup::shown_category(c))))
        .collect();
    let mut steps: Vec<Step> = Vec::new();
    for (order, m) in g.members.iter().enumerate() {
        let owner = format!("pid {}", m.pid());
        for sample in &m.dev.timeline {
            for (c, shown) in &cats {
                steps.push((us(m.abs_us(sample)), order, sample.stamp().key(), owner.clone(), shown, sample.cat(c)));
            }
        }
        if let Some(end) = m.ended_us() {
            for (_, shown) in &cats {
                steps.push((us(end), order, (i64::MAX, 0), owner.clone(), shown, 0));
            }
        }
    }
    for (m, p) in g.probes() {
        if let Some(r) = g.reading(m, p) {
            steps.push((us(m.abs_us(p)), usize::MAX, p.stamp().key(), "device".into(), UNKNOWN, r.untracked_bytes));
        }
    }
    steps.sort_by_key(|(t, member, order, ..)| (*t, *member, *order));
    let mut cursor = frames::SiteCursor::new(g);
    for (t, _, order, owner, cat, value) in steps {
        let now = s.current.get(&(owner.clone(), cat.to_string())).copied().unwrap_or(0);
        let pid = owner.strip_prefix("pid ").and_then(|p| p.parse::<i64>().ok());
        s.alloc_frames = frames::frames_of_allocation(g, &owner, order, cat).or_else(|| match pid {
            Some(pid) if value > now => cursor.frames(pid, cat, value - now),
            _ => None,
        });
        s.set(&owner, cat, t, value);
    }
    s
}

/// The free memory when each failed allocation of the device failed, as `culedger explain`
/// reconciles it (measured by the query that followed, else estimated from the sizing
/// query): (pid, run-clock µs of the failure, free bytes). A retry of the same burst shares
/// its first failure's figure.
fn free_at_failures(g: &DeviceGroup, findings: &[crate::explain::Finding]) -> Vec<(i64, i64, i64)> {
    findings
        .iter()
        .filter(|f| f.gpu.as_ref().is_some_and(|id| g.is(id)))
        .filter_map(|f| match &f.detail {
            crate::explain::Detail::Failure(d) => d.free_bytes.map(|free| (d.pid, d.at_us, free)),
            _ => None,
        })
        .collect()
}

/// Each device's place in a snapshot's `device_traces` (a list by device number), in the
/// run's device order: its GPU's number, or where an earlier device took that place (the
/// MIG devices of one GPU share its number, as do GPUs of different hosts) the next free
/// one, so that every device of the run has a trace of its own.
pub fn memory_viz_slots(gs: &[DeviceGroup]) -> Vec<i64> {
    let mut slots: Vec<i64> = Vec::with_capacity(gs.len());
    for g in gs {
        let slot = match slots.iter().max() {
            Some(&last) if g.index <= last => last + 1,
            _ => g.index,
        };
        slots.push(slot);
    }
    slots
}

pub fn memory_viz(a: &Analysis) -> Snapshot {
    // Devices beyond the ordinals a snapshot can list are left out (`write_memory_viz`
    // refuses them first).
    let slots = memory_viz_slots(a.groups());
    let gs: Vec<(&DeviceGroup, i64)> =
        a.groups().iter().zip(slots).filter(|(_, slot)| (0..=MAX_DEVICE_INDEX).contains(slot)).collect();
    let max_slot = gs.iter().map(|(_, slot)| *slot).max().unwrap_or(-1);
    let mut traces: Vec<Vec<TraceEntry>> = (0..=max_slot).map(|_| Vec::new()).collect();
    let mut segments = Vec::new();
    for (g, slot) in gs {
        let s = synthesize(g, slot);
        let mut segs = s.segments();
        frames::attach_frames(&mut segs, g);
        // A segment shows the frames of its first block (its call site, when known).
        for seg in &mut segs {
            if let Some(b) = seg.blocks.first() {
                seg.frames = b.frames.clone();
            }
        }
        segments.extend(segs);
        let slot = &mut traces[slot as usize];
        slot.extend(s.trace);
        // An `oom` entry at each failure with the free memory at the failure, as torch's
        // allocator records it (what cudaMemGetInfo says when cudaMalloc fails), not what
        // the last query before it told.
        let frees = free_at_failures(g, a.findings());
        for (m, f) in g.failures() {
            let at = g.clock.since(m.abs_us(f));
            let free = frees
                .iter()
                .filter(|(pid, t, _)| *pid == m.pid() && *t <= at)
                .max_by_key(|(_, t, _)| *t)
                .map(|(_, _, free)| *free)
                .or_else(|| f.last_probe.as_ref().and_then(|p| p.free_bytes));
            slot.push(TraceEntry {
                action: "oom",
                addr: 0,
                size: f.bytes,
                stream: 0,
                time_us: at,
                frames: frames::frames_of_failure(&m, f)
                    .unwrap_or_else(|| Synth::frames(&format!("pid {}", m.pid()), &format!("{} failed", f.api))),
                category: UNKNOWN.into(),
                device_free: Some(free.unwrap_or(0).max(0)),
            });
        }
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
                    device_free: None,
                },
            );
        }
    }
    let mut categories: Vec<String> = CATEGORIES.iter().map(|c| c.to_string()).collect();
    categories.push(UNKNOWN.into());
    Snapshot { segments, device_traces: traces, allocator_settings: BTreeMap::new(), categories }
}

/// Writes the snapshot; returns what to tell the user.
/// The device ordinals a memory_viz snapshot can hold: its `device_traces` is a list
/// indexed by ordinal, so an index from a report is bounded before it sizes that list
/// (CUDA's ordinals are small; the interposer keeps 0..64).
pub const MAX_DEVICE_INDEX: i64 = 1023;

pub fn write_memory_viz(a: &Analysis, out: &Path) -> Result<String> {
    let slots = memory_viz_slots(a.groups());
    if let Some((g, slot)) = a.groups().iter().zip(&slots).find(|(_, slot)| !(0..=MAX_DEVICE_INDEX).contains(*slot)) {
        return Err(Fail::input(format!(
            "export --memory-viz: {} device index {slot} is outside 0..{MAX_DEVICE_INDEX} (a snapshot lists devices by ordinal)",
            crate::layout::printable(&g.host),
        )));
    }
    let snapshot = memory_viz(a);
    let n: usize = snapshot.device_traces.iter().map(Vec::len).sum();
    let bytes = serde_pickle::to_vec(&snapshot, serde_pickle::SerOptions::new())
        .map_err(|e| Fail::input(format!("cannot encode the snapshot: {e}")))?;
    write(out, &as_protocol_4(bytes))?;
    // Where a device's place in the snapshot is not its GPU's number, which it is.
    let moved: Vec<String> = a
        .groups()
        .iter()
        .zip(&slots)
        .filter(|(g, slot)| g.index != **slot)
        .map(|(g, slot)| format!("device {slot} is {}", g.title()))
        .collect();
    let moved = if moved.is_empty() { String::new() } else { format!("; {}", moved.join(", ")) };
    Ok(format!("memory_viz snapshot: {} ({n} trace entries; open in pytorch.org/memory_viz{moved})", shown_path(out)))
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
        let trace = perfetto(&crate::run_analysis::of(&run(r)));
        // (kind, seq) of the device's events as written: probes carry their seq in args;
        // counters are matched by their live bytes.
        let order: Vec<String> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] != "M" && !(e["ph"] == "C" && e["name"] != "GPU 0"))
            .map(|e| match e["ph"].as_str() {
                Some("C") => format!("C{}", e["args"]["other"].as_i64().unwrap() >> 20),
                _ => format!("probe{}", e["args"]["seq"]),
            })
            .collect();
        assert_eq!(order, ["C20", "probe2", "C520", "C620", "probe5"]);
        // Free memory and untracked memory are counters of their own, at each probe.
        let named = |n: &str| trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["name"] == n).count();
        assert_eq!((named("GPU 0 free"), named("GPU 0 untracked")), (2, 2));
    }

    #[test]
    fn memory_viz_has_an_oom_entry_at_each_failure() {
        let mut r = report(true);
        r.devices[0].failures = vec![serde_json::from_value(serde_json::json!({
            "t_ms": 7, "seq": 6, "api": "cudaMalloc", "bytes": 400 << 20, "error": 2,
            "error_name": "cudaErrorMemoryAllocation",
            "last_probe": {"t_ms": 7, "seq": 5, "api": "cudaMemGetInfo", "free_bytes": 300 << 20}}))
        .unwrap()];
        let snap = memory_viz(&crate::run_analysis::of(&run(r)));
        let ooms: Vec<&TraceEntry> = snap.device_traces[0].iter().filter(|e| e.action == "oom").collect();
        assert_eq!(ooms.len(), 1);
        assert_eq!((ooms[0].size, ooms[0].device_free, ooms[0].time_us), (400 << 20, Some(300 << 20), 7000));
    }
}
