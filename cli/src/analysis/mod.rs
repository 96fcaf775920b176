//! The device groups in the CLI's words: the analysis crate groups a run's processes per
//! host and physical GPU and finds the free-memory queries that matter and the figures that
//! cannot all be true (`culedger_analysis::groups`); this names a device, says why a query
//! matters and words an impossible figure.

use crate::clock::Clock;
use crate::load::Run;
use crate::units::fmt_bytes;
pub use culedger_analysis::groups::*;

/// A device group's words.
pub trait GroupWords {
    /// `host GPU 3`.
    fn title(&self) -> String;
    /// Figures of this GPU that cannot all be true, one line each; each line names the
    /// processes, their ordinals and environments.
    fn impossible_lines(&self) -> Vec<String>;
}

/// A GPU's number as nvidia-smi gives it (`3`), and a MIG device's place under it (`0 MIG 1`).
pub fn gpu_number(index: i64, mig_index: Option<i64>) -> String {
    match mig_index {
        Some(m) => format!("{index} MIG {m}"),
        None => index.to_string(),
    }
}

/// A GPU's name after the word "GPU" where the host's numbering is known (`3`, `0 MIG 1`),
/// else its UUID's (`GPU-8f2e1a0b`, a MIG device's `MIG-...`; [`DeviceGroup::uuid_name`]), as
/// nvidia-smi names a GPU: by its number, or by its UUID where only some GPUs are seen.
pub fn gpu_token(index: i64, mig_index: Option<i64>, uuid_name: Option<&str>) -> String {
    uuid_name.map_or_else(|| gpu_number(index, mig_index), str::to_string)
}

/// A GPU in words: `GPU 3`, `GPU 0 MIG 1`, or a UUID name alone (`GPU-8f2e1a0b`), which says
/// GPU already; `token` as [`gpu_token`] writes it.
pub fn gpu_words(token: &str) -> String {
    if token.starts_with("GPU-") || token.starts_with("MIG-") {
        token.to_string()
    } else {
        format!("GPU {token}")
    }
}

/// [`gpu_token`] of a group id (`None`: a finding about no one device group).
pub fn id_token(index: i64, mig_index: Option<i64>, id: Option<&GpuId>) -> String {
    gpu_token(index, mig_index, id.and_then(|id| id.uuid_name.as_deref()))
}

impl GroupWords for DeviceGroup<'_> {
    fn title(&self) -> String {
        format!("{} {}", self.host, gpu_words(&gpu_token(self.index, self.mig_index, self.uuid_name.as_deref())))
    }

    fn impossible_lines(&self) -> Vec<String> {
        let who = || {
            let each: Vec<String> = self
                .members
                .iter()
                .map(|m| {
                    let env = m.report.process.env.get("CUDA_VISIBLE_DEVICES");
                    let env = env.map_or_else(String::new, |v| format!(", CUDA_VISIBLE_DEVICES={v}"));
                    format!("pid {} (ordinal {}{env})", m.pid(), m.dev.index)
                })
                .collect();
            let why = if self.uuid.is_none() {
                "; their reports name no physical GPU, so these may be different GPUs merged by ordinal"
            } else {
                ""
            };
            format!("{}{why}", each.join(", "))
        };
        DeviceGroup::impossible(self)
            .into_iter()
            .map(|i| match i {
                Impossible::TrackedOverTotal { peak, total } => format!(
                    "{}: tracked {} at once, more than the GPU's {}: {}",
                    self.title(),
                    fmt_bytes(peak),
                    fmt_bytes(total),
                    who()
                ),
                Impossible::UntrackedBelowZero(r) => format!(
                    "{}: untracked {} at the last reading (pid {}, {}): the run's processes held {} of a device \
                     that used {}: {}",
                    self.title(),
                    fmt_bytes(r.untracked_bytes),
                    r.pid,
                    r.api,
                    fmt_bytes(r.tracked_bytes),
                    fmt_bytes(r.used_bytes),
                    who()
                ),
            })
            .collect()
    }
}

/// The one line saying that a run's reports name no physical GPU (written before culedger
/// recorded device UUIDs), so GPUs are each process's ordinal; None when every device has one.
/// Said only where it matters: some process recorded `CUDA_VISIBLE_DEVICES`, which renumbers
/// ordinals.
pub fn ordinal_fallback_note(run: &Run) -> Option<String> {
    let old = run.procs.iter().filter(|r| r.devices.iter().any(|d| d.uuid.is_none())).count();
    let renumbered = run.procs.iter().any(|r| r.process.env.contains_key("CUDA_VISIBLE_DEVICES"));
    (old > 0 && renumbered).then(|| {
        format!(
            "{old} report(s) name no physical GPU (written before culedger recorded device UUIDs): \
             their GPUs are the processes' own ordinals, which CUDA_VISIBLE_DEVICES may have renumbered"
        )
    })
}

/// The one line saying that a host's GPUs are numbered in PCI bus order of those the run saw,
/// because no report there had NVML's number; None when none is. Where no process saw every
/// GPU of the host, nvidia-smi's numbers are not known: the GPUs are named by their UUIDs, as
/// nvidia-smi and `CUDA_VISIBLE_DEVICES` do, and the line says so.
pub fn pci_numbering_note(groups: &[DeviceGroup]) -> Option<String> {
    let hosts: std::collections::BTreeSet<&str> =
        groups.iter().filter(|g| g.numbered_by_pci).map(|g| g.host.as_str()).collect();
    if hosts.is_empty() {
        return None;
    }
    let on = hosts.iter().copied().collect::<Vec<_>>().join(", ");
    // Each named by UUID, with its whole UUID where the name is its first group.
    let unsure: Vec<String> = groups
        .iter()
        .filter(|g| g.numbered_by_pci && !g.every_gpu_seen)
        .map(|g| {
            let host = if hosts.len() > 1 { format!("{} ", g.host) } else { String::new() };
            let (name, uuid) = (g.uuid_name.as_deref().unwrap_or("?"), g.uuid.as_deref().unwrap_or("?"));
            if name == uuid {
                format!("{host}{name}")
            } else {
                format!("{host}{name} is {uuid}")
            }
        })
        .collect();
    Some(if unsure.is_empty() {
        format!(
            "GPUs on {on} are numbered in PCI bus order (no report had NVML's number): nvidia-smi's numbers, since a \
             process there saw every GPU; each is one physical GPU by its UUID"
        )
    } else {
        format!(
            "GPUs on {on} are named by their UUIDs (no report had NVML's number, and no process saw every GPU \
             there, so nvidia-smi's numbers are not known): {}",
            unsure.join(", ")
        )
    })
}

/// Why a query matters, in words; times on the run's clock.
pub fn why(w: &Why, c: &Clock) -> String {
    match w {
        Why::FirstQuery => "first query".into(),
        Why::LargestAllocation(big) => {
            let what = match (&big.category, big.failed) {
                (_, true) => format!("failed {} of {}", big.api, fmt_bytes(big.bytes)),
                (Some(cat), false) => format!("{} {} of {}", cat, big.api, fmt_bytes(big.bytes)),
                (None, false) => format!("{} of {}", big.api, fmt_bytes(big.bytes)),
            };
            format!("before the largest allocation ({what} at {})", c.at(c.t0_us + big.at_us))
        }
        Why::SteepestRise { bytes, at_unix_us } => {
            format!("before the steepest rise (+{} at {})", fmt_bytes(*bytes), c.at(*at_unix_us))
        }
        Why::FailedAllocation { api, bytes } => format!("before the failed {api} of {}", fmt_bytes(*bytes)),
    }
}

/// Every reason a query matters, in words, joined by `; ` (each sentence once).
pub fn whys(ws: &[Why], c: &Clock) -> String {
    let mut out = String::new();
    for w in ws {
        let s = why(w, c);
        if out.is_empty() {
            out = s;
        } else if !out.contains(&s) {
            out = format!("{out}; {s}");
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
