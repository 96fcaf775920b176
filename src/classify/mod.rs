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

pub const ALL: [Category; 6] = [
    Category::Weights,
    Category::KvPool,
    Category::Ipc,
    Category::Graphs,
    Category::Comm,
    Category::Other,
];

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
pub fn classify(facts: &crate::ledger::Facts) -> Category {
    if facts.exported {
        Category::Ipc
    } else if facts.captured {
        Category::Graphs
    } else {
        Category::Other
    }
}
