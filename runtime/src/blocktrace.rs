//! `.itrace` at block speed: the tracer's side of the in-target block
//! tracer (`arch::x86_64::blocks` and `arch::aarch64::blocks` write its
//! code, `arch::blocks` holds what both share).
//!
//! A pool of arenas (code cache, data, buffer), one memfd mapped in the
//! target (code parts read and execute only) and here, is created at the
//! first traced call. A thread entering a traced function posts a request
//! (`ItraceSlot`, as for the single-stepper) and rings `Header::itrace_bell`;
//! the server thread here (woken by a futex on the bell) takes a free arena,
//! translates the function's first block, puts the address in the slot's
//! `resume` and marks it `ITRACE_RUN`: the thread's gate jumps there with
//! its registers as at the entry. From then on the thread runs in the
//! arena; its requests (a block to translate, a full buffer, the call's
//! return) ring the same bell. Records are drained into a
//! `telco_itrc::Recorder` (`Recorder::replay`), one ITRC file per traced
//! call, as the single-stepper names them.
//!
//! Everything the target can write is input: a record's block address must
//! be a block this arena translated (the first that is not ends the file's
//! records, with a warning), and counts come from our own bookkeeping.

use crate::arch::native::blocks::{self, ctl, ArenaAddrs, SlotAlloc, Stubs};
use crate::itrace::Traced;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use telco_abi::region::{self as abi, ItraceSlot};
use telco_itrc::x64::X64Block;
use telco_itrc::{Isa, IsaRecorder, RecorderConfig};

type ItrcIsa = crate::arch::native::ItrcIsa;
type Recorder<W> = IsaRecorder<W, ItrcIsa>;

pub const ARENAS: usize = 8;
pub const CODE_SIZE: u64 = 32 << 20;
pub const DATA_SIZE: u64 = 8 << 20;
pub const BUF_SIZE: u64 = 16 << 20;
pub const ARENA_SIZE: u64 = CODE_SIZE + DATA_SIZE + BUF_SIZE;
pub const POOL_SIZE: u64 = ARENA_SIZE * ARENAS as u64;

/// The pool as both sides see it.
pub struct Pool {
    /// The tracer's mapping.
    pub local: crate::os::sys::SharedMemory,
    /// Where the target maps it.
    pub remote: u64,
}

impl Pool {
    fn arena_addrs(&self, i: usize, bell: u64) -> ArenaAddrs {
        let base = self.remote + i as u64 * ARENA_SIZE;
        let data = base + CODE_SIZE;
        ArenaAddrs {
            code: base,
            code_size: CODE_SIZE,
            data,
            data_size: DATA_SIZE,
            table: data + DATA_SIZE - blocks::TABLE_ENTRIES * blocks::TABLE_ENTRY,
            buf: data + DATA_SIZE,
            buf_size: BUF_SIZE,
            bell,
            avx: blocks::has_avx(),
        }
    }

    /// The tracer's pointer to target address `at` inside the pool.
    fn local(&self, at: u64) -> *mut u8 {
        self.view().at(at)
    }

    fn view(&self) -> View {
        View { base: self.local.as_ptr(), remote: self.remote }
    }
}

/// The pool's addresses as the tracer reaches them (no borrow).
#[derive(Clone, Copy)]
struct View {
    base: *mut u8,
    remote: u64,
}

impl View {
    fn at(self, x: u64) -> *mut u8 {
        self.base.wrapping_add(x.wrapping_sub(self.remote) as usize)
    }
}

use crate::itrace::read_code;

enum ArenaState {
    Free,
    /// A traced call runs in it.
    Busy,
    /// Left for good (abandoned, refused code): never reused.
    Dead,
}

struct Arena {
    addrs: ArenaAddrs,
    stubs: Stubs,
    state: ArenaState,
    code_next: u64,
    /// Where translations start: past the stubs.
    code_start: u64,
    slot_next: u64,
    /// Real address → translation.
    done: HashMap<u64, u64>,
    /// Real address → exit slots waiting for it.
    waiting: HashMap<u64, Vec<u64>>,
    blocks: HashMap<u64, X64Block>,
    /// Every exit slot and its thunk (to unchain them all).
    thunks: Vec<(u64, u64)>,
    /// Entries in its lookup table.
    entries: u64,
    /// A record was not one of ours: nothing more is read from its buffer.
    garbled: bool,
    /// The half the thread fills next after the last one drained (they
    /// are filled 0, 1, 0, 1…: the tracer's count, not the target's word).
    next_half: u64,
    acked: u32,
    rec: Option<Recorder<BufWriter<File>>>,
    /// The registers at the call's entry and its return address, for
    /// `itrace:start` once the prologue has stored the vector registers.
    pending_start: Option<(crate::arch::native::Regs, u64)>,
    path: PathBuf,
    name: String,
}

struct Slots<'a> {
    next: &'a mut u64,
    end: u64,
}

impl SlotAlloc for Slots<'_> {
    fn slot(&mut self, _target: u64) -> Option<u64> {
        (*self.next + 8 <= self.end).then(|| {
            let s = *self.next;
            *self.next += 8;
            s
        })
    }
}

/// What the server reports at the end.
#[derive(Default, Debug, Clone)]
pub struct Report {
    pub calls: u64,
    /// Blocks translated again because their code changed.
    pub retranslated: u64,
    pub instructions: u64,
    pub records: u64,
    pub time: std::time::Duration,
    pub warnings: Vec<String>,
}

/// The server: owns the pool's arenas and the ITRC files.
pub struct Server {
    pid: i32,
    pool: Pool,
    mem: File,
    /// The server's own mapping of the region (it outlives the session's).
    _region: crate::os::sys::SharedMemory,
    header: *mut u8,
    /// The session's mapping of the region's trusted mirror, where the
    /// answers go (`ItraceSlot::nonce`): the session joins this thread
    /// before it unmaps it (`BlockTracing::finish`).
    mirror: *mut u8,
    slots_off: u64,
    nslots: u32,
    arenas: Vec<Arena>,
    pub traced: Arc<Mutex<Vec<Traced>>>,
    path: PathBuf,
    max_calls: u64,
    pub report: Report,
    /// Set once MAXITRACE calls were traced: the session then closes the
    /// request slots in the region's trusted mirror, where the gates read
    /// how many there are.
    pub closed: Arc<std::sync::atomic::AtomicBool>,
}

// SAFETY: the header pointer is the server's own mapping of the region,
// and the mirror pointer the session's mapping of its mirror, which the
// session unmaps only after it has joined this thread.
unsafe impl Send for Server {}

fn u32_at(p: *mut u8) -> &'static AtomicU32 {
    // SAFETY: callers pass 4-aligned words of live shared memory.
    unsafe { AtomicU32::from_ptr(p.cast()) }
}

fn u64_at(p: *mut u8) -> &'static AtomicU64 {
    // SAFETY: as u32_at, 8-aligned.
    unsafe { AtomicU64::from_ptr(p.cast()) }
}

impl Server {
    /// `region`: the region's memfd and size (mapped again here);
    /// `mirror`: the session's mapping of its trusted mirror; `slots`: the
    /// artifact's request slots.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pid: i32,
        pool: Pool,
        region: (i32, u64),
        mirror: *mut u8,
        region_remote: u64,
        slots: (u64, u32),
        traced: Arc<Mutex<Vec<Traced>>>,
        path: PathBuf,
        max_calls: u64,
    ) -> std::io::Result<Server> {
        let end = slots.0 + u64::from(slots.1) * core::mem::size_of::<ItraceSlot>() as u64;
        if end > region.1 || (region.1 as usize) < core::mem::size_of::<abi::Header>() {
            return Err(std::io::Error::other("internal error: the artifact's .itrace slots lie outside its region"));
        }
        // SAFETY: the session's region memfd, open for as long as this runs.
        let fd = nix::unistd::dup(unsafe { std::os::fd::BorrowedFd::borrow_raw(region.0) })?;
        let own = crate::os::sys::SharedMemory::from_fd(fd, region.1 as usize)?;
        let bell_remote = region_remote + core::mem::offset_of!(abi::Header, itrace_bell) as u64;
        let mut arenas = Vec::new();
        for i in 0..ARENAS {
            let addrs = pool.arena_addrs(i, bell_remote);
            let (code, stubs) = blocks::stubs(&addrs).map_err(|e| std::io::Error::other(e.to_string()))?;
            // SAFETY: the arena's code part is ours to write, CODE_SIZE long.
            unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), pool.local(addrs.code), code.len()) };
            blocks::code_written(pool.local(addrs.code), code.len());
            let code_start = (addrs.code + code.len() as u64).next_multiple_of(16);
            arenas.push(Arena {
                addrs,
                stubs,
                state: ArenaState::Free,
                code_next: code_start,
                code_start,
                slot_next: addrs.at(ctl::SLOTS),
                done: HashMap::new(),
                waiting: HashMap::new(),
                blocks: HashMap::new(),
                thunks: Vec::new(),
                entries: 0,
                garbled: false,
                next_half: 0,
                acked: 0,
                rec: None,
                pending_start: None,
                path: PathBuf::new(),
                name: String::new(),
            });
        }
        Ok(Server {
            pid,
            mem: crate::os::proc::mem(pid, false)?,
            pool,
            header: own.as_ptr(),
            _region: own,
            mirror,
            closed: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            slots_off: slots.0,
            nslots: slots.1,
            arenas,
            traced,
            path,
            max_calls,
            report: Report::default(),
        })
    }

    /// Calls that went untraced (no slot, no arena, waited too long).
    pub fn missed(&self) -> u64 {
        u64_at(self.header.wrapping_add(core::mem::offset_of!(abi::Header, itrace_missed))).load(Ordering::Relaxed)
    }

    /// The bell's word in the tracer's mapping of the region.
    pub fn bell(&self) -> &'static AtomicU32 {
        u32_at(self.header.wrapping_add(core::mem::offset_of!(abi::Header, itrace_bell)))
    }

    fn file(&self, k: u64) -> PathBuf {
        crate::itrace::call_file(&self.path, k)
    }

    /// Serve until `stop`: new calls and the arenas' requests.
    pub fn run(&mut self, stop: &std::sync::atomic::AtomicBool) {
        let mut seen = self.bell().load(Ordering::Acquire);
        loop {
            self.serve();
            if stop.load(Ordering::Acquire) {
                break;
            }
            crate::os::sys::futex_wait(self.bell(), seen, std::time::Duration::from_millis(20));
            seen = self.bell().load(Ordering::Acquire);
        }
        self.serve();
    }

    fn serve(&mut self) {
        self.take_calls();
        for i in 0..self.arenas.len() {
            if matches!(self.arenas[i].state, ArenaState::Busy) {
                self.answer(i);
            }
        }
    }

    /// New traced calls waiting in their gates: first every request this
    /// turn serves is taken (its thread then waits up to 10 s, not 2),
    /// then each is started. A first block's translation is slow on an
    /// emulated machine, and requests behind it must not give up meanwhile
    /// (eight threads on the aarch64 guest's one CPU did).
    fn take_calls(&mut self) {
        let traced = self.traced.lock().map(|t| t.clone()).unwrap_or_default();
        let mut free: Vec<usize> =
            (0..self.arenas.len()).filter(|&i| matches!(self.arenas[i].state, ArenaState::Free)).collect();
        let mut budget = self.max_calls.saturating_sub(self.report.calls);
        let mut taken = Vec::new();
        for k in 0..self.nslots as usize {
            let base = self.header.wrapping_add(self.slots_off as usize + k * core::mem::size_of::<ItraceSlot>());
            let state = u32_at(base.wrapping_add(core::mem::offset_of!(ItraceSlot, state)));
            if state.load(Ordering::Acquire) != abi::ITRACE_WAITING {
                continue;
            }
            // SAFETY: fields of a published request (plain words).
            let (regs_at, func, pid, tid, nonce) = unsafe {
                (
                    *base.add(core::mem::offset_of!(ItraceSlot, regs)).cast::<u64>(),
                    *base.add(core::mem::offset_of!(ItraceSlot, func)).cast::<u64>(),
                    *base.add(core::mem::offset_of!(ItraceSlot, pid)).cast::<u64>(),
                    *base.add(core::mem::offset_of!(ItraceSlot, tid)).cast::<u32>(),
                    *base.add(core::mem::offset_of!(ItraceSlot, nonce)).cast::<u64>(),
                )
            };
            let known = (func as usize) < traced.len();
            if !(known && pid == self.pid as u64 && budget > 0 && !free.is_empty()) {
                crate::itrace::decline(state);
                continue;
            }
            if state
                .compare_exchange(abi::ITRACE_WAITING, abi::ITRACE_TAKEN, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            budget -= 1;
            taken.push((k, free.remove(0), regs_at, func, tid, nonce));
        }
        for (k, i, regs_at, func, tid, nonce) in taken {
            let base = self.header.wrapping_add(self.slots_off as usize + k * core::mem::size_of::<ItraceSlot>());
            let state = u32_at(base.wrapping_add(core::mem::offset_of!(ItraceSlot, state)));
            let f = &traced[func as usize];
            let resume = match self.start(i, regs_at, f, &traced) {
                Ok(r) => r,
                Err(e) => {
                    self.report.warnings.push(format!(".itrace of {}: {e}", f.name));
                    0
                }
            };
            // SAFETY: the slot's resume word.
            u64_at(base.wrapping_add(core::mem::offset_of!(ItraceSlot, resume))).store(resume, Ordering::Relaxed);
            // The answer the gate trusts: the same slot in the mirror,
            // naming the request as it was taken (`ItraceSlot::nonce`).
            let answer = self.mirror.wrapping_add(self.slots_off as usize + k * core::mem::size_of::<ItraceSlot>());
            u32_at(answer.wrapping_add(core::mem::offset_of!(ItraceSlot, tid))).store(tid, Ordering::Relaxed);
            u64_at(answer.wrapping_add(core::mem::offset_of!(ItraceSlot, func))).store(func, Ordering::Relaxed);
            u64_at(answer.wrapping_add(core::mem::offset_of!(ItraceSlot, nonce))).store(nonce, Ordering::Relaxed);
            u64_at(answer.wrapping_add(core::mem::offset_of!(ItraceSlot, resume))).store(resume, Ordering::Relaxed);
            // Release: the thread sees the code and `resume` with RUN. A
            // thread that gave up meanwhile (10 s) freed the slot: its
            // arena is set up for nobody.
            let run = state.compare_exchange(abi::ITRACE_TAKEN, abi::ITRACE_RUN, Ordering::AcqRel, Ordering::Relaxed);
            // The thread sleeps on the state (`rt_itrace_wait`).
            crate::os::sys::futex_wake(state);
            if run.is_err() && resume != 0 {
                self.finish(i, false, Some("the thread stopped waiting before its first block".into()));
                self.arenas[i].state = ArenaState::Free;
            }
        }
        if self.report.calls >= self.max_calls {
            u32_at(self.header.wrapping_add(core::mem::offset_of!(abi::Header, itrace_slots)))
                .store(0, Ordering::Relaxed);
            // The gates read the count from the trusted mirror, which the
            // session writes (`closed`).
            self.closed.store(true, Ordering::Release);
        }
    }

    /// Set arena `i` up for a call of `f` (registers saved at `regs_at`)
    /// and translate its first block: the address the thread goes to.
    fn start(&mut self, i: usize, regs_at: u64, f: &Traced, traced: &[Traced]) -> Result<u64, String> {
        let words = crate::itrace::saved_regs(&self.mem, regs_at)?;
        // SAFETY: a plain struct of integers; all zeros is a value.
        let mut regs: crate::arch::native::Regs = unsafe { std::mem::zeroed() };
        crate::arch::native::load_saved(&mut regs, &words);
        crate::arch::native::set_pc(&mut regs, f.patch_at);
        let sp = crate::arch::native::sp(&regs);
        let mem = &self.mem;
        let read = |at: u64| {
            let mut w = [0u8; 8];
            mem.read_exact_at(&mut w, at).ok().map(|()| u64::from_le_bytes(w))
        };
        let ret = crate::arch::native::return_address(&regs, &read).ok_or("cannot read the return address")?;
        // As the function's return goes there (authenticated, where x30
        // was signed).
        let ret = crate::arch::native::strip_return(ret);
        self.report.calls += 1;
        let path = self.file(self.report.calls);
        let out = crate::outfile::create(&path).map_err(|e| format!("cannot create `{}`: {e}", path.display()))?;
        // Chunks of 1 MiB go to the file as they are (past the writer's
        // buffer, which gathers the small messages).
        let cfg = RecorderConfig { max_bytes: Some(1 << 30), chunk_size: 1 << 20, ..RecorderConfig::default() };
        let rec = Recorder::new(BufWriter::with_capacity(64 << 10, out), cfg).map_err(|e| e.to_string())?;
        let v = self.pool.view();
        let pool_local = move |at: u64| v.at(at);
        let a = &mut self.arenas[i];
        // A fresh arena: empty table, no blocks, the buffer empty.
        // SAFETY: the table lies in the arena's data part.
        unsafe {
            std::ptr::write_bytes(pool_local(a.addrs.table), 0, (blocks::TABLE_ENTRIES * blocks::TABLE_ENTRY) as usize)
        };
        a.code_next = a.code_start;
        a.slot_next = a.addrs.at(ctl::SLOTS);
        a.done.clear();
        a.waiting.clear();
        a.blocks.clear();
        a.thunks.clear();
        a.entries = 0;
        a.garbled = false;
        a.next_half = 0;
        let put64 = |off: u64, v: u64| u64_at(pool_local(a.addrs.at(off))).store(v, Ordering::Relaxed);
        put64(ctl::END_RET, ret);
        put64(ctl::END_SP, crate::arch::native::sp_after_return(sp));
        let half = a.addrs.buf_size / 2;
        put64(ctl::CURSOR, a.addrs.buf);
        put64(ctl::LIMIT, a.addrs.buf + half);
        put64(ctl::HALF, 0);
        put64(ctl::FILLED, 0);
        put64(ctl::FILLED + 8, 0);
        put64(ctl::HALF_START, a.addrs.buf);
        put64(ctl::HALF_START + 8, a.addrs.buf + half);
        put64(ctl::HALF_END, a.addrs.buf + half);
        put64(ctl::HALF_END + 8, a.addrs.buf + a.addrs.buf_size);
        put64(ctl::TIMESPEC, 0);
        put64(ctl::TIMESPEC + 8, 10_000_000);
        put64(ctl::TABLE, a.addrs.table);
        put64(ctl::BUF_START, a.addrs.buf);
        put64(ctl::LOST, 0);
        // The traced functions' displaced first bytes: where a thread that
        // leaves the cache goes instead.
        let redirects: Vec<(u64, u64)> = traced
            .iter()
            .flat_map(|t| {
                let end = t.patch_at + t.original.len() as u64;
                t.map.iter().filter(move |(_, o)| *o < end).map(|&(r, o)| (o, r))
            })
            .take(ctl::REDIRECTS_MAX as usize)
            .collect();
        for (k, &(o, r)) in redirects.iter().enumerate() {
            put64(ctl::REDIRECTS + 8 + 16 * k as u64, o);
            put64(ctl::REDIRECTS + 16 + 16 * k as u64, r);
        }
        put64(ctl::REDIRECTS, redirects.len() as u64);
        let put32 = |off: u64, v: u32| u32_at(pool_local(a.addrs.at(off))).store(v, Ordering::Relaxed);
        // The generations go on from the last call's (a thread leaving the
        // arena may still read them): nothing pending.
        let gen = u32_at(pool_local(a.addrs.at(ctl::REQ_GEN))).load(Ordering::Acquire);
        put32(ctl::ACK_GEN, gen);
        put32(ctl::ABANDONED, 0);
        put32(ctl::LEFT, 0);
        a.acked = gen;
        a.rec = Some(rec);
        a.pending_start = Some((regs, ret));
        a.path = path;
        a.name = f.name.clone();
        a.state = ArenaState::Busy;
        match self.translate(i, f.patch_at, traced) {
            Ok(t) => {
                // The thread starts in the prologue, which goes on there.
                let a = &self.arenas[i];
                u64_at(self.pool.local(a.addrs.at(ctl::FIRST))).store(t, Ordering::Release);
                Ok(a.stubs.prologue)
            }
            Err(e) => {
                self.finish(i, false, Some(e.clone()));
                // No thread entered it: free again.
                self.arenas[i].state = ArenaState::Free;
                Err(e)
            }
        }
    }

    /// Translate the block at `addr` into arena `i` (if not yet), enter it
    /// in the table and chain the exits waiting for it.
    fn translate(&mut self, i: usize, addr: u64, traced: &[Traced]) -> Result<u64, String> {
        if let Some(&t) = self.arenas[i].done.get(&addr) {
            return Ok(t);
        }
        self.translate_new(i, addr, traced)
    }

    /// Translate the block at `addr` (again, if its code changed: the table
    /// entry then takes the new translation).
    fn translate_new(&mut self, i: usize, addr: u64, traced: &[Traced]) -> Result<u64, String> {
        let mut block = ItrcIsa::read_block(addr, &mut |a, buf| read_code(&self.mem, traced, a, buf));
        blocks::fit(&mut block);
        if block.insns.is_empty() {
            return Err(format!("no instruction decodes at {addr:#x}"));
        }
        let a = &mut self.arenas[i];
        // Three quarters full at most: a lookup that misses always finds
        // an empty entry soon.
        if a.entries >= blocks::TABLE_ENTRIES / 4 * 3 {
            return Err("the code cache's table is full".into());
        }
        let end = a.addrs.data + a.addrs.data_size - blocks::TABLE_ENTRIES * blocks::TABLE_ENTRY;
        let at = a.code_next;
        let (tr, initial) = {
            let mut slots = Slots { next: &mut a.slot_next, end };
            blocks::translate(&block, at, &a.addrs, &a.stubs, &mut slots).map_err(|r| r.0)?
        };
        if at + tr.code.len() as u64 > a.addrs.code + a.addrs.code_size {
            return Err("the code cache is full".into());
        }
        let v = self.pool.view();
        let local = move |x: u64| v.at(x);
        // SAFETY: inside the arena's code part (checked above).
        unsafe { std::ptr::copy_nonoverlapping(tr.code.as_ptr(), local(at), tr.code.len()) };
        let written = (local(at), tr.code.len());
        a.code_next = (at + tr.code.len() as u64).next_multiple_of(16);
        // Exit slots: the translation when there is one, else the thunk.
        a.thunks.extend(initial.iter().copied());
        for ((slot, target), (_, thunk)) in tr.exits.iter().zip(&initial) {
            let v = a.done.get(target).copied().unwrap_or(*thunk);
            u64_at(local(*slot)).store(v, Ordering::Release);
            if !a.done.contains_key(target) {
                a.waiting.entry(*target).or_default().push(*slot);
            }
        }
        // The code (and on aarch64 its exit slots) as the thread will
        // fetch it.
        blocks::code_written(written.0, written.1);
        // The block's bytes as they are in memory now (our jumps
        // included): the dispatcher compares them before each use.
        let size = block.size() as u64;
        let snap = a.slot_next.next_multiple_of(8);
        let mut raw = vec![0u8; size as usize];
        if snap + size > end || self.mem.read_at(&mut raw, addr).ok() != Some(raw.len()) {
            return Err("no room for the block's copy in the code cache".into());
        }
        a.slot_next = snap + size;
        // SAFETY: inside the arena's data part (checked above).
        unsafe { std::ptr::copy_nonoverlapping(raw.as_ptr(), local(snap), raw.len()) };
        a.done.insert(addr, at);
        a.blocks.insert(addr, block);
        // The table: the value and the copy, then the key (Release); a
        // block translated again takes its entry over.
        let mut k = ((addr >> 2) & (blocks::TABLE_ENTRIES - 1)) as usize;
        let mut placed = false;
        for _ in 0..blocks::TABLE_ENTRIES {
            let e = a.addrs.table + blocks::TABLE_ENTRY * k as u64;
            let key = u64_at(local(e));
            let was = key.load(Ordering::Relaxed);
            if was == 0 || was == addr {
                u64_at(local(e + 8)).store(at, Ordering::Relaxed);
                u64_at(local(e + 16)).store(snap, Ordering::Relaxed);
                u64_at(local(e + 24)).store(size, Ordering::Relaxed);
                key.store(addr, Ordering::Release);
                if was == 0 {
                    a.entries += 1;
                }
                placed = true;
                break;
            }
            k = (k + 1) % blocks::TABLE_ENTRIES as usize;
        }
        if !placed {
            return Err("the code cache's table is full".into());
        }
        for slot in a.waiting.remove(&addr).unwrap_or_default() {
            u64_at(local(slot)).store(at, Ordering::Release);
        }
        Ok(at)
    }

    /// What the target overwrote of arena `i`'s constants (the code
    /// trusts them), if anything.
    fn damage(&self, i: usize) -> Option<&'static str> {
        let v = self.pool.view();
        let a = &self.arenas[i].addrs;
        let half = a.buf_size / 2;
        let word = |off: u64| u64_at(v.at(a.at(off))).load(Ordering::Relaxed);
        let fixed = [
            (ctl::TABLE, a.table),
            (ctl::BUF_START, a.buf),
            (ctl::HALF_START, a.buf),
            (ctl::HALF_START + 8, a.buf + half),
            (ctl::HALF_END, a.buf + half),
            (ctl::HALF_END + 8, a.buf + a.buf_size),
            (ctl::TIMESPEC + 8, 10_000_000),
        ];
        fixed.iter().any(|&(off, want)| word(off) != want).then_some("its control block")
    }

    /// Arena `i`'s pending request, if any.
    fn answer(&mut self, i: usize) {
        let v = self.pool.view();
        let local = move |x: u64| v.at(x);
        let addrs = self.arenas[i].addrs;
        if let Some(what) = self.damage(i) {
            // The code there may loop or fault now: the program's doing.
            // Abandoned (its thread leaves at its next transfer, if it
            // can), the file ends here.
            u32_at(local(addrs.at(ctl::ABANDONED))).store(1, Ordering::Release);
            self.finish(i, false, Some(format!("the target overwrote the code cache's arena ({what})")));
            return;
        }
        self.drain_filled(i);
        let gen = u32_at(local(addrs.at(ctl::REQ_GEN))).load(Ordering::Acquire);
        if gen == self.arenas[i].acked {
            if u32_at(local(addrs.at(ctl::ABANDONED))).load(Ordering::Acquire) != 0 {
                self.finish(i, false, Some("the thread stopped waiting for the tracer".into()));
            }
            return;
        }
        let kind = u32_at(local(addrs.at(ctl::REQ_KIND))).load(Ordering::Relaxed);
        let mut ended = None;
        match kind {
            blocks::REQ_TRANSLATE => {
                let want = u64_at(local(addrs.at(ctl::REQ_ADDR))).load(Ordering::Relaxed);
                let traced = self.traced.lock().map(|t| t.clone()).unwrap_or_default();
                if let Err(e) = self.translate(i, want, &traced) {
                    // Leave for the real code there: the trace ends.
                    ended = Some(format!("stopped at {want:#x}: {e} (--itrace-step single-steps such code)"));
                    let a = &self.arenas[i];
                    u32_at(local(a.addrs.at(ctl::ABANDONED))).store(1, Ordering::Release);
                }
            }
            blocks::REQ_CHANGED => {
                let want = u64_at(local(addrs.at(ctl::REQ_ADDR))).load(Ordering::Relaxed);
                let traced = self.traced.lock().map(|t| t.clone()).unwrap_or_default();
                // Its records so far go out with the block as it was (the
                // thread waits: the half it fills is still).
                self.drain(i);
                if let Some(rec) = self.arenas[i].rec.as_mut() {
                    rec.forget_block(want);
                }
                self.arenas[i].done.remove(&want);
                self.report.retranslated += 1;
                if let Err(e) = self.translate_new(i, want, &traced) {
                    ended = Some(format!("stopped at {want:#x}: {e} (--itrace-step single-steps such code)"));
                    u32_at(local(addrs.at(ctl::ABANDONED))).store(1, Ordering::Release);
                }
            }
            blocks::REQ_UNWOUND => {
                self.arenas[i].acked = gen;
                u32_at(local(addrs.at(ctl::ACK_GEN))).store(gen, Ordering::Release);
                wake(local(addrs.at(ctl::ACK_GEN)));
                self.finish(
                    i,
                    false,
                    Some("the call's frame was left other than by its return (longjmp, an exception)".into()),
                );
                return;
            }
            blocks::REQ_DONE => {
                self.arenas[i].acked = gen;
                u32_at(local(addrs.at(ctl::ACK_GEN))).store(gen, Ordering::Release);
                wake(local(addrs.at(ctl::ACK_GEN)));
                self.finish(i, true, None);
                return;
            }
            _ => {}
        }
        self.arenas[i].acked = gen;
        u32_at(local(addrs.at(ctl::ACK_GEN))).store(gen, Ordering::Release);
        wake(local(addrs.at(ctl::ACK_GEN)));
        if let Some(why) = ended {
            self.finish(i, false, Some(why));
        }
    }

    /// The halves the thread handed over, in the order it filled them
    /// (0, 1, 0, 1…); each empty again after.
    fn drain_filled(&mut self, i: usize) {
        let v = self.pool.view();
        let addrs = self.arenas[i].addrs;
        for _ in 0..2 {
            let h = self.arenas[i].next_half;
            let filled = u64_at(v.at(addrs.at(ctl::FILLED + 8 * h)));
            let end = filled.load(Ordering::Acquire);
            if end == 0 {
                break;
            }
            let start = addrs.buf + h * (addrs.buf_size / 2);
            self.drain_range(i, start, end.clamp(start, start + addrs.buf_size / 2));
            filled.store(0, Ordering::Release);
            self.arenas[i].next_half ^= 1;
        }
    }

    /// `itrace:start`, once: the registers at the entry, the vector ones
    /// as the prologue stored them.
    fn ensure_started(&mut self, i: usize) {
        let v = self.pool.view();
        let a = &mut self.arenas[i];
        let Some((regs, ret)) = a.pending_start.take() else { return };
        // SAFETY: inside the arena's data part.
        let vectors = unsafe { std::slice::from_raw_parts(v.at(a.addrs.at(ctl::START_VEC)), blocks::START_VEC_BYTES) };
        let regs = blocks::start_regs(&regs, vectors);
        if let Some(rec) = a.rec.as_mut() {
            if let Err(e) = rec.start(&regs, ret) {
                self.report.warnings.push(format!("{}: {e}", a.path.display()));
            }
        }
    }

    /// The records in `[start, end)` of arena `i`'s buffer into its
    /// recorder.
    fn drain_range(&mut self, i: usize, start: u64, end: u64) {
        self.ensure_started(i);
        let v = self.pool.view();
        let a = &mut self.arenas[i];
        if a.garbled || end <= start || start < a.addrs.buf || end > a.addrs.buf + a.addrs.buf_size {
            return;
        }
        // SAFETY: inside the arena's buffer (checked above).
        let bytes = unsafe { std::slice::from_raw_parts(v.at(start), (end - start) as usize) };
        let Some(rec) = a.rec.as_mut() else { return };
        let word = |k: usize| bytes.get(k..k + 8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        let mut at = 0usize;
        let mut last: Option<(u64, &X64Block, usize)> = None;
        let mut bad = None;
        while at + 8 <= bytes.len() {
            let Some(addr) = word(at) else { break };
            let (block, n) = match last {
                Some((la, b, n)) if la == addr => (b, n),
                _ => {
                    let Some(block) = a.blocks.get(&addr) else {
                        bad =
                            Some(format!("a record names {addr:#x}, not a block of this trace: the rest was dropped"));
                        break;
                    };
                    let n = blocks::record_values(block);
                    last = Some((addr, block, n));
                    (block, n)
                }
            };
            let Some(values) = bytes.get(at + 8..at + 8 + n) else {
                bad = Some(format!("the last record of block {addr:#x} is cut short: dropped"));
                break;
            };
            at += 8 + n;
            self.report.instructions += block.insns.len() as u64;
            self.report.records += 1;
            if let Err(e) = rec.replay_raw(block, values) {
                bad = Some(e.to_string());
                break;
            }
        }
        if let Some(b) = bad {
            a.garbled = true;
            self.report.warnings.push(format!("{}: {b}", a.path.display()));
        }
    }

    /// Everything left: the halves handed over, then the one being filled.
    fn drain(&mut self, i: usize) {
        self.drain_filled(i);
        let v = self.pool.view();
        let addrs = self.arenas[i].addrs;
        let on = self.arenas[i].next_half;
        let start = addrs.buf + on * (addrs.buf_size / 2);
        let cursor = u64_at(v.at(addrs.at(ctl::CURSOR)));
        let end = cursor.load(Ordering::Acquire).clamp(start, start + addrs.buf_size / 2);
        self.drain_range(i, start, end);
        cursor.store(start, Ordering::Release);
    }

    /// The trace of arena `i` is over: its file ends (with `itrace:end`
    /// when the call returned).
    fn finish(&mut self, i: usize, returned: bool, why: Option<String>) {
        self.ensure_started(i);
        self.drain(i);
        // Self-modifying code: a block whose bytes changed since it was
        // translated ran as it was (the translation), perhaps not as the
        // program meant; said, with where.
        let traced = self.traced.lock().map(|t| t.clone()).unwrap_or_default();
        let changed: Vec<u64> = self.arenas[i]
            .blocks
            .values()
            .filter(|b| {
                let mut now = vec![0u8; b.code.len()];
                read_code(&self.mem, &traced, b.address, &mut now) == now.len() && now != b.code
            })
            .map(|b| b.address)
            .collect();
        let a = &mut self.arenas[i];
        if let Some(first) = changed.iter().min() {
            self.report.warnings.push(format!(
                ".itrace of {}: the code of {} block(s) changed while it was traced (self-modifying code, first at \
                 {first:#x}): {} records what the blocks were when first run; --itrace-step follows the changes",
                a.name,
                changed.len(),
                a.path.display()
            ));
        }
        if let Some(rec) = a.rec.take() {
            let r = if returned { rec.end() } else { rec.finish() };
            if let Err(e) = r {
                self.report.warnings.push(format!("{}: {e}", a.path.display()));
            }
        }
        if let Some(w) = why {
            self.report.warnings.push(format!(".itrace of {}: {w}; {} is incomplete", a.name, a.path.display()));
        }
        a.state = if returned { ArenaState::Free } else { ArenaState::Dead };
    }

    /// The session ends: threads still in an arena leave it at their next
    /// block (every exit back to its thunk, the table empty, the arena
    /// abandoned, a pending request answered); the files of calls still
    /// running end without `itrace:end`.
    pub fn stop_all(&mut self) {
        let v = self.pool.view();
        for i in 0..self.arenas.len() {
            if matches!(self.arenas[i].state, ArenaState::Free) {
                continue;
            }
            let a = &self.arenas[i];
            u32_at(v.at(a.addrs.at(ctl::ABANDONED))).store(1, Ordering::Release);
            for &(slot, thunk) in &a.thunks {
                u64_at(v.at(slot)).store(thunk, Ordering::Release);
            }
            // The keys only: a thread that matched one still finds its value.
            for k in 0..blocks::TABLE_ENTRIES {
                u64_at(v.at(a.addrs.table + blocks::TABLE_ENTRY * k)).store(0, Ordering::Release);
            }
            let gen = u32_at(v.at(a.addrs.at(ctl::REQ_GEN))).load(Ordering::Acquire);
            u32_at(v.at(a.addrs.at(ctl::ACK_GEN))).store(gen, Ordering::Release);
            wake(v.at(a.addrs.at(ctl::ACK_GEN)));
            if matches!(a.state, ArenaState::Busy) {
                self.finish(i, false, Some("the session ended during the call".into()));
            }
        }
    }

    /// The pool's code ranges in the target (a thread there is inside).
    pub fn code_ranges(&self) -> Vec<(u64, u64)> {
        self.arenas.iter().map(|a| (a.addrs.code, a.addrs.code_size)).collect()
    }
}

fn wake(word: *mut u8) {
    crate::os::sys::futex_wake(u32_at(word));
}
