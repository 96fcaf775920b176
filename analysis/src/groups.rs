//! What the commands compute from a run: processes grouped per host and physical GPU,
//! merged timelines, device usage versus tracked bytes, the free-memory queries that matter
//! and why, the figures that cannot all be true. Typed values only: the CLI names a device,
//! says why a query matters and words an impossible figure (`cli/src/analysis/mod.rs`), and
//! builds the run summary the renderers share on these. Times are absolute microseconds
//! internally and the run's clock ([`Clock`]) in what is shown.

use crate::clock::Clock;
use crate::load::Run;
use crate::model::{
    first_recorded, last_before, Device, Failure, Graphs, Ipc, Probe, Report, Stamp, Stamped, CATEGORIES,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// Names the charts use for parts that are no category (`html`'s page and picture, `plot`'s
/// legend, the memory_viz snapshot's unattributed memory): a category of a program's own by one
/// of them is shown as `own:NAME` ([`DeviceGroup::shown_category`]).
pub const CHART_PARTS: [&str; 8] =
    ["untracked", "untracked_other", "driver_costs", "free", "capacity", "device used", "unknown", "asked"];

/// One process's view of one device.
#[derive(Clone, Copy)]
pub struct Member<'a> {
    pub report: &'a Report,
    pub dev: &'a Device,
}

impl Member<'_> {
    pub fn pid(&self) -> i64 {
        self.report.process.pid
    }

    pub fn label(&self) -> String {
        self.report.process.label()
    }

    /// Absolute time (µs since the epoch) of one of this process's records.
    pub fn abs_us(&self, rec: &dyn Stamped) -> i64 {
        crate::counts::step();
        crate::clock::abs_us(self.report, rec)
    }

    /// Absolute time of a process-relative microsecond count.
    pub fn abs_of(&self, rel_us: i64) -> i64 {
        crate::counts::step();
        self.report.process.start_us() + rel_us
    }

    /// The process's last report (absolute µs), as [`Report`]'s process tells it.
    pub fn end_us(&self) -> i64 {
        crate::counts::step();
        self.report.process.end_us()
    }

    /// When the process ended (its final report), or None while it runs or was killed: the
    /// end of the millisecond `end_unix_ms` names (it is truncated while records are stamped
    /// in microseconds, and a record of the last millisecond is not after the end).
    pub fn ended_us(&self) -> Option<i64> {
        crate::counts::step();
        let p = &self.report.process;
        p.ended().then(|| p.end_unix_ms.saturating_mul(1000).saturating_add(999).max(p.end_us()))
    }

    /// Live bytes per category of this process on this device at absolute time `at_us`:
    /// the last timeline sample at or before it; nothing before the first sample or after
    /// the process ended (the driver frees a dead process's memory).
    pub fn live_at(&self, at_us: i64) -> [i64; 6] {
        if self.ended_us().is_some_and(|end| at_us > end) {
            return [0; 6];
        }
        // Timelines are in time order: binary search for the last sample at or before `at`.
        let n = self.dev.timeline.partition_point(|s| self.abs_us(s) <= at_us);
        n.checked_sub(1).map(|i| CATEGORIES.map(|c| self.dev.timeline[i].cat(c))).unwrap_or([0; 6])
    }

    /// Live bytes of the categories `names` (beyond the six) of this process on this device
    /// at absolute time `at_us`, as [`Self::live_at`] takes them.
    pub fn live_others_at(&self, at_us: i64, names: &[String]) -> Vec<i64> {
        if self.ended_us().is_some_and(|end| at_us > end) {
            return vec![0; names.len()];
        }
        let n = self.dev.timeline.partition_point(|s| self.abs_us(s) <= at_us);
        n.checked_sub(1)
            .map(|i| names.iter().map(|c| self.dev.timeline[i].cat(c)).collect())
            .unwrap_or_else(|| vec![0; names.len()])
    }

    /// Live bytes per category of this process on this device just before its own record
    /// stamped `at` (a probe, a failure): ordered by `(t_ms, seq)`, so allocations made in
    /// the same millisecond after it do not count.
    pub fn live_before(&self, at: Stamp) -> [i64; 6] {
        let n = self.dev.timeline.partition_point(|s| s.stamp().precedes(at));
        n.checked_sub(1).map(|i| CATEGORIES.map(|c| self.dev.timeline[i].cat(c))).unwrap_or([0; 6])
    }

    /// The earliest record of this process on this device (absolute µs).
    pub fn first_us(&self) -> Option<i64> {
        let d = self.dev;
        let all = d.timeline.iter().map(|s| self.abs_us(s));
        let all = all.chain(d.probes.iter().map(|p| self.abs_us(p)));
        let all = all.chain(d.failures.iter().map(|f| self.abs_us(f)));
        let all = all.chain(d.events.iter().map(|e| e.t0_us.map_or_else(|| self.abs_us(e), |t| self.abs_of(t))));
        all.min()
    }

    /// What the process holds on the device, in words: `allocations`, or only a context
    /// (`peer context` when it came from enabling peer access from another GPU).
    pub fn holds(&self) -> Holds {
        if self.dev.alloc_count > 0 || self.dev.peak_bytes > 0 {
            Holds::Allocations
        } else if self.dev.events.iter().any(|e| e.kind == "peer_access") {
            Holds::PeerContext
        } else {
            Holds::Context
        }
    }
}

/// What a process holds on a device (its `holds` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Holds {
    /// It allocated there.
    #[serde(rename = "allocations")]
    Allocations,
    /// Only its context.
    #[serde(rename = "context")]
    Context,
    /// Only a context that serves its peer access from another device.
    #[serde(rename = "peer context")]
    PeerContext,
}

impl Holds {
    /// In words, as the JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Holds::Allocations => "allocations",
            Holds::Context => "context",
            Holds::PeerContext => "peer context",
        }
    }
}

/// All processes that touched one physical device of one host.
pub struct DeviceGroup<'a> {
    pub host: String,
    /// The GPU's number on its host as nvidia-smi gives it (NVML's index, PCI bus order);
    /// for reports without it, the processes' own ordinal.
    pub index: i64,
    /// The physical GPU (`devices[].uuid`), None for reports written before culedger recorded it.
    pub uuid: Option<String>,
    /// For a MIG device (a device of its own, `uuid` `MIG-...`): its index among its GPU's MIG
    /// devices, as nvidia-smi lists them; `index` is then its GPU's number.
    pub mig_index: Option<i64>,
    /// `index` is this GPU's place in PCI bus order among the GPUs the run saw on its host,
    /// since no report there had NVML's number (see [`groups`]).
    pub numbered_by_pci: bool,
    /// With `numbered_by_pci`: a process of the host saw every device there (`CUDA_VISIBLE_DEVICES`
    /// unset, and as many devices as the run's groups on the host), so the numbers are
    /// nvidia-smi's; else they are only the order of the GPUs the run saw, and the GPU is named
    /// by its UUID beside its number.
    pub every_gpu_seen: bool,
    /// Where the host's numbering is not known (`numbered_by_pci` without `every_gpu_seen`):
    /// the GPU's name, its UUID as nvidia-smi writes it (`GPU-...`, a MIG device's `MIG-...`),
    /// cut to its first group (8 hex digits) where that tells it from the run's other GPUs of
    /// its host, else whole. Every form is a prefix `CUDA_VISIBLE_DEVICES` accepts.
    pub uuid_name: Option<String>,
    pub members: Vec<Member<'a>>,
    /// The run's clock (shared by every device of the run).
    pub clock: Clock,
    /// The members' tracked bytes as one step function (see [`DeviceGroup::tracked_total`]),
    /// built on first use.
    totals: std::cell::OnceCell<Vec<(i64, i64)>>,
    /// [`DeviceGroup::end_us`], computed on first use.
    end: std::cell::OnceCell<i64>,
    /// [`DeviceGroup::series`], computed on first use.
    series: std::cell::OnceCell<Vec<Point>>,
}

/// A device group's identity in its run: its host and physical device (its UUID, a MIG
/// device's own; else, for reports written before culedger recorded one, the processes'
/// ordinal). Two groups of a run never share one, where two MIG devices of one GPU share
/// nvidia-smi's number and two workers' ordinals 0 may be different GPUs: what a finding, a
/// sizing row or a rank of the formula names its device by.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuId {
    pub host: String,
    pub uuid: Option<String>,
    /// The ordinal, for a group without a UUID (0 otherwise).
    pub ordinal: i64,
    /// The group's `uuid_name`: how the CLI names the GPU where the host's numbering is not
    /// known (the same for every id of one group).
    pub uuid_name: Option<String>,
}

impl DeviceGroup<'_> {
    /// This group's identity in its run.
    pub fn id(&self) -> GpuId {
        GpuId {
            host: self.host.clone(),
            uuid: self.uuid.clone(),
            ordinal: if self.uuid.is_some() { 0 } else { self.index },
            uuid_name: self.uuid_name.clone(),
        }
    }

    /// Whether `id` names this group.
    pub fn is(&self, id: &GpuId) -> bool {
        self.host == id.host
            && self.uuid == id.uuid
            && (self.uuid.is_some() || self.index == id.ordinal)
    }
}

/// The group of a run that `id` names.
pub fn by_id<'g, 'a>(gs: &'g [DeviceGroup<'a>], id: &GpuId) -> Option<&'g DeviceGroup<'a>> {
    gs.iter().find(|g| g.is(id))
}

/// What identifies a physical GPU on a host: its UUID, or for reports without one the
/// process's ordinal (then two processes' ordinals 0 are taken for one GPU, as before).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum GpuKey {
    Uuid(String),
    Ordinal(i64),
}

/// Groups a run's processes per (host, physical GPU): one GPU reached through different
/// ordinals (`CUDA_VISIBLE_DEVICES`) is one group, and two processes' ordinals 0 on different
/// GPUs are two. Sorted by host, then nvidia-smi's index (else the ordinal), then UUID.
pub fn groups(run: &Run) -> Vec<DeviceGroup<'_>> {
    crate::counts::computed(crate::counts::Part::Groups);
    let clock = Clock::of(&run.procs);
    let mut map: BTreeMap<(String, GpuKey), Vec<Member>> = BTreeMap::new();
    for report in &run.procs {
        for dev in &report.devices {
            let key = dev.uuid.clone().map_or(GpuKey::Ordinal(dev.index), GpuKey::Uuid);
            map.entry((report.process.host.clone(), key)).or_default().push(Member { report, dev });
        }
    }
    let mut gs: Vec<DeviceGroup> = map
        .into_iter()
        .map(|((host, key), members)| {
            let (index, uuid) = match key {
                GpuKey::Uuid(u) => {
                    let host_index = members.iter().find_map(|m| m.dev.host_index);
                    let ordinal = members.iter().map(|m| m.dev.index).min().unwrap_or(0);
                    (host_index.unwrap_or(ordinal), Some(u))
                }
                GpuKey::Ordinal(i) => (i, None),
            };
            let mig_index = members.iter().find_map(|m| m.dev.mig_index);
            DeviceGroup {
                host,
                index,
                uuid,
                mig_index,
                numbered_by_pci: false,
                every_gpu_seen: false,
                uuid_name: None,
                members,
                clock,
                totals: Default::default(),
                end: Default::default(),
                series: Default::default(),
            }
        })
        .collect();
    number_by_pci_without_nvml(&mut gs);
    gs.sort_by(|a, b| (&a.host, a.index, a.mig_index, &a.uuid).cmp(&(&b.host, b.index, b.mig_index, &b.uuid)));
    gs
}

/// Without NVML's number (`host_index`) on any device of a host, a GPU would be named by the
/// lowest ordinal a process gave it, and two GPUs that are each some process's ordinal 0
/// (one visible GPU per worker) would share a name, and every look-up by it. There, the
/// host's physical GPUs are numbered in PCI bus order (then UUID), as nvidia-smi numbers
/// them: its own numbers when the run saw every GPU of the host, and distinct names always.
/// Where no process saw every GPU there, nvidia-smi's numbers are not known: each GPU gets
/// its UUID's name (`uuid_name`), which every output names it by.
fn number_by_pci_without_nvml(gs: &mut [DeviceGroup]) {
    let hosts: std::collections::BTreeSet<String> = gs.iter().map(|g| g.host.clone()).collect();
    for host in hosts {
        let on_host = |g: &DeviceGroup| g.host == host;
        let nvml = gs.iter().filter(|g| on_host(g)).any(|g| g.members.iter().any(|m| m.dev.host_index.is_some()));
        if nvml || gs.iter().filter(|g| on_host(g)).any(|g| g.uuid.is_none()) {
            continue;
        }
        let bus = |g: &DeviceGroup| g.members.iter().find_map(|m| m.dev.pci_bus_id.clone()).unwrap_or_default();
        // A MIG device is numbered as its GPU (its PCI bus id and `parent_uuid` are its GPU's).
        let gpu = |g: &DeviceGroup| {
            g.members.iter().find_map(|m| m.dev.parent_uuid.clone()).or_else(|| g.uuid.clone()).unwrap_or_default()
        };
        let mut order: Vec<((String, String), usize)> = gs
            .iter()
            .enumerate()
            .filter(|(_, g)| on_host(g))
            .map(|(i, g)| ((bus(g).to_ascii_lowercase(), gpu(g)), i))
            .collect();
        order.sort();
        let mut numbers: Vec<(usize, i64)> = Vec::new();
        let mut n = -1;
        for (k, (key, i)) in order.iter().enumerate() {
            if k == 0 || order[k - 1].0 != *key {
                n += 1;
            }
            numbers.push((*i, n));
        }
        // A process that saw every device of the host (`CUDA_VISIBLE_DEVICES` unset) saw as
        // many as the run's groups there when the run touched each of them.
        let seen = gs.iter().filter(|g| on_host(g)).count() as i64;
        let every = gs.iter().filter(|g| on_host(g)).flat_map(|g| &g.members).any(|m| {
            !m.report.process.env.contains_key("CUDA_VISIBLE_DEVICES") && m.report.process.visible_devices == Some(seen)
        });
        // The ordinals already are the PCI bus order: nothing to say, where that order is
        // nvidia-smi's. Where no process saw every GPU, the numbers are not known, however
        // the ordinals fell: the GPUs are named by UUID.
        if every && numbers.iter().all(|&(i, n)| gs[i].index == n) {
            continue;
        }
        let uuids: Vec<String> = gs.iter().filter(|g| on_host(g)).filter_map(|g| g.uuid.clone()).collect();
        for (i, n) in numbers {
            gs[i].index = n;
            gs[i].numbered_by_pci = true;
            gs[i].every_gpu_seen = every;
            if !every {
                gs[i].uuid_name = gs[i].uuid.as_deref().map(|u| short_uuid(u, &uuids));
            }
        }
    }
}

/// A UUID (`GPU-8f2e1a0b-...`) cut to its first group (`GPU-8f2e1a0b`) where no other of
/// `all` starts with that, else whole.
pub fn short_uuid(uuid: &str, all: &[String]) -> String {
    let cut = uuid.match_indices('-').nth(1).map_or(uuid, |(i, _)| &uuid[..i]);
    if all.iter().filter(|u| u.starts_with(cut)).count() == 1 {
        cut.to_string()
    } else {
        uuid.to_string()
    }
}

/// A point of a merged timeline: absolute time (µs) and live bytes per category: the six
/// built-in ones, then those of the device's own ([`DeviceGroup::other_categories`], a
/// user's rules or a program's tags), in that order.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub t_unix_us: i64,
    pub cats: [i64; 6],
    pub others: Vec<i64>,
}

impl Point {
    pub fn total(&self) -> i64 {
        self.cats.iter().sum::<i64>() + self.others.iter().sum::<i64>()
    }
}

/// The largest single allocation (or failed attempt) seen on a device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LargeAlloc {
    pub pid: i64,
    /// With `pid`, which process (processes in containers share pids).
    #[serde(skip)]
    pub start_us: i64,
    /// On the run's clock (µs since its first process started).
    pub at_us: i64,
    pub t_ms: i64,
    pub seq: Option<i64>,
    pub bytes: i64,
    pub api: String,
    pub category: Option<String>,
    pub failed: bool,
}

/// A free-memory reading: what the device used at a query, what this run's processes had
/// allocated at that moment, and the difference.
#[derive(Debug, Clone, Serialize)]
pub struct Reading {
    pub pid: i64,
    pub api: String,
    /// On the run's clock.
    pub at_us: i64,
    pub free_bytes: i64,
    pub total_bytes: i64,
    /// `total - free`.
    pub used_bytes: i64,
    /// What the run's processes had allocated on the device at the query.
    pub tracked_bytes: i64,
    /// `used - tracked`: contexts, modules, graphs, peer mappings, rounding, other processes.
    pub untracked_bytes: i64,
    /// How old the reading is at the end of the run (its last report).
    pub age_us: i64,
}

impl<'a> DeviceGroup<'a> {
    pub fn total_bytes(&self) -> Option<i64> {
        self.members.iter().filter_map(|m| m.dev.total_bytes).max()
    }

    pub fn live(&self) -> i64 {
        self.members.iter().map(|m| m.dev.live_bytes).sum()
    }

    pub fn cat_live(&self, name: &str) -> i64 {
        self.members.iter().map(|m| m.dev.cat(name).live_bytes).sum()
    }

    /// The end of the run as far as this device's processes tell: their last report.
    pub fn end_us(&self) -> i64 {
        *self
            .end
            .get_or_init(|| self.members.iter().map(|m| m.end_us()).max().unwrap_or(self.clock.t0_us))
    }

    /// The device timeline: every member's samples summed as step functions.
    ///
    /// A point at every member's sample time and just after each member's end (the driver
    /// frees an exited process's memory: the drop shows), each the sum of
    /// [`Member::live_at`] over the members, computed in one sweep over every member's
    /// changes (not a pass over the members per point: thousands of processes on one GPU).
    /// Computed once per group and lent, not copied: a timeline-heavy device has hundreds of
    /// thousands of points.
    pub fn series(&self) -> &[Point] {
        self.series.get_or_init(|| self.sweep())
    }

    /// The name a chart shows for category `name` of the device's own: itself, unless it is a
    /// name the charts give a part of their own ([`CHART_PARTS`]: the untracked band, the
    /// driver costs, the free space...), then `own:NAME`, so that neither hides the other.
    pub fn shown_category(name: &str) -> std::borrow::Cow<'_, str> {
        if CHART_PARTS.contains(&name) {
            std::borrow::Cow::Owned(format!("own:{name}"))
        } else {
            std::borrow::Cow::Borrowed(name)
        }
    }

    /// The categories beyond the six that the members' timelines hold (a user's rules, a
    /// program's tags), by name: the order of [`Point::others`].
    pub fn other_categories(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for m in &self.members {
            for s in &m.dev.timeline {
                for k in s.cats.others() {
                    if !names.iter().any(|n| n == k) {
                        names.push(k.to_string());
                    }
                }
            }
        }
        names.sort();
        names
    }

    fn sweep(&self) -> Vec<Point> {
        let others = self.other_categories();
        let n = 6 + others.len();
        // (time, where in `flat` the member's change per category starts); a zero change
        // keeps a time a point. One flat buffer: no allocation per sample.
        // Sized once: grown by doubling, a timeline-heavy device's buffers held up to twice
        // what they needed while the points were built.
        let samples: usize = self.members.iter().map(|m| m.dev.timeline.len() + 1).sum();
        let mut changes: Vec<(i64, usize)> = Vec::with_capacity(samples);
        let mut flat: Vec<i64> = Vec::with_capacity(samples * n);
        let mut last = vec![0i64; n];
        for m in &self.members {
            let end = m.ended_us();
            last.iter_mut().for_each(|v| *v = 0);
            let mut before = i64::MIN;
            for s in &m.dev.timeline {
                let t = m.abs_us(s);
                changes.push((t, flat.len()));
                // `live_at` takes the last sample at or before a time in a timeline in time
                // order: one out of order or after the end never shows (its time stays a point).
                if t < before || end.is_some_and(|e| t > e) {
                    flat.extend(std::iter::repeat(0).take(n));
                    continue;
                }
                before = t;
                for (k, c) in CATEGORIES.iter().copied().chain(others.iter().map(String::as_str)).enumerate() {
                    let v = s.cat(c);
                    flat.push(v.wrapping_sub(last[k]));
                    last[k] = v;
                }
            }
            if let Some(e) = end {
                changes.push((e.saturating_add(1), flat.len()));
                flat.extend(last.iter().map(|v| v.wrapping_neg()));
            }
        }
        changes.sort_by_key(|c| c.0);
        let mut out: Vec<Point> = Vec::with_capacity(changes.len());
        let mut cats = vec![0i64; n];
        for (t, at) in changes {
            for k in 0..n {
                cats[k] = cats[k].wrapping_add(flat[at + k]);
            }
            let mut six = [0i64; 6];
            six.copy_from_slice(&cats[..6]);
            match out.last_mut() {
                Some(p) if p.t_unix_us == t => {
                    p.cats = six;
                    p.others.clear();
                    p.others.extend_from_slice(&cats[6..]);
                }
                _ => out.push(Point { t_unix_us: t, cats: six, others: cats[6..].to_vec() }),
            }
        }
        out
    }

    /// Peak of the device's summed live bytes. Exact for one process (its own counter);
    /// for several, the maximum of the merged timelines (at least any member's peak).
    pub fn peak(&self) -> i64 {
        let member_max = self.members.iter().map(|m| m.dev.peak_bytes).max().unwrap_or(0);
        if self.members.len() == 1 {
            return member_max;
        }
        self.series().iter().map(Point::total).max().unwrap_or(0).max(member_max)
    }

    /// Peak of one category, computed like [`Self::peak`].
    pub fn cat_peak(&self, name: &str) -> i64 {
        let member_max = self.members.iter().map(|m| m.dev.cat(name).peak_bytes).max().unwrap_or(0);
        if self.members.len() == 1 {
            return member_max;
        }
        let series = self.series();
        let merged = match CATEGORIES.iter().position(|c| *c == name) {
            Some(i) => series.iter().map(|p| p.cats[i]).max(),
            None => match self.other_categories().iter().position(|c| c == name) {
                Some(i) => series.iter().map(|p| p.others[i]).max(),
                None => None,
            },
        };
        merged.unwrap_or(0).max(member_max)
    }

    /// Every probe of every member, with the member, in time order (across processes by
    /// absolute time, within one by `(t_ms, seq)`).
    pub fn probes(&self) -> Vec<(Member<'a>, &'a Probe)> {
        let mut all: Vec<(Member, &Probe)> =
            self.members.iter().flat_map(|m| m.dev.probes.iter().map(move |p| (*m, p))).collect();
        all.sort_by_key(|(m, p)| (m.abs_us(*p), m.pid(), p.stamp().key()));
        all
    }

    /// What the processes of this run had allocated on the device when `m` made the
    /// probe `p`: the others' by absolute time, `m`'s own just before the probe.
    pub fn tracked_at(&self, m: Member, p: &Probe) -> i64 {
        let at = m.abs_us(p);
        // Every member at `at`, with `m` itself counted just before its own record.
        let own = |live: [i64; 6]| live.iter().sum::<i64>();
        self.tracked_total(at) - own(m.live_at(at)) + own(m.live_before(p.stamp()))
    }

    /// The members' tracked bytes (the six categories) at absolute time `at_us`: the sum of
    /// [`Member::live_at`] over the members, from one merged step function (each member's
    /// samples as changes, and its end as a drop to zero), so that a reading costs a binary
    /// search, not a pass over every member (thousands of processes on one GPU).
    pub fn tracked_total(&self, at_us: i64) -> i64 {
        let steps = self.totals.get_or_init(|| {
            let mut changes: Vec<(i64, i64)> = Vec::new();
            for m in &self.members {
                let end = m.ended_us();
                let mut last = 0i64;
                let mut before = i64::MIN;
                for s in &m.dev.timeline {
                    let t = m.abs_us(s);
                    // `live_at` takes the last sample at or before a time in a timeline in
                    // time order; one out of order or after the end never shows.
                    if t < before || end.is_some_and(|e| t > e) {
                        continue;
                    }
                    before = t;
                    let v: i64 = CATEGORIES.iter().map(|c| s.cat(c)).sum();
                    changes.push((t, v - last));
                    last = v;
                }
                if let Some(e) = end {
                    if last != 0 {
                        changes.push((e.saturating_add(1), -last));
                    }
                }
            }
            changes.sort_by_key(|c| c.0);
            let mut sum = 0i64;
            for c in &mut changes {
                sum = sum.saturating_add(c.1);
                c.1 = sum;
            }
            changes
        });
        let n = steps.partition_point(|c| c.0 <= at_us);
        n.checked_sub(1).map_or(0, |i| steps[i].1)
    }

    /// The reading of the probe `p` of `m`, when the probe told both free and total.
    pub fn reading(&self, m: Member, p: &Probe) -> Option<Reading> {
        let (Some(free), Some(total)) = (p.free_bytes, p.total_bytes) else {
            return None;
        };
        if p.error != 0 {
            return None;
        }
        let tracked = self.tracked_at(m, p);
        let at = m.abs_us(p);
        Some(Reading {
            pid: m.pid(),
            api: p.api.clone(),
            at_us: self.clock.since(at),
            free_bytes: free,
            total_bytes: total,
            used_bytes: total - free,
            tracked_bytes: tracked,
            untracked_bytes: total - free - tracked,
            age_us: (self.end_us() - at).max(0),
        })
    }

    /// NVML's reading of the device written in `m`'s report (`devices[].usage`), compared
    /// with what the run's processes had allocated then: fresher than any query.
    pub fn usage_reading(&self, m: Member) -> Option<Reading> {
        let u = m.dev.usage.as_ref()?;
        let at = m.abs_of(u.t_us);
        let tracked = self.tracked_total(at);
        Some(Reading {
            pid: m.pid(),
            api: u.source.clone(),
            at_us: self.clock.since(at),
            free_bytes: u.total_bytes - u.used_bytes,
            total_bytes: u.total_bytes,
            used_bytes: u.used_bytes,
            tracked_bytes: tracked,
            untracked_bytes: u.used_bytes - tracked,
            age_us: (self.end_us() - at).max(0),
        })
    }

    /// Every reading of the device, in time order: the programs' queries and NVML's readings.
    pub fn readings(&self) -> Vec<Reading> {
        let mut all: Vec<Reading> = self.probes().into_iter().filter_map(|(m, p)| self.reading(m, p)).collect();
        all.extend(self.members.iter().filter_map(|m| self.usage_reading(*m)));
        all.sort_by_key(|r| r.at_us);
        all
    }

    /// Figures of this GPU that cannot all be true: the run's processes tracked more than the
    /// GPU holds, or the freshest reading says they hold more than the whole device used
    /// (untracked below zero by more than rounding and managed memory explain). Both mean
    /// these processes were not on one GPU (reports without UUIDs, merged by ordinal) or a
    /// report is wrong.
    pub fn impossible(&self) -> Vec<Impossible> {
        let mut out = Vec::new();
        if let Some(total) = self.total_bytes().filter(|t| *t > 0) {
            let peak = self.peak();
            if peak > total {
                out.push(Impossible::TrackedOverTotal { peak, total });
            }
            if let Some(r) = self.last_reading() {
                let slack = (total / 100).max(256 << 20);
                if r.untracked_bytes < -slack {
                    out.push(Impossible::UntrackedBelowZero(r));
                }
            }
        }
        out
    }

    /// Whether `dev` of `report` is one of this GPU's members.
    pub fn has(&self, report: &Report, dev: &Device) -> bool {
        self.members.iter().any(|m| std::ptr::eq(m.report, report) && std::ptr::eq(m.dev, dev))
    }

    /// The last reading: used and tracked compared at the query itself.
    pub fn last_reading(&self) -> Option<Reading> {
        self.readings().pop()
    }

    /// The reading with the most untracked memory.
    pub fn max_untracked(&self) -> Option<Reading> {
        self.readings().into_iter().rev().max_by_key(|r| r.untracked_bytes)
    }

    /// The largest allocation or failed attempt on the device (ties: the earliest).
    pub fn largest_allocation(&self) -> Option<LargeAlloc> {
        let mut candidates: Vec<(i64, LargeAlloc)> = Vec::new();
        for m in &self.members {
            for a in &m.dev.top_allocations {
                let at = m.abs_us(a);
                let large = LargeAlloc {
                    pid: m.pid(),
                    start_us: m.report.process.start_us(),
                    at_us: self.clock.since(at),
                    t_ms: a.t_ms,
                    seq: a.seq,
                    bytes: a.bytes,
                    api: a.api.clone(),
                    category: Some(a.category.clone()),
                    failed: false,
                };
                candidates.push((at, large));
            }
            for f in &m.dev.failures {
                let at = m.abs_us(f);
                let large = LargeAlloc {
                    pid: m.pid(),
                    start_us: m.report.process.start_us(),
                    at_us: self.clock.since(at),
                    t_ms: f.t_ms,
                    seq: f.seq,
                    bytes: f.bytes,
                    api: f.api.clone(),
                    category: None,
                    failed: true,
                };
                candidates.push((at, large));
            }
        }
        candidates
            .into_iter()
            .max_by_key(|(at, a)| (a.bytes, std::cmp::Reverse((*at, a.seq.unwrap_or(-1)))))
            .map(|(_, a)| a)
    }

    /// The member that is process (`pid`, started at `start_us`): processes on one host can
    /// share a pid (containers, all pid 1), so a process is never found by its pid alone.
    pub fn member_at(&self, pid: i64, start_us: i64) -> Option<Member<'a>> {
        self.members.iter().copied().find(|m| m.pid() == pid && m.report.process.start_us() == start_us)
    }

    /// The probe the program sized its memory from: the last probe of the process that
    /// made the device's largest allocation, before that allocation; without allocations
    /// in the report, the last probe before the steepest rise of that process's timeline.
    /// "Before" is in the process's record order, `(t_ms, seq)`.
    pub fn sizing_probe(&self) -> Option<(Member<'a>, &'a Probe, Why)> {
        if let Some(big) = self.largest_allocation() {
            let m = self.member_at(big.pid, big.start_us)?;
            let at = Stamp { t_ms: big.t_ms, seq: big.seq };
            let p = last_before(&m.dev.probes, at)?;
            return Some((m, p, Why::LargestAllocation(big)));
        }
        let mut best: Option<(Member, Stamp, i64, i64)> = None;
        for m in &self.members {
            for w in m.dev.timeline.windows(2) {
                let rise = w[1].live_bytes - w[0].live_bytes;
                if rise > 0 && !matches!(&best, Some(b) if rise <= b.2) {
                    best = Some((*m, w[1].stamp(), rise, m.abs_us(&w[1])));
                }
            }
        }
        let (m, at, rise, abs) = best?;
        let p = last_before(&m.dev.probes, at)?;
        Some((m, p, Why::SteepestRise { bytes: rise, at_unix_us: abs }))
    }

    /// The free-memory queries worth showing: each process's first, the sizing probe, and
    /// the last probe before each failure. Deduplicated, in time order.
    pub fn key_probes(&self) -> Vec<KeyProbe> {
        let mut out: Vec<(i64, KeyProbe)> = Vec::new();
        let mut add = |m: Member, p: &Probe, why: Why| {
            let same =
                |k: &KeyProbe| (k.pid, k.t_ms, k.seq, k.api.as_str()) == (m.pid(), p.t_ms, p.seq, p.api.as_str());
            if let Some((_, k)) = out.iter_mut().find(|(_, k)| same(k)) {
                if !k.why.contains(&why) {
                    k.why.push(why);
                }
                return;
            }
            out.push((m.abs_us(p), KeyProbe::new(self, m, p, why)));
        };
        for m in &self.members {
            if let Some(p) = first_recorded(&m.dev.probes) {
                add(*m, p, Why::FirstQuery);
            }
        }
        if let Some((m, p, why)) = self.sizing_probe() {
            add(m, p, why);
        }
        for m in &self.members {
            for f in &m.dev.failures {
                if let Some(p) = &f.last_probe {
                    add(*m, p, Why::FailedAllocation { api: f.api.clone(), bytes: f.bytes });
                }
            }
        }
        out.sort_by_key(|(t, k)| (*t, k.pid, k.seq.unwrap_or(-1)));
        out.into_iter().map(|(_, k)| k).collect()
    }

    pub fn failures(&self) -> Vec<(Member<'a>, &'a Failure)> {
        let mut all: Vec<(Member, &Failure)> =
            self.members.iter().flat_map(|m| m.dev.failures.iter().map(move |f| (*m, f))).collect();
        all.sort_by_key(|(m, f)| (m.abs_us(*f), m.pid(), f.stamp().key()));
        all
    }

    /// The failures that are requests of their own (not a retry of the previous failure of the
    /// same process), each with the times of its retries.
    pub fn failed_requests(&self) -> Vec<(Member<'a>, &'a Failure, Vec<i64>)> {
        let mut out: Vec<(Member, &Failure, Vec<i64>)> = Vec::new();
        for (m, f) in self.failures() {
            let prev = out.iter_mut().rev().find(|(pm, _, _)| pm.pid() == m.pid());
            if let Some((pm, pf, retries)) = prev {
                let last_us = retries.last().copied().unwrap_or_else(|| pm.abs_us(*pf));
                if is_retry(m.report, pf, f, last_us, m.abs_us(f)) {
                    retries.push(m.abs_us(f));
                    continue;
                }
            }
            out.push((m, f, Vec::new()));
        }
        out
    }

    /// Failed allocation requests: [`Self::failures_total`] less the retries folded into
    /// [`Self::failed_requests`].
    pub fn failed_request_count(&self) -> i64 {
        let retries: usize = self.failed_requests().iter().map(|(_, _, r)| r.len()).sum();
        self.failures_total() - retries as i64
    }

    pub fn failures_total(&self) -> i64 {
        self.members.iter().map(|m| m.dev.failures_total.max(m.dev.failures.len() as i64)).sum()
    }

    pub fn ipc(&self) -> Ipc {
        let mut t = Ipc::default();
        for m in &self.members {
            let i = &m.dev.ipc;
            t.exported_count += i.exported_count;
            t.exported_bytes += i.exported_bytes;
            t.imported_count += i.imported_count;
            t.imported_bytes += i.imported_bytes;
            t.imported_live_count += i.imported_live_count;
            t.imported_live_bytes += i.imported_live_bytes;
        }
        t
    }

    pub fn graphs(&self) -> Graphs {
        let mut t = Graphs::default();
        for m in &self.members {
            let g = &m.dev.graphs;
            t.captures += g.captures;
            t.captures_active += g.captures_active;
            t.captured_allocs += g.captured_allocs;
            t.captured_bytes += g.captured_bytes;
            t.instantiations += g.instantiations;
            t.instantiate_bytes += g.instantiate_bytes;
            t.instantiate_measured += g.instantiate_measured;
            t.exec_destroys += g.exec_destroys;
            t.exec_destroy_measured += g.exec_destroy_measured;
            t.exec_destroy_bytes += g.exec_destroy_bytes;
        }
        t
    }

    /// The category holding the most live bytes: (name, bytes), when any holds some.
    pub fn biggest_category(&self) -> Option<(String, i64)> {
        CATEGORIES.iter().map(|c| (c.to_string(), self.cat_live(c))).filter(|(_, b)| *b > 0).max_by_key(|(_, b)| *b)
    }
}

/// The categories worth listing for a run: those that held memory (live, peak or live
/// allocations) in some process on some device; all six with `all`.
/// Categories beyond the six (a user's rules or a program's tags name them; reports since
/// report-time categories carry them), sorted; with `all` also the empty ones.
pub fn extra_categories(run: &Run, all: bool) -> Vec<String> {
    let mut v: Vec<String> = run
        .procs
        .iter()
        .flat_map(|r| &r.devices)
        .flat_map(|d| d.categories.iter())
        .filter(|(name, s)| {
            !CATEGORIES.contains(&name.as_str()) && (all || s.live_bytes != 0 || s.peak_bytes != 0 || s.allocs != 0)
        })
        .map(|(name, _)| name.clone())
        .collect();
    v.sort();
    v.dedup();
    v
}

pub fn shown_categories(run: &Run, all: bool) -> Vec<&'static str> {
    CATEGORIES
        .iter()
        .copied()
        .filter(|c| {
            all || run.procs.iter().flat_map(|r| &r.devices).any(|d| {
                let s = d.cat(c);
                s.live_bytes != 0 || s.peak_bytes != 0 || s.allocs != 0
            })
        })
        .collect()
}

/// Why a free-memory query matters (the CLI words it; a query can matter for several).
#[derive(Debug, Clone, PartialEq)]
pub enum Why {
    /// A process's first query on the device.
    FirstQuery,
    /// The last query of the process that made the device's largest allocation, before it.
    LargestAllocation(LargeAlloc),
    /// Without allocations in the report: the last query before the steepest rise of the
    /// timeline (`bytes`, at absolute `at_unix_us`).
    SteepestRise { bytes: i64, at_unix_us: i64 },
    /// The last query before a failed allocation.
    FailedAllocation { api: String, bytes: i64 },
}

/// A figure of a GPU that cannot be true with the others (see [`DeviceGroup::impossible`]).
#[derive(Debug, Clone)]
pub enum Impossible {
    /// The run's processes tracked `peak` at once on a GPU of `total`.
    TrackedOverTotal { peak: i64, total: i64 },
    /// The last reading's untracked memory is below zero by more than the slack.
    UntrackedBelowZero(Reading),
}

/// A free-memory query and what the program was told.
#[derive(Debug, Clone)]
pub struct KeyProbe {
    pub pid: i64,
    pub label: String,
    /// On the run's clock (µs since its first process started).
    pub at_us: i64,
    pub t_ms: i64,
    pub seq: Option<i64>,
    pub api: String,
    /// Why it matters, each reason once, in the order found.
    pub why: Vec<Why>,
    pub free_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub error: i64,
    /// What this process had allocated on the device at that moment.
    pub tracked_bytes: i64,
}

impl KeyProbe {
    fn new(g: &DeviceGroup, m: Member, p: &Probe, why: Why) -> Self {
        KeyProbe {
            pid: m.pid(),
            label: m.label(),
            at_us: g.clock.since(m.abs_us(p)),
            t_ms: p.t_ms,
            seq: p.seq,
            api: p.api.clone(),
            why: vec![why],
            free_bytes: p.free_bytes,
            total_bytes: p.total_bytes,
            error: p.error,
            tracked_bytes: p.live_bytes,
        }
    }
}

/// Is failure `f` of process `report` the same request as its previous failure `prev` made
/// again: the same API and size, from the same call site (or the same Python stack: a retry
/// inside the allocator comes from another native return address), within
/// [`RETRY_WINDOW_US`]. PyTorch's caching allocator does that on every out-of-memory
/// (`c10/cuda/CUDACachingAllocator.cpp`, `DeviceCachingAllocator::malloc`: after a failed
/// `alloc_block` it releases its cached blocks and calls `alloc_block` again).
pub fn is_retry(report: &Report, prev: &Failure, f: &Failure, prev_us: i64, f_us: i64) -> bool {
    let python = |id: Option<i64>| report.sites.iter().find(|s| Some(s.id) == id).map(|s| &s.python);
    let same_place =
        prev.site == f.site || python(prev.site).is_some_and(|a| !a.is_empty() && Some(a) == python(f.site));
    prev.api == f.api && prev.bytes == f.bytes && same_place && (0..=RETRY_WINDOW_US).contains(&(f_us - prev_us))
}

/// How long after a failure the allocator's retry of it may come. Between the two sit the
/// allocator's release of its cached blocks (a synchronize and a free of each) and
/// culedger's own urgent report write (the failing thread waits for its report to be on
/// disk, src/report/urgent.rs): on a loaded machine (three 8-rank demo start-ups at once on
/// 2 cores) that took up to 1.8 s, and with a window of one second such a retry counted as a
/// failure of its own, so the demo's verdict read "(12 failed allocations)" one run in a few.
pub const RETRY_WINDOW_US: i64 = 10_000_000;

#[cfg(test)]
mod uuid_name_tests {
    use super::short_uuid;

    /// A UUID's first group names it where that tells it from the host's others (real GPUs'
    /// UUIDs are random); the simulated machine's share it, and are named whole.
    #[test]
    fn short_where_unambiguous_else_whole() {
        let real = ["GPU-8f2e1a0b-1111-2222-3333-444455556666".to_string(), "GPU-03c1d2e4-aaaa-bbbb-cccc-ddddeeeeffff".into()];
        assert_eq!(short_uuid(&real[0], &real), "GPU-8f2e1a0b");
        let sim = ["GPU-676f7437-a054-cfb0-face-000000000002".to_string(), "GPU-676f7437-a054-cfb0-face-000000000003".into()];
        assert_eq!(short_uuid(&sim[1], &sim), sim[1]);
        assert_eq!(short_uuid("MIG-12345678-aaaa-bbbb-cccc-ddddeeeeffff", &["MIG-12345678-aaaa-bbbb-cccc-ddddeeeeffff".into()]), "MIG-12345678");
    }
}
