//! Running a compiled artifact in the tracer: the shared region, the blob
//! mapped executable, `begin`/`timer`/`end`/`error` probes called on the
//! tracer's own thread with the same code that function probes run in
//! targets, and the consumer thread that turns events into output.
//!
//! Session states follow SystemTap's: begin probes run in order; then timers
//! fire until `exit()`, `-T`, a signal, too many errors (MAXERRORS) or
//! skipped hits (MAXSKIPPED); then `end` probes run — or, when the session
//! ends because of errors, `error` probes instead; then the globals the
//! script wrote and never read are displayed, and the [`summary`]: errors,
//! skipped hits by reason (reentrancy, no thread slot, call depth, counted
//! in the header by compiler/rt/rt.c), calls left by `longjmp` or an
//! exception, dropped events naming `-s`. A session with a target drives it
//! through [`Hooks`] (`target::Armed`): started after the begin probes,
//! polled every 10 ms, stopped at the end.
//!
//! * [`Region`]: the memfd region initialised from the artifact.
//!   `Region::damage` compares what the compiled code trusts to stay in
//!   bounds (the header's layout fields, the ring's geometry, every
//!   array's geometry) with the artifact: checked before each of the
//!   tracer's probes and at the end; damage is said and the session exits 1.
//! * The tracer's probes run in a sandbox process (`os::sandbox`, forked
//!   when the session starts): a fault there, a stall (no MAXACTION
//!   countdown and no consumer progress for [`SANDBOX_STALL`]: a forged
//!   lock or ring tail) or damage found before a run ends them with one
//!   ERROR, and the session goes on to detach and exits 1.
//! * `Consumer`: drains the event ring (the protocol is on
//!   `telco_abi::region::RingHeader`). It takes the ring's place and size
//!   from the artifact, never from the region, keeps its own tail, checks
//!   each record's length and stops at the first bad one with an ERROR
//!   (`Consumer::corrupt`): the target may write anything there. It formats
//!   `printf` events by calling the blob's own `rt_format` with formats from
//!   the artifact, and publishes the ring's tail in steps (1/8 of the ring,
//!   at most 256 KB), not per record: each store takes the cache line away
//!   from the producers. With `--chrome` or `--perfetto` it feeds the trace
//!   writer (`crate::feed`).

use crate::os::sandbox::Sandbox;
use crate::os::sys::{self, ExecMemory, SharedMemory, Signals};
use crate::render;
use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use telco_abi::artifact::{Artifact, Attach};
use telco_abi::region::{self as abi, EventHeader, Header};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot create the shared region ({size} bytes): {source}")]
    Region { size: u64, source: std::io::Error },
    #[error("cannot map the compiled code: {0}")]
    Code(std::io::Error),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("writing the output failed: {0}")]
    Output(std::io::Error),
    #[error("internal error: the compiled artifact is inconsistent: {0}")]
    BadArtifact(String),
}

pub struct Config {
    /// `-T SECONDS`.
    pub timeout: Option<Duration>,
    /// Where printf output goes (stdout or `-o FILE`).
    pub output: Box<dyn Write + Send>,
    /// Where ERROR and WARNING lines go.
    pub messages: Box<dyn Write + Send>,
    /// `--chrome FILE`, `--perfetto FILE`: calls, printf lines,
    /// trace_instant/trace_counter.
    pub traces: Option<crate::feed::Feed>,
    /// `-w`: no WARNING lines, except those that say the output is
    /// incomplete (errors, skipped probes, dropped events, return probes
    /// that did not run).
    pub suppress_warnings: bool,
    /// `--folded`, `--flamegraph`, `--speedscope`, `--pprof`: where the
    /// `timer.profile` samples go (besides the script's handlers).
    pub profile: Option<Box<dyn crate::profile::Sink>>,
}

/// How the session went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub errors: u64,
    pub skipped: u64,
    /// `skipped` by reason: reentrancy, no thread slot, call depth.
    pub skipped_busy: u64,
    pub skipped_noslot: u64,
    pub skipped_deep: u64,
    /// The session ended because more than MAXSKIPPED probes were skipped.
    pub too_many_skipped: bool,
    pub dropped: u64,
    /// Calls left by longjmp or an exception (`Header::unreturned`).
    pub unreturned: u64,
    /// Execs the tracer did not answer in time (`Header::unfollowed_execs`).
    pub unfollowed_execs: u64,
    /// What `--chrome` and `--perfetto` wrote.
    pub traces: Option<crate::feed::Finished>,
    /// The target corrupted the event ring (said when found; the session
    /// fails).
    pub corrupted: Option<String>,
    /// `timer.profile`: what the sampler counted.
    pub profile: Option<crate::profile::Summary>,
}

/// The end-of-session WARNING (and ERROR) lines: what the output lacks and
/// why, each naming the option that changes it.
pub fn summary(o: &Outcome, a: &Artifact) -> Vec<String> {
    let mut v = Vec::new();
    if o.too_many_skipped {
        v.push(format!(
            "ERROR: Skipped too many probes ({} > MAXSKIPPED={}): the session ended early; \
             -D MAXSKIPPED=N allows more",
            o.skipped, a.limits.maxskipped
        ));
    }
    if o.errors > 0 || o.skipped > 0 {
        v.push(format!("WARNING: Number of errors: {}, skipped probes: {}", o.errors, o.skipped));
    }
    if o.skipped_busy > 0 {
        v.push(format!(
            "WARNING: Skipped due to reentrancy: {} (a probed function reached while a handler ran on the \
             same thread, e.g. from a signal handler)",
            o.skipped_busy
        ));
    }
    if o.skipped_noslot > 0 {
        v.push(format!(
            "WARNING: Skipped due to too many threads: {} (the first {} threads of the traced processes, all together, get probe state)",
            o.skipped_noslot, a.nthreads
        ));
    }
    if o.skipped_deep > 0 {
        v.push(format!(
            "WARNING: Skipped due to call depth: {} (return probes on calls nested more than {} deep in one thread: \
             -D MAXRETURNDEPTH=N for more)",
            o.skipped_deep, a.shadow_depth
        ));
    }
    if o.unfollowed_execs > 0 {
        v.push(format!(
            "WARNING: {} program(s) the target exec'd ran without probes: the tracer did not answer their exec in 10 s",
            o.unfollowed_execs
        ));
    }
    if o.unreturned > 0 {
        v.push(format!(
            "WARNING: {} call(s) left by longjmp or an exception: their return probes did not run",
            o.unreturned
        ));
    }
    if let Some(p) = &o.profile {
        if p.lost > 0 {
            v.push(format!(
                "WARNING: {} sample(s) of timer.profile were lost: the tracer did not drain the kernel's buffer in time",
                p.lost
            ));
        }
        if p.samples > 0 && p.truncated * 10 > p.samples {
            v.push(format!(
                "WARNING: {} of {} sampled stack(s) could not be unwound to their root (no unwind information, or \
                 deeper than the {} KiB of stack each sample copies)",
                p.truncated,
                p.samples,
                crate::profile::STACK_BYTES / 1024
            ));
        }
        if p.malformed > 0 {
            v.push(format!("WARNING: {} sample record(s) did not parse and were skipped", p.malformed));
        }
    }
    if o.dropped > 0 {
        let mb = (a.ring_size >> 20).max(1);
        v.push(format!(
            "WARNING: {} event(s) were dropped because the event ring ({mb} MB) was full: \
             a larger ring (-s {}) keeps up with more",
            o.dropped,
            (mb * 4).min(4096)
        ));
    }
    v
}

/// The header fields the tracer sets once and the compiled code trusts
/// (offsets and sizes of the region's parts, the clock's calibration).
fn layout_fields(h: &Header) -> [u64; 20] {
    [
        h.region_size,
        h.ring_off,
        u64::from(h.nthreads),
        u64::from(h.maxstringlen),
        h.probes_off,
        h.indent_off,
        h.row_owners_off,
        u64::from(h.frame_size),
        u64::from(h.shadow_depth),
        h.shards_off,
        u64::from(h.nshards),
        h.itrace_off,
        h.spans_off,
        u64::from(h.span_batch),
        u64::from(h.span_stride),
        h.tsc_base,
        h.ns_base,
        h.tsc_mult,
        u64::from(h.tsc_shift),
        u64::from(h.maxerrors),
    ]
}

/// The shared region, set up from an artifact.
pub struct Region {
    mem: SharedMemory,
    /// The trusted mirror (`telco_abi::region::MIRROR_GAP` below `mem`):
    /// the region's constants, which only this mapping writes; target-side
    /// code takes every address and bound from it.
    mirror: SharedMemory,
    /// The header as the tracer wrote it: its layout fields never change.
    written: Header,
}

impl Region {
    /// The region's memfd in this process (`SharedMemory::fd`).
    pub fn fd(&self) -> i32 {
        self.mem.fd()
    }

    pub fn new(a: &Artifact, pid: u64, execname: &str) -> Result<Region, RunError> {
        let size = a.region_size as usize;
        let err = |source| RunError::Region { size: a.region_size, source };
        let (mem, mirror) = SharedMemory::mirrored(
            SharedMemory::new_fd(size).map_err(err)?,
            SharedMemory::new_mirror_fd(size).map_err(err)?,
            size,
        )
        .map_err(err)?;
        Region::init(mem, mirror, a, pid, execname)
    }

    /// Set up a region in `mem` (at least `a.region_size` bytes) and its
    /// trusted mirror `mirror` (as long, `MIRROR_GAP` below it) for the
    /// process `pid`: the artifact's initial contents, then the header,
    /// in both.
    pub fn init(
        mem: SharedMemory,
        mirror: SharedMemory,
        a: &Artifact,
        pid: u64,
        execname: &str,
    ) -> Result<Region, RunError> {
        if (mem.len() as u64) < a.region_size || mirror.len() != mem.len() {
            return Err(RunError::BadArtifact("the mapping is smaller than the region".into()));
        }
        if mem.as_ptr() as u64 - mirror.as_ptr() as u64 != abi::MIRROR_GAP {
            return Err(RunError::BadArtifact("the region's mirror is not where the code looks for it".into()));
        }
        for base in [mem.as_ptr(), mirror.as_ptr()] {
            for (off, bytes) in &a.init {
                let end = *off as usize + bytes.len();
                if end > mem.len() {
                    return Err(RunError::BadArtifact(format!("initial data at {off:#x} ends past the region")));
                }
                // SAFETY: in bounds (checked above); nothing else uses the region yet.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(*off as usize), bytes.len()) };
            }
        }
        let clock = sys::clock();
        // The process's own ids: the tracer's for its own region, the
        // target's otherwise.
        let (uid, ppid) = if pid == u64::from(std::process::id()) {
            (sys::getuid(), sys::getppid())
        } else {
            crate::os::proc::uid_and_parent(pid as u32).unwrap_or((0, 0))
        };
        let mut name = [0u8; 16];
        let n = execname.len().min(15);
        name[..n].copy_from_slice(&execname.as_bytes()[..n]);
        let h = Header {
            magic: abi::MAGIC,
            version: abi::VERSION,
            header_size: abi::HEADER_SIZE as u32,
            region_size: a.region_size,
            enabled: 1,
            exit_requested: 0,
            errors: 0,
            skipped: 0,
            dropped: 0,
            pid,
            tsc_base: clock.tsc_base,
            ns_base: clock.ns_base,
            tsc_mult: clock.mult,
            tsc_shift: clock.shift,
            maxstringlen: a.limits.maxstringlen,
            ring_off: a.ring_off,
            nthreads: a.nthreads,
            uid,
            ppid,
            probes_off: a.probes_off,
            indent_off: a.indent_off,
            row_owners_off: a.row_owners_off,
            execname: name,
            frame_size: a.frame_size,
            shadow_depth: a.shadow_depth,
            dl_gen: 0,
            dl_ack: 0,
            dl_wait: 0,
            tcb_tid_off: 0,
            shards_off: a.shards_off,
            nshards: a.nshards,
            maxerrors: a.limits.maxerrors.min(u64::from(u32::MAX)) as u32,
            itrace_off: a.itrace_off,
            itrace_slots: a.itrace_slots,
            rows_next: 0,
            itrace_missed: 0,
            spans_off: a.spans_off,
            span_batch: a.span_batch,
            span_stride: a.span_stride,
            threads_at: 0,
            span_min_ticks: clock.ns_ticks(a.span_min_ns),
            unreturned: 0,
            skipped_busy: 0,
            skipped_noslot: 0,
            skipped_deep: 0,
            // A session's own region serves the tracer: no target.
            target: if pid == u64::from(std::process::id()) { 0 } else { pid },
            exec_req: 0,
            exec_ack: 0,
            unfollowed_execs: 0,
            tracer: u64::from(std::process::id()),
            crash_who: 0,
            crash_req: 0,
            crash_ack: 0,
            crash_sig: 0,
            crash_code: 0,
            crash_addr: 0,
            crash_pc: 0,
            crash_sp: 0,
            crash_in_probe: 0,
            itrace_bell: 0,
            _reserved: [0; 6],
        };
        for base in [mem.as_ptr(), mirror.as_ptr()] {
            // SAFETY: the header is at offset 0 of a region at least HEADER_SIZE long.
            unsafe { std::ptr::write(base.cast::<Header>(), h) };
        }
        Ok(Region { mem, mirror, written: h })
    }

    pub fn base(&self) -> *mut u8 {
        self.mem.as_ptr()
    }

    /// The trusted mirror's base (`MIRROR_GAP` below [`Region::base`]):
    /// where the tracer writes what target-side code takes addresses and
    /// bounds from (the thread slots' address, the symbol table).
    pub fn trusted(&self) -> *mut u8 {
        self.mirror.as_ptr()
    }

    /// The mirror's memfd in this process, for a process that execs to
    /// map it read-only (`inject::map_region_at`).
    pub fn mirror_fd(&self) -> i32 {
        self.mirror.fd()
    }

    /// Store `v` at header field `field` of the region and of its mirror
    /// (Release: handlers that load it with Acquire see what it covers).
    pub fn set_header_u64(&self, field: usize, v: u64) {
        use std::sync::atomic::{AtomicU64, Ordering};
        for base in [self.base(), self.trusted()] {
            // SAFETY: a u64 field of the header, 8-aligned, in both mappings.
            unsafe { AtomicU64::from_ptr(base.add(field).cast()) }.store(v, Ordering::Release);
        }
    }

    /// [`Region::set_header_u64`] for a u32 field.
    pub fn set_header_u32(&self, field: usize, v: u32) {
        use std::sync::atomic::{AtomicU32, Ordering};
        for base in [self.base(), self.trusted()] {
            // SAFETY: a u32 field of the header, 4-aligned, in both mappings.
            unsafe { AtomicU32::from_ptr(base.add(field).cast()) }.store(v, Ordering::Release);
        }
    }

    /// Which of the header's fixed fields (set once by the tracer) no
    /// longer hold what it wrote, if any.
    fn header_damage(&self) -> Option<&'static str> {
        // SAFETY: the header is at offset 0 of a region at least
        // HEADER_SIZE long; a copy of plain integers, whatever their bytes.
        let h: Header = unsafe { std::ptr::read_volatile(self.base().cast::<Header>()) };
        if h.magic != abi::MAGIC {
            Some("its magic")
        } else if h.version != abi::VERSION || h.header_size != abi::HEADER_SIZE as u32 {
            Some("its version")
        } else if layout_fields(&h) != layout_fields(&self.written) {
            Some("its layout")
        } else {
            None
        }
    }

    /// What the target overwrote of the parts of the region whose
    /// contents never change once set (the header's layout, the ring's
    /// geometry, every array's geometry), said as an ERROR line's text; the
    /// compiled code trusts those parts to stay in bounds. None when all
    /// hold.
    pub fn damage(&self, a: &Artifact) -> Option<String> {
        if let Some(what) = self.header_damage() {
            return Some(format!(
                "the target overwrote the shared region's header ({what}): its counts and totals are not to be trusted"
            ));
        }
        let size = a.region_size as usize;
        // SAFETY: the region is mapped for at least region_size bytes (and
        // sealed against shrinking); the bytes may change while read,
        // which a comparison tolerates.
        let bytes = unsafe { std::slice::from_raw_parts(self.base(), size) };
        let differs = |off: u64, len: usize| match (
            a.init_at(off).and_then(|b| b.get(..len)),
            bytes.get(off as usize..off as usize + len),
        ) {
            (Some(want), Some(have)) => want != have,
            _ => false,
        };
        let ring_fixed = a.ring_off + core::mem::offset_of!(abi::RingHeader, size) as u64;
        if differs(ring_fixed, 16) {
            return Some(format!(
                "the target overwrote the event ring's geometry (region offset {ring_fixed:#x}): the events from \
                 there on are not to be trusted"
            ));
        }
        use abi::TableHeader as T;
        let geometry = [
            (core::mem::offset_of!(T, nkeys), core::mem::offset_of!(T, count)),
            (core::mem::offset_of!(T, stat_desc), core::mem::offset_of!(T, _pad2)),
        ];
        for (name, off) in &a.tables {
            if geometry.iter().any(|&(from, to)| differs(off + from as u64, to - from)) {
                return Some(format!(
                    "the target overwrote the header of array {name} (region offset {off:#x}): its contents are not \
                     to be trusted"
                ));
            }
            let stolen =
                (*off as usize).checked_add(core::mem::offset_of!(T, stolen)).and_then(|at| bytes.get(at..at + 4));
            let stolen = stolen.map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])));
            if stolen != 0 {
                return Some(format!(
                    "the target corrupted the lock of array {name} (region offset {off:#x}): it held it for ever, and \
                     {stolen} waits for it went on without it; its contents are not to be trusted"
                ));
            }
        }
        None
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is an 8-aligned field inside the region (header or
        // ring header), which lives as long as self.
        unsafe { AtomicU64::from_ptr(self.base().add(off).cast()) }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as u64_at, for a 4-aligned field.
        unsafe { AtomicU32::from_ptr(self.base().add(off).cast()) }
    }

    pub fn counter(&self, field: usize) -> u64 {
        self.u64_at(field).load(Ordering::Relaxed)
    }

    pub fn exit_requested(&self) -> bool {
        self.u32_at(core::mem::offset_of!(Header, exit_requested)).load(Ordering::Relaxed) != 0
    }

    pub fn set_enabled(&self, on: bool) {
        // Release: pairs with the handlers' load of `enabled` at entry.
        self.u32_at(core::mem::offset_of!(Header, enabled)).store(u32::from(on), Ordering::Release);
    }
}

/// Formats events: printf through the blob's own formatter, histograms,
/// errors and warnings.
struct Consumer<'a> {
    artifact: &'a Artifact,
    region: &'a Region,
    format: FormatFn,
    out: std::io::BufWriter<Box<dyn Write + Send>>,
    messages: Box<dyn Write + Send>,
    warned: HashSet<Vec<u8>>,
    buf: Vec<u8>,
    traces: Option<crate::feed::Feed>,
    /// `-w`: the script's `warn()` messages are not printed.
    suppress_warnings: bool,
    /// The ring's next record: the consumer's own count (the ring header
    /// is the target's to scribble on).
    tail: u64,
    /// The target corrupted the ring: what was found (no more records are
    /// read).
    corrupted: Option<String>,
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn read_i64(b: &[u8], at: usize) -> i64 {
    b.get(at..at + 8).map_or(0, |s| i64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]))
}

/// A `u32` length and bytes, padded to 8: (bytes, size in the payload).
fn read_str(b: &[u8], at: usize) -> (&[u8], usize) {
    let n = read_u32(b, at) as usize;
    let s = b.get(at + 4..at + 4 + n).unwrap_or(&[]);
    (s, (4 + n).next_multiple_of(8))
}

/// `n` [`abi::SpanEntry`]s (an `EV_SPANS` payload, or a thread's stage).
fn spans(c: &mut crate::feed::Feed, b: &[u8], n: usize) -> Result<(), std::io::Error> {
    c.spans(&b[..(n * abi::SPAN_ENTRY_SIZE).min(b.len())])
}

impl<'a> Consumer<'a> {
    /// The session is over: the calls still staged in the threads' span
    /// stages (fewer than a batch each) go to the trace, and the stages
    /// are emptied. A thread inside `rt_span` at this very moment (a
    /// target that runs on after detach) may add its last call after
    /// this: that call is not in the trace.
    fn take_stages(&mut self) -> Result<(), std::io::Error> {
        let a = self.artifact;
        let Some(c) = &mut self.traces else { return Ok(()) };
        if a.span_batch == 0 {
            return Ok(());
        }
        for i in 0..a.nthreads as usize {
            let st = a.spans_off as usize + i * a.span_stride as usize;
            // Acquire: the entries before the count that covers them.
            let n = (self.region.u32_at(st).load(Ordering::Acquire) as usize).min(a.span_batch as usize);
            if n == 0 {
                continue;
            }
            // SAFETY: the stage lies in the region (layout.rs).
            let b = unsafe {
                std::slice::from_raw_parts(
                    self.region.base().add(st + abi::SPAN_STAGE_HEADER),
                    n * abi::SPAN_ENTRY_SIZE,
                )
            };
            spans(c, b, n)?;
            self.region.u32_at(st).store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Process every committed record; returns whether there was any.
    fn drain(&mut self) -> Result<bool, std::io::Error> {
        if self.corrupted.is_some() {
            return Ok(false);
        }
        let ring = self.artifact.ring_off as usize;
        let base = self.region.base();
        let tail_at = ring + core::mem::offset_of!(abi::RingHeader, tail);
        // Where the ring is and how large: the artifact's word, never the
        // region's (which the target can overwrite).
        let size = self.artifact.ring_size;
        let data_off = (ring + core::mem::size_of::<abi::RingHeader>()).next_multiple_of(abi::PART_ALIGN as usize);
        if !size.is_power_of_two() || data_off as u64 + size > self.artifact.region_size {
            self.corrupt("the artifact's ring does not fit its region (an internal error: please report it)".into())?;
            return Ok(false);
        }
        let mut any = false;
        // The tail is published in steps, not per record: every store
        // takes its cache line away from the producers, whose next
        // reservation then misses on it.
        let step = (size / 8).min(256 << 10);
        let mut tail = self.tail;
        let mut published = tail;
        loop {
            let pos = (tail & (size - 1)) as usize;
            let off = data_off + pos;
            // Acquire: pairs with the producer's Release store of the
            // committed size word.
            let word = self.region.u32_at(off).load(Ordering::Acquire);
            if word & abi::COMMITTED == 0 {
                break;
            }
            let len = (word & !abi::COMMITTED) as usize;
            // A record is whole, 8-aligned, holds its header and never
            // wraps; anything else is the target's doing. The padding to
            // the end of the data area is the exception: as short as 8
            // bytes (its size and kind).
            let fits = len >= 8 && len.is_multiple_of(8) && pos + len <= size as usize;
            // SAFETY: with `fits`, the record's first 8 bytes (size, kind)
            // lie inside the data area.
            let kind = if fits { unsafe { std::ptr::read_unaligned(base.add(off + 4).cast::<u16>()) } } else { 0 };
            let pad = kind == abi::EV_PAD;
            if !fits || (len < abi::EVENT_HEADER_SIZE && !(pad && pos + len == size as usize)) {
                self.corrupt(format!(
                    "the target corrupted the event ring: a record of {len} bytes at region offset {off:#x}; the \
                     events from there on are discarded"
                ))?;
                break;
            }
            if !pad {
                // SAFETY: a committed record of `len` bytes lies inside the
                // data area (producers never wrap a record); we own it until
                // we advance the tail.
                let rec = unsafe { std::slice::from_raw_parts(base.add(off), len) };
                // SAFETY: every record but padding starts with an
                // EventHeader (len holds one, checked above).
                let h: EventHeader = unsafe { std::ptr::read_unaligned(rec.as_ptr().cast()) };
                if h.kind == abi::EV_SPANS {
                    // The bulk of a --chrome trace: no copy of the record.
                    if let Some(c) = &mut self.traces {
                        spans(c, rec.get(abi::EVENT_HEADER_SIZE..).unwrap_or(&[]), h.aux as usize)?;
                    }
                } else if h.kind == abi::EV_SPAN {
                    if let Some(c) = &mut self.traces {
                        c.span(h.tid, h.probe, h.ts, read_i64(rec, abi::EVENT_HEADER_SIZE).max(0) as u64)?;
                    }
                } else {
                    let payload = rec.get(abi::EVENT_HEADER_SIZE..).unwrap_or(&[]).to_vec();
                    self.event(&h, &payload)?;
                    if self.corrupted.is_some() {
                        break;
                    }
                }
            }
            // SAFETY: zero the consumed record so the next producer finds a
            // zero first word (see RingHeader).
            unsafe { std::ptr::write_bytes(base.add(off), 0, len) };
            tail += len as u64;
            if tail - published >= step {
                // Release: pairs with the producers' Acquire load of tail.
                self.region.u64_at(tail_at).store(tail, Ordering::Release);
                published = tail;
            }
            any = true;
        }
        self.tail = tail;
        if tail != published {
            self.region.u64_at(tail_at).store(tail, Ordering::Release);
        }
        if any {
            self.out.flush()?;
            if let Some(c) = &mut self.traces {
                c.flush()?;
            }
        }
        Ok(any)
    }

    /// Say once that the target corrupted what the consumer reads, and
    /// read no more of it.
    fn corrupt(&mut self, what: String) -> Result<(), std::io::Error> {
        if self.corrupted.is_none() {
            self.out.flush()?;
            writeln!(self.messages, "ERROR: {}", crate::text::escape(what.as_bytes()))?;
            self.corrupted = Some(what);
        }
        Ok(())
    }

    fn event(&mut self, h: &EventHeader, p: &[u8]) -> Result<(), std::io::Error> {
        match h.kind {
            abi::EV_PRINTF => {
                let n = self.printf(h.aux as usize, p)?;
                if self.corrupted.is_some() {
                    return Ok(());
                }
                if let Some(c) = &mut self.traces {
                    // One instant per printf, named by its first line.
                    let text = &self.buf[..n];
                    let name = text.split(|&b| b == b'\n').find(|l| !l.is_empty()).unwrap_or(b"");
                    let name = &name[..name.len().min(80)];
                    c.instant(h.tid, h.ts, "printf", name, Some(text));
                }
                Ok(())
            }
            abi::EV_INSTANT => {
                if let Some(c) = &mut self.traces {
                    c.instant(h.tid, h.ts, "instant", read_str(p, 0).0, None);
                }
                Ok(())
            }
            abi::EV_NAMED_SPAN => {
                if let Some(c) = &mut self.traces {
                    c.named_span(h.tid, read_str(p, 8).0, read_i64(p, 0).max(0) as u64, h.ts)?;
                }
                Ok(())
            }
            abi::EV_COUNTER => {
                if let Some(c) = &mut self.traces {
                    c.counter(h.ts, read_str(p, 8).0, read_i64(p, 0));
                }
                Ok(())
            }
            abi::EV_ERROR => {
                let code = read_u32(p, 0);
                let (msg, _) = read_str(p, 4);
                let msg = if msg.is_empty() { abi::error_message(code).as_bytes().to_vec() } else { msg.to_vec() };
                // The message is the target's to write (the ring is
                // untrusted): escaped for the terminal, as every line of
                // the tracer's own (`text`).
                let mut line = b"ERROR: ".to_vec();
                line.extend_from_slice(&msg);
                if let Some(l) = self.artifact.locations.get(h.aux as usize) {
                    line.extend_from_slice(format!(" near {}:{}:{}", l.file, l.line, l.col).as_bytes());
                }
                let mut line = crate::text::escape(&line).into_owned().into_bytes();
                line.push(b'\n');
                self.out.flush()?;
                self.messages.write_all(&line)?;
                self.messages.flush()
            }
            abi::EV_WARN => {
                let (msg, _) = read_str(p, 0);
                // Like staprun: an identical warning is printed once (and
                // none with -w).
                // (Remembered up to 10,000 distinct ones: memory stays
                // bounded whatever the target sends.)
                let new = if self.warned.len() < 10_000 {
                    self.warned.insert(msg.to_vec())
                } else {
                    !self.warned.contains(msg)
                };
                if !self.suppress_warnings && new {
                    let mut line = b"WARNING: ".to_vec();
                    line.extend_from_slice(msg.strip_suffix(b"\n").unwrap_or(msg));
                    let mut line = crate::text::escape(&line).into_owned().into_bytes();
                    line.push(b'\n');
                    self.out.flush()?;
                    self.messages.write_all(&line)?;
                    self.messages.flush()?;
                }
                Ok(())
            }
            abi::EV_HIST => {
                let lo = read_i64(p, 8);
                let step = read_i64(p, 24);
                let nb = read_u32(p, 32) as usize;
                let at = core::mem::size_of::<abi::HistEvent>();
                // A log histogram has its fixed buckets, a linear one at
                // least 3 (under, one step, over); all of them in the record.
                let sound = match h.aux {
                    abi::HIST_LOG => nb == abi::HIST_LOG_BUCKETS as usize,
                    abi::HIST_LINEAR => nb >= 3 && step > 0,
                    _ => false,
                };
                if !sound || at + 8 * nb > p.len() {
                    return self.corrupt(format!(
                        "the target corrupted the event ring: a histogram of kind {} with {nb} buckets in a record of {} \
                         bytes; the events from there on are discarded",
                        h.aux,
                        p.len() + abi::EVENT_HEADER_SIZE
                    ));
                }
                let counts: Vec<i64> = (0..nb).map(|i| read_i64(p, at + 8 * i)).collect();
                self.out.write_all(render::histogram(h.aux, lo, step, &counts).as_bytes())
            }
            // Exit is seen through the header.
            abi::EV_EXIT => Ok(()),
            // No producer writes any other kind: the target forged it.
            kind => self.corrupt(format!(
                "the target corrupted the event ring: a record of unknown kind {kind}; the events from there on are \
                 discarded"
            )),
        }
    }

    /// Format a printf event into `buf` and write it out; its length.
    fn printf(&mut self, id: usize, p: &[u8]) -> Result<usize, std::io::Error> {
        let (Some(&fmt_off), Some(kinds)) = (self.artifact.formats.get(id), self.artifact.format_args.get(id)) else {
            self.corrupt(format!(
                "the target corrupted the event ring: a printf of format {id}, of which the script has {}; the events \
                 from there on are discarded",
                self.artifact.formats.len()
            ))?;
            return Ok(0);
        };
        let mut strings: Vec<Vec<u8>> = Vec::new();
        let mut at = 0;
        let mut raw: Vec<(bool, i64)> = Vec::new();
        for &is_str in kinds {
            if is_str {
                let (s, n) = read_str(p, at);
                let mut v = s.to_vec();
                v.push(0);
                strings.push(v);
                raw.push((true, strings.len() as i64 - 1));
                at += n;
            } else {
                raw.push((false, read_i64(p, at)));
                at += 8;
            }
        }
        let args: Vec<i64> =
            raw.iter().map(|&(s, v)| if s { strings[v as usize].as_ptr() as i64 } else { v }).collect();
        // Room for the longest possible result: every conversion at most
        // two widths/precisions of 4096 plus a string or a 64-bit number.
        let cap = 64 + p.len() + 16 * 1024 * (kinds.len() + 1) + self.fmt_len(fmt_off);
        self.buf.resize(cap, 0);
        // The format as the artifact encoded it, not the region's copy
        // (which the target can overwrite).
        let Some(fmt) = self.artifact.init_at(fmt_off).map(<[u8]>::as_ptr) else {
            return Ok(0);
        };
        // SAFETY: `fmt` is an encoded format in the artifact's own bytes
        // (well formed: pass 3 wrote it, and it ends inside them), args
        // point at NUL-terminated strings that outlive the call, and buf
        // has cap bytes. rt_format never writes past cap.
        let n = (self.format)(self.buf.as_mut_ptr(), cap as i64, fmt, args.as_ptr(), args.len() as i64);
        let n = (n.max(0) as usize).min(cap);
        self.out.write_all(&self.buf[..n])?;
        Ok(n)
    }

    /// Length of an encoded format's text, for sizing the output buffer.
    fn fmt_len(&self, off: u64) -> usize {
        self.artifact.init_at(off).map_or(0, |b| b.len().min(1 << 20))
    }
}

/// Format every pending event of `region` into text (stdout and stderr
/// lines together), with `code` a local copy of the artifact's blob (for
/// `rt_format`). For tests and tools; sessions use a consumer thread.
pub fn drain_text(artifact: &Artifact, region: &Region, code: &ExecMemory) -> Result<String, std::io::Error> {
    let buf = SharedBuf::default();
    let mut c = Consumer {
        artifact,
        region,
        // SAFETY: format_fn is rt_format's offset in the blob.
        format: unsafe { std::mem::transmute::<*const u8, FormatFn>(code.addr(artifact.format_fn)) },
        out: std::io::BufWriter::new(Box::new(buf.clone())),
        messages: Box::new(buf.clone()),
        warned: HashSet::new(),
        buf: Vec::new(),
        traces: None,
        suppress_warnings: false,
        tail: region
            .u64_at(artifact.ring_off as usize + core::mem::offset_of!(abi::RingHeader, tail))
            .load(Ordering::Relaxed),
        corrupted: None,
    };
    c.drain()?;
    c.out.flush()?;
    drop(c);
    let v = buf.0.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(String::from_utf8_lossy(&v).into_owned())
}

type Handler = extern "C" fn(*mut u8, *mut u8);

/// How a session with a target process drives it.
pub trait Hooks {
    /// After the begin probes: let the target run.
    fn started(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Whether the target is gone (it exited).
    fn gone(&mut self) -> bool {
        false
    }
    /// Whether `gone` must be polled.
    fn watching(&self) -> bool {
        false
    }
    /// Called about every 10 ms while the session runs (new libraries).
    fn poll(&mut self) {}
    /// Before the end probes: take the probes out of the target.
    fn stopping(&mut self) {}
    /// The code the session wrote into the target, for unwinding samples
    /// taken in it.
    fn own_code(&self) -> Option<crate::owncode::Shared> {
        None
    }
    /// A descriptor that becomes readable when `poll` has work at once (a
    /// thread waits in the loader for the tracer), besides the 10 ms polls.
    fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

/// A session without a target.
pub struct NoTarget;

impl Hooks for NoTarget {}
/// What the consumer thread hands back: the output, the message stream,
/// and what `--chrome` and `--perfetto` wrote.
type Drained = (Box<dyn Write + Send>, Box<dyn Write + Send>, Option<crate::feed::Finished>, Option<String>);
type FormatFn = extern "C" fn(*mut u8, i64, *const u8, *const i64, i64) -> i64;

/// A writer into shared memory of the process, for [`Local::drain_text`].
#[derive(Clone, Default)]
struct SharedBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(b);
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The tracer-side part of a session.
pub struct Local<'a> {
    artifact: &'a Artifact,
    region: Region,
    code: ExecMemory,
}

impl<'a> Local<'a> {
    pub fn new(artifact: &'a Artifact) -> Result<Local<'a>, RunError> {
        let pid = std::process::id() as u64;
        let region = Region::new(artifact, pid, "telco-stap")?;
        Local::with_region(artifact, region)
    }

    /// Run begin/end/timer probes against a region that serves a target
    /// (created by `inject::region`).
    pub fn with_region(artifact: &'a Artifact, region: Region) -> Result<Local<'a>, RunError> {
        let code = ExecMemory::new(&artifact.code).map_err(RunError::Code)?;
        Ok(Local { artifact, region, code })
    }
}

/// Call probe `probe`'s handler on this thread with `ctx` (zeroed here),
/// as process `pid`, thread `tid`.
fn call(artifact: &Artifact, region: &Region, code: &ExecMemory, ctx: &mut [u64], probe: usize, pid: u64, tid: u64) {
    call_with(artifact, region, code, ctx, probe, pid, tid, None)
}

/// Words of the sandbox's page after the context: a `timer.profile`
/// sample's thread id, then its [`abi::Sample`].
const SAMPLE_WORDS: usize = 1 + core::mem::size_of::<abi::Sample>() / 8;

/// [`call`], for a `timer.profile` handler with `sample` (the sampled
/// thread's id and [`abi::Sample`], as [`Runner::run_sample`] wrote them).
#[allow(clippy::too_many_arguments)]
fn call_with(
    artifact: &Artifact,
    region: &Region,
    code: &ExecMemory,
    ctx: &mut [u64],
    probe: usize,
    pid: u64,
    tid: u64,
    sample: Option<&mut [u64]>,
) {
    let Some(p) = artifact.probes.get(probe) else { return };
    if ctx.len() * 8 < core::mem::size_of::<abi::Ctx>() {
        return;
    }
    let sample = sample.filter(|s| s.len() >= SAMPLE_WORDS && matches!(p.attach, Attach::Profile { .. }));
    let interruptible = matches!(p.attach, Attach::Begin { .. } | Attach::End { .. } | Attach::Error { .. });
    ctx.iter_mut().for_each(|w| *w = 0);
    // A sample: its thread, registers (pc: `uaddr()`) and unwound frames.
    let (regs, tid, addr, sampled) = match sample {
        Some(s) => {
            let t = s[0];
            let regs = s[1..].as_mut_ptr();
            (regs as u64, t, s[1 + telco_abi::arch::native::PC], abi::CTX_SAMPLE)
        }
        None => (0, tid, 0, 0),
    };
    let c = abi::Ctx {
        regs,
        probe: probe as u32,
        flags: abi::CTX_MAY_WAIT | sampled | if interruptible { abi::CTX_INTERRUPTIBLE } else { 0 },
        actions: 0,
        nesting: 0,
        error: 0,
        error_loc: 0,
        _pad: 0,
        tid,
        pid,
        tok_pos: 0,
        addr,
        entry: 0,
        slot: 0,
    };
    // SAFETY: ctx has at least CTX_SIZE bytes (checked), 8-aligned.
    unsafe { std::ptr::write(ctx.as_mut_ptr().cast::<abi::Ctx>(), c) };
    // SAFETY: the artifact's handler offsets point at functions with
    // this signature inside the mapped blob; they read the region and
    // the context, both live for the call.
    let f: Handler = unsafe { std::mem::transmute(code.addr(p.handler)) };
    f(region.base(), ctx.as_mut_ptr().cast());
}

/// How long a tracer-side handler may run without progress (its MAXACTION
/// countdown unchanged, the consumer idle) before the sandbox is killed: a
/// lock or ring tail the target forged would make it spin forever. One
/// statement can take long on its own (sorting a huge array for
/// `foreach`): [`stall_limit`] adds a microsecond per array entry.
pub const SANDBOX_STALL: Duration = Duration::from_secs(5);

/// [`SANDBOX_STALL`] plus 1 µs for each entry the script's arrays can hold.
pub fn stall_limit(a: &Artifact) -> Duration {
    let at = core::mem::offset_of!(abi::TableHeader, capacity) as u64;
    let entries: u64 = a.tables.iter().filter_map(|(_, off)| a.init_u32(off + at)).map(u64::from).sum();
    SANDBOX_STALL + Duration::from_micros(entries)
}

/// What to say when the sandbox that runs the tracer's probes failed
/// while running `probe`.
fn sandbox_failure(artifact: &Artifact, probe: usize, f: &crate::os::sandbox::Failure) -> String {
    use crate::os::sandbox::Failure;
    let name = artifact.probes.get(probe).map_or("?", |p| p.name.as_str());
    let why = match f {
        Failure::Signal(libc::SIGKILL) => "something outside the session killed it (the out-of-memory killer?)",
        Failure::Signal(libc::SIGSYS) => {
            "it made a system call its filter forbids: the shared region it works on is damaged (the target can \
             write to it)"
        }
        Failure::Signal(_) => "the shared region it works on is damaged (the target can write to it)",
        Failure::Stalled(_) => {
            "a lock, a table or the event ring in the shared region is held or damaged (the target can write to it)"
        }
        Failure::Exited(_) | Failure::Io(_) => "it could not run the tracer's probes",
    };
    format!("the sandbox running probe {name} {f}: {why}; the tracer's probes no longer run and the session ends here")
}

/// The sandbox and what the session watches while a handler runs there.
struct Runner<'x> {
    sandbox: Option<Sandbox>,
    region: &'x Region,
    /// The consumer is inside a drain (maybe blocked writing the output):
    /// a handler waiting for room in the ring is not stalled.
    draining: &'x AtomicBool,
    /// Drains that found records.
    consumed: &'x AtomicU64,
    /// The consumer stopped on a record the target forged: it frees no
    /// more room in the ring, which the tracer's probes would wait for.
    ring_broken: &'x AtomicBool,
    tick: u64,
    /// [`stall_limit`].
    stall: Duration,
    /// The sandbox failed: what to say.
    lost: Option<String>,
    /// No more tracer-side probes run (`lost`, or the ring is broken).
    stopped: bool,
}

impl Runner<'_> {
    /// Run probe `p` in the sandbox; false once the sandbox is lost.
    fn run(&mut self, artifact: &Artifact, p: usize) -> bool {
        if self.stopped || self.ring_broken.load(Ordering::Relaxed) {
            self.stopped = true;
            return false;
        }
        // The parts the compiled code trusts to stay in bounds, checked
        // before each run (the sandbox contains what happens if the target
        // changes them during one).
        if let Some(d) = self.region.damage(artifact) {
            self.lost = Some(format!("{d}; the tracer's probes no longer run and the session ends here"));
            self.stopped = true;
            return false;
        }
        let Some(sandbox) = &mut self.sandbox else {
            self.stopped = true;
            return false;
        };
        let actions = core::mem::offset_of!(abi::Ctx, actions) / 8;
        let (draining, consumed, tick) = (self.draining, self.consumed, &mut self.tick);
        let mut progress = |s: &Sandbox| {
            if draining.load(Ordering::Relaxed) {
                *tick += 1;
            }
            s.word(actions) ^ consumed.load(Ordering::Relaxed).rotate_left(32) ^ tick.rotate_left(48)
        };
        match sandbox.run(p as u32, self.stall, &mut progress) {
            Ok(()) => true,
            Err(f) => {
                self.lost = Some(sandbox_failure(artifact, p, &f));
                self.stopped = true;
                false
            }
        }
    }

    fn ok(&self) -> bool {
        !self.stopped
    }

    /// Run `timer.profile` probe `p` on sample `s`: its thread, registers
    /// and frames go into the sandbox's page after the context's `words`.
    fn run_sample(&mut self, artifact: &Artifact, p: usize, words: usize, s: &crate::profile::Stack<'_>) -> bool {
        let Some(sandbox) = &self.sandbox else {
            self.stopped = true;
            return false;
        };
        sandbox.put(words, u64::from(s.tid));
        for (i, w) in s.regs.words.iter().enumerate() {
            sandbox.put(words + 1 + i, *w);
        }
        let at = words + 1 + telco_abi::arch::native::NREGS;
        // The probes' own frames (`[telco-stap]` in the profile files)
        // are not the program's: its backtrace goes without them.
        let mut n = 0;
        for f in s.frames.iter().filter(|f| !f.own).take(abi::SAMPLE_FRAMES) {
            sandbox.put(at + 1 + n, f.pc);
            n += 1;
        }
        sandbox.put(at, n as u64);
        self.run(artifact, p)
    }
}

impl<'a> Local<'a> {
    /// The region the probes work on.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Call probe `probe`'s handler on the calling thread, as a trampoline
    /// in a target thread would (for tests and benchmarks: any number of
    /// threads may call at once).
    pub fn call_probe(&self, probe: usize) {
        let mut ctx = vec![0u64; (self.artifact.ctx_size as usize).div_ceil(8)];
        call(self.artifact, &self.region, &self.code, &mut ctx, probe, std::process::id() as u64, sys::gettid());
    }

    /// The handler of probe `probe` and the region base it takes, for
    /// benchmarks that call it in a loop with their own context (as a
    /// trampoline would).
    pub fn handler(&self, probe: usize) -> (extern "C" fn(*mut u8, *mut u8), *mut u8) {
        // SAFETY: as in `call`: a handler offset from the artifact.
        let f: Handler = unsafe { std::mem::transmute(self.code.addr(self.artifact.probes[probe].handler)) };
        (f, self.region.base())
    }

    /// Format every pending event into text (stdout and stderr lines
    /// together), without a consumer thread.
    pub fn drain_text(&self) -> Result<String, std::io::Error> {
        drain_text(self.artifact, &self.region, &self.code)
    }

    /// Run the session to its end.
    pub fn run(self, cfg: Config) -> Result<Outcome, RunError> {
        self.run_with(cfg, &mut NoTarget)
    }

    /// Run the session to its end, with a target's life cycle in `hooks`.
    pub fn run_with(self, cfg: Config, hooks: &mut dyn Hooks) -> Result<Outcome, RunError> {
        let signals = Signals::install().map_err(RunError::Signals)?;
        let deadline = cfg.timeout.map(|t| Instant::now() + t);
        let stop = AtomicBool::new(false);
        // SAFETY: artifact.format_fn is rt_format's offset in the blob,
        // with this signature.
        let format: extern "C" fn(*mut u8, i64, *const u8, *const i64, i64) -> i64 =
            unsafe { std::mem::transmute(self.code.addr(self.artifact.format_fn)) };
        let artifact = self.artifact;
        let by_order = |pred: &dyn Fn(&Attach) -> Option<i64>| -> Vec<usize> {
            let mut v: Vec<(i64, usize)> =
                artifact.probes.iter().enumerate().filter_map(|(i, p)| pred(&p.attach).map(|o| (o, i))).collect();
            v.sort_by_key(|x| x.0);
            v.into_iter().map(|x| x.1).collect()
        };
        let begins = by_order(&|a| if let Attach::Begin { order } = a { Some(*order) } else { None });
        let ends = by_order(&|a| if let Attach::End { order } = a { Some(*order) } else { None });
        let errors = by_order(&|a| if let Attach::Error { order } = a { Some(*order) } else { None });
        let timers: Vec<(usize, Duration, u64)> = artifact
            .probes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.attach {
                Attach::Timer { period_ns, randomize_ns } => {
                    Some((i, Duration::from_nanos(period_ns.max(1)), randomize_ns.min(period_ns.saturating_sub(1))))
                }
                _ => None,
            })
            .collect();
        // `.randomize(M)`: each period gets a uniform offset in [-M, M].
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.subsec_nanos());
        let mut seed = (std::process::id() as u64) << 32 | u64::from(nanos) | 1;
        let mut jitter = move |period: Duration, spread: u64| -> Duration {
            if spread == 0 {
                return period;
            }
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let off = (seed % (2 * spread + 1)) as i128 - spread as i128;
            Duration::from_nanos((period.as_nanos() as i128 + off).max(1) as u64)
        };
        // `timer.profile` probes: (probe, period); the sampler runs at the
        // shortest period and each probe runs once its own period of CPU
        // time has been sampled.
        let profiles: Vec<(usize, u64)> = artifact
            .probes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.attach {
                Attach::Profile { period_ns } => Some((i, period_ns.max(1))),
                _ => None,
            })
            .collect();
        // An empty body (`probe timer.profile {}`, the one the profile
        // files add) samples without a round trip to the sandbox.
        let runs_body: Vec<bool> = profiles.iter().map(|&(i, _)| !artifact.probes[i].empty).collect();
        let maxerrors = artifact.limits.maxerrors;
        let errors_at = core::mem::offset_of!(Header, errors);
        let skipped_at = core::mem::offset_of!(Header, skipped);
        let dropped_at = core::mem::offset_of!(Header, dropped);
        let maxskipped = artifact.limits.maxskipped;
        let Config { output, messages, traces, suppress_warnings, profile: mut sink, .. } = cfg;
        let region = &self.region;
        let code = &self.code;
        // Every tracer-side handler runs in the sandbox (os::sandbox),
        // forked before the consumer thread starts.
        let (pid, tid) = (std::process::id() as u64, sys::gettid());
        let words = (artifact.ctx_size as usize).div_ceil(8).max(abi::CTX_SIZE / 8);
        // It may read and write the memory of the process the region
        // serves, as the tracer knows it (none other, whatever the region
        // says). A sandbox that cannot start ends the tracer's probes like
        // one that failed: the target, armed already, is still let go.
        let sandbox =
            Sandbox::start_with_input(words, SAMPLE_WORDS, self.region.written.pid as libc::pid_t, |probe, page| {
                let (ctx, sample) = page.split_at_mut(words);
                call_with(artifact, region, code, ctx, probe as usize, pid, tid, Some(sample))
            })
            .map_err(|e| format!("cannot start the sandbox for the tracer's probes: {e}"));
        let draining = AtomicBool::new(false);
        let ring_broken = AtomicBool::new(false);
        let consumed = AtomicU64::new(0);
        let result = std::thread::scope(|scope| -> Result<(Outcome, Box<dyn Write + Send>), RunError> {
            let consumer = scope.spawn(|| -> Result<Drained, std::io::Error> {
                let mut c = Consumer {
                    artifact,
                    region,
                    format,
                    out: std::io::BufWriter::new(output),
                    messages,
                    warned: HashSet::new(),
                    buf: Vec::new(),
                    traces,
                    suppress_warnings,
                    tail: region
                        .u64_at(artifact.ring_off as usize + core::mem::offset_of!(abi::RingHeader, tail))
                        .load(Ordering::Relaxed),
                    corrupted: None,
                };
                loop {
                    draining.store(true, Ordering::Relaxed);
                    let any = c.drain()?;
                    draining.store(false, Ordering::Relaxed);
                    if c.corrupted.is_some() {
                        ring_broken.store(true, Ordering::Relaxed);
                    }
                    if any {
                        consumed.fetch_add(1, Ordering::Relaxed);
                    } else {
                        if stop.load(Ordering::Acquire) {
                            c.drain()?;
                            c.take_stages()?;
                            // No handler runs any more: the counters are final.
                            let summary = crate::perfetto::Summary {
                                errors: region.counter(errors_at),
                                dropped: region.counter(dropped_at),
                                skipped: region.counter(skipped_at),
                                writer_dropped: 0,
                            };
                            let written = match c.traces.take() {
                                Some(f) => Some(f.finish(summary)?),
                                None => None,
                            };
                            let out = c.out.into_inner().map_err(|e| e.into_error())?;
                            return Ok((out, c.messages, written, c.corrupted));
                        }
                        // With a trace file every call is an event: come
                        // back sooner, before the ring fills.
                        let nap = if c.traces.is_some() { 1 } else { 20 };
                        std::thread::park_timeout(Duration::from_millis(nap));
                    }
                }
            });
            let wake = || consumer.thread().unpark();
            let (sandbox, lost) = match sandbox {
                Ok(s) => (Some(s), None),
                Err(e) => (None, Some(e)),
            };
            let mut runner = Runner {
                sandbox,
                region,
                draining: &draining,
                consumed: &consumed,
                ring_broken: &ring_broken,
                tick: 0,
                stall: stall_limit(artifact),
                stopped: lost.is_some(),
                lost,
            };
            let mut failed = false;
            let too_many_errors = || region.counter(errors_at) > maxerrors;
            // More than MAXSKIPPED hits skipped: the output is no longer
            // worth much, and the session ends (as SystemTap's does).
            let too_many_skipped = || region.counter(skipped_at) > maxskipped;
            let mut skipped_out = false;
            for &p in &begins {
                if !runner.run(artifact, p) {
                    break;
                }
                wake();
                if too_many_errors() {
                    failed = true;
                    break;
                }
                if region.exit_requested() {
                    break;
                }
            }
            // Sampling starts before the target runs on (a command still
            // at its entry point is sampled from its first instruction).
            let mut profiler = None;
            let mut due = vec![0u64; profiles.len()];
            if !failed && !region.exit_requested() && runner.ok() && !profiles.is_empty() {
                let period = profiles.iter().map(|p| p.1).min().unwrap_or(1);
                let target = self.region.written.pid as i32;
                match crate::profile::Profiler::start(target, period) {
                    Ok(mut p) => {
                        if artifact.shadow_depth > 0 {
                            p.set_shadow_stacks(crate::profile::ShadowStacks {
                                // Set at injection (the target's word, but
                                // only read back from its own memory).
                                threads_at: self.region.counter(core::mem::offset_of!(Header, threads_at)),
                                nthreads: self.region.written.nthreads,
                                frame_size: artifact.frame_size,
                                depth: artifact.shadow_depth,
                            });
                        }
                        if let Some(own) = hooks.own_code() {
                            p.set_own_code(own);
                        }
                        if let Some(why) = &p.fallback {
                            // Said even with -w: the profile is coarser.
                            crate::eprintln_escaped!("WARNING: {why}");
                        }
                        profiler = Some(p);
                    }
                    Err(e) => {
                        // One ERROR at the end, and the session fails (exit 1).
                        runner.lost = Some(format!(
                            "timer.profile: cannot sample process {target}: perf_event_open: {e} (the kernel \
                             must allow perf events: as root, or with CAP_PERFMON; in a container, a seccomp policy \
                             that permits perf_event_open)"
                        ));
                        runner.stopped = true;
                        failed = true;
                    }
                }
            }
            let mut sampled = |runner: &mut Runner<'_>, profiler: &mut crate::profile::Profiler| {
                profiler.poll(&mut |st| {
                    if let Some(k) = sink.as_mut() {
                        k.sample(st);
                    }
                    for (k, (probe, period)) in profiles.iter().enumerate() {
                        due[k] += st.period;
                        if due[k] >= *period && runs_body[k] {
                            due[k] = (due[k] - period).min(*period);
                            if !runner.run_sample(artifact, *probe, words, st) {
                                return;
                            }
                        }
                    }
                });
            };
            if !failed && !region.exit_requested() && runner.ok() {
                if let Err(e) = hooks.started() {
                    crate::eprintln_escaped!("ERROR: {e}");
                    failed = true;
                }
            }
            if !failed && !region.exit_requested() && runner.ok() {
                // Timers, until exit(), -T, a signal, too many errors or the
                // target's exit.
                let start = Instant::now();
                let mut next: Vec<Instant> = timers.iter().map(|(_, p, r)| start + jitter(*p, *r)).collect();
                loop {
                    if region.exit_requested() || deadline.is_some_and(|d| Instant::now() >= d) {
                        break;
                    }
                    // Errors reported by handlers in the target end the
                    // session too (MAXERRORS), as do skipped hits
                    // (MAXSKIPPED).
                    if too_many_errors() {
                        failed = true;
                        break;
                    }
                    if too_many_skipped() {
                        skipped_out = true;
                        failed = true;
                        break;
                    }
                    if hooks.watching() {
                        if hooks.gone() {
                            break;
                        }
                        hooks.poll();
                    }
                    let now = Instant::now();
                    let due = next.iter().copied().min();
                    let mut wake_at = match (due, deadline) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    if hooks.watching() || profiler.is_some() {
                        // Notice the target's exit (and drain the samples)
                        // within 10 ms.
                        let soon = now + Duration::from_millis(10);
                        wake_at = Some(wake_at.map_or(soon, |w| w.min(soon)));
                    }
                    if let Some(p) = profiler.as_mut() {
                        sampled(&mut runner, p);
                        wake();
                    }
                    if let Some(t) = wake_at.filter(|t| *t > now) {
                        if signals.wait_or(Some(t - now), hooks.wake_fd()) {
                            break;
                        }
                        continue;
                    }
                    if wake_at.is_none() {
                        signals.wait(None);
                        break;
                    }
                    if signals.pending() {
                        break;
                    }
                    for (k, (probe, period, spread)) in timers.iter().enumerate() {
                        if next[k] <= Instant::now() {
                            if !runner.run(artifact, *probe) {
                                break;
                            }
                            // Catch up without a burst after a stall.
                            next[k] += jitter(*period, *spread);
                            if next[k] < Instant::now() {
                                next[k] = Instant::now() + *period;
                            }
                        }
                    }
                    wake();
                    if !runner.ok() {
                        break;
                    }
                    if too_many_errors() {
                        failed = true;
                        break;
                    }
                }
            }
            // The samples taken until now (a target that exited leaves
            // its last ones in the rings).
            let profiled = match profiler.as_mut() {
                Some(p) => {
                    p.stop();
                    sampled(&mut runner, p);
                    wake();
                    Some(p.summary)
                }
                None => None,
            };
            if let (Some(k), Some(summary)) = (sink.as_mut(), profiled.as_ref()) {
                if let Err(e) = k.finish(summary) {
                    crate::eprintln_escaped!("ERROR: writing the profile failed: {e}");
                    failed = true;
                }
            }
            hooks.stopping();
            // Errors that arrived while stopping (a target that exited right
            // after its last failing hit) count too.
            if !failed && too_many_errors() {
                failed = true;
            }
            if !failed && too_many_skipped() {
                skipped_out = true;
                failed = true;
            }
            // The target's hooks are out (or it is gone); the session's own
            // end and error probes still run.
            region.set_enabled(true);
            for &p in if failed { &errors } else { &ends } {
                if !runner.run(artifact, p) {
                    break;
                }
                wake();
                if !failed && too_many_errors() {
                    // An error in an end probe: the rest of the end probes
                    // are skipped and the error probes run (the failing
                    // handler disabled the region: on again for them).
                    region.set_enabled(true);
                    for &e in &errors {
                        if !runner.run(artifact, e) {
                            break;
                        }
                    }
                    break;
                }
            }
            region.set_enabled(false);
            stop.store(true, Ordering::Release);
            consumer.thread().unpark();
            let (mut output, mut messages, traces, mut corrupted) = match consumer.join() {
                Ok(r) => r.map_err(RunError::Output)?,
                Err(_) => return Err(RunError::Output(std::io::Error::other("the output thread panicked"))),
            };
            // One ERROR: the consumer's, if it found the damage first.
            if let Some(lost) = runner.lost.take() {
                if corrupted.is_none() {
                    let _ = writeln!(messages, "ERROR: {}", crate::text::escape(lost.as_bytes()));
                    corrupted = Some(lost);
                }
            }
            // What the display reads must be sound first.
            if corrupted.is_none() {
                if let Some(d) = region.damage(artifact) {
                    let _ = writeln!(messages, "ERROR: {}", crate::text::escape(d.as_bytes()));
                    corrupted = Some(d);
                }
            }
            if !failed && corrupted.is_none() && !artifact.display.is_empty() {
                // SAFETY: no handler runs any more (enabled is 0 and this
                // thread ran the last one); the region is ours to read.
                let bytes = unsafe { std::slice::from_raw_parts(region.base(), artifact.region_size as usize) };
                match render::display_globals(bytes, artifact) {
                    Ok(text) => output.write_all(text.as_bytes()).map_err(RunError::Output)?,
                    Err(what) => {
                        let _ = writeln!(messages, "ERROR: {}", crate::text::escape(what.as_bytes()));
                        corrupted = Some(what);
                    }
                }
            }
            output.flush().map_err(RunError::Output)?;
            Ok((
                Outcome {
                    errors: region.counter(errors_at),
                    skipped: region.counter(skipped_at),
                    skipped_busy: region.counter(core::mem::offset_of!(Header, skipped_busy)),
                    skipped_noslot: region.counter(core::mem::offset_of!(Header, skipped_noslot)),
                    skipped_deep: region.counter(core::mem::offset_of!(Header, skipped_deep)),
                    too_many_skipped: skipped_out,
                    dropped: region.counter(dropped_at),
                    unreturned: region.counter(core::mem::offset_of!(Header, unreturned)),
                    unfollowed_execs: region.counter(core::mem::offset_of!(Header, unfollowed_execs)),
                    traces,
                    corrupted,
                    profile: profiled,
                },
                messages,
            ))
        });
        let (outcome, mut messages) = result?;
        drop(self);
        for line in summary(&outcome, artifact) {
            let _ = writeln!(messages, "{}", crate::text::escape(line.as_bytes()));
        }
        let _ = messages.flush();
        Ok(outcome)
    }
}
