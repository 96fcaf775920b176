//! The output layer shared by every command that prints text: how wide the output may be,
//! whether to colour it, word wrapping, and tables that fit the width.
//!
//! - Width: `COLUMNS` when it is set to a number (at least [`MIN_WIDTH`]), else the width of
//!   the terminal the output goes to, else [`DEFAULT_WIDTH`] (a pipe, a file, CI logs).
//! - Colour: `--color always|never`, else `FORCE_COLOR` (set and not `0`), else `NO_COLOR`
//!   (set and not empty: no colour), else colour only on a terminal.
//! - Tables ([`render_table`]): numbers (right-aligned columns) always keep their full
//!   width; when the table is wider than the output, the free-text columns (process names,
//!   "why it matters", call sites) are narrowed, widest first, and their cells wrap onto
//!   more lines. No column and no number is ever dropped; a table whose numbers alone do
//!   not fit is split into several tables side by side in reading order, each repeating the
//!   first column (the row's name), as wide data frames print; only a table whose first
//!   column and one other do not fit is printed wider than the output.
//! - Paragraphs ([`wrap`]) wrap at word boundaries; a word longer than the width is split.
//! - Control characters ([`printable`]): a report file is untrusted input, and a process's
//!   argv, title or comm may hold terminal escapes (OSC, CSI, BEL). Every text output shows
//!   them as visible escapes (`\x1b`), so only culedger's own colours reach the terminal.

use std::borrow::Cow;
use std::io::IsTerminal;

/// Width when the output is not a terminal and `COLUMNS` is not set.
pub const DEFAULT_WIDTH: usize = 100;
/// Narrowest width honoured (smaller `COLUMNS` values are raised to it).
pub const MIN_WIDTH: usize = 40;
/// A header's words up to this long are never split when a column is narrowed.
const MAX_WORD: usize = 16;
/// Narrowest an abbreviated column is made.
const ABBREV_COLUMN: usize = 12;
/// Text columns are first narrowed only down to this width (then further if need be).
const COMFORTABLE: usize = 24;

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour on a terminal, unless NO_COLOR is set (FORCE_COLOR forces it)
    #[default]
    Auto,
    /// Always colour (ANSI escapes)
    Always,
    /// Never colour
    Never,
}

/// Where text output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn is_terminal(self) -> bool {
        match self {
            Stream::Stdout => std::io::stdout().is_terminal(),
            Stream::Stderr => std::io::stderr().is_terminal(),
        }
    }

    fn fd(self) -> i32 {
        match self {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        }
    }
}

/// How text is rendered: colour and width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
    pub width: usize,
}

impl Default for Style {
    fn default() -> Self {
        Style { color: false, width: DEFAULT_WIDTH }
    }
}

impl Style {
    /// The style for output written to `stream`, from the choice, the environment and the
    /// terminal.
    pub fn for_stream(choice: ColorChoice, stream: Stream) -> Style {
        let env = |k: &str| std::env::var(k).ok();
        let tty = stream.is_terminal();
        Style {
            color: use_color(choice, env("FORCE_COLOR").as_deref(), env("NO_COLOR").as_deref(), tty),
            width: width(env("COLUMNS").as_deref(), if tty { terminal_width(stream.fd()) } else { None }),
        }
    }

    /// `s` in the ANSI style `code` when colouring.
    pub fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

/// A character that would drive a terminal rather than show: C0 controls but the line
/// break, DEL, C1 controls (`\u{9b}` is CSI on many terminals).
fn is_terminal_control(c: char) -> bool {
    c != '\n' && c.is_control()
}

/// `s` with every terminal control character written as a visible escape (`\t`, `\r`,
/// `\x1b`, `\u{9b}`); `s` itself when it holds none. Used by every text renderer.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_terminal_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_terminal_control(c) && (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if is_terminal_control(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether to colour (see the module documentation for the order).
pub fn use_color(choice: ColorChoice, force: Option<&str>, no_color: Option<&str>, tty: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            if force.is_some_and(|v| !v.is_empty() && v != "0" && v != "false") {
                true
            } else if no_color.is_some_and(|v| !v.is_empty()) {
                false
            } else {
                tty
            }
        }
    }
}

/// The output width: `COLUMNS` (a number), else the terminal's, else [`DEFAULT_WIDTH`].
pub fn width(columns: Option<&str>, terminal: Option<usize>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
        .or(terminal.filter(|&t| t > 0))
        .unwrap_or(DEFAULT_WIDTH)
        .max(MIN_WIDTH)
}

/// The width of the terminal on `fd`, if it is one.
fn terminal_width(fd: i32) -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize owned by this frame; a non-terminal returns -1.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0).then_some(ws.ws_col as usize)
}

/// Display width of a string (characters; the outputs are ASCII but for names).
pub fn display_width(s: &str) -> usize {
    s.chars().count()
}

/// A unit after a number (`918.00 MiB`, `0 B)`): kept on the number's line.
fn is_unit(word: &str) -> bool {
    let w = word.trim_end_matches([')', ',', ';', '.', ':', ']']);
    matches!(w, "B" | "KiB" | "MiB" | "GiB" | "TiB" | "KB" | "MB" | "GB" | "ms" | "us" | "s" | "%")
}

/// The words of a paragraph: split at spaces, a unit kept with its number (`0 B` is one
/// word, never `0` / `B`).
fn words(para: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in para.split(' ').filter(|w| !w.is_empty()) {
        match out.last_mut() {
            Some(prev) if is_unit(w) && prev.ends_with(|c: char| c.is_ascii_digit()) => {
                prev.push(' ');
                prev.push_str(w);
            }
            _ => out.push(w.to_string()),
        }
    }
    out
}

/// Where a word too long for a line may break: after a frame or path separator (`:`, `.`,
/// `/`, `,`) that is followed by more of the word (not by a digit: `918.00`, `0/8`). Never
/// inside a name between them.
fn breaks(word: &str) -> Vec<usize> {
    let chars: Vec<char> = word.chars().collect();
    (1..chars.len())
        .filter(|&i| {
            matches!(chars[i - 1], ':' | '.' | '/' | ',')
                && !matches!(chars[i], ':' | '.' | '/' | ',' | ' ' | ')')
                && !chars[i].is_ascii_digit()
                && !(chars[i - 1] == '.' && extension(&chars[i..]))
        })
        .collect()
}

/// A file name's extension starts `rest` (`py:...`, `so`, `json`): kept with the name.
fn extension(rest: &[char]) -> bool {
    let n = rest.iter().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit()).count();
    (1..=4).contains(&n) && rest.get(n).is_none_or(|c| matches!(c, ':' | ' ' | ')' | ',' | ';' | '.'))
}

/// The longest piece of `word` that no wrapping splits (between two separators).
pub fn unbreakable(word: &str) -> usize {
    let mut last = 0;
    let mut longest = 0;
    for b in breaks(word).into_iter().chain([word.chars().count()]) {
        longest = longest.max(b - last);
        last = b;
    }
    longest
}

/// Word-wraps `text` at `width` columns; continuation lines start with `indent`. Lines break
/// at spaces (a unit stays with its number); a word longer than a line breaks after a frame
/// separator (`MHATokenToKVPool.` / `_create_buffers`), and is split elsewhere only when one
/// of its pieces alone is longer than a line. Existing line breaks are kept.
pub fn wrap_indent(text: &str, width: usize, indent: &str) -> Vec<String> {
    let iw = display_width(indent);
    let width = width.max(iw + 1);
    let mut lines: Vec<String> = Vec::new();
    let (mut line, mut len, mut start) = (String::new(), 0usize, 0usize);
    for (k, para) in text.split('\n').enumerate() {
        if k > 0 {
            lines.push(std::mem::replace(&mut line, indent.to_string()));
            (len, start) = (iw, iw);
        }
        for word in words(para) {
            let mut word = word;
            loop {
                let wl = display_width(&word);
                let need = if len > start { wl + 1 } else { wl };
                if len + need <= width {
                    if len > start {
                        line.push(' ');
                    }
                    line.push_str(&word);
                    len += need;
                    break;
                }
                // Too long for what is left of the line: its longest head that ends at a
                // separator and fits; on an empty line, a hard split when none does.
                let room = width - len - usize::from(len > start);
                let cut = breaks(&word).into_iter().filter(|&b| b <= room).max();
                // A word that fits a line of its own goes there whole.
                let whole_fits = wl <= width - iw;
                let cut = match cut {
                    Some(b) if len == start || !whole_fits => Some(b),
                    _ if len == start && !word.contains(' ') => Some(room),
                    _ => None,
                };
                if let Some(b) = cut.filter(|&b| b > 0) {
                    if len > start {
                        line.push(' ');
                    }
                    line.extend(word.chars().take(b));
                    word = word.chars().skip(b).collect();
                } else if len == start {
                    // A number with its unit wider than a line: as it is.
                    line.push_str(&word);
                    word.clear();
                }
                lines.push(std::mem::replace(&mut line, indent.to_string()));
                (len, start) = (iw, iw);
                if word.is_empty() {
                    break;
                }
            }
        }
    }
    lines.push(line);
    lines
}

/// Word-wraps `text` at `width` columns.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    wrap_indent(text, width, "")
}

/// A table to render: headers, rows, and which columns are numbers (right-aligned, never
/// narrowed).
pub struct TableSpec<'a> {
    pub headers: &'a [String],
    pub rows: &'a [Vec<String>],
    pub right: &'a [usize],
    /// Text columns shortened with `...` instead of wrapped.
    pub abbrev: &'a [usize],
}

/// Shortens `text` to `width` columns, ending with `...` when something was cut.
pub fn abbreviate(text: &str, width: usize) -> String {
    if display_width(text) <= width {
        return text.to_string();
    }
    if width <= 3 {
        return text.chars().take(width).collect();
    }
    let head: String = text.chars().take(width - 3).collect();
    format!("{}...", head.trim_end())
}

/// Shorter forms of a process name, longest first, each keeping what tells processes apart:
/// the arguments dropped (`sglang_server.py --tp 8` -> `sglang_server.py`), the parenthesised
/// notes, a title's prefix up to `::` (`sglang::scheduler_TP0` -> `scheduler_TP0`), and a
/// rank suffix for the whole name (`scheduler_TP0` -> `TP0`).
pub fn short_forms(text: &str) -> Vec<String> {
    let mut out = vec![text.to_string()];
    let mut push = |s: String| {
        let s = s.trim().to_string();
        if !s.is_empty() && out.last() != Some(&s) {
            out.push(s);
        }
    };
    let ws: Vec<&str> = text.split(' ').collect();
    let args = ws.iter().position(|w| w.starts_with('-') && w.len() > 1).unwrap_or(ws.len());
    let mut cur: Vec<String> = ws[..args.max(1)].iter().map(|w| w.to_string()).collect();
    push(cur.join(" "));
    // Parenthesised notes: `(rank 0/8)`.
    let mut depth = 0;
    cur.retain(|w| {
        let open = w.starts_with('(');
        if open {
            depth += 1;
        }
        let keep = depth == 0;
        if w.ends_with(')') && depth > 0 {
            depth -= 1;
        }
        keep
    });
    push(cur.join(" "));
    for w in cur.iter_mut() {
        if let Some(i) = w.rfind("::").filter(|&i| i + 2 < w.len()) {
            *w = w[i + 2..].to_string();
        }
    }
    push(cur.join(" "));
    for w in cur.iter_mut() {
        if let Some((_, tail)) = w.rsplit_once('_') {
            let rank = ["TP", "PP", "DP", "EP", "CP", "rank"]
                .iter()
                .any(|p| tail.strip_prefix(p).is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())));
            if rank {
                *w = tail.to_string();
            }
        }
    }
    push(cur.join(" "));
    out
}

/// `text` in at most `width` columns: its longest short form that fits (see
/// [`short_forms`]), else its shortest one cut with `...`.
pub fn shorten(text: &str, width: usize) -> String {
    let forms = short_forms(text);
    match forms.iter().find(|f| display_width(f) <= width) {
        Some(f) => f.clone(),
        None => abbreviate(forms.last().map_or(text, String::as_str), width),
    }
}

/// Process names of one column in `width` columns, each as [`shorten`] gives it, unless two
/// different names would then show alike: those are cut with `...` from a longer form that
/// tells them apart, or shown whole.
fn shorten_column(texts: &[String], width: usize) -> Vec<String> {
    let mut shown: Vec<String> = texts.iter().map(|t| shorten(t, width)).collect();
    for i in 0..texts.len() {
        let clash = (0..texts.len()).any(|j| texts[j] != texts[i] && shown[j] == shown[i]);
        if clash {
            shown[i] = texts[i].clone();
        }
    }
    shown
}

/// The width a table with these column widths takes: `| a   b |`.
fn table_width(widths: &[usize]) -> usize {
    widths.iter().sum::<usize>() + 3 * widths.len() + 1
}

/// How a column may be narrowed (see [`fit_columns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Give {
    /// Numbers: only the header wraps.
    Header,
    /// Sentences: wrapped at spaces.
    Sentences,
    /// Names repeated on every row: shortened with `...`.
    Abbreviate,
    /// Single words (API names, identifiers): split only as a last resort.
    Words,
}

/// Column widths that fit `max` when possible. Columns are narrowed widest first, never
/// below their floors (numbers: their widest value; text: its longest word, at most
/// [`MAX_WORD`]; abbreviated text: [`ABBREV_COLUMN`]), in this order: headers of numbers;
/// sentences down to [`COMFORTABLE`] columns; abbreviated names down to [`COMFORTABLE`];
/// then all text, widest first, down to the floors.
pub fn fit_columns(natural: &[usize], floors: &[usize], gives: &[Give], max: usize) -> Vec<usize> {
    use Give::*;
    let mut widths = natural.to_vec();
    // (what narrows together, the width it keeps at least)
    let stages: [(&[Give], usize); 4] = [
        (&[Header], 0),
        (&[Sentences], COMFORTABLE),
        (&[Abbreviate], COMFORTABLE),
        (&[Sentences, Abbreviate, Words], 0),
    ];
    for (class, least) in stages {
        while table_width(&widths) > max {
            let widest = (0..widths.len())
                .filter(|&i| class.contains(&gives[i]) && widths[i] > floors[i].max(least))
                .max_by_key(|&i| (widths[i], std::cmp::Reverse(i)));
            match widest {
                Some(i) => widths[i] -= 1,
                None => break,
            }
        }
    }
    widths
}

/// Renders a table in the ASCII style of the outputs (borders, a `=` rule under the
/// header, no inner lines), fitted to `max` columns: narrowed (see [`fit_columns`]), or,
/// when even its narrowest columns are too wide, split into parts that each repeat the first
/// column.
pub fn render_table(t: &TableSpec, max: usize) -> String {
    let n = t.headers.len();
    if n > 2 && table_width(&floors_of(t)) > max {
        return split_table(t, max);
    }
    render_fitted(t, max)
}

/// The narrowest each column of `t` can be made (see [`fit_columns`]).
fn floors_of(t: &TableSpec) -> Vec<usize> {
    (0..t.headers.len()).map(|i| column_widths(t, i).1).collect()
}

/// A column's natural width (its widest line) and its floor.
fn column_widths(t: &TableSpec, i: usize) -> (usize, usize) {
    let longest_word = |text: &str| text.split([' ', '\n']).map(display_width).max().unwrap_or(0);
    let longest_line = |text: &str| text.split('\n').map(display_width).max().unwrap_or(0);
    let mut natural = display_width(&t.headers[i]);
    // A header may wrap at its spaces, numbers never.
    let mut floor = longest_word(&t.headers[i]).min(MAX_WORD);
    for text in t.rows.iter().map(|r| r.get(i).map(String::as_str).unwrap_or("")) {
        natural = natural.max(longest_line(text));
        let f = if t.right.contains(&i) {
            display_width(text)
        } else if t.abbrev.contains(&i) {
            // The shortest form of the name, unless even that is long.
            short_forms(text).last().map_or(0, |f| display_width(f)).min(COMFORTABLE).max(display_width(text).min(ABBREV_COLUMN))
        } else {
            // Never narrower than a word's longest piece between separators: names are not cut.
            text.split('\n').flat_map(words).map(|w| unbreakable(&w)).max().unwrap_or(0)
        };
        floor = floor.max(f);
    }
    (natural, floor)
}

/// A table too wide for `max` as several tables, one under the other, each holding the first
/// column and as many of the next columns as fit at their comfortable widths (natural, at
/// most [`COMFORTABLE`] for text).
fn split_table(t: &TableSpec, max: usize) -> String {
    let n = t.headers.len();
    let comfortable = |i: usize| {
        let (natural, floor) = column_widths(t, i);
        if t.right.contains(&i) {
            natural
        } else {
            natural.min(COMFORTABLE.max(floor))
        }
    };
    let mut parts: Vec<Vec<usize>> = Vec::new();
    let mut part = vec![0];
    for i in 1..n {
        let widths: Vec<usize> = part.iter().chain([&i]).map(|&k| comfortable(k)).collect();
        if part.len() > 1 && table_width(&widths) > max {
            parts.push(std::mem::replace(&mut part, vec![0]));
        }
        part.push(i);
    }
    parts.push(part);
    let mut out = String::new();
    for cols in parts {
        let headers: Vec<String> = cols.iter().map(|&i| t.headers[i].clone()).collect();
        let rows: Vec<Vec<String>> =
            t.rows.iter().map(|r| cols.iter().map(|&i| r.get(i).cloned().unwrap_or_default()).collect()).collect();
        let remap = |set: &[usize]| -> Vec<usize> { (0..cols.len()).filter(|&k| set.contains(&cols[k])).collect() };
        let (right, abbrev) = (remap(t.right), remap(t.abbrev));
        out.push_str(&render_fitted(
            &TableSpec { headers: &headers, rows: &rows, right: &right, abbrev: &abbrev },
            max,
        ));
    }
    out
}

/// [`render_table`] without splitting.
fn render_fitted(t: &TableSpec, max: usize) -> String {
    let n = t.headers.len();
    let cell = |r: &Vec<String>, i: usize| r.get(i).cloned().unwrap_or_default();
    let (natural, floors): (Vec<usize>, Vec<usize>) = (0..n).map(|i| column_widths(t, i)).unzip();
    let gives: Vec<Give> = (0..n)
        .map(|i| {
            if t.right.contains(&i) {
                Give::Header
            } else if t.abbrev.contains(&i) {
                Give::Abbreviate
            } else if t.rows.iter().all(|r| !cell(r, i).contains(' ')) {
                Give::Words
            } else {
                Give::Sentences
            }
        })
        .collect();
    let widths = fit_columns(&natural, &floors, &gives, max);
    let inner = table_width(&widths) - 2;
    let border = format!("+{}+\n", "-".repeat(inner));
    let mut out = border.clone();
    // Names shortened by column, so that two names never show alike.
    let short: Vec<Option<Vec<String>>> = (0..n)
        .map(|i| {
            t.abbrev.contains(&i).then(|| shorten_column(&t.rows.iter().map(|r| cell(r, i)).collect::<Vec<_>>(), widths[i]))
        })
        .collect();
    let line = |cells: Vec<String>, row: Option<usize>, out: &mut String| {
        let wrapped: Vec<Vec<String>> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| match (&short[i], row) {
                (Some(names), Some(r)) if display_width(&names[r]) <= widths[i] => vec![names[r].clone()],
                _ => wrap(c, widths[i]),
            })
            .collect();
        let height = wrapped.iter().map(Vec::len).max().unwrap_or(1);
        for k in 0..height {
            out.push('|');
            for (i, lines) in wrapped.iter().enumerate() {
                let text = lines.get(k).map(String::as_str).unwrap_or("");
                let pad = widths[i].saturating_sub(display_width(text));
                if t.right.contains(&i) {
                    out.push_str(&format!(" {}{} ", " ".repeat(pad), text));
                } else {
                    out.push_str(&format!(" {}{} ", text, " ".repeat(pad)));
                }
                if i + 1 < n {
                    out.push(' ');
                }
            }
            out.push_str("|\n");
        }
    };
    line(t.headers.to_vec(), None, &mut out);
    out.push_str(&format!("+{}+\n", "=".repeat(inner)));
    for (k, r) in t.rows.iter().enumerate() {
        line((0..n).map(|i| cell(r, i)).collect(), Some(k), &mut out);
    }
    out.push_str(&border);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn width_order() {
        assert_eq!(width(Some("80"), Some(200)), 80, "COLUMNS wins");
        assert_eq!(width(None, Some(132)), 132);
        assert_eq!(width(None, None), DEFAULT_WIDTH);
        assert_eq!(width(Some("abc"), None), DEFAULT_WIDTH);
        assert_eq!(width(Some("10"), None), MIN_WIDTH);
        assert_eq!(width(Some("0"), Some(90)), 90);
    }

    #[test]
    fn colour_order() {
        use ColorChoice::*;
        assert!(use_color(Always, None, Some("1"), false));
        assert!(!use_color(Never, Some("1"), None, true));
        assert!(use_color(Auto, Some("1"), Some("1"), false), "FORCE_COLOR forces");
        assert!(!use_color(Auto, Some("0"), None, false));
        assert!(!use_color(Auto, None, Some("1"), true), "NO_COLOR on a terminal");
        assert!(use_color(Auto, None, Some(""), true));
        assert!(!use_color(Auto, None, None, false), "a pipe");
    }

    #[test]
    fn wraps_words_and_splits_long_ones() {
        assert_eq!(wrap("one two three four", 9), ["one two", "three", "four"]);
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        // At frame separators, never inside a name; a unit stays with its number.
        assert_eq!(wrap("x MHATokenToKVPool._create_buffers", 20), ["x MHATokenToKVPool.", "_create_buffers"]);
        assert_eq!(wrap("x MHATokenToKVPool._create", 25), ["x", "MHATokenToKVPool._create"]);
        assert_eq!(wrap("pinned 0 B (0 B)", 9), ["pinned", "0 B (0 B)"]);
        assert_eq!(wrap("held 918.00 MiB, then", 12), ["held", "918.00 MiB,", "then"]);
        assert_eq!(wrap("", 10), [""]);
        assert_eq!(wrap_indent("aaa bbb ccc", 7, "  "), ["aaa bbb", "  ccc"]);
        for line in wrap("the quick brown fox jumps over the lazy dog again and again", 12) {
            assert!(line.len() <= 12, "{line:?}");
        }
    }

    #[test]
    fn a_table_that_fits_is_unchanged() {
        let headers = strings(&["pid", "name"]);
        let rows = vec![strings(&["1", "a"]), strings(&["100", "bbb"])];
        let out = render_table(&TableSpec { headers: &headers, rows: &rows, right: &[0], abbrev: &[] }, 100);
        assert_eq!(
            out,
            "+------------+\n| pid   name |\n+============+\n|   1   a    |\n| 100   bbb  |\n+------------+\n"
        );
    }

    #[test]
    fn narrowing_wraps_text_and_keeps_numbers() {
        let headers = strings(&["bytes", "why it matters", "api"]);
        let rows = vec![strings(&[
            "7.31 GiB",
            "before the largest allocation (other cudaMalloc of 7.31 GiB at 0.080s); before the failed cudaMalloc",
            "cudaMalloc",
        ])];
        let out = render_table(&TableSpec { headers: &headers, rows: &rows, right: &[0], abbrev: &[] }, 50);
        for line in out.lines() {
            assert!(line.len() <= 50, "{line:?}\n{out}");
        }
        assert!(out.contains("7.31 GiB"), "{out}");
        let text: String = out.split_whitespace().collect::<Vec<_>>().join(" ");
        for word in ["before", "largest", "0.080s);", "failed", "cudaMalloc"] {
            assert!(text.contains(word), "{word} kept: {out}");
        }
    }

    #[test]
    fn names_are_abbreviated() {
        assert_eq!(abbreviate("sglang_sim.py --worker 0 --tp 2", 16), "sglang_sim.py...");
        assert_eq!(abbreviate("sglang_sim.py --worker 0 --tp 2", 12), "sglang_si...");
        assert_eq!(abbreviate("short", 16), "short");
        let headers = strings(&["process", "why it matters"]);
        let rows = vec![strings(&["5102 sglang_sim.py --worker 0 --tp 2 --allreduce custom", &"word ".repeat(30)])];
        let out = render_table(&TableSpec { headers: &headers, rows: &rows, right: &[], abbrev: &[0] }, 60);
        assert!(out.lines().all(|l| l.len() <= 60), "{out}");
        assert_eq!(out.matches("5102 sglang").count(), 1, "one line for the name: {out}");
        assert!(out.contains("| 5102 sglang_sim.py "), "the arguments dropped, the name whole: {out}");
        // Ranks stay apart: the rank suffix, never `sglang::sc...` twice.
        assert_eq!(shorten("6101 sglang::scheduler_TP0 (rank 0/8)", 12), "6101 TP0");
        assert_eq!(shorten("6101 sglang::scheduler_TP0 (rank 0/8)", 20), "6101 scheduler_TP0");
        let rows: Vec<Vec<String>> =
            (0..8).map(|k| strings(&[&format!("61{k:02} sglang::scheduler_TP{k} (rank {k}/8)"), "1.00 GiB"])).collect();
        let headers = strings(&["process", "live"]);
        let out = render_table(&TableSpec { headers: &headers, rows: &rows, right: &[1], abbrev: &[0] }, 24);
        for k in 0..8 {
            assert!(out.contains(&format!("61{k:02} TP{k} ")), "{out}");
        }
    }

    #[test]
    fn headers_of_numbers_wrap_but_numbers_do_not() {
        let headers = strings(&["driver costs", "note"]);
        let rows = vec![strings(&["1.78 GiB", &"word ".repeat(20)])];
        let out = render_table(&TableSpec { headers: &headers, rows: &rows, right: &[0], abbrev: &[] }, 30);
        assert!(out.lines().all(|l| l.len() <= 30), "{out}");
        assert!(out.contains("  driver ") && out.contains("   costs ") && out.contains("1.78 GiB"), "{out}");
    }

    #[test]
    fn numbers_are_never_narrowed() {
        let headers = strings(&["a", "b", "c"]);
        let rows = vec![strings(&["123456789012345", "123456789012345", "x"])];
        let out = render_table(&TableSpec { headers: &headers, rows: &rows, right: &[0, 1], abbrev: &[] }, 20);
        assert!(out.contains("123456789012345"), "{out}");
        assert_eq!(out.matches("123456789012345").count(), 3, "the first column repeated in each part: {out}");
    }

    #[test]
    fn a_table_whose_numbers_do_not_fit_is_split_repeating_its_first_column() {
        let headers = strings(&["GPU", "process", "told free", "at", "hidden costs", "other", "free", "short by"]);
        let row = |g: &str| {
            strings(&[
                g,
                "rank 1 (pid 6102)",
                "15.53 GiB",
                "0.507s",
                "1.78 GiB",
                "3.50 GiB",
                "274.00 MiB",
                "644.00 MiB",
            ])
        };
        let rows = vec![row("GPU 1"), row("GPU 2")];
        let spec = TableSpec { headers: &headers, rows: &rows, right: &[2, 3, 4, 5, 6, 7], abbrev: &[1] };
        let out = render_table(&spec, 60);
        assert!(out.lines().all(|l| l.chars().count() <= 60), "{out}");
        // Every cell once, the first column once per part, never wrapped ("GPU" / "1").
        for cell in ["15.53 GiB", "0.507s", "1.78 GiB", "3.50 GiB", "274.00 MiB", "644.00 MiB"] {
            assert_eq!(out.matches(cell).count(), 2, "{cell}: {out}");
        }
        let parts = out.matches("+===").count();
        assert!(parts >= 2, "{out}");
        assert_eq!(out.matches("| GPU 1 ").count(), parts, "{out}");
        // Wide enough: one table, as before.
        assert_eq!(render_table(&spec, 132).matches("+===").count(), 1);
    }
}
