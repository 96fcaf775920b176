//! A small HTTP/1.1 server for `metrics --listen`: one GET (or HEAD) per connection, every
//! connection bounded in time and size, so that a Prometheus scrape is answered whatever
//! other clients do (idle ones, half a request line, a client that never reads its answer,
//! megabytes of headers).
//!
//! Limits, as a well-kept server sets them (nginx's `client_header_timeout` and
//! `large_client_header_buffers`, Go's `ReadHeaderTimeout`): the request head must arrive
//! within [`HEAD_TIMEOUT`] and fit in [`HEAD_BYTES`] (else `431`); an answer must be taken
//! within [`WRITE_TIMEOUT`]; [`CONNECTIONS`] connections at most are served at once (each on
//! its own thread; beyond it a new one is closed at once). Documented in docs/reliability.md.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the request line and headers may take to arrive.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes a request line and its headers may hold.
pub const HEAD_BYTES: usize = 16 * 1024;
/// How long a client may take to read its whole answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
pub const CONNECTIONS: usize = 256;

/// An answer: status, content type, body.
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// What a request is answered with, given its path (without the query).
pub type Handler = dyn Fn(&str) -> Answer + Send + Sync;

/// Serves `listener` until the process ends.
pub fn serve(listener: TcpListener, handler: Arc<Handler>) {
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            // EMFILE and the like: let the connections in flight end.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if active.fetch_add(1, Ordering::AcqRel) >= CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            drop(stream);
            continue;
        }
        let (mine, handler) = (Arc::clone(&active), Arc::clone(&handler));
        let spawned =
            std::thread::Builder::new().name("culedger-http".into()).stack_size(256 * 1024).spawn(move || {
                connection(stream, &*handler);
                mine.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Why a request head could not be read.
enum Head {
    Complete(Vec<u8>),
    TooLarge,
    /// Timed out, closed, or failed: nothing to answer.
    Gone,
}

/// Reads the request head: up to the blank line, within the time and size bounds.
fn read_head(stream: &mut TcpStream) -> Head {
    let deadline = Instant::now() + HEAD_TIMEOUT;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Head::Gone;
        }
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => return Head::Gone,
            Ok(n) => n,
        };
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = find_end(&head[from..]).map(|e| from + e) {
            if end > HEAD_BYTES {
                return Head::TooLarge;
            }
            head.truncate(end);
            return Head::Complete(head);
        }
        if head.len() > HEAD_BYTES {
            return Head::TooLarge;
        }
    }
}

/// Where the head ends (after its blank line: CRLF CRLF, or LF LF from lax clients).
fn find_end(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len()).find_map(|i| {
        if bytes[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if bytes[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

fn text(status: u16, body: &str) -> Answer {
    Answer { status, content_type: "text/plain; charset=utf-8", body: body.as_bytes().to_vec() }
}

/// Serves one connection: one request, one answer, then close.
fn connection(mut stream: TcpStream, handler: &Handler) {
    let _ = stream.set_nodelay(true);
    let (answer, head_only) = match read_head(&mut stream) {
        Head::Gone => return,
        Head::TooLarge => (text(431, "request head over 16 KiB\n"), false),
        Head::Complete(head) => {
            let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut words = line.split_ascii_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(method @ ("GET" | "HEAD")), Some(target), Some(v)) if v.starts_with("HTTP/1.") => {
                    let path = target.split('?').next().unwrap_or_default();
                    (handler(path), method == "HEAD")
                }
                (Some(_), Some(_), Some(v)) if v.starts_with("HTTP/1.") => (text(405, "only GET and HEAD\n"), false),
                _ => (text(400, "bad request line\n"), false),
            }
        }
    };
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        answer.status,
        reason(answer.status),
        answer.content_type,
        answer.body.len()
    );
    if answer.status == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    let deadline = Instant::now() + WRITE_TIMEOUT;
    let body: &[u8] = if head_only { &[] } else { &answer.body };
    if write_within(&mut stream, out.as_bytes(), deadline)
        .and_then(|()| write_within(&mut stream, body, deadline))
        .is_err()
    {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    if answer.status == 431 {
        // What the client still sends is read (a little, briefly) before closing, so that
        // the close does not reset the connection before it has read the answer.
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 4096];
        let mut left: usize = 256 * 1024;
        while left > 0 {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    }
}

/// Writes all of `bytes` before `deadline`, or fails.
fn write_within(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        let chunk = bytes.len().min(64 * 1024);
        match stream.write(&bytes[..chunk]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_ends_at_its_blank_line() {
        assert_eq!(find_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"), Some(27));
        assert_eq!(find_end(b"GET / HTTP/1.0\n\n"), Some(16));
        assert_eq!(find_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }
}
