//! `culedger`: run a program under the culedger interposer and read its reports.
//!
//! Subcommands: `run`, `report`, `explain`, `diff`, `check`, `export`, `plot`, `top`, `metrics`,
//! `html`, `completions`. See README.md. `flags` holds the command line (clap); `main`
//! dispatches it. Shared by the commands: `analysis` (device groups), `summary` (the run
//! summary), `figures` (the device figures' names), and the output layer: `doc`
//! (documents), `layout` (width, colour, wrapping, tables), `clock` (one time base per run),
//! `runs` (run grouping, selections, how processes ended), `costs` (de-noised driver costs).

mod analysis;
mod check;
mod clock;
mod costs;
mod diff;
mod doc;
mod error;
mod explain;
mod export;
mod figures;
mod flags;
mod html;
mod layout;
mod load;
#[cfg(test)]
mod linear_cost;
mod metrics;
#[cfg(test)]
mod once_per_run;
mod output;
mod plot;
mod report;
mod run;
mod run_analysis;
mod runs;
mod screen;
mod serve;
mod summary;
mod top;
mod units;
mod whatif;
mod words;
mod wrap;

/// The report as the CLI reads it: the format crate the interposer writes it with.
use culedger_format::report as model;

use clap::{CommandFactory, Parser};
use doc::Format;
use error::{Fail, Result};
use flags::{CheckFormat, Cli, Command, ShellArg};
use layout::{ColorChoice, Stream, Style};
use output::print_stdout;
use std::path::PathBuf;

fn main() {
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(fail) => {
            eprintln!("culedger: {}", layout::printable(&fail.message));
            fail.code
        }
    };
    // `culedger run` whose command died of a signal ends by that signal.
    wrap::end_like_cmd();
    std::process::exit(code);
}

/// Prints a document or JSON value to stdout.
fn emit<T: serde::Serialize>(
    format: Format,
    color: ColorChoice,
    doc: impl FnOnce() -> doc::Doc,
    data: &T,
) -> Result<()> {
    let text = match format {
        // Serialised from the struct itself so fields keep their documented order.
        Format::Json => serde_json::to_string_pretty(data).map_err(|e| Fail::input(e.to_string()))? + "\n",
        _ => doc().render(format, Style::for_stream(color, Stream::Stdout)),
    };
    print_stdout(&text)
}

/// Loads one run from `paths` as `sel` asks.
fn load(paths: &[PathBuf], sel: &runs::Selection) -> Result<load::Run> {
    runs::select(load::load_run(paths)?, sel)
}

fn merge_only(merge_runs: bool) -> runs::Selection {
    runs::Selection { merge_runs, ..runs::Selection::default() }
}

fn dispatch(cli: Cli) -> Result<i32> {
    let color = cli.color;
    match cli.command {
        Command::Run { output, append, lib, report, command } => {
            run::run(run::Request { output, append, lib, command, color, report })
        }
        Command::Report { paths, format, all_categories, fold, no_fold, brief, select } => {
            let run = load(&paths, &select.selection())?;
            let analysis = crate::run_analysis::of(&run);
            if brief {
                let dir =
                    paths.iter().map(|p| screen::shell_word(&p.display().to_string())).collect::<Vec<_>>().join(" ");
                print_stdout(
                    &screen::document(&analysis, &dir).render(Format::Text, Style::for_stream(color, Stream::Stdout)),
                )?;
                return Ok(0);
            }
            let s = analysis.summary(all_categories);
            let fold = if no_fold { Some(false) } else { fold.then_some(true) };
            emit(format.into(), color, || report::document(s, report::Options { fold }), s)?;
            Ok(0)
        }
        Command::Explain { paths, format, select } => {
            let run = load(&paths, &select.selection())?;
            let analysis = crate::run_analysis::of(&run);
            let e = analysis.explanation();
            emit(format.into(), color, || explain::render::document(e), e)?;
            Ok(e.exit_code)
        }
        Command::Diff { a, b, format, all_categories, fold, no_fold, select } => {
            let sel = select.selection();
            let (ra, rb) = (load(&[a], &sel)?, load(&[b], &sel)?);
            let d = diff::diff(&crate::run_analysis::of(&ra), &crate::run_analysis::of(&rb), all_categories);
            let fold = if no_fold { Some(false) } else { fold.then_some(true) };
            emit(format.into(), color, || diff::render::document(&d, fold), &d)?;
            Ok(0)
        }
        Command::Check { path, budgets, budgets_file, no_failures, allow_unmeasured, format, select } => {
            check::command(&check::Request {
                path: &path,
                budgets: &budgets,
                file: budgets_file.as_deref(),
                no_failures,
                allow_unmeasured,
                format: match format {
                    CheckFormat::Text => Format::Text,
                    CheckFormat::Markdown => Format::Markdown,
                    CheckFormat::Json => Format::Json,
                },
                color,
                selection: &select.selection(),
            })
        }
        Command::Export { path, perfetto, memory_viz, merge_runs } => {
            if perfetto.is_none() && memory_viz.is_none() {
                return Err(Fail::input(
                    "export: name an output with --perfetto OUT.json and/or --memory-viz OUT.pickle",
                ));
            }
            if perfetto.as_deref().is_some_and(|p| p.as_os_str() == "-")
                && memory_viz.as_deref().is_some_and(|p| p.as_os_str() == "-")
            {
                return Err(Fail::input("export: only one of --perfetto and --memory-viz can write to stdout (-)"));
            }
            let run = load(&[path], &merge_only(merge_runs))?;
            let analysis = crate::run_analysis::of(&run);
            if let Some(out) = perfetto {
                eprintln!("culedger: wrote {}", export::write_perfetto(&analysis, &out)?);
            }
            if let Some(out) = memory_viz {
                eprintln!("culedger: wrote {}", export::write_memory_viz(&analysis, &out)?);
            }
            Ok(0)
        }
        Command::Plot { path, output, all_categories, from, to, select } => {
            let run = load(&[path], &select.selection())?;
            let window = plot::Window { from_s: from, to_s: to };
            eprintln!("culedger: wrote {}", plot::write_svg(&crate::run_analysis::of(&run), &output, all_categories, window)?);
            Ok(0)
        }
        Command::Top { paths, once, fold, wait } => top::command(&paths, top::Options { once, fold, wait }),
        Command::Metrics { paths, listen, sites } => {
            metrics::command(&paths, listen.as_deref(), &metrics::Options { sites })
        }
        Command::Html { paths, output, merge_runs } => {
            let sel = merge_only(merge_runs);
            let runs = paths.iter().map(|p| load(std::slice::from_ref(p), &sel)).collect::<Result<Vec<_>>>()?;
            eprintln!("culedger: wrote {}", html::write(&runs, &output)?);
            Ok(0)
        }
        Command::Whatif { path, sets, engine, format, select } => {
            let run = load(&[path], &select.selection())?;
            let w = whatif::whatif(&crate::run_analysis::of(&run), &sets, engine.as_deref())?;
            emit(format.into(), color, || whatif::document(&w), &w)?;
            Ok(w.exit_code)
        }
        Command::Completions { shell } => {
            let shell = match shell {
                ShellArg::Bash => clap_complete::Shell::Bash,
                ShellArg::Zsh => clap_complete::Shell::Zsh,
                ShellArg::Fish => clap_complete::Shell::Fish,
            };
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "culedger", &mut buf);
            print_stdout(&String::from_utf8_lossy(&buf))?;
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_argument_is_described() {
        fn walk(cmd: &clap::Command, path: &str) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                assert!(arg.get_help().is_some() || arg.get_long_help().is_some(), "{path} {id}: no help text");
            }
            for sub in cmd.get_subcommands() {
                assert!(sub.get_about().is_some(), "{path} {}: no about", sub.get_name());
                walk(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        walk(&cmd, "culedger");
    }
}
