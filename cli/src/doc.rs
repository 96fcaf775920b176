//! A tiny document model (headings, paragraphs, alerts, tables) rendered either as
//! terminal text (comfy-table, optional ANSI colour) or as GitHub-flavoured markdown.

use comfy_table::{presets, CellAlignment, ContentArrangement, Table as Comfy};

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
}

impl Table {
    pub fn new(headers: &[&str], right: &[usize]) -> Self {
        Table { headers: headers.iter().map(|h| h.to_string()).collect(), rows: Vec::new(), right: right.to_vec() }
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
    Table(Table),
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

    pub fn render(&self, format: Format, color: bool) -> String {
        match format {
            Format::Markdown => self.markdown(),
            _ => self.text(color),
        }
    }

    fn text(&self, color: bool) -> String {
        let paint = |code: &str, s: &str| {
            if color {
                format!("\x1b[{code}m{s}\x1b[0m")
            } else {
                s.to_string()
            }
        };
        let mut out = String::new();
        for b in &self.blocks {
            match b {
                Block::Title(s) => out.push_str(&format!("{}\n", paint("1", s))),
                Block::Heading(s) => out.push_str(&format!("\n{}\n", paint("1;36", &format!("== {s} ==")))),
                Block::Sub(s) => out.push_str(&format!("\n{}\n", paint("1", &format!("-- {s}")))),
                Block::Para(s) => out.push_str(&format!("{s}\n")),
                Block::Alert(s) => out.push_str(&format!("{}\n", paint("1;31", s))),
                Block::Table(t) => {
                    let mut c = Comfy::new();
                    c.load_preset(presets::ASCII_BORDERS_ONLY_CONDENSED)
                        .set_content_arrangement(ContentArrangement::Disabled)
                        .set_header(t.headers.clone());
                    for r in &t.rows {
                        c.add_row(r.clone());
                    }
                    for &i in &t.right {
                        if let Some(col) = c.column_mut(i) {
                            col.set_cell_alignment(CellAlignment::Right);
                        }
                    }
                    out.push_str(&c.to_string());
                    out.push('\n');
                }
            }
        }
        out
    }

    fn markdown(&self) -> String {
        let esc = |s: &str| s.replace('|', "\\|");
        let mut out = String::new();
        for b in &self.blocks {
            match b {
                Block::Title(s) => out.push_str(&format!("## {s}\n\n")),
                Block::Heading(s) => out.push_str(&format!("### {s}\n\n")),
                Block::Sub(s) => out.push_str(&format!("#### {s}\n\n")),
                Block::Para(s) => out.push_str(&format!("{s}\n\n")),
                Block::Alert(s) => out.push_str(&format!("> **{}**\n\n", esc(s))),
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

/// Whether to colour output written to a stream: only a terminal, and never with NO_COLOR.
pub fn use_color(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").unwrap_or_default().is_empty()
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

    #[test]
    fn colour_only_when_asked() {
        assert!(sample().render(Format::Text, true).contains("\x1b[1;31ma | b\x1b[0m"));
        assert!(!sample().render(Format::Text, false).contains('\x1b'));
        assert!(!sample().render(Format::Markdown, true).contains('\x1b'));
        assert!(!use_color(false));
    }

    #[test]
    fn markdown_escapes_pipes_and_aligns_numbers() {
        let md = sample().render(Format::Markdown, false);
        assert!(md.contains("> **a \\| b**"), "{md}");
        assert!(md.contains("| k | v |\n| --- | ---: |\n| x\\|y | 1 |"), "{md}");
    }
}
