//! The one screen `culedger run` ends with (and `culedger report --brief` prints): the
//! verdict, one line per GPU with alike GPUs folded into one line, explain's headline and
//! the first thing to change when something failed, and the commands that go further. It is
//! meant to fit a terminal: about 25 lines for the demo's 8 ranks, whatever their number.

use crate::clock::{Clock, ClockWords};
use crate::doc::{Block, Doc, Table};
use crate::explain::{Explanation, Severity};
use crate::run_analysis::Analysis;
use crate::summary::{OverviewRow, RunSummary};
use crate::units::count;
use crate::units::fmt_range;

/// The screen of a run whose reports are in `dir` (the shell words that name it, see
/// [`shell_word`]).
pub fn document(a: &Analysis, dir: &str) -> Doc {
    let run = a.run;
    let (s, e) = (a.summary(false), a.explanation());
    let mut d = Doc::default();
    let hosts: std::collections::BTreeSet<&str> = s.processes.iter().map(|p| p.host.as_str()).collect();
    // Short enough for line 1 at 80 columns: the directory as typed, the counts, how the
    // command ended (the run id is in summary.json and in the report's title).
    let mut head =
        format!("{}, {}", count(s.processes.len(), "process", "processes"), count(s.devices.len(), "GPU", "GPUs"));
    if s.run_ids.len() > 1 {
        head.push_str(&format!("; {} runs merged", s.run_ids.len()));
    }
    if let Some(ended) = run.summary.as_ref().and_then(ended) {
        head.push_str(&format!("; {ended}"));
    }
    d.push(Block::Title(format!("culedger: {} ({head})", dir.trim_end_matches('/'))));
    d.push(Block::Verdict { text: s.verdict.text.clone(), bad: s.verdict.failed });
    d.para(Clock { t0_us: s.t0_unix_us }.header());
    for n in &s.notes {
        d.push(Block::Alert(n.clone()));
    }
    d.table(overview(&s, hosts.len()));
    if let Some(f) = e.findings.iter().find(|f| f.severity != Severity::Info) {
        d.para("");
        d.para(format!("culedger explain: {}; the first:", e.verdict.trim_end_matches(", most important first")));
        if f.severity == Severity::Failure {
            d.push(Block::Alert(f.title.clone()));
        } else {
            d.para(f.title.clone());
        }
        d.para(f.text.clone());
        if let Some(change) = first_recommendation(&e) {
            d.para(format!("What to change: {change}"));
        }
    }
    d.para("");
    d.para("Go further:");
    let mut cmds = vec![
        (format!("culedger report {dir}"), "every GPU in full".into()),
        (format!("culedger explain {dir}"), "why, what to change".into()),
    ];
    cmds.push((format!("culedger html {dir} -o run.html"), "all of it on one page".into()));
    d.push(Block::Commands(cmds));
    d
}

/// The first line of explain's "What to change" (the knob, its direction and value), shown
/// under explain's headline.
fn first_recommendation(e: &Explanation) -> Option<String> {
    crate::explain::gist(e).1
}

/// How the command `culedger run` started ended, from its summary.
fn ended(m: &crate::load::SummaryMeta) -> Option<String> {
    match (m.signal, m.exit_code) {
        (Some(sig), _) => Some(format!("killed by {}", crate::runs::signal_name(sig))),
        (None, Some(code)) => Some(format!("exit status {code}")),
        _ => None,
    }
}

/// `path` as one shell word (quoted when it holds anything but the usual path characters),
/// without a trailing `/`.
pub fn shell_word(path: &str) -> String {
    let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
    if !path.is_empty() && path.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c)) {
        path.to_string()
    } else {
        format!("'{}'", path.replace('\'', "'\\''"))
    }
}

/// `GPU 1-7`, `GPU 1, 3, 5`, `host GPU 0` with several hosts; MIG devices and GPUs named by
/// UUID (`GPU 0 MIG 1, GPU-8f2e1a0b`) one by one.
fn gpus_name(rows: &[&OverviewRow], hosts: usize) -> String {
    let host = if hosts > 1 { format!("{} ", rows[0].host) } else { String::new() };
    if rows.iter().any(|r| r.mig_index.is_some() || r.uuid_name.is_some()) {
        let each: Vec<String> = rows
            .iter()
            .map(|r| crate::analysis::gpu_words(&crate::analysis::gpu_token(r.index, r.mig_index, r.uuid_name.as_deref())))
            .collect();
        return format!("{host}{}", each.join(", "));
    }
    let idx: Vec<i64> = rows.iter().map(|r| r.index).collect();
    let contiguous = idx.windows(2).all(|w| w[1] == w[0] + 1);
    let list = match idx.as_slice() {
        [one] => one.to_string(),
        [first, .., last] if contiguous => format!("{first}-{last}"),
        _ => idx.iter().map(i64::to_string).collect::<Vec<_>>().join(", "),
    };
    format!("{host}GPU {list}")
}

/// The overview of the report with each class of alike GPUs (`report --fold`'s classes) on
/// one line, their figures as ranges.
fn overview(s: &RunSummary, hosts: usize) -> Table {
    let mut t = Table::new(
        &["GPU", "tracked", "untracked", "device used", "of total", "failed", "biggest category"],
        &[1, 2, 3, 4, 5],
    );
    // Folded as the report folds by default.
    let classes = if s.devices.len() > crate::report::FOLD_ABOVE {
        crate::report::fold_classes(&s.devices)
    } else {
        (0..s.devices.len()).map(|i| vec![i]).collect()
    };
    for class in classes {
        let rows: Vec<&OverviewRow> = class
            .iter()
            .filter_map(|&i| {
                let dev = &s.devices[i];
                s.overview.iter().find(|r| r.host == dev.host && r.index == dev.index && r.mig_index == dev.mig_index)
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let range = |f: &dyn Fn(&OverviewRow) -> Option<i64>| {
            let v: Vec<i64> = rows.iter().filter_map(|r| f(r)).collect();
            match (v.iter().min(), v.iter().max()) {
                (Some(&lo), Some(&hi)) if v.len() == rows.len() => fmt_range(lo, hi),
                (Some(&lo), Some(&hi)) => format!("{} (some -)", fmt_range(lo, hi)),
                _ => "-".into(),
            }
        };
        let failed: Vec<i64> = rows.iter().map(|r| r.failures).collect();
        let (lo, hi) = (failed.iter().min().copied().unwrap_or(0), failed.iter().max().copied().unwrap_or(0));
        let cats: std::collections::BTreeSet<&str> =
            rows.iter().filter_map(|r| r.biggest_category.as_deref()).collect();
        let biggest = match cats.iter().next() {
            Some(c) if cats.len() == 1 && rows.iter().all(|r| r.biggest_category.is_some()) => {
                format!("{c} {}", range(&|r| r.biggest_category_bytes))
            }
            Some(_) => cats.iter().copied().collect::<Vec<_>>().join(", "),
            None => "-".into(),
        };
        t.row(vec![
            gpus_name(&rows, hosts),
            range(&|r| Some(r.tracked_bytes)),
            range(&|r| r.untracked_bytes),
            range(&|r| r.used_bytes),
            range(&|r| r.total_bytes),
            if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") },
            biggest,
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::Format;
    use crate::layout::Style;

    fn fixture(name: &str) -> crate::load::Run {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
        let run = crate::load::load_run(&[dir]).unwrap();
        crate::runs::select(run, &Default::default()).unwrap()
    }

    #[test]
    fn gpus_are_named_as_ranges_or_lists() {
        let row = |i| OverviewRow {
            host: "h".into(),
            index: i,
            mig_index: None,
            uuid_name: None,
            processes: 1,
            tracked_bytes: 0,
            peak_bytes: 0,
            untracked_bytes: None,
            used_bytes: None,
            total_bytes: None,
            failures: 0,
            biggest_category: None,
            biggest_category_bytes: None,
        };
        let (a, b, c) = (row(1), row(2), row(3));
        assert_eq!(gpus_name(&[&a, &b, &c], 1), "GPU 1-3");
        assert_eq!(gpus_name(&[&a, &c], 1), "GPU 1, 3");
        assert_eq!(gpus_name(&[&b], 2), "h GPU 2");
        // MIG devices and GPUs named by UUID one by one.
        let mig = OverviewRow { index: 0, mig_index: Some(1), ..row(0) };
        let named = OverviewRow { uuid_name: Some("GPU-8f2e1a0b".into()), ..row(1) };
        assert_eq!(gpus_name(&[&mig, &named], 1), "GPU 0 MIG 1, GPU-8f2e1a0b");
        assert_eq!(shell_word("a b/c"), "'a b/c'");
        assert_eq!(shell_word("target/demo/custom"), "target/demo/custom");
    }

    /// The 8 ranks on one screen at 80 and 100 columns: the verdict second, GPU 0 and the
    /// seven alike GPUs on two lines, explain's headline, the commands.
    #[test]
    fn eight_ranks_fit_one_screen() {
        let run = fixture("custom-ar-tp8");
        for width in [80, 100] {
            let text = document(&crate::run_analysis::of(&run), "tests/fixtures/custom-ar-tp8")
                .render(Format::Text, Style { color: false, width });
            let lines: Vec<&str> = text.lines().collect();
            assert!(lines.len() <= 30, "{width}: {} lines\n{text}", lines.len());
            assert!(lines.iter().all(|l| l.chars().count() <= width), "{width}:\n{text}");
            assert_eq!(lines[1], "8 of 8 ranks failed to allocate 918.00 MiB; see `culedger explain` for why");
            let gpu_rows = lines.iter().filter(|l| l.starts_with("| GPU ") && !l.starts_with("| GPU  ")).count();
            assert_eq!(gpu_rows, 2, "{text}");
            assert!(text.contains("| GPU 1-7 "), "{text}");
            assert!(text.contains("could not allocate part 12 of its KV pool on GPU 0"), "{text}");
            assert!(text.contains("culedger report tests/fixtures/custom-ar-tp8 "), "{text}");
        }
    }

    #[test]
    fn nothing_failed_no_headline() {
        let text =
            document(&crate::run_analysis::of(&fixture("nccl")), "d").render(Format::Text, Style { color: false, width: 200 });
        assert!(text.starts_with("culedger: d (3 processes, 2 GPUs)\nno allocation failed"), "{text}");
        assert!(!text.contains("culedger explain:"), "{text}");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("| GPU 0 ") || l.starts_with("| GPU 1 ")).count(),
            2,
            "{text}"
        );
    }
}
