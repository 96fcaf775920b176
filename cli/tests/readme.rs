//! The outputs pasted in README.md and docs/cli.md are the golden outputs, not copies that drift: each fenced
//! block that follows a `<!-- readme-output {...} -->` marker is rebuilt from the marker's
//! parts and compared. `UPDATE_GOLDEN=1 cargo test --release -p culedger-cli` rewrites the
//! blocks (after the goldens themselves); review the README's diff like a golden's.
//!
//! A marker holds JSON: `{"parts": [PART, ...]}`, each PART either `{"text": [LINE, ...]}`
//! (lines as written: the command, `...`) or `{"golden": FILE, "pieces": [[FROM, TO], ...],
//! "more": true}`: from golden `cli/tests/golden/FILE`, each piece is the lines from the first
//! one starting with FROM ("" = where the previous piece stopped; `*TEXT`: the first one
//! containing TEXT) up to, not including, the next one starting with TO (`*TEXT` likewise;
//! null = the end), without trailing blank lines; pieces are joined by a `...` line, and
//! `more` appends one.

mod common;
use common::*;
use serde_json::Value;

const MARK: &str = "<!-- readme-output ";

/// Does `line` start with `anchor` (or, for `*TEXT`, contain TEXT)?
fn matches(line: &str, anchor: &str) -> bool {
    match anchor.strip_prefix('*') {
        Some(text) => line.contains(text),
        None => line.starts_with(anchor),
    }
}

/// The lines of one golden part of a marker.
fn golden_part(part: &Value) -> Result<Vec<String>, String> {
    let name = part["golden"].as_str().ok_or("a part without \"text\" or \"golden\"")?;
    let path = crate_dir().join("tests/golden").join(name);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut at = 0;
    let pieces = part["pieces"].as_array().cloned().unwrap_or_else(|| vec![serde_json::json!(["", null])]);
    for (i, piece) in pieces.iter().enumerate() {
        let from = piece[0].as_str().unwrap_or("");
        let start = (at..lines.len())
            .find(|&j| matches(lines[j], from))
            .ok_or_else(|| format!("{name}: no line starting with {from:?} after line {at}"))?;
        let end = match piece[1].as_str() {
            Some(to) => (start + 1..lines.len())
                .find(|&j| matches(lines[j], to))
                .ok_or_else(|| format!("{name}: no line starting with {to:?} after line {}", start + 1))?,
            None => lines.len(),
        };
        if i > 0 {
            out.push("...".to_string());
        }
        let last = (start..end).rev().find(|&j| !lines[j].trim().is_empty()).map_or(start, |j| j + 1);
        out.extend(lines[start..last].iter().map(|l| l.to_string()));
        at = end;
    }
    if part["more"].as_bool() == Some(true) {
        out.push("...".to_string());
    }
    Ok(out)
}

/// The block a marker asks for.
fn block(marker: &Value) -> Result<Vec<String>, String> {
    let parts = marker["parts"].as_array().ok_or("a marker without \"parts\"")?;
    let mut out = Vec::new();
    for part in parts {
        match part["text"].as_array() {
            Some(text) => out.extend(text.iter().map(|l| l.as_str().unwrap_or_default().to_string())),
            None => out.extend(golden_part(part)?),
        }
    }
    Ok(out)
}

/// README.md with every marked block rebuilt; the number of blocks; the problems found.
fn rebuild(readme: &str) -> (String, usize, Vec<String>) {
    let lines: Vec<&str> = readme.lines().collect();
    let (mut out, mut blocks, mut problems) = (Vec::<String>::new(), 0, Vec::new());
    let mut i = 0;
    while i < lines.len() {
        out.push(lines[i].to_string());
        let Some(json) = lines[i].strip_prefix(MARK).and_then(|r| r.strip_suffix(" -->")) else {
            i += 1;
            continue;
        };
        let line_no = i + 1;
        i += 1;
        let built = serde_json::from_str::<Value>(json).map_err(|e| e.to_string()).and_then(|m| block(&m));
        let fenced = lines.get(i).is_some_and(|l| *l == "```");
        let close = fenced.then(|| (i + 1..lines.len()).find(|&j| lines[j] == "```")).flatten();
        match (built, close) {
            (Ok(built), Some(close)) => {
                blocks += 1;
                out.push("```".to_string());
                out.extend(built);
                out.push("```".to_string());
                i = close + 1;
            }
            (Err(e), _) => problems.push(format!("README.md:{line_no}: {e}")),
            (_, None) => problems.push(format!("README.md:{line_no}: the marker is not followed by a ``` block")),
        }
    }
    let mut text = out.join("\n");
    text.push('\n');
    (text, blocks, problems)
}

/// README.md and the command line's full documentation (docs/cli.md): each with its marked
/// blocks, rebuilt and compared.
#[test]
fn readme_outputs_are_the_goldens() {
    for (file, at_least) in [("../README.md", 5), ("../docs/cli.md", 8)] {
        let path = crate_dir().join(file);
        let readme = std::fs::read_to_string(&path).unwrap();
        let (rebuilt, blocks, problems) = rebuild(&readme);
        assert!(problems.is_empty(), "{file}: {problems:#?}");
        assert!(blocks >= at_least, "only {blocks} marked output blocks in {file}");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, rebuilt).unwrap();
            continue;
        }
        if rebuilt != readme {
            let first = readme.lines().zip(rebuilt.lines()).position(|(a, b)| a != b).map(|i| i + 1);
            panic!(
                "{file}'s pasted outputs differ from the goldens (first at line {first:?}); rerun with UPDATE_GOLDEN=1"
            );
        }
    }
}

/// The README answers first: what it is, the two commands and the demo's one screen on its
/// first screen, and it stays short (the rest is in docs/).
#[test]
fn the_readme_starts_with_the_answer() {
    let readme = std::fs::read_to_string(crate_dir().join("../README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    assert!(lines.len() < 300, "README.md has {} lines", lines.len());
    let first: String = lines[..40.min(lines.len())].join("\n");
    for want in ["make demo", "make test", "culedger run"] {
        assert!(first.contains(want), "{want} not on the first screen:\n{first}");
    }
    // The demo's answer (the end of `culedger run`) starts within the first 50 lines.
    let answer =
        lines.iter().position(|l| l.contains("\"golden\": \"demo-custom-ar.txt\"")).expect("the demo's screen");
    assert!(answer < 50, "the demo's answer starts at line {answer}");
    for doc in ["docs/install.md", "docs/cli.md"] {
        assert!(readme.contains(&format!("]({doc}")), "{doc} linked");
    }
}

#[test]
fn markers_fail_loudly() {
    let (_, n, problems) =
        rebuild("a\n<!-- readme-output {\"parts\": [{\"golden\": \"no-such.txt\"}]} -->\n```\nx\n```\n");
    assert_eq!((n, problems.len()), (0, 1), "{problems:?}");
    let (_, _, problems) = rebuild("<!-- readme-output {\"parts\": []} -->\nnot a block\n");
    assert!(problems[0].contains("not followed"), "{problems:?}");
    let (text, n, problems) = rebuild(
        "<!-- readme-output {\"parts\": [{\"text\": [\"$ x\"]}, {\"golden\": \"check-pass.txt\", \"more\": true}]} -->\n```\nold\n```\nafter\n",
    );
    assert!(problems.is_empty() && n == 1, "{problems:?}");
    assert!(text.contains("```\n$ x\nok: ") && text.ends_with("...\n```\nafter\n"), "{text}");
}
