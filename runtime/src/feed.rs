//! The trace files (`--chrome`, `--perfetto`, or both from one run): the
//! interface every trace format implements ([`TraceWriter`]), and the feed
//! that drives them from the consumer's side.
//!
//! Calls arrive at up to tens of millions per second, faster than JSON or
//! protobuf can be formatted and written, so the consumer only appends
//! them in binary (24 bytes each, the region's `SpanEntry`s as they are)
//! to an unlinked spool file next to the trace, which keeps the ring
//! drained; a writer thread turns the spool into each file as it grows
//! (and frees the disk space behind it), handing every writer the calls a
//! megabyte of spool at a time ([`Calls`]). Memory stays bounded: the
//! spool is on disk. printf lines, instants and counters, far fewer, go to
//! the writer through a bounded queue; what does not fit is counted
//! ([`OTHERS_QUEUED`]). Once every file has reached its `--max-size`,
//! calls are no longer spooled, only counted (left out of every file).
//!
//! # A new trace format
//!
//! One file implementing [`TraceWriter`] and [`Start`] (say
//! `runtime/src/ctf.rs`, with its `mod` line in lib.rs and a
//! `pub const FLAG: &str = "--ctf"`):
//! `start` opens the file from a [`Config`], `calls`, `instant` and
//! `counter` write events as they come, `full` says when `--max-size` is
//! reached, and `finish` completes the file and says what it holds in a
//! [`Report`] (its own line, which the session's end prints). One CLI
//! flag (`--ctf FILE`, in src/cli.rs), and one line registering it in the
//! binary's `outputs::trace_formats`: `(ctf::FLAG, &cli.ctf,
//! feed::open::<Ctf>)`. The feed, the checks of the output paths,
//! `--max-size` and the report then treat it as the others.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// printf lines, instants and counters waiting for the writer, at most:
/// the consumer never waits for the writer (which runs when nothing else
/// wants the CPU), and memory stays bounded whatever the target prints.
pub const OTHERS_QUEUED: usize = 1 << 16;

/// The largest trace file written without `--max-size`: about what the
/// Perfetto UI opens in a browser.
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;

/// Bytes of one spooled call: tid u32, probe u16, 2 spare, ts u64, dur u64.
const SPAN_REC: usize = 24;
// The spool's records are the region's span entries, byte for byte.
const _: () = assert!(SPAN_REC == telco_abi::region::SPAN_ENTRY_SIZE);

/// A trace format: the file one flag asks for, written on the trace
/// writer thread (never the consumer's) as the spool grows.
///
/// Calls come in batches (a megabyte of spool each, about 43,000 calls):
/// one dynamic call per batch and writer, the loop over the batch in the
/// format's own code.
pub trait TraceWriter: Send {
    /// A slice name for the next id (a `trace_span` name; the probes'
    /// come first, from [`Config::names`]).
    fn add_name(&mut self, name: &str);

    /// Calls as they returned (inner calls before outer ones), in TSC
    /// ticks (`os::sys::clock` converts them).
    fn calls(&mut self, calls: Calls<'_>) -> std::io::Result<()>;

    /// An instant on a thread: `trace_instant(name)`, or a printf's output
    /// (`cat` "printf", the text as `text`). `ts_ns`: CLOCK_REALTIME ns.
    fn instant(&mut self, tid: u32, ts_ns: u64, cat: &str, name: &[u8], text: Option<&[u8]>) -> std::io::Result<()>;

    /// `trace_counter(name, value)`: a counter of the process.
    fn counter(&mut self, ts_ns: u64, name: &[u8], value: i64) -> std::io::Result<()>;

    /// Thread `tid` belongs to process `pid` and was called `comm` (told
    /// before its events; the name when it could be read).
    fn owner(&mut self, _tid: u32, _pid: u32, _comm: Option<&[u8]>) {}

    /// About once a second while the session runs: look again at what may
    /// have changed (thread names).
    fn refresh(&mut self) {}

    /// The bytes in the file so far (`--rotate` starts a new one past a
    /// size).
    fn size(&self) -> u64 {
        0
    }

    /// Whether the file has reached `--max-size` (nothing more goes in).
    fn full(&self) -> bool;

    /// The writer has caught up: what is buffered, to the file (so a
    /// trace grows while the target runs).
    fn flush(&mut self) -> std::io::Result<()>;

    /// Every event written: complete the file and say what it holds.
    fn finish(self: Box<Self>, end: &End) -> std::io::Result<Report>;
}

/// A trace format written to a file, started from a [`Config`] (the
/// formats that go elsewhere, `--otlp`, start from settings of their own).
pub trait Start: TraceWriter {
    /// Create the file and write what it starts with.
    fn start(cfg: &Config<'_>) -> std::io::Result<Self>
    where
        Self: Sized;
}

/// What a trace file starts from.
pub struct Config<'a> {
    pub path: &'a Path,
    /// The traced process and its name (`comm`).
    pub pid: u32,
    pub process: &'a str,
    /// Each probe's slice name (the probed function), by probe index.
    pub names: &'a [String],
    /// `--max-size`: the file never grows past it.
    pub max_size: u64,
    /// `-w`: no warnings while the trace grows.
    pub quiet: bool,
    /// Standard error is a terminal: a status line may be drawn there.
    pub status: bool,
    /// The session's start (CLOCK_REALTIME ns): `--chrome`'s times are
    /// relative to it, in every file of a rotated trace.
    pub base_ns: u64,
}

/// How a registered format starts: [`open`] of its type.
pub type Open = fn(&Config<'_>) -> std::io::Result<Box<dyn TraceWriter>>;

/// Start a `W` file, for [`Feed::start`]'s list.
pub fn open<W: Start + 'static>(cfg: &Config<'_>) -> std::io::Result<Box<dyn TraceWriter>> {
    Ok(Box::new(W::start(cfg)?))
}

/// One call: TSC ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub tid: u32,
    pub probe: u16,
    pub start: u64,
    pub end: u64,
}

/// Spooled calls (`SpanEntry`s), read one by one.
#[derive(Clone)]
pub struct Calls<'a>(&'a [u8]);

impl<'a> Calls<'a> {
    /// The whole records of `spool`.
    pub fn new(spool: &'a [u8]) -> Calls<'a> {
        Calls(&spool[..spool.len() / SPAN_REC * SPAN_REC])
    }

    /// The next `n` calls (fewer at the end), taken from these.
    pub fn take_calls(&mut self, n: usize) -> Calls<'a> {
        let (first, rest) = self.0.split_at(n.saturating_mul(SPAN_REC).min(self.0.len()));
        self.0 = rest;
        Calls(first)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Iterator for Calls<'_> {
    type Item = Call;

    #[inline]
    fn next(&mut self) -> Option<Call> {
        let (r, rest) = self.0.split_at_checked(SPAN_REC)?;
        self.0 = rest;
        let tid = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
        let probe = u16::from_le_bytes([r[4], r[5]]);
        let start = u64::from_le_bytes(r[8..16].try_into().unwrap_or([0; 8]));
        let dur = i64::from_le_bytes(r[16..24].try_into().unwrap_or([0; 8])).max(0) as u64;
        Some(Call { tid, probe, start, end: start.saturating_add(dur) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.len() / SPAN_REC;
        (n, Some(n))
    }
}

/// The session's summary, for the files that record it (`--perfetto`'s
/// metadata).
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    pub errors: u64,
    pub dropped: u64,
    pub skipped: u64,
    /// printf lines, instants and counters the writer had no room for.
    pub writer_dropped: u64,
}

/// What a writer is told when the session ends.
#[derive(Clone, Copy, Debug, Default)]
pub struct End {
    pub summary: Summary,
    /// Calls the consumer did not spool, every file being full: in no
    /// file (each format counts them as its events).
    pub unspooled: u64,
}

/// What a trace file holds when the session ends, as the session's report
/// says it ([`Report::lines`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The flag that asked for the file.
    pub flag: &'static str,
    /// The first line, up to what was dropped: "--chrome: 12 events,
    /// 1.0 KB, written to t.json".
    pub holds: String,
    /// Events left out at `--max-size` (`max_size`).
    pub left_out: u64,
    pub max_size: u64,
    /// WARNING lines on what the file lacks, said even with `-w`.
    pub lacks: Vec<String>,
    /// Other WARNING lines (not with `-w`).
    pub warnings: Vec<String>,
    /// What the file holds: calls (where the format counts them apart),
    /// events and bytes.
    pub calls: u64,
    pub events: u64,
    pub bytes: u64,
    /// The file, the last one of a rotated trace (`--rotate`).
    pub path: Option<std::path::PathBuf>,
}

/// What the report of every file says alike.
pub struct Reporting<'a> {
    /// Events dropped in the session, said after what each file holds.
    pub dropped: &'a str,
    /// No `--max-size` was given.
    pub default_max_size: bool,
    /// `-w`.
    pub quiet: bool,
}

impl Report {
    /// The lines to print, in order.
    pub fn lines(&self, r: &Reporting<'_>) -> Vec<String> {
        let mut v = vec![format!("{}; {}", self.holds, r.dropped)];
        // Said even with -w: the file lacks events.
        if self.left_out > 0 {
            let default = if r.default_max_size { " (the default)" } else { "" };
            v.push(format!(
                "{} trace reached --max-size {}{default}: {} events left out",
                self.flag,
                limit_text(self.max_size),
                self.left_out
            ));
        }
        v.extend(self.lacks.iter().cloned());
        if !r.quiet {
            v.extend(self.warnings.iter().cloned());
        }
        v
    }
}

/// What each trace file holds when the session ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finished {
    /// A report per file, in the order the writers were given.
    pub files: Vec<Report>,
    /// printf lines, instants and counters the writer had no room for
    /// (left out of every file).
    pub dropped: u64,
}

/// A thread told (`EV_THREAD`): tid, pid, its name when it could be read.
type Told = (u32, u32, Option<Vec<u8>>);

/// Events other than calls, sent to the writer thread as they come.
enum Other {
    Instant { tid: u32, ts: u64, cat: &'static str, name: Vec<u8>, text: Option<Vec<u8>> },
    Counter { ts: u64, name: Vec<u8>, value: i64 },
}

pub struct Feed {
    spool: BufWriter<File>,
    len: u64,
    /// `trace_span` names and their slice ids (after the probes').
    span_names: std::collections::HashMap<Vec<u8>, u16>,
    /// The first id of a `trace_span` name.
    first_name: usize,
    clock: crate::os::sys::Clock,
    shared: std::sync::Arc<Shared>,
    others: std::sync::mpsc::SyncSender<Other>,
    writer: Option<std::thread::JoinHandle<std::io::Result<Finished>>>,
}

struct Shared {
    /// Spool bytes flushed (Release by the consumer, Acquire by the writer).
    flushed: AtomicU64,
    /// Every file is at its `--max-size` (set by the writer, read by the
    /// consumer; Relaxed: a call spooled after it is only counted later),
    /// and the calls the consumer left out since.
    full: AtomicBool,
    unspooled: AtomicU64,
    done: AtomicBool,
    /// Others the queue had no room for.
    dropped: AtomicU64,
    /// The session's summary, for the files that record it (handed to
    /// every writer's `finish`), set before `done`.
    summary: std::sync::Mutex<Summary>,
    /// `trace_span` names by id from the first after the probes': added
    /// before the first call with the id is spooled.
    span_names: std::sync::Mutex<Vec<String>>,
    /// Threads and their processes, told since the writer last looked
    /// (pushed before the thread's calls are flushed; bounded).
    owners: std::sync::Mutex<Vec<Told>>,
}

impl Feed {
    /// Start the writer thread for `writers` (each started with `probes`
    /// slice names, [`Config::names`]), spooling in `dir` (where the first
    /// trace file is).
    pub fn start(writers: Vec<Box<dyn TraceWriter>>, probes: usize, dir: &Path) -> std::io::Result<Feed> {
        Feed::start_with(writers, probes, dir, true)
    }

    /// [`Feed::start`] for files someone waits for (a flight recorder's
    /// dump): the writer runs as any thread, not on idle time.
    pub fn start_now(writers: Vec<Box<dyn TraceWriter>>, probes: usize, dir: &Path) -> std::io::Result<Feed> {
        Feed::start_with(writers, probes, dir, false)
    }

    fn start_with(writers: Vec<Box<dyn TraceWriter>>, probes: usize, dir: &Path, idle: bool) -> std::io::Result<Feed> {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        let name = dir.join(format!(".telco-stap-spool-{}-{}", std::process::id(), crate::os::sys::monotonic_ns()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&name)?;
        // Unlinked at once: nothing is left behind, whatever happens.
        std::fs::remove_file(&name)?;
        let reader = file.try_clone()?;
        let shared = std::sync::Arc::new(Shared {
            flushed: AtomicU64::new(0),
            full: AtomicBool::new(false),
            unspooled: AtomicU64::new(0),
            done: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            summary: Default::default(),
            span_names: Default::default(),
            owners: Default::default(),
        });
        let first_name = probes;
        let (tx, rx) = std::sync::mpsc::sync_channel(OTHERS_QUEUED);
        let sh = shared.clone();
        let writer = std::thread::Builder::new()
            .name("trace-writer".into())
            .spawn(move || write_loop(writers, first_name, reader, &sh, rx, idle))?;
        Ok(Feed {
            spool: BufWriter::with_capacity(1 << 20, file),
            len: 0,
            span_names: Default::default(),
            first_name,
            clock: crate::os::sys::clock(),
            shared,
            others: tx,
            writer: Some(writer),
        })
    }

    /// One call, `ts` and `dur` in TSC ticks (as `SpanEntry`).
    pub fn span(&mut self, tid: u32, probe: u16, ts: u64, dur: u64) -> std::io::Result<()> {
        if self.shared.full.load(Ordering::Relaxed) {
            self.shared.unspooled.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let mut r = [0u8; SPAN_REC];
        r[0..4].copy_from_slice(&tid.to_le_bytes());
        r[4..6].copy_from_slice(&probe.to_le_bytes());
        r[8..16].copy_from_slice(&ts.to_le_bytes());
        r[16..24].copy_from_slice(&dur.to_le_bytes());
        self.len += SPAN_REC as u64;
        self.spool.write_all(&r)
    }

    /// Calls as the target staged them (`SpanEntry`s, an `EV_SPANS`
    /// payload): spooled as they are.
    pub fn spans(&mut self, entries: &[u8]) -> std::io::Result<()> {
        if self.shared.full.load(Ordering::Relaxed) {
            self.shared.unspooled.fetch_add((entries.len() / SPAN_REC) as u64, Ordering::Relaxed);
            return Ok(());
        }
        let n = entries.len() / SPAN_REC * SPAN_REC;
        self.len += n as u64;
        self.spool.write_all(&entries[..n])
    }

    /// `trace_span(name, start)`: a slice named by the script, from
    /// `start_ns` to `end_ns` (CLOCK_REALTIME), spooled as a call whose
    /// id is the name's. Past 65536 slice names in all, it is left out
    /// (counted with what the writer had no room for).
    pub fn named_span(&mut self, tid: u32, name: &[u8], start_ns: u64, end_ns: u64) -> std::io::Result<()> {
        let id = match self.span_names.get(name) {
            Some(&id) => id,
            None => {
                let Ok(mut names) = self.shared.span_names.lock() else { return Ok(()) };
                let Ok(id) = u16::try_from(self.first_name + names.len()) else {
                    self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                };
                names.push(String::from_utf8_lossy(name).into_owned());
                self.span_names.insert(name.to_vec(), id);
                id
            }
        };
        let start = self.clock.tsc(start_ns.min(end_ns));
        let end = self.clock.tsc(end_ns).max(start);
        self.span(tid, id, start, end - start)
    }

    pub fn instant(&mut self, tid: u32, ts: u64, cat: &'static str, name: &[u8], text: Option<&[u8]>) {
        let o = Other::Instant { tid, ts, cat, name: name.to_vec(), text: text.map(<[u8]>::to_vec) };
        self.other(o);
    }

    /// Thread `tid` is of process `pid` (`EV_THREAD`, the target's word:
    /// it names tracks, nothing else).
    pub fn thread(&mut self, tid: u32, pid: u32, comm: Option<Vec<u8>>) {
        if let Ok(mut o) = self.shared.owners.lock() {
            if o.len() < 1 << 16 {
                o.push((tid, pid, comm));
            }
        }
    }

    pub fn counter(&mut self, ts: u64, name: &[u8], value: i64) {
        self.other(Other::Counter { ts, name: name.to_vec(), value });
    }

    fn other(&mut self, o: Other) {
        if let Err(std::sync::mpsc::TrySendError::Full(_)) = self.others.try_send(o) {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hand what was spooled to the writer.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.spool.flush()?;
        self.shared.flushed.store(self.len, Ordering::Release);
        if let Some(w) = &self.writer {
            w.thread().unpark();
        }
        Ok(())
    }

    /// Everything written: complete the files, with the session's summary
    /// for those that record it.
    pub fn finish(mut self, mut summary: Summary) -> std::io::Result<Finished> {
        self.flush()?;
        summary.writer_dropped = self.shared.dropped.load(Ordering::Relaxed);
        if let Ok(mut s) = self.shared.summary.lock() {
            *s = summary;
        }
        self.shared.done.store(true, Ordering::Release);
        let w = self.writer.take().ok_or_else(|| std::io::Error::other("the trace writer is gone"))?;
        w.thread().unpark();
        let mut finished = w.join().map_err(|_| std::io::Error::other("the trace writer panicked"))??;
        finished.dropped = self.shared.dropped.load(Ordering::Relaxed);
        Ok(finished)
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        // An error path: let the writer close what it has.
        if let Some(w) = self.writer.take() {
            let _ = self.spool.flush();
            self.shared.flushed.store(self.len, Ordering::Release);
            self.shared.done.store(true, Ordering::Release);
            w.thread().unpark();
            let _ = w.join();
        }
    }
}

/// The `trace_span` names added since the writers last looked, given to
/// every writer: the names they have now (from `known`; the first after
/// the probes' is `first`).
fn learn(out: &mut [Box<dyn TraceWriter>], known: usize, first: usize, names: &std::sync::Mutex<Vec<String>>) -> usize {
    let Ok(names) = names.lock() else { return known };
    for n in names.iter().skip(known.saturating_sub(first)) {
        for w in out.iter_mut() {
            w.add_name(n);
        }
    }
    first + names.len()
}

fn other(out: &mut [Box<dyn TraceWriter>], o: Other) -> std::io::Result<()> {
    for w in out.iter_mut() {
        match &o {
            Other::Instant { tid, ts, cat, name, text } => w.instant(*tid, *ts, cat, name, text.as_deref())?,
            Other::Counter { ts, name, value } => w.counter(*ts, name, *value)?,
        }
    }
    Ok(())
}

fn write_loop(
    mut out: Vec<Box<dyn TraceWriter>>,
    first_name: usize,
    spool: File,
    shared: &Shared,
    others: std::sync::mpsc::Receiver<Other>,
    idle: bool,
) -> std::io::Result<Finished> {
    use std::os::unix::fs::FileExt;
    // The files can wait, the target cannot: this thread runs on CPU time
    // nothing else wants while the session runs (the spool on disk absorbs
    // the lag; at the end the session waits for it, and it runs as any
    // thread). Linux schedules threads one by one.
    if idle {
        crate::os::process::run_when_idle();
    }
    let mut buf = vec![0u8; (1 << 20) / SPAN_REC * SPAN_REC];
    let mut pos = 0u64;
    let mut freed = 0u64;
    // Thread names are looked at again about once a second.
    let mut names_at = std::time::Instant::now();
    // Probe ids below `first_name`; `trace_span` names from there.
    // `known`: the names the writers have.
    let mut known = first_name;
    let mut waited_for = false;
    loop {
        // Acquire before the flushed length: `done` then means all of it.
        let done = shared.done.load(Ordering::Acquire);
        if done && !waited_for {
            // The session now waits for the files: what is left of the
            // spool is written at full speed, not on idle time (which a
            // busy machine may never have: a 2 GB trace then took
            // minutes to finish, docs/PERFORMANCE.md).
            crate::os::process::run_normally();
            waited_for = true;
        }
        let flushed = shared.flushed.load(Ordering::Acquire);
        owners(&mut out, shared);
        let mut any = false;
        while pos < flushed {
            let want = ((flushed - pos) as usize).min(buf.len());
            let n = spool.read_at(&mut buf[..want], pos)?;
            if n < SPAN_REC {
                break;
            }
            let n = n / SPAN_REC * SPAN_REC;
            let calls = Calls::new(&buf[..n]);
            // A name is added before the first call with its id is
            // spooled: the writers learn it before they see the call.
            if calls.clone().any(|c| usize::from(c.probe) >= known) {
                known = learn(&mut out, known, first_name, &shared.span_names);
            }
            for w in &mut out {
                w.calls(calls.clone())?;
            }
            pos += n as u64;
            any = true;
            // Give the disk back behind us, 64 MiB at a time.
            if pos - freed >= 64 << 20 {
                crate::os::process::punch_hole(&spool, pos);
                freed = pos;
            }
        }
        // (Threads told meanwhile: before their instants.)
        owners(&mut out, shared);
        while let Ok(o) = others.try_recv() {
            any = true;
            other(&mut out, o)?;
        }
        if out.iter().all(|w| w.full()) {
            shared.full.store(true, Ordering::Relaxed);
        }
        if names_at.elapsed() >= std::time::Duration::from_secs(1) {
            for w in &mut out {
                w.refresh();
            }
            names_at = std::time::Instant::now();
        }
        if done && pos >= flushed {
            // `done` was set after the last call was counted unspooled.
            let end = End {
                summary: shared.summary.lock().map(|s| *s).unwrap_or_default(),
                unspooled: shared.unspooled.load(Ordering::Relaxed),
            };
            let files = out.into_iter().map(|w| w.finish(&end)).collect::<std::io::Result<_>>()?;
            return Ok(Finished { files, dropped: 0 });
        }
        if !any {
            for w in &mut out {
                w.flush()?;
            }
            std::thread::park_timeout(std::time::Duration::from_millis(5));
        }
    }
}

/// What the target told of threads (their process and name), by thread.
pub(crate) type Owners = std::collections::HashMap<u32, (u32, Option<Vec<u8>>)>;

/// Remember what the target told of thread `tid`, in at most `max`
/// entries: when full, the threads that have ended are forgotten first
/// (once per so many new threads: a long session's come and go).
pub(crate) fn remember_owner(owners: &mut Owners, max: usize, tid: u32, pid: u32, comm: Option<&[u8]>) {
    if owners.len() >= max && !owners.contains_key(&tid) {
        owners.retain(|&t, (p, _)| crate::os::proc::thread_exists(*p as i32, t as i32));
    }
    if owners.len() < max || owners.contains_key(&tid) {
        owners.insert(tid, (pid, comm.map(<[u8]>::to_vec)));
    }
}

/// What a trace file calls a thread: its name now, or as it was told
/// (`TraceWriter::owner`: it may be gone), or `thread_label`'s.
pub(crate) fn thread_name(pid: u32, tid: u32, told: Option<&Vec<u8>>, first: &[u8]) -> Vec<u8> {
    crate::os::proc::thread_comm(pid as i32, tid as i32)
        .or_else(|| told.cloned())
        .unwrap_or_else(|| crate::os::proc::thread_label(pid, tid, first))
}

/// What a trace file calls process `pid`: its name now, its main
/// thread's as it was told, the first process's (a session by path runs
/// one program), never empty (Perfetto refuses an empty name).
pub(crate) fn process_name(pid: u32, told: Option<&Vec<u8>>, first: &[u8]) -> Vec<u8> {
    let now = crate::os::proc::comm(pid as i32).into_bytes();
    [Some(now), told.cloned(), Some(first.to_vec())]
        .into_iter()
        .flatten()
        .find(|n| !n.is_empty())
        .unwrap_or_else(|| format!("pid {pid}").into_bytes())
}

/// The threads' processes told since the last look, to every writer.
fn owners(out: &mut [Box<dyn TraceWriter>], shared: &Shared) {
    let told = match shared.owners.lock() {
        Ok(mut o) if !o.is_empty() => std::mem::take(&mut *o),
        _ => return,
    };
    for w in out.iter_mut() {
        for (tid, pid, comm) in &told {
            w.owner(*tid, *pid, comm.as_deref());
        }
    }
}

/// A `--max-size` (or another limit) as the messages say it: in whole GB,
/// MB or KB when it is one (units of 1024, as `size_text`), else bytes.
pub fn limit_text(bytes: u64) -> String {
    for (unit, name) in [(1u64 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB")] {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} bytes")
}

/// `500M`, `2G`, `64K`, `1T`, or plain bytes (units of 1024; `MB`, `MiB`
/// and lower case too): a `--max-size`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("`{s}` is not a size (e.g. 500M, 2G, 1048576)")),
    };
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a size (e.g. 500M, 2G, 1048576)"))?;
    n.checked_mul(1 << shift).ok_or_else(|| format!("`{s}` is too large"))
}

/// A size as the summary and the status line say it: KB or MB.
pub fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KB", bytes as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("64kb"), Ok(64 << 10));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert!(parse_size("big").is_err());
        assert!(parse_size("-1M").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(limit_text(500 << 20), "500 MB");
        assert_eq!(limit_text(2 << 30), "2 GB");
        assert_eq!(limit_text(1000), "1000 bytes");
    }

    #[test]
    fn spooled_calls_read_back() {
        let mut spool = Vec::new();
        for (tid, probe, ts, dur) in [(7u32, 1u16, 100u64, 5i64), (8, 2, u64::MAX - 1, 9), (9, 3, 50, -4)] {
            spool.extend_from_slice(&tid.to_le_bytes());
            spool.extend_from_slice(&probe.to_le_bytes());
            spool.extend_from_slice(&[0, 0]);
            spool.extend_from_slice(&ts.to_le_bytes());
            spool.extend_from_slice(&dur.to_le_bytes());
        }
        // A partial record at the end is not a call.
        spool.extend_from_slice(&[1, 2, 3]);
        let calls: Vec<Call> = Calls::new(&spool).collect();
        assert_eq!(
            calls,
            [
                Call { tid: 7, probe: 1, start: 100, end: 105 },
                Call { tid: 8, probe: 2, start: u64::MAX - 1, end: u64::MAX },
                Call { tid: 9, probe: 3, start: 50, end: 50 },
            ]
        );
    }

    /// A format that keeps what it is given, for the tests.
    struct Kept(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl TraceWriter for Kept {
        fn add_name(&mut self, name: &str) {
            self.0.lock().unwrap().push(format!("name {name}"));
        }
        fn calls(&mut self, calls: Calls<'_>) -> std::io::Result<()> {
            let mut v = self.0.lock().unwrap();
            v.extend(calls.map(|c| format!("call {} {} {}", c.tid, c.probe, c.end - c.start)));
            Ok(())
        }
        fn instant(&mut self, tid: u32, _: u64, cat: &str, name: &[u8], _: Option<&[u8]>) -> std::io::Result<()> {
            self.0.lock().unwrap().push(format!("instant {tid} {cat} {}", String::from_utf8_lossy(name)));
            Ok(())
        }
        fn counter(&mut self, _: u64, name: &[u8], value: i64) -> std::io::Result<()> {
            self.0.lock().unwrap().push(format!("counter {} {value}", String::from_utf8_lossy(name)));
            Ok(())
        }
        fn full(&self) -> bool {
            false
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn finish(self: Box<Self>, end: &End) -> std::io::Result<Report> {
            let n = self.0.lock().unwrap().len();
            Ok(Report {
                flag: "--kept",
                holds: format!("{n} kept, {} errors", end.summary.errors),
                ..Report::default()
            })
        }
    }

    #[test]
    fn every_writer_gets_every_event_and_a_name_before_its_calls() {
        let dir = std::env::temp_dir();
        let (a, b) = (Kept(Default::default()), Kept(Default::default()));
        let (seen_a, seen_b) = (a.0.clone(), b.0.clone());
        let mut feed = Feed::start(vec![Box::new(a), Box::new(b)], 2, &dir).unwrap();
        feed.span(7, 1, 100, 5).unwrap();
        feed.named_span(8, b"phase", 1_000, 1_000).unwrap();
        feed.flush().unwrap();
        feed.counter(0, b"queue", -3);
        let f = feed.finish(Summary { errors: 4, ..Summary::default() }).unwrap();
        for seen in [seen_a, seen_b] {
            let seen = seen.lock().unwrap();
            let at = |s: &str| seen.iter().position(|x| x == s).unwrap_or_else(|| panic!("no {s}: {seen:?}"));
            assert!(at("call 7 1 5") < at("call 8 2 0"), "{seen:?}");
            // A `trace_span` name is learned before its first call.
            assert!(at("name phase") < at("call 8 2 0"), "{seen:?}");
            at("counter queue -3");
            assert_eq!(seen.len(), 4);
        }
        assert_eq!(f.files.len(), 2);
        assert_eq!(f.files[0].holds, "4 kept, 4 errors");
    }

    #[test]
    fn a_report_says_what_the_file_lacks() {
        let r = Report {
            flag: "--x",
            holds: "--x: 3 events, 1.0 KB, written to t".into(),
            left_out: 2,
            max_size: 1 << 20,
            lacks: vec!["WARNING: lacks".into()],
            warnings: vec!["WARNING: maybe".into()],
            ..Report::default()
        };
        let said = |quiet| r.lines(&Reporting { dropped: "none dropped", default_max_size: true, quiet });
        assert_eq!(
            said(false),
            [
                "--x: 3 events, 1.0 KB, written to t; none dropped",
                "--x trace reached --max-size 1 MB (the default): 2 events left out",
                "WARNING: lacks",
                "WARNING: maybe",
            ]
        );
        assert_eq!(said(true).len(), 3);
    }
}
