//! `culedger metrics --listen` under hostile and careless clients ([23] 1-3), with real
//! concurrent clients on 127.0.0.1: idle connections and half request lines, clients that
//! never read their answer, megabytes of headers. Every loop here is bounded.
//! `CULEDGER_CLI=/path/to/old/culedger` runs these against another build.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::io::FromRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `culedger metrics --listen 127.0.0.1:PORT DIR`, once it listens.
fn start(dir: &std::path::Path) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(culedger_bin())
        .args(["metrics", "--listen", &format!("127.0.0.1:{port}")])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = Server { child, port };
    let mut line = String::new();
    BufReader::new(server.child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("serving http://"), "{line}");
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("metrics --listen never listened on {port}");
}

/// One scrape within `limit`: the status line and the body.
fn scrape(port: u16, limit: Duration) -> Option<(String, String)> {
    let deadline = Instant::now() + limit;
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), limit).ok()?;
    s.set_write_timeout(Some(limit)).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
        s.set_read_timeout(Some(left)).ok()?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

#[test]
fn idle_and_half_open_clients_do_not_stall_scrapes() {
    let server = start(&fixtures().join("nccl"));
    // Eight clients that connect and send nothing or half a request line, and stay.
    let mut idle = Vec::new();
    for k in 0..8 {
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        if k % 2 == 1 {
            s.write_all(b"GET /metr").unwrap();
        }
        idle.push(s);
    }
    let mut missed = 0;
    for _ in 0..15 {
        match scrape(server.port, Duration::from_secs(3)) {
            Some((status, body)) => {
                assert_eq!(status, "HTTP/1.1 200 OK");
                assert!(body.contains("culedger_device_tracked_bytes{"), "{body}");
            }
            None => missed += 1,
        }
    }
    assert_eq!(missed, 0, "scrapes without an answer within 3 s, with 8 idle clients");
    // The idle ones are closed once the head timeout (5 s) has passed.
    let mut s = idle.pop().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut rest = Vec::new();
    let start = Instant::now();
    let _ = s.read_to_end(&mut rest);
    assert!(start.elapsed() < Duration::from_secs(14), "an idle connection is closed after the head timeout");
}

/// A connection whose receive buffer is small (4 KiB), to a loopback port.
fn small_window(port: u16) -> TcpStream {
    // SAFETY: a new socket, its option set before connect(2), then owned by the TcpStream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let size: libc::c_int = 4096;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be() },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        TcpStream::from_raw_fd(fd)
    }
}

#[test]
fn clients_that_never_read_do_not_freeze_the_endpoint() {
    // A title of 4 MiB on every process (written once per process, on its info series): an
    // exposition of about 12 MiB, more than the socket buffers of two connections hold.
    let d = tempdir();
    let title = "t".repeat(4 << 20);
    for e in std::fs::read_dir(fixtures().join("nccl")).unwrap().flatten() {
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        v["process"]["title"] = serde_json::Value::String(title.clone());
        std::fs::write(d.path().join(e.file_name()), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    let server = start(d.path());
    let mut stuck = Vec::new();
    for _ in 0..2 {
        let mut s = small_window(server.port);
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        stuck.push(s);
    }
    // Time for the server to build both answers and fill both windows.
    std::thread::sleep(Duration::from_secs(2));
    for k in 0..3 {
        let got = scrape(server.port, Duration::from_secs(8));
        let (status, body) = got.unwrap_or_else(|| panic!("scrape {k}: no answer within 8 s"));
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.len() > 10 << 20 && body.ends_with('\n'), "scrape {k}: {} bytes", body.len());
    }
    drop(stuck);
}

#[test]
fn a_request_head_over_16_kib_is_refused() {
    let server = start(&fixtures().join("nccl"));
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
    // 64 KiB of header lines, without the blank line that would end them.
    let line = format!("X-Filler: {}\r\n", "a".repeat(1000));
    for _ in 0..64 {
        if s.write_all(line.as_bytes()).is_err() {
            break;
        }
    }
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer:?}");
    // And the server still answers.
    let (status, _) = scrape(server.port, Duration::from_secs(5)).expect("a scrape after the refusal");
    assert_eq!(status, "HTTP/1.1 200 OK");
    // Other methods and paths.
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.write_all(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 405 "), "{answer:?}");
}
