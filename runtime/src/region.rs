//! The shared region as the tracer holds it: the memfd initialised from
//! the artifact, its trusted mirror (invariant 6), and `Region::damage`,
//! which compares what the compiled code trusts to stay in bounds (the
//! header's layout fields, the ring's geometry, every array's geometry)
//! with the artifact: checked before each of the tracer's probes and at
//! the end; damage is said and the session exits 1.

use crate::error::RunError;
use crate::os::sys::{self, SharedMemory};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use telco_abi::artifact::Artifact;
use telco_abi::region::{self as abi, Header};

/// The header fields the tracer sets once and the compiled code trusts
/// (offsets and sizes of the region's parts, the clock's calibration).
fn layout_fields(h: &Header) -> [u64; 23] {
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
        h.flight_off,
        u64::from(h.flight_chunks),
        u64::from(h.flight_stride),
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
    pub(crate) written: Header,
}

impl Region {
    /// The region's memfd in this process (`SharedMemory::fd`).
    pub fn fd(&self) -> i32 {
        self.mem.fd()
    }

    pub fn new(a: &Artifact, pid: u64, execname: &str) -> Result<Region, RunError> {
        Region::in_memfd(a, pid, execname, SharedMemory::new_fd)
    }

    /// The region of another trust domain of a session whose first
    /// process is `pid` (`session/domains.rs`): set up as the session's
    /// is, in a memfd of its own. Its processes map it at the session's
    /// region's address and take their constants from the session's
    /// mirror (the same artifact's).
    pub fn for_domain(a: &Artifact, pid: u64, execname: &str) -> Result<Region, RunError> {
        Region::in_memfd(a, pid, execname, SharedMemory::new_domain_fd)
    }

    /// A region in a new memfd that `memfd` makes, with its mirror.
    fn in_memfd(
        a: &Artifact,
        pid: u64,
        execname: &str,
        memfd: fn(usize) -> std::io::Result<std::os::fd::OwnedFd>,
    ) -> Result<Region, RunError> {
        let size = a.region_size as usize;
        let err = |source| RunError::Region { size: a.region_size, source };
        let (mem, mirror) =
            SharedMemory::mirrored(memfd(size).map_err(err)?, SharedMemory::new_mirror_fd(size).map_err(err)?, size)
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
            skipped_go: 0,
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
            arg_start: crate::os::proc::arg_area(pid as i32).map_or(0, |a| a.0),
            arg_end: crate::os::proc::arg_area(pid as i32).map_or(0, |a| a.1),
            trap_hits: 0,
            go_calls_off: go_calls_off(a),
            go_calls: go_calls(a),
            _pad_go: 0,
            flight_off: a.flight_off,
            flight_chunks: a.flight_chunks,
            flight_stride: a.flight_stride,
            flight_next: 0,
            flight_asks: 0,
            flight_hold: 0,
            flight_gens: 0,
            flight_at: 0,
            flight_unkept: 0,
        };
        for base in [mem.as_ptr(), mirror.as_ptr()] {
            // SAFETY: the header is at offset 0 of a region at least HEADER_SIZE long.
            unsafe { std::ptr::write(base.cast::<Header>(), h) };
        }
        // The flight recorder's chunks, allocated now: a first lap of the
        // history would otherwise take a page fault (the kernel zeroing a
        // page) every 2.5 chunks, 15 ns a call over the first million.
        let chunks = u64::from(a.flight_chunks) * u64::from(a.flight_stride);
        if chunks > 0 && a.flight_off + chunks <= a.region_size {
            for page in (a.flight_off..a.flight_off + chunks).step_by(4096) {
                // SAFETY: inside the region (checked above); no process
                // maps it yet.
                unsafe { std::ptr::write_volatile(mem.as_ptr().add(page as usize), 0) };
            }
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
    pub(crate) fn header_damage(&self) -> Option<&'static str> {
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

    pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is an 8-aligned field inside the region (header or
        // ring header), which lives as long as self.
        unsafe { AtomicU64::from_ptr(self.base().add(off).cast()) }
    }

    pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
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

/// Bytes of the thread slots' mapping (slots, then their shadow stacks,
/// the slots' stacks for Go probes, the calls of return probes on Go
/// functions by goroutine, then the trap area:
/// `telco_abi::region::TrapArea`).
pub fn threads_size(a: &telco_abi::artifact::Artifact) -> u64 {
    go_calls_off(a) + go_calls_size(a) + telco_abi::region::TRAP_AREA_SIZE as u64
}

/// Where the calls of return probes on Go functions are kept
/// (`Header::go_calls_off`: `telco_abi::region::GoCalls` records), from
/// the start of the thread slots' mapping.
pub fn go_calls_off(a: &telco_abi::artifact::Artifact) -> u64 {
    let slot = core::mem::size_of::<telco_abi::region::ThreadSlot>() as u64;
    let n = u64::from(a.nthreads);
    let stack = u64::from(a.shadow_depth) * u64::from(a.frame_size);
    (n * slot + n * stack).next_multiple_of(4096).max(4096) + n * go_stack(a)
}

/// How many `GoCalls` records the session needs (`Header::go_calls`):
/// none without a return probe on a Go function.
pub fn go_calls(a: &telco_abi::artifact::Artifact) -> u32 {
    let go_ret = a
        .probes
        .iter()
        .any(|p| matches!(p.attach, telco_abi::artifact::Attach::Function { go: Some(_), ret: true, .. }));
    if go_ret {
        telco_abi::region::GO_CALLS
    } else {
        0
    }
}

fn go_calls_size(a: &telco_abi::artifact::Artifact) -> u64 {
    let depth = a.shadow_depth.min(telco_abi::region::GO_CALLS_DEPTH);
    let record = telco_abi::region::GO_CALLS_HEADER as u64 + u64::from(depth) * u64::from(a.frame_size);
    (u64::from(go_calls(a)) * record).next_multiple_of(4096)
}

/// Each slot's stack for the handlers of probes on Go functions
/// (`ThreadSlot::go_stack`): none in a session without them.
pub(crate) fn go_stack(a: &telco_abi::artifact::Artifact) -> u64 {
    let go = a.probes.iter().any(|p| matches!(p.attach, telco_abi::artifact::Attach::Function { go: Some(_), .. }));
    if go {
        telco_abi::region::GO_STACK_SIZE
    } else {
        0
    }
}
