//! `.itrace` probes: every instruction of a call, single-stepped with
//! ptrace, into Frida's ITRC format (the `telco-itrc` crate).
//!
//! The hot path never traps: a traced function's trampoline runs the probe
//! handlers, then its gate (`trampoline::itrace_gate`) saves every register
//! as at the entry and calls `rt_itrace_wait`, which posts a request in the
//! region (an `ItraceSlot`: claim a free slot, fill it, publish WAITING) and
//! waits, bounded (2 s, or the session's end). `Itracer::poll` (from the
//! session's poll, every 10 ms) serves them: it seizes the waiting thread
//! alone (`os::ptrace::Thread`; the others run on) and takes the request
//! only once the thread is stopped (compare-and-swap WAITING → TAKEN: a
//! thread that gave up first has freed the slot). It restarts the thread
//! from the saved registers at the function's relocated first instructions
//! (no system call to restart) and steps it until the call returns (the pc
//! at the return address, the stack pointer one word above the entry's),
//! feeding a `telco_itrc::Recorder`. Then the thread is let go.
//!
//! Each traced call is one ITRC file: `FILE` for the first, `FILE.2`,
//! `FILE.3`… after it. `-D MAXITRACE=N` calls (16 by default) are traced;
//! later calls find no request slot and run untraced, as do calls that
//! waited too long and a forked child's (the request is DECLINED: the child
//! frees the slot and runs on); all are counted and reported. The trace
//! reports the function's own addresses and bytes: the relocated copy of its
//! first instructions is mapped back, the original bytes are read where our
//! jumps are, and when the traced code enters the hook of a traced function
//! again (a loop back to the entry, recursion) it goes straight to the
//! relocated copy. A session with `.itrace` probes does not follow execs
//! (the single-stepper attaches to threads itself).
//!
//! On aarch64 only the single-stepper runs (the block tracer is not ported:
//! `Session::itrace_to` steps there), writing Frida's arm64 layout
//! (`telco_itrc::a64`).

use crate::arch::native as arch;
use crate::os::ptrace::{PtraceError, Thread};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use telco_abi::region::{self as abi, ItraceSlot, SavedRegs};

/// Target memory at `addr` into `buf` (how many bytes were read), with the
/// traced functions' own bytes where our jumps are: the code both recorders
/// decode.
pub(crate) fn read_code(mem: &File, traced: &[Traced], addr: u64, buf: &mut [u8]) -> usize {
    let n = mem.read_at(buf, addr).unwrap_or(0);
    for t in traced {
        t.unpatch(addr, buf, n);
    }
    n
}

/// The registers a gate saved at `regs_at` (a `SavedRegs` block).
pub(crate) fn saved_regs(mem: &File, regs_at: u64) -> Result<[u64; telco_abi::arch::native::NREGS], String> {
    let mut saved = [0u8; core::mem::size_of::<SavedRegs>()];
    mem.read_exact_at(&mut saved, regs_at).map_err(|e| format!("reading the saved registers: {e}"))?;
    let mut words = SavedRegs::default().words;
    for (w, b) in words.iter_mut().zip(saved.chunks_exact(8)) {
        *w = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    }
    Ok(words)
}

/// A waiting request the tracer will not take: its thread frees the slot
/// and runs on untraced (counted).
pub(crate) fn decline(state: &std::sync::atomic::AtomicU32) {
    use std::sync::atomic::Ordering;
    let _ = state.compare_exchange(abi::ITRACE_WAITING, abi::ITRACE_DECLINED, Ordering::AcqRel, Ordering::Relaxed);
    // The thread sleeps on the state (`rt_itrace_wait`).
    crate::os::sys::futex_wake(state);
}

/// The file of the `k`-th traced call (1-based): `path`, `path.2`, …
pub fn call_file(path: &Path, k: u64) -> PathBuf {
    if k == 1 {
        return path.to_path_buf();
    }
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".{k}"));
    path.with_file_name(name)
}

/// A traced function as hooked in the target.
#[derive(Clone, Debug)]
pub struct Traced {
    pub name: String,
    /// Where its jump to the trampoline is, and the bytes it replaced.
    pub patch_at: u64,
    pub original: Vec<u8>,
    /// The relocated copy of those bytes in the trampoline.
    pub resume: u64,
    /// (relocated address, original address) of each copied instruction;
    /// the last entry is the jump back, mapped to the first byte after the
    /// replaced ones.
    pub map: Vec<(u64, u64)>,
    /// The function's other patched bytes (a loop's branches back to the
    /// entry, retargeted to `loop_entry`) and what they were.
    pub extra: Vec<(u64, Vec<u8>)>,
    /// Where those branches now go: a second jump to `resume`.
    pub loop_entry: Option<u64>,
}

impl Traced {
    pub fn new(name: String, patch_at: u64, original: Vec<u8>, resume: u64, relocated: &[u8]) -> Traced {
        let orig = arch::instruction_starts(&original, patch_at);
        let reloc = arch::instruction_starts(relocated, resume);
        let end = patch_at + original.len() as u64;
        let map = if reloc.len() == orig.len() + 1 {
            reloc.iter().copied().zip(orig.iter().copied().chain([end])).collect()
        } else {
            // The relocation changed the instruction count (aarch64 widens
            // a PC-relative instruction out of reach, or a far jump back,
            // into several words): report the copy as the entry.
            reloc.iter().map(|&r| (r, patch_at)).collect()
        };
        Traced { name, patch_at, original, resume, map, extra: Vec::new(), loop_entry: None }
    }

    /// The function's own bytes at `addr` into `buf` (`n` read there):
    /// where our jumps are, what they replaced.
    pub fn unpatch(&self, addr: u64, buf: &mut [u8], n: usize) {
        let patches = std::iter::once((self.patch_at, &self.original)).chain(self.extra.iter().map(|(a, b)| (*a, b)));
        for (at, bytes) in patches {
            for (i, &b) in bytes.iter().enumerate() {
                let a = at + i as u64;
                if a >= addr && a < addr + n as u64 {
                    buf[(a - addr) as usize] = b;
                }
            }
        }
    }

    /// The function's address for a trampoline address, if it is one of
    /// the copied instructions.
    fn original_of(&self, addr: u64) -> Option<u64> {
        self.map.iter().find(|(r, _)| *r == addr).map(|(_, o)| *o)
    }
}

/// The session's side: polls the request slots and traces calls.
pub struct Itracer {
    pid: i32,
    mem: File,
    /// The region's header, mapped in the tracer.
    header: *const u8,
    /// Where the request slots are and how many (the artifact's word: the
    /// region's copy is the target's to overwrite).
    slots_off: u64,
    nslots: u32,
    path: PathBuf,
    max_calls: u64,
    max_steps: u64,
    pub calls: u64,
    pub steps: u64,
    pub stepping: std::time::Duration,
    pub warnings: Vec<String>,
    /// `Header::itrace_missed` as last read (the region is gone by the
    /// time the session reports).
    pub missed: u64,
}

// SAFETY: the header pointer is only used on the session's thread.
unsafe impl Send for Itracer {}

impl Itracer {
    /// `slots`: the artifact's request slots (offset, count) and the
    /// region's size.
    pub fn new(
        pid: i32,
        header: *const u8,
        slots: (u64, u32, u64),
        path: &Path,
        max_calls: u64,
    ) -> std::io::Result<Itracer> {
        let (slots_off, nslots, region_size) = slots;
        let end = slots_off.checked_add(u64::from(nslots) * core::mem::size_of::<ItraceSlot>() as u64);
        if end.is_none_or(|e| e > region_size) {
            return Err(std::io::Error::other("internal error: the artifact's .itrace slots lie outside its region"));
        }
        Ok(Itracer {
            slots_off,
            nslots,
            pid,
            mem: crate::os::proc::mem(pid, false)?,
            header,
            path: path.to_path_buf(),
            max_calls,
            max_steps: 50_000_000,
            calls: 0,
            steps: 0,
            stepping: std::time::Duration::ZERO,
            warnings: Vec::new(),
            missed: 0,
        })
    }

    fn field<T>(&self, off: usize) -> *mut T {
        // SAFETY: offsets inside the live header.
        unsafe { self.header.add(off) as *mut T }
    }

    /// The request slots: the artifact's, none once the tracer has
    /// closed them (`itrace_slots` zeroed at MAXITRACE).
    fn slots(&self) -> (u64, u32) {
        (self.slots_off, if self.calls >= self.max_calls { 0 } else { self.nslots })
    }

    /// Read the calls that went untraced (no free slot, waited too long,
    /// after MAXITRACE, another process) into `missed`; the session calls
    /// this while the region is still mapped.
    pub fn count_missed(&mut self) {
        // SAFETY: a header counter updated atomically by the target.
        self.missed = unsafe {
            std::sync::atomic::AtomicU64::from_ptr(self.field(core::mem::offset_of!(abi::Header, itrace_missed)))
                .load(std::sync::atomic::Ordering::Relaxed)
        };
    }

    /// Take and trace every waiting request.
    pub fn poll(&mut self, traced: &[Traced]) {
        use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
        let (off, n) = self.slots();
        for i in 0..n as usize {
            let base = off as usize + i * core::mem::size_of::<ItraceSlot>();
            // SAFETY: the slot lies in the region; its state is a u32 the
            // target changes atomically.
            let state = unsafe { AtomicU32::from_ptr(self.field(base + core::mem::offset_of!(ItraceSlot, state))) };
            // Acquire: pairs with rt_itrace_wait's Release store of WAITING.
            if state.load(Ordering::Acquire) != abi::ITRACE_WAITING {
                continue;
            }
            // SAFETY: fields of a published request.
            let (tid, regs_at, func, pid) = unsafe {
                (
                    *self.field::<u32>(base + core::mem::offset_of!(ItraceSlot, tid)),
                    *self.field::<u64>(base + core::mem::offset_of!(ItraceSlot, regs)),
                    *self.field::<u64>(base + core::mem::offset_of!(ItraceSlot, func)),
                    AtomicU64::from_ptr(self.field(base + core::mem::offset_of!(ItraceSlot, pid)))
                        .load(Ordering::Relaxed),
                )
            };
            // A forked child's thread (its memory is not the one we read)
            // runs on untraced (and is counted). The tid is the target's
            // word: only a thread of the traced process is ever seized
            // (checked again once it is stopped, when it can no longer
            // exit and be replaced).
            let ours = |tid: u32| i32::try_from(tid).ok().filter(|&t| crate::os::proc::tgid(t) == Some(self.pid));
            let asked = pid == self.pid as u64 && (func as usize) < traced.len();
            let Some(tid) = asked.then(|| ours(tid)).flatten() else {
                decline(state);
                continue;
            };
            let Ok(thread) = Thread::seize(tid) else { continue };
            if ours(tid as u32).is_none() {
                let _ = thread.detach();
                continue;
            }
            // The thread is stopped: if it still waits, the request is ours.
            if state
                .compare_exchange(abi::ITRACE_WAITING, abi::ITRACE_TAKEN, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                let _ = thread.detach();
                continue;
            }
            let r = self.trace(thread, regs_at, &traced[func as usize], traced);
            // Release: the slot's next owner sees it free after we are done.
            state.store(abi::ITRACE_FREE, Ordering::Release);
            if let Err(e) = r {
                self.warnings.push(format!(".itrace of {}: {e}", traced[func as usize].name));
            }
            if self.calls >= self.max_calls {
                // Enough: the gates stop asking (rt_itrace_wait counts the
                // calls from now on as untraced).
                // SAFETY: header field, atomically read by the target, in
                // the region and in its trusted mirror (MIRROR_GAP below it
                // here too), where the gates read it.
                unsafe {
                    let at: *mut u32 = self.field(core::mem::offset_of!(abi::Header, itrace_slots));
                    AtomicU32::from_ptr(at).store(0, Ordering::Relaxed);
                    AtomicU32::from_ptr(at.byte_sub(abi::MIRROR_GAP as usize)).store(0, Ordering::Relaxed);
                };
                return;
            }
        }
    }

    fn file(&self, k: u64) -> PathBuf {
        call_file(&self.path, k)
    }

    fn read(&self, addr: u64, buf: &mut [u8], traced: &[Traced]) -> usize {
        read_code(&self.mem, traced, addr, buf)
    }

    fn trace(&mut self, mut thread: Thread, regs_at: u64, f: &Traced, traced: &[Traced]) -> Result<(), String> {
        use crate::os::ptrace::Step;
        use std::io::BufWriter;
        use telco_itrc::{IsaRecorder, RecorderConfig};
        let t0 = std::time::Instant::now();
        let words = saved_regs(&self.mem, regs_at)?;
        let mut r = thread.regs().map_err(err)?;
        arch::load_saved(&mut r, &words);
        arch::set_pc(&mut r, f.resume);
        // Not in a system call any more: nothing to restart.
        arch::forget_syscall(&mut r);
        thread.set_regs(&r).map_err(err)?;
        self.calls += 1;
        let entry_sp = arch::sp(&r);
        // The return address: on the stack (x86_64) or in the link register.
        let word = |a: u64| {
            let mut b = [0u8; 8];
            self.mem.read_exact_at(&mut b, a).ok().map(|()| u64::from_le_bytes(b))
        };
        let ret = arch::return_address(&r, &word).ok_or("reading the return address failed")?;
        let path = self.file(self.calls);
        let out = crate::outfile::create(&path).map_err(|e| format!("cannot create `{}`: {e}", path.display()))?;
        let cfg = RecorderConfig { max_bytes: Some(1 << 30), chunk_size: 1 << 20, ..RecorderConfig::default() };
        let mut rec = IsaRecorder::<_, arch::ItrcIsa>::new(BufWriter::with_capacity(1 << 20, out), cfg)
            .map_err(|e| e.to_string())?;
        let mut shown = r;
        arch::set_pc(&mut shown, f.patch_at);
        let vectors = thread.vector_regs().map_err(err)?;
        rec.start(&arch::itrc_regs_with(&shown, &vectors), ret).map_err(|e| e.to_string())?;
        let mut done = false;
        let mut steps = 0u64;
        while steps < self.max_steps {
            let before = arch::pc(&r);
            match thread.step().map_err(err)? {
                Step::Exited => break,
                Step::Signal => continue,
                Step::Done => {}
            }
            steps += 1;
            r = thread.regs().map_err(err)?;
            // Entering the hook of a traced function again: run its
            // relocated first instructions directly (no handlers, no gate).
            // (Or its loops' way back in, the second jump.)
            if let Some(g) = traced.iter().find(|g| g.patch_at == arch::pc(&r) || g.loop_entry == Some(arch::pc(&r))) {
                arch::set_pc(&mut r, g.resume);
                thread.set_regs(&r).map_err(err)?;
            }
            let map = |a: u64| traced.iter().find_map(|g| g.original_of(a)).unwrap_or(a);
            // Our jump back from the relocated copy is not the program's.
            let ours = traced.iter().any(|g| g.map.last().is_some_and(|l| l.0 == before));
            if !ours {
                let mut shown = r;
                arch::set_pc(&mut shown, map(arch::pc(&r)));
                // A system call saved the flags with our trap flag set.
                arch::hide_step_flag_after_syscall(&mut shown, &|a, b| self.read(a, b, traced), before);
                let mut read = |a: u64, buf: &mut [u8]| self.read(a, buf, traced);
                let vectors = thread.vector_regs().map_err(err)?;
                rec.step(map(before), &arch::itrc_regs_with(&shown, &vectors), &mut read).map_err(|e| e.to_string())?;
            }
            // Returned: at the return address, the stack popped.
            if arch::pc(&r) == ret && arch::sp(&r) == arch::sp_after_return(entry_sp) {
                done = true;
                break;
            }
        }
        self.steps += steps;
        let stats = if done { rec.end() } else { rec.finish() }.map_err(|e| e.to_string())?.1;
        if !done {
            self.warnings.push(format!(
                ".itrace of {}: stopped after {steps} instructions (the call had not returned); {} is incomplete",
                f.name,
                path.display()
            ));
        }
        if stats.lost > 0 {
            self.warnings.push(format!("{}: {} block records lost (size limit)", path.display(), stats.lost));
        }
        self.stepping += t0.elapsed();
        if done {
            thread.detach().map_err(err)?;
        }
        Ok(())
    }
}

fn err(e: PtraceError) -> String {
    e.to_string()
}
