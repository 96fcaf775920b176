use super::*;
use serde_json::json;

fn pack(rules: &str) -> Result<Pack, String> {
    parse_pack(&format!("{{\"culedger_rules\": 1, \"pack\": \"t\",\n\"rules\": [\n{rules}\n]}}"), "user")
}

#[test]
fn a_complete_rule_parses() {
    let p = pack(
        r#"{"name": "r1", "category": "kv_pool", "source": "file.py: f",
            "match": {"tag": "kv*", "captured": false, "exported": false, "api": ["cudaMalloc", "cuMem*"],
                      "bytes": {"min": "1MiB", "max": 1073741824},
                      "native": {"object": "libnccl", "symbol": "nccl*", "innermost": true},
                      "python": [{"file": "a/b.py", "function": "C.f", "innermost": true}, {"function": "*.g"}],
                      "probe": "sizing_burst", "host_filled": false, "live": true}}"#,
    )
    .unwrap();
    assert_eq!(&*p.name, "t");
    assert!(!p.replace);
    let r = &p.rules[0];
    assert_eq!((&*r.name, &*r.category, &*r.source, r.line), ("r1", "kv_pool", "file.py: f", 3));
    let c = &r.cond;
    assert_eq!(c.tag.as_ref().unwrap().as_str(), "kv*");
    assert_eq!((c.captured, c.exported, c.host_filled, c.live), (Some(false), Some(false), Some(false), Some(true)));
    assert_eq!(c.api.len(), 2);
    assert_eq!(c.bytes, Some((1 << 20, 1 << 30)));
    let n = c.native.as_ref().unwrap();
    assert!(n.innermost && n.objects[0].matches("libnccl.so.2") && n.symbols[0].matches("ncclCommInitRank"));
    assert_eq!(c.python.len(), 2);
    assert!(c.python[0].innermost && !c.python[1].innermost);
    assert_eq!(c.probe, Some(ProbePos::SizingBurst));
    assert!(!c.insert_time());
}

#[test]
fn shorthand_forms() {
    let p = pack(
        r#"{"name": "n", "category": "comm", "match": {"native": ["libnccl*", "nvshmem"]}},
           {"name": "p", "category": "weights", "match": {"python": {"function": "Module._apply"}}},
           {"name": "all", "category": "other", "match": {}}"#,
    )
    .unwrap();
    let n = p.rules[0].cond.native.as_ref().unwrap();
    assert!(!n.innermost && n.symbols.is_empty() && n.objects.len() == 2);
    assert!(n.objects[1].matches("libnvshmem_host.so.3"), "no metacharacter: substring");
    assert!(p.rules[2].cond.insert_time());
    assert_eq!(p.rules.iter().map(|r| r.line).collect::<Vec<_>>(), [3, 4, 5]);
}

#[test]
fn sizes() {
    for (v, want) in [
        (json!(0), 0),
        (json!(4096), 4096),
        (json!("512"), 512),
        (json!("7B"), 7),
        (json!("64 KiB"), 64 << 10),
        (json!("1MiB"), 1 << 20),
        (json!("2GiB"), 2 << 30),
        (json!("3TiB"), 3 << 40),
    ] {
        assert_eq!(parse_size(&v), Ok(want), "{v}");
    }
    for v in [json!(-1), json!(1.5), json!("1MB"), json!("1.5GiB"), json!("GiB"), json!("99999999999TiB"), json!(null)]
    {
        assert!(parse_size(&v).is_err(), "{v}");
    }
}

/// Each bad file gives one error naming the right line.
#[test]
fn errors_name_the_line() {
    let cases: [(&str, &str); 20] = [
        ("{\"culedger_rules\": 1,\n\"rules\": [\n{\"name\": \"a\",\n}]}", "line 4: not valid JSON"),
        ("[1, 2]", "line 1: expected a JSON object"),
        ("{\"rules\": []}", "\"culedger_rules\": 1 is missing"),
        ("{\"culedger_rules\": 2, \"rules\": []}", "this culedger reads version 1"),
        ("{\"culedger_rules\": 1,\n\"rulez\": []}", "line 2: unknown key \"rulez\""),
        ("{\"culedger_rules\": 1,\n\"rules\": {}}", "line 2: \"rules\" must be an array"),
        ("{\"culedger_rules\": 1,\n\"replace\": \"yes\", \"rules\": []}", "line 2: \"replace\" must be true or false"),
        (
            "{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"ok\", \"category\": \"ipc\", \"match\": {}},\n\n{\"name\": \"bad\", \"category\": \"ipc\",\n \"match\": {\"fram\": 1}}]}",
            "line 4: rule 2 (\"bad\"): unknown condition \"fram\"",
        ),
        ("{\"culedger_rules\": 1, \"rules\": [\n 7]}", "line 2: rule 1: expected an object"),
        ("{\"culedger_rules\": 1, \"rules\": [\n{\"category\": \"ipc\", \"match\": {}}]}", "line 2: rule 1: \"name\" is missing"),
        ("{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"match\": {}}]}", "rule 1 (\"x\"): \"category\" is missing"),
        ("{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"a b\", \"match\": {}}]}", "the category \"a b\""),
        ("{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"ipc\"}]}", "\"match\" is missing"),
        (
            "{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"ipc\", \"match\": {\"bytes\": {\"min\": \"2GiB\", \"max\": \"1GiB\"}}}]}",
            "min (2147483648) is larger than max",
        ),
        ("{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"ipc\", \"match\": {\"probe\": \"early\"}}]}", "\"probe\" must be one of"),
        ("{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"ipc\", \"match\": {\"python\": {}}}]}", "needs \"file\", \"function\""),
        ("{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"ipc\", \"match\": {\"api\": \"\"}}]}", "empty pattern"),
        ("{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"ipc\", \"match\": {\"api\": []}}]}", "must not be an empty list"),
        (
            "{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"ipc\", \"match\": {}},\n{\"name\": \"x\", \"category\": \"ipc\", \"match\": {}}]}",
            "line 3: rule 2: the name \"x\" is already used at line 2",
        ),
        ("{\"culedger_rules\": 1, \"rules\": [\n{\"name\": \"x\", \"category\": \"ipc\", \"match\": {}, \"extra\": 1}]}", "unknown key \"extra\""),
    ];
    for (text, want) in cases {
        let err = parse_pack(text, "user").unwrap_err();
        assert!(err.contains(want), "{text}\n=> {err}\n(wanted {want})");
        assert!(err.starts_with("line "), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
}

#[test]
fn line_scanner_handles_strings_with_brackets_and_escapes() {
    let text = "{\"culedger_rules\": 1, \"comment\": \"[{,}] \\\" tricky\",\n \"rules\": [ {\"name\": \"a\", \"category\": \"ipc\", \"match\": {\"api\": \"x,]\"}},\n\n  {\"name\": \"b\", \"category\": \"ipc\",\n\"match\": {}} ]}";
    let p = parse_pack(text, "user").unwrap();
    assert_eq!(p.rules.iter().map(|r| r.line).collect::<Vec<_>>(), [2, 4]);
    assert_eq!(&*p.name, "user", "default pack name");
}
