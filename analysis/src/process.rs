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
}
