//! Hostile files in a run directory ([23] 7-11, 21): FIFOs and devices named like reports,
//! files over the size bound, huge device indices, host names of any length, missing
//! directories. Every command ends (bounded waits here), with one line per refused file.
//! `CULEDGER_CLI=/path/to/old/culedger` runs these against another build.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `culedger ARGS`, killed after `limit` (then None).
fn within(args: &[&str], limit: Duration) -> Option<Output> {
    let mut child = Command::new(culedger_bin())
        .args(args)
        .current_dir(crate_dir())
        .env("NO_COLOR", "1")
        .env("COLUMNS", "120")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn with_good_report() -> tempfile::TempDir {
    let d = tempdir();
    std::fs::copy(fixtures().join("nccl/culedger-4101.json"), d.path().join("culedger-4101.json")).unwrap();
    d
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[test]
fn fifos_devices_and_oversized_files_are_refused_not_read() {
    let d = with_good_report();
    mkfifo(&d.path().join("culedger-x.json"));
    std::os::unix::fs::symlink("/dev/zero", d.path().join("culedger-z.json")).unwrap();
    // A sparse file over the bound: refused by its size, never read.
    let big = std::fs::File::create(d.path().join("culedger-big.json")).unwrap();
    big.set_len(300 << 20).unwrap();
    let dir = d.path().to_str().unwrap();
    for args in [
        &["report", dir][..],
        &["report", dir, "--format", "json"],
        &["explain", dir],
        &["top", "--once", dir],
        &["metrics", dir],
    ] {
        let o = within(args, Duration::from_secs(20)).unwrap_or_else(|| panic!("{args:?} did not end within 20 s"));
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(o.status.code().is_some_and(|c| c <= 2), "{args:?}: {err}");
        match args[0] {
            "metrics" => {
                assert!(
                    out.contains("culedger_reports 1\n") && out.contains("culedger_reports_unreadable 3\n"),
                    "{out}"
                )
            }
            "top" => assert!(out.contains("3 report files unreadable"), "{out}"),
            _ => {
                let lines: Vec<&str> = err.lines().filter(|l| l.contains("skipping")).collect();
                assert_eq!(lines.len(), 3, "{args:?}: {err}");
                assert!(err.contains("culedger-x.json: not a report file (a FIFO)"), "{err}");
                assert!(err.contains("culedger-z.json: not a report file (a device)"), "{err}");
                assert!(err.contains("culedger-big.json: 300 MiB, over the 256 MiB"), "{err}");
            }
        }
    }
    // Named on the command line: one line, exit 2.
    for name in ["culedger-x.json", "culedger-z.json", "culedger-big.json"] {
        let p = d.path().join(name);
        let o = within(&["report", p.to_str().unwrap()], Duration::from_secs(20)).expect("ends");
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
}

/// The largest resident set of `culedger ARGS`, in bytes (wait4's rusage).
fn max_rss(args: &[&str]) -> u64 {
    let child = Command::new(culedger_bin()).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage filled by wait4(2) for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{args:?}: status {status}");
    usage.ru_maxrss as u64 * 1024
}

#[test]
fn a_large_report_costs_a_few_times_its_size() {
    // A 50 MB report: the fixture's events repeated, written piece by piece (the test
    // process stays small: a forked child's resident set starts as its parent's).
    let d = tempdir();
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("nccl/culedger-4101.json")).unwrap()).unwrap();
    let events: Vec<String> = v["devices"][0]["events"].as_array().unwrap().iter().map(|e| e.to_string()).collect();
    v["devices"][0]["events"] = serde_json::Value::String("@@EVENTS@@".into());
    let text = v.to_string();
    let (head, tail) = text.split_once("\"@@EVENTS@@\"").unwrap();
    let path = d.path().join("culedger-4101.json");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    use std::io::Write;
    write!(w, "{head}[").unwrap();
    let mut size = head.len();
    let mut i = 0;
    while size < 50_000_000 {
        let e = &events[i % events.len()];
        write!(w, "{}{e}", if i == 0 { "" } else { "," }).unwrap();
        size += e.len() + 1;
        i += 1;
    }
    write!(w, "]{tail}").unwrap();
    w.flush().unwrap();
    drop(w);
    let file_len = std::fs::metadata(&path).unwrap().len();
    let rss = max_rss(&["report", d.path().to_str().unwrap(), "--format", "json"]);
    // Parsed into a generic tree first it took 8 times the file; straight into the
    // report's types, about 3.
    assert!(rss < 5 * file_len, "{} MB resident for a {} MB report", rss >> 20, file_len >> 20);
}

/// A report of `size` bytes of timeline samples on nccl's rank 0's device, the six
/// categories and a tag's each (written piece by piece: the test process stays small, and a
/// forked child's resident set starts as its parent's). Returns its length and samples.
fn timeline_heavy(dir: &std::path::Path, size: usize) -> (u64, i64) {
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("nccl/culedger-4101.json")).unwrap()).unwrap();
    v["devices"][0]["timeline"] = serde_json::Value::String("@@TIMELINE@@".into());
    let text = v.to_string();
    let (head, tail) = text.split_once("\"@@TIMELINE@@\"").unwrap();
    let path = dir.join("culedger-4101.json");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    use std::io::Write;
    write!(w, "{head}[").unwrap();
    let mut written = head.len();
    let mut i: i64 = 0;
    while written < size {
        let c = |k: i64| (i * (k + 1) << 20) % (1 << 34);
        let s = format!(
            "{}{{\"t_ms\":{},\"t_us\":{},\"seq\":{},\"live_bytes\":{},\"comm\":{},\"graphs\":{},\"ipc\":{},\"kv_pool\":{},\"other\":{},\"tag:warmup\":{},\"weights\":{}}}",
            if i == 0 { "" } else { "," },
            i,
            i * 1000 + 7,
            i * 3,
            (0..7).map(c).sum::<i64>(),
            c(0),
            c(1),
            c(2),
            c(3),
            c(4),
            c(5),
            c(6)
        );
        w.write_all(s.as_bytes()).unwrap();
        written += s.len();
        i += 1;
    }
    write!(w, "]{tail}").unwrap();
    w.flush().unwrap();
    drop(w);
    (std::fs::metadata(&path).unwrap().len(), i)
}

#[test]
fn a_timeline_heavy_report_costs_about_twice_its_size() {
    // A 40 MB report of timeline samples (the six categories and a tag's each): a sample's
    // categories as a map of owned names took 9 times the file (342 MB for 38 MB); in the
    // format's fixed array, about twice (the six categories alone: 1.7 times).
    let d = tempdir();
    let (file_len, i) = timeline_heavy(d.path(), 40_000_000);
    let rss = max_rss(&["report", d.path().to_str().unwrap(), "--format", "json"]);
    assert!(rss < 3 * file_len, "{} MB resident for a {} MB report of {i} samples", rss >> 20, file_len >> 20);
}

/// `plot` of a timeline-heavy report draws at most three points per pixel column (850 of
/// them) and costs what `report` and `html` do, about twice the file. It drew every sample:
/// 188,000 steps per area, a 72 MB SVG, and took 8 times the report in memory (395 MiB for a
/// 50 MB report where `html` took 142).
#[test]
fn plot_of_a_timeline_heavy_report_draws_per_pixel_column() {
    let d = tempdir();
    let (file_len, i) = timeline_heavy(d.path(), 40_000_000);
    let out = tempdir();
    let svg_path = out.path().join("p.svg");
    let rss = max_rss(&["plot", d.path().to_str().unwrap(), "-o", svg_path.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let polygons: Vec<usize> = svg
        .split("<polygon")
        .skip(1)
        .map(|p| {
            let at = p.find("points=\"").unwrap() + 8;
            p[at..at + p[at..].find('"').unwrap()].split(' ').count()
        })
        .collect();
    // Seven areas and the untracked band; each a step polygon, four corners per point drawn.
    assert!(polygons.len() >= 8, "{polygons:?}");
    for n in &polygons {
        assert!(*n <= 4 * (3 * 850 + 16), "a polygon of {n} corners for {i} samples");
    }
    assert!(svg.len() < 2 << 20, "a {} KiB SVG", svg.len() >> 10);
    assert!(rss < 3 * file_len, "{} MB resident for a {} MB report of {i} samples", rss >> 20, file_len >> 20);
}

#[test]
fn memory_viz_refuses_device_indices_beyond_any_ordinal() {
    for index in ["100000000", "9223372036854775807", "-5"] {
        let d = tempdir();
        let text = std::fs::read_to_string(fixtures().join("nccl/culedger-4101.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["devices"][0]["index"] = serde_json::from_str(index).unwrap();
        std::fs::write(d.path().join("culedger-4101.json"), serde_json::to_vec(&v).unwrap()).unwrap();
        let out = d.path().join("m.pickle");
        let o = within(
            &["export", d.path().to_str().unwrap(), "--memory-viz", out.to_str().unwrap()],
            Duration::from_secs(60),
        )
        .expect("ends");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{index}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("device index {index} is outside 0..1023")), "{err}");
        assert!(!out.exists());
    }
}

#[test]
fn a_host_name_of_any_length_is_shown() {
    let d = tempdir();
    let text = std::fs::read_to_string(fixtures().join("nccl/culedger-4101.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["process"]["host"] = serde_json::Value::String("h".repeat(70_000));
    std::fs::write(d.path().join("culedger-4101.json"), serde_json::to_vec(&v).unwrap()).unwrap();
    let o = within(&["top", "--once", d.path().to_str().unwrap()], Duration::from_secs(30)).expect("ends");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("hhhh…"), "{}", stdout(&o));
    assert!(widest(&stdout(&o)) <= 120);
}

#[test]
fn a_missing_directory_is_said_to_be_missing() {
    let missing = "/nonexistent/culedger-run";
    let o = within(&["top", missing], Duration::from_secs(10)).expect("top on a missing directory ends");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1);
    assert!(stderr(&o).contains("no such file or directory (top --wait waits for it to appear)"), "{}", stderr(&o));
    let o = within(&["top", "--once", "--wait", missing], Duration::from_secs(10)).expect("ends");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("{missing}: no such file or directory")), "{}", stdout(&o));
    assert!(!stdout(&o).contains("unreadable"), "{}", stdout(&o));
    // metrics: another path is there, this one is missing (not unreadable).
    let nccl = fixtures().join("nccl");
    let o = within(&["metrics", nccl.to_str().unwrap(), missing], Duration::from_secs(10)).expect("ends");
    let out = stdout(&o);
    assert!(out.contains("culedger_reports_unreadable 0\n") && out.contains("culedger_paths_missing 1\n"), "{out}");
}

/// [23] 7, live: `top` on a terminal, beside a FIFO named like a report, draws its frame and
/// ends on q, and on ^C (a key in raw mode, not a signal). The FIFO once left the screen blank
/// with every key ignored. Waits are bounds on a hang, not timings.
#[test]
fn live_top_beside_a_fifo_draws_and_ends_on_q_and_ctrl_c() {
    use std::io::{Read, Write};
    let d = with_good_report();
    mkfifo(&d.path().join("culedger-x.json"));
    for key in [&b"q"[..], &b"\x03"[..]] {
        let (master, slave) = open_pty();
        let ws = libc::winsize { ws_row: 30, ws_col: 100, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ with a winsize that lives across the call.
        assert_eq!(unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&master), libc::TIOCSWINSZ, &ws) }, 0);
        let mut child = Command::new(culedger_bin())
            .args(["top", d.path().to_str().unwrap()])
            .env("NO_COLOR", "1")
            .env_remove("COLUMNS")
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(slave);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = std::sync::Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = reader.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        let text = || String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
        // The frame names the readable report's GPU and the refused FIFO.
        let start = Instant::now();
        while !(text().contains("culedger top") && text().contains("GPU 0")) && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let drawn = text();
        assert!(drawn.contains("culedger top") && drawn.contains("GPU 0"), "no frame within 60 s: {drawn:?}");
        assert!(drawn.contains("1 report file unreadable"), "the FIFO is said to be left out: {drawn:?}");
        let mut m = &master;
        m.write_all(key).unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if start.elapsed() > Duration::from_secs(30) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert_eq!(status.and_then(|s| s.code()), Some(0), "key {key:?} did not end top: {:?}", text());
    }
}
