//! Golden outputs of `report`, `diff` and `check` on the fixtures (generated from the sims by
//! scripts/gen-fixtures.sh), and the properties each golden shows.
//! Regenerate with `UPDATE_GOLDEN=1 cargo test --release -p culedger-cli`.

mod common;
use common::*;
use serde_json::Value;

fn case(name: &str, args: &[&str], code: i32) -> String {
    case_env(name, args, &[], code)
}

fn case_env(name: &str, args: &[&str], env: &[(&str, &str)], code: i32) -> String {
    let o = culedger_env(args, env);
    assert_eq!(o.status.code(), Some(code), "{name}: stderr: {}", stderr(&o));
    golden(name, &stdout(&o));
    stdout(&o)
}

#[test]
fn report_goldens() {
    for cfg in ["nccl", "custom-ar", "custom-ar-tp8"] {
        let dir = format!("tests/fixtures/{cfg}");
        for (fmt, ext) in [("text", "txt"), ("markdown", "md"), ("json", "json")] {
            let out = case(&format!("report-{cfg}.{ext}"), &["report", &dir, "--format", fmt], 0);
            if fmt == "text" {
                assert!(widest(&out) <= 100, "{cfg}: {} columns", widest(&out));
            }
        }
    }
    let every = case("report-custom-ar-tp8-no-fold.txt", &["report", "tests/fixtures/custom-ar-tp8", "--no-fold"], 0);
    assert!(widest(&every) <= 100);
}

/// More than two GPUs: alike GPUs fold by default (`--no-fold` shows each); two do not
/// (`--fold` still folds them). The verdict stays line 2 either way.
#[test]
fn alike_gpus_fold_by_default_above_two() {
    let tp8 = "tests/fixtures/custom-ar-tp8";
    let folded = stdout(&culedger(&["report", tp8]));
    let every = stdout(&culedger(&["report", tp8, "--no-fold"]));
    assert_eq!(folded, stdout(&culedger(&["report", tp8, "--fold"])));
    // GPU 0 holds the launcher too: it and GPU 1 in full, GPUs 2-7 folded under GPU 1.
    assert!(folded.contains("\n== GPU 2, GPU 3, GPU 4, GPU 5, GPU 6, GPU 7 (folded: alike GPUs;"), "{folded}");
    assert_eq!(folded.matches("\n== sim-host GPU ").count(), 2, "two GPUs in full");
    assert_eq!(every.matches("\n== sim-host GPU ").count(), 8);
    // 950 lines for every GPU; about a third folded.
    assert!(
        folded.lines().count() <= 320 && every.lines().count() > 900,
        "{} / {}",
        folded.lines().count(),
        every.lines().count()
    );
    for out in [&folded, &every] {
        assert_eq!(
            out.lines().nth(1),
            Some("8 of 8 ranks failed to allocate 918.00 MiB; see `culedger explain` for why")
        );
    }
    let two = stdout(&culedger(&["report", "tests/fixtures/custom-ar"]));
    assert!(!two.contains("(folded:") && two.contains("== sim-host GPU 1 "), "{two}");
}

/// What `culedger run` ends with, on the 8 ranks (`report --brief` prints the same screen):
/// the verdict second, one line per set of alike GPUs, explain's headline, the commands;
/// at most 30 lines at 80 and 100 columns.
#[test]
fn the_one_screen_of_eight_ranks() {
    let args = ["report", "--brief", "tests/fixtures/custom-ar-tp8"];
    let out = case("brief-custom-ar-tp8.txt", &args, 0);
    for columns in ["80", "100"] {
        let out = stdout(&culedger_env(&args, &[("COLUMNS", columns)]));
        let width: usize = columns.parse().unwrap();
        assert!(out.lines().count() <= 30, "COLUMNS={columns}: {} lines\n{out}", out.lines().count());
        assert!(widest(&out) <= width, "COLUMNS={columns}:\n{out}");
        assert_eq!(
            out.lines().nth(1),
            Some("8 of 8 ranks failed to allocate 918.00 MiB; see `culedger explain` for why")
        );
    }
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("| GPU 0 ") || l.starts_with("| GPU 1-7 ")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(out.contains("culedger explain: 8 of 8 ranks failed to allocate; the first:\nrank 0 (pid 6101) could not allocate part 12 of its KV pool on GPU 0"), "{out}");
    for cmd in ["culedger report tests/fixtures/custom-ar-tp8 ", "culedger explain tests/fixtures/custom-ar-tp8 "] {
        assert!(out.contains(cmd), "{cmd}: {out}");
    }
    let o = culedger(&["report", "--brief", "--format", "json", "tests/fixtures/custom-ar-tp8"]);
    assert_eq!(o.status.code(), Some(2), "--brief is text");
}

/// The widest line of every command at 80 and 100 columns on the 8-rank fixture.
#[test]
fn every_command_fits_80_and_100_columns() {
    let tp8 = "tests/fixtures/custom-ar-tp8";
    for columns in ["80", "100"] {
        let width: usize = columns.parse().unwrap();
        for args in [
            vec!["report", tp8],
            vec!["report", tp8, "--no-fold"],
            vec!["report", "--brief", tp8],
            vec!["explain", tp8],
            vec!["explain", "tests/fixtures/custom-ar"],
            vec!["diff", tp8, tp8],
            vec!["diff", "tests/fixtures/nccl", "tests/fixtures/custom-ar"],
            vec!["check", tp8, "--budget", "ipc<=8MiB", "--no-failures"],
        ] {
            let out = stdout(&culedger_env(&args, &[("COLUMNS", columns)]));
            assert!(!out.is_empty(), "{args:?}");
            assert!(widest(&out) <= width, "COLUMNS={columns} {args:?}: {} columns\n{out}", widest(&out));
        }
    }
}

/// The report answers first: the verdict, then one line per GPU, and the run's clock.
#[test]
fn report_starts_with_the_verdict_and_the_overview() {
    let out = stdout(&culedger(&["report", "tests/fixtures/custom-ar"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "culedger report: tests/fixtures/custom-ar/ (3 processes, 1 host, 2 GPUs; run custom-ar-run)");
    // Each rank's allocator retried its failed request once: one failed allocation each.
    assert_eq!(lines[1], "2 of 2 ranks failed to allocate 916.00 MiB; see `culedger explain` for why");
    assert_eq!(lines[2], "Times are seconds since the run's first process started (2026-01-01 00:00:00.000 +00:00).");
    assert_eq!(lines[4], "== Overview ==");
    let overview: Vec<&str> = lines.iter().skip(5).take_while(|l| !l.is_empty()).copied().collect();
    assert_eq!(overview.iter().filter(|l| l.starts_with("| GPU 0 ") || l.starts_with("| GPU 1 ")).count(), 2);
    let ok = stdout(&culedger(&["report", "tests/fixtures/nccl"]));
    assert!(
        ok.lines().nth(1).unwrap().starts_with(
            "no allocation failed; the fullest device was sim-host GPU 0 with 23.66 GiB used of 24.00 GiB at"
        ),
        "{ok}"
    );
    // 8 ranks on 8 GPUs: the same two lines, eight overview rows.
    let out = stdout(&culedger(&["report", "tests/fixtures/custom-ar-tp8"]));
    assert_eq!(out.lines().nth(1), Some("8 of 8 ranks failed to allocate 918.00 MiB; see `culedger explain` for why"));
}

/// Processes are named as the engine names them; the process table has wall-clock times.
#[test]
fn processes_carry_their_titles_rank_hints_and_wall_clock() {
    // Wide enough for one line per process beside the pinned host memory column.
    let out = stdout(&culedger_env(&["report", "tests/fixtures/custom-ar"], &[("COLUMNS", "132")]));
    let row = |pid: &str| out.lines().find(|l| l.starts_with(&format!("| {pid} "))).unwrap_or_default().to_string();
    let words = |l: String| l.split_whitespace().map(String::from).collect::<Vec<_>>().join(" ");
    assert!(words(row("5101")).starts_with("| 5101 sglang::scheduler_TP0 (rank 0/2) 00:00:00.002 0.002s "), "{out}");
    assert!(words(row("5102")).starts_with("| 5102 sglang::scheduler_TP1 (rank 1/2) 00:00:00.006 0.006s "), "{out}");
    assert!(!out.contains("-B -c"), "{out}");
}

#[test]
fn every_table_fits_the_width() {
    for columns in ["80", "100", "132"] {
        for args in [
            vec!["report", "tests/fixtures/custom-ar-tp8"],
            vec!["report", "tests/fixtures/custom-ar-tp8", "--fold"],
            vec!["diff", "tests/fixtures/nccl", "tests/fixtures/custom-ar"],
        ] {
            let o = culedger_env(&args, &[("COLUMNS", columns)]);
            let out = stdout(&o);
            let width: usize = columns.parse().unwrap();
            let over: Vec<&str> = out.lines().filter(|l| l.chars().count() > width).collect();
            assert!(over.is_empty(), "COLUMNS={columns} {args:?}: {over:#?}");
            // Numbers are never cut: every size of the JSON report is on the page.
            if args[0] == "report" && args.len() == 2 {
                for size in ["17.06 GiB", "17.95 GiB", "918.00 MiB", "24.00 GiB", "28.00 MiB", "6.28 GiB", "1.75 GiB"] {
                    assert!(out.contains(size), "COLUMNS={columns}: {size} missing");
                }
            }
        }
    }
    case_env("report-custom-ar-80.txt", &["report", "tests/fixtures/custom-ar"], &[("COLUMNS", "80")], 0);
}

#[test]
fn empty_categories_are_hidden_unless_asked() {
    // The failing ranks never captured graphs: no graphs row; every other category held memory.
    let out = stdout(&culedger(&["report", "tests/fixtures/custom-ar"]));
    assert!(!out.contains("| graphs"), "{out}");
    for c in ["weights", "kv_pool", "ipc", "comm", "other"] {
        assert!(out.contains(&format!("| {c} ")), "{c}: {out}");
    }
    let all =
        case("report-custom-ar-all-categories.txt", &["report", "tests/fixtures/custom-ar", "--all-categories"], 0);
    for c in ["weights", "kv_pool", "ipc", "graphs", "comm", "other"] {
        assert!(all.contains(&format!("| {c} ")), "{c}");
    }
}

#[test]
fn filters_by_device_pid_and_host() {
    let out = case("report-custom-ar-tp8-device3.txt", &["report", "tests/fixtures/custom-ar-tp8", "--device", "3"], 0);
    assert!(out.contains("== sim-host GPU 3 ") && !out.contains("== sim-host GPU 2 "), "{out}");
    let out = stdout(&culedger(&["report", "tests/fixtures/custom-ar", "--pid", "5102", "--device", "1"]));
    assert!(out.contains("(1 process, 1 host, 1 GPU;"), "{out}");
    let o = culedger(&["report", "tests/fixtures/custom-ar", "--host", "elsewhere"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o), "culedger: tests/fixtures/custom-ar/: no process matches --host elsewhere\n");
}

/// Untracked memory compares what the device used at a query with what was tracked at that
/// same query, and says how old the reading is.
#[test]
fn untracked_is_compared_at_the_query() {
    let out = stdout(&culedger(&["report", "tests/fixtures/custom-ar", "--format", "json"]));
    let v: Value = serde_json::from_str(&out).unwrap();
    for d in v["devices"].as_array().unwrap() {
        let q = &d["last_query"];
        let (used, tracked, untracked) = (
            q["used_bytes"].as_i64().unwrap(),
            q["tracked_bytes"].as_i64().unwrap(),
            q["untracked_bytes"].as_i64().unwrap(),
        );
        assert_eq!(used - tracked, untracked, "{q}");
        assert!(q["age_us"].as_i64().unwrap() > 0, "{q}");
    }
    let text = stdout(&culedger(&["report", "tests/fixtures/custom-ar"]));
    assert!(text.contains("before the last report): device used"), "{text}");
}

/// Hidden driver costs: what another rank did inside a measurement window is taken out.
#[test]
fn driver_costs_are_denoised() {
    let out = stdout(&culedger(&["report", "tests/fixtures/custom-ar-tp8", "--format", "json"]));
    let v: Value = serde_json::from_str(&out).unwrap();
    let mut contaminated = 0;
    for d in v["devices"].as_array().unwrap() {
        for c in d["driver_costs"].as_array().unwrap() {
            // Every rank opens 14 peer buffers (2 MiB each) and enables 7 peers (256 MiB each).
            let want = match c["api"].as_str().unwrap() {
                "cudaIpcOpenMemHandle" => 14 * 2,
                "cudaDeviceEnablePeerAccess" => 7 * 256,
                api => panic!("unexpected {api}"),
            };
            assert_eq!(c["bytes"].as_i64().unwrap() >> 20, want, "GPU {}: {c}", d["index"]);
            if c["measured_bytes"] != c["bytes"] {
                contaminated += 1;
                assert!(c["notes"][0].as_str().unwrap().starts_with("minus 512.00 MiB: "), "{c}");
            }
        }
    }
    assert!(contaminated > 0, "the fixture was kept for a contaminated window (scripts/gen-fixtures.sh)");
}

#[test]
fn diff_goldens() {
    for (fmt, ext) in [("text", "txt"), ("markdown", "md"), ("json", "json")] {
        case(&format!("diff.{ext}"), &["diff", "tests/fixtures/nccl", "tests/fixtures/custom-ar", "--format", fmt], 0);
    }
}

/// diff folds alike GPU pairs above two (the headline stays line 1) and selects like report.
#[test]
fn diff_folds_and_selects() {
    let tp8 = "tests/fixtures/custom-ar-tp8";
    let folded = stdout(&culedger(&["diff", tp8, tp8]));
    let every = stdout(&culedger(&["diff", tp8, tp8, "--no-fold"]));
    assert!(folded.starts_with("custom-ar-tp8/ and custom-ar-tp8/: no difference"), "{folded}");
    assert_eq!(folded.lines().next(), every.lines().next());
    assert_eq!(every.matches("\n== GPU ").count(), 8);
    assert!(folded.contains("\n== GPU 1, GPU 2, GPU 3, GPU 4, GPU 5, GPU 6, GPU 7 (folded: alike GPU 0"), "{folded}");
    assert!(
        folded.lines().count() * 3 < every.lines().count(),
        "{} vs {}",
        folded.lines().count(),
        every.lines().count()
    );
    // --device, --pid and --host, as report.
    let one = stdout(&culedger(&["diff", tp8, tp8, "--device", "3"]));
    assert!(one.contains("\n== GPU 3 ==") && !one.contains("== GPU 0") && !one.contains("folded"), "{one}");
    let pid = stdout(&culedger(&["diff", "tests/fixtures/nccl", "tests/fixtures/nccl", "--pid", "4101"]));
    assert!(pid.contains("== GPU 0") && !pid.contains("== GPU 1"), "{pid}");
    let o = culedger(&["diff", tp8, tp8, "--host", "elsewhere"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn diff_headline_names_what_changed() {
    // One side failed: the headline names the cause (tests/explain.rs checks it in full).
    let o = culedger(&["diff", "tests/fixtures/nccl", "tests/fixtures/custom-ar"]);
    assert!(stdout(&o).starts_with("custom-ar/ ran out of memory: part 16 of its KV pool"), "{}", stdout(&o));
    // Neither failed: what changed most.
    let o = culedger(&["diff", "tests/fixtures/nccl", "tests/fixtures/explain-untracked"]);
    assert!(stdout(&o).starts_with("explain-untracked/ uses "), "{}", stdout(&o));
    // A run compared with itself.
    let o = culedger(&["diff", "tests/fixtures/nccl", "tests/fixtures/nccl"]);
    assert!(stdout(&o).starts_with("nccl/ and nccl/: no difference"), "{}", stdout(&o));
}

#[test]
fn check_goldens_and_exit_codes() {
    let nccl = "tests/fixtures/nccl";
    let car = "tests/fixtures/custom-ar";
    let out = case(
        "check-pass.txt",
        &[
            "check",
            nccl,
            "--budget",
            "ipc<=64MiB",
            "--budget",
            "peak:kv_pool>=14GiB",
            "--budget",
            "untracked<=2GiB",
            "--no-failures",
        ],
        0,
    );
    assert_eq!(out, "ok: 4 checks hold on 2 devices\n");
    let one = stdout(&culedger(&["check", nccl, "--budget", "ipc<=64MiB"]));
    assert_eq!(one, "ok: 1 check holds on 2 devices\n", "grammar");
    let breach = [
        "check",
        car,
        "--budget",
        "ipc<=8MiB",
        "--budget",
        "peak:kv_pool>=14GiB",
        "--budget",
        "untracked<=2GiB",
        "--budget",
        "driver_costs<=512MiB",
        "--budget",
        "untracked>=-64MiB",
        "--no-failures",
    ];
    let out = case("check-breach.txt", &breach, 1);
    // 4 budgets breached and one failed allocation per GPU (each retried once: not counted twice).
    assert!(out.ends_with("FAILED: 10 breaches; 6 checks on 2 devices\n"), "{out}");
    let mut json = breach.to_vec();
    json.extend(["--format", "json"]);
    // For $GITHUB_STEP_SUMMARY: the summary line, then a row per check, breaches first.
    let mut md = breach.to_vec();
    md.extend(["--format", "markdown"]);
    let out = case("check-breach.md", &md, 1);
    assert!(out.starts_with("## culedger check\n\n**FAILED: 10 breaches; 6 checks on 2 devices**\n\n"), "{out}");
    assert!(out.contains("| status | device | budget | measured |\n| --- | --- | --- | ---: |\n| BREACH |"), "{out}");
    assert_eq!(out.matches("| BREACH |").count(), 10, "{out}");
    let out = case("check-breach.json", &json, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["schema"].as_str(), v["ok"].as_bool(), v["breaches"].as_i64()),
        (Some("culedger-check/1"), Some(false), Some(10))
    );
}

/// A budget that cannot be measured fails the check unless it is allowed.
#[test]
fn unmeasured_budgets_fail_unless_allowed() {
    // Rank 0 of the 8-rank run on GPU 1: only its peer context, never a query there.
    let args =
        ["check", "tests/fixtures/custom-ar-tp8", "--pid", "6101", "--device", "1", "--budget", "untracked<=1GiB"];
    let out = case("check-unmeasured.txt", &args, 1);
    assert!(out.starts_with("UNMEASURED sim-host GPU 1: untracked cannot be measured"), "{out}");
    let mut allowed = args.to_vec();
    allowed.push("--allow-unmeasured");
    let o = culedger(&allowed);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "ok: 1 check holds on 1 device (1 not measured, allowed)\n");
    assert!(stderr(&o).starts_with("culedger: not checked: sim-host GPU 1: untracked cannot be measured"));
}

/// Colour only on a terminal (a pseudo-terminal the test opens itself), never with
/// NO_COLOR, never into a pipe; `--color` and FORCE_COLOR override.
#[test]
fn colour_only_on_a_terminal() {
    let on_tty = |no_color: &str| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_culedger"));
        cmd.args(["report", "tests/fixtures/nccl/culedger-4100.json"])
            .current_dir(crate_dir())
            .env("NO_COLOR", no_color)
            .env_remove("FORCE_COLOR");
        let (ok, out) = run_on_a_pty(cmd);
        assert!(ok, "{out}");
        out
    };
    assert!(on_tty("").contains("\x1b[1;36m== Processes ==\x1b[0m"));
    assert!(!on_tty("1").contains('\x1b'));
    let piped = culedger(&["report", "tests/fixtures/nccl/culedger-4100.json"]);
    assert!(!stdout(&piped).contains('\x1b'));
    let forced = culedger(&["report", "tests/fixtures/nccl/culedger-4100.json", "--color", "always"]);
    assert!(stdout(&forced).contains("\x1b[1;36m== Processes ==\x1b[0m"));
    let forced = culedger_env(&["report", "tests/fixtures/nccl/culedger-4100.json"], &[("FORCE_COLOR", "1")]);
    assert!(stdout(&forced).contains('\x1b'));
    let never = culedger_env(&["--color", "never", "report", "tests/fixtures/nccl"], &[("FORCE_COLOR", "1")]);
    assert!(!stdout(&never).contains('\x1b'));
}

/// `check` on a terminal: BREACH red, the summary line red (green when every check holds).
#[test]
fn check_breaches_are_red_on_a_terminal() {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_culedger"));
    cmd.args(["check", "tests/fixtures/custom-ar", "--budget", "ipc<=8MiB"])
        .current_dir(crate_dir())
        .env_remove("NO_COLOR")
        .env_remove("FORCE_COLOR");
    let (ok, out) = run_on_a_pty(cmd);
    assert!(!ok, "a breach fails the check: {out}");
    assert!(out.contains("\x1b[1;31mBREACH\x1b[0m sim-host GPU 0: ipc is "), "{out:?}");
    assert!(out.contains("\x1b[1;31mFAILED: 2 breaches;"), "{out:?}");
    let piped = culedger(&["check", "tests/fixtures/custom-ar", "--budget", "ipc<=8MiB"]);
    assert!(stdout(&piped).starts_with("BREACH sim-host GPU 0: ipc is "), "{}", stdout(&piped));
}

/// The JSON outputs carry their schema id.
#[test]
fn json_outputs_have_schema_ids() {
    let v: Value =
        serde_json::from_slice(&culedger(&["report", "tests/fixtures/nccl", "--format", "json"]).stdout).unwrap();
    assert_eq!(v["schema"], "culedger-report/1");
    assert_eq!(v["run_ids"], serde_json::json!(["nccl-run"]));
}

/// Runs `cmd` with its stdout on a fresh pseudo-terminal (stderr piped); returns whether it
/// succeeded and what it wrote to the terminal (the line discipline turns "\n" into "\r\n").
fn run_on_a_pty(mut cmd: std::process::Command) -> (bool, String) {
    use std::io::Read;
    let (master, slave) = open_pty();
    let child = cmd.stdout(slave).stderr(std::process::Stdio::piped()).spawn().expect("run culedger");
    // The parent's copy of the slave went into `cmd`: drop it so the master sees EIO at the end.
    drop(cmd);
    let reader = std::thread::spawn(move || {
        let mut master = master;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match master.read(&mut chunk) {
                Ok(0) | Err(_) => break, // EIO once the last slave descriptor is closed
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf
    });
    let out = child.wait_with_output().expect("wait for culedger");
    let text = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    (out.status.success(), if out.status.success() { text } else { format!("{text}\n{}", stderr(&out)) })
}
