//! Charts and documents that carry report strings ([23] 13, 24): `plot`'s SVG stays
//! well-formed XML (parsed by Python's expat) whatever a host name holds, and
//! `--format markdown` never turns a title into markup. `CULEDGER_CLI=/path/to/old/culedger`
//! runs these against another build.

mod common;
use common::*;
use serde_json::Value;
use std::process::Command;

/// The nccl fixture with every process's host and title replaced.
fn with_names(host: &str, title: &str) -> tempfile::TempDir {
    let d = tempdir();
    for e in std::fs::read_dir(fixtures().join("nccl")).unwrap().flatten() {
        let mut v: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        v["process"]["host"] = host.into();
        v["process"]["title"] = title.into();
        std::fs::write(d.path().join(e.file_name()), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    d
}

#[test]
fn control_characters_in_a_host_name_keep_the_svg_well_formed() {
    let d = with_names("node\u{1b}[31m\u{7}\u{0}-7", "t\u{8}x");
    let out = d.path().join("p.svg");
    let o = culedger(&["plot", d.path().to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let parsed = Command::new("python3")
        .args(["-c", "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1]); print('ok')"])
        .arg(&out)
        .output()
        .expect("python3");
    assert_eq!(stdout(&parsed).trim(), "ok", "{}", stderr(&parsed));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.contains("node\\x1b[31m\\x07\\x00-7"), "the host stays readable");
}

#[test]
fn markdown_never_turns_a_title_into_markup() {
    let d = with_names("<img src=x onerror=alert(1)>", "sched <!-- hidden & <b>bold</b>");
    let o = culedger(&["report", d.path().to_str().unwrap(), "--format", "markdown"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let md = stdout(&o);
    assert!(!md.contains("<img") && !md.contains("<!--") && !md.contains("<b>"), "{md}");
    assert!(md.contains("&lt;img src=x onerror=alert(1)&gt;"), "{md}");
    assert!(md.contains("sched &lt;!-- hidden &amp; &lt;b&gt;bold&lt;/b&gt;"), "{md}");
    let o = culedger(&["check", d.path().to_str().unwrap(), "--budget", "ipc<=64MiB", "--format", "markdown"]);
    let md = stdout(&o);
    assert!(!md.contains("<img"), "{md}");
    assert!(md.contains("`ipc<=64MiB`"), "a budget stays code: {md}");
}
