//! `--help` describes every argument, `check --help` lists the budget keys, and shell
//! completions are generated for bash, zsh and fish.

mod common;
use common::*;

#[test]
fn check_help_lists_the_budget_keys() {
    let o = culedger(&["check", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for key in [
        "weights",
        "kv_pool",
        "ipc",
        "graphs",
        "comm",
        "other",
        "live",
        "peak",
        "untracked",
        "ipc_imported",
        "driver_costs",
        "peak:",
    ] {
        assert!(help.contains(key), "{key} missing from check --help:\n{help}");
    }
    for option in
        ["--budget", "--budgets", "--no-failures", "--allow-unmeasured", "--format", "--merge-runs", "--device"]
    {
        assert!(help.contains(option), "{option}");
    }
    assert!(help.contains("Exit status: 0 every budget holds"), "{help}");
}

#[test]
fn every_command_has_help_for_each_argument() {
    for cmd in ["run", "report", "diff", "check", "export", "plot", "completions"] {
        let o = culedger(&[cmd, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{cmd}");
        let help = stdout(&o);
        // clap lists each argument on a line of its own followed by its description: an
        // undescribed one would be a line with only the argument.
        for line in help.lines().filter(|l| l.starts_with("  -") || l.starts_with("  <")) {
            let described = line.trim().contains("  ") || help.contains(&format!("{}\n          ", line.trim_end()));
            assert!(described, "{cmd}: `{}` has no description:\n{help}", line.trim());
        }
    }
    let top = stdout(&culedger(&["--help"]));
    assert!(top.contains("--color") && top.contains("completions"), "{top}");
}

#[test]
fn shell_completions() {
    for shell in ["bash", "zsh", "fish"] {
        let o = culedger(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let script = stdout(&o);
        for word in ["report", "diff", "check", "merge-runs", "all-categories"] {
            assert!(script.contains(word), "{shell}: {word}");
        }
    }
    // The bash script parses.
    let d = tempdir();
    let f = d.path().join("culedger.bash");
    std::fs::write(&f, stdout(&culedger(&["completions", "bash"]))).unwrap();
    let ok = std::process::Command::new("bash").arg("-n").arg(&f).status().expect("bash");
    assert!(ok.success());
    let o = culedger(&["completions", "powershell-of-course"]);
    assert_eq!(o.status.code(), Some(2));
}
