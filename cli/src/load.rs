//! Reading reports, in the CLI's words: the analysis crate loads (`culedger_analysis::load`);
//! this names what went wrong in one line, reports skipped files on stderr, and maps a
//! failure to the bad-input exit status.

use crate::error::{Fail, Result};
use crate::model::{SCHEMA, SUMMARY_SCHEMA};
pub use culedger_analysis::load::{
    is_report_file_name, read_bounded, report_from_value, FileError, FileProblem, LoadError, Run, SummaryMeta,
};
use std::path::PathBuf;

/// One line for a file that could not be read as reports: `PATH: what is wrong`.
pub fn file_error(e: &FileError) -> String {
    let shown = e.path.display();
    match &e.problem {
        FileProblem::CannotRead(err) => format!("{shown}: cannot read: {err}"),
        FileProblem::Truncated(err) => format!("{shown}: truncated JSON ({err})"),
        FileProblem::InvalidJson(err) => format!("{shown}: invalid JSON ({err})"),
        FileProblem::NoSchema => format!("{shown}: not a culedger report (no \"schema\" field)"),
        FileProblem::Unsupported(schema) => {
            format!("{shown}: unsupported report version \"{schema}\" (this culedger reads \"{SCHEMA}\")")
        }
        FileProblem::NotAReport(schema) => {
            format!("{shown}: not a culedger report (schema \"{schema}\", expected \"{SCHEMA}\")")
        }
        FileProblem::Malformed(err) => format!("{shown}: malformed {SCHEMA} report: {err}"),
        FileProblem::NoProcesses => format!("{shown}: {SUMMARY_SCHEMA} without a \"processes\" array"),
        FileProblem::NotRegular(what) => format!("{shown}: not a report file ({what}), not read"),
        FileProblem::TooLarge(n) => format!(
            "{shown}: {} MiB, over the {} MiB a report file may have; not read",
            n >> 20,
            culedger_analysis::load::MAX_FILE_BYTES >> 20
        ),
    }
}

/// One line for a run that could not be loaded.
pub fn load_error(e: &LoadError) -> String {
    match e {
        LoadError::NoSuchPath(path) => format!("{}: no such file or directory", path.display()),
        LoadError::CannotReadDir(dir, err) => format!("{}: cannot read directory: {err}", dir.display()),
        LoadError::NoReports(path) => {
            format!("{}: no culedger-*.json reports or summary.json in this directory", path.display())
        }
        LoadError::NoReadableReport(path) => {
            format!("{}: no readable culedger/1 report in this directory", path.display())
        }
        LoadError::File(f) => file_error(f),
    }
}

/// Loads every path into one run (`culedger_analysis::load::load_run`); a bad file inside
/// a directory is reported on stderr (one line) and skipped.
pub fn load_run(paths: &[PathBuf]) -> Result<Run> {
    let mut on_skip = |e: &FileError| eprintln!("culedger: skipping {}", crate::layout::printable(&file_error(e)));
    culedger_analysis::load::load_run(paths, &mut on_skip).map_err(|e| Fail::input(load_error(&e)))
}

/// Loads what `paths` hold now, for the live views (`top`, `metrics`).
pub fn load_live(paths: &[PathBuf]) -> Run {
    culedger_analysis::load::load_live(paths)
}
