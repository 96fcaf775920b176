//! Settings from `CULEDGER_*` environment variables, read once per process.
//!
//! `get()` parses the environment on first use and caches the result; hooks never call
//! `getenv` per call. Malformed or absurd values fall back to the default with a one-line
//! warning; the warnings are printed once and kept in [`Config::warnings`] so the report
//! can list them (`report::activate` copies them into the ledger's `health.warnings`).
//! See `docs/configuration.md`.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use libc::c_int;
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
/// Smallest allocation that gets a call site, when `CULEDGER_SITE_MIN` is not set (1 MiB).
pub const DEFAULT_SITE_MIN: u64 = 1 << 20;
/// Python frames kept per call site when `CULEDGER_PY_FRAMES` is not set.
pub const DEFAULT_PY_FRAMES: usize = 64;
/// Most Python frames a call site may keep.
pub const MAX_PY_FRAMES: usize = 1024;
/// Permission bits of report files when `CULEDGER_MODE` is not set or invalid: the user only.
pub const DEFAULT_MODE: u32 = 0o600;

/// Environment variable names.
pub const ENV_OUT: &str = "CULEDGER_OUT";
pub const ENV_FLUSH_MS: &str = "CULEDGER_FLUSH_MS";
pub const ENV_LOG: &str = "CULEDGER_LOG";
/// A rule file extending or replacing the shipped classification rules (read by
/// `classify::init`, which reports its problems; see docs/categories.md).
pub const ENV_RULES: &str = "CULEDGER_RULES";
pub const ENV_SITE_MIN: &str = "CULEDGER_SITE_MIN";
pub const ENV_PY_FRAMES: &str = "CULEDGER_PY_FRAMES";
pub const ENV_SIGNALS: &str = "CULEDGER_SIGNALS";

/// Signals whose default action culedger may take over to write the final report first,
/// when `CULEDGER_SIGNALS` is not set.
pub const DEFAULT_SIGNALS: &[c_int] = &[libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Signals `CULEDGER_SIGNALS` may name: asynchronous ones whose default action ends the
/// process. Faults (`SEGV`, `BUS`, `ILL`, `FPE`, `ABRT`, ...) are not among them: a process
/// that crashed must not wait for a report.
pub const CATCHABLE_SIGNALS: &[(&str, c_int)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
];

/// The name of a signal of [`CATCHABLE_SIGNALS`] (`"TERM"`), or its number as text.
pub fn signal_name(sig: c_int) -> String {
    CATCHABLE_SIGNALS.iter().find(|(_, s)| *s == sig).map_or_else(|| sig.to_string(), |(n, _)| (*n).to_string())
}
pub const ENV_MODE: &str = "CULEDGER_MODE";

/// The effective settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Absolute directory for the reports (made absolute against the working
    /// directory at first use; left relative only if the working directory is unknown).
    pub out_dir: PathBuf,
    /// Period of the flush thread in milliseconds; 0 means write only at exit.
    pub flush_ms: u64,
    /// Verbosity of stderr logging.
    pub log: Level,
    /// Allocations of at least this many bytes get a call site (0: all).
    pub site_min: u64,
    /// Python frames kept per call site (0: none).
    pub py_frames: usize,
    /// Terminating signals culedger catches while the program leaves them at their default
    /// action, to write the final report before the process ends (empty: none).
    pub signals: Vec<c_int>,
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
            site_min: DEFAULT_SITE_MIN,
            py_frames: DEFAULT_PY_FRAMES,
            signals: DEFAULT_SIGNALS.to_vec(),
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

        let site_min = match var(ENV_SITE_MIN) {
            None => DEFAULT_SITE_MIN,
            Some(raw) => parse_size(&raw.to_string_lossy()).unwrap_or_else(|| {
                warnings.push(format!(
                    "{ENV_SITE_MIN}={:?} is not a size in bytes (like 1048576, 64KiB, 1MiB, 0); using 1MiB",
                    raw.to_string_lossy()
                ));
                DEFAULT_SITE_MIN
            }),
        };

        let py_frames = match var(ENV_PY_FRAMES) {
            None => DEFAULT_PY_FRAMES,
            Some(raw) => match raw.to_string_lossy().trim().parse::<usize>() {
                Ok(n) if n <= MAX_PY_FRAMES && raw.to_string_lossy().trim().bytes().all(|b| b.is_ascii_digit()) => n,
                _ => {
                    warnings.push(format!(
                        "{ENV_PY_FRAMES}={:?} is not a whole number from 0 to {MAX_PY_FRAMES}; using {DEFAULT_PY_FRAMES}",
                        raw.to_string_lossy()
                    ));
                    DEFAULT_PY_FRAMES
                }
            },
        };

        let signals = match var(ENV_SIGNALS) {
            None => DEFAULT_SIGNALS.to_vec(),
            Some(raw) => parse_signals(&raw.to_string_lossy()).unwrap_or_else(|why| {
                let default: Vec<String> = DEFAULT_SIGNALS.iter().map(|&s| signal_name(s)).collect();
                warnings.push(format!("{ENV_SIGNALS}={:?} {why}; using {}", raw.to_string_lossy(), default.join(",")));
                DEFAULT_SIGNALS.to_vec()
            }),
        };

        let mode = match var(ENV_MODE) {
            None => DEFAULT_MODE,
            Some(raw) => parse_mode(&raw.to_string_lossy()).unwrap_or_else(|why| {
                warnings.push(format!("{ENV_MODE}={:?} {why}; using {DEFAULT_MODE:04o}", raw.to_string_lossy()));
                DEFAULT_MODE
            }),
        };

        Config { out_dir, flush_ms, log, site_min, py_frames, signals, mode, warnings }
    }

    /// The report's `settings` object: `out_dir`, `flush_ms`, `log`, `site_min_bytes`,
    /// `py_frames`, `signals`, `mode` (octal string).
    pub fn settings(&self) -> culedger_format::report::Settings {
        culedger_format::report::Settings {
            out_dir: self.out_dir.to_string_lossy().into_owned(),
            flush_ms: self.flush_ms,
            log: self.log.name().to_string(),
            site_min_bytes: self.site_min,
            py_frames: self.py_frames as u64,
            signals: self.signals.iter().map(|&s| signal_name(s)).collect(),
            mode: format!("{:04o}", self.mode),
        }
    }

    /// [`Self::settings`] as JSON.
    pub fn settings_json(&self) -> serde_json::Value {
        serde_json::to_value(self.settings()).unwrap_or_default()
    }
}

/// A size: a whole number of bytes, optionally followed by `KiB`, `MiB` or `GiB` (also `K`,
/// `M`, `G`, any case); blanks around it are ignored. None for anything else or an overflow.
pub fn parse_size(raw: &str) -> Option<u64> {
    let s = raw.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let n: u64 = s[..digits].parse().ok()?;
    let unit = s[digits..].trim().to_ascii_lowercase();
    let mult: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// `CULEDGER_SIGNALS`: `off` (or `none`), or signal names of [`CATCHABLE_SIGNALS`] separated
/// by commas or blanks, with or without `SIG`, any case (`TERM,INT`, `sigterm sigusr1`).
fn parse_signals(raw: &str) -> Result<Vec<c_int>, String> {
    let words: Vec<&str> = raw.split(|c: char| c == ',' || c.is_whitespace()).filter(|w| !w.is_empty()).collect();
    if let [one] = words[..] {
        if one.eq_ignore_ascii_case("off") || one.eq_ignore_ascii_case("none") {
            return Ok(Vec::new());
        }
    }
    if words.is_empty() {
        return Err("names no signal".into());
    }
    let mut out = Vec::new();
    for w in words {
        let upper = w.to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        let Some(&(_, sig)) = CATCHABLE_SIGNALS.iter().find(|(n, _)| *n == name) else {
            let names: Vec<&str> = CATCHABLE_SIGNALS.iter().map(|(n, _)| *n).collect();
            return Err(format!("names {w:?}, which is not one of off, {}", names.join(", ")));
        };
        if !out.contains(&sig) {
            out.push(sig);
        }
    }
    Ok(out)
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

/// `CULEDGER_RULES` from an environment lookup, made absolute against `cwd` like the
/// output directory (None when unset or empty).
pub fn rules_path(env: impl Fn(&str) -> Option<OsString>, cwd: Option<&Path>) -> Option<PathBuf> {
    let p = PathBuf::from(env(ENV_RULES).filter(|v| !v.is_empty())?);
    Some(match cwd {
        Some(cwd) if p.is_relative() => normalize(&cwd.join(&p)),
        _ => p,
    })
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
    fn rules_path_is_made_absolute() {
        let env = |v: &'static str| move |name: &str| (name == ENV_RULES).then(|| OsString::from(v));
        let cwd = Some(Path::new("/work/dir"));
        assert_eq!(rules_path(|_| None, cwd), None);
        assert_eq!(rules_path(env(""), cwd), None);
        assert_eq!(rules_path(env("my/./rules.json"), cwd), Some(PathBuf::from("/work/dir/my/rules.json")));
        assert_eq!(rules_path(env("/etc/r.json"), cwd), Some(PathBuf::from("/etc/r.json")));
        assert_eq!(rules_path(env("r.json"), None), Some(PathBuf::from("r.json")));
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
            serde_json::json!({"out_dir": "/o", "flush_ms": 0, "log": "info", "site_min_bytes": 1048576, "py_frames": 64, "signals": ["TERM", "INT", "HUP"], "mode": "0600"})
        );
        let c = parse(&[(ENV_MODE, "644")]);
        assert_eq!(c.settings_json()["mode"], "0644");
    }

    #[test]
    fn site_settings() {
        let c = parse(&[]);
        assert_eq!((c.site_min, c.py_frames), (1 << 20, 64));
        assert_eq!(parse(&[(ENV_SITE_MIN, "0")]).site_min, 0);
        assert_eq!(parse(&[(ENV_SITE_MIN, " 4096 ")]).site_min, 4096);
        assert_eq!(parse(&[(ENV_SITE_MIN, "64KiB")]).site_min, 64 << 10);
        assert_eq!(parse(&[(ENV_SITE_MIN, "2 mib")]).site_min, 2 << 20);
        assert_eq!(parse(&[(ENV_SITE_MIN, "1G")]).site_min, 1 << 30);
        assert_eq!(parse(&[(ENV_PY_FRAMES, "0")]).py_frames, 0);
        assert_eq!(parse(&[(ENV_PY_FRAMES, "1024")]).py_frames, 1024);
        for bad in ["-1", "1.5MiB", "MiB", "1TiB", "99999999999999999999", "1 MiB x"] {
            let c = parse(&[(ENV_SITE_MIN, bad)]);
            assert_eq!(c.site_min, 1 << 20, "{bad}");
            assert_eq!(c.warnings.len(), 1, "{bad}");
            assert!(c.warnings[0].starts_with("CULEDGER_SITE_MIN="), "{:?}", c.warnings);
        }
        for bad in ["-1", "abc", "1025", "+3", "2.0"] {
            let c = parse(&[(ENV_PY_FRAMES, bad)]);
            assert_eq!(c.py_frames, 64, "{bad}");
            assert_eq!(
                c.warnings,
                vec![format!("CULEDGER_PY_FRAMES={bad:?} is not a whole number from 0 to 1024; using 64")]
            );
        }
    }

    #[test]
    fn signals_setting() {
        assert_eq!(parse(&[]).signals, [libc::SIGTERM, libc::SIGINT, libc::SIGHUP]);
        assert_eq!(parse(&[(ENV_SIGNALS, "")]).signals, parse(&[]).signals, "empty means unset");
        for off in ["off", "OFF", " none "] {
            let c = parse(&[(ENV_SIGNALS, off)]);
            assert!(c.signals.is_empty() && c.warnings.is_empty(), "{off}");
        }
        let c = parse(&[(ENV_SIGNALS, "term, SIGusr1 TERM,,quit")]);
        assert_eq!(c.signals, [libc::SIGTERM, libc::SIGUSR1, libc::SIGQUIT]);
        assert!(c.warnings.is_empty());
        assert_eq!(c.settings_json()["signals"], serde_json::json!(["TERM", "USR1", "QUIT"]));
        for bad in ["SEGV", "TERM,KILL", "15", "off,TERM", ",", "sigabrt"] {
            let c = parse(&[(ENV_SIGNALS, bad)]);
            assert_eq!(c.signals, DEFAULT_SIGNALS, "{bad}");
            assert_eq!(c.warnings.len(), 1, "{bad}");
            assert!(c.warnings[0].starts_with("CULEDGER_SIGNALS="), "{:?}", c.warnings);
            assert!(c.warnings[0].ends_with("; using TERM,INT,HUP"), "{:?}", c.warnings);
        }
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
mod fuzz;
