//! How the engines size their pools, as data: the `sizing` object of the engine rule packs
//! (rules/sglang.json, rules/vllm.json, rules/trtllm.json; each cites the engine's file,
//! function and versions). A formula is a sum of terms over named inputs, some multiplied by
//! the engine's parameter (`--mem-fraction-static`, `--gpu-memory-utilization`, ...); each
//! input is read from the free-memory query whose call stack runs through one of its
//! functions (`ModelRunner.init_torch_distributed`, `profile_max_num_token`, ...), so which
//! query feeds which input is decided by its call site, not by its position.
//!
//! A run is taken to be an engine's when a frame of one of its reports' call sites lies in the
//! engine's package (`recognize`). The evaluation is in the CLI's `explain::advice`.

use culedger_format::glob::{Glob, Plain};
use culedger_format::rules;
use crate::model::PyFrameRec;
use crate::model::Report;

/// The formula's parts, typed by the format crate's reader of the rule packs.
pub use culedger_format::rules::sizing::*;

/// The engines with a sizing formula, by pack name (`sglang`, `vllm`, `trtllm`).
pub fn all() -> &'static [(String, Sizing)] {
    static ALL: std::sync::OnceLock<Vec<(String, Sizing)>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        // The shipped packs, read as the library reads them; those with a formula.
        rules::SHIPPED
            .iter()
            .filter_map(|(name, text)| {
                let p = rules::parse_pack(text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
                let sizing = p.sizing().unwrap_or_else(|e| panic!("{name}: sizing: {e}"));
                Some((p.name.into(), sizing?))
            })
            .collect()
    })
}

/// The function globs of every formula input (the queries the packs name).
pub fn query_functions() -> &'static [String] {
    static ALL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| all().iter().flat_map(|(_, s)| s.inputs.values().flat_map(|i| i.callers.clone())).collect())
}

fn glob(pattern: &str) -> Option<Glob> {
    Glob::new(pattern, Plain::Whole).ok()
}

/// Whether `frame` matches one of `patterns`: a pattern with a `/` or ending in `.py` is
/// compared with the file (a path suffix without metacharacters), the others with the
/// function.
pub fn frame_matches(patterns: &[String], frame: &PyFrameRec) -> bool {
    patterns.iter().any(|p| {
        if p.contains('/') || p.ends_with(".py") {
            Glob::new(p, Plain::PathSuffix).is_ok_and(|g| g.matches(&frame.file))
        } else {
            glob(p).is_some_and(|g| g.matches(&frame.function))
        }
    })
}

/// The Python frames of site `id` of `report`, innermost first.
pub fn frames(report: &Report, id: Option<i64>) -> &[PyFrameRec] {
    let Some(id) = id.filter(|&i| i != 0) else { return &[] };
    report.sites.iter().find(|s| s.id == id).map_or(&[], |s| &s.python[..])
}

/// The innermost frame of site `id` that matches `patterns`.
pub fn matching_frame<'a>(report: &'a Report, id: Option<i64>, patterns: &[String]) -> Option<&'a PyFrameRec> {
    frames(report, id).iter().find(|f| frame_matches(patterns, f))
}

/// The engine whose package the run's call sites run through.
pub fn recognize(reports: &[&Report]) -> Option<(String, Sizing)> {
    all()
        .iter()
        .find(|(_, s)| {
            reports
                .iter()
                .any(|r| r.sites.iter().any(|site| site.python.iter().any(|f| frame_matches(&s.recognize, f))))
        })
        .cloned()
}

/// The engine named `name` (pack name or engine name, any case).
pub fn by_name(name: &str) -> Option<(String, Sizing)> {
    all().iter().find(|(p, s)| p.eq_ignore_ascii_case(name) || s.engine.eq_ignore_ascii_case(name)).cloned()
}

/// The value of `flag` on a command line (`--flag V` or `--flag=V`).
pub fn flag_value(argv: &[String], flag: &str) -> Option<f64> {
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == flag {
            return it.next().and_then(|v| v.parse().ok());
        }
        if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            return v.parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packs_parse_and_name_their_inputs() {
        let all = all();
        assert_eq!(all.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["sglang", "vllm", "trtllm"]);
        for (p, s) in all {
            assert!(s.inputs.contains_key(&s.sizing_query), "{p}");
            for t in &s.pool {
                assert!(s.inputs.contains_key(&t.input), "{p}: {}", t.input);
            }
            assert!(s.pool.iter().any(|t| t.times_parameter), "{p}: the parameter moves the pool");
        }
        let frame = |file: &str, function: &str| PyFrameRec {
            file: file.into(),
            function: function.into(),
            line: 1,
            ..Default::default()
        };
        let sg = &all[0].1;
        assert!(frame_matches(
            &sg.inputs["available"].callers,
            &frame("/x/sglang/srt/model_executor/model_runner.py", "ModelRunner.profile_max_num_token")
        ));
        assert!(!frame_matches(
            &sg.inputs["available"].callers,
            &frame("/x/sglang/srt/utils.py", "get_available_gpu_memory")
        ));
        assert!(frame_matches(
            &sg.alternatives[0].callers,
            &frame("/x/sglang/srt/distributed/device_communicators/custom_all_reduce.py", "CustomAllreduce.__init__")
        ));
        let argv: Vec<String> = ["x", "--mem-fraction-static", "0.9", "--tp=8"].iter().map(|s| s.to_string()).collect();
        assert_eq!(flag_value(&argv, "--mem-fraction-static"), Some(0.9));
        assert_eq!(flag_value(&argv, "--tp"), Some(8.0));
        assert_eq!(flag_value(&argv, "--gpu-memory-utilization"), None);
        assert_eq!(by_name("SGLang").unwrap().0, "sglang");
    }
}
