//! `--rotate SIZE`: a trace file that has reached SIZE is completed and
//! the trace goes on in FILE.1, FILE.2, ... Each file is a trace of its
//! own, which Perfetto's trace processor (or chrome://tracing) opens
//! without the others: it starts as a new file of its format does
//! (clocks, the process's and each thread's track, names interned anew).
//! A call is in exactly one file: calls are cut between two batches of
//! the trace writer, and a writer completes the calls it holds (waiting
//! for a caller: [`crate::perfetto::order`]) into the file it completes.
//!
//! A file may pass SIZE by what one batch adds (64 calls of `--chrome`,
//! a compressed batch of `--perfetto`: a megabyte of packets, some
//! hundreds of kilobytes). A file is cut an eighth short of `--max-size`
//! at most, so that what passes still fits (a `--perfetto` batch may not,
//! under a few megabytes: its calls are then counted as left out). The session's summary (errors, drops) is in the last
//! file's metadata; the files before it carry zeros.

use crate::feed::{Calls, Config, End, Open, Report, TraceWriter};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Calls written between two looks at the file's size (some 6 KB of
/// `--chrome`'s JSON: within the eighth of the smallest `--max-size` left
/// free).
const ROTATE_CHECK: usize = 64;

/// Threads remembered to be told to each new file, at most.
const MAX_THREADS: usize = 1 << 17;

/// A file format's writer, cut into files of about `size` bytes.
pub struct Rotating {
    open: Open,
    path: PathBuf,
    pid: u32,
    process: String,
    names: Vec<String>,
    max_size: u64,
    quiet: bool,
    status: bool,
    base_ns: u64,
    size: u64,
    inner: Box<dyn TraceWriter>,
    /// Files completed (the current one is `files`'s name).
    files: u64,
    /// What the target told of its threads, for each new file.
    owners: HashMap<u32, (u32, Option<Vec<u8>>)>,
    /// The completed files' reports, summed.
    done: Totals,
}

#[derive(Default)]
struct Totals {
    calls: u64,
    events: u64,
    bytes: u64,
    left_out: u64,
    lacks: Vec<String>,
    warnings: Vec<String>,
}

impl Totals {
    fn add(&mut self, r: Report) {
        self.calls += r.calls;
        self.events += r.events;
        self.bytes += r.bytes;
        self.left_out += r.left_out;
        for l in r.lacks {
            if !self.lacks.contains(&l) {
                self.lacks.push(l);
            }
        }
        for w in r.warnings {
            if !self.warnings.contains(&w) {
                self.warnings.push(w);
            }
        }
    }
}

/// The name of file `n` of a rotated trace: FILE, FILE.1, FILE.2, ...
pub fn nth(path: &Path, n: u64) -> PathBuf {
    if n == 0 {
        return path.to_path_buf();
    }
    let mut s = path.as_os_str().to_os_string();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

impl Rotating {
    /// The first file, from `cfg`, of the format `open` starts; a new
    /// one once it has `size` bytes.
    pub fn start(open: Open, cfg: &Config<'_>, size: u64) -> std::io::Result<Rotating> {
        let inner = open(cfg)?;
        // A file is cut an eighth short of --max-size at most: what one
        // look at the size lets through (a chunk of calls, a compressed
        // batch) then still fits, and no call is left out of every file.
        let size = size.min(cfg.max_size - cfg.max_size / 8);
        Ok(Rotating {
            open,
            path: cfg.path.to_path_buf(),
            pid: cfg.pid,
            process: cfg.process.to_string(),
            names: cfg.names.to_vec(),
            max_size: cfg.max_size,
            quiet: cfg.quiet,
            status: cfg.status,
            base_ns: cfg.base_ns,
            size,
            inner,
            files: 0,
            owners: HashMap::new(),
            done: Totals::default(),
        })
    }

    /// Before writing more: complete the file if it has reached the size
    /// or is full (`--max-size`), and start the next (only then: a file
    /// full at the session's end has no empty file after it, which a trace
    /// processor would refuse).
    fn room(&mut self) -> std::io::Result<()> {
        if self.inner.size() >= self.size || self.inner.full() {
            self.rotate()?;
        }
        Ok(())
    }

    /// Complete the file and start the next.
    fn rotate(&mut self) -> std::io::Result<()> {
        let path = nth(&self.path, self.files + 1);
        let cfg = Config {
            path: &path,
            pid: self.pid,
            process: &self.process,
            names: &self.names,
            max_size: self.max_size,
            quiet: self.quiet,
            status: self.status,
            base_ns: self.base_ns,
        };
        let mut next = (self.open)(&cfg)?;
        for (&tid, (pid, comm)) in &self.owners {
            next.owner(tid, *pid, comm.as_deref());
        }
        let old = std::mem::replace(&mut self.inner, next);
        self.files += 1;
        let r = old.finish(&End::default())?;
        self.done.add(r);
        Ok(())
    }
}

impl TraceWriter for Rotating {
    fn add_name(&mut self, name: &str) {
        self.names.push(name.to_string());
        self.inner.add_name(name);
    }

    /// [`ROTATE_CHECK`] calls at a time, the size looked at in between (a
    /// batch of the spool is 43,690 calls: 4 MB of `--chrome`'s JSON).
    fn calls(&mut self, mut calls: Calls<'_>) -> std::io::Result<()> {
        while !calls.is_empty() {
            self.room()?;
            self.inner.calls(calls.take_calls(ROTATE_CHECK))?;
        }
        Ok(())
    }

    fn instant(&mut self, tid: u32, ts_ns: u64, cat: &str, name: &[u8], text: Option<&[u8]>) -> std::io::Result<()> {
        self.room()?;
        self.inner.instant(tid, ts_ns, cat, name, text)
    }

    fn counter(&mut self, ts_ns: u64, name: &[u8], value: i64) -> std::io::Result<()> {
        self.room()?;
        self.inner.counter(ts_ns, name, value)
    }

    fn owner(&mut self, tid: u32, pid: u32, comm: Option<&[u8]>) {
        crate::feed::remember_owner(&mut self.owners, MAX_THREADS, tid, pid, comm);
        self.inner.owner(tid, pid, comm);
    }

    fn refresh(&mut self) {
        self.inner.refresh();
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn full(&self) -> bool {
        self.inner.full()
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }

    fn finish(self: Box<Self>, end: &End) -> std::io::Result<Report> {
        let this = *self;
        let last = this.inner.finish(end)?;
        if this.files == 0 {
            return Ok(last);
        }
        let (flag, max_size, path) = (last.flag, last.max_size, last.path.clone());
        let mut t = this.done;
        t.add(last);
        let what = if t.calls > 0 {
            format!("{} calls, {} events", t.calls, t.events)
        } else {
            format!("{} events", t.events)
        };
        Ok(Report {
            flag,
            holds: format!(
                "{flag}: {what}, {} in {} files (--rotate {}): {} to {}",
                crate::feed::size_text(t.bytes),
                this.files + 1,
                crate::feed::limit_text(this.size),
                this.path.display(),
                nth(&this.path, this.files).display()
            ),
            left_out: t.left_out,
            max_size,
            lacks: t.lacks,
            warnings: t.warnings,
            calls: t.calls,
            events: t.events,
            bytes: t.bytes,
            path,
        })
    }
}
