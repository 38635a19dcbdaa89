//! `--chrome FILE`: Chrome Trace Event JSON, streamed to disk (a
//! [`TraceWriter`]).
//!
//! The file is the JSON Array Format: `[`, one event per line, `]`.
//! Events are written as they arrive (a call's complete event when it
//! returns, so inner calls come before outer ones); viewers order them by
//! time. Memory stays bounded whatever the trace's size: nothing is kept
//! but the names of the threads seen. Every way a session ends that
//! telco-stap survives (target exit or crash, `exit()`, `-T`, Ctrl-C,
//! SIGTERM/SIGHUP) closes the array, so the file is valid JSON; were
//! telco-stap killed outright, the viewers still load the events written
//! (the closing `]` is optional in this format).
//!
//! The file stops at `--max-size` ([`DEFAULT_MAX_SIZE`] without it): the
//! first event that would take it past, and every event after it, are left
//! out and counted ([`Written::left_out`]), room being kept for the
//! closing `]`. Past [`VIEWER_LIMIT`] a warning says chrome://tracing may
//! not open it. Events are formatted in place into one buffer, from bytes
//! made once per probe and per thread (docs/PERFORMANCE.md: the writer's
//! speed decides how long a hot session takes to end).
//!
//! Times are microseconds with nanosecond fractions (`12.345`), the unit
//! of the format, written from integer nanoseconds without floating point,
//! relative to the session's start: events carry wall-clock nanoseconds
//! (`gettimeofday_ns()`), which as microseconds with three decimals would
//! need more digits than the viewers' doubles keep. The absolute base is
//! written once, as the metadata event `telco_clock_base` (CLOCK_REALTIME
//! nanoseconds). A call's start and end are each converted to integer
//! nanoseconds and its duration written as their difference, so a call
//! that returned inside another never ends after it in the file.
//!
//! # Where the calls come from
//!
//! * After pass 2 the driver (src/main.rs) adds one probe
//!   (`Program::add_chrome_spans`) on the return of every probed function:
//!   `__telco_span(@entry(__telco_ticks()))` (a function not entered by a
//!   call gets none: `Module::no_return_address`).
//! * In the target, `rt_span` (compiler/rt/rt.c) appends the call, unless
//!   shorter than `--chrome-min-dur` (`Header::span_min_ticks`), to its
//!   thread slot's stage (`SpanStage` at `Header::spans_off`: plain stores,
//!   laid out only with `--chrome`); a full stage (64 calls) goes into the
//!   ring as one `EV_SPANS` record, so a call costs no ring reservation of
//!   its own. `ProbeEntry::span` lets lean trampolines do the same inline
//!   (`trampoline::SpanInline`, `trampoline::ClockOnly`).
//! * Times are TSC ticks there; the tracer converts them with the one
//!   calibration of the process (`os::sys::clock`).
//! * The consumer thread (`session::consumer`) appends `EV_SPANS` payloads to a binary
//!   spool as they are (`crate::feed::Feed`) and takes what is left in the
//!   stages when the session ends; the trace writer thread turns the spool
//!   into JSON (and `--perfetto`'s packets) at `SCHED_IDLE`, on CPU time
//!   the target does not want, and frees the spool's disk space behind it.

use std::collections::{HashMap, HashSet};

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::feed::{Calls, Config, End, Report, TraceWriter};
// The trace files' sizes, said and parsed (here before the feed had them).
use crate::feed::{limit_text, size_text, DEFAULT_MAX_SIZE};

/// The flag that asks for the file (its messages say it).
pub const FLAG: &str = "--chrome";

/// Bytes gathered before they are written to the file.
const BUFFER: usize = 1 << 20;

pub struct Chrome {
    out: File,
    path: PathBuf,
    /// Calls come in TSC ticks.
    clock: crate::os::sys::Clock,
    /// Events not yet written to `out` (formatted in place).
    buf: Vec<u8>,
    pid: u32,
    /// By probe index: a complete event's first bytes, up to its time
    /// (`,\n{"ph":"X","cat":"function","name":"NAME","ts":`, the name
    /// JSON-escaped); `unknown`'s for a probe the artifact does not have.
    spans: Vec<Vec<u8>>,
    unknown: Vec<u8>,
    threads: HashSet<u32>,
    /// Threads already named, by the tid's low bits: most calls find
    /// theirs here, without hashing (calls come 64 at a time per thread,
    /// from threads taking turns).
    named: [u32; 64],
    /// The last thread seen (most events come from the thread before).
    last_tid: u32,
    /// `,"pid":P,"tid":` of the last thread's process.
    pid_prefix: Vec<u8>,
    /// The process of each thread named (the session's processes each get
    /// a track: a worker, a program run later), and of the last thread.
    owners: HashMap<u32, u32>,
    /// Threads' names as they were told (`owner`), by tid.
    told: HashMap<u32, Vec<u8>>,
    processes: HashSet<u32>,
    last_pid: u32,
    line: Vec<u8>,
    first: bool,
    events: u64,
    /// The session's start, CLOCK_REALTIME ns: every time is written
    /// relative to it.
    base: u64,
    process: Vec<u8>,
    /// The file's size so far (what the file will be once the buffer is
    /// written): a trace that grows past what chrome://tracing opens says
    /// so once (`-w`: not).
    written: u64,
    quiet: bool,
    viewer_limit: u64,
    passed_viewer_limit: bool,
    /// `--max-size`: the file never grows past it; events that would
    /// take it further are left out (`full` from the first), counted.
    max_size: u64,
    full: bool,
    left_out: u64,
    /// On a terminal: a status line, redrawn every second while the trace
    /// grows (as `perf record` does): when it was last drawn, the events
    /// then, whether one is on the screen.
    status: Option<(std::time::Instant, u64, bool)>,
}

/// The size past which a trace is reported while it grows: about what
/// chrome://tracing opens (the Perfetto UI opens up to about 2 GB).
pub const VIEWER_LIMIT: u64 = 256 << 20;

/// The file's last bytes (`\n]\n`), kept room for under `--max-size`.
const CLOSING: u64 = 3;

/// What a finished trace holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub events: u64,
    pub bytes: u64,
    /// Whether the growing trace was reported as larger than
    /// chrome://tracing opens ([`VIEWER_LIMIT`]).
    pub passed_viewer_limit: bool,
    /// Events left out because the file had reached `max_size`.
    pub left_out: u64,
    pub max_size: u64,
}

/// Threads named in the trace, at most (the tids come from the target).
const MAX_THREADS: usize = 1 << 17;

impl Chrome {
    /// Start the file: the process's name as metadata. `names` gives each
    /// probe's span name (the probed function).
    pub fn create(path: &Path, pid: u32, process: &str, names: &[String]) -> std::io::Result<Chrome> {
        Chrome::create_at(path, pid, process, names, crate::os::sys::realtime_ns())
    }

    /// [`Chrome::create`] with times relative to `base` (CLOCK_REALTIME
    /// ns): a rotated trace's files share the session's start.
    pub fn create_at(path: &Path, pid: u32, process: &str, names: &[String], base: u64) -> std::io::Result<Chrome> {
        let out = crate::outfile::create(path)?;
        let mut c = Chrome {
            out,
            path: path.to_path_buf(),
            clock: crate::os::sys::clock(),
            buf: Vec::with_capacity(BUFFER + 4096),
            pid,
            spans: names.iter().map(|n| span_start(n.as_bytes())).collect(),
            unknown: span_start(b"?"),
            threads: HashSet::new(),
            named: [u32::MAX; 64],
            last_tid: 0,
            pid_prefix: pid_prefix(pid),
            owners: HashMap::new(),
            told: HashMap::new(),
            processes: HashSet::new(),
            last_pid: pid,
            line: Vec::with_capacity(256),
            first: true,
            events: 0,
            base,
            process: process.as_bytes().to_vec(),
            written: 2,
            quiet: false,
            viewer_limit: VIEWER_LIMIT,
            passed_viewer_limit: false,
            max_size: DEFAULT_MAX_SIZE,
            full: false,
            left_out: 0,
            status: None,
        };
        c.buf.extend_from_slice(b"[\n");
        let name = escape(process.as_bytes());
        c.line.clear();
        c.line.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":");
        push_u64(&mut c.line, u64::from(pid));
        c.line.extend_from_slice(b",\"args\":{\"name\":\"");
        c.line.extend_from_slice(&name);
        c.line.extend_from_slice(b"\"}}");
        c.emit()?;
        c.clock_base()?;
        Ok(c)
    }

    /// `-w`: no report of the trace's growth.
    pub fn quiet(mut self, quiet: bool) -> Chrome {
        self.quiet = quiet;
        self
    }

    /// `--max-size`: the file stays within `bytes` (at least a few
    /// hundred, for the array's brackets and the first metadata).
    pub fn max_size(mut self, bytes: u64) -> Chrome {
        self.max_size = bytes;
        self
    }

    /// Draw a status line on standard error every second while the trace
    /// grows (for a terminal): events, size, events per second.
    pub fn status(mut self, on: bool) -> Chrome {
        self.status = on.then(|| (std::time::Instant::now(), 0, false));
        self
    }

    /// Redraw the status line if a second has passed (looked at every 256
    /// events).
    fn redraw(&mut self) {
        let Some((last, then, _)) = self.status else { return };
        if self.events % 256 != 0 {
            return;
        }
        let dt = last.elapsed().as_secs_f64();
        if dt < 1.0 {
            return;
        }
        let rate = (self.events - then) as f64 / dt;
        eprint!("\r{FLAG}: {} events, {}, {:.0} events/s\x1b[K", self.events, size_text(self.written), rate);
        self.status = Some((std::time::Instant::now(), self.events, true));
    }

    /// Whether an event of `n` bytes goes into the file: not once the
    /// file has reached `--max-size` (with room kept for its closing
    /// bracket), counted then. Said once when it is reached, and once when
    /// the trace passes what chrome://tracing opens (a one-second `-p`
    /// session on a busy function can write gigabytes).
    fn fits(&mut self, n: usize) -> bool {
        if self.full {
            self.left_out += 1;
            return false;
        }
        if self.written + n as u64 + CLOSING > self.max_size {
            self.full = true;
            self.left_out += 1;
            if !self.quiet {
                self.say(&format!(
                    "WARNING: {FLAG} trace reached --max-size {}: events from here on are left out (counted at \
                     the end)",
                    limit_text(self.max_size)
                ));
            }
            return false;
        }
        self.written += n as u64;
        if self.written > self.viewer_limit && !self.passed_viewer_limit {
            self.passed_viewer_limit = true;
            if !self.quiet {
                self.say(&format!(
                    "WARNING: {FLAG} trace passed {}; chrome://tracing may not open it (Perfetto UI opens up to \
                     about 2 GB; --perfetto writes the same calls in a fraction of the bytes)",
                    limit_text(self.viewer_limit)
                ));
            }
        }
        true
    }

    /// A line of its own on standard error, over the status line if one
    /// is drawn (redrawn a second later).
    fn say(&mut self, line: &str) {
        if let Some((_, _, shown @ true)) = &mut self.status {
            *shown = false;
            eprint!("\r\x1b[K");
        }
        crate::eprintln_escaped!("{line}");
    }

    /// The absolute time of the trace's zero, once.
    fn clock_base(&mut self) -> std::io::Result<()> {
        let l = &mut self.line;
        l.clear();
        l.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"telco_clock_base\",\"pid\":");
        push_u64(l, u64::from(self.pid));
        l.extend_from_slice(b",\"args\":{\"clock\":\"CLOCK_REALTIME\",\"ns\":");
        push_u64(l, self.base);
        l.extend_from_slice(b"}}");
        self.emit()
    }

    /// One call, from `start_ns` to `end_ns` (CLOCK_REALTIME ns).
    pub fn span(&mut self, tid: u32, probe: u16, start_ns: u64, end_ns: u64) -> std::io::Result<()> {
        if self.full {
            // Past --max-size: counted, nothing more (a hot trace's rest
            // costs next to nothing to leave out).
            self.left_out += 1;
            return Ok(());
        }
        if tid != self.last_tid {
            if self.named[tid as usize % 64] != tid {
                self.thread(tid)?;
                self.named[tid as usize % 64] = tid;
            }
            self.last_tid = tid;
            let pid = self.process_of(tid);
            if pid != self.last_pid {
                self.last_pid = pid;
                self.pid_prefix = pid_prefix(pid);
            }
        }
        // Formatted in place, from the probe's and the process's bytes
        // made once; taken back if it does not fit.
        let mark = self.buf.len();
        let start_bytes = self.spans.get(usize::from(probe)).unwrap_or(&self.unknown);
        // The event starts with its separator, unless it is the first.
        let skip = if self.first { 2 } else { 0 };
        self.buf.extend_from_slice(&start_bytes[skip..]);
        let start = start_ns.saturating_sub(self.base);
        push_us(&mut self.buf, start);
        self.buf.extend_from_slice(b",\"dur\":");
        push_us(&mut self.buf, end_ns.saturating_sub(self.base).saturating_sub(start));
        self.buf.extend_from_slice(&self.pid_prefix);
        push_u64(&mut self.buf, u64::from(tid));
        self.buf.push(b'}');
        if !self.fits(self.buf.len() - mark) {
            self.buf.truncate(mark);
            return Ok(());
        }
        self.first = false;
        self.events += 1;
        self.redraw();
        self.spill()
    }

    /// The buffer to the file once it holds [`BUFFER`] bytes.
    fn spill(&mut self) -> std::io::Result<()> {
        if self.buf.len() >= BUFFER {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Close the array and flush.
    pub fn finish(mut self) -> std::io::Result<Written> {
        if let Some((_, _, true)) = self.status {
            // The summary line takes the status line's place.
            eprint!("\r\x1b[K");
        }
        self.buf.extend_from_slice(b"\n]\n");
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        let bytes = self.out.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Written {
            events: self.events,
            bytes,
            passed_viewer_limit: self.passed_viewer_limit,
            left_out: self.left_out,
            max_size: self.max_size,
        })
    }

    /// The process thread `tid` belongs to (the first process's when it
    /// was not named, or was gone when it was).
    fn process_of(&self, tid: u32) -> u32 {
        self.owners.get(&tid).copied().unwrap_or(self.pid)
    }

    fn pid_tid(&mut self, tid: u32) {
        let pid = self.process_of(tid);
        self.line.extend_from_slice(b",\"pid\":");
        push_u64(&mut self.line, u64::from(pid));
        self.line.extend_from_slice(b",\"tid\":");
        push_u64(&mut self.line, u64::from(tid));
    }

    /// A thread seen for the first time: its name, while it still exists.
    fn thread(&mut self, tid: u32) -> std::io::Result<()> {
        if self.threads.contains(&tid) || self.threads.len() >= MAX_THREADS {
            return Ok(());
        }
        self.threads.insert(tid);
        // Its process, as the target told (`owner`: in the target's pid
        // namespace, as its tids are), else the first's: another of the
        // session's is named the first time one of its threads is.
        let pid = self.owners.get(&tid).copied().unwrap_or(self.pid);
        if pid != self.pid && self.processes.insert(pid) {
            self.process_name(pid)?;
        }
        self.owners.insert(tid, pid);
        let comm = crate::feed::thread_name(pid, tid, self.told.get(&tid), &self.process);
        let mut l = Vec::with_capacity(96);
        l.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":");
        push_u64(&mut l, u64::from(pid));
        l.extend_from_slice(b",\"tid\":");
        push_u64(&mut l, u64::from(tid));
        l.extend_from_slice(b",\"args\":{\"name\":\"");
        l.extend_from_slice(&escape(&comm));
        l.extend_from_slice(b"\"}}");
        std::mem::swap(&mut l, &mut self.line);
        let r = self.emit();
        std::mem::swap(&mut l, &mut self.line);
        r
    }

    /// A process of the session besides the first: its name.
    fn process_name(&mut self, pid: u32) -> std::io::Result<()> {
        let mut l = Vec::with_capacity(96);
        l.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":");
        push_u64(&mut l, u64::from(pid));
        l.extend_from_slice(b",\"args\":{\"name\":\"");
        l.extend_from_slice(&escape(&crate::feed::process_name(pid, self.told.get(&pid), &self.process)));
        l.extend_from_slice(b"\"}}");
        std::mem::swap(&mut l, &mut self.line);
        let r = self.emit();
        std::mem::swap(&mut l, &mut self.line);
        r
    }

    fn emit(&mut self) -> std::io::Result<()> {
        let separator = if self.first { 0 } else { 2 };
        if !self.fits(self.line.len() + separator) {
            return Ok(());
        }
        if !self.first {
            self.buf.extend_from_slice(b",\n");
        }
        self.first = false;
        self.buf.extend_from_slice(&self.line);
        self.events += 1;
        self.redraw();
        self.spill()
    }
}

impl crate::feed::Start for Chrome {
    fn start(cfg: &Config<'_>) -> std::io::Result<Chrome> {
        // The status line is --chrome's alone, the slower file to write.
        Ok(Chrome::create_at(cfg.path, cfg.pid, cfg.process, cfg.names, cfg.base_ns)?
            .max_size(cfg.max_size)
            .quiet(cfg.quiet)
            .status(cfg.status))
    }
}

impl TraceWriter for Chrome {
    fn add_name(&mut self, name: &str) {
        self.spans.push(span_start(name.as_bytes()));
    }

    fn owner(&mut self, tid: u32, pid: u32, comm: Option<&[u8]>) {
        if self.owners.len() < MAX_THREADS && !self.threads.contains(&tid) {
            self.owners.insert(tid, pid);
            if let Some(c) = comm {
                self.told.insert(tid, c.to_vec());
            }
        }
    }

    fn calls(&mut self, calls: Calls<'_>) -> std::io::Result<()> {
        let clock = self.clock;
        for c in calls {
            self.span(c.tid, c.probe, clock.ns(c.start), clock.ns(c.end))?;
        }
        Ok(())
    }

    /// An instant event on a thread: `trace_instant(name)`, or a printf's
    /// output (`cat` "printf", the text in args).
    fn instant(&mut self, tid: u32, ts_ns: u64, cat: &str, name: &[u8], text: Option<&[u8]>) -> std::io::Result<()> {
        self.thread(tid)?;
        let l = &mut self.line;
        l.clear();
        l.extend_from_slice(b"{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"");
        l.extend_from_slice(cat.as_bytes());
        l.extend_from_slice(b"\",\"name\":\"");
        l.extend_from_slice(&escape(name));
        l.extend_from_slice(b"\",\"ts\":");
        push_us(l, ts_ns.saturating_sub(self.base));
        self.pid_tid(tid);
        if let Some(t) = text {
            self.line.extend_from_slice(b",\"args\":{\"text\":\"");
            self.line.extend_from_slice(&escape(t));
            self.line.extend_from_slice(b"\"}");
        }
        self.line.push(b'}');
        self.emit()
    }

    /// `trace_counter(name, value)`: a counter track of the process.
    fn counter(&mut self, ts_ns: u64, name: &[u8], value: i64) -> std::io::Result<()> {
        let l = &mut self.line;
        l.clear();
        l.extend_from_slice(b"{\"ph\":\"C\",\"name\":\"");
        l.extend_from_slice(&escape(name));
        l.extend_from_slice(b"\",\"ts\":");
        push_us(l, ts_ns.saturating_sub(self.base));
        l.extend_from_slice(b",\"pid\":");
        push_u64(l, u64::from(self.pid));
        l.extend_from_slice(b",\"args\":{\"value\":");
        if value < 0 {
            l.push(b'-');
        }
        push_u64(l, value.unsigned_abs());
        l.extend_from_slice(b"}}");
        self.emit()
    }

    fn size(&self) -> u64 {
        self.written
    }

    fn full(&self) -> bool {
        self.full
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    fn finish(self: Box<Self>, end: &End) -> std::io::Result<Report> {
        let path = self.path.clone();
        let mut w = Chrome::finish(*self)?;
        // Calls not spooled: in no file.
        w.left_out += end.unspooled;
        Ok(Report {
            flag: FLAG,
            holds: format!("{FLAG}: {} events, {}, written to {}", w.events, size_text(w.bytes), path.display()),
            left_out: w.left_out,
            max_size: w.max_size,
            events: w.events,
            bytes: w.bytes,
            path: Some(path),
            ..Report::default()
        })
    }
}

/// A complete event's bytes up to its time, for a span named `name`.
fn span_start(name: &[u8]) -> Vec<u8> {
    let mut v = b",\n{\"ph\":\"X\",\"cat\":\"function\",\"name\":\"".to_vec();
    v.extend_from_slice(&escape(name));
    v.extend_from_slice(b"\",\"ts\":");
    v
}

/// An event's bytes before its thread id, in process `pid`.
fn pid_prefix(pid: u32) -> Vec<u8> {
    let mut v = b",\"pid\":".to_vec();
    push_u64(&mut v, u64::from(pid));
    v.extend_from_slice(b",\"tid\":");
    v
}

/// "00" … "99".
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Decimal digits of `v`, two at a time.
fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        tmp[i..i + 2].copy_from_slice(&PAIRS[d..d + 2]);
    }
    if v >= 10 {
        let d = v as usize * 2;
        i -= 2;
        tmp[i..i + 2].copy_from_slice(&PAIRS[d..d + 2]);
    } else {
        i -= 1;
        tmp[i] = b'0' + v as u8;
    }
    out.extend_from_slice(&tmp[i..]);
}

/// Nanoseconds as microseconds with three decimals: 1234567 -> 1234.567.
fn push_us(out: &mut Vec<u8>, ns: u64) {
    push_u64(out, ns / 1000);
    let f = ns % 1000;
    out.extend_from_slice(&[b'.', b'0' + (f / 100) as u8, b'0' + (f / 10 % 10) as u8, b'0' + (f % 10) as u8]);
}

/// The bytes as the inside of a JSON string: quotes, backslashes and
/// control characters escaped; bytes that are not UTF-8 become U+FFFD.
fn escape(s: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(s);
    let mut out = Vec::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes()),
            c => {
                let mut b = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_keep_nanoseconds() {
        let mut v = Vec::new();
        push_us(&mut v, 1_234_567);
        v.push(b' ');
        push_us(&mut v, 5);
        v.push(b' ');
        push_us(&mut v, 0);
        assert_eq!(String::from_utf8(v).unwrap(), "1234.567 0.005 0.000");
    }

    #[test]
    fn a_trace_stops_at_its_maximum_size_and_stays_valid() {
        let dir = std::env::temp_dir().join(format!("telco-chrome-max-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.json");
        let max = 8000;
        let mut c = Chrome::create(&path, 1, "prog", &["work".into()]).unwrap().quiet(true).max_size(max);
        c.viewer_limit = 4000;
        // About 80 bytes a span: about 100 fit.
        for i in 0..1000 {
            c.span(7, 0, 1000 + i, 2000 + i).unwrap();
        }
        c.counter(3000, b"late", 1).unwrap();
        let w = c.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(w.bytes, text.len() as u64);
        assert!(w.bytes <= max && w.bytes > max - 100, "{w:?}");
        let spans = text.matches("\"ph\":\"X\"").count() as u64;
        // Every span written or left out; the counter too.
        assert_eq!(spans + w.left_out, 1001, "{w:?}");
        assert!(text.ends_with("}\n]\n"));
        assert!(w.passed_viewer_limit);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(escape(b"a\"b\\c\nd\x01\xff"), "a\\\"b\\\\c\\nd\\u0001\u{fffd}".as_bytes());
    }

    #[test]
    fn a_trace_is_a_json_array() {
        let dir = std::env::temp_dir().join(format!("telco-chrome-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.json");
        let mut c = Chrome::create(&path, 1, "prog \"x\"", &["work".into(), "outer".into()]).unwrap();
        c.base = 1000;
        c.span(7, 0, 2500, 2750).unwrap();
        c.span(7, 1, 2000, 4000).unwrap();
        c.instant(7, 2200, "printf", b"hello", Some(b"hello\n")).unwrap();
        c.counter(2300, b"queue", -3).unwrap();
        let w = c.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("[\n{\"ph\":\"M\",\"name\":\"process_name\""), "{text}");
        assert!(text.contains(
            "{\"ph\":\"X\",\"cat\":\"function\",\"name\":\"work\",\"ts\":1.500,\"dur\":0.250,\"pid\":1,\"tid\":7}"
        ));
        assert!(text.contains("\"args\":{\"value\":-3}"));
        assert!(text.contains("\"name\":\"telco_clock_base\",\"pid\":1,\"args\":{\"clock\":\"CLOCK_REALTIME\",\"ns\":"));
        assert!(text.contains("\"name\":\"outer\",\"ts\":1.000,\"dur\":2.000"));
        assert!(text.ends_with("}\n]\n"));
        // process name, clock base, thread name, 2 spans, instant, counter
        assert_eq!(w.events, 7);
        assert!(!w.passed_viewer_limit);
        assert_eq!(w.left_out, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
