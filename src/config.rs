//! Settings from `CULEDGER_*` environment variables, read once per process.
//!
//! `get()` parses the environment on first use and caches the result; hooks never call
//! `getenv` per call. Malformed or absurd values fall back to the default with a one-line
//! warning; the warnings are printed once and kept in [`Config::warnings`] so the report
//! can list them (`report::activate` copies them into the ledger's `health.warnings`).
//! See `docs/configuration.md`.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use once_cell::sync::OnceCell;

use crate::log::Level;

/// Report directory used when `CULEDGER_OUT` is not set.
pub const DEFAULT_OUT_DIR: &str = "./culedger-out";
/// Flush period used when `CULEDGER_FLUSH_MS` is not set or invalid.
pub const DEFAULT_FLUSH_MS: u64 = 1000;
/// Smallest accepted non-zero flush period: faster would rewrite the file continuously.
pub const MIN_FLUSH_MS: u64 = 10;
/// Largest accepted flush period (one hour); longer is almost certainly a typo.
pub const MAX_FLUSH_MS: u64 = 3_600_000;
/// Log level used when `CULEDGER_LOG` is not set or invalid.
pub const DEFAULT_LOG: Level = Level::Warn;
/// Permission bits of report files when `CULEDGER_MODE` is not set or invalid: the user only.
pub const DEFAULT_MODE: u32 = 0o600;

/// Environment variable names.
pub const ENV_OUT: &str = "CULEDGER_OUT";
pub const ENV_FLUSH_MS: &str = "CULEDGER_FLUSH_MS";
pub const ENV_LOG: &str = "CULEDGER_LOG";
pub const ENV_MODE: &str = "CULEDGER_MODE";

/// The effective settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Absolute directory for `culedger-<pid>.json` (made absolute against the working
    /// directory at first use; left relative only if the working directory is unknown).
    pub out_dir: PathBuf,
    /// Period of the flush thread in milliseconds; 0 means write only at exit.
    pub flush_ms: u64,
    /// Verbosity of stderr logging.
    pub log: Level,
    /// Permission bits of the report files (`0o600` unless `CULEDGER_MODE` says otherwise).
    pub mode: u32,
    /// One line per ignored setting, in variable order.
    pub warnings: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            out_dir: PathBuf::from(DEFAULT_OUT_DIR),
            flush_ms: DEFAULT_FLUSH_MS,
            log: DEFAULT_LOG,
            mode: DEFAULT_MODE,
            warnings: Vec::new(),
        }
    }
}

impl Config {
    /// Parse settings from an environment lookup and the working directory (`None` when it
    /// cannot be determined). Pure: prints nothing (see [`get`]).
    pub fn parse(env: impl Fn(&str) -> Option<OsString>, cwd: Option<&Path>) -> Config {
        let mut warnings = Vec::new();
        // An empty variable is treated like an unset one (the usual `VAR= cmd` idiom).
        let var = |name: &str| env(name).filter(|v| !v.is_empty());

        let out_dir = var(ENV_OUT).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_OUT_DIR));
        let out_dir = match cwd {
            _ if out_dir.is_absolute() => normalize(&out_dir),
            Some(cwd) => normalize(&cwd.join(&out_dir)),
            None => {
                warnings.push(format!(
                    "{ENV_OUT}: the working directory is unknown; using the relative path {:?} as is",
                    out_dir.to_string_lossy()
                ));
                out_dir
            }
        };

        let flush_ms = match var(ENV_FLUSH_MS) {
            None => DEFAULT_FLUSH_MS,
            Some(raw) => parse_flush_ms(&raw.to_string_lossy()).unwrap_or_else(|why| {
                warnings.push(format!("{ENV_FLUSH_MS}={:?} {why}; using {DEFAULT_FLUSH_MS}", raw.to_string_lossy()));
                DEFAULT_FLUSH_MS
            }),
        };

        let log = match var(ENV_LOG) {
            None => DEFAULT_LOG,
            Some(raw) => Level::parse(&raw.to_string_lossy()).unwrap_or_else(|| {
                warnings.push(format!(
                    "{ENV_LOG}={:?} is not one of off, warn, info, debug; using {}",
                    raw.to_string_lossy(),
                    DEFAULT_LOG.name()
                ));
                DEFAULT_LOG
            }),
        };

        let mode = match var(ENV_MODE) {
            None => DEFAULT_MODE,
            Some(raw) => parse_mode(&raw.to_string_lossy()).unwrap_or_else(|why| {
                warnings.push(format!("{ENV_MODE}={:?} {why}; using {DEFAULT_MODE:04o}", raw.to_string_lossy()));
                DEFAULT_MODE
            }),
        };

        Config { out_dir, flush_ms, log, mode, warnings }
    }

    /// The report's `settings` object: `out_dir`, `flush_ms`, `log`, `mode` (octal string).
    pub fn settings_json(&self) -> serde_json::Value {
        serde_json::json!({
            "out_dir": self.out_dir.to_string_lossy(),
            "flush_ms": self.flush_ms,
            "log": self.log.name(),
            "mode": format!("{:04o}", self.mode),
        })
    }
}

/// `Ok(bits)` for octal permission bits (`600`, `0640`, blanks around ignored) that give the
/// owner read and write and set nothing beyond `0777`; else why not.
fn parse_mode(raw: &str) -> Result<u32, String> {
    let s = raw.trim();
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err("is not an octal file mode such as 0600 or 0640".into());
    }
    let mode = u32::from_str_radix(s, 8).map_err(|e| e.to_string())?;
    if mode > 0o777 {
        return Err("sets setuid, setgid or sticky bits".into());
    }
    if mode & 0o600 != 0o600 {
        return Err("does not let the owner read and write the report".into());
    }
    Ok(mode)
}

/// `Ok(ms)` for `0` or a whole number in `MIN_FLUSH_MS..=MAX_FLUSH_MS`, else why not.
fn parse_flush_ms(raw: &str) -> Result<u64, String> {
    let s = raw.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("is not a whole number of milliseconds".into());
    }
    match s.parse::<u64>() {
        Ok(0) => Ok(0),
        Ok(ms) if (MIN_FLUSH_MS..=MAX_FLUSH_MS).contains(&ms) => Ok(ms),
        _ => Err(format!("is out of range (0, or {MIN_FLUSH_MS} to {MAX_FLUSH_MS})")),
    }
}

/// Drop `.` components and trailing slashes (`..` is kept: it may cross a symlink).
fn normalize(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, Component::CurDir)).collect()
}

static CONFIG: OnceCell<Config> = OnceCell::new();

/// The process-wide settings, parsed from the environment on first call. The first call
/// sets the log level and prints each warning once.
pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| {
        let cwd = std::env::current_dir().ok();
        let config = Config::parse(|name| std::env::var_os(name), cwd.as_deref());
        crate::log::set_level(config.log);
        for w in &config.warnings {
            // Not `crate::warn!`: that would consult this very cell while it initializes.
            crate::log::log_at(config.log, Level::Warn, format_args!("{w}"));
        }
        config
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Config {
        let map: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        Config::parse(|name| map.get(name).cloned(), Some(Path::new("/work/dir")))
    }

    #[test]
    fn defaults_when_unset() {
        let c = parse(&[]);
        assert_eq!(c.out_dir, PathBuf::from("/work/dir/culedger-out"));
        assert_eq!(c.flush_ms, 1000);
        assert_eq!(c.log, Level::Warn);
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn empty_values_mean_unset() {
        let c = parse(&[(ENV_OUT, ""), (ENV_FLUSH_MS, ""), (ENV_LOG, "")]);
        assert_eq!(c, Config { out_dir: "/work/dir/culedger-out".into(), ..Config::default() });
    }

    #[test]
    fn good_values() {
        let c = parse(&[(ENV_OUT, "/tmp/x/"), (ENV_FLUSH_MS, " 250 "), (ENV_LOG, "DEBUG")]);
        assert_eq!(c.out_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.flush_ms, 250);
        assert_eq!(c.log, Level::Debug);
        assert!(c.warnings.is_empty());
        assert_eq!(parse(&[(ENV_FLUSH_MS, "0")]).flush_ms, 0);
        assert_eq!(parse(&[(ENV_FLUSH_MS, "10")]).flush_ms, 10);
        assert_eq!(parse(&[(ENV_FLUSH_MS, "3600000")]).flush_ms, 3_600_000);
        assert_eq!(parse(&[(ENV_LOG, "off")]).log, Level::Off);
        assert_eq!(parse(&[(ENV_LOG, "info")]).log, Level::Info);
    }

    #[test]
    fn relative_out_dir_is_made_absolute() {
        assert_eq!(parse(&[(ENV_OUT, "reports")]).out_dir, PathBuf::from("/work/dir/reports"));
        assert_eq!(parse(&[(ENV_OUT, "./a/./b")]).out_dir, PathBuf::from("/work/dir/a/b"));
        assert_eq!(parse(&[(ENV_OUT, "../up")]).out_dir, PathBuf::from("/work/dir/../up"));
        let c = Config::parse(|name| (name == ENV_OUT).then(|| "rel".into()), None);
        assert_eq!(c.out_dir, PathBuf::from("rel"));
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("working directory is unknown"), "{:?}", c.warnings);
    }

    #[test]
    fn malformed_flush_ms_warns_and_defaults() {
        for bad in ["abc", "-5", "1e3", "1000ms", "1.5", "+7", "99999999999999999999999"] {
            let c = parse(&[(ENV_FLUSH_MS, bad)]);
            assert_eq!(c.flush_ms, DEFAULT_FLUSH_MS, "{bad}");
            assert_eq!(c.warnings.len(), 1, "{bad}");
            assert!(c.warnings[0].starts_with("CULEDGER_FLUSH_MS="), "{:?}", c.warnings);
            assert!(c.warnings[0].ends_with("; using 1000"), "{:?}", c.warnings);
        }
        assert_eq!(
            parse(&[(ENV_FLUSH_MS, "abc")]).warnings,
            vec!["CULEDGER_FLUSH_MS=\"abc\" is not a whole number of milliseconds; using 1000".to_string()]
        );
    }

    #[test]
    fn absurd_flush_ms_warns_and_defaults() {
        for bad in ["1", "9", "3600001", "18446744073709551615"] {
            let c = parse(&[(ENV_FLUSH_MS, bad)]);
            assert_eq!(c.flush_ms, DEFAULT_FLUSH_MS, "{bad}");
            assert_eq!(c.warnings.len(), 1);
            assert!(c.warnings[0].contains("out of range (0, or 10 to 3600000)"), "{:?}", c.warnings);
        }
    }

    #[test]
    fn malformed_log_warns_and_defaults() {
        let c = parse(&[(ENV_LOG, "verbose")]);
        assert_eq!(c.log, Level::Warn);
        assert_eq!(
            c.warnings,
            vec!["CULEDGER_LOG=\"verbose\" is not one of off, warn, info, debug; using warn".to_string()]
        );
    }

    #[test]
    fn mode_defaults_to_the_user_only_and_accepts_octal() {
        assert_eq!(parse(&[]).mode, 0o600);
        for (raw, mode) in [("0600", 0o600), ("600", 0o600), (" 0640 ", 0o640), ("644", 0o644), ("0777", 0o777)] {
            let c = parse(&[(ENV_MODE, raw)]);
            assert_eq!((c.mode, c.warnings.len()), (mode, 0), "{raw:?}");
        }
    }

    #[test]
    fn malformed_mode_warns_and_defaults() {
        for (bad, why) in [
            ("rw-r--r--", "is not an octal file mode"),
            ("0o644", "is not an octal file mode"),
            ("0800", "is not an octal file mode"),
            ("00644", "is not an octal file mode"),
            ("-600", "is not an octal file mode"),
            ("4600", "sets setuid, setgid or sticky bits"),
            ("1777", "sets setuid, setgid or sticky bits"),
            ("0400", "does not let the owner read and write"),
            ("0044", "does not let the owner read and write"),
            ("0", "does not let the owner read and write"),
        ] {
            let c = parse(&[(ENV_MODE, bad)]);
            assert_eq!(c.mode, DEFAULT_MODE, "{bad}");
            assert_eq!(c.warnings.len(), 1, "{bad}");
            assert!(c.warnings[0].starts_with("CULEDGER_MODE="), "{:?}", c.warnings);
            assert!(c.warnings[0].contains(why) && c.warnings[0].ends_with("; using 0600"), "{:?}", c.warnings);
        }
    }

    #[test]
    fn warnings_are_collected_in_variable_order() {
        let c = parse(&[(ENV_LOG, "loud"), (ENV_FLUSH_MS, "x")]);
        assert_eq!(c.warnings.len(), 2);
        assert!(c.warnings[0].starts_with("CULEDGER_FLUSH_MS"));
        assert!(c.warnings[1].starts_with("CULEDGER_LOG"));
    }

    #[test]
    fn settings_json_fields() {
        let c = parse(&[(ENV_OUT, "/o"), (ENV_FLUSH_MS, "0"), (ENV_LOG, "info")]);
        assert_eq!(
            c.settings_json(),
            serde_json::json!({"out_dir": "/o", "flush_ms": 0, "log": "info", "mode": "0600"})
        );
        let c = parse(&[(ENV_MODE, "644")]);
        assert_eq!(c.settings_json()["mode"], "0644");
    }

    #[test]
    fn global_config_is_parsed_once_and_sets_the_log_level() {
        let a = get() as *const Config;
        let b = get() as *const Config;
        assert_eq!(a, b);
        assert!(get().out_dir.is_absolute());
        assert_eq!(crate::log::enabled(Level::Warn), get().log >= Level::Warn);
    }
}

#[cfg(test)]
#[path = "config_fuzz.rs"]
mod fuzz;
