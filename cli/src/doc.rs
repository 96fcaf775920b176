//! A tiny document model (headings, paragraphs, alerts, tables) rendered either as
//! terminal text (fitted to the output width and optionally coloured, see `layout`) or as
//! GitHub-flavoured markdown. Either way every string of the document has its control
//! characters escaped first (`layout::printable`): what a report file says cannot drive the
//! terminal.

use crate::layout::{printable, render_table, wrap, wrap_indent, Style, TableSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Markdown,
    Json,
}

#[derive(Debug, Clone)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Columns aligned right (numbers).
    pub right: Vec<usize>,
    /// Free-text columns shortened with `...` rather than wrapped when the table must be
    /// narrowed (names repeated on every row); the other text columns wrap.
    pub abbrev: Vec<usize>,
}

impl Table {
    pub fn new(headers: &[&str], right: &[usize]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            right: right.to_vec(),
            abbrev: Vec::new(),
        }
    }
    /// Marks columns to abbreviate instead of wrap (see [`Table::abbrev`]).
    pub fn abbreviate(mut self, cols: &[usize]) -> Self {
        self.abbrev = cols.to_vec();
        self
    }
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

#[derive(Debug, Clone)]
pub enum Block {
    /// The document title (one per document).
    Title(String),
    /// A section heading.
    Heading(String),
    /// A sub-section heading.
    Sub(String),
    Para(String),
    /// Something that needs attention (failures, breaches): red in a terminal.
    Alert(String),
    /// The one-line answer at the top of a document: red when something failed.
    Verdict {
        text: String,
        bad: bool,
    },
    /// A footnote to the table above it (`[1] ...`): continuation lines are indented.
    Note(String),
    Table(Table),
    /// Commands to type, each with what it shows: `  culedger report DIR   what it shows`,
    /// the commands aligned; what does not fit wraps under its own column.
    Commands(Vec<(String, String)>),
}

#[derive(Debug, Clone, Default)]
pub struct Doc {
    pub blocks: Vec<Block>,
}

impl Doc {
    pub fn push(&mut self, b: Block) {
        self.blocks.push(b);
    }
    pub fn para(&mut self, s: impl Into<String>) {
        self.blocks.push(Block::Para(s.into()));
    }
    pub fn table(&mut self, t: Table) {
        self.blocks.push(Block::Table(t));
    }

    pub fn render(&self, format: Format, style: Style) -> String {
        let doc = self.printable();
        match format {
            Format::Markdown => doc.markdown(),
            _ => doc.text(style),
        }
    }

    /// The document with the control characters of every string escaped.
    fn printable(&self) -> Doc {
        let p = |s: &String| printable(s).into_owned();
        let blocks = self
            .blocks
            .iter()
            .map(|b| match b {
                Block::Title(s) => Block::Title(p(s)),
                Block::Heading(s) => Block::Heading(p(s)),
                Block::Sub(s) => Block::Sub(p(s)),
                Block::Para(s) => Block::Para(p(s)),
                Block::Alert(s) => Block::Alert(p(s)),
                Block::Verdict { text, bad } => Block::Verdict { text: p(text), bad: *bad },
                Block::Note(s) => Block::Note(p(s)),
                Block::Table(t) => Block::Table(Table {
                    headers: t.headers.iter().map(p).collect(),
                    rows: t.rows.iter().map(|r| r.iter().map(p).collect()).collect(),
                    right: t.right.clone(),
                    abbrev: t.abbrev.clone(),
                }),
                Block::Commands(c) => Block::Commands(c.iter().map(|(a, b)| (p(a), p(b))).collect()),
            })
            .collect();
        Doc { blocks }
    }

    fn text(&self, style: Style) -> String {
        let w = style.width;
        let para = |s: &str, indent: &str| wrap_indent(s, w, indent).join("\n");
        let mut out = String::new();
        for b in &self.blocks {
            match b {
                Block::Title(s) => out.push_str(&format!("{}\n", style.paint("1", &para(s, "")))),
                Block::Heading(s) => {
                    out.push_str(&format!("\n{}\n", style.paint("1;36", &wrap(&format!("== {s} =="), w).join("\n"))))
                }
                Block::Sub(s) => out.push_str(&format!("\n{}\n", style.paint("1", &para(&format!("-- {s}"), "   ")))),
                Block::Para(s) => out.push_str(&format!("{}\n", para(s, ""))),
                Block::Alert(s) => out.push_str(&format!("{}\n", style.paint("1;31", &para(s, "  ")))),
                Block::Note(s) => out.push_str(&format!("{}\n", para(s, "    "))),
                Block::Verdict { text, bad } => {
                    let code = if *bad { "1;31" } else { "1;32" };
                    out.push_str(&format!("{}\n", style.paint(code, &para(text, "  "))))
                }
                Block::Table(t) => out.push_str(&render_table(
                    &TableSpec { headers: &t.headers, rows: &t.rows, right: &t.right, abbrev: &t.abbrev },
                    w,
                )),
                Block::Commands(cmds) => out.push_str(&commands_text(cmds, w)),
            }
        }
        out
    }

    fn markdown(&self) -> String {
        // A line break inside a cell (text that goes on its own line) is a space in markdown.
        let esc = |s: &str| md_inline(s).replace('|', "\\|").replace('\n', " ");
        let md = md_inline;
        let mut out = String::new();
        for b in &self.blocks {
            match b {
                Block::Title(s) => out.push_str(&format!("## {}\n\n", md(s))),
                Block::Heading(s) => out.push_str(&format!("### {}\n\n", md(s))),
                Block::Sub(s) => out.push_str(&format!("#### {}\n\n", md(s))),
                Block::Para(s) => out.push_str(&format!("{}\n\n", md(s))),
                Block::Alert(s) => out.push_str(&format!("> **{}**\n\n", esc(s))),
                Block::Verdict { text, .. } => out.push_str(&format!("**{}**\n\n", esc(text))),
                Block::Note(s) => out.push_str(&format!("{}\n\n", md(s))),
                Block::Commands(cmds) => {
                    for (cmd, what) in cmds {
                        out.push_str(&format!("- `{cmd}`: {}\n", md(what)));
                    }
                    out.push('\n');
                }
                Block::Table(t) => {
                    out.push_str(&format!(
                        "| {} |\n",
                        t.headers.iter().map(|h| esc(h)).collect::<Vec<_>>().join(" | ")
                    ));
                    let seps: Vec<&str> =
                        (0..t.headers.len()).map(|i| if t.right.contains(&i) { "---:" } else { "---" }).collect();
                    out.push_str(&format!("| {} |\n", seps.join(" | ")));
                    for r in &t.rows {
                        out.push_str(&format!("| {} |\n", r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")));
                    }
                    out.push('\n');
                }
            }
        }
        out
    }
}

/// Text in markdown: `<`, `>` and `&` written as entities outside code spans, so that a
/// report's string (a title, a host) never becomes markup (`<img ...>`, `<!--` would hide the
/// rest of a `$GITHUB_STEP_SUMMARY`). Backticks that do not pair are escaped, and then no
/// part of the text is taken for code.
fn md_inline(s: &str) -> String {
    let paired = s.matches('`').count() % 2 == 0;
    let mut out = String::with_capacity(s.len());
    let mut code = false;
    for c in s.chars() {
        match c {
            '`' if paired => {
                code = !code;
                out.push(c);
            }
            '`' => out.push_str("\\`"),
            _ if code => out.push(c),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c => out.push(c),
        }
    }
    out
}

/// [`Block::Commands`] as text: two spaces, the commands padded to the longest (at most two
/// thirds of the width, unless every line fits whole), then what each shows, wrapped under itself; a longer command has its text on
/// the next line.
fn commands_text(cmds: &[(String, String)], width: usize) -> String {
    let longest = cmds.iter().map(|(c, _)| crate::layout::display_width(c)).max().unwrap_or(0);
    let widest = cmds.iter().map(|(_, w)| crate::layout::display_width(w)).max().unwrap_or(0);
    // Every line whole when the longest command and the longest text fit side by side; else
    // the commands take at most two thirds of the width.
    let col = if longest + 4 + widest <= width { longest + 4 } else { (longest + 5).min(width * 2 / 3) };
    let mut out = String::new();
    for (cmd, what) in cmds {
        let lead = format!("  {cmd}");
        let pad = " ".repeat(col);
        let lines = wrap(what, width.saturating_sub(col).max(20));
        if crate::layout::display_width(&lead) + 2 > col {
            out.push_str(&format!("{lead}\n"));
            for l in lines {
                out.push_str(&format!("{pad}{l}\n"));
            }
            continue;
        }
        for (k, l) in lines.iter().enumerate() {
            let head = if k == 0 { format!("{lead:<col$}") } else { pad.clone() };
            out.push_str(&format!("{head}{l}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Doc {
        let mut d = Doc::default();
        d.push(Block::Title("t".into()));
        d.push(Block::Alert("a | b".into()));
        let mut t = Table::new(&["k", "v"], &[1]);
        t.row(vec!["x|y".into(), "1".into()]);
        d.table(t);
        d
    }

    fn style(color: bool) -> Style {
        Style { color, width: 100 }
    }

    #[test]
    fn colour_only_when_asked() {
        assert!(sample().render(Format::Text, style(true)).contains("\x1b[1;31ma | b\x1b[0m"));
        assert!(!sample().render(Format::Text, style(false)).contains('\x1b'));
        assert!(!sample().render(Format::Markdown, style(true)).contains('\x1b'));
    }

    #[test]
    fn paragraphs_wrap_at_the_width() {
        let mut d = Doc::default();
        d.push(Block::Title("word ".repeat(30)));
        let text = d.render(Format::Text, Style { color: false, width: 40 });
        assert!(text.lines().count() > 3 && text.lines().all(|l| l.len() <= 40), "{text}");
    }

    #[test]
    fn commands_are_aligned_and_fit() {
        let mut d = Doc::default();
        d.push(Block::Commands(vec![
            ("culedger report d".into(), "every GPU".into()),
            ("culedger explain d".into(), "why it failed, with the numbers that prove it, finding by finding".into()),
        ]));
        let text = d.render(Format::Text, Style { color: false, width: 50 });
        assert!(text.lines().all(|l| l.len() <= 50), "{text}");
        assert!(text.starts_with("  culedger report d    every GPU\n  culedger explain d   why it"), "{text}");
        assert!(d.render(Format::Markdown, style(false)).contains("- `culedger report d`: every GPU\n"));
    }

    #[test]
    fn control_characters_are_shown_never_sent() {
        let mut d = Doc::default();
        let evil = "a\x1b]0;owned\x07b\x1b[2Jc\u{9b}31md\re\tf";
        d.push(Block::Title(evil.into()));
        d.push(Block::Verdict { text: evil.into(), bad: true });
        let mut t = Table::new(&[evil], &[]);
        t.row(vec![evil.into()]);
        d.table(t);
        for format in [Format::Text, Format::Markdown] {
            for color in [false, true] {
                let out = d.render(format, style(color));
                let controls: Vec<char> = out.chars().filter(|&c| c != '\n' && c.is_control()).collect();
                // Only culedger's own colours: ESC [ ... m around whole blocks.
                let own = out.matches("\x1b[").count();
                assert_eq!(controls.len(), own, "{format:?} color={color}: {out:?}");
                assert!(out.contains(r"a\x1b]0;owned\x07b\x1b[2Jc\u{9b}31md\re\tf"), "{out}");
            }
        }
        assert_eq!(printable("plain: ü, 日本"), "plain: ü, 日本");
    }

    #[test]
    fn markdown_escapes_pipes_and_aligns_numbers() {
        let md = sample().render(Format::Markdown, style(false));
        assert!(md.contains("> **a \\| b**"), "{md}");
        let hostile = md_inline("title <img src=x onerror=alert(1)> <!-- & `a<b` done");
        assert_eq!(hostile, "title &lt;img src=x onerror=alert(1)&gt; &lt;!-- &amp; `a<b` done");
        assert_eq!(md_inline("a`<b"), "a\\`&lt;b");
        assert!(md.contains("| k | v |\n| --- | ---: |\n| x\\|y | 1 |"), "{md}");
    }
}
