use super::*;

fn pack(rules: &str) -> Result<Pack, String> {
    parse_pack(&format!("{{\"culedger_rules\": 1, \"pack\": \"t\",\n\"rules\": [\n{rules}\n]}}"), "user")
}

#[test]
fn build_numbers_user_categories_after_the_builtin_ones() {
    let user = pack(
        r#"{"name": "a", "category": "lora", "match": {"tag": "lora"}},
           {"name": "b", "category": "weights", "match": {"python": {"function": "f"}}},
           {"name": "c", "category": "$tag", "match": {"tag": "*"}},
           {"name": "d", "category": "lora", "match": {}}"#,
    )
    .unwrap();
    let set = RuleSet::build(&[user]).unwrap();
    assert_eq!(set.categories().len(), 7);
    assert_eq!(set.category("lora"), Some(CatId(6)));
    assert_eq!(set.category_name(CatId::KV_POOL), "kv_pool");
    assert_eq!(set.category("nope"), None);
    assert_eq!(set.rules[0].category, RuleCategory::Fixed(CatId(6)));
    assert_eq!(set.rules[2].category, RuleCategory::FromTag);
    assert_eq!(set.insert_time, [0, 2, 3], "b needs frames");
    assert_eq!(set.packs[0], PackInfo { name: "t".into(), source: "".into(), rules: 4 });
}

#[test]
fn too_many_categories_is_an_error() {
    let rules: Vec<String> =
        (0..60).map(|i| format!("{{\"name\": \"r{i}\", \"category\": \"c{i}\", \"match\": {{}}}}")).collect();
    let err = RuleSet::build(&[pack(&rules.join(",\n")).unwrap()]).unwrap_err();
    assert!(err.contains("more than 64 categories"), "{err}");
}
