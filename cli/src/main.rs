//! `culedger`: run a program under the culedger interposer and read its reports.
//!
//! Subcommands: `run`, `report`, `diff`, `check`, `export`, `plot`. See README.md.

mod analysis;
mod check;
mod diff;
mod doc;
mod error;
mod export;
mod load;
mod model;
mod plot;
mod report;
mod run;
mod sites;
mod units;

use clap::{Parser, Subcommand, ValueEnum};
use doc::Format;
use error::{Fail, Result};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "culedger", version, about = "Where did every byte of GPU memory go?")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Text,
    Markdown,
    Json,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Text => Format::Text,
            FormatArg::Markdown => Format::Markdown,
            FormatArg::Json => Format::Json,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a program with libculedger.so preloaded, then merge and print its reports.
    Run {
        /// Output directory for the reports [default: ./culedger-<YYYYmmdd-HHMMSS>]
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// The interposer [default: $CULEDGER_LIB, else libculedger.so next to this binary]
        #[arg(long)]
        lib: Option<PathBuf>,
        /// The command and its arguments (after `--`)
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Per host and device: categories, usage, the free-memory queries that matter, failures.
    Report {
        /// Report files or run directories
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        format: FormatArg,
    },
    /// Compare two runs device by device.
    Diff {
        a: PathBuf,
        b: PathBuf,
        #[arg(long, value_enum, default_value = "text")]
        format: FormatArg,
    },
    /// Check memory budgets; exit 1 when one is exceeded, 2 on bad input.
    Check {
        path: PathBuf,
        /// A budget such as 'ipc<=64MiB', 'peak:other<=1GiB', 'kv_pool>=40GiB' (repeatable)
        #[arg(long = "budget")]
        budgets: Vec<String>,
        /// A file with one budget per line (`#` starts a comment)
        #[arg(long = "budgets")]
        budgets_file: Option<PathBuf>,
        /// Fail when any allocation failed
        #[arg(long)]
        no_failures: bool,
    },
    /// Convert reports for other viewers.
    Export {
        path: PathBuf,
        /// Chrome trace JSON for ui.perfetto.dev / chrome://tracing
        #[arg(long)]
        perfetto: Option<PathBuf>,
        /// PyTorch memory snapshot pickle for pytorch.org/memory_viz
        #[arg(long = "memory-viz")]
        memory_viz: Option<PathBuf>,
    },
    /// Stacked area chart of live bytes per category over time, one panel per device (SVG).
    Plot {
        path: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(fail) => {
            eprintln!("culedger: {}", fail.message);
            fail.code
        }
    };
    std::process::exit(code);
}

/// Prints a document or JSON value to stdout.
fn emit<T: serde::Serialize>(format: Format, doc: impl FnOnce() -> doc::Doc, data: &T) -> Result<()> {
    let text = match format {
        // Serialised from the struct itself so fields keep their documented order.
        Format::Json => serde_json::to_string_pretty(data).map_err(|e| Fail::input(e.to_string()))? + "\n",
        _ => doc().render(format, doc::use_color(std::io::stdout().is_terminal())),
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (`culedger report x | head`) is not an error worth a message.
    let _ = out.write_all(text.as_bytes());
    Ok(())
}

fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Run { output, lib, command } => run::run(output, lib, command),
        Command::Report { paths, format } => {
            let run = load::load_run(&paths)?;
            let s = analysis::summarize(&run);
            emit(format.into(), || report::document(&s), &s)?;
            Ok(0)
        }
        Command::Diff { a, b, format } => {
            let (ra, rb) = (load::load_run(&[a])?, load::load_run(&[b])?);
            let d = diff::diff(&ra, &rb);
            emit(format.into(), || diff::document(&d), &d)?;
            Ok(0)
        }
        Command::Check { path, budgets, budgets_file, no_failures } => {
            check::command(&path, &budgets, budgets_file.as_deref(), no_failures)
        }
        Command::Export { path, perfetto, memory_viz } => {
            if perfetto.is_none() && memory_viz.is_none() {
                return Err(Fail::input(
                    "export: name an output with --perfetto OUT.json and/or --memory-viz OUT.pickle",
                ));
            }
            let run = load::load_run(&[path])?;
            if let Some(out) = perfetto {
                export::write_perfetto(&run, &out)?;
            }
            if let Some(out) = memory_viz {
                export::write_memory_viz(&run, &out)?;
            }
            Ok(0)
        }
        Command::Plot { path, output } => {
            let run = load::load_run(&[path])?;
            plot::write_svg(&run, &output)?;
            Ok(0)
        }
    }
}
