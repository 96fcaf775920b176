//! How a process is named, as typed values: its rank hint (`RANK`, else `LOCAL_RANK`) and,
//! without one, its pid and label. The CLI words it (`rank 1 (pid 5102)`, `local rank 0 (pid
//! 5102)`, `pid 5100 (its label)`); every place that names a process or asks for its rank
//! takes it from here.

use crate::model::Report;
use std::collections::BTreeMap;

/// A process's rank hint from its environment: `RANK`, else `LOCAL_RANK` (an empty value is no
/// hint), and whether it is the local one.
pub fn rank_hint(env: &BTreeMap<String, String>) -> Option<(&str, bool)> {
    let get = |k: &str| env.get(k).map(String::as_str).filter(|v| !v.is_empty());
    get("RANK").map(|r| (r, false)).or_else(|| get("LOCAL_RANK").map(|r| (r, true)))
}

/// How a process is named: by its rank when it has one, else by its pid and label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    Rank { rank: String, pid: i64 },
    LocalRank { rank: String, pid: i64 },
    Pid { pid: i64, label: String },
}

impl Who {
    /// The name of the process of report `r`.
    pub fn of(r: &Report) -> Who {
        let p = &r.process;
        match rank_hint(&p.env) {
            Some((rank, false)) => Who::Rank { rank: rank.to_string(), pid: p.pid },
            Some((rank, true)) => Who::LocalRank { rank: rank.to_string(), pid: p.pid },
            None => Who::Pid { pid: p.pid, label: p.label() },
        }
    }

    /// Its pid.
    pub fn pid(&self) -> i64 {
        match self {
            Who::Rank { pid, .. } | Who::LocalRank { pid, .. } | Who::Pid { pid, .. } => *pid,
        }
    }

    /// Its rank (global or local), when it has one.
    pub fn rank(&self) -> Option<&str> {
        match self {
            Who::Rank { rank, .. } | Who::LocalRank { rank, .. } => Some(rank),
            Who::Pid { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_global_rank_first_and_empty_values_are_no_hint() {
        assert_eq!(rank_hint(&env(&[("RANK", "3"), ("LOCAL_RANK", "1")])), Some(("3", false)));
        assert_eq!(rank_hint(&env(&[("RANK", ""), ("LOCAL_RANK", "1")])), Some(("1", true)));
        assert_eq!(rank_hint(&env(&[("LOCAL_RANK", "")])), None);
        assert_eq!(rank_hint(&env(&[])), None);
    }

    /// Flattened into a row, the identity keeps its fields' place (the documented order) and
    /// leaves out what it skips; `mig_index` only for a MIG device.
    #[test]
    fn a_flattened_rank_keeps_the_documented_order() {
        #[derive(serde::Serialize)]
        struct Row {
            #[serde(flatten)]
            rank: RankId,
            pool_bytes: i64,
        }
        let rank = RankId {
            pid: 7,
            start_us: 1,
            process: "rank 0 (pid 7)".into(),
            host: "h".into(),
            device: 3,
            mig_index: Some(1),
            gpu: Default::default(),
        };
        let json = |rank: RankId| serde_json::to_string(&Row { rank, pool_bytes: 5 }).unwrap();
        assert_eq!(
            json(rank.clone()),
            r#"{"pid":7,"process":"rank 0 (pid 7)","host":"h","device":3,"mig_index":1,"pool_bytes":5}"#
        );
        let whole = RankId { mig_index: None, ..rank };
        assert_eq!(json(whole), r#"{"pid":7,"process":"rank 0 (pid 7)","host":"h","device":3,"pool_bytes":5}"#);
    }
}

/// Which process on which GPU a rank's row is about: the identity every per-rank row of the
/// JSON outputs starts with (`explain`'s sizing rows and formula ranks, the recommendation's
/// outlook, `whatif`'s ranks), flattened into each (`#[serde(flatten)]`) so its fields keep
/// their place: `pid`, `process`, `host`, `device`, then `mig_index` for a MIG device.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RankId {
    pub pid: i64,
    /// With `pid`, which process (processes in containers share pids).
    #[serde(skip)]
    pub start_us: i64,
    /// The process in words (the CLI's `words::who`).
    pub process: String,
    pub host: String,
    /// Its GPU's number (the device group's index).
    pub device: i64,
    /// For a MIG device: its index under its GPU (`device`); left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_index: Option<i64>,
    /// Which device group of the run (how the text names its GPU).
    #[serde(skip)]
    pub gpu: crate::groups::GpuId,
}

impl RankId {
    /// Member `m` of device group `g`, named `process`.
    pub fn of(m: crate::groups::Member, g: &crate::groups::DeviceGroup, process: String) -> RankId {
        RankId {
            pid: m.pid(),
            start_us: m.report.process.start_us(),
            process,
            host: g.host.clone(),
            device: g.index,
            mig_index: g.mig_index,
            gpu: g.id(),
        }
    }

    /// The same process (pid and start) on the same GPU.
    pub fn same(&self, other: &RankId) -> bool {
        (self.pid, self.start_us, &self.gpu) == (other.pid, other.start_us, &other.gpu)
    }

    /// Whether this is the process of report `r` (pid and start).
    pub fn is_process(&self, r: &Report) -> bool {
        (self.pid, self.start_us) == (r.process.pid, r.process.start_us())
    }
}
