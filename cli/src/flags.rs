//! The command line of `culedger`: every subcommand, its arguments and their help, as clap
//! parses them. `main` dispatches the parsed [`Cli`] to the commands.

use crate::doc::Format;
use crate::layout::ColorChoice;
use crate::runs;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "culedger",
    version,
    about = "Where did every byte of GPU memory go?",
    long_about = "Where did every byte of GPU memory go?\n\n\
        `culedger run -- CMD` runs a program with libculedger.so preloaded; every process that touches \
        CUDA writes a culedger/1 report (docs/schema.md). The other commands read those reports: a run \
        directory, report files, or the run's summary.json.\n\n\
        Text output fits the terminal width (COLUMNS, else the terminal's, else 100 columns). Times are \
        seconds since the run's first process started."
)]
pub(crate) struct Cli {
    /// When to colour text output: auto (a terminal, unless NO_COLOR is set; FORCE_COLOR forces it), always, never
    #[arg(long, value_enum, default_value = "auto", global = true)]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum FormatArg {
    /// Tables for a terminal or a log
    Text,
    /// GitHub-flavoured markdown (e.g. for $GITHUB_STEP_SUMMARY)
    Markdown,
    /// JSON with a schema id (docs/cli-json.md)
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

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum CheckFormat {
    /// One line per breach, then a summary line
    Text,
    /// The summary line and a table of every check (e.g. for $GITHUB_STEP_SUMMARY)
    Markdown,
    /// JSON with a schema id (docs/cli-json.md)
    Json,
}

/// Which run, and which part of it, to read.
#[derive(Args, Clone, Default)]
pub(crate) struct SelectArgs {
    /// Add up the processes of several runs found in the paths (refused otherwise)
    #[arg(long)]
    pub merge_runs: bool,
    /// Read only the run with this id (or id prefix), when the paths hold several
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Only these GPUs (device index; repeatable, or comma-separated)
    #[arg(long = "device", value_name = "N", value_delimiter = ',')]
    pub devices: Vec<i64>,
    /// Only these processes (repeatable, or comma-separated)
    #[arg(long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pids: Vec<i64>,
    /// Only processes of these hosts (repeatable, or comma-separated)
    #[arg(long = "host", value_name = "HOST", value_delimiter = ',')]
    pub hosts: Vec<String>,
}

impl SelectArgs {
    pub(crate) fn selection(&self) -> runs::Selection {
        runs::Selection {
            merge_runs: self.merge_runs,
            run: self.run.clone(),
            devices: self.devices.clone(),
            pids: self.pids.clone(),
            hosts: self.hosts.clone(),
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run a program with libculedger.so preloaded, then merge and print its reports.
    #[command(long_about = "Run a program with libculedger.so preloaded, then merge and print its reports.\n\n\
        The whole process tree gets one run id (CULEDGER_RUN_ID). The reports go to DIR, which must not \
        hold another run's reports (unless --append); without -o, a new directory \
        ./culedger-<YYYYmmdd-HHMMSS>[-N] is made. When CMD exits, DIR/summary.json merges the reports of \
        this run and records how CMD ended, and the report is printed to stderr. SIGINT, SIGTERM and \
        SIGHUP are forwarded to CMD. Exit status: CMD's, 128+N when signal N killed it, 127 when it \
        cannot be started, 2 when the interposer is missing or DIR holds another run.")]
    Run {
        /// Directory for the reports [default: ./culedger-<YYYYmmdd-HHMMSS>, made anew]
        #[arg(short, long, value_name = "DIR")]
        output: Option<PathBuf>,
        /// Write into DIR even when it holds reports of other runs (each run keeps its own id)
        #[arg(long)]
        append: bool,
        /// The interposer [default: $CULEDGER_LIB, else libculedger.so next to this binary]
        #[arg(long, value_name = "PATH")]
        lib: Option<PathBuf>,
        /// End with the full `culedger report` rather than the one-screen summary
        #[arg(long)]
        report: bool,
        /// The command and its arguments (after `--`)
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// The verdict and one line per GPU, then per host and device: categories, usage, the
    /// free-memory queries that matter, failures, hidden driver costs.
    Report {
        /// Report files (culedger-*.json), run directories, or a run's summary.json
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Output format
        #[arg(long, value_enum, default_value = "text")]
        format: FormatArg,
        /// List every category, also those that held nothing in any process
        #[arg(long)]
        all_categories: bool,
        /// Show the first of each set of alike GPUs (same processes, categories and failure
        /// state) in full, the others as one delta table [default with more than 2 GPUs]
        #[arg(long, overrides_with = "no_fold")]
        fold: bool,
        /// Show every GPU in full, also when alike GPUs would be folded
        #[arg(long)]
        no_fold: bool,
        /// Only the one screen `culedger run` ends with: the verdict, one line per set of alike
        /// GPUs, explain's headline, the commands that go further
        #[arg(long, conflicts_with = "format")]
        brief: bool,
        #[command(flatten)]
        select: SelectArgs,
    },
    /// Why the run ran out of memory (or what puts it at risk): findings, most important
    /// first, each with the numbers that prove it and the call sites involved.
    #[command(long_about = "Why the run ran out of memory (or what puts it at risk): findings, most important \
        first, each with the numbers that prove it and the call sites involved.\n\n\
        1. failed allocations, reconciled from the free-memory query the process sized from (what it was told, \
        what its own allocations, hidden driver costs and other processes took since) to the shortfall; \
        2. the sizing formula: what each rank was told and what share it asked for, ranks whose pool differs by \
        more than 1%; 3. untracked memory rising by more than 256 MiB between two queries, with the hidden \
        costs in between; 4. categories that kept growing during the last third of the run, with their peaks; \
        5. categories that differ by more than 5% between the ranks of the launch. Definitions: docs/explain.md.\n\n\
        Exit status: 0 nothing alarming (\"no findings\"), 1 a failed allocation or a warning, 2 bad input.")]
    Explain {
        /// Report files (culedger-*.json), run directories, or a run's summary.json
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Output format
        #[arg(long, value_enum, default_value = "text")]
        format: FormatArg,
        #[command(flatten)]
        select: SelectArgs,
    },
    /// Compare two runs device by device.
    Diff {
        /// The first run (directory, report files' directory, or summary.json)
        #[arg(value_name = "A")]
        a: PathBuf,
        /// The second run
        #[arg(value_name = "B")]
        b: PathBuf,
        /// Output format
        #[arg(long, value_enum, default_value = "text")]
        format: FormatArg,
        /// List every category, also those that held nothing on either side
        #[arg(long)]
        all_categories: bool,
        /// Show the first of each set of alike GPU pairs in full, the others as one table
        /// [default with more than 2 GPUs]
        #[arg(long, overrides_with = "no_fold")]
        fold: bool,
        /// Show every GPU pair in full
        #[arg(long)]
        no_fold: bool,
        // The selection applies to both runs.
        #[command(flatten)]
        select: SelectArgs,
    },
    /// Check memory budgets; exit 1 when one is breached or cannot be measured, 2 on bad input.
    #[command(after_long_help = crate::check::GRAMMAR)]
    Check {
        /// A run directory, report file or summary.json
        #[arg(value_name = "PATH")]
        path: PathBuf,
        /// A budget such as 'ipc<=64MiB', 'peak:other<=1GiB', 'kv_pool>=40GiB', 'untracked<2GiB' (repeatable; keys below)
        #[arg(long = "budget", value_name = "BUDGET")]
        budgets: Vec<String>,
        /// A file with one budget per line (`#` starts a comment)
        #[arg(long = "budgets", value_name = "FILE")]
        budgets_file: Option<PathBuf>,
        /// Fail when any allocation failed
        #[arg(long)]
        no_failures: bool,
        /// Let budgets that cannot be measured (untracked without a free-memory query) pass, with a note
        #[arg(long)]
        allow_unmeasured: bool,
        /// Output format
        #[arg(long, value_enum, default_value = "text")]
        format: CheckFormat,
        #[command(flatten)]
        select: SelectArgs,
    },
    /// Convert reports for other viewers (Perfetto, PyTorch memory_viz).
    Export {
        /// A run directory, report file or summary.json
        #[arg(value_name = "PATH")]
        path: PathBuf,
        /// Chrome trace JSON for ui.perfetto.dev / chrome://tracing (`-` for stdout)
        #[arg(long, value_name = "OUT.json")]
        perfetto: Option<PathBuf>,
        /// PyTorch memory snapshot pickle for pytorch.org/memory_viz (`-` for stdout)
        #[arg(long = "memory-viz", value_name = "OUT.pickle")]
        memory_viz: Option<PathBuf>,
        /// Add up several runs found in PATH (refused otherwise)
        #[arg(long)]
        merge_runs: bool,
    },
    /// SVG chart per GPU: live bytes per category over time, untracked memory and device
    /// usage at each query, capacity, numbered queries and failures.
    Plot {
        /// A run directory, report file or summary.json
        #[arg(value_name = "PATH")]
        path: PathBuf,
        /// The SVG to write (`-` for stdout); other extensions are refused
        #[arg(short, long, value_name = "OUT.svg")]
        output: PathBuf,
        /// Show every category in the legend, also those that held nothing
        #[arg(long)]
        all_categories: bool,
        /// Start the time axis here (seconds on the run's clock) [default: where the memory
        /// starts to move]
        #[arg(long, value_name = "SECONDS")]
        from: Option<f64>,
        /// End the time axis here (seconds on the run's clock) [default: the run's end]
        #[arg(long, value_name = "SECONDS")]
        to: Option<f64>,
        #[command(flatten)]
        select: SelectArgs,
    },
    /// A live full-screen view of a run directory: per GPU the categories against its capacity,
    /// untracked memory, each process, failures; refreshed every second.
    #[command(long_about = "A live full-screen view of a run directory: per GPU the categories' live bytes \
        against its capacity, tracked and untracked memory, the last free-memory query's age, each process \
        and failures, read anew from the reports every second (the program is never polled). Keys: \
        Tab/Right/l next GPU, Shift-Tab/Left/h previous, f fold alike GPUs, q/Esc/Ctrl-C quit.")]
    Top {
        /// Run directories or report files (a directory may still be empty; with --wait, not made yet)
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Print one frame as plain text and exit (for scripts and tests)
        #[arg(long)]
        once: bool,
        /// Start with alike GPUs folded into one block
        #[arg(long)]
        fold: bool,
        /// Wait for paths that do not exist yet (without it, a missing path is an error)
        #[arg(long)]
        wait: bool,
    },
    /// The run's figures in the Prometheus text format (docs/metrics.md): printed once, or
    /// served at /metrics with --listen.
    Metrics {
        /// Run directories or report files
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Serve http://ADDR/metrics (e.g. 127.0.0.1:9464), reading the reports at each scrape
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Also export live bytes per call site (the largest 20 per device)
        #[arg(long)]
        sites: bool,
    },
    /// One self-contained HTML page of a run (or of two runs compared): verdict, findings,
    /// timelines, processes, call sites, largest allocations.
    Html {
        /// A run directory, report file or summary.json; a second one adds their diff
        #[arg(required = true, num_args = 1..=2, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// The HTML file to write
        #[arg(short, long, value_name = "OUT.html")]
        output: PathBuf,
        /// Add up several runs found in a path (refused otherwise)
        #[arg(long)]
        merge_runs: bool,
    },
    /// Replay the recorded start through the engine's sizing formula with another value of its
    /// parameter: per rank the pool, what arrived after the sizing query, whether it fits.
    #[command(long_about = "Replay the recorded start through the engine's sizing formula (the rule packs' \
        `sizing`: SGLang's --mem-fraction-static, vLLM's --gpu-memory-utilization, TensorRT-LLM's \
        --kv_cache_free_gpu_memory_fraction) with another value of its parameter: per rank the pool it would \
        get, what arrived after its sizing query in the recorded run, the memory left and whether it fits. \
        Exit status: 0 every rank fits, 1 one does not, 2 bad input (an unknown engine or parameter: the \
        message names those it knows).")]
    Whatif {
        /// A run directory, report file or summary.json
        #[arg(value_name = "PATH")]
        path: PathBuf,
        /// The parameter and its value, e.g. mem_fraction_static=0.86 (or --mem-fraction-static=0.86)
        #[arg(long = "set", value_name = "NAME=VALUE", required = true, allow_hyphen_values = true)]
        sets: Vec<String>,
        /// The engine (sglang, vllm, trtllm) [default: the one the reports' call sites show]
        #[arg(long, value_name = "ENGINE")]
        engine: Option<String>,
        /// Output format
        #[arg(long, value_enum, default_value = "text")]
        format: FormatArg,
        #[command(flatten)]
        select: SelectArgs,
    },
    /// Print a shell completion script: `culedger completions bash > /etc/bash_completion.d/culedger`.
    Completions {
        /// The shell
        #[arg(value_enum)]
        shell: ShellArg,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ShellArg {
    Bash,
    Zsh,
    Fish,
}
