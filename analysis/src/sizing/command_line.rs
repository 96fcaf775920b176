//! The run's command lines as the sizing reads them: a process's own, and the command
//! `culedger run` recorded (ranks started by multiprocessing carry only the launcher's
//! arguments there).

use crate::engines;
use crate::load::Run;

/// Every command line of the run: each process's, then the recorded command.
fn lines(run: &Run) -> impl Iterator<Item = &[String]> {
    run.procs.iter().map(|r| &r.process.argv[..]).chain(run.summary.as_ref().map(|m| &m.command[..]))
}

/// Whether `flag` (`--flag` or `--flag=...`) is on a command line of the run: a process's, or
/// the command `culedger run` recorded (ranks started by multiprocessing carry only theirs).
pub fn on_command_line(run: &Run, flag: &str) -> bool {
    let has = |argv: &[String]| argv.iter().any(|a| a == flag || a.strip_prefix(flag).is_some_and(|r| r.starts_with('=')));
    lines(run).any(has)
}

/// The number `flag` has on a command line of the run (a process's, or the command `culedger
/// run` recorded).
pub fn flag_number(run: &Run, flag: &str) -> Option<f64> {
    run.procs
        .iter()
        .find_map(|r| engines::flag_value(&r.process.argv, flag))
        .or_else(|| run.summary.as_ref().and_then(|m| engines::flag_value(&m.command, flag)))
}

/// The text `flag` has on a command line of the run (`--flag V` or `--flag=V`).
pub fn flag_text(run: &Run, flag: &str) -> Option<String> {
    let of = |argv: &[String]| -> Option<String> {
        let mut it = argv.iter();
        while let Some(a) = it.next() {
            if a == flag {
                return it.next().cloned();
            }
            if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return Some(v.to_string());
            }
        }
        None
    };
    run.procs.iter().find_map(|r| of(&r.process.argv)).or_else(|| run.summary.as_ref().and_then(|m| of(&m.command)))
}

/// The argument after `word` on a command line of the run (`vllm serve MODEL`), when it is
/// not a flag.
pub fn argument_after(run: &Run, word: &str) -> Option<String> {
    for argv in lines(run) {
        if let Some(k) = argv.iter().position(|a| a == word) {
            if let Some(d) = argv.get(k + 1).filter(|d| !d.starts_with('-')) {
                return Some(d.clone());
            }
        }
    }
    None
}

/// The number of items in the comma-separated list `flag` gives on a command line of the
/// run (distinct values), when one gives it.
pub fn list_len(run: &Run, flag: &str) -> Option<i64> {
    for argv in lines(run) {
        let mut it = argv.iter();
        while let Some(a) = it.next() {
            let list = if *a == flag { it.next().cloned() } else { a.strip_prefix(&format!("{flag}=")).map(String::from) };
            if let Some(list) = list {
                let mut v: Vec<i64> = list.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                v.sort_unstable();
                v.dedup();
                return Some(v.len() as i64);
            }
        }
    }
    None
}
