//! The consumer's side of the trace files (`--chrome`, `--perfetto`, or
//! both from one run).
//!
//! Calls arrive at up to tens of millions per second, faster than JSON or
//! protobuf can be formatted and written, so the consumer only appends
//! them in binary (24 bytes each, the region's `SpanEntry`s as they are)
//! to an unlinked spool file next to the trace, which keeps the ring
//! drained; a writer thread turns the spool into each file as it grows
//! (and frees the disk space behind it). Memory stays bounded: the spool
//! is on disk. printf lines, instants and counters, far fewer, go to the
//! writer through a bounded queue; what does not fit is counted
//! ([`OTHERS_QUEUED`]). Once every file has reached its `--max-size`,
//! calls are no longer spooled, only counted (left out of every file).

use crate::chrome::Chrome;
use crate::perfetto::Perfetto;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// printf lines, instants and counters waiting for the writer, at most:
/// the consumer never waits for the writer (which runs when nothing else
/// wants the CPU), and memory stays bounded whatever the target prints.
pub const OTHERS_QUEUED: usize = 1 << 16;

/// Bytes of one spooled call: tid u32, probe u16, 2 spare, ts u64, dur u64.
const SPAN_REC: usize = 24;
// The spool's records are the region's span entries, byte for byte.
const _: () = assert!(SPAN_REC == telco_abi::region::SPAN_ENTRY_SIZE);

/// The trace files of a session.
pub struct Writers {
    pub chrome: Option<Chrome>,
    pub perfetto: Option<Perfetto>,
}

/// What each trace file holds when the session ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Finished {
    pub chrome: Option<crate::chrome::Written>,
    pub perfetto: Option<crate::perfetto::Written>,
    /// printf lines, instants and counters the writer had no room for
    /// (left out of every file).
    pub dropped: u64,
}

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
    /// The session's summary for `--perfetto`'s metadata, set before
    /// `done`.
    summary: std::sync::Mutex<crate::perfetto::Summary>,
    /// `trace_span` names by id from the first after the probes': added
    /// before the first call with the id is spooled.
    span_names: std::sync::Mutex<Vec<String>>,
}

impl Feed {
    /// Start the writer thread for `writers`, spooling in `dir` (where the
    /// first trace file is).
    pub fn start(writers: Writers, dir: &Path) -> std::io::Result<Feed> {
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
        });
        let first_name = writers.names();
        let (tx, rx) = std::sync::mpsc::sync_channel(OTHERS_QUEUED);
        let sh = shared.clone();
        let writer = std::thread::Builder::new()
            .name("trace-writer".into())
            .spawn(move || write_loop(writers, reader, &sh, rx))?;
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

    /// Everything written: complete the files, `--perfetto`'s with the
    /// session's summary.
    pub fn finish(mut self, mut summary: crate::perfetto::Summary) -> std::io::Result<Finished> {
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
        // Calls not spooled: in no file (each a begin and an end in
        // --perfetto's).
        let unspooled = self.shared.unspooled.load(Ordering::Relaxed);
        if let Some(c) = &mut finished.chrome {
            c.dropped = finished.dropped;
            c.left_out += unspooled;
        }
        if let Some(p) = &mut finished.perfetto {
            p.left_out += 2 * unspooled;
        }
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

impl Writers {
    /// The slice names the writers have (the probes', to start with).
    fn names(&self) -> usize {
        match (&self.chrome, &self.perfetto) {
            (Some(c), _) => c.names(),
            (None, Some(p)) => p.names(),
            (None, None) => 0,
        }
    }

    /// Whether every file has reached its `--max-size`.
    fn full(&self) -> bool {
        self.chrome.as_ref().is_none_or(Chrome::full) && self.perfetto.as_ref().is_none_or(Perfetto::full)
    }

    /// The `trace_span` names added since the writers last looked.
    fn learn(&mut self, first: usize, names: &std::sync::Mutex<Vec<String>>) {
        let Ok(names) = names.lock() else { return };
        for n in names.iter().skip(self.names().saturating_sub(first)) {
            if let Some(c) = &mut self.chrome {
                c.add_name(n);
            }
            if let Some(p) = &mut self.perfetto {
                p.add_name(n);
            }
        }
    }

    /// A call from TSC tick `start` to `end`.
    fn call(
        &mut self,
        tid: u32,
        probe: u16,
        start: u64,
        end: u64,
        clock: &crate::os::sys::Clock,
    ) -> std::io::Result<()> {
        if let Some(c) = &mut self.chrome {
            c.span(tid, probe, clock.ns(start), clock.ns(end))?;
        }
        if let Some(p) = &mut self.perfetto {
            p.call(tid, probe, start, end)?;
        }
        Ok(())
    }

    fn other(&mut self, o: Other) -> std::io::Result<()> {
        match o {
            Other::Instant { tid, ts, cat, name, text } => {
                if let Some(c) = &mut self.chrome {
                    c.instant(tid, ts, cat, &name, text.as_deref())?;
                }
                if let Some(p) = &mut self.perfetto {
                    p.instant(tid, ts, cat, &name, text.as_deref())?;
                }
            }
            Other::Counter { ts, name, value } => {
                if let Some(c) = &mut self.chrome {
                    c.counter(ts, &name, value)?;
                }
                if let Some(p) = &mut self.perfetto {
                    p.counter(ts, &name, value)?;
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if let Some(c) = &mut self.chrome {
            c.flush()?;
        }
        if let Some(p) = &mut self.perfetto {
            p.flush()?;
        }
        Ok(())
    }

    fn finish(self, summary: &crate::perfetto::Summary) -> std::io::Result<Finished> {
        let chrome = self.chrome.map(Chrome::finish).transpose()?;
        let perfetto = self.perfetto.map(|p| p.finish(summary)).transpose()?;
        Ok(Finished { chrome, perfetto, dropped: 0 })
    }
}

fn write_loop(
    mut out: Writers,
    spool: File,
    shared: &Shared,
    others: std::sync::mpsc::Receiver<Other>,
) -> std::io::Result<Finished> {
    use std::os::unix::fs::FileExt;
    // The files can wait, the target cannot: this thread runs on CPU time
    // nothing else wants while the session runs (the spool on disk absorbs
    // the lag; at the end the session waits for it, and it runs as any
    // thread). Linux schedules threads one by one.
    crate::os::process::run_when_idle();
    // Spooled calls are in TSC ticks.
    let clock = crate::os::sys::clock();
    let mut buf = vec![0u8; (1 << 20) / SPAN_REC * SPAN_REC];
    let mut pos = 0u64;
    let mut freed = 0u64;
    // Thread names are looked at again about once a second.
    let mut names_at = std::time::Instant::now();
    // Probe ids below this; `trace_span` names from here. `known`: the
    // names the writers have (one compare a call).
    let first_name = out.names();
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
        let mut any = false;
        while pos < flushed {
            let want = ((flushed - pos) as usize).min(buf.len());
            let n = spool.read_at(&mut buf[..want], pos)?;
            if n < SPAN_REC {
                break;
            }
            let n = n / SPAN_REC * SPAN_REC;
            for r in buf[..n].chunks_exact(SPAN_REC) {
                let tid = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
                let probe = u16::from_le_bytes([r[4], r[5]]);
                let ts = u64::from_le_bytes(r[8..16].try_into().unwrap_or([0; 8]));
                let dur = i64::from_le_bytes(r[16..24].try_into().unwrap_or([0; 8])).max(0) as u64;
                if usize::from(probe) >= known {
                    out.learn(first_name, &shared.span_names);
                    known = out.names();
                }
                out.call(tid, probe, ts, ts.saturating_add(dur), &clock)?;
            }
            pos += n as u64;
            any = true;
            // Give the disk back behind us, 64 MiB at a time.
            if pos - freed >= 64 << 20 {
                crate::os::process::punch_hole(&spool, pos);
                freed = pos;
            }
        }
        while let Ok(o) = others.try_recv() {
            any = true;
            out.other(o)?;
        }
        if out.full() {
            shared.full.store(true, Ordering::Relaxed);
        }
        if names_at.elapsed() >= std::time::Duration::from_secs(1) {
            if let Some(p) = &mut out.perfetto {
                p.refresh_names();
            }
            names_at = std::time::Instant::now();
        }
        if done && pos >= flushed {
            let summary = shared.summary.lock().map(|s| *s).unwrap_or_default();
            return out.finish(&summary);
        }
        if !any {
            out.flush()?;
            std::thread::park_timeout(std::time::Duration::from_millis(5));
        }
    }
}
