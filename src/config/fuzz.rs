//! Property tests of the settings parser: no environment, however malformed, makes it panic or
//! produce settings outside their documented ranges; every valid value is taken as given; every
//! invalid one costs exactly one warning, on one line.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;

/// Any bytes (not only UTF-8), biased towards the characters the parsers look at.
fn raw_value() -> impl Strategy<Value = OsString> {
    let interesting = prop::collection::vec(
        prop_oneof![prop::sample::select(b"0123456789 \t\n\r-+.xXoO_eE/\\\"'".to_vec()), any::<u8>(),],
        0..40,
    );
    prop_oneof![
        interesting.prop_map(OsString::from_vec),
        "[0-9]{0,25}".prop_map(OsString::from),
        "[ \t]*[0-7]{0,6}[ \t]*".prop_map(OsString::from),
        prop::sample::select(vec!["off", "WARN", "Info", "debug ", "verbose", ""]).prop_map(OsString::from),
    ]
}

fn env_map() -> impl Strategy<Value = HashMap<&'static str, OsString>> {
    prop::collection::hash_map(prop::sample::select(vec![ENV_OUT, ENV_FLUSH_MS, ENV_LOG, ENV_MODE]), raw_value(), 0..5)
}

fn cwd() -> impl Strategy<Value = Option<PathBuf>> {
    prop_oneof![
        Just(None),
        "/[a-z/.]{0,20}".prop_map(|s| Some(PathBuf::from(s))),
        prop::collection::vec(any::<u8>(), 1..20).prop_map(|b| Some(PathBuf::from(OsString::from_vec(b)))),
    ]
}

fn parse_with(env: &HashMap<&'static str, OsString>, cwd: Option<&Path>) -> Config {
    Config::parse(|name| env.get(name).cloned(), cwd)
}

/// Would this value be ignored as unset (empty)?
fn set(env: &HashMap<&'static str, OsString>, name: &str) -> bool {
    env.get(name).is_some_and(|v| !v.is_empty())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_environment_gives_settings_in_range(env in env_map(), cwd in cwd()) {
        let c = parse_with(&env, cwd.as_deref());
        prop_assert!(c.flush_ms == 0 || (MIN_FLUSH_MS..=MAX_FLUSH_MS).contains(&c.flush_ms));
        prop_assert!(c.mode <= 0o777 && c.mode & 0o600 == 0o600, "mode {:o}", c.mode);
        if cwd.as_deref().is_some_and(Path::is_absolute) {
            prop_assert!(c.out_dir.is_absolute(), "{:?}", c.out_dir);
        }
        // One warning per ignored variable at most, each a single line naming its variable.
        prop_assert!(c.warnings.len() <= 7);
        for w in &c.warnings {
            prop_assert!(!w.contains('\n') && !w.contains('\r'), "{w:?}");
            prop_assert!(w.starts_with("CULEDGER_"), "{w:?}");
        }
        // The settings object is always complete JSON.
        let j = c.settings_json();
        prop_assert!(serde_json::to_string(&j).is_ok());
        prop_assert_eq!(j.as_object().map(|o| o.len()), Some(7));
    }

    #[test]
    fn each_bad_value_warns_once_and_keeps_the_default(env in env_map()) {
        let c = parse_with(&env, Some(Path::new("/w")));
        let warned = |name: &str| c.warnings.iter().filter(|w| w.starts_with(name)).count();
        for (name, default_ok) in [
            (ENV_FLUSH_MS, c.flush_ms == DEFAULT_FLUSH_MS),
            (ENV_LOG, c.log == DEFAULT_LOG),
            (ENV_MODE, c.mode == DEFAULT_MODE),
        ] {
            let n = warned(&format!("{name}="));
            prop_assert!(n <= 1, "{name}: {:?}", c.warnings);
            if n == 1 {
                prop_assert!(set(&env, name) && default_ok, "{name}: warned but not defaulted: {:?}", c);
            }
            if !set(&env, name) {
                prop_assert_eq!(n, 0);
                prop_assert!(default_ok);
            }
        }
    }

    #[test]
    fn valid_values_are_taken_as_given(
        ms in prop_oneof![Just(0u64), MIN_FLUSH_MS..=MAX_FLUSH_MS],
        mode in (0u32..=0o177).prop_map(|low| 0o600 | low),
        pad in "[ \t]{0,3}",
        digits in 3usize..=4,
        level in prop::sample::select(Level::ALL.to_vec()),
    ) {
        let mut env = HashMap::new();
        env.insert(ENV_FLUSH_MS, OsString::from(format!("{pad}{ms}{pad}")));
        env.insert(ENV_MODE, OsString::from(format!("{pad}{mode:0digits$o}{pad}")));
        env.insert(ENV_LOG, OsString::from(level.name().to_uppercase()));
        let c = parse_with(&env, Some(Path::new("/w")));
        prop_assert_eq!((c.flush_ms, c.mode, c.log), (ms, mode, level));
        prop_assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn level_names_never_panic(s in ".{0,20}") {
        let parsed = Level::parse(&s);
        prop_assert_eq!(parsed.is_some(), Level::ALL.iter().any(|l| l.name().eq_ignore_ascii_case(s.trim())));
    }
}
