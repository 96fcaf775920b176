//! Matching one allocation against a [`RuleSet`]: first match wins.
//!
//! The matcher works on a view ([`Subject`]) so it depends on nothing the ledger or the
//! call-site recorder define. Facts that are not known for a subject are `None`; a
//! condition on an unknown fact does not hold (the rule is skipped), which is how the
//! live ledger classifies at insert time with the frame-free rules only.

use super::phase::Phase;
use super::rules::{CatId, NativeCond, ProbePos, PyCond, Rule, RuleCategory, RuleSet, DEFAULT_RULE};

/// A native frame, innermost first in a stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NativeFrame<'a> {
    /// Basename of the shared object or executable (`libnccl.so.2`).
    pub object: &'a str,
    pub symbol: Option<&'a str>,
    /// Inside culedger, the CUDA runtime or driver, or libc.
    pub internal: bool,
}

/// A Python frame, innermost first in a stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyFrame<'a> {
    pub file: &'a str,
    /// Qualified name (`co_qualname`): `MHATokenToKVPool._create_buffers`.
    pub function: &'a str,
}

/// What the rules look at for one allocation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Subject<'a> {
    pub tag: Option<&'a str>,
    pub captured: bool,
    pub exported: bool,
    /// The entry point that allocated (`cudaMalloc`, `cuMemCreate`, ...).
    pub api: &'a str,
    pub bytes: u64,
    /// Bytes copied into it from host memory.
    pub h2d_bytes: u64,
    /// Still allocated when the report is written; None: not known yet.
    pub live: Option<bool>,
    /// None: not known (no call site recorded).
    pub native: Option<&'a [NativeFrame<'a>]>,
    pub python: Option<&'a [PyFrame<'a>]>,
    /// None: not known (before the report-time phase analysis).
    pub phase: Option<Phase>,
}

impl Subject<'_> {
    /// At least half of it was written from host memory (and something was).
    pub fn host_filled(&self) -> bool {
        self.h2d_bytes > 0 && self.h2d_bytes.saturating_mul(2) >= self.bytes
    }
}

/// The category an allocation gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category<'a> {
    Known(CatId),
    /// A `"$tag"` rule: the tag names the category (a built-in, a rule's, or a new one).
    Tag(&'a str),
}

/// A classification and the rule that gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict<'a> {
    pub category: Category<'a>,
    /// The rule's index in the set; None for the default (`other`).
    pub rule: Option<usize>,
}

impl RuleSet {
    /// The first rule that matches `s`, over all rules.
    pub fn classify<'s>(&self, s: &Subject<'s>) -> Verdict<'s> {
        self.first_match(s, 0..self.rules.len())
    }

    /// The first matching rule among those decidable without frames, phase or liveness:
    /// what the live ledger can know when an allocation is made or its facts change.
    pub fn classify_insert_time<'s>(&self, s: &Subject<'s>) -> Verdict<'s> {
        self.first_match(s, self.insert_time.iter().copied())
    }

    fn first_match<'s>(&self, s: &Subject<'s>, order: impl Iterator<Item = usize>) -> Verdict<'s> {
        for i in order {
            let r = &self.rules[i];
            if r.matches(s) {
                let category = match r.category {
                    RuleCategory::Fixed(c) => Category::Known(c),
                    // A FromTag rule only fires with a tag condition or when a tag is set.
                    RuleCategory::FromTag => match s.tag {
                        Some(t) => Category::Tag(t),
                        None => continue,
                    },
                };
                return Verdict { category, rule: Some(i) };
            }
        }
        Verdict { category: Category::Known(CatId::OTHER), rule: None }
    }

    /// The name of the rule behind a verdict (`default` when none matched).
    pub fn rule_name(&self, v: &Verdict<'_>) -> &str {
        v.rule.and_then(|i| self.rules.get(i)).map_or(DEFAULT_RULE, |r| &r.name)
    }

    /// A verdict's category as an id of this set, when it has one: a tag naming a known
    /// category resolves to it; any other tag is a category of its own (None here).
    pub fn resolve(&self, c: Category<'_>) -> Option<CatId> {
        match c {
            Category::Known(id) => Some(id),
            Category::Tag(t) => self.category(t),
        }
    }
}

impl Rule {
    fn matches(&self, s: &Subject<'_>) -> bool {
        let c = &self.cond;
        // Cheap conditions first.
        if c.captured.is_some_and(|v| v != s.captured) || c.exported.is_some_and(|v| v != s.exported) {
            return false;
        }
        if let Some(t) = &c.tag {
            if !s.tag.is_some_and(|tag| t.matches(tag)) {
                return false;
            }
        }
        if !c.api.is_empty() && !c.api.iter().any(|g| g.matches(s.api)) {
            return false;
        }
        if c.bytes.is_some_and(|(lo, hi)| s.bytes < lo || s.bytes > hi) {
            return false;
        }
        if c.host_filled.is_some_and(|v| v != s.host_filled()) {
            return false;
        }
        if let Some(want) = c.live {
            if s.live != Some(want) {
                return false;
            }
        }
        if let Some(pos) = c.probe {
            let Some(p) = s.phase else { return false };
            let holds = match pos {
                ProbePos::BeforeFirst => !p.after_first_probe,
                ProbePos::AfterFirst => p.after_first_probe,
                ProbePos::BeforeSizing => p.before_sizing,
                ProbePos::AfterSizing => !p.before_sizing,
                ProbePos::SizingBurst => p.in_burst,
            };
            if !holds {
                return false;
            }
        }
        if let Some(n) = &c.native {
            match s.native {
                Some(frames) if native_matches(n, frames) => {}
                _ => return false,
            }
        }
        if !c.python.is_empty() {
            match s.python {
                Some(frames) if c.python.iter().any(|p| python_matches(p, frames)) => {}
                _ => return false,
            }
        }
        true
    }
}

fn native_matches(n: &NativeCond, frames: &[NativeFrame<'_>]) -> bool {
    let frame_ok = |f: &NativeFrame<'_>| {
        n.objects.iter().any(|g| g.matches(f.object))
            && (n.symbols.is_empty() || f.symbol.is_some_and(|s| n.symbols.iter().any(|g| g.matches(s))))
    };
    if n.innermost {
        frames.iter().find(|f| !f.internal).is_some_and(frame_ok)
    } else {
        frames.iter().any(frame_ok)
    }
}

fn python_matches(p: &PyCond, frames: &[PyFrame<'_>]) -> bool {
    let frame_ok = |f: &PyFrame<'_>| {
        (p.files.is_empty() || p.files.iter().any(|g| g.matches(f.file)))
            && (p.functions.is_empty() || p.functions.iter().any(|g| g.matches(f.function)))
    };
    if p.innermost {
        frames.first().is_some_and(frame_ok)
    } else {
        frames.iter().any(frame_ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::rules::parse_pack;

    fn set(rules: &str) -> RuleSet {
        let text = format!("{{\"culedger_rules\": 1, \"rules\": [{rules}]}}");
        RuleSet::build(&[parse_pack(&text, "t").unwrap()]).unwrap()
    }

    fn name<'a>(s: &'a RuleSet, subject: &Subject<'_>) -> &'a str {
        s.rule_name(&s.classify(subject))
    }

    const PY_RUNNER: [PyFrame<'static>; 3] = [
        PyFrame { file: "/x/sglang/srt/mem_cache/memory_pool.py", function: "MHATokenToKVPool._create_buffers" },
        PyFrame { file: "/x/sglang/srt/mem_cache/memory_pool.py", function: "MHATokenToKVPool.__init__" },
        PyFrame { file: "/x/sglang/srt/model_executor/model_runner.py", function: "ModelRunner.init_memory_pool" },
    ];

    static NCCL: [NativeFrame<'static>; 2] = [
        NativeFrame { object: "libculedger.so", symbol: None, internal: true },
        NativeFrame { object: "libnccl.so.2", symbol: Some("ncclCommInitRank"), internal: false },
    ];
    static CUBLAS_INNER: [NativeFrame<'static>; 2] = [
        NativeFrame { object: "libcudart.so.12", symbol: None, internal: true },
        NativeFrame { object: "libcublasLt.so.12", symbol: None, internal: false },
    ];
    static CUBLAS_OUTER: [NativeFrame<'static>; 2] = [
        NativeFrame { object: "libtorch.so", symbol: None, internal: false },
        NativeFrame { object: "libcublasLt.so.12", symbol: None, internal: false },
    ];
    static FOO: [NativeFrame<'static>; 1] =
        [NativeFrame { object: "libfoo.so", symbol: Some("foo_alloc_pool"), internal: false }];
    static FOO_NOSYM: [NativeFrame<'static>; 1] = [NativeFrame { object: "libfoo.so", symbol: None, internal: false }];
    static PY_INNER: [PyFrame<'static>; 2] =
        [PyFrame { file: "/a.py", function: "inner_fn" }, PyFrame { file: "/b.py", function: "outer" }];
    static PY_OUTER: [PyFrame<'static>; 2] =
        [PyFrame { file: "/b.py", function: "outer" }, PyFrame { file: "/a.py", function: "inner_fn" }];

    #[test]
    fn first_match_wins_and_the_default_is_other() {
        let s = set(r#"{"name": "big", "category": "kv_pool", "match": {"bytes": {"min": 100}}},
                      {"name": "any", "category": "weights", "match": {}}"#);
        let small = Subject { bytes: 10, ..Default::default() };
        let big = Subject { bytes: 100, ..Default::default() };
        assert_eq!(s.classify(&big).category, Category::Known(CatId::KV_POOL));
        assert_eq!(name(&s, &big), "big");
        assert_eq!(name(&s, &small), "any");
        let empty = set(r#"{"name": "never", "category": "ipc", "match": {"captured": true}}"#);
        let v = empty.classify(&small);
        assert_eq!((v.category, v.rule, empty.rule_name(&v)), (Category::Known(CatId::OTHER), None, "default"));
    }

    #[test]
    fn every_condition_kind() {
        let s = set(r#"
            {"name": "tag", "category": "$tag", "match": {"tag": "*"}},
            {"name": "exp", "category": "ipc", "match": {"exported": true}},
            {"name": "cap", "category": "graphs", "match": {"captured": true}},
            {"name": "nccl", "category": "comm", "match": {"native": ["libnccl*", "librccl*"]}},
            {"name": "inner", "category": "other", "match": {"native": {"object": "libcublas*", "innermost": true}}},
            {"name": "sym", "category": "comm", "match": {"native": {"object": "libfoo", "symbol": "foo_alloc*"}}},
            {"name": "pool", "category": "kv_pool", "match": {"python": {"file": "sglang/srt/mem_cache/memory_pool.py"}}},
            {"name": "innerpy", "category": "other", "match": {"python": {"function": "inner_fn", "innermost": true}}},
            {"name": "vmm", "category": "other", "match": {"api": "cuMemCreate"}},
            {"name": "w", "category": "weights", "match": {"probe": "before_sizing", "host_filled": true, "live": true}},
            {"name": "kv", "category": "kv_pool", "match": {"probe": "sizing_burst"}}"#);
        let base = Subject { api: "cudaMalloc", bytes: 1 << 20, ..Default::default() };
        let with = |f: &dyn Fn(&mut Subject<'static>)| {
            let mut x = base;
            f(&mut x);
            x
        };
        assert_eq!(s.classify(&with(&|x| x.tag = Some("lora"))).category, Category::Tag("lora"));
        assert_eq!(name(&s, &with(&|x| x.exported = true)), "exp");
        assert_eq!(name(&s, &with(&|x| x.captured = true)), "cap");
        assert_eq!(
            name(
                &s,
                &with(&|x| {
                    x.exported = true;
                    x.captured = true
                })
            ),
            "exp",
            "order decides"
        );
        assert_eq!(name(&s, &with(&|x| x.native = Some(&NCCL))), "nccl");
        assert_eq!(name(&s, &with(&|x| x.native = Some(&CUBLAS_INNER))), "inner", "first non-internal frame");
        assert_eq!(name(&s, &with(&|x| x.native = Some(&CUBLAS_OUTER))), "default", "not innermost");
        assert_eq!(name(&s, &with(&|x| x.native = Some(&FOO))), "sym");
        assert_eq!(name(&s, &with(&|x| x.native = Some(&FOO_NOSYM))), "default", "a symbol condition needs a symbol");
        assert_eq!(name(&s, &with(&|x| x.python = Some(&PY_RUNNER))), "pool");
        assert_eq!(name(&s, &with(&|x| x.python = Some(&PY_INNER))), "innerpy");
        assert_eq!(name(&s, &with(&|x| x.python = Some(&PY_OUTER))), "default");
        assert_eq!(name(&s, &with(&|x| x.api = "cuMemCreate")), "vmm");
        let before = Phase { after_first_probe: true, before_sizing: true, in_burst: false };
        let burst = Phase { after_first_probe: true, before_sizing: false, in_burst: true };
        let filled = |x: &mut Subject<'static>| {
            x.phase = Some(before);
            x.h2d_bytes = x.bytes;
            x.live = Some(true);
        };
        assert_eq!(name(&s, &with(&filled)), "w");
        assert_eq!(
            name(
                &s,
                &with(&|x| {
                    filled(x);
                    x.live = Some(false)
                })
            ),
            "default",
            "freed"
        );
        assert_eq!(
            name(
                &s,
                &with(&|x| {
                    filled(x);
                    x.live = None
                })
            ),
            "default",
            "liveness unknown"
        );
        assert_eq!(
            name(
                &s,
                &with(&|x| {
                    filled(x);
                    x.h2d_bytes = x.bytes / 2 - 1
                })
            ),
            "default",
            "under half filled"
        );
        assert_eq!(name(&s, &with(&|x| x.phase = Some(burst))), "kv");
        assert_eq!(name(&s, &base), "default");
    }

    #[test]
    fn unknown_facts_never_match() {
        let s = set(r#"{"name": "py", "category": "weights", "match": {"python": {"function": "*"}}},
                      {"name": "nat", "category": "comm", "match": {"native": "lib"}},
                      {"name": "ph", "category": "kv_pool", "match": {"probe": "after_first"}}"#);
        let unknown = Subject::default();
        assert_eq!(s.classify(&unknown).rule, None);
        let known_empty = Subject { python: Some(&[]), native: Some(&[]), ..Default::default() };
        assert_eq!(s.classify(&known_empty).rule, None);
    }

    #[test]
    fn insert_time_classification_skips_rules_that_need_more() {
        let s = set(r#"{"name": "py", "category": "weights", "match": {"python": {"function": "*"}}},
                      {"name": "cap", "category": "graphs", "match": {"captured": true}}"#);
        let frames = [PyFrame { file: "f.py", function: "g" }];
        let x = Subject { captured: true, python: Some(&frames), ..Default::default() };
        assert_eq!(s.rule_name(&s.classify(&x)), "py");
        assert_eq!(s.rule_name(&s.classify_insert_time(&x)), "cap");
    }

    #[test]
    fn tag_rules_need_a_tag_and_resolve_known_names() {
        let s = set(r#"{"name": "t", "category": "$tag", "match": {}},
                      {"name": "mine", "category": "lora", "match": {"bytes": {"min": 1}}}"#);
        assert_eq!(s.classify(&Subject::default()).rule, None, "no tag: the $tag rule is skipped");
        let v = s.classify(&Subject { tag: Some("kv_pool"), ..Default::default() });
        assert_eq!(s.resolve(v.category), Some(CatId::KV_POOL));
        let v = s.classify(&Subject { tag: Some("lora"), ..Default::default() });
        assert_eq!(s.resolve(v.category), s.category("lora"));
        let v = s.classify(&Subject { tag: Some("brand_new"), ..Default::default() });
        assert_eq!((v.category, s.resolve(v.category)), (Category::Tag("brand_new"), None));
    }
}
