//! Logging to stderr, only when asked (`CULEDGER_LOG`).
//!
//! Every message is one line `culedger: <message>\n`, formatted into a fixed stack buffer
//! (long messages are truncated, ending in `...`) and written to fd 2 with `libc::write`.
//! Nothing here takes the std stdio locks (a hook may run while the host holds them),
//! allocates, or panics.
//!
//! Use the macros: `crate::warn!`, `crate::info!`, `crate::debug!` (format-style), and
//! `crate::warn_once!` (at most once per call site and process). The function forms
//! [`warn`], [`info`], [`debug`], [`warn_once`] take `format_args!`.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Verbosity, ordered: a message of level `L` is printed when `L <= ` the configured level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Level {
    /// Print nothing.
    Off = 0,
    /// Problems culedger noticed (the default).
    Warn = 1,
    /// Lifecycle: activation, report paths.
    Info = 2,
    /// Everything, for debugging culedger itself.
    Debug = 3,
}

impl Level {
    /// All levels, in order.
    pub const ALL: [Level; 4] = [Level::Off, Level::Warn, Level::Info, Level::Debug];

    /// The name used in `CULEDGER_LOG` and in the report's `settings.log`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Off => "off",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    /// Parse a level name (ASCII case-insensitive, surrounding blanks ignored).
    pub fn parse(s: &str) -> Option<Level> {
        let s = s.trim();
        Level::ALL.into_iter().find(|l| l.name().eq_ignore_ascii_case(s))
    }

    fn from_u8(v: u8) -> Option<Level> {
        Level::ALL.get(usize::from(v)).copied()
    }
}

/// The active level, or `UNSET` until the configuration has been read.
static LEVEL: AtomicU8 = AtomicU8::new(UNSET);
const UNSET: u8 = u8::MAX;

/// Set the active level (done by `config::get()` when it parses the environment).
pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Would a message of `level` be printed? Reads the configuration on first use.
pub fn enabled(level: Level) -> bool {
    if level == Level::Off {
        return false;
    }
    let mut current = LEVEL.load(Ordering::Relaxed);
    if current == UNSET {
        // Parsing the configuration sets LEVEL (and never logs through this path).
        let _ = crate::config::get();
        current = LEVEL.load(Ordering::Relaxed);
    }
    Level::from_u8(current).is_some_and(|threshold| passes(level, threshold))
}

/// Is a message of `level` printed under the configured `threshold`?
fn passes(level: Level, threshold: Level) -> bool {
    level != Level::Off && level <= threshold
}

/// Size of the per-message stack buffer, newline included.
pub const LINE_MAX: usize = 1024;
const PREFIX: &str = "culedger: ";
const ELLIPSIS: &str = "...";

/// A fixed buffer that formats into itself and silently truncates (on a char boundary).
struct LineBuf {
    buf: [u8; LINE_MAX],
    len: usize,
    truncated: bool,
}

impl LineBuf {
    fn new() -> Self {
        LineBuf { buf: [0; LINE_MAX], len: 0, truncated: false }
    }

    /// Room for text, keeping space for the ellipsis and the newline.
    fn cap() -> usize {
        LINE_MAX - ELLIPSIS.len() - 1
    }

    fn push_raw(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        self.buf[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }

    /// The finished line: text, `...` if truncated, newline. Newlines inside the message
    /// are turned into spaces so that one message is one line.
    fn finish(&mut self) -> &[u8] {
        for b in &mut self.buf[..self.len] {
            if *b == b'\n' || *b == b'\r' {
                *b = b' ';
            }
        }
        if self.truncated {
            self.push_raw(ELLIPSIS.as_bytes());
        }
        self.push_raw(b"\n");
        &self.buf[..self.len]
    }
}

impl fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.truncated {
            return Ok(());
        }
        let room = Self::cap() - self.len;
        let take = if s.len() <= room {
            s.len()
        } else {
            self.truncated = true;
            // Largest char boundary <= room.
            (0..=room).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
        };
        self.push_raw(&s.as_bytes()[..take]);
        Ok(())
    }
}

/// Format `culedger: <args>\n` into a stack buffer and hand the bytes to `sink`.
fn format_line(args: fmt::Arguments<'_>, sink: impl FnOnce(&[u8])) {
    let mut line = LineBuf::new();
    let _ = line.write_str(PREFIX);
    // A Display impl returning Err just ends the message early.
    let _ = line.write_fmt(args);
    sink(line.finish());
}

/// Write all of `bytes` to fd 2, retrying on EINTR and short writes; errors are dropped.
fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe a live byte slice.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[(n as usize).min(bytes.len())..];
        } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        } else {
            return;
        }
    }
}

/// Print one line at `level` if enabled.
pub fn log(level: Level, args: fmt::Arguments<'_>) {
    if enabled(level) {
        format_line(args, write_stderr);
    }
}

/// Print one line when the configured level is `threshold` or more verbose, without
/// consulting the configuration (used while the configuration itself is being parsed).
pub(crate) fn log_at(threshold: Level, level: Level, args: fmt::Arguments<'_>) {
    if passes(level, threshold) {
        format_line(args, write_stderr);
    }
}

/// A warning line (see [`Level::Warn`]).
pub fn warn(args: fmt::Arguments<'_>) {
    log(Level::Warn, args)
}

/// An informational line (see [`Level::Info`]).
pub fn info(args: fmt::Arguments<'_>) {
    log(Level::Info, args)
}

/// A debug line (see [`Level::Debug`]).
pub fn debug(args: fmt::Arguments<'_>) {
    log(Level::Debug, args)
}

/// Warn at most once per `flag` (per process): returns true for the call that claimed the
/// flag (whether or not the line was printed, so callers can also record it elsewhere).
pub fn warn_once(flag: &'static AtomicBool, args: fmt::Arguments<'_>) -> bool {
    if flag.swap(true, Ordering::Relaxed) {
        return false;
    }
    warn(args);
    true
}

/// `crate::warn!("fmt", args..)`: one `culedger: ...` line on stderr at level warn.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::warn(::core::format_args!($($arg)+)) };
}

/// `crate::info!("fmt", args..)`: one line at level info.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::info(::core::format_args!($($arg)+)) };
}

/// `crate::debug!("fmt", args..)`: one line at level debug.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::debug(::core::format_args!($($arg)+)) };
}

/// `crate::warn_once!("fmt", args..)`: warn at most once per call site; evaluates to true
/// for the first call. `crate::warn_once!(KEY; "fmt", args..)` keys it by a
/// `static KEY: AtomicBool` shared between call sites.
#[macro_export]
macro_rules! warn_once {
    ($key:path; $($arg:tt)+) => {
        $crate::log::warn_once(&$key, ::core::format_args!($($arg)+))
    };
    ($($arg:tt)+) => {{
        static ONCE: ::core::sync::atomic::AtomicBool = ::core::sync::atomic::AtomicBool::new(false);
        $crate::log::warn_once(&ONCE, ::core::format_args!($($arg)+))
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: fmt::Arguments<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        format_line(args, |b| out.extend_from_slice(b));
        out
    }

    #[test]
    fn level_names_round_trip() {
        for l in Level::ALL {
            assert_eq!(Level::parse(l.name()), Some(l));
        }
        assert_eq!(Level::parse(" DeBuG\n"), Some(Level::Debug));
        assert_eq!(Level::parse("verbose"), None);
        assert_eq!(Level::parse(""), None);
        assert!(Level::Off < Level::Warn && Level::Warn < Level::Info && Level::Info < Level::Debug);
    }

    #[test]
    fn thresholds() {
        assert!(!passes(Level::Warn, Level::Off));
        assert!(!passes(Level::Off, Level::Debug));
        assert!(passes(Level::Warn, Level::Warn));
        assert!(!passes(Level::Info, Level::Warn));
        assert!(passes(Level::Info, Level::Debug));
    }

    #[test]
    fn formats_one_prefixed_line() {
        assert_eq!(line(format_args!("x={} y={}", 1, "two")), b"culedger: x=1 y=two\n");
        assert_eq!(line(format_args!("a\nb\rc")), b"culedger: a b c\n");
    }

    #[test]
    fn truncates_long_messages_on_a_char_boundary() {
        let long = "é".repeat(4 * LINE_MAX);
        let out = line(format_args!("{long}"));
        assert!(out.len() <= LINE_MAX);
        assert!(out.ends_with(b"...\n"));
        let text = std::str::from_utf8(&out).expect("valid UTF-8 after truncation");
        assert!(text.starts_with("culedger: éé"));
    }

    #[test]
    fn exactly_full_message_is_not_marked_truncated() {
        let room = LineBuf::cap() - PREFIX.len();
        let out = line(format_args!("{}", "a".repeat(room)));
        assert_eq!(out.len(), PREFIX.len() + room + 1);
        assert!(!out.ends_with(b"...\n"));
        let out = line(format_args!("{}", "a".repeat(room + 1)));
        assert!(out.ends_with(b"a...\n"));
    }

    #[test]
    fn warn_once_fires_once_per_key() {
        static KEY: AtomicBool = AtomicBool::new(false);
        assert!(crate::warn_once!(KEY; "first {}", 1));
        assert!(!crate::warn_once!(KEY; "second"));
        let mut fired = 0;
        for _ in 0..3 {
            if crate::warn_once!("per call site") {
                fired += 1;
            }
        }
        assert_eq!(fired, 1);
    }
}
