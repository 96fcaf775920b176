//! Golden outputs of `report`, `diff` and `check` on the fixtures.
//! Regenerate with `UPDATE_GOLDEN=1 cargo test --release -p culedger-cli`.

mod common;
use common::*;

fn case(name: &str, args: &[&str], code: i32) {
    let o = culedger(args);
    assert_eq!(o.status.code(), Some(code), "{name}: stderr: {}", stderr(&o));
    golden(name, &stdout(&o));
}

#[test]
fn report_goldens() {
    for cfg in ["nccl", "custom-ar"] {
        let dir = format!("tests/fixtures/{cfg}");
        for (fmt, ext) in [("text", "txt"), ("markdown", "md"), ("json", "json")] {
            case(&format!("report-{cfg}.{ext}"), &["report", &dir, "--format", fmt], 0);
        }
    }
}

#[test]
fn diff_goldens() {
    for (fmt, ext) in [("text", "txt"), ("markdown", "md"), ("json", "json")] {
        case(&format!("diff.{ext}"), &["diff", "tests/fixtures/nccl", "tests/fixtures/custom-ar", "--format", fmt], 0);
    }
}

#[test]
fn diff_headline_names_what_changed() {
    // One side failed: the headline names the cause (tests/explain.rs checks it in full).
    let o = culedger(&["diff", "tests/fixtures/nccl", "tests/fixtures/custom-ar"]);
    assert!(stdout(&o).starts_with("custom-ar/ ran out of memory: the second half of its pool"), "{}", stdout(&o));
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
    case(
        "check-pass.txt",
        &[
            "check",
            nccl,
            "--budget",
            "ipc<=64MiB",
            "--budget",
            "peak:other>=20GiB",
            "--budget",
            "untracked<=2GiB",
            "--no-failures",
        ],
        0,
    );
    case(
        "check-breach.txt",
        &[
            "check",
            car,
            "--budget",
            "ipc<=8MiB",
            "--budget",
            "peak:other>=20GiB",
            "--budget",
            "untracked<=2GiB",
            "--budget",
            "driver_costs<=512MiB",
            "--no-failures",
        ],
        1,
    );
}

/// Colour only on a terminal (a pseudo-terminal from util-linux `script`), never with
/// NO_COLOR, never into a pipe.
#[test]
fn colour_only_on_a_terminal() {
    let bin = env!("CARGO_BIN_EXE_culedger");
    let on_tty = |no_color: &str| {
        let cmd = format!("{bin} report tests/fixtures/nccl/culedger-4100.json");
        let o = std::process::Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .current_dir(crate_dir())
            .env("NO_COLOR", no_color)
            .output()
            .expect("util-linux `script` is needed for this test");
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    assert!(on_tty("").contains("\x1b[1;36m== Processes ==\x1b[0m"));
    assert!(!on_tty("1").contains('\x1b'));
    let piped = culedger(&["report", "tests/fixtures/nccl/culedger-4100.json"]);
    assert!(!stdout(&piped).contains('\x1b'));
}
