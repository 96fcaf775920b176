//! Recorded facts to categories.

/// Memory categories, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    Weights,
    KvPool,
    Ipc,
    Graphs,
    Comm,
    Other,
}

pub const ALL: [Category; 6] =
    [Category::Weights, Category::KvPool, Category::Ipc, Category::Graphs, Category::Comm, Category::Other];

impl Category {
    pub fn name(self) -> &'static str {
        match self {
            Category::Weights => "weights",
            Category::KvPool => "kv_pool",
            Category::Ipc => "ipc",
            Category::Graphs => "graphs",
            Category::Comm => "comm",
            Category::Other => "other",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Built-in rules (this issue): exported -> ipc, captured -> graphs, else other.
/// The ledger calls this whenever an allocation's facts change and moves its bytes to the
/// returned category, so every classification rule belongs here.
pub fn classify(facts: &crate::ledger::Facts) -> Category {
    if facts.exported {
        Category::Ipc
    } else if facts.captured {
        Category::Graphs
    } else {
        Category::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Facts;

    #[test]
    fn builtin_rules_in_priority_order() {
        let facts = |exported, captured| Facts { exported, captured, ..Facts::default() };
        assert_eq!(classify(&facts(false, false)), Category::Other);
        assert_eq!(classify(&facts(false, true)), Category::Graphs);
        assert_eq!(classify(&facts(true, false)), Category::Ipc);
        assert_eq!(classify(&facts(true, true)), Category::Ipc, "exported wins over captured");
    }

    #[test]
    fn names_and_indices_follow_report_order() {
        let names: Vec<&str> = ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["weights", "kv_pool", "ipc", "graphs", "comm", "other"]);
        assert!(ALL.iter().enumerate().all(|(i, c)| c.index() == i));
    }
}
