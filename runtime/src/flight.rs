//! `--flight-recorder FILE`: the recent past of every thread, kept in the
//! target's shared memory, written as a Perfetto trace only when asked.
//!
//! # Where the history is
//!
//! The calls are `--perfetto`'s (the return probes `add_chrome_spans`
//! adds, recorded inline by lean trampolines into their thread slot's
//! `SpanStage`). With the flight recorder a full stage is not sent: it is
//! copied into the next of the region's `FlightChunk`s
//! (`Header::flight_off`, `rt_flight_dump` and `span_send` in
//! compiler/rt/rt.c), taken in turn by an atomic add, the oldest
//! overwritten. Nothing is reserved in the ring and nothing is drained per
//! call; `--flight-size` bounds the chunks, and the chunks are all the
//! history there is, so neither the target's memory nor the tracer's grows
//! with the session. The chunks live in the region's memfd, which the
//! tracer holds: a process that dies leaves its history there.
//!
//! printf lines, `trace_instant`, `trace_counter` and `trace_span` still
//! come through the ring (they are few); the consumer keeps the last
//! [`OTHERS_KEPT`] of them here ([`Flight::instant`] and the others).
//!
//! # A dump
//!
//! A trigger ([`Why`]) becomes a [`Request`] on the session's side
//! (`Armed::flight_requests`, which alone knows the session's processes):
//! the fault of a process (before `rt_crash`'s wait is answered, so its
//! threads' shadow stacks can still be read), a `flight_dump()` (the
//! count `Header::flight_asks` grew), a SIGUSR2 to the tracer, the end of
//! the session with `--flight-at-end`. With it go the calls in flight
//! ([`Open`]): the frames of the span probes on each thread's shadow
//! stack, whose first `@entry` save is the call's start. The consumer
//! thread then copies every stage and chunk ([`snapshot`]; a chunk
//! rewritten while copied, its `seq` changed, is dropped), keeps the calls
//! that ended by the dump's instant, ends the open ones there, and writes
//! the whole through the Perfetto writer (`crate::feed` with
//! `crate::perfetto::Perfetto`): FILE, then FILE.2, FILE.3... Nothing in
//! the target waits for it.
//!
//! Everything read from the region and the shadow stacks is the target's
//! to write: a call is kept only if its probe is a span probe of the
//! artifact, its thread is not 0 and its times lie inside the session.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};
use std::sync::Mutex;

use telco_abi::artifact::Artifact;
use telco_abi::region::{self as abi, FlightChunk, ShadowFrame, SpanStage, ThreadSlot};

use crate::feed::{self, Summary};
use crate::region::Region;

/// The flag that asks for it (its messages say it).
pub const FLAG: &str = "--flight-recorder";

/// `--flight-size` without the flag: 32 MB, about 1.3 M calls.
pub const DEFAULT_SIZE: u64 = 32 << 20;

/// printf lines, instants, counters and named spans kept for the dumps,
/// at most, and their bytes at most (a printf line may be long).
pub const OTHERS_KEPT: usize = 1 << 14;
pub const OTHERS_BYTES: usize = 4 << 20;

/// Dumps the traced processes can cause (`flight_dump()`, crashes) in a
/// session, at most: the target decides how often it asks, the disk is
/// not its to fill. SIGUSR2 and `--flight-at-end` are the user's.
pub const MAX_TARGET_DUMPS: u32 = 64;

/// Why a dump is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// Process `pid`'s thread `tid` took a fatal signal: `text` is the
    /// crash report's.
    Crash { pid: u32, tid: u32, signal: String, text: String },
    /// `flight_dump()` in a probe handler.
    Asked,
    /// SIGUSR2 to the tracer.
    Signal,
    /// `--flight-at-end`.
    End,
}

impl Why {
    fn said(&self) -> String {
        match self {
            Why::Crash { pid, signal, .. } => format!("{signal} in process {pid}"),
            Why::Asked => "flight_dump()".into(),
            Why::Signal => "SIGUSR2".into(),
            Why::End => "the end of the session".into(),
        }
    }
}

/// A call in flight: started on `tid` at `start` (TSC ticks), not
/// returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Open {
    pub tid: u32,
    pub pid: u32,
    pub probe: u16,
    pub start: u64,
}

/// A dump to write: why, its instant (CLOCK_REALTIME ns, and in the
/// spans' ticks: `os::sys::ticks`), the calls then in flight, innermost
/// first on each thread.
#[derive(Clone, Debug)]
pub struct Request {
    pub why: Why,
    pub at_ns: u64,
    pub at_ticks: u64,
    pub open: Vec<Open>,
}

/// While it lives, SIGUSR2 holds `region`'s history at once (the
/// tracer's signal handler sets `Header::flight_hold`).
pub struct Holding;

impl Holding {
    pub fn new(region: &Region) -> Holding {
        let at = |field: usize| region.u64_at(field).as_ptr();
        crate::os::sys::dump_hold(
            at(core::mem::offset_of!(abi::Header, flight_hold)),
            at(core::mem::offset_of!(abi::Header, flight_gens)),
        );
        Holding
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        crate::os::sys::no_dump_hold();
    }
}

/// The history is read: the threads' next stages go into it again (unless
/// another trigger came meanwhile: then its own dump lets it go).
pub fn release(region: &Region, held: u64) {
    if held != 0 {
        let at = core::mem::offset_of!(abi::Header, flight_hold);
        let _ = region.u64_at(at).compare_exchange(held, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// A hold no dump came for (a trigger the tracer did not take: a
/// crash record of another process, a target's own store) is let go
/// after a second.
#[derive(Default)]
pub struct Stale {
    seen: Vec<(u64, Option<std::time::Instant>)>,
}

impl Stale {
    /// Once a pass without a request, with the regions in order.
    pub fn check(&mut self, regions: &[&Region]) {
        self.seen.resize(regions.len(), (0, None));
        for (r, (was, since)) in regions.iter().zip(&mut self.seen) {
            let now = held(r);
            if now == 0 || now != *was {
                *was = now;
                *since = (now != 0).then(std::time::Instant::now);
            } else if since.is_some_and(|t| t.elapsed() >= std::time::Duration::from_secs(1)) {
                release(r, now);
                *since = None;
            }
        }
    }
}

/// What holds `region`'s history now (0: nothing).
pub fn held(region: &Region) -> u64 {
    region.u64_at(core::mem::offset_of!(abi::Header, flight_hold)).load(Ordering::Acquire)
}

/// Dumps asked for, from the session's side to the consumer's.
static PENDING: Mutex<Vec<Request>> = Mutex::new(Vec::new());

/// Ask for a dump (the consumer writes it on its next pass). Those the
/// target causes wait one at a time (a target asking in a loop gets a dump
/// per pass, [`MAX_TARGET_DUMPS`] in all); the user's always wait.
pub fn request(r: Request) {
    if let Ok(mut p) = PENDING.lock() {
        let target = |w: &Why| matches!(w, Why::Asked | Why::Crash { .. });
        if target(&r.why) && p.iter().any(|q| target(&q.why)) {
            return;
        }
        p.push(r);
    }
}

/// The calls in flight read for one dump, at most, and the innermost
/// frames read of each thread's shadow stack.
pub const MAX_OPEN: usize = 1 << 16;
pub const MAX_OPEN_DEPTH: usize = 1024;

/// The dumps asked for since the last call.
pub fn take_requests() -> Vec<Request> {
    PENDING.lock().map(|mut p| std::mem::take(&mut *p)).unwrap_or_default()
}

/// The calls in flight in processes `pids` (all of them map the session's
/// thread slots at `threads_at`), from their threads' shadow stacks:
/// each frame of a span probe, whose first `@entry` save is the clock at
/// its entry. Innermost first on each thread. Threads that have ended
/// (their slot kept) are left out.
pub fn open_calls(pids: &[i32], threads_at: u64, a: &Artifact) -> Vec<Open> {
    let mut out = Vec::new();
    let stride = a.frame_size as usize;
    if threads_at == 0 || a.shadow_depth == 0 || stride < abi::SHADOW_FRAME_HEADER + 8 {
        return out;
    }
    let u32_at = |b: &[u8], o: usize| b.get(o..o + 4).map_or(0, |x| u32::from_le_bytes(x.try_into().unwrap_or([0; 4])));
    let u64_at = |b: &[u8], o: usize| b.get(o..o + 8).map_or(0, |x| u64::from_le_bytes(x.try_into().unwrap_or([0; 8])));
    let size = core::mem::size_of::<ThreadSlot>();
    for &pid in pids {
        let Ok(m) = crate::os::proc::mem(pid, false) else { continue };
        let read = |at: u64, len: usize| -> Option<Vec<u8>> {
            let mut b = vec![0u8; len];
            std::os::unix::fs::FileExt::read_exact_at(&m, &mut b, at).ok().map(|()| b)
        };
        let Some(slots) = read(threads_at, size * a.nthreads.min(1 << 16) as usize) else { continue };
        for s in slots.chunks_exact(size) {
            let tid = u32_at(s, core::mem::offset_of!(ThreadSlot, tid));
            if u64_at(s, core::mem::offset_of!(ThreadSlot, key)) == 0
                || u32_at(s, core::mem::offset_of!(ThreadSlot, pid)) != pid as u32
                || tid == 0
                || crate::os::proc::thread_comm(pid, tid as i32).is_none()
            {
                continue;
            }
            let depth = (u32_at(s, core::mem::offset_of!(ThreadSlot, depth)) as usize).min(a.shadow_depth as usize);
            if depth == 0 || out.len() >= MAX_OPEN {
                continue;
            }
            // The innermost frames (the calls nearest the trigger).
            let skip = depth.saturating_sub(MAX_OPEN_DEPTH);
            let at = u64_at(s, core::mem::offset_of!(ThreadSlot, frames)).wrapping_add((skip * stride) as u64);
            let Some(frames) = read(at, stride * (depth - skip)) else {
                continue;
            };
            for f in frames.chunks_exact(stride).rev() {
                let probe = u32_at(f, core::mem::offset_of!(ShadowFrame, probe));
                if a.probes.get(probe as usize).is_some_and(|p| p.span) && out.len() < MAX_OPEN {
                    let start = u64_at(f, abi::SHADOW_FRAME_HEADER);
                    out.push(Open { tid, pid: pid as u32, probe: probe as u16, start });
                }
            }
        }
    }
    out
}

/// A call of the history: thread, probe, start and end in TSC ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Kept {
    tid: u32,
    end: u64,
    /// `u64::MAX - start`: of two calls ending together, the inner one
    /// (started later) first, as calls return.
    rstart: u64,
    probe: u16,
}

/// What [`snapshot`] found.
#[derive(Debug, Default)]
struct Snapshot {
    calls: Vec<Kept>,
    /// Chunks being rewritten while copied, left out.
    torn: u64,
    /// Records that no probe of the session could have written.
    bad: u64,
}

/// Copy every call the region's stages and chunks hold. The stages first:
/// a stage that fills meanwhile lands in a chunk read after it (a call
/// seen twice is kept once).
fn snapshot(region: &Region, a: &Artifact, into: &mut Snapshot, bounds: (u64, u64)) {
    let batch = a.span_batch as usize;
    if batch == 0 {
        return;
    }
    let base = region.base();
    let keep = |into: &mut Snapshot, b: &[u8]| {
        for r in feed::Calls::new(b) {
            let rec_ok = a.probes.get(usize::from(r.probe)).is_some_and(|p| p.span)
                && r.tid != 0
                && r.start >= bounds.0
                && r.end <= bounds.1
                && r.end >= r.start;
            if rec_ok {
                into.calls.push(Kept { tid: r.tid, end: r.end, rstart: u64::MAX - r.start, probe: r.probe });
            } else {
                into.bad += 1;
            }
        }
    };
    let count_at = core::mem::offset_of!(SpanStage, count);
    let sent_at = core::mem::offset_of!(SpanStage, sent);
    for i in 0..a.nthreads as usize {
        let st = a.spans_off as usize + i * a.span_stride as usize;
        for _ in 0..3 {
            // Acquire: the entries before the count that covers them.
            let sent = region.u32_at(st + sent_at).load(Ordering::Acquire);
            let n = (region.u32_at(st + count_at).load(Ordering::Acquire) as usize).min(batch);
            // SAFETY: the stage lies in the region (the artifact's layout).
            let b =
                unsafe { std::slice::from_raw_parts(base.add(st + abi::SPAN_STAGE_HEADER), n * abi::SPAN_ENTRY_SIZE) }
                    .to_vec();
            fence(Ordering::Acquire);
            let (n2, sent2) = (
                region.u32_at(st + count_at).load(Ordering::Relaxed) as usize,
                region.u32_at(st + sent_at).load(Ordering::Relaxed),
            );
            if sent == sent2 && n2 >= n {
                keep(into, &b);
                break;
            }
        }
    }
    let stride = a.flight_stride as usize;
    if stride < abi::FLIGHT_CHUNK_HEADER + batch * abi::SPAN_ENTRY_SIZE {
        return;
    }
    let seq_at = core::mem::offset_of!(FlightChunk, seq);
    let n_at = core::mem::offset_of!(FlightChunk, count);
    for c in 0..a.flight_chunks as usize {
        let at = a.flight_off as usize + c * stride;
        let seq = region.u64_at(at + seq_at).load(Ordering::Acquire);
        if seq == 0 {
            continue;
        }
        if seq & 1 == 1 {
            into.torn += 1;
            continue;
        }
        let n = (region.u32_at(at + n_at).load(Ordering::Relaxed) as usize).min(batch);
        // SAFETY: the chunk lies in the region (the artifact's layout).
        let b =
            unsafe { std::slice::from_raw_parts(base.add(at + abi::FLIGHT_CHUNK_HEADER), n * abi::SPAN_ENTRY_SIZE) }
                .to_vec();
        fence(Ordering::Acquire);
        if region.u64_at(at + seq_at).load(Ordering::Relaxed) != seq {
            into.torn += 1;
            continue;
        }
        keep(into, &b);
    }
}

/// A dump's history, copied ([`Flight::take`]), to be written.
pub struct Taken {
    req: Request,
    snap: Snapshot,
}

/// An event other than a call, kept for the dumps.
enum Other {
    Instant { tid: u32, ts: u64, cat: &'static str, name: Vec<u8>, text: Option<Vec<u8>> },
    Counter { ts: u64, name: Vec<u8>, value: i64 },
    Named { tid: u32, name: Vec<u8>, start: u64, end: u64 },
}

impl Other {
    /// Bytes it holds, about.
    fn size(&self) -> usize {
        64 + match self {
            Other::Instant { name, text, .. } => name.len() + text.as_ref().map_or(0, Vec::len),
            Other::Counter { name, .. } | Other::Named { name, .. } => name.len(),
        }
    }

    fn ts(&self) -> u64 {
        match self {
            Other::Instant { ts, .. } | Other::Counter { ts, .. } | Other::Named { end: ts, .. } => *ts,
        }
    }
}

/// How the flight recorder was asked for.
#[derive(Clone, Debug)]
pub struct Settings {
    pub path: PathBuf,
    /// `--flight-size`: every dump file stays under it too.
    pub size: u64,
    /// `--flight-at-end`.
    pub at_end: bool,
    /// The first process and its name; each probe's slice name.
    pub pid: u32,
    pub process: String,
    pub names: Vec<String>,
    /// `-w`.
    pub quiet: bool,
}

/// The consumer's side: the other events kept, the dumps written.
pub struct Flight {
    pub settings: Settings,
    others: VecDeque<Other>,
    others_bytes: usize,
    owners: HashMap<u32, (u32, Option<Vec<u8>>)>,
    clock: crate::os::sys::Clock,
    /// The session's start, CLOCK_REALTIME ns (no call of the session
    /// starts before it).
    start_ns: u64,
    /// What each dump holds, for the session's summary.
    pub lines: Vec<String>,
    /// Dumps that could not be written (said at once and at the end).
    pub failures: Vec<String>,
    /// Dumps the target caused, and those left unwritten past
    /// [`MAX_TARGET_DUMPS`].
    target_dumps: u32,
    refused: u64,
    /// Holds no dump came for.
    pub stale: Stale,
}

/// Threads named in the dumps at most (the tids come from the target).
const MAX_OWNERS: usize = 1 << 16;

impl Flight {
    pub fn new(settings: Settings) -> Flight {
        Flight {
            settings,
            others: VecDeque::new(),
            others_bytes: 0,
            owners: HashMap::new(),
            clock: crate::os::sys::clock(),
            start_ns: crate::os::sys::realtime_ns(),
            lines: Vec::new(),
            failures: Vec::new(),
            target_dumps: 0,
            refused: 0,
            stale: Stale::default(),
        }
    }

    /// What the session's summary says: each dump, each failure, the
    /// dumps left unwritten, the calls not kept (`Header::flight_unkept`).
    pub fn report(self, unkept: u64) -> Vec<String> {
        let mut v = self.lines;
        v.extend(self.failures);
        if unkept > 0 {
            v.push(format!(
                "{FLAG}: {unkept} calls were not kept in the history: made while a dump was being taken, or while \
                 another thread still wrote the chunk they were for"
            ));
        }
        if self.refused > 0 {
            v.push(format!(
                "{FLAG}: {} more dumps asked for by flight_dump() or crashes were not written (at most \
                 {MAX_TARGET_DUMPS} a session)",
                self.refused
            ));
        }
        v
    }

    fn other(&mut self, o: Other) {
        self.others_bytes += o.size();
        self.others.push_back(o);
        while self.others.len() > OTHERS_KEPT || self.others_bytes > OTHERS_BYTES {
            let Some(old) = self.others.pop_front() else { break };
            self.others_bytes -= old.size();
        }
    }

    pub fn instant(&mut self, tid: u32, ts: u64, cat: &'static str, name: &[u8], text: Option<&[u8]>) {
        self.other(Other::Instant { tid, ts, cat, name: name.to_vec(), text: text.map(<[u8]>::to_vec) });
    }

    pub fn counter(&mut self, ts: u64, name: &[u8], value: i64) {
        self.other(Other::Counter { ts, name: name.to_vec(), value });
    }

    pub fn named_span(&mut self, tid: u32, name: &[u8], start_ns: u64, end_ns: u64) {
        self.other(Other::Named { tid, name: name.to_vec(), start: start_ns.min(end_ns), end: end_ns });
    }

    pub fn thread(&mut self, tid: u32, pid: u32, comm: Option<Vec<u8>>) {
        if self.owners.len() < MAX_OWNERS || self.owners.contains_key(&tid) {
            self.owners.insert(tid, (pid, comm));
        }
    }

    /// The file of the next dump: FILE, then FILE.2, FILE.3, ...
    fn next_path(&self) -> PathBuf {
        match self.lines.len() + self.failures.len() {
            0 => self.settings.path.clone(),
            n => {
                let mut p = self.settings.path.clone().into_os_string();
                p.push(format!(".{}", n + 1));
                PathBuf::from(p)
            }
        }
    }

    /// Copy `regions`' history (the session's region and its other trust
    /// domains') for the dump `req` asks for (None: one more than the
    /// target may cause). The copy is quick: the hold can go once it is
    /// made, before the file is written.
    pub fn take(&mut self, regions: &[&Region], a: &Artifact, req: &Request) -> Option<Taken> {
        if matches!(req.why, Why::Asked | Why::Crash { .. }) {
            if self.target_dumps >= MAX_TARGET_DUMPS {
                self.refused += 1;
                return None;
            }
            self.target_dumps += 1;
        }
        let mut snap = Snapshot::default();
        for r in regions {
            snapshot(r, a, &mut snap, (self.first_tick(), u64::MAX));
        }
        Some(Taken { req: req.clone(), snap })
    }

    /// No call of the session starts before this tick.
    fn first_tick(&self) -> u64 {
        self.clock.tsc(self.start_ns.saturating_sub(1_000_000_000))
    }

    /// Write a dump [`Flight::take`] copied. Its line is kept for the
    /// summary; a dump asked for while the session runs (SIGUSR2,
    /// `flight_dump()`) is also said at once on `messages`, unless `-w`.
    pub fn dump(&mut self, taken: Taken, a: &Artifact, summary: Summary, messages: &mut dyn std::io::Write) {
        let Taken { req, snap } = taken;
        let req = &req;
        let path = self.next_path();
        match self.write(&path, snap, a, req, summary) {
            Ok(line) => {
                if !self.settings.quiet && matches!(req.why, Why::Signal | Why::Asked) {
                    let _ = writeln!(messages, "{}", crate::text::escape(line.as_bytes()));
                    let _ = messages.flush();
                }
                self.lines.push(line);
            }
            Err(e) => {
                let line = format!("{FLAG}: cannot write `{}`: {e}", path.display());
                let _ = writeln!(messages, "ERROR: {}", crate::text::escape(line.as_bytes()));
                self.failures.push(line);
            }
        }
    }

    fn write(
        &mut self,
        path: &Path,
        mut snap: Snapshot,
        a: &Artifact,
        req: &Request,
        summary: Summary,
    ) -> std::io::Result<String> {
        let cut = req.at_ticks;
        let bounds = (self.first_tick(), cut);
        // The dump is of its instant: calls that started after it are not
        // in it, and those that returned after it were in flight then
        // (open slices, ended there, as those still running now).
        snap.calls.retain(|c| u64::MAX - c.rstart <= cut);
        for c in snap.calls.iter_mut().filter(|c| c.end > cut) {
            c.end = cut;
        }
        // Open calls, ended at the dump, after everything that returned.
        for o in &req.open {
            if a.probes.get(usize::from(o.probe)).is_some_and(|p| p.span) && o.start >= bounds.0 && o.start <= cut {
                snap.calls.push(Kept { tid: o.tid, end: cut, rstart: u64::MAX - o.start, probe: o.probe });
            }
        }
        snap.calls.sort_unstable();
        snap.calls.dedup();
        let open = snap.calls.iter().filter(|c| c.end == cut).count();
        // How far back the history reaches: the oldest call kept, and the
        // least of the threads' (the busiest thread's).
        let mut oldest: HashMap<u32, u64> = HashMap::new();
        for c in &snap.calls {
            let s = u64::MAX - c.rstart;
            let e = oldest.entry(c.tid).or_insert(s);
            *e = (*e).min(s);
        }
        let reach = |start: u64| self.clock.ticks_ns(cut.saturating_sub(start));
        let back = oldest.values().map(|&s| reach(s)).max().unwrap_or(0);
        let busiest = oldest.values().map(|&s| reach(s)).min().unwrap_or(0);

        let cfg = feed::Config {
            path,
            pid: self.settings.pid,
            process: &self.settings.process,
            names: &self.settings.names,
            max_size: self.settings.size,
            quiet: true,
            status: false,
            base_ns: self.start_ns,
        };
        let writer = feed::open::<crate::perfetto::Perfetto>(&cfg)?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut f = feed::Feed::start_now(vec![writer], self.settings.names.len(), dir)?;
        for (&tid, (pid, comm)) in &self.owners {
            f.thread(tid, *pid, comm.clone());
        }
        for o in &req.open {
            if !self.owners.contains_key(&o.tid) {
                f.thread(o.tid, o.pid, crate::os::proc::thread_comm(o.pid as i32, o.tid as i32));
            }
        }
        // The script's own spans merged with the calls by their end.
        let mut named: Vec<(u32, u64, &Other)> = self
            .others
            .iter()
            .filter_map(|o| match o {
                Other::Named { tid, end, .. } if *end <= req.at_ns => Some((*tid, self.clock.tsc(*end), o)),
                _ => None,
            })
            .collect();
        named.sort_by_key(|&(tid, end, _)| (tid, end));
        let mut named = named.into_iter().peekable();
        for c in &snap.calls {
            while let Some(&(tid, end, o)) = named.peek() {
                if (tid, end) > (c.tid, c.end) {
                    break;
                }
                if let Other::Named { tid, name, start, end } = o {
                    f.named_span(*tid, name, *start, *end)?;
                }
                named.next();
            }
            f.span(c.tid, c.probe, u64::MAX - c.rstart, c.end - (u64::MAX - c.rstart))?;
        }
        for (_, _, o) in named {
            if let Other::Named { tid, name, start, end } = o {
                f.named_span(*tid, name, *start, *end)?;
            }
        }
        for o in self.others.iter().filter(|o| o.ts() <= req.at_ns) {
            match o {
                Other::Instant { tid, ts, cat, name, text } => f.instant(*tid, *ts, cat, name, text.as_deref()),
                Other::Counter { ts, name, value } => f.counter(*ts, name, *value),
                Other::Named { .. } => {}
            }
        }
        if let Why::Crash { tid, signal, text, .. } = &req.why {
            // At the end of the calls it ended (their clock, converted as
            // theirs).
            f.instant(*tid, self.clock.ns(cut), "crash", signal.as_bytes(), Some(text.as_bytes()));
        }
        let finished = f.finish(summary)?;
        let report = finished.files.first().cloned().unwrap_or_default();
        let threads = oldest.len();
        let mut line = format!(
            "{FLAG}: {} ({}): {} calls of {threads} thread{}, {open} in flight, the history reaching back {} ({} on \
             the busiest thread), {}, written to {}",
            self.lines.len() + self.failures.len() + 1,
            req.why.said(),
            snap.calls.len(),
            if threads == 1 { "" } else { "s" },
            duration_text(back),
            duration_text(busiest),
            feed::size_text(report.bytes),
            path.display()
        );
        if snap.torn > 0 || snap.bad > 0 {
            line.push_str(&format!(
                " ({} chunks left out, rewritten while read; {} records no probe wrote)",
                snap.torn, snap.bad
            ));
        }
        if report.left_out > 0 {
            line.push_str(&format!("; {} events left out at --flight-size", report.left_out));
        }
        Ok(line)
    }
}

/// "1.234 ms", "2.5 s", "830 ns".
fn duration_text(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumps_are_numbered_from_the_second() {
        let mut f = Flight::new(Settings {
            path: "/x/t.pftrace".into(),
            size: DEFAULT_SIZE,
            at_end: false,
            pid: 1,
            process: "p".into(),
            names: Vec::new(),
            quiet: true,
        });
        assert_eq!(f.next_path(), PathBuf::from("/x/t.pftrace"));
        f.lines.push(String::new());
        assert_eq!(f.next_path(), PathBuf::from("/x/t.pftrace.2"));
        f.failures.push(String::new());
        assert_eq!(f.next_path(), PathBuf::from("/x/t.pftrace.3"));
    }

    #[test]
    fn the_inner_of_two_calls_ending_together_comes_first() {
        let outer = Kept { tid: 1, end: 10, rstart: u64::MAX - 2, probe: 0 };
        let inner = Kept { tid: 1, end: 10, rstart: u64::MAX - 5, probe: 1 };
        let mut v = vec![outer, inner];
        v.sort_unstable();
        assert_eq!(v, vec![inner, outer]);
        assert_eq!(duration_text(1_500_000), "1.5 ms");
    }
}
