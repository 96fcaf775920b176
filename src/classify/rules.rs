//! The rule language compiled: the packs read by the format crate's reader
//! (`culedger_format::rules`: parsing and validation, every error naming its line) combined
//! into a [`RuleSet`]. The format is documented in docs/categories.md.
//!
//! ```json
//! {"culedger_rules": 1, "pack": "mine", "replace": false,
//!  "rules": [{"name": "lora.buffers", "category": "lora",
//!             "match": {"python": {"function": "LoRAManager.*"}},
//!             "source": "why: what file and function this is keyed on"}]}
//! ```
//!
//! A rule file is parsed into a [`Pack`]; the shipped packs (`rules/*.json`, embedded with
//! `include_str!`) and the user's file (`CULEDGER_RULES`) are combined into one ordered
//! [`RuleSet`]: the user's rules first, then the shipped ones (or none with `"replace":
//! true`). First match wins; no match is `other` under the rule name `default`.

/// The rule files, read: the format crate's one reader of the rule packs.
pub use culedger_format::rules::{
    parse_pack, parse_size, Cond, NativeCond, Pack, ParsedRule, ProbePos, PyCond, FORMAT_VERSION, TAG_CATEGORY,
};

/// Categories a rule can name without declaring them, in report order.
pub use culedger_format::CATEGORIES as BUILTIN_CATEGORIES;
/// The name reported for allocations no rule matched (category `other`).
pub const DEFAULT_RULE: &str = "default";
/// Most categories a rule set may define (built-in ones included).
pub const MAX_CATEGORIES: usize = 64;
/// Most rules in one set.
pub const MAX_RULES: usize = 4096;

/// An index into a rule set's category list; the six built-in categories come first, in
/// report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CatId(pub u16);

impl CatId {
    pub const WEIGHTS: CatId = CatId(0);
    pub const KV_POOL: CatId = CatId(1);
    pub const IPC: CatId = CatId(2);
    pub const GRAPHS: CatId = CatId(3);
    pub const COMM: CatId = CatId(4);
    pub const OTHER: CatId = CatId(5);

    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// What a rule assigns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleCategory {
    Fixed(CatId),
    /// `"$tag"`: the allocation's tag names the category.
    FromTag,
}

/// A compiled rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub name: Box<str>,
    pub category: RuleCategory,
    /// Index into [`RuleSet::packs`].
    pub pack: usize,
    pub source: Box<str>,
    pub(crate) cond: Cond,
}

/// What a rule set was built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackInfo {
    pub name: Box<str>,
    pub source: Box<str>,
    pub rules: usize,
}

/// An ordered list of rules, ready to match.
#[derive(Clone, Debug)]
pub struct RuleSet {
    pub(crate) rules: Vec<Rule>,
    /// Indices of the rules decidable at insert time, in order.
    pub(crate) insert_time: Vec<usize>,
    categories: Vec<Box<str>>,
    pub packs: Vec<PackInfo>,
}

impl RuleSet {
    /// Combine packs in priority order (first match wins across all of them). User
    /// categories are numbered after the built-in six, in order of first appearance.
    pub fn build(packs: &[Pack]) -> Result<RuleSet, String> {
        let mut categories: Vec<Box<str>> = BUILTIN_CATEGORIES.iter().map(|&c| c.into()).collect();
        let mut rules = Vec::new();
        let mut infos = Vec::new();
        for (pi, pack) in packs.iter().enumerate() {
            infos.push(PackInfo { name: pack.name.clone(), source: pack.source.clone(), rules: pack.rules.len() });
            for r in &pack.rules {
                let category = if &*r.category == TAG_CATEGORY {
                    RuleCategory::FromTag
                } else {
                    let i = match categories.iter().position(|c| *c == r.category) {
                        Some(i) => i,
                        None if categories.len() < MAX_CATEGORIES => {
                            categories.push(r.category.clone());
                            categories.len() - 1
                        }
                        None => {
                            return Err(format!(
                                "line {}: rule \"{}\": more than {MAX_CATEGORIES} categories",
                                r.line, r.name
                            ))
                        }
                    };
                    RuleCategory::Fixed(CatId(i as u16))
                };
                if rules.len() >= MAX_RULES {
                    return Err(format!("line {}: more than {MAX_RULES} rules", r.line));
                }
                rules.push(Rule {
                    name: r.name.clone(),
                    category,
                    pack: pi,
                    source: r.source.clone(),
                    cond: r.cond.clone(),
                });
            }
        }
        let insert_time = rules.iter().enumerate().filter(|(_, r)| r.cond.insert_time()).map(|(i, _)| i).collect();
        Ok(RuleSet { rules, insert_time, categories, packs: infos })
    }

    /// Category names, built-in ones first.
    pub fn categories(&self) -> &[Box<str>] {
        &self.categories
    }

    pub fn category_name(&self, id: CatId) -> &str {
        self.categories.get(id.index()).map_or("other", |c| c)
    }

    /// The category called `name`, if the set knows it.
    pub fn category(&self, name: &str) -> Option<CatId> {
        self.categories.iter().position(|c| &**c == name).map(|i| CatId(i as u16))
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

#[cfg(test)]
mod tests;
