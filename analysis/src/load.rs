//! Reading reports: single `culedger-*.json` files, run directories, and the
//! `summary.json` that `culedger run` writes.

use crate::model::{Report, SUMMARY_SCHEMA};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What is wrong with one file (the CLI words it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileProblem {
    /// The file cannot be read (the I/O error).
    CannotRead(String),
    /// The JSON ends early (the parser's message).
    Truncated(String),
    /// Not JSON (the parser's message).
    InvalidJson(String),
    /// JSON without a `"schema"` string.
    NoSchema,
    /// Another version of the culedger report (`culedger/...`).
    Unsupported(String),
    /// Another document (its schema).
    NotAReport(String),
    /// A `culedger/1` document that does not parse (serde's message).
    Malformed(String),
    /// A `culedger-summary/1` without a `"processes"` array.
    NoProcesses,
    /// Not a regular file (what it is: "a FIFO", "a device", ...): refused, never read.
    NotRegular(&'static str),
    /// Over [`MAX_FILE_BYTES`] (its size): refused, never read.
    TooLarge(u64),
}

/// One file that could not be read as reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub path: PathBuf,
    pub problem: FileProblem,
}

/// Why a run could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// A path named on the command line that does not exist.
    NoSuchPath(PathBuf),
    /// A directory that cannot be listed (the I/O error).
    CannotReadDir(PathBuf, String),
    /// A directory with neither `culedger-*.json` reports nor a `summary.json`.
    NoReports(PathBuf),
    /// A directory whose report files were all skipped.
    NoReadableReport(PathBuf),
    /// A file named on the command line that cannot be read.
    File(FileError),
}

/// The processes of one run, read from one or more paths.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// What the user named (for headings and diffs), e.g. `target/demo/nccl/`.
    pub label: String,
    pub procs: Vec<Report>,
    /// Where each report came from (same order as `procs`).
    pub sources: Vec<PathBuf>,
    /// What `culedger run` recorded about the run, when a `summary.json` was read or found
    /// next to the reports.
    pub summary: Option<SummaryMeta>,
    /// The ids of the runs these processes belong to (set by `runs::select`).
    pub run_ids: Vec<String>,
    /// Files inside a directory that could not be read (each was handed to the loader's
    /// `on_skip` and left out).
    pub skipped: Vec<FileError>,
    /// Paths named that do not exist (yet, or any more): only the live views (`load_live`)
    /// keep going without them.
    pub missing: Vec<PathBuf>,
}

/// The fields of a `culedger-summary/1` besides its processes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct SummaryMeta {
    pub run_id: Option<String>,
    /// The pid of the command `culedger run` started.
    pub pid: Option<i64>,
    pub exit_code: Option<i64>,
    /// The signal that killed the command, if one did.
    pub signal: Option<i64>,
    pub command: Vec<String>,
}

/// The summary's own fields, when `path` is a readable `culedger-summary/1`.
fn summary_meta(path: &Path) -> Option<SummaryMeta> {
    #[derive(serde::Deserialize)]
    struct Doc {
        schema: Option<String>,
        #[serde(flatten)]
        meta: SummaryMeta,
    }
    let bytes = read_bounded(path).ok()?;
    let doc: Doc = serde_json::from_slice(&bytes).ok()?;
    (doc.schema.as_deref() == Some(SUMMARY_SCHEMA)).then_some(doc.meta)
}

/// The most bytes one report or summary file may have (a report of one busy device is about
/// 0.5 MB, its writer keeps every list bounded: docs/reliability.md). A larger file is
/// refused, not read.
pub const MAX_FILE_BYTES: u64 = 256 << 20;

/// The bytes of a report file: a regular file (a FIFO, a device, a symlink to `/dev/zero`
/// is refused, never read or waited on) of at most [`MAX_FILE_BYTES`].
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, FileError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let fail = |problem| FileError { path: path.to_path_buf(), problem };
    // O_NONBLOCK: opening a FIFO does not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| fail(FileProblem::CannotRead(e.to_string())))?;
    let meta = file.metadata().map_err(|e| fail(FileProblem::CannotRead(e.to_string())))?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(fail(FileProblem::NotRegular(if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        })));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(fail(FileProblem::TooLarge(meta.len())));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| fail(FileProblem::CannotRead(e.to_string())))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(FileProblem::TooLarge(bytes.len() as u64)));
    }
    Ok(bytes)
}

fn schema_problem(schema: String) -> FileProblem {
    if schema.starts_with("culedger/") {
        FileProblem::Unsupported(schema)
    } else {
        FileProblem::NotAReport(schema)
    }
}

/// Checks a parsed document against `culedger/1` and converts it.
pub fn report_from_value(value: Value, origin: &Path) -> Result<Report, FileError> {
    let fail = |problem| FileError { path: origin.to_path_buf(), problem };
    let schema = match value.get("schema") {
        Some(Value::String(s)) => s.clone(),
        Some(_) | None => return Err(fail(FileProblem::NoSchema)),
    };
    if schema != crate::model::SCHEMA {
        return Err(fail(schema_problem(schema)));
    }
    serde_json::from_value(value).map_err(|e| fail(FileProblem::Malformed(e.to_string())))
}

/// What a document says it is, read without building it (every other field skipped).
#[derive(serde::Deserialize)]
struct Probe {
    schema: Option<Value>,
}

/// A `culedger-summary/1`'s processes.
#[derive(serde::Deserialize)]
struct SummaryDoc {
    processes: Option<Vec<Report>>,
}

/// Parses one file's bytes: a per-process report or a `culedger-summary/1`, straight into the
/// format crate's types (never a generic JSON tree first: memory stays near the size of
/// what the report holds).
pub fn parse(bytes: &[u8], path: &Path) -> Result<Vec<Report>, FileError> {
    let fail = |problem| FileError { path: path.to_path_buf(), problem };
    let report_error = match serde_json::from_slice::<Report>(bytes) {
        Ok(r) if r.schema == crate::model::SCHEMA => return Ok(vec![r]),
        Ok(_) => None,
        Err(e) => Some(e),
    };
    let probe: Probe = serde_json::from_slice(bytes).map_err(|e| {
        fail(match e.classify() {
            serde_json::error::Category::Eof => FileProblem::Truncated(e.to_string()),
            serde_json::error::Category::Data => FileProblem::NoSchema,
            _ => FileProblem::InvalidJson(e.to_string()),
        })
    })?;
    let schema = match probe.schema {
        Some(Value::String(s)) => s,
        Some(_) | None => return Err(fail(FileProblem::NoSchema)),
    };
    if schema == SUMMARY_SCHEMA {
        let doc: SummaryDoc = serde_json::from_slice(bytes).map_err(|e| fail(FileProblem::Malformed(e.to_string())))?;
        let procs = doc.processes.ok_or_else(|| fail(FileProblem::NoProcesses))?;
        if let Some(other) = procs.iter().find(|r| r.schema != crate::model::SCHEMA) {
            return Err(fail(schema_problem(other.schema.clone())));
        }
        return Ok(procs);
    }
    if schema != crate::model::SCHEMA {
        return Err(fail(schema_problem(schema)));
    }
    Err(fail(FileProblem::Malformed(report_error.map_or_else(|| "unreadable".to_string(), |e| e.to_string()))))
}

/// Reads one file: a per-process report or a `culedger-summary/1`.
fn read_file(path: &Path) -> Result<Vec<Report>, FileError> {
    parse(&read_bounded(path)?, path)
}

/// Is this file name a per-process report? Every `culedger-*.json`: the names of today's
/// writers (`culedger-<host>-<pid>-<start_ms>[-<k>].json`) and of older ones
/// (`culedger-<pid>.json`). A writer's temporaries (`.culedger-....json.tmp....`, partial
/// JSON while it writes, or left behind by a killed writer) never are.
pub fn is_report_file_name(name: &str) -> bool {
    name.starts_with("culedger-") && name.ends_with(".json")
}

/// The `culedger-*.json` files of a directory, sorted by name.
fn report_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| LoadError::CannotReadDir(dir.to_path_buf(), e.to_string()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(is_report_file_name))
        .collect();
    files.sort();
    Ok(files)
}

/// Loads every path into one run. A directory means its `culedger-*.json` files, or its
/// `summary.json` when it has none. A bad file named on the command line is an error; a
/// bad file inside a directory is handed to `on_skip` (the CLI reports it in one line on
/// stderr) and skipped.
pub fn load_run(paths: &[PathBuf], on_skip: &mut dyn FnMut(&FileError)) -> Result<Run, LoadError> {
    let label = paths
        .iter()
        .map(|p| {
            let s = p.display().to_string();
            if p.is_dir() && !s.ends_with('/') {
                s + "/"
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut run = Run { label, ..Run::default() };
    for path in paths {
        let summary = if path.is_dir() { path.join("summary.json") } else { path.clone() };
        if paths.len() == 1 {
            run.summary = summary_meta(&summary);
        }
        if path.is_dir() {
            let mut files = report_files(path)?;
            if files.is_empty() && path.join("summary.json").is_file() {
                files.push(path.join("summary.json"));
            }
            if files.is_empty() {
                return Err(LoadError::NoReports(path.clone()));
            }
            let before = run.procs.len();
            for file in files {
                match read_file(&file) {
                    Ok(reports) => push(&mut run, reports, &file),
                    Err(e) => {
                        on_skip(&e);
                        run.skipped.push(e);
                    }
                }
            }
            if run.procs.len() == before {
                return Err(LoadError::NoReadableReport(path.clone()));
            }
        } else if path.exists() {
            let reports = read_file(path).map_err(LoadError::File)?;
            push(&mut run, reports, path);
        } else {
            return Err(LoadError::NoSuchPath(path.clone()));
        }
    }
    sort(&mut run);
    Ok(run)
}

/// Loads what `paths` hold now, for the views of a run that is still going (`top`,
/// `metrics`): an empty directory gives an empty run, a missing path is listed in
/// `missing`, and a file that cannot be
/// read (half-written by a writer that does not rename, or being replaced) is counted in
/// `skipped`, never printed: a live view reads the directory every second.
pub fn load_live(paths: &[PathBuf]) -> Run {
    let mut run =
        Run { label: paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" "), ..Run::default() };
    for path in paths {
        if std::fs::symlink_metadata(path).is_err() {
            run.missing.push(path.clone());
            continue;
        }
        let summary = if path.is_dir() { path.join("summary.json") } else { path.clone() };
        if paths.len() == 1 {
            run.summary = summary_meta(&summary);
        }
        let mut files = if path.is_dir() { report_files(path).unwrap_or_default() } else { vec![path.clone()] };
        if files.is_empty() && summary.is_file() {
            files.push(summary);
        }
        for file in files {
            match read_file(&file) {
                Ok(reports) => push(&mut run, reports, &file),
                Err(e) => run.skipped.push(e),
            }
        }
    }
    sort(&mut run);
    run
}

/// A stable order: by host, then start time, then pid.
fn sort(run: &mut Run) {
    let mut order: Vec<usize> = (0..run.procs.len()).collect();
    order.sort_by_key(|&i| {
        let p = &run.procs[i].process;
        (p.host.clone(), p.start_unix_ms, p.pid)
    });
    run.procs = order.iter().map(|&i| run.procs[i].clone()).collect();
    run.sources = order.iter().map(|&i| run.sources[i].clone()).collect();
}

fn push(run: &mut Run, reports: Vec<Report>, source: &Path) {
    for r in reports {
        run.procs.push(r);
        run.sources.push(source.to_path_buf());
    }
}
