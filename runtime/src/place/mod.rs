//! Placement: the only code that writes machine code into a target. For
//! each probed site it builds a trampoline (`arch::native::trampoline`),
//! relocates the displaced instructions (`arch::native::patch`), and plans
//! the patch (address, original bytes, new bytes); `apply` writes the
//! plans with no thread inside the bytes that change.
//!
//! Placement reads and writes the target through [`Memory`], which a
//! stopped process implements and so does a byte buffer ([`Buffer`]):
//! overlaps, hops, veneers and lead-ins are unit-tested without a
//! process (`tests` below).

use crate::arch::native::{self as arch, clobber, patch, trampoline};
use crate::error::TargetError;
use crate::inject::{self, CodeRegion};
use crate::os::proc::{runtime_addr, Mapping};
use crate::os::ptrace::Stopped;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use telco_abi::artifact::{Artifact, Attach};

mod kinds;
mod memory;
mod module;
#[cfg(test)]
mod tests;

pub use memory::{Buffer, Memory};

/// One placed hook: where, and the bytes to put back.
#[derive(Clone)]
pub(crate) struct Patch {
    pub(crate) at: u64,
    pub(crate) original: Vec<u8>,
    /// What was written there (a forked child's copy is restored only
    /// where it still holds these bytes).
    pub(crate) patched: Vec<u8>,
}

/// The first planned patch that shares a byte with `[lo, hi)`: where it is.
pub(crate) fn overlapping(plans: &[Plan], lo: u64, hi: u64) -> Option<u64> {
    plans.iter().find(|(at, orig, _)| lo < at + orig.len() as u64 && *at < hi).map(|(at, _, _)| *at)
}

/// What hooking needs to know about the artifact and the injected region.
#[derive(Clone)]
pub(crate) struct Hooker {
    pub(crate) artifact: Artifact,
    pub(crate) region: u64,
    pub(crate) ret_push: u32,
    pub(crate) ret_pop: u32,
    pub(crate) enter: u32,
    /// `rt_enter_go` (`trampoline::GoEntry::enter`), `rt_go_push` and
    /// `rt_go_pop` (return probes on Go functions).
    pub(crate) enter_go: Option<u32>,
    pub(crate) go_push: Option<u32>,
    pub(crate) go_pop: Option<u32>,
    pub(crate) dlnotify: u32,
    /// `rt_itrace_wait`, and the `.itrace` functions hooked so far (their
    /// index is what their gate passes).
    pub(crate) itrace_wait: Option<u32>,
    pub(crate) itraced: std::cell::RefCell<Vec<crate::itrace::Traced>>,
    /// Functions whose trampolines time and record their calls themselves
    /// (`trampoline::ClockOnly`), for `-vv`.
    pub(crate) timed: std::cell::RefCell<Vec<String>>,
    /// `rt_span_flush` (`--chrome` calls recorded inline).
    pub(crate) span_flush: Option<u32>,
    /// `rt_execnotify` when execs are followed (`hook_execs`).
    pub(crate) exec_notify: Option<u32>,
    /// The runtime's own entry hooks by run-time address, and whether the
    /// hook needs the whole context: the C library's `execve`/`execveat`
    /// (`rt_execnotify`), the unwinder's entry points and the C++ catch
    /// when return probes are armed (`rt_unwind`/`rt_caught`), the
    /// loader's `r_brk` while libraries are awaited (`rt_dlnotify`). A
    /// probe of the script's on one of those functions calls the hook too
    /// (its trampoline is the hook there; `arm` and `hook_execs` leave the
    /// site to it), instead of the two patching one entry and the second
    /// winning. Addresses of the armed process: a program it execs gets
    /// its own exec entries only.
    pub(crate) entry_hooks: std::cell::RefCell<BTreeMap<u64, (u32, bool)>>,
    /// The runtime's hooks that run on every call, slot or not
    /// (`trampoline::Entry::always`), by run-time address: the C library's
    /// `sigaction` (`rt_trap_sigaction`) and `pthread_sigmask`/`sigprocmask`
    /// (`rt_trap_sigmask`), which keep SIGTRAP unblocked for trap probes.
    /// A probe of the script's on one of them calls the hook too.
    pub(crate) always_hooks: std::cell::RefCell<BTreeMap<u64, u32>>,
    /// `Header::threads_at` and `Header::tcb_tid_off`.
    pub(crate) threads_at: u64,
    pub(crate) tid_off: u32,
    /// Every trampoline's copy of its function's first instructions
    /// (`SymReloc`: copy, its length, original, its length).
    pub(crate) relocs: std::cell::RefCell<Vec<(u64, u32, u64, u32)>>,
    /// Pages of veneers for the module being hooked (`Hooker::veneer`), given
    /// to the caller of `module` with its code region.
    pub(crate) veneers: std::cell::RefCell<Vec<CodeRegion>>,
    /// Our code in the target's processes, for the profiler's unwinder;
    /// the blob's rows (the same in every code region) made once.
    pub(crate) own: crate::owncode::Shared,
    pub(crate) blob_rows: std::cell::OnceCell<std::sync::Arc<[crate::owncode::Row]>>,
    /// The session samples (`timer.profile`): only then is our code
    /// registered, its rows read (work at every attach otherwise).
    pub(crate) profiling: bool,
    /// The modules whose probes were placed in some process of the
    /// session (the others are said at the end: `Armed::say_unmapped`).
    pub(crate) placed_in: std::cell::RefCell<std::collections::BTreeSet<PathBuf>>,
    /// The probes placed with a trap, in every process so far (`Trapped`).
    pub(crate) trapped: std::cell::RefCell<Vec<Trapped>>,
}

/// A probe placed with a trap where no jump fits: in which process, the
/// trap's address and its trampoline (`rt_trap`'s table), what it probes
/// and why no jump fit (`-v`).
#[derive(Clone, Debug)]
pub(crate) struct Trapped {
    pub(crate) pid: i32,
    pub(crate) site: u64,
    pub(crate) tramp: u64,
    pub(crate) name: String,
    pub(crate) why: String,
}

/// What one function's trampoline calls (`trampoline::Entry`).
pub(crate) struct Tramp {
    pub(crate) handlers: Vec<(u64, u32)>,
    pub(crate) returns: Vec<(u32, Option<u64>)>,
    pub(crate) ret_tramp: u64,
    pub(crate) lean: Option<clobber::RegMask>,
    /// An `.itrace` function: its name.
    pub(crate) itrace: Option<String>,
    /// Its `--chrome` return probe, recorded inline (lean trampolines).
    pub(crate) span: Option<u32>,
    /// Nothing but a return probe that times calls (that one, or a
    /// duration into a statistic): the trampolines that only time calls.
    pub(crate) clock_only: Option<trampoline::ClockOnly>,
    /// At a site inside a function (`trampoline::Entry::inside`).
    pub(crate) inside: bool,
    /// Where the function saves its return address (`trampoline::Entry::ra_saved`).
    pub(crate) ra_saved: Option<i32>,
    /// The script's probes (not a runtime hook): where no jump fits, a
    /// trap may take them.
    pub(crate) script: bool,
    /// Pass 2 found no jump for this site: a trap goes there (`Attach::Function::trap`,
    /// `Attach::Statement::trap`).
    pub(crate) trap: bool,
    /// `trampoline::Entry::always`.
    pub(crate) always: Option<(u64, u64)>,
    /// Another probe's site is inside the bytes this one's jump would
    /// take (two markers one after the other): a trap here, so both fire.
    pub(crate) crowded: bool,
    /// A Go function's entry (`trampoline::Entry::go`).
    pub(crate) go: Option<telco_abi::artifact::GoSite>,
}

impl Tramp {
    /// Nothing to run: the displaced instructions and the jump back (a
    /// hop's host that has no probe of its own).
    pub(crate) fn pass_through() -> Self {
        Tramp {
            handlers: Vec::new(),
            returns: Vec::new(),
            ret_tramp: 0,
            lean: Some(0),
            itrace: None,
            span: None,
            clock_only: None,
            inside: false,
            ra_saved: None,
            script: false,
            trap: false,
            always: None,
            crowded: false,
            go: None,
        }
    }

    /// Only a runtime hook called on every call, slot or not
    /// (`trampoline::Entry::always`), with `arg` and the whole context: the
    /// trap probes' signal hooks, and the loader's and exec's
    /// notifications (which need no slot, and must reach the tracer from
    /// a thread without one too).
    pub(crate) fn always(f: u64, arg: u64) -> Self {
        Tramp { lean: None, always: Some((f, arg)), ..Tramp::pass_through() }
    }

    /// Only a call of a runtime function (with the whole context).
    pub(crate) fn call(f: u64) -> Self {
        Tramp {
            handlers: vec![(f, 0)],
            returns: Vec::new(),
            ret_tramp: 0,
            lean: None,
            itrace: None,
            span: None,
            clock_only: None,
            inside: false,
            ra_saved: None,
            script: false,
            trap: false,
            always: None,
            crowded: false,
            go: None,
        }
    }
}

/// A `ProbeEntry::latency` as the trampolines take it: every field the
/// update touches within a 32-bit displacement of the region.
pub(crate) fn stat_inline(l: &telco_abi::artifact::Latency) -> Option<trampoline::StatInline> {
    use telco_abi::region::{HIST_LOG_BUCKETS, STAT_HEADER};
    let end = l.copy + STAT_HEADER as u64 + u64::from(l.hist.unwrap_or(0)) + 8 * u64::from(HIST_LOG_BUCKETS);
    i32::try_from(end).ok()?;
    i32::try_from(l.row).ok()?;
    Some(trampoline::StatInline { copy: l.copy as u32, row: l.row, hist: l.hist })
}

/// A hook ready to be written: address, original bytes, new bytes.
pub(crate) type Plan = (u64, Vec<u8>, Vec<u8>);

/// What [`Hooker::function`] placed: the patch, where the trampoline is,
/// and the branches of a loop back to the entry retargeted past the probe
/// (`patch::plan_loop`: patches too).
pub(crate) struct Placed {
    pub(crate) plan: Plan,
    pub(crate) tramp: u64,
    pub(crate) retargets: Vec<Plan>,
    /// Placed with a trap: why no jump fit.
    pub(crate) trap: Option<String>,
}

impl Placed {
    pub(crate) fn into_plans(self) -> impl Iterator<Item = Plan> {
        std::iter::once(self.plan).chain(self.retargets)
    }
}

impl Hooker {
    /// A return trampoline of its own for one site, calling its return
    /// probes' handlers directly (`direct`: probe index, handler address);
    /// `lean`: what they change (None: every register saved); `span`: the
    /// call timed inline.
    pub(crate) fn direct_return(
        &self,
        s: &mut dyn Memory,
        code: &mut CodeRegion,
        direct: Vec<(u32, u64)>,
        lean: Option<clobber::RegMask>,
        span: Option<&trampoline::SpanInline>,
    ) -> Result<u64, TargetError> {
        let ret_pop = code.at(self.ret_pop);
        let ctx_size = self.artifact.ctx_size;
        place(self, s, code, |at| {
            trampoline::return_trampoline(
                at,
                self.region,
                ctx_size,
                ret_pop,
                &trampoline::Returns::Direct(direct),
                lean,
                &self.shadow(),
                span,
            )
        })
    }
}

/// A function's own return trampoline: assembled where the code region's
/// next allocation starts, given exactly its length, written.
pub(crate) fn place(
    h: &Hooker,
    s: &mut dyn Memory,
    code: &mut CodeRegion,
    assemble: impl FnOnce(u64) -> Result<Vec<u8>, trampoline::AsmError>,
) -> Result<u64, TargetError> {
    let at = code.next.next_multiple_of(16);
    let bytes = assemble(at).map_err(|e| TargetError::Unsupported(format!("assembling a return trampoline: {e}")))?;
    if code.alloc(bytes.len()) != Some(at) {
        return Err(TargetError::Unsupported(
            "the code region has no room for a return trampoline (an internal sizing error: please report it)".into(),
        ));
    }
    s.write(at, &bytes)?;
    h.own_trampoline(s.pid() as u32, at, &bytes, crate::owncode::Kind::Return);
    Ok(at)
}

/// Write the patches, every thread stopped and none inside the bytes that
/// change. A thread there goes on in the trampoline's relocated copy of
/// those instructions instead (`relocs`: copy, its length, original, its
/// length), at the copy of the instruction it was at: no single step, so
/// no trap a dying tracer could leave behind. One where there is no copy
/// (a hop's bytes) is stepped out.
pub(crate) fn apply(
    s: &mut Stopped,
    plans: Vec<Plan>,
    patches: &mut Vec<Patch>,
    relocs: &[(u64, u32, u64, u32)],
) -> Result<(), TargetError> {
    let ranges: Vec<(u64, u64)> = plans.iter().map(|(at, orig, _)| (*at, orig.len() as u64)).collect();
    // A thread just past a system call that ends the bytes (asleep in it,
    // most often) is moved too: were the call restarted (a signal handler
    // with SA_RESTART), the kernel would take it back to the call's start,
    // inside the patch. (`detach::put_back` moves it back.)
    let sys = arch::syscall_instruction();
    for tid in s.threads().collect::<Vec<_>>() {
        let mut r = s.regs(tid)?;
        let pc = arch::pc(&r);
        let Some((at, orig, back)) = plans.iter().find_map(|(at, orig, _)| {
            let end = at + orig.len() as u64;
            if pc > *at && pc < end {
                Some((at, orig, 0))
            } else if pc == end && orig.len() > sys.len() && orig.ends_with(sys) {
                Some((at, orig, sys.len() as u64))
            } else {
                None
            }
        }) else {
            continue;
        };
        let copy = relocs.iter().find(|&&(_, _, o, n)| o == *at && n as usize == orig.len()).map(|r| r.0);
        // The instruction's place in the copy (the call's, then past it).
        if let Some(to) = copy.and_then(|c| arch::patch::relocated_pc(orig, *at, orig.len(), c, pc - back)) {
            arch::set_pc(&mut r, to + back);
            s.set_regs(tid, &r)?;
        }
    }
    step_out(s, &ranges)?;
    for (at, original, patch) in plans {
        s.write(at, &patch)?;
        patches.push(Patch { at, original, patched: patch });
    }
    Ok(())
}

/// At the end of a session: let every thread whose program counter is
/// strictly inside one of `ranges` (start, length) run on until it has
/// left (`Stopped::run_out`: no single steps a dying tracer could leave
/// armed), before those bytes change back.
pub(crate) fn run_out_of(s: &mut Stopped, ranges: &[(u64, u64)]) -> Result<(), String> {
    let inside = |pc: u64| ranges.iter().any(|&(at, n)| pc > at && pc < at + n);
    match s.run_out(&inside, 200).map_err(|e| e.to_string())?.first() {
        Some(tid) => Err(format!("thread {tid} stays inside bytes that must change back")),
        None => Ok(()),
    }
}

/// Single-step every thread whose program counter is strictly inside one
/// of `ranges` (start, length) out of it: bytes about to change under it.
/// A thread that does not leave (a tight loop inside) fails the write.
pub(crate) fn step_out(s: &mut Stopped, ranges: &[(u64, u64)]) -> Result<(), TargetError> {
    let inside = |pc: u64| ranges.iter().any(|&(at, n)| pc > at && pc < at + n);
    let tids: Vec<i32> = s.threads().collect();
    for tid in tids {
        let mut steps = 0;
        while inside(arch::pc(&s.regs(tid)?)) {
            if steps == 4096 {
                return Err(TargetError::Unsupported(format!(
                    "thread {tid} stays inside bytes that must change (a tight loop there): try again"
                )));
            }
            s.step(tid)?;
            steps += 1;
        }
    }
    Ok(())
}

impl Hooker {
    /// A placer for artifact `a` injected with its region at `region` and
    /// its thread slots at `threads_at` (the C library keeps a thread's id
    /// at `tid_off` from the thread pointer); `entry_hooks`: the runtime's
    /// own hooks by run-time address; `exec_notify`: `rt_execnotify` when
    /// execs are followed. An error when the runtime library lacks a
    /// trampoline helper.
    pub(crate) fn new(
        a: &Artifact,
        region: u64,
        threads_at: u64,
        tid_off: u32,
        entry_hooks: BTreeMap<u64, (u32, bool)>,
        exec_notify: Option<u32>,
    ) -> Result<Hooker, TargetError> {
        let symbol = |name: &str| a.symbols.iter().find(|s| s.name == name).map(|s| s.offset);
        let (Some(ret_push), Some(ret_pop), Some(enter), Some(dlnotify)) =
            (symbol("rt_ret_push"), symbol("rt_ret_pop"), symbol("rt_enter"), symbol("rt_dlnotify"))
        else {
            return Err(TargetError::Unsupported("the runtime library lacks a trampoline helper".into()));
        };
        Ok(Hooker {
            entry_hooks: std::cell::RefCell::new(entry_hooks),
            artifact: a.clone(),
            region,
            ret_push,
            ret_pop,
            enter,
            enter_go: symbol("rt_enter_go"),
            go_push: symbol("rt_go_push"),
            go_pop: symbol("rt_go_pop"),
            dlnotify,
            itrace_wait: symbol("rt_itrace_wait"),
            itraced: Default::default(),
            timed: Default::default(),
            span_flush: symbol("rt_span_flush"),
            exec_notify,
            threads_at,
            tid_off,
            relocs: Default::default(),
            veneers: Default::default(),
            own: Default::default(),
            blob_rows: Default::default(),
            profiling: a.probes.iter().any(|p| matches!(p.attach, Attach::Profile { .. } | Attach::Blocked)),
            placed_in: Default::default(),
            trapped: Default::default(),
            always_hooks: Default::default(),
        })
    }
}

impl Hooker {
    /// A piece of our code into the unwinders' map (when profiling).
    pub(crate) fn own_add(&self, pid: u32, start: u64, end: u64, kind: crate::owncode::Kind) {
        if !self.profiling {
            return;
        }
        if let Ok(mut o) = self.own.write() {
            o.add(pid, start, end, kind, Vec::new().into());
        }
    }

    /// A code region's blob (compiled handlers, runtime library) into the
    /// unwinders' map of our code.
    pub(crate) fn own_blob(&self, pid: u32, code: &CodeRegion) {
        if !self.profiling {
            return;
        }
        let rows = self.blob_rows.get_or_init(|| {
            let a = &self.artifact;
            let mut rows = Vec::new();
            for sym in &a.symbols {
                let (lo, hi) = (sym.offset as usize, sym.offset as usize + sym.size as usize);
                let Some(bytes) = a.code.get(lo..hi) else { continue };
                let at = |r: crate::owncode::Row| crate::owncode::Row { off: r.off + lo as u32, ..r };
                rows.extend(arch::frames::rows(bytes, lo as u64, arch::frames::CALLED_ENTRY, None).into_iter().map(at));
                rows.push(crate::owncode::Row {
                    off: hi as u32,
                    cfa: crate::owncode::Cfa::Unknown,
                    fp: crate::owncode::Fp::Same,
                    ra: crate::owncode::Ra::Unknown,
                });
            }
            rows.sort_by_key(|r| r.off);
            rows.into()
        });
        let kind = crate::owncode::Kind::Called;
        if let Ok(mut o) = self.own.write() {
            o.add(pid, code.blob, code.blob + self.artifact.code.len() as u64, kind, rows.clone());
            o.add(pid, code.trap(), code.blob, crate::owncode::Kind::Root, Vec::new().into());
        }
    }

    /// A trampoline (`kind`: entry or return) at `at` into the unwinders'
    /// map; `intra`: what a call in it to itself or past its end reaches
    /// (an entry trampoline calling the probed function's copy).
    pub(crate) fn own_trampoline(&self, pid: u32, at: u64, bytes: &[u8], kind: crate::owncode::Kind) {
        if bytes.is_empty() || !self.profiling {
            return;
        }
        let end = at + bytes.len() as u64;
        let rows = match kind {
            crate::owncode::Kind::Entry { .. } => arch::frames::rows(bytes, at, 0, Some(at..end)),
            _ => arch::frames::return_rows(bytes, at),
        };
        if let Ok(mut o) = self.own.write() {
            o.add(pid, at, end, kind, rows.into());
        }
    }

    /// An entry trampoline at `at` for the site `addr` that calls nothing
    /// yet, full (every register saved): what the kinds fill in.
    pub(crate) fn entry(&self, code: &CodeRegion, at: u64, addr: u64) -> trampoline::Entry {
        trampoline::Entry {
            at,
            region: self.region,
            addr,
            ctx_size: self.artifact.ctx_size,
            handlers: Vec::new(),
            returns: Vec::new(),
            ret_push: code.at(self.ret_push),
            enter: code.at(self.enter),
            ret_tramp: 0,
            shadow: self.shadow(),
            lean: None,
            itrace: None,
            span: None,
            inside: false,
            ra_saved: None,
            ra_signed: 0,
            always: None,
            go: None,
        }
    }

    /// The process's trap area (`telco_abi::region::TrapArea`): the end of
    /// the thread slots' mapping.
    pub(crate) fn traps_at(&self) -> u64 {
        self.threads_at + crate::inject::threads_size(&self.artifact) - telco_abi::region::TRAP_AREA_SIZE as u64
    }

    /// The shadow stacks in the target.
    pub(crate) fn shadow(&self) -> trampoline::Shadow {
        let a = &self.artifact;
        trampoline::Shadow {
            threads: self.threads_at,
            nthreads: a.nthreads,
            depth: a.shadow_depth,
            frame_size: a.frame_size,
            tid_off: self.tid_off,
        }
    }
}
