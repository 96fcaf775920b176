//! Reading reports: single `culedger-*.json` files, run directories, and the
//! `summary.json` that `culedger run` writes.

use crate::error::{Fail, Result};
use crate::model::{Report, SCHEMA, SUMMARY_SCHEMA};
use serde_json::Value;
use std::path::{Path, PathBuf};

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
    /// Files inside a directory that could not be read, one message each (they were
    /// reported on stderr and left out).
    pub skipped: Vec<String>,
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
/// is refused in one line, never read or waited on) of at most [`MAX_FILE_BYTES`].
pub fn read_bounded(path: &Path) -> std::result::Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let shown = path.display();
    // O_NONBLOCK: opening a FIFO does not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("{shown}: cannot read: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("{shown}: cannot read: {e}"))?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(format!("{shown}: not a report file ({what}), not read"));
    }
    let too_big = |n: u64| {
        format!("{shown}: {} MiB, over the {} MiB a report file may have; not read", n >> 20, MAX_FILE_BYTES >> 20)
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_big(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("{shown}: cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Checks a parsed document against `culedger/1` and converts it.
pub fn report_from_value(value: Value, origin: &Path) -> std::result::Result<Report, String> {
    let shown = origin.display();
    let schema = match value.get("schema") {
        Some(Value::String(s)) => s.clone(),
        Some(_) | None => return Err(format!("{shown}: not a culedger report (no \"schema\" field)")),
    };
    if schema != SCHEMA {
        return Err(schema_error(&schema, origin));
    }
    serde_json::from_value(value).map_err(|e| format!("{shown}: malformed {SCHEMA} report: {e}"))
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
pub fn parse(bytes: &[u8], path: &Path) -> std::result::Result<Vec<Report>, String> {
    let shown = path.display();
    let report_error = match serde_json::from_slice::<Report>(bytes) {
        Ok(r) if r.schema == SCHEMA => return Ok(vec![r]),
        Ok(_) => None,
        Err(e) => Some(e),
    };
    let probe: Probe = serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Eof => format!("{shown}: truncated JSON ({e})"),
        serde_json::error::Category::Data => format!("{shown}: not a culedger report (no \"schema\" field)"),
        _ => format!("{shown}: invalid JSON ({e})"),
    })?;
    let schema = match probe.schema {
        Some(Value::String(s)) => s,
        Some(_) | None => return Err(format!("{shown}: not a culedger report (no \"schema\" field)")),
    };
    if schema == SUMMARY_SCHEMA {
        let doc: SummaryDoc =
            serde_json::from_slice(bytes).map_err(|e| format!("{shown}: malformed {SUMMARY_SCHEMA}: {e}"))?;
        let procs = doc.processes.ok_or_else(|| format!("{shown}: {SUMMARY_SCHEMA} without a \"processes\" array"))?;
        if let Some(other) = procs.iter().find(|r| r.schema != SCHEMA) {
            return Err(schema_error(&other.schema, path));
        }
        return Ok(procs);
    }
    if schema != SCHEMA {
        return Err(schema_error(&schema, path));
    }
    Err(format!(
        "{shown}: malformed {SCHEMA} report: {}",
        report_error.map_or_else(|| "unreadable".to_string(), |e| e.to_string())
    ))
}

fn schema_error(schema: &str, origin: &Path) -> String {
    let shown = origin.display();
    if schema.starts_with("culedger/") {
        format!("{shown}: unsupported report version \"{schema}\" (this culedger reads \"{SCHEMA}\")")
    } else {
        format!("{shown}: not a culedger report (schema \"{schema}\", expected \"{SCHEMA}\")")
    }
}

/// Reads one file: a per-process report or a `culedger-summary/1`.
fn read_file(path: &Path) -> std::result::Result<Vec<Report>, String> {
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
fn report_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Fail::input(format!("{}: cannot read directory: {e}", dir.display())))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(is_report_file_name))
        .collect();
    files.sort();
    Ok(files)
}

/// Loads every path into one run. A directory means its `culedger-*.json` files, or its
/// `summary.json` when it has none. A bad file named on the command line is an error; a
/// bad file inside a directory is reported on stderr (one line) and skipped.
pub fn load_run(paths: &[PathBuf]) -> Result<Run> {
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
                return Err(Fail::input(format!(
                    "{}: no culedger-*.json reports or summary.json in this directory",
                    path.display()
                )));
            }
            let before = run.procs.len();
            for file in files {
                match read_file(&file) {
                    Ok(reports) => push(&mut run, reports, &file),
                    Err(message) => {
                        eprintln!("culedger: skipping {}", crate::layout::printable(&message));
                        run.skipped.push(message);
                    }
                }
            }
            if run.procs.len() == before {
                return Err(Fail::input(format!(
                    "{}: no readable culedger/1 report in this directory",
                    path.display()
                )));
            }
        } else if path.exists() {
            let reports = read_file(path).map_err(Fail::input)?;
            push(&mut run, reports, path);
        } else {
            return Err(Fail::input(format!("{}: no such file or directory", path.display())));
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
                Err(message) => run.skipped.push(message),
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
