//! Recorded facts to categories, by rules kept as data (docs/categories.md).
//!
//! Layout: `rules` (the JSON rule language, read by the format crate's reader
//! `culedger_format::rules`, and its compilation), `glob` (patterns),
//! `matcher` (first match wins over a [`matcher::Subject`] view), `phase` (the phase
//! fallback: where allocations stand relative to free-memory queries), `tags` (interned
//! explicit tags), `replay` (per-category live and peak from a history, with final
//! categories), `report_time` (all of it for one device's history: what the report writer
//! calls, src/ledger/final_categories.rs).
//!
//! The shipped packs (`rules/*.json`) are embedded at build time (by the format crate).
//! `CULEDGER_RULES=FILE` adds the user's rules in front of them, or replaces them with
//! `"replace": true`; a bad file gives one warning naming its line, and the shipped rules are
//! used. The file is read only when it is a regular file of at most 4 MiB
//! ([`read_rules_file`]).
//!
//! The live ledger classifies with the rules decidable from what it keeps per allocation
//! (tag, capture, export; [`classify`]); frames, sizes, APIs and phases are applied when
//! the report is written, to the large allocations' history (src/ledger/history.rs).

pub use culedger_format::glob;
pub mod matcher;
pub mod phase;
pub mod replay;
pub mod report_time;
pub mod rules;
pub mod tags;

use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use once_cell::sync::OnceCell;

use matcher::Subject;
use rules::{CatId, RuleSet};

/// Memory categories, in report order: the format crate's, which the reader shares.
pub use culedger_format::{Category, ALL};

/// The shipped rule packs (`rules/*.json`, embedded by the format crate, which reads them for
/// the classifier and the command line alike), and those packs parsed.
pub use culedger_format::rules::{shipped_packs, SHIPPED};

/// Build the rule set from the shipped packs and, optionally, a user file (`label` names it
/// in messages, `text` is its content or why it could not be read). Returns the set and at
/// most one warning; with a bad user file the set is the shipped one.
pub fn load(user: Option<(&str, Result<String, String>)>) -> (RuleSet, Option<String>) {
    let fallback = || RuleSet::build(&shipped_packs()).unwrap_or_else(|_| empty_set());
    let Some((label, text)) = user else {
        return (fallback(), None);
    };
    let warn = |why: String| Some(format!("{}={label}: {why}; using the built-in rules", config_name()));
    let text = match text {
        Ok(t) => t,
        Err(e) => return (fallback(), warn(format!("cannot read it ({e})"))),
    };
    let pack = match rules::parse_pack(&text, "user") {
        Ok(p) => p,
        Err(e) => return (fallback(), warn(e)),
    };
    let mut packs = vec![pack];
    if !packs[0].replace {
        packs.extend(shipped_packs());
    }
    match RuleSet::build(&packs) {
        Ok(set) => (set, None),
        Err(e) => (fallback(), warn(e)),
    }
}

fn config_name() -> &'static str {
    crate::config::ENV_RULES
}

fn empty_set() -> RuleSet {
    RuleSet::build(&[]).expect("an empty rule set always builds")
}

static RULES: OnceCell<RuleSet> = OnceCell::new();

/// The rules in effect: the ones [`init`] loaded, else the shipped ones.
pub fn ruleset() -> &'static RuleSet {
    RULES.get_or_init(|| load(None).0)
}

/// Load the rules for this process: the shipped packs plus the file named by
/// `CULEDGER_RULES` (`path`), if any. Returns the warning to report, if any. Only the first
/// call (or [`ruleset`]) decides; later calls return None.
pub fn init(path: Option<&Path>) -> Option<String> {
    let mut warning = None;
    RULES.get_or_init(|| {
        let user = path.map(|p| (p.display().to_string(), read_rules_file(p)));
        let (set, w) = load(user.as_ref().map(|(label, text)| (label.as_str(), text.clone())));
        warning = w;
        set
    });
    warning
}

/// The largest rules file read (far above any real one: the shipped packs together are a
/// few KiB).
pub const MAX_RULES_BYTES: u64 = 4 << 20;

/// The text of the rules file at `path`, or why it is not read. It is read on the first
/// hooked thread, so only from a regular file (a FIFO would block it until a writer comes,
/// `/dev/zero` never ends), opened without blocking, and at most [`MAX_RULES_BYTES`].
pub fn read_rules_file(path: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = "not a regular file".to_string();
    // Looked at before opening: opening some devices has effects of its own.
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(not_regular);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| e.to_string())?;
    // What was opened, should the name have been swapped meanwhile.
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(not_regular);
    }
    let too_big = || format!("larger than {} MiB", MAX_RULES_BYTES >> 20);
    if meta.len() > MAX_RULES_BYTES {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    file.take(MAX_RULES_BYTES + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_RULES_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// The built-in category for a rule set's verdict (user categories and tags that name no
/// built-in category are `other` in the live ledger, which has only the six).
pub fn builtin_category(set: &RuleSet, c: matcher::Category<'_>) -> Category {
    match set.resolve(c) {
        Some(CatId(i)) => ALL.get(usize::from(i)).copied().unwrap_or(Category::Other),
        None => Category::Other,
    }
}

/// [`online`]'s answers, by (tag, captured, exported): 0 when not asked yet, else the
/// category's index plus one. The rule set never changes once chosen, so neither do they.
static ONLINE: [AtomicU8; (tags::MAX_TAGS + 1) * 4] = [const { AtomicU8::new(0) }; (tags::MAX_TAGS + 1) * 4];

/// [`classify`] for the facts the live ledger's category depends on (the insert-time rules
/// see only the tag, capture and export), answered from a table after the first time: the
/// allocation path pays a load instead of a walk over the rules.
#[inline]
pub fn online(tag: Option<tags::TagId>, captured: bool, exported: bool) -> Category {
    crate::sync::atomic(&ONLINE);
    let i = usize::from(tag.map_or(0, tags::TagId::raw)) * 4 + usize::from(captured) * 2 + usize::from(exported);
    let known = ONLINE.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
    match ALL.get(usize::from(known).wrapping_sub(1)) {
        Some(&c) => c,
        None => online_first(i, tag, captured, exported),
    }
}

#[cold]
fn online_first(i: usize, tag: Option<tags::TagId>, captured: bool, exported: bool) -> Category {
    let c = classify(tag, captured, exported);
    if let Some(cell) = ONLINE.get(i) {
        cell.store(c.index() as u8 + 1, Ordering::Relaxed);
    }
    c
}

/// Insert-time classification for the live ledger, from the facts of an allocation it
/// keeps: its explicit tag, whether it was made during a graph capture, whether it was
/// exported. Called whenever an allocation is made or those facts change, under the
/// device's lock: it only reads the rule set (no I/O, no locks).
pub fn classify(tag: Option<tags::TagId>, captured: bool, exported: bool) -> Category {
    let set = ruleset();
    let subject = Subject { tag: tag.map(tags::name), captured, exported, ..Subject::default() };
    builtin_category(set, set.classify_insert_time(&subject).category)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_rules_in_priority_order() {
        let facts = |exported, captured| classify(None, captured, exported);
        assert_eq!(facts(false, false), Category::Other);
        assert_eq!(facts(false, true), Category::Graphs);
        assert_eq!(facts(true, false), Category::Ipc);
        assert_eq!(facts(true, true), Category::Ipc, "exported wins over captured");
    }

    #[test]
    fn online_answers_as_classify_does() {
        let kv = tags::intern("kv_pool").unwrap();
        let own = tags::intern("my_own_online").unwrap();
        for tag in [None, Some(kv), Some(own)] {
            for (captured, exported) in [(false, false), (false, true), (true, false), (true, true)] {
                // Twice: the first answer fills the table, the second comes from it.
                for _ in 0..2 {
                    let want = classify(tag, captured, exported);
                    assert_eq!(online(tag, captured, exported), want, "{tag:?} {captured} {exported}");
                }
            }
        }
        assert_eq!(online(Some(kv), false, true), Category::KvPool);
        assert_eq!(online(None, true, false), Category::Graphs);
    }

    #[test]
    fn tags_come_first_and_name_their_category() {
        let tag = |name: &str, exported| classify(Some(tags::intern(name).unwrap()), false, exported);
        assert_eq!(tag("kv_pool", false), Category::KvPool);
        assert_eq!(tag("weights", true), Category::Weights, "an explicit tag beats the export rule");
        assert_eq!(tag("my_own", false), Category::Other, "a user category is other in the live ledger");
    }

    #[test]
    fn every_shipped_pack_parses_and_every_rule_cites_its_source() {
        for (file, text) in SHIPPED {
            let pack = rules::parse_pack(text, file).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(!pack.replace, "{file}");
            assert!(!pack.source.is_empty(), "{file}: the pack says what it was read from");
            for r in &pack.rules {
                assert!(r.source.len() >= 10, "{file} line {}: rule {} cites no source", r.line, r.name);
                assert!(
                    culedger_format::CATEGORIES.contains(&&*r.category) || &*r.category == rules::TAG_CATEGORY,
                    "{file}: shipped rules use built-in categories only ({})",
                    r.name
                );
            }
        }
        let set = ruleset();
        assert_eq!(set.packs.len(), SHIPPED.len());
        assert_eq!(set.categories().len(), 6);
        let mut names: Vec<&str> = set.rules().iter().map(|r| &*r.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "rule names are unique across the shipped packs");
    }

    /// SGLang 0.5.23's EagerRunner input buffers (built by ModelRunner.init_cuda_graphs with CUDA
    /// graphs off too) are other; a graph runner's buffers under the same method stay graphs.
    #[test]
    fn sglang_eager_runner_inputs_are_not_graphs() {
        use matcher::PyFrame;
        let f = |file: &'static str, function: &'static str| PyFrame { file, function };
        let eager = [
            f("/site/sglang/srt/model_executor/cuda_graph_buffer_registry.py", "CudaGraphBufferRegistry.register_slot"),
            f("/site/sglang/srt/model_executor/cuda_graph_buffer_registry.py", "build_decode_registry"),
            f("/site/sglang/srt/model_executor/cuda_graph_buffer_registry.py", "build_eager_registry"),
            f("/site/sglang/srt/model_executor/runner/eager_runner.py", "EagerRunner.__init__"),
            f("/site/sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py", "capture_cuda_graphs"),
            f("/site/sglang/srt/model_executor/model_runner.py", "ModelRunner.init_cuda_graphs"),
        ];
        let graph = [
            f("/site/sglang/srt/model_executor/cuda_graph_buffer_registry.py", "CudaGraphBufferRegistry.register_slot"),
            f("/site/sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", "DecodeCudaGraphRunner.__init__"),
            f("/site/sglang/srt/model_executor/model_runner.py", "ModelRunner.init_cuda_graphs"),
        ];
        let set = ruleset();
        let name = |frames: &[PyFrame<'_>]| {
            let s = Subject { api: "cudaMalloc", bytes: 1 << 27, python: Some(frames), ..Default::default() };
            set.rule_name(&set.classify(&s)).to_string()
        };
        assert_eq!(name(&eager), "sglang.other.eager_runner_inputs");
        assert_eq!(name(&graph), "sglang.graphs.cuda_graph_runner");
    }

    #[test]
    fn user_rules_come_first_or_replace() {
        let user = r#"{"culedger_rules": 1, "pack": "mine", "rules": [
            {"name": "mine.exported", "category": "lora", "match": {"exported": true}}]}"#;
        let (set, w) = load(Some(("u.json", Ok(user.into()))));
        assert_eq!(w, None);
        assert_eq!(&*set.packs[0].name, "mine");
        assert_eq!(set.packs.len(), 1 + SHIPPED.len());
        let s = Subject { exported: true, ..Subject::default() };
        let v = set.classify(&s);
        assert_eq!((set.rule_name(&v), set.resolve(v.category)), ("mine.exported", set.category("lora")));
        let s = Subject { captured: true, ..Subject::default() };
        assert_eq!(set.resolve(set.classify(&s).category), Some(CatId::GRAPHS), "shipped rules still apply");

        let replacing = user.replace("\"pack\": \"mine\",", "\"pack\": \"mine\", \"replace\": true,");
        let (set, w) = load(Some(("u.json", Ok(replacing))));
        assert_eq!((w, set.packs.len()), (None, 1));
        let v = set.classify(&Subject { captured: true, ..Subject::default() });
        assert_eq!((v.rule, set.rule_name(&v)), (None, "default"), "nothing else is left");
    }

    #[test]
    fn a_bad_user_file_gives_one_warning_and_the_shipped_rules() {
        let bad = "{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"ipc\", \"match\": {\"fram\": 1}}]}";
        let (set, w) = load(Some(("/etc/r.json", Ok(bad.into()))));
        let w = w.unwrap();
        assert!(w.starts_with("CULEDGER_RULES=/etc/r.json: line 2: rule 1 (\"x\"): unknown condition \"fram\""), "{w}");
        assert!(w.ends_with("; using the built-in rules"), "{w}");
        assert_eq!(set.packs.len(), SHIPPED.len());
        let (set, w) = load(Some(("/nope.json", Err("No such file or directory (os error 2)".into()))));
        assert_eq!(
            w.as_deref(),
            Some("CULEDGER_RULES=/nope.json: cannot read it (No such file or directory (os error 2)); using the built-in rules")
        );
        assert_eq!(set.packs.len(), SHIPPED.len());
    }
}
