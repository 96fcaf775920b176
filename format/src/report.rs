//! The `culedger/1` report's types (see `docs/schema.md`), and the schema tag of the
//! `culedger-summary/1` file that `culedger run` writes.
//!
//! The interposer renders its report into these types and serializes them; the command
//! line reads them back. Every field the writer writes is here.
//!
//! Unknown fields are ignored (the schema only ever adds fields). Fields a reader cannot
//! do without (`schema`, `process`, `devices`) are required; the rest default to empty so
//! that a report from a slightly older writer still loads.
//!
//! One file although long: it is the schema itself, section by section in the order of
//! docs/schema.md, so that a field is added in one place beside its neighbours.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The schema tag of a per-process report.
pub const SCHEMA: &str = "culedger/1";
/// The schema tag of the file `culedger run` writes into its output directory.
pub const SUMMARY_SCHEMA: &str = "culedger-summary/1";
/// Categories in the order the schema fixes.
pub use crate::category::CATEGORIES;

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Report {
    pub schema: String,
    #[serde(default)]
    pub tool: Tool,
    pub process: Process,
    /// The settings the writer ran with; empty from writers before them.
    #[serde(default)]
    pub settings: Settings,
    #[serde(default)]
    pub health: Health,
    pub devices: Vec<Device>,
    #[serde(default)]
    pub host: HostMem,
    /// Call sites referenced by the records' `site` ids (see `crate::sites`); empty from
    /// writers before them.
    #[serde(default)]
    pub sites: Vec<SiteRec>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

/// The settings a report was written with (`settings`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct Settings {
    /// Where the reports go (`CULEDGER_OUT`, made absolute).
    pub out_dir: String,
    pub flush_ms: u64,
    pub log: String,
    /// `CULEDGER_SITE_MIN`: allocations of at least this many bytes carry a call site.
    pub site_min_bytes: u64,
    pub py_frames: u64,
    /// The terminating signals caught to write the final report (`TERM`, `INT`, ...).
    pub signals: Vec<String>,
    /// The report files' permission bits, in octal (`0600`).
    pub mode: String,
}

/// How the process stood when the report was written (`process.exit`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(from = "String", into = "String")]
pub enum Exit {
    /// A periodic write: the process was running.
    Running,
    /// The final write of a process that exited (`exit_code`).
    Exit,
    /// The final write before a terminating signal at its default action (`signal`).
    Signal,
    /// The process replaced itself with `exec`; the new image writes its own report.
    Exec,
    /// A value this reader does not know (the schema adds values as it adds fields), kept as
    /// written; empty when the field is missing.
    Other(String),
}

impl Default for Exit {
    fn default() -> Self {
        Exit::Other(String::new())
    }
}

impl Exit {
    pub fn as_str(&self) -> &str {
        match self {
            Exit::Running => "running",
            Exit::Exit => "exit",
            Exit::Signal => "signal",
            Exit::Exec => "exec",
            Exit::Other(s) => s,
        }
    }
}

impl From<String> for Exit {
    fn from(s: String) -> Self {
        match s.as_str() {
            "running" => Exit::Running,
            "exit" => Exit::Exit,
            "signal" => Exit::Signal,
            "exec" => Exit::Exec,
            _ => Exit::Other(s),
        }
    }
}

impl From<Exit> for String {
    fn from(e: Exit) -> Self {
        match e {
            Exit::Other(s) => s,
            known => known.as_str().to_string(),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Process {
    pub pid: i64,
    pub ppid: i64,
    /// The host name; empty when the writer could not read it (written as null then).
    #[serde(serialize_with = "empty_as_null", deserialize_with = "null_as_empty")]
    pub host: String,
    pub argv: Vec<String>,
    pub exe: Option<String>,
    pub start_unix_ms: i64,
    pub end_unix_ms: i64,
    pub exit: Exit,
    pub exit_code: Option<i64>,
    /// The signal that ended the process (`exit: "signal"`); absent in older reports.
    pub signal: Option<i64>,
    pub forked_from: Option<i64>,
    /// `start_unix_ms` with microseconds; None from writers before it.
    pub start_unix_us: Option<i64>,
    /// The run this process belongs to; None from writers before it.
    pub run_id: Option<String>,
    /// `env` (from `CULEDGER_RUN_ID`) or `process` (made by the process itself).
    pub run_id_source: Option<String>,
    /// The process title the program set (setproctitle), if any.
    pub title: Option<String>,
    /// `/proc/self/comm`.
    pub comm: Option<String>,
    /// Allow-listed rank hints: RANK, LOCAL_RANK, WORLD_SIZE, CUDA_VISIBLE_DEVICES.
    #[serde(deserialize_with = "string_values")]
    pub env: BTreeMap<String, String>,
    /// How many devices the process saw (`cuDeviceGetCount`, asked by the report writer when it
    /// starts: under `CUDA_VISIBLE_DEVICES` those it lists, else every GPU of the host, a GPU in
    /// MIG mode as its MIG devices); None before the writer asked, and from writers before it.
    pub visible_devices: Option<i64>,
}

fn empty_as_null<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    if v.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(v)
    }
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// A map's string values; other values (a later writer's) are left out, never an error.
fn string_values<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let all: BTreeMap<String, serde_json::Value> = serde::Deserialize::deserialize(d)?;
    Ok(all.into_iter().filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_string()))).collect())
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Health {
    pub lost_events: i64,
    pub unknown_frees: i64,
    pub unwrapped_symbols: Vec<String>,
    pub warnings: Vec<String>,
    /// Warnings not listed because the bound was reached.
    pub warnings_dropped: u64,
    /// Hooked calls made while no context was current on the calling thread.
    pub no_context_calls: u64,
    /// Devices whose history of large allocations reached its bound and had its oldest
    /// freed records frozen.
    pub history_frozen: Vec<Frozen>,
    /// Call-site captures whose Python frames could not be read with confidence.
    pub site_misses: u64,
    /// New call sites not stored because the table was full (their records have no site).
    pub sites_dropped: u64,
    /// Captures made while the thread was inside `dlopen` (no frames taken).
    pub native_skipped_in_dlopen: u64,
    /// Native backtraces the caching unwinder could not take (libgcc's took them).
    pub native_unwind_fallbacks: u64,
    /// The Python version seen in the process, if any.
    pub python_version: Option<String>,
    /// Captures proven equal to the thread's previous one from the same place.
    pub site_repeats: u64,
    /// Writes made at once for a failed allocation or in the window after a free-memory
    /// query (docs/reliability.md), and the time they took, in microseconds.
    pub urgent_writes: u64,
    pub urgent_write_us: u64,
    /// Failed allocations and free-memory query windows left to the periodic write: past the
    /// urgent writes' budget, or the writer did not answer in time.
    pub urgent_deferred: u64,
}

/// A device whose history of large allocations was frozen in part (`health.history_frozen[]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct Frozen {
    pub device: i64,
    pub records: u64,
    pub upto_seq: u64,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default)]
pub struct CatStats {
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub allocs: i64,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Device {
    pub index: i64,
    pub total_bytes: Option<i64>,
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub peak_t_ms: Option<i64>,
    pub alloc_count: i64,
    pub free_count: i64,
    pub categories: BTreeMap<String, CatStats>,
    /// The device's history of large allocations, which report-time categories are computed from.
    pub history: History,
    pub probes: Vec<Probe>,
    pub probes_total: i64,
    pub failures: Vec<Failure>,
    pub failures_total: i64,
    pub untracked_bytes: Option<i64>,
    pub untracked_max_bytes: Option<i64>,
    pub ipc: Ipc,
    pub graphs: Graphs,
    pub driver_costs: Vec<DriverCost>,
    pub top_allocations: Vec<Allocation>,
    pub timeline: Vec<Sample>,
    pub events: Vec<Event>,
    /// Events ever recorded (`events` keeps a bounded part).
    pub events_total: u64,
    /// The call sites holding the most live bytes on this device.
    pub sites: Vec<DevSite>,
    /// The physical device's UUID as nvidia-smi writes it (`GPU-...`), asked of the driver
    /// (`cuDeviceGetUuid_v2`); None from writers before it, or when the driver could not say.
    pub uuid: Option<String>,
    /// The physical device's PCI bus id as the driver writes it (`cuDeviceGetPCIBusId`,
    /// `00000000:3B:00.0`); None from writers before it.
    pub pci_bus_id: Option<String>,
    /// The device's index on its host as nvidia-smi numbers it (NVML's index, PCI bus
    /// order), whatever this process's ordinal; None without NVML.
    pub host_index: Option<i64>,
    /// For a MIG device (`uuid` is `MIG-...`): its GPU's UUID (`GPU-...`, what the driver's
    /// `cuDeviceGetUuid` gives); None for a whole GPU and from writers before it. `host_index`
    /// is then the GPU's number.
    pub parent_uuid: Option<String>,
    /// For a MIG device: its index among its GPU's MIG devices as nvidia-smi lists them ("MIG
    /// ... Device 1", NVML's `nvmlDeviceGetIndex` of the MIG device); None for a whole GPU,
    /// without NVML and from writers before it.
    pub mig_index: Option<i64>,
    /// For a MIG device: its GPU instance's id (NVML's `nvmlDeviceGetGpuInstanceId`, the `GI
    /// ID` nvidia-smi lists and the DCGM exporter's `GPU_I_ID` label); None for a whole GPU,
    /// without NVML and from writers before it.
    pub gpu_instance_id: Option<i64>,
    /// The device's memory as NVML saw it at this write (None: NVML missing, or a writer
    /// before it).
    pub usage: Option<Usage>,
    /// Where `untracked_bytes` comes from: `"nvml"` (the reading in `usage`) or `"query"`
    /// (the program's last free-memory query); None from writers before it.
    pub untracked_source: Option<String>,
    /// When `untracked_bytes` was measured, microseconds since the process started.
    pub untracked_t_us: Option<i64>,
}

/// `devices[].usage`: one reading of the whole device's memory from outside the program.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct Usage {
    /// Who answered: `"nvml"`.
    pub source: String,
    /// When it was read (since the process started).
    pub t_ms: i64,
    pub t_us: i64,
    /// Memory used on the device by every process, and its size.
    pub used_bytes: i64,
    pub total_bytes: i64,
    /// What NVML says this process holds there (None: NVML could not list processes).
    pub process_bytes: Option<i64>,
    /// Every process holding memory on the device, as NVML lists them.
    pub processes: Vec<UsageProcess>,
}

/// `devices[].usage.processes[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct UsageProcess {
    pub pid: i64,
    pub used_bytes: i64,
}

/// `devices[].history`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct History {
    /// Records kept.
    pub records: u64,
    /// Records frozen (dropped at the bound, their peaks kept).
    pub frozen: u64,
    /// The last record frozen, when some are.
    pub frozen_upto_seq: Option<u64>,
    /// Whether the categories are the report-time ones (else the live ledger's).
    pub report_time_categories: bool,
}

impl Device {
    /// Live bytes of one category (0 when the writer left it out).
    pub fn cat(&self, name: &str) -> CatStats {
        self.categories.get(name).cloned().unwrap_or_default()
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Probe {
    pub t_ms: i64,
    /// Microseconds since the process started; None from writers before it.
    pub t_us: Option<i64>,
    /// Place in the process's record order; None from writers before it.
    pub seq: Option<i64>,
    pub api: String,
    pub free_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub error: i64,
    pub live_bytes: i64,
    pub categories: BTreeMap<String, i64>,
    /// The call site of the query (`sites[].id`), when recorded.
    pub site: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Failure {
    pub t_ms: i64,
    /// Microseconds since the process started; None from writers before it.
    pub t_us: Option<i64>,
    /// Place in the process's record order; None from writers before it.
    pub seq: Option<i64>,
    pub api: String,
    pub bytes: i64,
    pub error: i64,
    pub error_name: String,
    pub live_bytes: i64,
    pub categories: BTreeMap<String, i64>,
    pub last_probe: Option<Probe>,
    /// The call site of the failed allocation (`sites[].id`), when recorded.
    pub site: Option<i64>,
    /// The category the failed attempt's own call site gives it (the rules as for an
    /// allocation from that site, without the phase fallback), and the rule; None when no
    /// site was recorded, or from writers before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Ipc {
    pub exported_count: i64,
    pub exported_bytes: i64,
    pub imported_count: i64,
    pub imported_bytes: i64,
    pub imported_live_count: i64,
    pub imported_live_bytes: i64,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Graphs {
    pub captures: i64,
    pub captures_active: i64,
    pub captured_allocs: i64,
    pub captured_bytes: i64,
    pub instantiations: i64,
    /// Instantiations whose device-memory delta was measured.
    pub instantiate_measured: u64,
    pub instantiate_bytes: i64,
    /// Executables destroyed (`cuGraphExecDestroy`); absent from writers before it.
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub exec_destroys: i64,
    /// Destroys whose device-memory delta was measured.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub exec_destroy_measured: u64,
    /// What the measured destroys gave back (free before minus after: negative).
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub exec_destroy_bytes: i64,
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct DriverCost {
    pub api: String,
    /// The library whose lazy loading into a context these calls triggered (the file its
    /// image was loaded from: `libtorch_cuda.so`), when the cost is one; absent otherwise
    /// and from writers before it. `api` is then the entry point that first used the
    /// library in the context (a launch, `cuKernelGetFunction`, `cuLibraryGetModule`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    pub calls: i64,
    pub bytes: i64,
    pub approximate: bool,
    /// The call sites of the calls (`sites[].id`), when recorded.
    pub sites: Vec<i64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Allocation {
    pub ptr: String,
    pub bytes: i64,
    /// `device`, `managed`, `async`, `pitch` or `vmm_physical`.
    pub kind: String,
    pub api: String,
    pub t_ms: i64,
    /// Microseconds since the process started; None from writers before it.
    pub t_us: Option<i64>,
    /// Place in the process's record order; None from writers before it.
    pub seq: Option<i64>,
    pub category: String,
    /// The rule that gave the category (None: the default, or a report from before
    /// report-time categories).
    pub rule: Option<String>,
    pub exported: bool,
    pub captured: bool,
    pub h2d_bytes: i64,
    /// The call site (`sites[].id`), when recorded; `caller` is its short form.
    pub site: Option<i64>,
    pub caller: Option<String>,
}

/// One Python frame of a site.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct PyFrameRec {
    pub file: String,
    pub function: String,
    pub line: i64,
    pub line_is_current: bool,
}

/// One native frame of a site.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct NativeRec {
    pub object: String,
    pub symbol: Option<String>,
    /// From the object's load base, as [`crate::site::offset_text`] writes it.
    pub offset: String,
    pub internal: bool,
}

/// A call site (`sites[]`): the Python frames (innermost first) and the native frames of
/// the call that made a record.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct SiteRec {
    pub id: i64,
    pub python: Vec<PyFrameRec>,
    pub native: Vec<NativeRec>,
}

impl SiteRec {
    /// The short form of the site (`caller`), by the rule the writer names callers with.
    pub fn short(&self) -> Option<String> {
        crate::site::short(&self.python, &self.native)
    }
}

impl crate::site::PyFrameView for PyFrameRec {
    fn file(&self) -> &str {
        &self.file
    }
    fn function(&self) -> &str {
        &self.function
    }
}

impl crate::site::NativeFrameView for NativeRec {
    fn object(&self) -> &str {
        &self.object
    }
    fn symbol(&self) -> Option<&str> {
        self.symbol.as_deref()
    }
    fn offset(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(&self.offset)
    }
    fn internal(&self) -> bool {
        self.internal
    }
}

/// What one call site holds on a device (`devices[].sites[]`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct DevSite {
    pub site: i64,
    pub category: String,
    /// The rule that gave the category (None: the default, or a report from before
    /// report-time categories).
    pub rule: Option<String>,
    pub caller: Option<String>,
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub allocs: i64,
    pub total_allocs: i64,
}

/// One timeline sample: total live bytes and live bytes per category.
///
/// On disk a sample is one flat object (`{"t_ms", "t_us", "seq", "live_bytes", "weights",
/// ..., "other", extra categories}`, docs/schema.md). In memory its categories are [`Cats`]:
/// a fixed array for the six built-in ones and a list for any other, so a timeline-heavy
/// report costs about what its file does (a map of owned names per sample cost ten times
/// that).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    pub t_ms: i64,
    /// Microseconds since the process started; None from writers before it.
    pub t_us: Option<i64>,
    /// Place in the process's record order; None from writers before it.
    pub seq: Option<i64>,
    pub live_bytes: i64,
    /// Every other key of the object: live bytes per category.
    pub cats: Cats,
}

impl Sample {
    pub fn cat(&self, name: &str) -> i64 {
        self.cats.get(name)
    }
}

/// A sample's live bytes per category, in the order a writer gave them back as a map.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cats {
    /// The six built-in categories ([`CATEGORIES`] order), where `present` has their bit.
    builtin: [i64; 6],
    present: u8,
    /// Any other key (a rule's or a tag's category), or a built-in one whose value is not an
    /// integer, kept as written.
    extra: Vec<(String, serde_json::Value)>,
}

impl Cats {
    /// The live bytes of category `name` (0 when absent or not an integer).
    pub fn get(&self, name: &str) -> i64 {
        if let Some(i) = CATEGORIES.iter().position(|c| *c == name) {
            if self.present & (1 << i) != 0 {
                return self.builtin[i];
            }
        }
        self.extra.iter().rev().find(|(k, _)| k == name).and_then(|(_, v)| v.as_i64()).unwrap_or(0)
    }

    /// Sets category `name` (the last value given for a name wins, as in a JSON object).
    pub fn insert(&mut self, name: String, value: serde_json::Value) {
        let i = CATEGORIES.iter().position(|c| *c == name);
        self.extra.retain(|(k, _)| *k != name);
        match (i, value.as_i64()) {
            (Some(i), Some(v)) => {
                self.builtin[i] = v;
                self.present |= 1 << i;
            }
            (i, _) => {
                if let Some(i) = i {
                    self.present &= !(1 << i);
                }
                self.extra.push((name, value));
            }
        }
    }

    /// The categories beyond the six built-in ones (a rule's or a tag's) that hold an
    /// integer, as written.
    pub fn others(&self) -> impl Iterator<Item = &str> + '_ {
        self.extra.iter().filter(|(k, v)| v.is_i64() && !CATEGORIES.contains(&k.as_str())).map(|(k, _)| k.as_str())
    }

    /// Every category with its value as written, sorted by name (as a map would give them).
    pub fn iter(&self) -> impl Iterator<Item = (&str, serde_json::Value)> + '_ {
        let mut all: Vec<(&str, serde_json::Value)> = CATEGORIES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.present & (1 << i) != 0)
            .map(|(i, c)| (*c, serde_json::Value::from(self.builtin[i])))
            .chain(self.extra.iter().map(|(k, v)| (k.as_str(), v.clone())))
            .collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
    }

    pub fn len(&self) -> usize {
        self.present.count_ones() as usize + self.extra.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FromIterator<(String, serde_json::Value)> for Cats {
    fn from_iter<I: IntoIterator<Item = (String, serde_json::Value)>>(it: I) -> Self {
        let mut c = Cats::default();
        for (k, v) in it {
            c.insert(k, v);
        }
        c.extra.shrink_to_fit();
        c
    }
}

impl Serialize for Sample {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("t_ms", &self.t_ms)?;
        if let Some(t) = self.t_us {
            m.serialize_entry("t_us", &t)?;
        }
        if let Some(s) = self.seq {
            m.serialize_entry("seq", &s)?;
        }
        m.serialize_entry("live_bytes", &self.live_bytes)?;
        for (k, v) in self.cats.iter() {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Sample;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a timeline sample (an object)")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Sample, A::Error> {
                let mut s = Sample::default();
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    match key.as_ref() {
                        "t_ms" => s.t_ms = map.next_value()?,
                        "t_us" => s.t_us = map.next_value()?,
                        "seq" => s.seq = map.next_value()?,
                        "live_bytes" => s.live_bytes = map.next_value()?,
                        _ => {
                            let v: serde_json::Value = map.next_value()?;
                            s.cats.insert(key.into_owned(), v);
                        }
                    }
                }
                // A vector's first push reserves room for four.
                s.cats.extra.shrink_to_fit();
                Ok(s)
            }
        }
        de.deserialize_map(V)
    }
}

/// A key of a sample's object, borrowed from the input where it can be (no allocation for
/// the fixed keys and the six categories).
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        de.deserialize_str(V)
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Event {
    pub t_ms: i64,
    /// Microseconds since the process started; None from writers before it.
    pub t_us: Option<i64>,
    /// Place in the process's record order; None from writers before it.
    pub seq: Option<i64>,
    pub kind: String,
    pub api: String,
    /// The size the event is about (measured cost, opened or exported bytes), when it has one.
    pub bytes: Option<i64>,
    /// Start of a measured call's window (`driver_cost`, `peer_access`), same clock as `t_us`.
    pub t0_us: Option<i64>,
    pub detail: String,
    /// Alike calls this event stands for, folded once the list was full (absent: 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<i64>,
}

/// When a record was made within its process: `t_ms`, and `seq` when the writer gave one
/// (docs/schema.md). Only records of the same process compare; across processes use
/// absolute time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub t_ms: i64,
    pub seq: Option<i64>,
}

impl Stamp {
    /// Whether the record stamped `self` came before the one stamped `other`, as far as
    /// the report tells: with both `seq`s, strictly before in `(t_ms, seq)` order; without,
    /// in the same millisecond or earlier (the writer could not tell them apart).
    pub fn precedes(self, other: Stamp) -> bool {
        match (self.seq, other.seq) {
            (Some(a), Some(b)) => (self.t_ms, a) < (other.t_ms, b),
            _ => self.t_ms <= other.t_ms,
        }
    }

    /// Sort key in record order. Records without `seq` tie within their millisecond, so a
    /// stable sort keeps them in list order.
    pub fn key(self) -> (i64, i64) {
        (self.t_ms, self.seq.unwrap_or(-1))
    }
}

/// Records that carry a [`Stamp`].
pub trait Stamped {
    fn stamp(&self) -> Stamp;
    /// Microseconds since the process started: `t_us`, or `t_ms` in microseconds from
    /// writers before it.
    fn rel_us(&self) -> i64;
}

macro_rules! stamped {
    ($($t:ty),*) => {$(
        impl Stamped for $t {
            fn stamp(&self) -> Stamp {
                Stamp { t_ms: self.t_ms, seq: self.seq }
            }
            fn rel_us(&self) -> i64 {
                self.t_us.unwrap_or(self.t_ms.saturating_mul(1000))
            }
        }
    )*};
}
stamped!(Probe, Failure, Allocation, Sample, Event);

/// The last of `items` recorded before `at` (ties in the same millisecond without `seq`:
/// the last in list order).
pub fn last_before<T: Stamped>(items: &[T], at: Stamp) -> Option<&T> {
    items.iter().filter(|i| i.stamp().precedes(at)).max_by_key(|i| i.stamp().key())
}

/// The first of `items` in record order.
pub fn first_recorded<T: Stamped>(items: &[T]) -> Option<&T> {
    items.iter().min_by_key(|i| i.stamp().key())
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct HostMem {
    pub pinned_live_bytes: i64,
    pub pinned_peak_bytes: i64,
    pub pinned_alloc_count: i64,
    pub pinned_free_count: i64,
    pub registered_live_bytes: i64,
    pub registered_peak_bytes: i64,
    pub registered_count: i64,
    pub unregistered_count: i64,
    pub vmm_live_bytes: i64,
    pub vmm_peak_bytes: i64,
    pub vmm_create_count: i64,
    pub vmm_release_count: i64,
}

impl Process {
    /// Did this image of the process end (`exit`, `signal`, `exec`, or any later value),
    /// its device memory freed by the driver? Only `running` means it may still hold it.
    pub fn ended(&self) -> bool {
        self.exit != Exit::Running
    }

    /// A short human name for the process: its argv without the interpreter and
    /// without long values, e.g. `sglang.launch_server --tp-rank 0`.
    pub fn role(&self) -> String {
        let mut args: Vec<&str> = self.argv.iter().map(String::as_str).collect();
        if let Some(first) = args.first() {
            let base = first.rsplit('/').next().unwrap_or(first);
            if base.starts_with("python") {
                args.remove(0);
                if args.first() == Some(&"-m") {
                    args.remove(0);
                }
            }
        }
        let mut out = String::new();
        for a in args {
            if out.len() + a.len() > 60 {
                out.push_str(" ...");
                break;
            }
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(a.rsplit('/').next().filter(|_| a.ends_with(".py")).unwrap_or(a));
        }
        if out.is_empty() {
            self.exe.clone().unwrap_or_else(|| "?".into())
        } else {
            out
        }
    }
}

impl Process {
    /// When the process started, in microseconds since the Unix epoch.
    pub fn start_us(&self) -> i64 {
        self.start_unix_us.unwrap_or(self.start_unix_ms.saturating_mul(1000))
    }

    /// The time of the report's last write, in microseconds since the Unix epoch.
    pub fn end_us(&self) -> i64 {
        self.end_unix_ms.saturating_mul(1000).max(self.start_us())
    }

    /// Whether argv is a Python `multiprocessing` child (spawn or forkserver), whose
    /// command line says nothing about what it does.
    fn is_mp_child(&self) -> bool {
        self.argv.iter().any(|a| a == "--multiprocessing-fork" || a.contains("spawn_main") || a.contains("forkserver"))
    }

    /// The rank hints in short: `rank 3/8`, `local rank 3`, `GPUs 3,4`.
    pub fn rank_hint(&self) -> Option<String> {
        let get = |k: &str| self.env.get(k).map(String::as_str).filter(|v| !v.is_empty());
        let rank = match (get("RANK"), get("WORLD_SIZE"), get("LOCAL_RANK")) {
            (Some(r), Some(w), _) => Some(format!("rank {r}/{w}")),
            (Some(r), None, _) => Some(format!("rank {r}")),
            (None, _, Some(l)) => Some(format!("local rank {l}")),
            _ => None,
        };
        let gpus = get("CUDA_VISIBLE_DEVICES").map(|v| format!("GPUs {v}"));
        match (rank, gpus) {
            (Some(r), Some(g)) => Some(format!("{r}, {g}")),
            (r, g) => r.or(g),
        }
    }

    /// The best name for the process in a table: the title the program set
    /// (`sglang::scheduler_TP0`), else what argv says (`sglang_server.py --tp 2 ...`,
    /// `multiprocessing worker` for spawned Python children, with their `comm` when it is
    /// not the interpreter's), followed by the rank hints (`(rank 0/8)`).
    pub fn label(&self) -> String {
        let base = match self.title.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => t.to_string(),
            None if self.is_mp_child() => match self.comm.as_deref().filter(|c| !c.starts_with("python")) {
                Some(c) => format!("{c} (multiprocessing worker)"),
                None => "multiprocessing worker".to_string(),
            },
            None => self.role(),
        };
        match self.rank_hint() {
            Some(h) => format!("{base} ({h})"),
            None => base,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(argv: &[&str]) -> Process {
        Process { pid: 7, argv: argv.iter().map(|s| s.to_string()).collect(), ..Process::default() }
    }

    /// A sample reads and writes the flat object of docs/schema.md, key for key: the six
    /// built-in categories, others (a tag's), and values that are not integers kept as written.
    #[test]
    fn a_sample_reads_and_writes_the_flat_object() {
        let text = r#"{"t_ms":3,"t_us":3007,"seq":9,"live_bytes":70,"comm":0,"graphs":4,"ipc":0,"kv_pool":40,"other":1,"tag:warmup":25,"weights":"x"}"#;
        let s: Sample = serde_json::from_str(text).unwrap();
        assert_eq!((s.t_ms, s.t_us, s.seq, s.live_bytes), (3, Some(3007), Some(9), 70));
        assert_eq!(
            (s.cat("kv_pool"), s.cat("graphs"), s.cat("tag:warmup"), s.cat("weights"), s.cat("none")),
            (40, 4, 25, 0, 0)
        );
        assert_eq!(s.cats.len(), 7);
        assert_eq!(serde_json::to_string(&s).unwrap(), text);
        // Older writers: no t_us, no seq, categories only.
        let old: Sample = serde_json::from_str(r#"{"t_ms":1,"live_bytes":5,"other":5}"#).unwrap();
        assert_eq!((old.t_us, old.seq, old.cat("other")), (None, None, 5));
        assert_eq!(serde_json::to_string(&old).unwrap(), r#"{"t_ms":1,"live_bytes":5,"other":5}"#);
        // A key given twice: the last wins, as serde_json's maps did.
        let twice: Sample = serde_json::from_str(r#"{"t_ms":1,"live_bytes":5,"other":5,"other":6}"#).unwrap();
        assert_eq!((twice.cat("other"), twice.cats.len()), (6, 1));
        assert!(serde_json::from_str::<Sample>("[1]").is_err());
        // What the writer builds (src/ledger/json.rs) collects into the same.
        let built: Cats = [("other".to_string(), serde_json::Value::from(5))].into_iter().collect();
        assert_eq!(built, old.cats);
    }

    #[test]
    fn labels_prefer_the_title_then_argv() {
        let mut p = process(&["python3", "-m", "sglang.launch_server", "--tp", "8"]);
        assert_eq!(p.label(), "sglang.launch_server --tp 8");
        p.title = Some("sglang::scheduler_TP3".into());
        p.env = [("RANK", "3"), ("WORLD_SIZE", "8")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(p.label(), "sglang::scheduler_TP3 (rank 3/8)");
    }

    #[test]
    fn spawned_python_workers_are_named() {
        let mut p = process(&[
            "/usr/bin/python3",
            "-B",
            "-c",
            "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
            "--multiprocessing-fork",
        ]);
        assert_eq!(p.label(), "multiprocessing worker");
        p.comm = Some("python3".into());
        assert_eq!(p.label(), "multiprocessing worker");
        p.comm = Some("VLLM::Worker".into());
        p.env.insert("LOCAL_RANK".into(), "1".into());
        p.env.insert("CUDA_VISIBLE_DEVICES".into(), "1".into());
        assert_eq!(p.label(), "VLLM::Worker (multiprocessing worker) (local rank 1, GPUs 1)");
    }

    #[test]
    fn exit_reads_the_known_values_and_keeps_others_as_written() {
        for (text, exit) in
            [("running", Exit::Running), ("exit", Exit::Exit), ("signal", Exit::Signal), ("exec", Exit::Exec)]
        {
            let p: Process = serde_json::from_str(&format!(r#"{{"exit": "{text}"}}"#)).unwrap();
            assert_eq!(p.exit, exit);
            assert_eq!(serde_json::to_value(&p).unwrap()["exit"], text);
        }
        let p: Process = serde_json::from_str(r#"{"exit": "detached"}"#).unwrap();
        assert_eq!(p.exit, Exit::Other("detached".into()));
        assert_eq!(serde_json::to_value(&p).unwrap()["exit"], "detached");
        assert_eq!(serde_json::from_str::<Process>("{}").unwrap().exit.as_str(), "");
    }
}
