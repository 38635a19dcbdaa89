//! `--chrome FILE`: Chrome Trace Event JSON, streamed to disk.
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
//! * The consumer thread (`local`) appends `EV_SPANS` payloads to a binary
//!   spool as they are (`crate::feed::Feed`) and takes what is left in the
//!   stages when the session ends; the trace writer thread turns the spool
//!   into JSON (and `--perfetto`'s packets) at `SCHED_IDLE`, on CPU time
//!   the target does not want, and frees the spool's disk space behind it.

use std::collections::HashSet;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub struct Chrome {
    out: BufWriter<File>,
    pid: u32,
    /// JSON-escaped span names by probe index.
    names: Vec<Vec<u8>>,
    threads: HashSet<u32>,
    /// The last thread seen (most events come from the thread before).
    last_tid: u32,
    line: Vec<u8>,
    first: bool,
    events: u64,
    /// The session's start, CLOCK_REALTIME ns: every time is written
    /// relative to it.
    base: u64,
    process: Vec<u8>,
    /// The file's path, and the bytes written so far: a trace that grows
    /// past 1 GiB, 2, 4, ... says so while it grows (`-w`: not).
    path: std::path::PathBuf,
    written: u64,
    next_warning: u64,
    quiet: bool,
    size_warnings: u64,
    /// On a terminal: a status line, redrawn every second while the trace
    /// grows (as `perf record` does): when it was last drawn, the events
    /// then, whether one is on the screen.
    status: Option<(std::time::Instant, u64, bool)>,
}

/// The first size at which a growing trace is reported.
const WARN_AT: u64 = 1 << 30;

/// What a finished trace holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub events: u64,
    pub bytes: u64,
    /// How many times the growing trace was reported (1 GiB, 2, 4, ...).
    pub size_warnings: u64,
    /// printf lines, instants and counters left out because the writer
    /// fell behind by more than `feed::OTHERS_QUEUED` of them.
    pub dropped: u64,
}

/// Threads named in the trace, at most (the tids come from the target).
const MAX_THREADS: usize = 1 << 17;

impl Chrome {
    /// Start the file: the process's name as metadata. `names` gives each
    /// probe's span name (the probed function).
    pub fn create(path: &Path, pid: u32, process: &str, names: &[String]) -> std::io::Result<Chrome> {
        let file = File::create(path)?;
        let mut c = Chrome {
            out: BufWriter::with_capacity(1 << 20, file),
            pid,
            names: names.iter().map(|n| escape(n.as_bytes())).collect(),
            threads: HashSet::new(),
            last_tid: 0,
            line: Vec::with_capacity(256),
            first: true,
            events: 0,
            base: crate::os::sys::realtime_ns(),
            process: process.as_bytes().to_vec(),
            path: path.to_path_buf(),
            written: 0,
            next_warning: WARN_AT,
            quiet: false,
            size_warnings: 0,
            status: None,
        };
        c.out.write_all(b"[\n")?;
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
        eprint!("\r--chrome: {} events, {}, {:.0} events/s\x1b[K", self.events, size_text(self.written), rate);
        self.status = Some((std::time::Instant::now(), self.events, true));
    }

    /// Count `n` bytes written; past the next threshold, say how large the
    /// trace has grown (a one-second `-p` session on a busy function can
    /// write gigabytes).
    fn grew(&mut self, n: usize) {
        self.written += n as u64;
        if self.written >= self.next_warning {
            self.size_warnings += 1;
            if !self.quiet {
                eprintln!(
                    "WARNING: --chrome: {} holds {} GiB so far ({} events), more than JSON viewers open; \
                     --perfetto FILE writes the same calls in a fraction of the bytes, in a file Perfetto opens \
                     whatever its size (--min-dur, fewer probes or -T make either smaller)",
                    self.path.display(),
                    self.written >> 30,
                    self.events
                );
            }
            while self.next_warning <= self.written {
                self.next_warning *= 2;
            }
        }
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

    /// The slice names so far (the probes', then `trace_span`'s).
    pub fn names(&self) -> usize {
        self.names.len()
    }

    /// A slice name for the next id (a `trace_span` name).
    pub fn add_name(&mut self, name: &str) {
        self.names.push(escape(name.as_bytes()));
    }

    /// One call, from `start_ns` to `end_ns` (CLOCK_REALTIME ns).
    pub fn span(&mut self, tid: u32, probe: u16, start_ns: u64, end_ns: u64) -> std::io::Result<()> {
        if tid != self.last_tid {
            self.thread(tid)?;
            self.last_tid = tid;
        }
        let l = &mut self.line;
        l.clear();
        l.extend_from_slice(b",\n{\"ph\":\"X\",\"cat\":\"function\",\"name\":\"");
        match self.names.get(usize::from(probe)) {
            Some(n) => l.extend_from_slice(n),
            None => l.extend_from_slice(b"?"),
        }
        l.extend_from_slice(b"\",\"ts\":");
        let start = start_ns.saturating_sub(self.base);
        push_us(l, start);
        l.extend_from_slice(b",\"dur\":");
        push_us(l, end_ns.saturating_sub(self.base).saturating_sub(start));
        self.pid_tid(tid);
        self.line.push(b'}');
        // Never the first event (the process name is).
        self.out.write_all(&self.line)?;
        self.events += 1;
        self.grew(self.line.len());
        self.redraw();
        Ok(())
    }

    /// An instant event on a thread: `trace_instant(name)`, or a printf's
    /// output (`cat` "printf", the text in args).
    pub fn instant(
        &mut self,
        tid: u32,
        ts_ns: u64,
        cat: &str,
        name: &[u8],
        text: Option<&[u8]>,
    ) -> std::io::Result<()> {
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
    pub fn counter(&mut self, ts_ns: u64, name: &[u8], value: i64) -> std::io::Result<()> {
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

    /// Close the array and flush.
    pub fn finish(mut self) -> std::io::Result<Written> {
        if let Some((_, _, true)) = self.status {
            // The summary line takes the status line's place.
            eprint!("\r\x1b[K");
        }
        self.out.write_all(b"\n]\n")?;
        self.out.flush()?;
        let bytes = self.out.get_ref().metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Written { events: self.events, bytes, size_warnings: self.size_warnings, dropped: 0 })
    }

    /// Push buffered events to the file (the consumer calls this when the
    /// ring is empty, so a trace grows while the target runs).
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn pid_tid(&mut self, tid: u32) {
        self.line.extend_from_slice(b",\"pid\":");
        push_u64(&mut self.line, u64::from(self.pid));
        self.line.extend_from_slice(b",\"tid\":");
        push_u64(&mut self.line, u64::from(tid));
    }

    /// A thread seen for the first time: its name, while it still exists.
    fn thread(&mut self, tid: u32) -> std::io::Result<()> {
        if self.threads.contains(&tid) || self.threads.len() >= MAX_THREADS {
            return Ok(());
        }
        self.threads.insert(tid);
        let comm = crate::os::proc::thread_label(self.pid, tid, &self.process);
        let mut l = Vec::with_capacity(96);
        l.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":");
        push_u64(&mut l, u64::from(self.pid));
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

    fn emit(&mut self) -> std::io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.out.write_all(&self.line)?;
        self.events += 1;
        self.grew(self.line.len() + 2);
        self.redraw();
        Ok(())
    }
}

/// A size as the summary and the status line say it: KB or MB.
pub fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KB", bytes as f64 / 1024.0)
    }
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
    fn a_growing_trace_is_reported_at_each_doubling() {
        let dir = std::env::temp_dir().join(format!("telco-chrome-grow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.json");
        let mut c = Chrome::create(&path, 1, "prog", &["work".into()]).unwrap().quiet(true);
        c.next_warning = 1000;
        // About 80 bytes a span: 1000, 2000, 4000, 8000 bytes passed.
        for i in 0..120 {
            c.span(7, 0, 1000 + i, 2000 + i).unwrap();
        }
        let w = c.finish().unwrap();
        assert!(w.bytes > 8000 && w.bytes < 16000, "{w:?}");
        assert_eq!(w.size_warnings, 4);
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
        assert_eq!(w.size_warnings, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
