//! `culedger top PATH...`: a live full-screen view of a run (ratatui on crossterm).
//!
//! Every second the reports are read anew (`metrics::snapshot`: what the directory holds now,
//! unreadable files counted, an empty directory a waiting screen) and analysed like
//! `culedger report`; the program itself is never asked anything. The screen: a header with
//! the verdict, one row per GPU (or per set of alike GPUs when folded, as `report --fold`
//! folds them), and the selected GPU in full: its categories as bars against its capacity,
//! tracked and untracked memory at the last free-memory query and that query's age, its
//! processes, its failures. `--once` draws the same frame into a buffer and prints it as
//! plain text.
//!
//! Report strings (titles, argv, API names) are untrusted: every one goes through [`clean`]
//! before it reaches the terminal, so a title cannot carry an escape sequence.

use crate::clock::fmt_age;
use crate::error::{Fail, Result};
use crate::metrics::{snapshot, Snapshot};
use crate::summary::{DeviceSummary, RunSummary};
use crate::units::fmt_bytes;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Widget};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the reports are read again.
const REFRESH: Duration = Duration::from_secs(1);
const CAT_COLORS: [Color; 6] = [Color::Blue, Color::Yellow, Color::Red, Color::Cyan, Color::Green, Color::Magenta];

#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    pub once: bool,
    pub fold: bool,
    /// Wait for missing paths to appear rather than refuse them.
    pub wait: bool,
}

/// What the user chose: the selected row and whether alike GPUs are folded.
#[derive(Debug, Clone, Copy, Default)]
struct View {
    selected: usize,
    fold: bool,
}

/// A string from a report, safe to show: its control characters written as visible escapes
/// (`layout::printable`, as every text output writes them), the line break too (a frame's
/// line is one screen row).
pub fn clean(s: &str) -> String {
    crate::layout::printable(s).replace('\n', "\\n")
}

/// The rows of the GPU list: each a list of device indices into `summary.devices` (one each,
/// or the classes of alike GPUs when folded).
fn rows(s: &RunSummary, fold: bool) -> Vec<Vec<usize>> {
    if fold {
        crate::report::fold_classes(&s.devices)
    } else {
        (0..s.devices.len()).map(|i| vec![i]).collect()
    }
}

/// A bar of `width` cells, `part` of `whole` filled.
fn bar(part: i64, whole: i64, width: usize) -> (String, String) {
    let filled = if whole > 0 { ((part.max(0) as f64 / whole as f64) * width as f64).round() as usize } else { 0 };
    let filled = filled.min(width);
    ("█".repeat(filled), "░".repeat(width - filled))
}

fn pct(part: i64, whole: Option<i64>) -> String {
    match whole {
        Some(w) if w > 0 => format!("{:5.1}%", part as f64 * 100.0 / w as f64),
        _ => "     -".into(),
    }
}

fn gpu_names(s: &RunSummary, members: &[usize]) -> String {
    let d = &s.devices[members[0]];
    let token = |d: &crate::summary::DeviceSummary| crate::analysis::gpu_token(d.index, d.mig_index, d.uuid_name.as_deref());
    if members.len() == 1 {
        return format!("{} {}", clean(&d.host), crate::analysis::gpu_words(&token(d)));
    }
    let idx: Vec<String> = members.iter().map(|&i| token(&s.devices[i])).collect();
    format!("{} GPUs {} ({} alike)", clean(&d.host), idx.join(","), members.len())
}

/// The widest a GPU's name is shown in the list (a host name may be any length).
const NAME_WIDTH: usize = 60;

/// `text` cut to `width` characters, its end marked with `…` when cut.
fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    text.chars().take(width.saturating_sub(1)).chain(std::iter::once('…')).collect()
}

/// The whole frame as lines (the selected GPU's block is drawn around part of them).
struct Frame<'a> {
    lines: Vec<Line<'a>>,
    /// The lines of the selected GPU's detail: (first, count).
    detail: Option<(usize, usize)>,
    detail_title: String,
}

fn header(snap: &Snapshot, paths: &[PathBuf], now_us: i64, lines: &mut Vec<Line>) {
    let label = clean(&paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" "));
    let when = chrono::DateTime::from_timestamp_micros(now_us)
        .map(|t| t.with_timezone(&chrono::Local).format("%H:%M:%S").to_string())
        .unwrap_or_default();
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut head = vec![Span::styled("culedger top ", bold), Span::raw(label)];
    if let Some(s) = &snap.summary {
        head.push(Span::raw(format!(
            " · {} · {} GPUs",
            crate::units::count(s.processes.len(), "process", "processes"),
            s.devices.len()
        )));
    }
    head.push(Span::raw(format!(" · {when}")));
    lines.push(Line::from(head));
    lines.push(Line::from(Span::styled(
        "keys: Tab/→ next GPU  Shift-Tab/← previous  f fold alike GPUs  q quit",
        Style::default().fg(Color::DarkGray),
    )));
    for p in &snap.run.missing {
        lines.push(Line::from(Span::styled(
            format!("{}: no such file or directory (yet, or any more)", clean(&p.display().to_string())),
            Style::default().fg(Color::Yellow),
        )));
    }
    if !snap.run.skipped.is_empty() {
        lines.push(Line::from(Span::styled(
            format!(
                "{} unreadable (half-written or foreign) and left out this second",
                crate::units::count(snap.run.skipped.len(), "report file", "report files")
            ),
            Style::default().fg(Color::Yellow),
        )));
    }
}

fn frame<'a>(snap: &'a Snapshot, paths: &[PathBuf], view: View, now_us: i64, width: usize) -> Frame<'a> {
    let mut lines: Vec<Line> = Vec::new();
    header(snap, paths, now_us, &mut lines);
    let Some(s) = &snap.summary else {
        lines.push(Line::raw(""));
        lines.push(Line::raw("waiting for reports (culedger-*.json) to appear; none is readable yet"));
        return Frame { lines, detail: None, detail_title: String::new() };
    };
    let failed = Style::default().fg(Color::Red).add_modifier(Modifier::BOLD);
    let ok = Style::default().fg(Color::Green);
    // At most three lines (a host name may be any length); the last one marked when cut.
    let verdict: String = clean(&s.verdict.text).chars().take(width.max(20) * 3).collect();
    let mut vlines = crate::layout::wrap(&verdict, width.max(20));
    if vlines.len() > 3 {
        vlines.truncate(3);
        let last = vlines[2].chars().take(width.max(20) - 1).chain(['…']).collect();
        vlines[2] = last;
    }
    for l in vlines {
        lines.push(Line::from(Span::styled(l, if s.verdict.failed { failed } else { ok })));
    }
    lines.push(Line::raw(""));
    let rows = rows(s, view.fold);
    let selected = view.selected.min(rows.len().saturating_sub(1));
    let names: Vec<String> = rows.iter().map(|m| shorten(&gpu_names(s, m), NAME_WIDTH)).collect();
    let w = names.iter().map(|n| n.chars().count()).max().unwrap_or(3).max(3);
    // (header, width) of the columns after the name; dropped from the least needed on
    // (queried, procs, capacity, untracked) until the line fits: a value is never cut.
    let cols: [(&str, usize); 7] =
        [("procs", 5), ("tracked", 11), ("untracked", 11), ("used", 11), ("capacity", 11), ("queried", 13), ("fails", 5)];
    let mut keep = [true; 7];
    for drop in [5, 0, 4, 2] {
        let used: usize = 2 + w + cols.iter().zip(keep).filter(|(_, k)| *k).map(|((_, cw), _)| cw + 1).sum::<usize>();
        if used <= width {
            break;
        }
        keep[drop] = false;
    }
    let row_text = |lead: &str, name: &str, cells: [String; 7]| {
        let mut t = format!("{lead} {name:<w$}");
        for (i, c) in cells.iter().enumerate() {
            if keep[i] {
                t.push_str(&format!(" {c:>cw$}", cw = cols[i].1));
            }
        }
        t
    };
    lines.push(Line::from(Span::styled(
        row_text(" ", "GPU", cols.map(|(h, _)| h.to_string())),
        Style::default().add_modifier(Modifier::UNDERLINED),
    )));
    for (k, members) in rows.iter().enumerate() {
        let d = &s.devices[members[0]];
        let q = d.last_query.as_ref();
        let age = q.map(|q| fmt_age(now_us - (s.t0_unix_us + q.at_us)) + " ago").unwrap_or_else(|| "never".into());
        let text = row_text(
            if k == selected { "▶" } else { " " },
            &names[k],
            [
                d.processes.len().to_string(),
                fmt_bytes(d.live_bytes),
                q.map_or("-".into(), |q| fmt_bytes(q.untracked_bytes)),
                q.map_or("-".into(), |q| fmt_bytes(q.used_bytes)),
                d.total_bytes.map_or("-".into(), fmt_bytes),
                age,
                d.failed_requests.to_string(),
            ],
        );
        let mut style = if d.failures_total > 0 { Style::default().fg(Color::Red) } else { Style::default() };
        if k == selected {
            style = style.add_modifier(Modifier::REVERSED);
        }
        lines.push(Line::from(Span::styled(text, style)));
    }
    lines.push(Line::raw(""));
    let Some(members) = rows.get(selected) else {
        return Frame { lines, detail: None, detail_title: String::new() };
    };
    let first = lines.len();
    let d = &s.devices[members[0]];
    detail(s, d, members, now_us, width.saturating_sub(2).max(30), &mut lines);
    let title = format!(" {} ", shorten(&gpu_names(s, members), NAME_WIDTH));
    let count = lines.len() - first;
    Frame { lines, detail: Some((first, count)), detail_title: title }
}

/// The selected GPU in full.
fn detail(s: &RunSummary, d: &DeviceSummary, members: &[usize], now_us: i64, inner: usize, lines: &mut Vec<Line>) {
    // A line of words inside the block: wrapped, never cut.
    let para = |text: String, style: Style, lines: &mut Vec<Line>| {
        for l in crate::layout::wrap_indent(text.trim_start(), inner.saturating_sub(1), "   ") {
            lines.push(Line::styled(format!(" {l}"), style));
        }
    };
    let whole = d.total_bytes.unwrap_or_else(|| d.peak_bytes.max(1));
    let width = 40;
    let dim = Style::default().fg(Color::DarkGray);
    let bar_line = |name: &str, bytes: i64, color: Color, lines: &mut Vec<Line>| {
        let (on, off) = bar(bytes, whole, width);
        lines.push(Line::from(vec![
            Span::raw(format!(" {:<10} ", clean(name))),
            Span::styled(on, Style::default().fg(color)),
            Span::styled(off, dim),
            Span::raw(format!(" {:>11} {}", fmt_bytes(bytes), pct(bytes, d.total_bytes))),
        ]));
    };
    for (i, c) in d.categories.iter().enumerate() {
        if c.live_bytes == 0 && c.peak_bytes == 0 {
            continue;
        }
        bar_line(&c.name, c.live_bytes, CAT_COLORS.get(i).copied().unwrap_or(Color::White), lines);
    }
    bar_line("tracked", d.live_bytes, Color::White, lines);
    match &d.last_query {
        Some(q) => {
            bar_line("untracked", q.untracked_bytes, Color::Gray, lines);
            bar_line("used", q.used_bytes, Color::White, lines);
            let age = fmt_age(now_us - (s.t0_unix_us + q.at_us));
            let what = if q.api == "nvml" { "NVML reading (at a report of)" } else { "free-memory query" };
            para(
                format!(
                    "last {what} {age} ago: pid {} {} told free {} of {}",
                    q.pid,
                    clean(&q.api),
                    fmt_bytes(q.free_bytes),
                    fmt_bytes(q.total_bytes),
                ),
                Style::default(),
                lines,
            );
            para(
                format!(
                    "at that query: tracked {}, untracked {}",
                    fmt_bytes(q.tracked_bytes),
                    fmt_bytes(q.untracked_bytes)
                ),
                Style::default(),
                lines,
            );
        }
        None => lines.push(Line::raw(" no free-memory query yet: untracked memory unknown")),
    }
    para(
        format!(
            "capacity {} · peak tracked {} · hidden driver costs {}",
            d.total_bytes.map_or("unknown".into(), fmt_bytes),
            fmt_bytes(d.peak_bytes),
            fmt_bytes(d.driver_cost_bytes)
        ),
        Style::default(),
        lines,
    );
    if members.len() > 1 {
        let lo = members.iter().map(|&i| s.devices[i].live_bytes).min().unwrap_or(0);
        let hi = members.iter().map(|&i| s.devices[i].live_bytes).max().unwrap_or(0);
        lines.push(Line::styled(
            format!(
                " folded: {} alike GPUs, tracked {} across them (f unfolds)",
                members.len(),
                crate::units::fmt_range(lo, hi)
            ),
            dim,
        ));
    }
    lines.push(Line::raw(""));
    let status_w = d
        .processes
        .iter()
        .filter_map(|p| s.processes.iter().find(|x| x.pid == p.pid))
        .map(|x| clean(&x.status).chars().count())
        .max()
        .unwrap_or(6)
        .clamp(6, 26);
    // What is left for the name: 1+7+2, 1+5 (rank), 1+status, 1+11.
    let name_w = inner.saturating_sub(29 + status_w).clamp(12, 40);
    lines.push(Line::styled(
        format!(" {:>7}  {:<name_w$} {:>5} {:<status_w$} {:>11}", "pid", "process", "rank", "status", "live here"),
        Style::default().add_modifier(Modifier::UNDERLINED),
    ));
    for p in &d.processes {
        let proc = s.processes.iter().find(|x| x.pid == p.pid);
        let rank = proc.and_then(|x| culedger_analysis::process::rank_hint(&x.env)).map_or("", |(r, _)| r);
        let status = proc.map(|x| x.status.clone()).unwrap_or_default();
        let name = crate::layout::shorten(&clean(proc.and_then(|x| x.title.clone()).as_deref().unwrap_or(&p.label)), name_w);
        let style = if status.starts_with("running") { Style::default() } else { dim };
        lines.push(Line::styled(
            format!(
                " {:>7}  {:<name_w$} {:>5} {:<status_w$} {:>11}",
                p.pid,
                name,
                clean(&rank),
                clean(&status),
                fmt_bytes(p.live_bytes)
            ),
            style,
        ));
    }
    if !d.failures.is_empty() {
        lines.push(Line::raw(""));
        let red = Style::default().fg(Color::Red).add_modifier(Modifier::BOLD);
        for f in d.failures.iter().rev().take(5) {
            para(
                format!(
                    "FAILED at {}: pid {} {} of {} ({}); it held {}",
                    crate::clock::fmt_secs(f.at_us),
                    f.pid,
                    clean(&f.api),
                    fmt_bytes(f.bytes),
                    clean(&f.error_name),
                    fmt_bytes(f.live_bytes)
                ),
                red,
                lines,
            );
        }
    }
}

/// Draws `frame` into `buf` over `area`.
fn draw(f: Frame, area: Rect, buf: &mut Buffer) {
    let Frame { lines, detail, detail_title } = f;
    match detail {
        Some((first, count)) => {
            let above: Vec<Line> = lines[..first].to_vec();
            let inner: Vec<Line> = lines[first..first + count].to_vec();
            let h = (above.len() as u16).min(area.height);
            Paragraph::new(above).render(Rect { height: h, ..area }, buf);
            let rest = Rect { y: area.y + h, height: area.height - h, ..area };
            let block = Block::default().borders(Borders::ALL).title(detail_title);
            Paragraph::new(inner).block(block).render(rest, buf);
        }
        None => Paragraph::new(lines).render(area, buf),
    }
}

/// The buffer as plain text, trailing blanks dropped.
fn buffer_text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out: Vec<String> = Vec::new();
    for y in 0..area.height {
        let mut line = String::new();
        for x in 0..area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push(line.trim_end().to_string());
    }
    while out.last().is_some_and(String::is_empty) {
        out.pop();
    }
    out.join("\n") + "\n"
}

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// One frame as text, `width` columns wide, as tall as it needs.
fn once_text(paths: &[PathBuf], view: View, width: u16) -> String {
    let snap = snapshot(paths);
    let f = frame(&snap, paths, view, now_us(), width as usize);
    let height = (f.lines.len() + 2).min(u16::MAX as usize) as u16;
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    draw(f, area, &mut buf);
    buffer_text(&buf)
}

/// Restores the terminal however `run` ends (a panic included).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
        let _ =
            crossterm::execute!(std::io::stdout(), crossterm::terminal::LeaveAlternateScreen, crossterm::cursor::Show);
    }
}

pub fn command(paths: &[PathBuf], opts: Options) -> Result<i32> {
    let view = View { selected: 0, fold: opts.fold };
    if !opts.wait {
        if let Some(p) = paths.iter().find(|p| std::fs::symlink_metadata(p).is_err()) {
            return Err(Fail::input(format!(
                "{}: no such file or directory (top --wait waits for it to appear)",
                p.display()
            )));
        }
    }
    if opts.once {
        let width = crate::layout::width(
            std::env::var("COLUMNS").ok().as_deref(),
            crossterm::terminal::size().ok().map(|s| s.0 as usize),
        );
        crate::output::print_stdout(&once_text(paths, view, width.clamp(60, 400) as u16))?;
        return Ok(0);
    }
    if !std::io::stdout().is_terminal() {
        return Err(Fail::input("top: standard output is not a terminal (use --once for one frame as text)"));
    }
    // SIGTERM and SIGHUP end the view like q does, so that the terminal is given back.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP, signal_hook::consts::SIGINT] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&stop));
    }
    let tty = Tty::open();
    watch_hangup(tty.fd, Arc::clone(&stop));
    interactive(paths, view, &stop, &tty).map_err(|e| Fail::input(format!("top: terminal error: {e}")))?;
    Ok(0)
}

/// The terminal crossterm reads keys from: standard input when it is one, else `/dev/tty`.
struct Tty {
    fd: libc::c_int,
}

impl Tty {
    fn open() -> Tty {
        if std::io::stdin().is_terminal() {
            return Tty { fd: libc::STDIN_FILENO };
        }
        // SAFETY: open(2) of a constant path; the descriptor lives as long as the process.
        let fd = unsafe { libc::open(c"/dev/tty".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        Tty { fd }
    }

    /// Waits at most `wait` for input. `Ok(true)`: a key can be read; `Ok(false)`: nothing
    /// came, or a signal interrupted the wait; `Err`: the terminal hung
    /// up (its window closed, tmux's server killed, the ssh session gone).
    ///
    /// crossterm's reader is never asked once the terminal has hung up: its read loop retries
    /// a read that returns end of file for ever, spinning a core and never returning to see
    /// SIGTERM.
    fn wait(&self, wait: Duration) -> std::io::Result<bool> {
        if self.fd < 0 {
            return Err(std::io::Error::other("no terminal to read keys from"));
        }
        let mut p = libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd for the call's duration.
        let n = unsafe { libc::poll(&mut p, 1, wait.as_millis().min(i32::MAX as u128) as libc::c_int) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
        }
        if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return Err(std::io::Error::other("the terminal hung up"));
        }
        Ok(n > 0 && p.revents & libc::POLLIN != 0)
    }
}

/// Ends the process when the terminal hangs up while the view is inside crossterm (the
/// moment between `Tty::wait` saying a key is there and crossterm reading it): that reader
/// would otherwise spin for ever. Nothing is left to restore on a terminal that is gone.
fn watch_hangup(fd: libc::c_int, stop: Arc<AtomicBool>) {
    if fd < 0 {
        return;
    }
    let _ = std::thread::Builder::new().name("top-hangup".into()).spawn(move || {
        let mut since: Option<Instant> = None;
        loop {
            std::thread::sleep(Duration::from_millis(200));
            let mut p = libc::pollfd { fd, events: 0, revents: 0 };
            // SAFETY: one pollfd, no wait.
            let hung = unsafe { libc::poll(&mut p, 1, 0) } > 0
                && p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0;
            if hung {
                stop.store(true, Ordering::Relaxed);
                // The main loop sees the hang-up itself within one wait; a second later it
                // can only be stuck inside the reader.
                let t = *since.get_or_insert_with(Instant::now);
                if t.elapsed() > Duration::from_secs(1) {
                    // SAFETY: _exit ends the process without running anything of its own.
                    unsafe { libc::_exit(0) };
                }
            }
        }
    });
}

fn interactive(paths: &[PathBuf], mut view: View, stop: &AtomicBool, tty: &Tty) -> std::io::Result<()> {
    use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    crossterm::terminal::enable_raw_mode()?;
    let _restore = Restore;
    crossterm::execute!(std::io::stdout(), crossterm::terminal::EnterAlternateScreen, crossterm::cursor::Hide)?;
    let backend = ratatui::backend::CrosstermBackend::new(std::io::stdout());
    let mut term = ratatui::Terminal::new(backend)?;
    term.clear()?;
    let mut snap = snapshot(paths);
    let mut loaded = Instant::now();
    let mut dirty = true;
    while !stop.load(Ordering::Relaxed) {
        if loaded.elapsed() >= REFRESH {
            snap = snapshot(paths);
            loaded = Instant::now();
            dirty = true;
        }
        let count = snap.summary.as_ref().map_or(0, |s| rows(s, view.fold).len());
        view.selected = view.selected.min(count.saturating_sub(1));
        if dirty {
            term.draw(|f| {
                let area = f.area();
                draw(frame(&snap, paths, view, now_us(), area.width as usize), area, f.buffer_mut());
            })?;
            dirty = false;
        }
        let wait = REFRESH.saturating_sub(loaded.elapsed()).min(Duration::from_millis(250));
        // A terminal that hung up takes no more frames: end as q does. Otherwise crossterm
        // is asked without waiting, also after a signal (a resize is its SIGWINCH).
        if tty.wait(wait).is_err() {
            break;
        }
        if !event::poll(Duration::ZERO)? {
            continue;
        }
        match event::read()? {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
                match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => break,
                    KeyCode::Char('c') if ctrl => break,
                    KeyCode::Tab | KeyCode::Right | KeyCode::Down | KeyCode::Char('l') | KeyCode::Char('j') => {
                        view.selected = (view.selected + 1) % count.max(1);
                    }
                    KeyCode::BackTab | KeyCode::Left | KeyCode::Up | KeyCode::Char('h') | KeyCode::Char('k') => {
                        view.selected = (view.selected + count.max(1) - 1) % count.max(1);
                    }
                    KeyCode::Char('f') => {
                        // Keep the selected GPU selected across the change.
                        if let Some(s) = &snap.summary {
                            let dev = rows(s, view.fold).get(view.selected).map(|m| m[0]).unwrap_or(0);
                            view.fold = !view.fold;
                            view.selected = rows(s, view.fold).iter().position(|m| m.contains(&dev)).unwrap_or(0);
                        } else {
                            view.fold = !view.fold;
                        }
                    }
                    _ => {}
                }
                dirty = true;
            }
            Event::Resize(..) => dirty = true,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bytes_are_shown_not_sent() {
        assert_eq!(clean("a\x1b[2Jb\x07\u{9b}c\x7f\nd"), "a\\x1b[2Jb\\x07\\u{9b}c\\x7f\\nd");
        assert_eq!(clean("sglang::scheduler_TP0 ✓"), "sglang::scheduler_TP0 ✓");
    }

    #[test]
    fn bars_fill_in_proportion() {
        assert_eq!(bar(50, 100, 10), ("█".repeat(5), "░".repeat(5)));
        assert_eq!(bar(200, 100, 4).0.chars().count(), 4, "never wider than the bar");
        assert_eq!(bar(5, 0, 3).1, "░░░");
    }

    #[test]
    fn an_empty_directory_waits() {
        let dir = tempfile::tempdir().unwrap();
        let text = once_text(&[dir.path().to_path_buf()], View::default(), 100);
        assert!(text.contains("waiting for reports"), "{text}");
    }
}
