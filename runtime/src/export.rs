//! Sending what a session records to the engines a fleet already runs
//! (`--otlp`): HTTP/1.1 POSTs of gzip'd protobuf bodies from a thread of
//! their own, through a queue bounded in bytes.
//!
//! The target never waits for an endpoint, and neither does the trace
//! writer: [`Exporter::send`] never blocks. A body that does not fit in
//! the queue is dropped and its items (spans) counted; what was queued is
//! kept, and sent once the endpoint answers. Connection failures, time
//! outs and the answers the OTLP/HTTP specification calls retryable (429,
//! 502, 503, 504) are retried with an exponential backoff (0.5 s doubling
//! to 8 s, with jitter; a `Retry-After` in seconds is honoured, at most
//! 60); any other answer drops the body, counted, its first words kept for
//! the report. At the end, the queue is drained for at most the session's
//! `--export-timeout`; what is left is counted too.
//!
//! The endpoint is untrusted: its answer is read within a deadline and at
//! most [`MAX_ANSWER`] bytes, redirections are not followed, and only the
//! published protos decode its body (`ExportTraceServiceResponse`'s
//! partial success: rejected spans are counted).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes of an endpoint's answer read, at most (status line, headers and
/// body).
pub const MAX_ANSWER: usize = 64 << 10;

/// The default bound of the queue (`--export-queue`).
pub const DEFAULT_QUEUE: u64 = 64 << 20;

/// The default time the end of a session gives the queue to drain
/// (`--export-timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(8);
const MAX_RETRY_AFTER: u64 = 60;

/// An `http://host[:port][/path]` endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port` as connected to and as the `Host` header says it.
    pub authority: String,
    /// The path of the base URL, without a trailing slash ("" for none).
    pub base: String,
}

impl Endpoint {
    /// Parse `url`: plain HTTP only (a local OpenTelemetry Collector
    /// forwards with TLS where the fleet needs it).
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let rest = if let Some(r) = url.strip_prefix("http://") {
            r
        } else if url.starts_with("https://") {
            return Err(format!(
                "`{url}`: https is not supported; send to a local OpenTelemetry Collector over http \
                 (it forwards with TLS)"
            ));
        } else {
            return Err(format!("`{url}` is not an http:// URL"));
        };
        let (host_port, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if host_port.is_empty() {
            return Err(format!("`{url}` names no host"));
        }
        if host_port.contains('@') || path.contains(['?', '#']) {
            return Err(format!("`{url}`: credentials, queries and fragments are not supported"));
        }
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) || host_port.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!("`{}` holds spaces or control characters", url.escape_debug()));
        }
        // An IPv6 address is bracketed; the port follows the last colon.
        let has_port = match host_port.rfind(':') {
            Some(i) => !host_port[i..].contains(']'),
            None => false,
        };
        let host = if has_port { &host_port[..host_port.rfind(':').unwrap_or(0)] } else { host_port };
        if host.is_empty() || host == "[]" {
            return Err(format!("`{url}` names no host"));
        }
        let authority = if has_port {
            let port = &host_port[host_port.rfind(':').unwrap_or(0) + 1..];
            if port.parse::<u16>().is_err() {
                return Err(format!("`{url}`: `{port}` is not a port"));
            }
            host_port.to_string()
        } else {
            format!("{host_port}:80")
        };
        Ok(Endpoint { authority, base: path.trim_end_matches('/').to_string() })
    }

    /// The path of a signal's requests: `/v1/traces` after the base, as
    /// the OTLP/HTTP specification has it (unless the base ends with it).
    pub fn path(&self, signal: &str) -> String {
        if self.base.ends_with(signal) {
            self.base.clone()
        } else {
            format!("{}{signal}", self.base)
        }
    }
}

/// What one endpoint got, for the session's report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Requests the endpoint accepted, and the items (spans) in them.
    pub requests: u64,
    pub items: u64,
    /// Items the endpoint said it rejected (`partial_success`).
    pub rejected: u64,
    /// Items dropped: the queue was full; the endpoint refused their
    /// request for good; the session ended before they could be sent.
    pub queue_full: u64,
    pub refused: u64,
    pub unsent: u64,
    /// Attempts that failed and were tried again.
    pub retries: u64,
    /// The first refusal or rejection, as the endpoint worded it.
    pub first_error: Option<String>,
}

impl Sent {
    /// The items not delivered, by reason (those with some).
    pub fn lost(&self) -> Vec<(u64, &'static str)> {
        [
            (self.queue_full, "the export queue was full (--export-queue)"),
            (self.refused, "the endpoint refused them"),
            (self.rejected, "the endpoint accepted the requests but rejected them"),
            (self.unsent, "the endpoint did not take them before --export-timeout"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .collect()
    }
}

/// A request to send: where, what, and how many items it holds.
pub struct Request {
    /// The path (and query) after the endpoint's authority.
    pub path: String,
    pub content_type: String,
    /// The body is gzip'd (`Content-Encoding: gzip`).
    pub gzip: bool,
    pub body: Vec<u8>,
    /// Items (spans, samples) it holds, for the counts.
    pub items: u64,
}

struct Item {
    request: std::sync::Arc<Request>,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    bytes: u64,
    /// The session is over: drain until this instant.
    closing: Option<Instant>,
    sent: Sent,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

/// A queue of bodies and the thread that POSTs them to one URL.
pub struct Exporter {
    shared: Arc<Shared>,
    limit: u64,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How a request went.
enum Answer {
    /// Accepted; the body of the answer.
    Ok(Vec<u8>),
    /// Worth trying again (after the server's `Retry-After`, if it said).
    Again(String, Option<u64>),
    /// Refused for good.
    Refused(String),
}

impl Exporter {
    /// Start the thread that POSTs to `path` at `endpoint` with
    /// `content_type`; the queue holds at most `limit` bytes. `rejected`
    /// reads a 2xx answer's body: the items it rejected and why.
    /// `verbose`: each failed attempt is said on standard error, with when
    /// the next comes (`-v`).
    pub fn start(
        endpoint: &Endpoint,
        limit: u64,
        rejected: fn(&[u8]) -> Option<(u64, String)>,
        verbose: bool,
    ) -> std::io::Result<Exporter> {
        let shared = Arc::new(Shared { queue: Mutex::new(Queue::default()), wake: Condvar::new() });
        let sh = shared.clone();
        let endpoint = endpoint.clone();
        let thread = std::thread::Builder::new()
            .name("exporter".into())
            .spawn(move || export_loop(&sh, &endpoint, rejected, verbose))?;
        Ok(Exporter { shared, limit, thread: Some(thread) })
    }

    /// Queue `request`: never waits; one the queue has no room for is
    /// dropped, and its items counted.
    pub fn send(&self, request: Request) {
        let mut q = lock(&self.shared.queue);
        if q.bytes + request.body.len() as u64 > self.limit {
            q.sent.queue_full += request.items;
            return;
        }
        q.bytes += request.body.len() as u64;
        q.items.push_back(Item { request: std::sync::Arc::new(request) });
        self.shared.wake.notify_one();
    }

    /// An encoded protobuf message for `path`, sent gzip'd, the OTLP way.
    pub fn send_protobuf(&self, path: &str, encoded: &[u8], items: u64) {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        // (Writing to memory does not fail.)
        if let Ok(body) = gz.write_all(encoded).and_then(|_| gz.finish()) {
            self.send(Request {
                path: path.to_string(),
                content_type: "application/x-protobuf".into(),
                gzip: true,
                body,
                items,
            });
        }
    }

    /// The session is ending: what is queued is sent until `by` (and no
    /// later), without waiting here. Exporters closed together share
    /// their `--export-timeout`; each then [`Exporter::finish`]es.
    pub fn close(&self, by: Instant) {
        let mut q = lock(&self.shared.queue);
        q.closing = Some(q.closing.map_or(by, |c| c.min(by)));
        self.shared.wake.notify_all();
    }

    /// The session is over: send what is queued within `timeout` (or
    /// until [`Exporter::close`]'s instant, if sooner), then say what the
    /// endpoint got.
    pub fn finish(mut self, timeout: Duration) -> Sent {
        self.close(Instant::now() + timeout);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut q = lock(&self.shared.queue);
        let left: u64 = q.items.iter().map(|i| i.request.items).sum();
        q.sent.unsent += left;
        q.items.clear();
        std::mem::take(&mut q.sent)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            lock(&self.shared.queue).closing = Some(Instant::now());
            self.shared.wake.notify_all();
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn export_loop(sh: &Shared, endpoint: &Endpoint, rejected: fn(&[u8]) -> Option<(u64, String)>, verbose: bool) {
    let mut backoff = FIRST_BACKOFF;
    let mut jitter = crate::os::sys::monotonic_ns() | 1;
    loop {
        // The oldest body, left in the queue while it is tried (it counts
        // against the bound until it is sent).
        let (request, closing) = {
            let mut q = lock(&sh.queue);
            loop {
                if let Some(i) = q.items.front() {
                    break (i.request.clone(), q.closing);
                }
                if q.closing.is_some() {
                    return;
                }
                q = sh.wake.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        if closing.is_some_and(|c| Instant::now() >= c) {
            return;
        }
        let (path, items) = (request.path.as_str(), request.items);
        let answer = post(endpoint, &request, sh);
        let mut q = lock(&sh.queue);
        let done = |q: &mut Queue| {
            if let Some(i) = q.items.pop_front() {
                q.bytes -= i.request.body.len() as u64;
            }
        };
        match answer {
            Answer::Ok(answer) => {
                done(&mut q);
                q.sent.requests += 1;
                q.sent.items += items;
                if let Some((n, why)) = rejected(&answer).filter(|(n, _)| *n > 0) {
                    // (The endpoint's number: no more than the request's.)
                    q.sent.rejected += n.min(items);
                    q.sent.first_error.get_or_insert(why);
                }
                backoff = FIRST_BACKOFF;
            }
            Answer::Refused(why) => {
                done(&mut q);
                q.sent.refused += items;
                q.sent.first_error.get_or_insert(why);
                backoff = FIRST_BACKOFF;
            }
            Answer::Again(why, after) => {
                q.sent.retries += 1;
                q.sent.first_error.get_or_insert_with(|| why.clone());
                // Exponential, with a quarter of jitter either way.
                jitter ^= jitter << 13;
                jitter ^= jitter >> 7;
                jitter ^= jitter << 17;
                let base = backoff.as_millis() as u64;
                let wait = match after {
                    // (Never sooner than the first backoff: a `Retry-After:
                    // 0` does not make a loop of uploads.)
                    Some(s) => Duration::from_secs(s.min(MAX_RETRY_AFTER)).max(FIRST_BACKOFF),
                    None => Duration::from_millis(base * 3 / 4 + jitter % (base / 2 + 1)),
                };
                backoff = (backoff * 2).min(MAX_BACKOFF);
                if verbose {
                    crate::eprintln_escaped!(
                        "Export: http://{}{path}: {why}; trying again in {} ms",
                        endpoint.authority,
                        wait.as_millis()
                    );
                }
                let until = Instant::now() + wait;
                loop {
                    let now = Instant::now();
                    let end = q.closing.map_or(until, |c| c.min(until));
                    if now >= end {
                        break;
                    }
                    q = sh.wake.wait_timeout(q, end - now).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
    }
}

/// POST `request`: one connection per request (`Connection: close`),
/// within [`REQUEST_TIMEOUT`], and the session's end once it is closing
/// (looked at again as the request goes: it may come while it is sent).
fn post(endpoint: &Endpoint, request: &Request, sh: &Shared) -> Answer {
    let (path, body) = (request.path.as_str(), request.body.as_slice());
    let started = Instant::now() + REQUEST_TIMEOUT;
    let deadline = || lock(&sh.queue).closing.map_or(started, |c| c.min(started));
    let left = || deadline().saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    let addrs: Vec<_> = match endpoint.authority.to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => return Answer::Again(format!("cannot resolve {}: {e}", endpoint.authority), None),
    };
    let mut stream = None;
    let mut last = String::from("no address");
    for a in &addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT.min(left())) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to {}: {e}", endpoint.authority),
        }
    }
    let Some(mut s) = stream else { return Answer::Again(last, None) };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: telco-stap/{}\r\nContent-Type: {}\r\n{}\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.authority,
        env!("CARGO_PKG_VERSION"),
        request.content_type,
        if request.gzip { "Content-Encoding: gzip\r\n" } else { "" },
        body.len()
    );
    let io = |e: std::io::Error| Answer::Again(format!("{}: {e}", endpoint.authority), None);
    if let Err(e) = s.set_write_timeout(Some(left())).and_then(|_| s.write_all(head.as_bytes())) {
        return io(e);
    }
    // The body a piece at a time, each within what is left: a write
    // timeout bounds one write, and an endpoint that takes a few bytes at a
    // time would hold a whole body for ever.
    for piece in body.chunks(64 << 10) {
        if Instant::now() >= deadline() {
            return Answer::Again(format!("{}: the request was not taken in time", endpoint.authority), None);
        }
        if let Err(e) = s.set_write_timeout(Some(left())).and_then(|_| s.write_all(piece)) {
            return io(e);
        }
    }
    if let Err(e) = s.flush() {
        return io(e);
    }
    // The answer: at most MAX_ANSWER bytes, within the deadline.
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Err(e) = s.set_read_timeout(Some(left())) {
            return io(e);
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.len() >= MAX_ANSWER {
                    got.truncate(MAX_ANSWER);
                    break;
                }
                // Enough once the body its length announces is in, or
                // the last chunk of a chunked one.
                if complete(&got) {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return io(e),
        }
        if Instant::now() >= deadline() {
            return Answer::Again(format!("{}: no answer in time", endpoint.authority), None);
        }
    }
    read_answer(&got)
}

/// The end of the headers, if they are all in.
fn header_end(got: &[u8]) -> Option<usize> {
    got.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The whole answer is in: the body its `Content-Length` says, or a
/// chunked body's last chunk (an interim `1xx` answer is not the end).
fn complete(got: &[u8]) -> bool {
    let Some((head, body)) = final_answer(got) else { return false };
    if let Some(n) = header(&head, "content-length").and_then(|n| n.parse::<usize>().ok()) {
        return body.len() >= n;
    }
    header(&head, "transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
        && (body.starts_with(b"0\r\n") || body.windows(5).any(|w| w == b"\r\n0\r\n"))
        && body.ends_with(b"\r\n\r\n")
}

/// The headers and the body of the final answer, past any interim `1xx`
/// ones (`100 Continue`), once its headers are all in.
fn final_answer(mut got: &[u8]) -> Option<(String, &[u8])> {
    loop {
        let end = header_end(got)?;
        let head = String::from_utf8_lossy(&got[..end]).into_owned();
        let interim = head.starts_with("HTTP/1.") && head.split(' ').nth(1).is_some_and(|s| s.starts_with('1'));
        if !interim {
            return Some((head, &got[end..]));
        }
        got = &got[end..];
    }
}

/// Classify an answer (as the OTLP/HTTP specification does).
fn read_answer(got: &[u8]) -> Answer {
    let Some((head, rest)) = final_answer(got) else {
        return Answer::Again("an incomplete answer".into(), None);
    };
    let status: u16 = match head.split(' ').nth(1).and_then(|s| s.parse().ok()) {
        Some(s) if head.starts_with("HTTP/1.") => s,
        _ => return Answer::Refused(format!("not an HTTP answer: {}", short(&head.as_bytes()[..head.len().min(40)]))),
    };
    let mut body = rest.to_vec();
    if header(&head, "transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        body = unchunk(&body);
    }
    if let Some(n) = header(&head, "content-length").and_then(|n| n.parse::<usize>().ok()) {
        body.truncate(n);
    }
    match status {
        200..=299 => Answer::Ok(body),
        429 | 502 | 503 | 504 => {
            let after = header(&head, "retry-after").and_then(|s| s.parse::<u64>().ok());
            Answer::Again(format!("HTTP {status}"), after)
        }
        _ => {
            let text = if body.is_empty() { String::new() } else { format!(": {}", short(&body)) };
            Answer::Refused(format!("HTTP {status}{text}"))
        }
    }
}

/// A chunked body's data (what arrived of it).
fn unchunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&b[..i]);
        let Ok(n) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16) else { break };
        if n == 0 {
            break;
        }
        let data = &b[i + 2..];
        out.extend_from_slice(&data[..n.min(data.len())]);
        b = data.get(n.saturating_add(2)..).unwrap_or(&[]);
    }
    out
}

/// At most 200 bytes of the endpoint's words, printable.
fn short(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(200)]);
    s.trim().chars().flat_map(char::escape_debug).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn urls() {
        let e = Endpoint::parse("http://localhost:4318").unwrap();
        assert_eq!((e.authority.as_str(), e.path("/v1/traces").as_str()), ("localhost:4318", "/v1/traces"));
        let e = Endpoint::parse("http://[::1]:4318/otlp/").unwrap();
        assert_eq!((e.authority.as_str(), e.path("/v1/traces").as_str()), ("[::1]:4318", "/otlp/v1/traces"));
        let e = Endpoint::parse("http://collector/v1/traces").unwrap();
        assert_eq!((e.authority.as_str(), e.path("/v1/traces").as_str()), ("collector:80", "/v1/traces"));
        for bad in [
            "https://x",
            "ftp://x",
            "http://",
            "http://:80",
            "http://h:port",
            "http://u@h",
            "http://h/a?b",
            "http://h/a b",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn answers() {
        assert!(matches!(read_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab"), Answer::Ok(b) if b == b"ab"));
        assert!(matches!(
            read_answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n"),
            Answer::Ok(b) if b == b"abc"
        ));
        assert!(matches!(read_answer(b"HTTP/1.1 503 x\r\nRetry-After: 3\r\n\r\n"), Answer::Again(_, Some(3))));
        assert!(matches!(read_answer(b"HTTP/1.1 429 x\r\n\r\n"), Answer::Again(_, None)));
        assert!(matches!(read_answer(b"HTTP/1.1 301 x\r\nLocation: /y\r\n\r\n"), Answer::Refused(_)));
        assert!(
            matches!(read_answer(b"HTTP/1.1 400 x\r\nContent-Length: 3\r\n\r\nbad"), Answer::Refused(w) if w == "HTTP 400: bad")
        );
        assert!(matches!(read_answer(b"SSH-2.0\r\n\r\n"), Answer::Refused(_)));
        assert!(matches!(read_answer(b"HTTP/1.1 200"), Answer::Again(..)));
    }

    #[test]
    fn interim_answers_chunks_and_odd_sizes() {
        let ok = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
        assert!(complete(ok));
        assert!(matches!(read_answer(ok), Answer::Ok(b) if b == b"hi"));
        assert!(!complete(b"HTTP/1.1 100 Continue\r\n\r\n"));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert!(complete(chunked));
        assert!(!complete(&chunked[..chunked.len() - 2]));
        assert!(matches!(read_answer(chunked), Answer::Ok(b) if b == b"abc"));
        assert_eq!(unchunk(b"FFFFFFFFFFFFFFFF\r\nab"), b"ab");
    }

    /// A server answering each request with the next of `answers`; the
    /// bodies it got, through the channel.
    fn server(answers: Vec<&'static str>) -> (Endpoint, std::sync::mpsc::Receiver<Vec<u8>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for a in answers {
                let (mut s, _) = l.accept().unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !complete(&got) {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let end = header_end(&got).unwrap();
                tx.send(got[end..].to_vec()).unwrap();
                s.write_all(a.as_bytes()).unwrap();
            }
        });
        (Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap(), rx)
    }

    /// `body` as it is (the queue's and the retries' mechanics, not gzip).
    fn raw(x: &Exporter, body: &[u8], items: u64) {
        let (path, content_type) = ("/v1/traces".into(), "application/x-protobuf".into());
        x.send(Request { path, content_type, gzip: false, body: body.to_vec(), items });
    }

    fn none(_: &[u8]) -> Option<(u64, String)> {
        None
    }

    #[test]
    fn retries_then_sends_in_order() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let (e, rx) = server(vec!["HTTP/1.1 503 busy\r\nRetry-After: 0\r\n\r\n", ok, ok, "HTTP/1.1 400 no\r\n\r\n"]);
        let x = Exporter::start(&e, 1 << 20, none, false).unwrap();
        raw(&x, b"one", 1);
        raw(&x, b"two", 2);
        raw(&x, b"three", 4);
        let got: Vec<Vec<u8>> = (0..4).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got, [b"one".to_vec(), b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
        let sent = x.finish(Duration::from_secs(5));
        assert_eq!((sent.requests, sent.items, sent.retries, sent.refused, sent.unsent), (2, 3, 1, 4, 0));
        assert_eq!(sent.first_error.as_deref(), Some("HTTP 503"));
    }

    #[test]
    fn a_full_queue_drops_the_new_body() {
        // Nothing listens on port 1 of 127.0.0.1: every try fails.
        let e = Endpoint::parse("http://127.0.0.1:1").unwrap();
        let x = Exporter::start(&e, 10, none, false).unwrap();
        raw(&x, &[0; 6], 3);
        raw(&x, &[0; 6], 5);
        raw(&x, &[0; 4], 7);
        let sent = x.finish(Duration::ZERO);
        assert_eq!((sent.requests, sent.queue_full, sent.unsent), (0, 5, 10));
    }
}
