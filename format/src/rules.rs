//! The rule language, read: JSON rule files (`rules/*.json`, a user's `CULEDGER_RULES` file)
//! parsed and validated into a [`Pack`] (every error names its line), and the engines'
//! pool-sizing formulas those files carry ([`sizing`]). The one reader of the rule packs: the
//! interposer's classifier compiles its packs into a rule set (src/classify/rules.rs) and the
//! command line's `explain` and `whatif` take the sizing formulas, both from here. The format
//! is documented in docs/categories.md.
//!
//! ```json
//! {"culedger_rules": 1, "pack": "mine", "replace": false,
//!  "rules": [{"name": "lora.buffers", "category": "lora",
//!             "match": {"python": {"function": "LoRAManager.*"}},
//!             "source": "why: what file and function this is keyed on"}]}
//! ```

pub mod sizing;

use serde_json::{Map, Value};

use crate::glob::{Glob, Plain};

/// The format version this library reads (`"culedger_rules": 1`).
pub const FORMAT_VERSION: u64 = 1;
/// The category value that means "the allocation's explicit tag".
pub const TAG_CATEGORY: &str = "$tag";

/// The shipped rule packs, in priority order (file name, text), embedded at build time.
pub const SHIPPED: [(&str, &str); 6] = [
    ("rules/builtin.json", include_str!("../../rules/builtin.json")),
    ("rules/sglang.json", include_str!("../../rules/sglang.json")),
    ("rules/vllm.json", include_str!("../../rules/vllm.json")),
    ("rules/trtllm.json", include_str!("../../rules/trtllm.json")),
    ("rules/torch.json", include_str!("../../rules/torch.json")),
    ("rules/fallback.json", include_str!("../../rules/fallback.json")),
];

/// The shipped packs, parsed (a pack that fails to parse is left out: the unit tests make
/// sure none does).
pub fn shipped_packs() -> Vec<Pack> {
    SHIPPED.iter().filter_map(|(file, text)| parse_pack(text, file).ok()).collect()
}

/// Where a free-memory query stands relative to an allocation (see `phase`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbePos {
    BeforeFirst,
    AfterFirst,
    BeforeSizing,
    AfterSizing,
    SizingBurst,
}

impl ProbePos {
    pub const NAMES: [&'static str; 5] =
        ["before_first", "after_first", "before_sizing", "after_sizing", "sizing_burst"];

    fn parse(s: &str) -> Option<ProbePos> {
        Some(match s {
            "before_first" => ProbePos::BeforeFirst,
            "after_first" => ProbePos::AfterFirst,
            "before_sizing" => ProbePos::BeforeSizing,
            "after_sizing" => ProbePos::AfterSizing,
            "sizing_burst" => ProbePos::SizingBurst,
            _ => return None,
        })
    }
}

/// A native-frame condition: some frame (or the innermost non-internal one) whose object
/// matches one of `objects` and, when given, whose symbol matches one of `symbols`.
#[derive(Clone, Debug)]
pub struct NativeCond {
    pub objects: Vec<Glob>,
    pub symbols: Vec<Glob>,
    pub innermost: bool,
}

/// A Python-frame condition: some frame (or the innermost one) whose file matches one of
/// `files` and whose qualified function name matches one of `functions` (an empty list
/// does not constrain).
#[derive(Clone, Debug)]
pub struct PyCond {
    pub files: Vec<Glob>,
    pub functions: Vec<Glob>,
    pub innermost: bool,
}

/// The conditions of one rule; all that are present must hold.
#[derive(Clone, Debug, Default)]
pub struct Cond {
    pub tag: Option<Glob>,
    pub captured: Option<bool>,
    pub exported: Option<bool>,
    pub api: Vec<Glob>,
    pub bytes: Option<(u64, u64)>,
    pub native: Option<NativeCond>,
    /// Any of these.
    pub python: Vec<PyCond>,
    pub probe: Option<ProbePos>,
    pub host_filled: Option<bool>,
    pub live: Option<bool>,
}

impl Cond {
    /// Decidable from the facts the live ledger keeps per allocation (tag, capture, export):
    /// these rules also classify it as allocations are made and their facts change.
    pub fn insert_time(&self) -> bool {
        self.api.is_empty()
            && self.bytes.is_none()
            && self.native.is_none()
            && self.python.is_empty()
            && self.probe.is_none()
            && self.host_filled.is_none()
            && self.live.is_none()
    }
}

/// One rule of a file, as parsed (its category still a name).
#[derive(Clone, Debug)]
pub struct ParsedRule {
    pub name: Box<str>,
    pub category: Box<str>,
    pub source: Box<str>,
    pub line: usize,
    pub cond: Cond,
}

/// One rule file.
#[derive(Clone, Debug)]
pub struct Pack {
    pub name: Box<str>,
    pub source: Box<str>,
    pub replace: bool,
    pub rules: Vec<ParsedRule>,
    /// The engine's pool-sizing formula (`"sizing"`), as written: read by [`Pack::sizing`]
    /// (the command line's `explain` and `whatif`), not by the classifier.
    pub sizing: Option<Value>,
}

impl Pack {
    /// The pack's sizing formula, typed; None when the pack has none.
    pub fn sizing(&self) -> Result<Option<sizing::Sizing>, String> {
        self.sizing.as_ref().map(|v| serde_json::from_value(v.clone()).map_err(|e| e.to_string())).transpose()
    }
}

// ---- parsing --------------------------------------------------------------------------

/// Parse one rule file. Errors are one line: `line N: ...` (N is 1-based; for a bad rule,
/// the line where the rule begins).
pub fn parse_pack(text: &str, default_name: &str) -> Result<Pack, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        let what = e.to_string();
        // serde_json ends its messages with " at line L column C"; say it our way.
        let what = what.split(" at line ").next().unwrap_or(&what).to_string();
        format!("line {}: not valid JSON: {what}", e.line().max(1))
    })?;
    let lines = Lines::scan(text);
    let top = doc.as_object().ok_or_else(|| "line 1: expected a JSON object at the top".to_string())?;
    let key_line = |k: &str| lines.key_line(k).unwrap_or(1);
    for k in top.keys() {
        // `sizing` (an engine's pool-sizing formula) is read by the command line's `explain` and
        // `whatif`, not by the classifier.
        if !["culedger_rules", "pack", "source", "comment", "replace", "sizing", "rules"].contains(&k.as_str()) {
            return Err(format!(
                "line {}: unknown key \"{k}\" (expected culedger_rules, pack, source, comment, replace, sizing, rules)",
                key_line(k)
            ));
        }
    }
    match top.get("culedger_rules") {
        Some(v) if v.as_u64() == Some(FORMAT_VERSION) => {}
        Some(v) => {
            return Err(format!(
                "line {}: \"culedger_rules\" is {v}; this culedger reads version {FORMAT_VERSION}",
                key_line("culedger_rules")
            ))
        }
        None => return Err("line 1: \"culedger_rules\": 1 is missing (it marks a culedger rule file)".into()),
    }
    let string_field = |k: &str| -> Result<Option<Box<str>>, String> {
        match top.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str().into())),
            Some(_) => Err(format!("line {}: \"{k}\" must be a string", key_line(k))),
        }
    };
    let name = string_field("pack")?.unwrap_or_else(|| default_name.into());
    let source = string_field("source")?.unwrap_or_default();
    string_field("comment")?;
    if top.get("sizing").is_some_and(|v| !v.is_object()) {
        return Err(format!("line {}: \"sizing\" must be an object", key_line("sizing")));
    }
    let replace = match top.get("replace") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(format!("line {}: \"replace\" must be true or false", key_line("replace"))),
    };
    let list = match top.get("rules") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err(format!("line {}: \"rules\" must be an array", key_line("rules"))),
        None => return Err("line 1: \"rules\" is missing".into()),
    };
    let mut rules: Vec<ParsedRule> = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let line = lines.rule_lines.get(i).copied().unwrap_or_else(|| key_line("rules"));
        let r = parse_rule(v, line).map_err(|e| format!("line {line}: rule {}{e}", i + 1))?;
        if let Some(prev) = rules.iter().find(|p| p.name == r.name) {
            return Err(format!(
                "line {line}: rule {}: the name \"{}\" is already used at line {}",
                i + 1,
                r.name,
                prev.line
            ));
        }
        rules.push(r);
    }
    let sizing = top.get("sizing").cloned();
    Ok(Pack { name, source, replace, rules, sizing })
}

/// Errors from here are completed by the caller into `line N: rule K<error>`.
fn parse_rule(v: &Value, line: usize) -> Result<ParsedRule, String> {
    let obj = v.as_object().ok_or_else(|| ": expected an object".to_string())?;
    let name = match obj.get("name") {
        Some(Value::String(s)) if valid_name(s) => s.as_str(),
        Some(Value::String(s)) => {
            return Err(format!(": the name {s:?} must be 1-128 characters without control characters"))
        }
        Some(_) => return Err(": \"name\" must be a string".into()),
        None => return Err(": \"name\" is missing".into()),
    };
    let ctx = |msg: String| format!(" (\"{name}\"): {msg}");
    for k in obj.keys() {
        if !["name", "category", "match", "source", "comment"].contains(&k.as_str()) {
            return Err(ctx(format!("unknown key \"{k}\" (expected name, category, match, source, comment)")));
        }
    }
    let category = match obj.get("category") {
        Some(Value::String(s)) if s == TAG_CATEGORY || valid_category(s) => s.as_str(),
        Some(Value::String(s)) => {
            return Err(ctx(format!(
                "the category {s:?} must be \"$tag\" or 1-64 characters of letters, digits and _ . : -"
            )))
        }
        Some(_) => return Err(ctx("\"category\" must be a string".into())),
        None => return Err(ctx("\"category\" is missing".into())),
    };
    let source = match obj.get("source") {
        None => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(ctx("\"source\" must be a string".into())),
    };
    if obj.get("comment").is_some_and(|c| !c.is_string()) {
        return Err(ctx("\"comment\" must be a string".into()));
    }
    let cond = match obj.get("match") {
        Some(Value::Object(m)) => parse_match(m).map_err(ctx)?,
        Some(_) => return Err(ctx("\"match\" must be an object (use {} to match everything)".into())),
        None => return Err(ctx("\"match\" is missing (use {} to match everything)".into())),
    };
    Ok(ParsedRule { name: name.into(), category: category.into(), source: source.into(), line, cond })
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.chars().count() <= 128 && !s.chars().any(char::is_control)
}

fn valid_category(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}

const MATCH_KEYS: &str = "tag, captured, exported, api, bytes, native, python, probe, host_filled, live";

fn parse_match(m: &Map<String, Value>) -> Result<Cond, String> {
    let mut c = Cond::default();
    for (k, v) in m {
        let bool_of = |v: &Value| v.as_bool().ok_or_else(|| format!("\"{k}\" must be true or false"));
        match k.as_str() {
            "tag" => c.tag = Some(glob_of(v, "tag", Plain::Whole)?),
            "captured" => c.captured = Some(bool_of(v)?),
            "exported" => c.exported = Some(bool_of(v)?),
            "host_filled" => c.host_filled = Some(bool_of(v)?),
            "live" => c.live = Some(bool_of(v)?),
            "api" => c.api = globs_of(v, "api", Plain::Whole)?,
            "bytes" => c.bytes = Some(parse_range(v)?),
            "native" => c.native = Some(parse_native(v)?),
            "python" => c.python = parse_python(v)?,
            "probe" => {
                c.probe = Some(v.as_str().and_then(ProbePos::parse).ok_or_else(|| {
                    format!("\"probe\" must be one of {}", ProbePos::NAMES.map(|n| format!("\"{n}\"")).join(", "))
                })?)
            }
            other => return Err(format!("unknown condition \"{other}\" (expected one of {MATCH_KEYS})")),
        }
    }
    Ok(c)
}

fn glob_of(v: &Value, what: &str, plain: Plain) -> Result<Glob, String> {
    let s = v.as_str().ok_or_else(|| format!("\"{what}\" must be a string"))?;
    Glob::new(s, plain).map_err(|e| format!("\"{what}\": {e}"))
}

/// A string or a non-empty array of strings.
fn globs_of(v: &Value, what: &str, plain: Plain) -> Result<Vec<Glob>, String> {
    match v {
        Value::Array(a) if !a.is_empty() => a.iter().map(|x| glob_of(x, what, plain)).collect(),
        Value::Array(_) => Err(format!("\"{what}\" must not be an empty list")),
        Value::String(_) => glob_of(v, what, plain).map(|g| vec![g]),
        _ => Err(format!("\"{what}\" must be a string or a list of strings")),
    }
}

fn parse_range(v: &Value) -> Result<(u64, u64), String> {
    let m = v.as_object().ok_or("\"bytes\" must be an object like {\"min\": \"1MiB\", \"max\": \"4GiB\"}")?;
    for k in m.keys() {
        if k != "min" && k != "max" {
            return Err(format!("unknown key \"{k}\" in \"bytes\" (expected min, max)"));
        }
    }
    let get = |k: &str| m.get(k).map(|x| parse_size(x).map_err(|e| format!("\"bytes\".{k}: {e}"))).transpose();
    let (min, max) = (get("min")?, get("max")?);
    if min.is_none() && max.is_none() {
        return Err("\"bytes\" needs \"min\", \"max\" or both".into());
    }
    let (min, max) = (min.unwrap_or(0), max.unwrap_or(u64::MAX));
    if min > max {
        return Err(format!("\"bytes\": min ({min}) is larger than max ({max})"));
    }
    Ok((min, max))
}

/// A size: a whole number of bytes, or a string like `"512"`, `"64 KiB"`, `"1MiB"`, `"2GiB"`.
pub fn parse_size(v: &Value) -> Result<u64, String> {
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    let s = v.as_str().ok_or("a size is a whole number of bytes or a string like \"64MiB\"")?.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = (&s[..split], s[split..].trim());
    let mult: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(format!("{s:?}: the unit must be B, KiB, MiB, GiB or TiB")),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a whole number of bytes with a unit"))
}

fn parse_native(v: &Value) -> Result<NativeCond, String> {
    let Value::Object(m) = v else {
        return Ok(NativeCond {
            objects: globs_of(v, "native", Plain::Substring)?,
            symbols: Vec::new(),
            innermost: false,
        });
    };
    for k in m.keys() {
        if !["object", "symbol", "innermost"].contains(&k.as_str()) {
            return Err(format!("unknown key \"{k}\" in \"native\" (expected object, symbol, innermost)"));
        }
    }
    let objects = m.get("object").map(|x| globs_of(x, "native.object", Plain::Substring)).transpose()?;
    let symbols = m.get("symbol").map(|x| globs_of(x, "native.symbol", Plain::Whole)).transpose()?;
    let innermost = match m.get("innermost") {
        None => false,
        Some(x) => x.as_bool().ok_or("\"native.innermost\" must be true or false")?,
    };
    let objects = objects.ok_or("\"native\" needs \"object\"")?;
    Ok(NativeCond { objects, symbols: symbols.unwrap_or_default(), innermost })
}

fn parse_python(v: &Value) -> Result<Vec<PyCond>, String> {
    let one = |x: &Value| -> Result<PyCond, String> {
        let m = x
            .as_object()
            .ok_or("\"python\" must be an object {\"file\", \"function\", \"innermost\"} or a list of them")?;
        for k in m.keys() {
            if !["file", "function", "innermost"].contains(&k.as_str()) {
                return Err(format!("unknown key \"{k}\" in \"python\" (expected file, function, innermost)"));
            }
        }
        let files =
            m.get("file").map(|f| globs_of(f, "python.file", Plain::PathSuffix)).transpose()?.unwrap_or_default();
        let functions =
            m.get("function").map(|f| globs_of(f, "python.function", Plain::Whole)).transpose()?.unwrap_or_default();
        if files.is_empty() && functions.is_empty() {
            return Err("\"python\" needs \"file\", \"function\" or both".into());
        }
        let innermost = match m.get("innermost") {
            None => false,
            Some(i) => i.as_bool().ok_or("\"python.innermost\" must be true or false")?,
        };
        Ok(PyCond { files, functions, innermost })
    };
    match v {
        Value::Array(a) if !a.is_empty() => a.iter().map(one).collect(),
        Value::Array(_) => Err("\"python\" must not be an empty list".into()),
        _ => Ok(vec![one(v)?]),
    }
}

/// Where things begin in the text of a rule file: the line of each top-level key and of
/// each element of the top-level `"rules"` array. A small scanner that understands JSON
/// strings and nesting; run only after the text parsed as JSON.
struct Lines {
    keys: Vec<(String, usize)>,
    rule_lines: Vec<usize>,
}

impl Lines {
    fn scan(text: &str) -> Lines {
        let b = text.as_bytes();
        let (mut keys, mut rule_lines) = (Vec::new(), Vec::new());
        let (mut depth, mut line, mut i) = (0usize, 1usize, 0usize);
        // At depth 1, the last key read; at depth 2 inside "rules", expecting an element.
        let mut last_key: Option<String> = None;
        let mut in_rules = false;
        let mut expect_elem = false;
        let mut expect_key = false;
        while i < b.len() {
            let c = b[i];
            match c {
                b'\n' => line += 1,
                b'"' => {
                    let start = i + 1;
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        if b[i] == b'\\' {
                            i += 1;
                        } else if b[i] == b'\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                    if depth == 2 && in_rules && expect_elem {
                        rule_lines.push(line);
                        expect_elem = false;
                    }
                    if depth == 1 && expect_key {
                        let k = String::from_utf8_lossy(&b[start..i.min(b.len())]).into_owned();
                        keys.push((k.clone(), line));
                        last_key = Some(k);
                        expect_key = false;
                    }
                }
                b'{' | b'[' => {
                    if depth == 2 && in_rules && expect_elem {
                        rule_lines.push(line);
                        expect_elem = false;
                    }
                    depth += 1;
                    if depth == 1 && c == b'{' {
                        expect_key = true;
                    }
                    if depth == 2 && c == b'[' && last_key.as_deref() == Some("rules") {
                        in_rules = true;
                        expect_elem = true;
                    }
                }
                b'}' | b']' => {
                    if depth == 2 && in_rules {
                        in_rules = false;
                    }
                    depth = depth.saturating_sub(1);
                }
                b',' => {
                    if depth == 1 {
                        expect_key = true;
                    }
                    if depth == 2 && in_rules {
                        expect_elem = true;
                    }
                }
                c if !c.is_ascii_whitespace() && c != b':' && depth == 2 && in_rules && expect_elem => {
                    rule_lines.push(line);
                    expect_elem = false;
                }
                _ => {}
            }
            i += 1;
        }
        Lines { keys, rule_lines }
    }

    fn key_line(&self, k: &str) -> Option<usize> {
        self.keys.iter().find(|(key, _)| key == k).map(|&(_, l)| l)
    }
}

#[cfg(test)]
mod tests;
