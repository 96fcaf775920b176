//! culedger's per-version CPython layout tables (`src/sites/layouts.rs`) against the headers of
//! every interpreter present: `shim-tests/pylayout/pylayout.c` is compiled with each one's
//! own headers (internal ones included) and prints the offsets, sizes and bit positions the
//! frame walker uses; every entry of the table for that minor version must match.

use culedger_scenarios::{pythons, repo_root};
use std::collections::HashMap;
use std::process::Command;

/// The tables of layouts.rs, parsed from the source: minor version -> entries.
fn tables() -> HashMap<u32, Vec<(String, u64)>> {
    let src = std::fs::read_to_string(repo_root().join("src/sites/layouts.rs")).unwrap();
    let mut out = HashMap::new();
    let mut current: Option<(u32, Vec<(String, u64)>)> = None;
    for line in src.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("const V3") {
            let minor: u32 = rest[..2].parse().unwrap();
            current = Some((minor, Vec::new()));
        } else if t == "];" {
            if let Some((m, v)) = current.take() {
                out.insert(m, v);
            }
        } else if let (Some((_, v)), Some(body)) = (current.as_mut(), t.strip_prefix("(\"")) {
            let (name, value) = body.split_once("\", ").unwrap();
            v.push((name.to_string(), value.trim_end_matches("),").parse().unwrap()));
        }
    }
    out
}

#[test]
fn layout_tables_match_each_interpreters_own_headers() {
    let tables = tables();
    assert_eq!(tables.keys().copied().collect::<std::collections::BTreeSet<_>>(), (10..=14).collect());
    let scratch = std::env::temp_dir().join(format!("culedger-pylayout-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut checked = Vec::new();
    for py in pythons::supported() {
        if py.include.is_none() {
            eprintln!("{}: no headers, not checked", py.label());
            continue;
        }
        let exe = scratch.join(format!("pylayout-{}", py.version));
        let cc = Command::new("cc")
            .args(["-O0", "-w"])
            .args(py.include_flags())
            .arg("-o")
            .arg(&exe)
            .arg(repo_root().join("shim-tests/pylayout/pylayout.c"))
            .output()
            .expect("cc");
        assert!(cc.status.success(), "{}: {}", py.label(), String::from_utf8_lossy(&cc.stderr));
        let out = Command::new(&exe).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let facts: HashMap<&str, u64> =
            text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k, v.parse().unwrap())).collect();
        assert_eq!(facts["version_minor"], u64::from(py.minor), "{}", py.label());
        let table = &tables[&py.minor];
        for (name, value) in table {
            let header = facts.get(name.as_str()).unwrap_or_else(|| panic!("{}: headers lack {name}", py.label()));
            assert_eq!(header, value, "{}: {name} is {header} in its headers, {value} in layouts.rs", py.label());
        }
        checked.push(format!("{} ({} entries)", py.label(), table.len()));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    eprintln!("layouts checked against the headers of: {checked:#?}");
    assert!(!checked.is_empty(), "no interpreter with headers found");
}
