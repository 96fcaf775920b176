//! The free-memory queries a formula's input names: a process's queries on one device whose
//! frames match the input's callers.

use crate::engines;
use crate::groups::Member;
use crate::steps::{Kind, Step};

/// The process's queries on `m`'s device whose frames match `callers`, as step indices.
pub fn matching_queries(m: Member, st: &[Step], callers: &[String]) -> Vec<usize> {
    (0..st.len())
        .filter(|&i| match st[i].kind {
            Kind::Query(p) => p.error == 0 && engines::matching_frame(m.report, p.site, callers).is_some(),
            _ => false,
        })
        .collect()
}
