//! What a person reads at the widths terminals have: every command on the 8-rank fixture at
//! COLUMNS=80 and 100 breaks lines only at spaces or frame separators (no identifier cut
//! inside it, no name shortened into a stub) and never shows two processes under one name.

mod common;

use common::{culedger_env, fixtures, stdout};
use std::collections::BTreeSet;

/// The runs of identifier characters in `text` (`MHATokenToKVPool`, `_create_buffers`,
/// `cudaDeviceEnablePeerAccess`, `918`).
fn tokens(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|t| !t.is_empty()).collect()
}

fn commands(tp8: &str, nccl: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["report", tp8]),
        v(&["report", "--brief", tp8]),
        v(&["report", "--no-fold", tp8]),
        v(&["explain", tp8]),
        v(&["diff", nccl, tp8]),
        v(&["whatif", tp8, "--set", "mem_fraction_static=0.6"]),
        v(&["check", tp8, "--budget", "untracked<=2GiB", "--no-failures"]),
        v(&["top", "--once", tp8]),
    ]
}

#[test]
fn names_are_never_cut_at_80_and_100_columns() {
    let tp8 = fixtures().join("custom-ar-tp8");
    let nccl = fixtures().join("nccl");
    let (tp8, nccl) = (tp8.to_str().unwrap(), nccl.to_str().unwrap());
    // Every token the outputs may hold: those of the outputs where nothing wraps, and of the
    // reports themselves.
    let mut known: BTreeSet<String> = BTreeSet::new();
    for entry in std::fs::read_dir(fixtures().join("custom-ar-tp8")).unwrap().chain(std::fs::read_dir(fixtures().join("nccl")).unwrap()) {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        known.extend(tokens(&text).into_iter().map(String::from));
    }
    for cmd in commands(tp8, nccl) {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let wide = stdout(&culedger_env(&args, &[("COLUMNS", "1000")]));
        known.extend(tokens(&wide).into_iter().map(String::from));
    }
    // A rank's short name (`sglang::scheduler_TP0` shown as `TP0`).
    let short: Vec<String> =
        known.iter().filter_map(|t| t.rsplit_once('_')).map(|(_, tail)| tail.to_string()).collect();
    known.extend(short);
    let mut bad = Vec::new();
    for cmd in commands(tp8, nccl) {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        for cols in ["80", "100"] {
            let out = stdout(&culedger_env(&args, &[("COLUMNS", cols)]));
            assert!(!out.is_empty(), "{cmd:?} at {cols}");
            for t in tokens(&out) {
                if t.len() >= 3 && !known.contains(t) {
                    bad.push(format!("{} at COLUMNS={cols}: `{t}`", cmd[..cmd.len().min(2)].join(" ")));
                }
            }
            // The ranks' processes apart wherever a process name is shown: no stub names.
            assert!(!out.contains("sglang::s..."), "{cmd:?} at {cols}:\n{out}");
        }
    }
    bad.sort();
    bad.dedup();
    assert!(bad.is_empty(), "identifiers cut inside a token:\n{}", bad.join("\n"));
}

/// Every process shown by name beside its pid, as (name, pid), for the processes `titles`
/// names (pid -> title): `6101   sglang::scheduler_TP0`, `6101 TP0`, `rank 0 (pid 6101)`. A
/// name cut at a frame separator (`sglang::` / `scheduler_TP2`, in a table's cell) is joined
/// with what continues it at the same column of the next line. A word after a pid counts as
/// a name when it shares a word with a process's title (not `cudaMalloc` in `6101 cudaMalloc`).
fn shown_names(text: &str, titles: &std::collections::BTreeMap<String, String>) -> Vec<(String, String)> {
    let title_words: BTreeSet<&str> = titles.values().flat_map(|t| tokens(t)).filter(|w| w.len() >= 2).collect();
    let lines: Vec<Vec<char>> =
        text.lines().map(|l| l.chars().map(|c| if c == '|' || c == '│' { ' ' } else { c }).collect()).collect();
    // (start column, word) of each whitespace-separated word of a line.
    let words = |l: &[char]| -> Vec<(usize, String)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < l.len() {
            if l[i].is_whitespace() {
                i += 1;
                continue;
            }
            let start = i;
            while i < l.len() && !l[i].is_whitespace() {
                i += 1;
            }
            out.push((start, l[start..i].iter().collect()));
        }
        out
    };
    let mut shown = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let w = words(line);
        for (i, (pid_col, word)) in w.iter().enumerate() {
            if titles.contains_key(word.as_str()) {
                if let Some((col, name)) = w.get(i + 1) {
                    let mut name = name.clone();
                    // Continued on the next line of its cell: from the cell's left edge (the
                    // pid's column) to the name's.
                    if (name.ends_with(':') || name.ends_with('.')) && !name.ends_with("...") {
                        let next = lines.get(n + 1).map(|l| words(l)).unwrap_or_default();
                        let more = next.into_iter().find(|(c, _)| (pid_col..=col).contains(&c));
                        if let Some((_, more)) = more.filter(|(_, m)| !titles.contains_key(m)) {
                            name.push_str(&more);
                        }
                    }
                    if tokens(&name).iter().any(|t| title_words.contains(t)) {
                        shown.push((name, word.clone()));
                    }
                }
            }
            if word == "rank" && w.get(i + 2).is_some_and(|(_, p)| p == "(pid") {
                let pid = w.get(i + 3).map(|(_, p)| p.trim_end_matches(|c: char| !c.is_ascii_digit()).to_string());
                if let Some(pid) = pid.filter(|p| titles.contains_key(p)) {
                    shown.push((format!("rank {}", w[i + 1].1), pid));
                }
            }
        }
    }
    shown
}

/// The 8-rank run's processes, pid -> title (else the command line).
fn tp8_titles() -> std::collections::BTreeMap<String, String> {
    std::fs::read_dir(fixtures().join("custom-ar-tp8"))
        .unwrap()
        .map(|e| {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap();
            let p = &v["process"];
            let argv: Vec<&str> = p["argv"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
            (p["pid"].to_string(), p["title"].as_str().map_or_else(|| argv.join(" "), String::from))
        })
        .collect()
}

/// No two processes under one shown name ([24] item 3), asserted positively: wherever a
/// command lists processes by name at COLUMNS=80 and 100 (report, explain, diff, top
/// --once, whatif, check), each name it shows beside a pid is that pid's alone, and the
/// listings name as many processes as they list (the check would pass on an output that
/// named none). The HTML page's data names each process apart too.
#[test]
fn no_two_processes_share_a_shown_name() {
    let titles = tp8_titles();
    assert_eq!(titles.len(), 9);
    let tp8 = fixtures().join("custom-ar-tp8");
    let nccl = fixtures().join("nccl");
    let (tp8, nccl) = (tp8.to_str().unwrap(), nccl.to_str().unwrap());
    // The processes each listing names at least (report --brief and diff name the first
    // failures only).
    let named_at_least = |cmd: &[String]| match (cmd[0].as_str(), cmd[1].as_str()) {
        ("report", "--brief") => 1,
        ("diff", _) => 2,
        ("report", _) | ("top", _) => 9,
        _ => 8,
    };
    for cmd in commands(tp8, nccl) {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        for cols in ["80", "100"] {
            let out = stdout(&culedger_env(&args, &[("COLUMNS", cols)]));
            let shown = shown_names(&out, &titles);
            let mut by_name: std::collections::BTreeMap<&str, BTreeSet<&str>> = Default::default();
            for (name, pid) in &shown {
                by_name.entry(name).or_default().insert(pid);
            }
            for (name, pids) in &by_name {
                assert_eq!(pids.len(), 1, "{cmd:?} at {cols}: `{name}` names pids {pids:?}\n{out}");
            }
            let named: BTreeSet<&str> = shown.iter().map(|(_, p)| p.as_str()).collect();
            assert!(named.len() >= named_at_least(&cmd), "{cmd:?} at {cols}: names {named:?}\n{out}");
        }
    }
    // The page's data: one label per process, and per device.
    let d = tempfile::tempdir().unwrap();
    let page = d.path().join("p.html");
    let o = culedger_env(&["html", tp8, "-o", page.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0));
    let page = std::fs::read_to_string(page).unwrap();
    let start = page.find("<script id=\"culedger-data\" type=\"application/json\">").unwrap();
    let rest = &page[start..];
    let data: serde_json::Value =
        serde_json::from_str(&rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()]).unwrap();
    let summary = &data["runs"][0]["summary"];
    let labels = |procs: &serde_json::Value| -> Vec<String> {
        procs.as_array().unwrap().iter().map(|p| p["label"].as_str().unwrap().to_string()).collect()
    };
    let mut lists = vec![labels(&summary["processes"])];
    lists.extend(summary["devices"].as_array().unwrap().iter().map(|d| labels(&d["processes"])));
    assert_eq!(lists[0].len(), 9);
    for l in lists {
        let apart: BTreeSet<&String> = l.iter().collect();
        assert_eq!(apart.len(), l.len(), "{l:?}");
    }
}

/// What the check above would see in the cut form of [24] item 3: one stub for every rank.
#[test]
fn a_stub_name_is_seen_as_shared() {
    let titles = tp8_titles();
    let out = "| 6101   sglang::s...   17.06 GiB |\n| 6102   sglang::s...   0 B |\n| GPU 1   rank 1 (pid 6102) |\n";
    let shown = shown_names(out, &titles);
    assert_eq!(
        shown,
        [("sglang::s...".to_string(), "6101".to_string()), ("sglang::s...".into(), "6102".into()), ("rank 1".into(), "6102".into())]
    );
}
