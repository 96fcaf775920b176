//! The memory categories of a report (docs/categories.md), in the order the schema fixes
//! for `categories` maps, timeline samples and every per-category list.

/// A memory category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    Weights,
    KvPool,
    Ipc,
    Graphs,
    Comm,
    Other,
}

/// Every category, in report order.
pub const ALL: [Category; 6] =
    [Category::Weights, Category::KvPool, Category::Ipc, Category::Graphs, Category::Comm, Category::Other];

/// The categories' names, in report order (the keys the report writes).
pub const CATEGORIES: [&str; 6] = {
    let mut names = [""; 6];
    let mut i = 0;
    while i < ALL.len() {
        names[i] = ALL[i].name();
        i += 1;
    }
    names
};

impl Category {
    /// The name the report writes.
    pub const fn name(self) -> &'static str {
        match self {
            Category::Weights => "weights",
            Category::KvPool => "kv_pool",
            Category::Ipc => "ipc",
            Category::Graphs => "graphs",
            Category::Comm => "comm",
            Category::Other => "other",
        }
    }

    /// The place in report order.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The category called `name`.
    pub fn from_name(name: &str) -> Option<Category> {
        ALL.into_iter().find(|c| c.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_indices_follow_report_order() {
        assert_eq!(CATEGORIES, ["weights", "kv_pool", "ipc", "graphs", "comm", "other"]);
        assert!(ALL.iter().enumerate().all(|(i, c)| c.index() == i && CATEGORIES[i] == c.name()));
        assert_eq!(Category::from_name("graphs"), Some(Category::Graphs));
        assert_eq!(Category::from_name("lora"), None);
    }
}
