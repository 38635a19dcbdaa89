//! Pass 5 with a target process: spawn (`-c`) or attach (`-p`), inject the
//! region and the code, hook every probed function entry, statement and
//! marker, let the target run while the tracer drains events, and take the
//! hooks out again.
//!
//! * `-c CMD`: the child is traced from `exec` (`PTRACE_TRACEME`) and run to
//!   its ELF entry point (`AT_ENTRY`), where the dynamic loader has mapped
//!   every needed library and `main` has not run: probes are armed there.
//! * `-p PID`: every thread is stopped (`ptrace::Stopped::attach`).
//! * [`arm`]: the region and the thread slots are injected (`inject`), the C
//!   library's thread-id offset found (`tcb_tid_offset`: glibc 0x2d0, musl
//!   0x30; the trampolines' slot lookup compares it), and `Hooker::module`
//!   maps a code region near each module and writes its trampolines. Hooks
//!   are placed with every thread stopped and no thread's instruction
//!   pointer inside the bytes being replaced (such a thread is stepped out
//!   first: `apply`). Then the tracer detaches: handlers run in the target's
//!   threads with no tracer involvement.
//! * At the end the tracer attaches again (if the target lives), disables
//!   the handlers (`Header::enabled`), restores every patched byte and
//!   unmaps what it put there (`Armed::unmap_injected`): threads inside a
//!   trampoline are stepped out of it, calls still running under a return
//!   probe get their own return addresses back, then the code regions, the
//!   shared region and the thread slots go, so a process traced again and
//!   again does not grow. Where that cannot be done safely (a vfork child
//!   shares the memory, a thread stays inside) they stay mapped, with a
//!   warning saying why. Forked children keep theirs.
//!
//! # Libraries loaded later
//!
//! Probes whose module is not mapped at arm time wait: the dynamic loader's
//! `r_brk` (found through `DT_DEBUG`) gets a hook calling `rt_dlnotify`,
//! which bumps `Header::dl_gen`, wakes the tracer's watcher (a futex on
//! that word, `os::sys::Watch`, which makes the session's poll run at
//! once) and waits (bounded) for `dl_ack`; the poll stops the target, hooks
//! what is mapped now and acknowledges, so no call into the new library is
//! missed. The same hook serves the symbol table's libraries loaded later
//! (`symtab.rs`) when a script symbolizes.
//!
//! # Thread slots and rows
//!
//! Thread slots (`ThreadSlot`) and their shadow stacks are not in the shared
//! region: `inject::threads` maps them privately in the target
//! (`Header::threads_at`), so a forked child works on a copy consistent with
//! its copy of the stacks (a `fork()` inside a function with a return probe
//! returns in both processes). A slot's row in the shared per-thread data
//! (counter shards, statistic copies, span stages) comes from a shared
//! counter (`Header::rows_next`) when it is claimed, and anew when a forked
//! child takes over its copy. The rows (`THREAD_SLOTS`, 256) are shared by
//! all the processes; `Header::row_owners_off` records each row's process.
//! Once half are taken, `Armed::reclaim_rows` marks the rows of processes
//! that have ended `ROW_FREE` (only when the target's pids are ours: one
//! pid namespace), and when none is left `take_row` (compiler/rt/rt.c)
//! takes a free one again, its counts kept: a shell loop of hundreds of
//! probed commands skips nothing. A thread that finds no slot or no row
//! (more than 256 threads at once) has its hits skipped and counted ("too
//! many threads").
//!
//! # Following children
//!
//! * `fork`: the child inherits the patched code, the code regions and the
//!   shared region (a `MAP_SHARED` mapping), so its hits are traced and
//!   counted with the parent's — deliberately — in rows of its own.
//!   `pid()` is its own (from its slot); `ppid()`, `uid()` and
//!   `execname()` ask the kernel in any process other than the region's,
//!   and `user_*` reads read the calling process (`rt_read_user`; only the
//!   tracer reads the region's process). At the end only the armed processes'
//!   code is restored; a child that outlives the session keeps its hooks,
//!   which keep working against the still-mapped region.
//! * `exec`: the C library's `execve`/`execveat` are hooked with
//!   `rt_execnotify`, which posts `pid << 32 | tid` in `Header::exec_req`
//!   and waits (10 s at most) for `exec_ack`. The session's poll
//!   (`Armed::follow_execs`) checks that the thread's process maps the
//!   session's memfd (`ours`, by inode: the request is the target's word,
//!   and a target in another pid namespace names other processes), attaches
//!   to it with `PTRACE_O_TRACEEXEC` (`ptrace::seize_for_exec`), answers,
//!   and at the exec stop runs the new program to its entry point and arms
//!   it (`Armed::arm_exec`): the region mapped at the same address through
//!   `/proc/TRACER/fd/N` (`inject::map_region_at`), thread slots at the same
//!   address (`inject::threads_at`), the probes of every module the new
//!   image maps, the crash handler, and the exec hook again (so `env prog`
//!   and a shell's children are followed). A thread whose exec failed is let
//!   go after 10 s (`ptrace::release`). The command's own exec stop may be
//!   taken by `Armed::alive`'s wait (it is our child): it is handed to the
//!   follower. When the command itself execs, its old image's patches are
//!   dropped (never written into the new program; the region's mapping
//!   tells the images apart) and `execname()` is refreshed.
//! * Not followed: a program that execs by raw system call, and every exec
//!   in sessions with `.itrace` probes (the single-stepper attaches to
//!   threads itself). Followed processes get no `dlopen` hook, and `usymname`
//!   in them uses the first process's load addresses.
//!
//! # Lifecycle probes
//!
//! Where a process starts or changes program, pass 5 runs the lifecycle
//! probes' handlers itself (`lifecycle`) by a remote call of `rt_call_probe`
//! (a context as a trampoline builds it, the thread's slot taken with
//! `rt_enter`): `process.begin` in the command at its entry or in the `-p`
//! target at attach (after the session's begin probes: `Armed::started`),
//! `thread.begin` in the `-p` target's other threads, and at each exec
//! `process.end` of the old program (not for a process that shared its
//! parent's memory, a vfork or posix_spawn child: `kcmp(KCMP_VM)` when its
//! exec request comes) then `process.begin`.
//! Everything else happens inside the processes, from hooks pass 2 placed
//! in the C library (compiler/src/elaborate/lifecycle.rs). `$status` in
//! `process.end` is the first argument register: `_exit`'s status at its
//! hook, -1 in the remote call at an exec (`rt_call_probe`'s `arg1`); `pp()`
//! is the lifecycle point's name (`Probe::lifecycle`). A static program at
//! its entry has no thread pointer yet: its begin is said to be skipped.
//! tapsets/target_set.tp keeps `target_set_pid()` with these probes.

use crate::arch::native::{self as arch, clobber, patch, trampoline};
use crate::inject::{self, CodeRegion, InjectError};
use crate::local::{Hooks, Region};
use crate::os::proc::Mapping;
use crate::os::ptrace::{PtraceError, Stopped};
use crate::os::wait::Status;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use telco_abi::artifact::{Artifact, Attach, LifeEvent};

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Ptrace(#[from] PtraceError),
    #[error(transparent)]
    Inject(#[from] InjectError),
    #[error("cannot start `{cmd}`: {err}")]
    Spawn { cmd: String, err: std::io::Error },
    #[error("`{cmd}` exited before its entry point (status {status})")]
    EarlyExit { cmd: String, status: i32 },
    #[error("pid {pid} is not an {} process ({what})", arch::NAME)]
    NotNative { pid: i32, what: String },
    #[error("{module} is not mapped in pid {pid} (is the library loaded?)")]
    NotMapped { module: String, pid: i32 },
    #[error("cannot read /proc/{pid}/{file}: {err}")]
    Proc { pid: i32, file: &'static str, err: std::io::Error },
    #[error("no probe could be placed:\n{0}")]
    NothingPlaced(String),
    #[error("{0}")]
    Unsupported(String),
}

/// The target's mappings of files.
fn mappings(pid: i32) -> Result<Vec<Mapping>, TargetError> {
    let maps = crate::os::proc::maps(pid).map_err(|err| TargetError::Proc { pid, file: "maps", err })?;
    Ok(maps.into_iter().filter(|m| m.path.starts_with("/")).collect())
}

pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

/// The run-time address of a byte at `file_offset` of `module`.
pub(crate) fn runtime_addr(maps: &[Mapping], module: &Path, file_offset: u64) -> Option<u64> {
    maps.iter()
        .filter(|m| same_file(&m.path, module))
        .find(|m| file_offset >= m.offset && file_offset < m.offset + (m.end - m.start))
        .map(|m| m.start + (file_offset - m.offset))
}

/// The process runs a 64-bit ELF program of telco-stap's own architecture.
fn check_machine(pid: i32) -> Result<(), TargetError> {
    let exe = crate::os::proc::exe_head(pid, 20).map_err(|err| TargetError::Proc { pid, file: "exe", err })?;
    if exe.len() < 20 || &exe[..4] != b"\x7fELF" {
        return Err(TargetError::NotNative { pid, what: "not an ELF program".into() });
    }
    let machine = u16::from_le_bytes([exe[18], exe[19]]);
    if exe[4] != 2 || machine != arch::ELF_MACHINE {
        return Err(TargetError::NotNative { pid, what: format!("ELF class {}, machine {machine}", exe[4]) });
    }
    Ok(())
}

/// One placed hook: where, and the bytes to put back.
#[derive(Clone)]
struct Patch {
    at: u64,
    original: Vec<u8>,
    /// What was written there (a forked child's copy is restored only
    /// where it still holds these bytes).
    patched: Vec<u8>,
}

/// A target with its probes armed.
pub struct Armed {
    pid: i32,
    /// We spawned it (`-c`): its exit status is ours to collect.
    child: bool,
    patches: Vec<Patch>,
    stopped: Option<Stopped>,
    region_enabled: Option<*const u32>,
    /// The region's header (for the dlopen handshake).
    header: *const u8,
    /// Its trusted mirror (`Region::trusted`): where the symbol table of
    /// libraries loaded later goes.
    mirror: *mut u8,
    /// The session's trust domain: the credentials of its first process
    /// when it was armed. A process of other credentials never shares the
    /// region (invariant 6): a program exec'd with them is not armed, a
    /// child that changed to them is cut off (`Armed::check_domains`).
    creds: Option<crate::os::creds::Credentials>,
    /// Children cut off from the region (their probes disabled), and
    /// whether each was forked (cleaned at the end like the other forked
    /// children; followed ones are cleaned with them); when they were
    /// last looked for.
    cut_off: Vec<(i32, bool)>,
    domains_checked: Option<std::time::Instant>,
    hooker: Hooker,
    /// Probes in libraries not loaded yet.
    pending: ByModule,
    /// Libraries armed once loaded: if one is unloaded (`dlclose`), its
    /// probes wait for it again, and nothing is written back where it was.
    late: BTreeMap<PathBuf, Late>,
    pub exit_status: Option<i32>,
    /// The signal that killed the command (`-c`), if one did.
    pub killed_by: Option<i32>,
    pub warnings: Vec<String>,
    /// `-w`: warnings found while the session runs (libraries loaded
    /// later) are kept in `warnings` but not printed.
    pub quiet: bool,
    /// `.itrace` probes: the single-stepper (with `--itrc FILE
    /// --itrace-step`), or the block tracer's thread (`blocktrace.rs`).
    itracer: Option<crate::itrace::Itracer>,
    blocktracer: Option<BlockTracing>,
    /// Programs the target's processes exec: they get their probes too.
    follow: Option<Follow>,
    /// The handler of fatal signals installed in the target (`crash`).
    crash: Option<crate::crash::Hook>,
    /// Fatal signals in the session's processes, as they were recorded.
    pub crashes: Vec<crate::crash::Crash>,
    /// The inode of the region's memfd (which processes are the session's).
    region_ino: u64,
    /// The program each process of the session was armed running (for
    /// `process("P").end` at an exec).
    exes: HashMap<i32, PathBuf>,
    /// The region's address in the target's processes.
    region_remote: u64,
    /// The region's memfd in the tracer (open while the session runs).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the block tracer maps it
    region_fd: i32,
    /// SDT semaphores raised in the target (lowered at the end).
    semaphores: Vec<u64>,
    /// The remote-operation stub (`Stopped::install_stub`).
    stub: Option<crate::os::ptrace::StubPlace>,
    /// The symbol table's libraries loaded later (`symtab.rs`), and how
    /// many of those left out for want of room were warned about.
    late_syms: crate::symtab::LateSymbols,
    late_syms_said: usize,
    /// Wakes the session when a thread waits in the loader's r_brk.
    dl_watch: Option<crate::os::sys::Watch>,
    _code: Vec<CodeRegion>,
}

/// The block tracer's thread (`blocktrace.rs`) and its pool.
struct BlockTracing {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<crate::blocktrace::Server>>,
    traced: std::sync::Arc<std::sync::Mutex<Vec<crate::itrace::Traced>>>,
    /// The pool in the target (address, size) and its code ranges.
    pool: (u64, u64),
    code: Vec<(u64, u64)>,
    /// What it reported, and the calls that went untraced.
    done: Option<(crate::blocktrace::Report, u64)>,
    /// It traced MAXITRACE calls (`Server::closed`).
    closed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl BlockTracing {
    /// The traced functions the thread translates.
    fn traced(&self) -> &std::sync::Mutex<Vec<crate::itrace::Traced>> {
        &self.traced
    }

    /// Its code ranges in the target, and its pool (address, size).
    fn ranges(&self) -> (&[(u64, u64)], (u64, u64)) {
        (&self.code, self.pool)
    }

    /// What it reported: calls, instructions, time, calls missed,
    /// warnings.
    fn take_report(&mut self) -> Option<(u64, u64, std::time::Duration, u64, Vec<String>)> {
        let (r, missed) = self.done.take()?;
        Some((r.calls, r.instructions, r.time, missed, r.warnings))
    }

    /// Stop the thread (it serves what is pending, then sends every
    /// thread still tracing out of the pool) and keep its report.
    fn finish(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(server) => {
                    let missed = server.missed();
                    self.done = Some((server.report.clone(), missed));
                }
                Err(_) => {
                    let r = crate::blocktrace::Report {
                        warnings: vec!["internal error: the .itrace thread panicked".into()],
                        ..Default::default()
                    };
                    self.done = Some((r, 0));
                }
            }
        }
    }
}

impl Drop for BlockTracing {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A library armed once loaded: its probes, and where it was mapped.
struct Late {
    functions: BTreeMap<u64, Vec<usize>>,
    /// The run-time address of its first probed function.
    at: u64,
    /// The address range of its mappings.
    range: (u64, u64),
}

/// The first planned patch that shares a byte with `[lo, hi)`: where it is.
fn overlapping(plans: &[Plan], lo: u64, hi: u64) -> Option<u64> {
    plans.iter().find(|(at, orig, _)| lo < at + orig.len() as u64 && *at < hi).map(|(at, _, _)| *at)
}

/// The address range `module`'s mappings cover.
fn mapped_range(maps: &[Mapping], module: &Path) -> Option<(u64, u64)> {
    let ms = maps.iter().filter(|m| same_file(&m.path, module));
    let (lo, hi) = ms.fold((u64::MAX, 0), |(lo, hi), m| (lo.min(m.start), hi.max(m.end)));
    (lo < hi).then_some((lo, hi))
}

/// A process armed after an exec: what to undo at the end.
struct Child {
    pid: i32,
    patches: Vec<Patch>,
    crash: Option<crate::crash::Hook>,
    semaphores: Vec<u64>,
}

/// Following the target's children into the programs they `exec`: the C
/// library's `execve` is hooked (`rt_execnotify`), the thread about to exec
/// is attached (`ptrace::seize_for_exec`), and the new program, stopped at
/// its entry point, gets the region mapped at the same address, thread
/// slots at the same address, and the probes of every module it maps.
struct Follow {
    /// The region's memfd in the tracer (`/proc/TRACER/fd/N` for children),
    /// and its inode (a process that maps it is one of ours).
    region_fd: i32,
    /// The trusted mirror's memfd in the tracer (`Region::mirror_fd`).
    mirror_fd: i32,
    region_ino: u64,
    region_remote: u64,
    region_size: u64,
    threads_at: u64,
    /// `rt_execnotify`'s offset in the blob.
    execnotify: u32,
    /// Threads attached for an exec: (tid, pid, when to give up).
    waiting: Vec<(i32, i32, std::time::Instant)>,
    /// Processes whose exec stop `Armed::alive` took (the command: it
    /// waits for its own child).
    execed: Vec<i32>,
    /// Processes armed after an exec: pid, the bytes to put back.
    children: Vec<Child>,
    /// What could not be followed, said once each.
    said: std::collections::BTreeSet<String>,
    /// Processes about to exec that share their parent's memory (vfork,
    /// posix_spawn): they never ran a program of their own, so their exec
    /// ends none (no process.end).
    vforked: std::collections::BTreeSet<i32>,
    /// The target sees the pids we see (one pid namespace): the rows'
    /// owners can be checked from here (`Armed::reclaim_rows`).
    same_pid_ns: bool,
    /// When the rows were last checked.
    rows_checked: std::time::Instant,
    /// Code regions of the exec hooks and of the children (kept for the
    /// session, like `Armed::_code`).
    _codes: Vec<CodeRegion>,
}

/// Start `argv` traced from its `exec` and run it to its entry point.
pub fn spawn(argv: &[String]) -> Result<Stopped, TargetError> {
    let cmd = argv.join(" ");
    let (pid, mut status) =
        crate::os::process::spawn_traced(argv).map_err(|err| TargetError::Spawn { cmd: cmd.clone(), err })?;
    let early = |status: Status| TargetError::EarlyExit { cmd: cmd.clone(), status: status.exit_code().unwrap_or(0) };
    if status.stop_signal().is_none() {
        return Err(early(status));
    }
    // A command run through `sh -c 'exec CMD'`: the program to probe is the
    // one the shell execs, which stops again with SIGTRAP.
    if argv.len() == 3 && argv[0] == "/bin/sh" && argv[2].starts_with("exec ") {
        let mut sig = 0;
        loop {
            let resumed = crate::os::ptrace::req::cont(pid, sig);
            status = match (resumed, crate::os::wait::wait(pid, true)) {
                (Ok(()), Ok(Some((_, st)))) => st,
                _ => return Err(early(status)),
            };
            match status.stop_signal() {
                None => return Err(early(status)),
                Some(libc::SIGTRAP) => break,
                Some(other) => sig = other,
            }
        }
    }
    let mut s = Stopped::adopt(pid)?;
    check_machine(pid)?;
    run_to_entry(&mut s)?;
    Ok(s)
}

/// Run a process stopped at its `exec` (one thread, ours) to its ELF entry
/// point (`AT_ENTRY`): the libraries are mapped, `main` has not run.
/// Through the entry marker where it can be placed (no trap for a dying
/// tracer to leave behind: [`entry_by_marker`]), else with an `int3`.
fn run_to_entry(s: &mut Stopped) -> Result<(), TargetError> {
    let pid = s.pid();
    let auxv = crate::os::proc::auxv(pid).map_err(|err| TargetError::Proc { pid, file: "auxv", err })?;
    let entry = crate::os::proc::aux_value(&auxv, libc::AT_ENTRY)
        .ok_or_else(|| TargetError::Unsupported(format!("pid {pid} has no AT_ENTRY")))?;
    if entry_by_marker(s, entry)? {
        return Ok(());
    }
    let saved = s.read(entry, arch::TRAP_INSN.len())?;
    s.write(entry, &arch::TRAP_INSN)?;
    let r = s.run_to_trap(pid, entry);
    s.write(entry, &saved)?;
    Ok(r?)
}

/// [`run_to_entry`] without a trap: the entry's first instructions jump to
/// the entry marker (`arch::native::stub::entry_marker_head`, then their
/// relocated copy) in slack bytes of the program (`inject::slack`); the
/// process runs under `PTRACE_SYSCALL` to the marker's `getpid`, where the
/// tracer puts every byte back and the thread at its entry. If the tracer
/// dies meanwhile, the program goes through the copy and starts as usual.
/// False (nothing changed) where no slack or no relocatable entry is found.
fn entry_by_marker(s: &mut Stopped, entry: u64) -> Result<bool, TargetError> {
    use crate::arch::native::stub;
    let pid = s.pid();
    let Some(at) = inject::slack(s) else { return Ok(false) };
    let code = s.read(entry, 64)?;
    let Ok(hook) = arch::patch::plan(&code, entry, 48) else { return Ok(false) };
    let start = (hook.patch_at - entry) as usize;
    // A jump within ±2 GiB moves the planned bytes; farther (slack in the
    // dynamic loader or the vDSO), an absolute jump moves the whole
    // instructions its 14 bytes cover.
    let (jmp, len): (Vec<u8>, usize) = match arch::patch::jmp_rel32(hook.patch_at, at) {
        Some(j) => (j.to_vec(), hook.displaced),
        None => {
            let starts = arch::instruction_starts(code.get(start..).unwrap_or_default(), hook.patch_at);
            let jmp = arch::patch::jmp_abs(at);
            match starts.into_iter().find(|&s| s >= hook.patch_at + jmp.len() as u64) {
                Some(end) => (jmp.to_vec(), (end - hook.patch_at) as usize),
                None => return Ok(false),
            }
        }
    };
    let Some(displaced) = code.get(start..start + len) else { return Ok(false) };
    let head = stub::entry_marker_head();
    let Ok(copy) = arch::patch::relocate(displaced, hook.patch_at, len, at + head.len() as u64) else {
        return Ok(false);
    };
    let marker: Vec<u8> = head.into_iter().chain(copy).collect();
    let slack_bytes = s.read(at, marker.len())?;
    let entry_bytes = s.read(hook.patch_at, jmp.len())?;
    s.write(at, &marker)?;
    s.write(hook.patch_at, &jmp)?;
    let after = at + stub::ENTRY_MARKER_AFTER;
    let result = (|| -> Result<(), TargetError> {
        let (mut sig, mut stops) = (0, 0);
        loop {
            crate::os::ptrace::req::syscall(pid, sig)?;
            sig = 0;
            let status = match crate::os::wait::wait(pid, true) {
                Ok(Some((_, st))) => st,
                Ok(None) => continue,
                Err(err) => return Err(TargetError::Proc { pid, file: "wait", err }),
            };
            if status.ended() {
                return Err(TargetError::Unsupported(format!("pid {pid} ended before its entry point")));
            }
            if let Some(d) = status.delivering() {
                // Delivered with the next resume (the program is starting).
                sig = d;
                continue;
            }
            // The marker's entry stop, then its exit stop: only then may
            // the registers change.
            if arch::pc(&s.regs(pid)?) == after {
                stops += 1;
                if stops == 2 {
                    return Ok(());
                }
            }
        }
    })();
    // The entry's bytes back, then the thread where the program starts,
    // and only then the slack: a tracer killed between any two of these
    // steps leaves a thread that still runs on, through the marker's copy
    // (its pc is in the slack until the registers are set) or from the
    // entry. Putting the slack back first left a killed tracer's command
    // at a pc in bytes that were no longer the marker (CI saw one die so).
    let restored = s.write(hook.patch_at, &entry_bytes);
    let moved = match (&result, restored) {
        (Ok(()), Ok(())) => (|| -> Result<(), TargetError> {
            let now = s.regs(pid)?;
            let kept = s.read(arch::sp(&now).wrapping_sub(24), 24)?;
            s.set_regs(pid, &stub::entry_regs(&now, &kept, hook.patch_at))?;
            Ok(())
        })(),
        (_, restored) => restored.map_err(TargetError::from),
    };
    s.write(at, &slack_bytes)?;
    result?;
    moved?;
    Ok(true)
}

/// Function probes by module, then by file offset (an entry and a return
/// probe of one function share its trampoline).
type ByModule = BTreeMap<PathBuf, BTreeMap<u64, Vec<usize>>>;

/// What hooking needs to know about the artifact and the injected region.
#[derive(Clone)]
struct Hooker {
    artifact: Artifact,
    region: u64,
    ret_push: u32,
    ret_pop: u32,
    enter: u32,
    dlnotify: u32,
    /// `rt_itrace_wait`, and the `.itrace` functions hooked so far (their
    /// index is what their gate passes).
    itrace_wait: Option<u32>,
    itraced: std::cell::RefCell<Vec<crate::itrace::Traced>>,
    /// Functions whose trampolines time and record their calls themselves
    /// (`trampoline::ClockOnly`), for `-vv`.
    timed: std::cell::RefCell<Vec<String>>,
    /// `rt_span_flush` (`--chrome` calls recorded inline).
    span_flush: Option<u32>,
    /// `rt_execnotify` when execs are followed (`hook_execs`).
    exec_notify: Option<u32>,
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
    entry_hooks: std::cell::RefCell<BTreeMap<u64, (u32, bool)>>,
    /// `Header::threads_at` and `Header::tcb_tid_off`.
    threads_at: u64,
    tid_off: u32,
    /// Every trampoline's copy of its function's first instructions
    /// (`SymReloc`: copy, its length, original, its length).
    relocs: std::cell::RefCell<Vec<(u64, u32, u64, u32)>>,
    /// Pages of veneers for the module being hooked (`Hooker::veneer`), given
    /// to the caller of `module` with its code region.
    veneers: std::cell::RefCell<Vec<CodeRegion>>,
    /// Our code in the target's processes, for the profiler's unwinder;
    /// the blob's rows (the same in every code region) made once.
    own: crate::owncode::Shared,
    blob_rows: std::cell::OnceCell<std::sync::Arc<[crate::owncode::Row]>>,
    /// The session samples (`timer.profile`): only then is our code
    /// registered, its rows read (work at every attach otherwise).
    profiling: bool,
}

/// What one function's trampoline calls (`trampoline::Entry`).
struct Tramp {
    handlers: Vec<(u64, u32)>,
    returns: Vec<(u32, Option<u64>)>,
    ret_tramp: u64,
    lean: Option<clobber::RegMask>,
    /// An `.itrace` function: its name.
    itrace: Option<String>,
    /// Its `--chrome` return probe, recorded inline (lean trampolines).
    span: Option<u32>,
    /// Nothing but a return probe that times calls (that one, or a
    /// duration into a statistic): the trampolines that only time calls.
    clock_only: Option<trampoline::ClockOnly>,
    /// At a site inside a function (`trampoline::Entry::inside`).
    inside: bool,
    /// Where the function saves its return address (`trampoline::Entry::ra_saved`).
    ra_saved: Option<i32>,
}

impl Tramp {
    /// Nothing to run: the displaced instructions and the jump back (a
    /// hop's host that has no probe of its own).
    fn pass_through() -> Self {
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
        }
    }

    /// Only a call of a runtime function (with the whole context).
    fn call(f: u64) -> Self {
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
        }
    }
}

/// A `ProbeEntry::latency` as the trampolines take it: every field the
/// update touches within a 32-bit displacement of the region.
fn stat_inline(l: &telco_abi::artifact::Latency) -> Option<trampoline::StatInline> {
    use telco_abi::region::{HIST_LOG_BUCKETS, STAT_HEADER};
    let end = l.copy + STAT_HEADER as u64 + u64::from(l.hist.unwrap_or(0)) + 8 * u64::from(HIST_LOG_BUCKETS);
    i32::try_from(end).ok()?;
    i32::try_from(l.row).ok()?;
    Some(trampoline::StatInline { copy: l.copy as u32, row: l.row, hist: l.hist })
}

/// A hook ready to be written: address, original bytes, new bytes.
type Plan = (u64, Vec<u8>, Vec<u8>);

/// What [`Hooker::function`] placed: the patch, where the trampoline is,
/// and the branches of a loop back to the entry retargeted past the probe
/// (`patch::plan_loop`: patches too).
struct Placed {
    plan: Plan,
    tramp: u64,
    retargets: Vec<Plan>,
}

impl Placed {
    fn into_plans(self) -> impl Iterator<Item = Plan> {
        std::iter::once(self.plan).chain(self.retargets)
    }
}

impl Hooker {
    /// A piece of our code into the unwinders' map (when profiling).
    fn own_add(&self, pid: u32, start: u64, end: u64, kind: crate::owncode::Kind) {
        if !self.profiling {
            return;
        }
        if let Ok(mut o) = self.own.write() {
            o.add(pid, start, end, kind, Vec::new().into());
        }
    }

    /// A code region's blob (compiled handlers, runtime library) into the
    /// unwinders' map of our code.
    fn own_blob(&self, pid: u32, code: &CodeRegion) {
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
    fn own_trampoline(&self, pid: u32, at: u64, bytes: &[u8], kind: crate::owncode::Kind) {
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
    fn entry(&self, code: &CodeRegion, at: u64, addr: u64) -> trampoline::Entry {
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
        }
    }

    /// The shadow stacks in the target.
    fn shadow(&self) -> trampoline::Shadow {
        let a = &self.artifact;
        trampoline::Shadow {
            threads: self.threads_at,
            nthreads: a.nthreads,
            depth: a.shadow_depth,
            frame_size: a.frame_size,
            tid_off: self.tid_off,
        }
    }

    /// Map a code region near `module`, write the trampolines of its
    /// functions, and return the patches to apply (and the refusals).
    fn module(
        &self,
        s: &mut Stopped,
        maps: &[Mapping],
        module: &Path,
        functions: &BTreeMap<u64, Vec<usize>>,
        refused: &mut Vec<String>,
    ) -> Result<(Vec<CodeRegion>, Vec<Plan>), TargetError> {
        let a = &self.artifact;
        let pid = s.pid();
        let first = *functions.keys().next().unwrap_or(&0);
        let base = runtime_addr(maps, module, first)
            .ok_or_else(|| TargetError::NotMapped { module: module.display().to_string(), pid })?;
        // Per function: its entry trampoline (at most 1 KiB) and, for lean
        // return probes, a return trampoline of its own (under 1 KiB).
        let mut code = inject::code(s, a, base, 8192 + 2048 * functions.len() as u64 + 8 * a.probes.len() as u64)?;
        self.own_blob(pid as u32, &code);
        // The handler table (by probe index) and the return trampoline.
        let table: Vec<u8> = a.probes.iter().flat_map(|p| code.at(p.handler).to_le_bytes()).collect();
        let small = || {
            TargetError::Unsupported(format!(
                "the code region near {} has no room for the probe table and return trampoline (an internal sizing \
                 error: please report it)",
                module.display()
            ))
        };
        let table_at = code.alloc(table.len()).ok_or_else(small)?;
        s.write(table_at, &table)?;
        let ret_tramp = code.alloc(512).ok_or_else(small)?;
        let rt_bytes = trampoline::return_trampoline(
            ret_tramp,
            self.region,
            a.ctx_size,
            code.at(self.ret_pop),
            &trampoline::Returns::Table(table_at),
            None,
            &self.shadow(),
            None,
        )
        .map_err(|e| TargetError::Unsupported(format!("assembling the return trampoline: {e}")))?;
        if rt_bytes.len() > 512 {
            return Err(TargetError::Unsupported("the return trampoline is larger than its room".into()));
        }
        s.write(ret_tramp, &rt_bytes)?;
        self.own_trampoline(pid as u32, ret_tramp, &rt_bytes, crate::owncode::Kind::Return);
        let mut plans: Vec<Plan> = Vec::new();
        let mut clobbers = clobber::Clobbers::new(&a.code, &a.symbols);
        // Functions too short for the jump (`Hop`): those whose 5-byte plan
        // fails take their hop, and their hosts displace enough for it.
        let mut hopping: BTreeMap<u64, telco_abi::artifact::Hop> = BTreeMap::new();
        let mut hosts: BTreeMap<u64, u32> = BTreeMap::new();
        for (&file_offset, probes) in functions {
            let Some((size, hop)) = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Function { size, hop: Some(h), .. } => Some((*size, *h)),
                _ => None,
            }) else {
                continue;
            };
            let Some(addr) = runtime_addr(maps, module, file_offset) else { continue };
            let bytes = s.read(addr, size as usize + 16)?;
            if (hop.required || patch::plan(&bytes, addr, size).is_err())
                && runtime_addr(maps, module, hop.host_file_offset).is_some()
            {
                hopping.insert(file_offset, hop);
                let d = hosts.entry(hop.host_file_offset).or_insert(0);
                *d = (*d).max(hop.host_displaced);
            }
        }
        // Hops to write: slot, trampoline, and the hopping function's patch.
        let mut slots: Vec<(u64, u64, u64)> = Vec::new();
        for (&file_offset, probes) in functions {
            let p0 = &a.probes[probes[0]];
            // A function's entry (statements there run with its entry
            // probes), or an instruction inside one.
            let size = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Function { size, .. } => Some(*size),
                _ => None,
            });
            let site = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Statement { displaced, .. } => Some(*displaced as usize),
                _ => None,
            });
            // A statement whose jump goes on the instructions before it
            // (a call probed at its return: `true`).
            let lead = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Statement { lead, lead_call, .. } if *lead > 0 => Some((u64::from(*lead), *lead_call)),
                _ => None,
            });
            let (lead, lead_call) = (lead.map(|l| l.0), lead.is_some_and(|l| l.1));
            // A statement reached by a short jump to the padding after its
            // function, where the jump to the trampoline goes.
            let pad = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Statement { pad, .. } if *pad > 0 => Some(u64::from(*pad)),
                _ => None,
            });
            let fname = match (&p0.attach, size) {
                (Attach::Statement { addr, .. }, None) => format!("{} ({addr:#x})", p0.name),
                _ => p0.function.clone(),
            };
            let Some(addr) = runtime_addr(maps, module, file_offset) else {
                refused.push(format!("{fname}: not mapped"));
                continue;
            };
            let mut handlers = Vec::new();
            let mut returns = Vec::new();
            // A lean trampoline when no handler needs the whole context and
            // what they change is known.
            let mut lean = Some(0);
            let mut calls = Vec::new();
            let mut itrace = None;
            let mut span = None;
            let mut ra_saved = None;
            for &i in probes {
                let p = &a.probes[i];
                if let Attach::Function { ret: true, ra_saved: Some(at), .. } = p.attach {
                    ra_saved = Some(at);
                }
                if p.full_ctx {
                    lean = None;
                }
                if matches!(p.attach, Attach::Function { itrace: true, .. }) {
                    itrace = Some(fname.clone());
                }
                match p.attach {
                    // `--chrome`'s call timing, done by the trampolines
                    // themselves when they are lean (their handlers run
                    // otherwise, to the same effect).
                    Attach::Function { ret: true, .. } if p.span && self.span_flush.is_some() && span.is_none() => {
                        returns.push((i as u32, p.entry_handler.map(|h| code.at(h))));
                        calls.push(self.ret_push);
                        // Called after all if the return side cannot be
                        // inline (below).
                        calls.extend(p.entry_handler);
                        span = Some(i as u32);
                    }
                    Attach::Function { ret: true, .. } => {
                        returns.push((i as u32, p.entry_handler.map(|h| code.at(h))));
                        calls.push(self.ret_push);
                        calls.extend(p.entry_handler);
                    }
                    // An entry probe whose body does nothing is not called.
                    _ if p.empty => {}
                    _ => {
                        handlers.push((code.at(p.handler), i as u32));
                        calls.push(p.handler);
                    }
                }
            }
            if handlers.is_empty() && returns.is_empty() && itrace.is_none() {
                // Nothing to run here: the function is left as it is.
                continue;
            }
            // A function the runtime hooks itself: this trampoline is that
            // hook too.
            if let Some(&(f, whole)) = self.entry_hooks.borrow().get(&addr).filter(|_| size.is_some()) {
                handlers.push((code.at(f), 0));
                calls.push(f);
                if whole {
                    lean = None;
                }
            }
            for f in calls {
                lean = lean.zip(clobbers.of(f)).map(|(m, c)| m | c);
            }
            // Lean return probes get a return trampoline of their own, as
            // lean, calling their handlers directly.
            let mut own_ret = None;
            // The span probe recorded inline (lean only): its index and
            // `rt_span_flush`'s offset.
            let inline = span.zip(self.span_flush).filter(|_| lean.is_some());
            let span_inline = inline.map(|(probe, flush)| trampoline::SpanInline {
                probe,
                flush: code.at(flush),
                spans_off: a.spans_off,
                stride: a.span_stride,
                batch: a.span_batch,
            });
            // Only a return probe that times calls here (`--chrome`'s, or a
            // duration into a statistic): trampolines that only time calls.
            let only = returns
                .first()
                .filter(|_| lean.is_some() && itrace.is_none() && handlers.is_empty() && returns.len() == 1);
            let clock_only = only.and_then(|&(probe, _)| {
                let (work, flush) = match (span_inline, inline) {
                    (Some(inl), Some((_, flush))) => (trampoline::Timed::Span(inl), Some(flush)),
                    _ => (trampoline::Timed::Stat(stat_inline(a.probes[probe as usize].latency.as_ref()?)?), None),
                };
                let handler = a.probes[probe as usize].handler;
                let pop = [self.ret_pop, handler]
                    .into_iter()
                    .chain(flush)
                    .try_fold(0, |m, f| clobbers.of(f).map(|c| m | c))?;
                Some(trampoline::ClockOnly {
                    probe,
                    work,
                    handler: code.at(handler),
                    enter_clobbers: clobbers.of(self.enter)?,
                    push_clobbers: clobbers.of(self.ret_push)?,
                    pop_clobbers: pop,
                })
            });
            if let Some(so) = &clock_only {
                self.timed.borrow_mut().push(fname.clone());
                let ret_pop = code.at(self.ret_pop);
                own_ret = Some(place(self, s, &mut code, |at| {
                    trampoline::clock_return_trampoline(at, self.region, a.ctx_size, ret_pop, &self.shadow(), so)
                })?);
            } else if lean.is_some() && !returns.is_empty() {
                // The span probe's return side calls rt_span_flush, not
                // its handler.
                let called = |i: u32, h: u32| match inline {
                    Some((probe, flush)) if probe == i => flush,
                    _ => h,
                };
                let rets: Vec<(u32, u32)> = returns.iter().map(|&(i, _)| (i, a.probes[i as usize].handler)).collect();
                let m = std::iter::once(self.ret_pop)
                    .chain(rets.iter().map(|&(i, h)| called(i, h)))
                    .try_fold(0, |m, f| clobbers.of(f).map(|c| m | c));
                if let Some(m) = m {
                    let direct: Vec<(u32, u64)> = rets.iter().map(|&(i, h)| (i, code.at(h))).collect();
                    let ret_pop = code.at(self.ret_pop);
                    own_ret = Some(place(self, s, &mut code, |at| {
                        trampoline::return_trampoline(
                            at,
                            self.region,
                            a.ctx_size,
                            ret_pop,
                            &trampoline::Returns::Direct(direct),
                            Some(m),
                            &self.shadow(),
                            span_inline.as_ref(),
                        )
                    })?);
                }
            }
            // The entry side inline only with the return side (a lean
            // trampoline whose return trampoline is the shared one is
            // still timed, by the handlers).
            let span = span.filter(|_| own_ret.is_some() && span_inline.is_some());
            // A statement or marker: inside a function (`Entry::inside`).
            let inside = size.is_none();
            let tramp = Tramp {
                handlers,
                returns,
                ret_tramp: own_ret.unwrap_or(ret_tramp),
                lean,
                itrace,
                span,
                clock_only,
                inside,
                ra_saved,
            };
            // Two patches never share a byte (a statement right after
            // another, or inside a function's entry jump).
            let (from, reach) = match lead {
                Some(n) => (addr - n, n),
                None => (addr, site.unwrap_or(16) as u64),
            };
            if let Some(at) = overlapping(&plans, from, from + reach) {
                refused.push(format!("{fname}: its jump would overlap the probe patched at {at:#x}"));
                continue;
            }
            let hop = hopping.get(&file_offset).copied();
            // A function's jump goes after its `endbr64`, as pass 2 planned
            // hops and hosts.
            let skip = match size {
                Some(_) => s.read(addr, patch::LANDING_PAD_LEN).map_or(0, |b| patch::landing_pad_len(&b) as u64),
                None => 0,
            };
            let host = hosts.remove(&(file_offset + skip));
            let placed = match (size, site, hop, host) {
                (None, Some(_), _, None) if lead_call => self.call_site(s, &mut code, addr, tramp)?,
                (None, Some(_), _, None) if lead.is_some() => {
                    self.lead_in(s, &mut code, addr, lead.unwrap_or(0) as usize, tramp)?
                }
                // A hop's host: its jump, then the hop's, in what it displaces.
                (_, _, _, Some(displaced)) => {
                    self.function(s, &mut code, addr + skip, 0, Some(displaced as usize), tramp)?
                }
                (Some(_), _, Some(hop), None) => match runtime_addr(maps, module, hop.host_file_offset) {
                    Some(host) => {
                        let slot = host + u64::from(hop.slot);
                        self.function(s, &mut code, addr + skip, 0, Some(hop.displaced as usize), tramp)?.map(
                            |mut p| {
                                // A 2-byte jump to the slot in the host; the
                                // slot's jump goes to the trampoline.
                                let (at, orig, patch) = &mut p.plan;
                                slots.push((slot, p.tramp, *at));
                                let rel = slot as i64 - (*at as i64 + 2);
                                *patch = vec![0xeb, rel as i8 as u8];
                                patch.resize(orig.len(), arch::TRAP);
                                p
                            },
                        )
                    }
                    None => Err("the host of its hop is not mapped".into()),
                },
                (Some(size), _, None, None) => self.function(s, &mut code, addr, size, None, tramp)?,
                (None, Some(displaced), _, None) => match pad {
                    Some(pad) => self.padded(s, &mut code, addr, displaced, addr + pad, tramp)?,
                    None => self.function(s, &mut code, addr, 0, Some(displaced), tramp)?,
                },
                (None, None, _, None) => continue,
            };
            // Its other patches (a loop's retargeted branches, a short
            // jump's slot in the padding) must not touch another probe's
            // either; then the overlap checks of what comes next see them.
            let clash = placed.as_ref().ok().and_then(|p| {
                p.retargets
                    .iter()
                    .find_map(|(at, orig, _)| overlapping(&plans, *at, at + orig.len() as u64).map(|_| *at))
            });
            match (placed, clash) {
                (Ok(_), Some(at)) => {
                    refused.push(format!("{fname}: its patch at {at:#x} would overlap another probe's"))
                }
                (Ok(p), None) => plans.extend(p.into_plans()),
                (Err(why), _) => refused.push(format!("{fname}: {why}")),
            }
        }
        // Hosts with no probe of their own: a trampoline that only runs
        // their displaced instructions.
        for (file_offset, displaced) in hosts {
            let Some(addr) = runtime_addr(maps, module, file_offset) else { continue };
            let end = addr + u64::from(displaced);
            let clash = overlapping(&plans, addr, end).is_some();
            let placed = if clash {
                Err("another probe's jump is there".to_string())
            } else {
                self.function(s, &mut code, addr, 0, Some(displaced as usize), Tramp::pass_through())?
            };
            match placed {
                Ok(p) => plans.extend(p.into_plans()),
                Err(why) => {
                    // The functions hopping through it are not hooked.
                    let gone: Vec<u64> = slots.iter().filter(|s| s.0 >= addr && s.0 < end).map(|s| s.2).collect();
                    plans.retain(|(at, _, _)| !gone.contains(at));
                    slots.retain(|(slot, _, _)| *slot < addr || *slot >= end);
                    refused.push(format!("the functions hopping through {addr:#x}: {why}"));
                }
            }
        }
        // The hops' jumps, in their hosts' patches.
        for (slot, to, from) in slots {
            let host = plans.iter().position(|(at, orig, _)| slot >= *at && slot + 5 <= at + orig.len() as u64);
            match (patch::jmp_rel32(slot, to), host) {
                (Some(jmp), Some(i)) => {
                    let (at, _, patch) = &mut plans[i];
                    let o = (slot - *at) as usize;
                    // Only into the host's own dead bytes (int3 fill).
                    if patch.get(o..o + 5).is_some_and(|b| b.iter().all(|&x| x == arch::TRAP)) {
                        patch[o..o + 5].copy_from_slice(&jmp);
                        continue;
                    }
                    plans.retain(|(at, _, _)| *at != from);
                    refused.push(format!("the function at {from:#x}: its hop's slot at {slot:#x} is taken"));
                }
                _ => {
                    plans.retain(|(at, _, _)| *at != from);
                    refused.push(format!("the function at {from:#x}: the host of its hop could not be hooked"));
                }
            }
        }
        // Its veneer pages after it.
        let mut codes = vec![code];
        codes.append(&mut self.veneers.borrow_mut());
        Ok((codes, plans))
    }

    /// A statement at `addr` with room for a 2-byte jump only
    /// (`Attach::Statement::pad`): its trampoline as any statement's, and
    /// a `jmp rel8` at `addr` to `slot`, dead padding after the function,
    /// where a `jmp rel32` to the trampoline goes (both put back at
    /// detach, as every patch).
    fn padded(
        &self,
        s: &mut Stopped,
        code: &mut CodeRegion,
        addr: u64,
        displaced: usize,
        slot: u64,
        t: Tramp,
    ) -> Result<Result<Placed, String>, TargetError> {
        let mut placed = match self.function(s, code, addr, 0, Some(displaced), t)? {
            Ok(p) => p,
            Err(why) => return Ok(Err(why)),
        };
        let original = s.read(slot, 5)?;
        let (Some(far), Ok(rel)) =
            (patch::jmp_rel32(slot, placed.tramp), i8::try_from(slot as i64 - (addr as i64 + 2)))
        else {
            return Ok(Err("the padding or the trampoline is out of reach".into()));
        };
        let mut short = vec![0xeb, rel as u8];
        short.resize(displaced, arch::TRAP);
        placed.plan.2 = short;
        placed.retargets.push((slot, original, far.to_vec()));
        Ok(Ok(placed))
    }

    /// A statement at `addr`, the return point of the `call rel32` just
    /// before it (`Attach::Statement::lead_call`): the call goes to a
    /// trampoline that pushes a shadow frame for it as a return probe's
    /// entry does and jumps to the callee, whose return comes through a
    /// return trampoline of its own that runs the statement's handlers
    /// with the registers as at `addr` (rip there, rsp after the return)
    /// and returns to `addr`. Every register saved (the full kinds).
    fn call_site(
        &self,
        s: &mut Stopped,
        code: &mut CodeRegion,
        addr: u64,
        t: Tramp,
    ) -> Result<Result<Placed, String>, TargetError> {
        let from = addr - 5;
        let bytes = s.read(from, 5)?;
        if bytes[0] != 0xe8 {
            return Ok(Err("the instruction before it is not the call pass 2 found".into()));
        }
        let callee = addr.wrapping_add(i32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as i64 as u64);
        let direct: Vec<(u32, u64)> = t.handlers.iter().map(|&(h, i)| (i, h)).collect();
        let ret_pop = code.at(self.ret_pop);
        let a = &self.artifact;
        let ret_tramp = place(self, s, code, |at| {
            trampoline::return_trampoline(
                at,
                self.region,
                a.ctx_size,
                ret_pop,
                &trampoline::Returns::Direct(direct),
                None,
                &self.shadow(),
                None,
            )
        })?;
        let Some(at) = code.alloc(1024) else { return Ok(Err("no room for its trampoline".into())) };
        let entry = trampoline::Entry {
            returns: t.handlers.iter().map(|&(_, i)| (i, None)).collect(),
            ret_tramp,
            ..self.entry(code, at, callee)
        };
        let prefix = trampoline::entry_prefix(&entry)
            .map_err(|e| TargetError::Unsupported(format!("assembling a trampoline: {e}")))?;
        let reloc = at + prefix.len() as u64;
        let (Some(go), Some(call)) = (patch::jmp_rel32(reloc, callee), patch::jmp_rel32(from, at)) else {
            return Ok(Err("trampoline out of jump range".into()));
        };
        let mut tramp = prefix.clone();
        tramp.extend_from_slice(&go);
        s.write(at, &tramp)?;
        let pid = s.pid() as u32;
        self.own_trampoline(pid, at, &prefix, crate::owncode::Kind::Entry { site: callee });
        self.own_add(
            pid,
            reloc,
            reloc + go.len() as u64,
            crate::owncode::Kind::Relocated { map: vec![(reloc, callee)], calling: None },
        );
        // `call` in place of the call: e8 and the new displacement.
        let mut patch = call.to_vec();
        patch[0] = 0xe8;
        Ok(Ok(Placed { plan: (from, bytes, patch), tramp: at, retargets: Vec::new() }))
    }

    /// The trampoline of a statement at `addr` whose jump goes on the
    /// `lead` bytes of instructions before it (`Attach::Statement::lead`):
    /// those instructions relocated (a call among them returns here), the
    /// probe's prefix with the registers as at `addr`, and a jump to
    /// `addr`, whose bytes stay as they are.
    fn lead_in(
        &self,
        s: &mut Stopped,
        code: &mut CodeRegion,
        addr: u64,
        lead: usize,
        t: Tramp,
    ) -> Result<Result<Placed, String>, TargetError> {
        let from = addr - lead as u64;
        let bytes = s.read(from, lead)?;
        let Some(at) = code.alloc(1024) else { return Ok(Err("no room for its trampoline".into())) };
        let (relocated, copy) = match patch::relocate_with_map(&bytes, from, lead, at) {
            Ok(r) => r,
            Err(why) => return Ok(Err(why.to_string())),
        };
        // Without the copy's own jump back (to `addr`): the probe comes
        // first.
        let mut map = copy.map;
        let Some((jump_back, _)) = map.pop() else { return Ok(Err("nothing to relocate".into())) };
        let body = (jump_back - at) as usize;
        let prefix_at = jump_back;
        let entry = trampoline::Entry {
            handlers: t.handlers,
            ret_tramp: t.ret_tramp,
            lean: t.lean,
            inside: true,
            ..self.entry(code, prefix_at, addr)
        };
        let prefix = trampoline::entry_prefix(&entry)
            .map_err(|e| TargetError::Unsupported(format!("assembling a trampoline: {e}")))?;
        let end = prefix_at + prefix.len() as u64;
        let (Some(back), Some(jmp)) = (patch::jmp_rel32(end, addr), patch::jmp_rel32(from, at)) else {
            return Ok(Err("trampoline out of jump range".into()));
        };
        let mut tramp = relocated[..body].to_vec();
        tramp.extend_from_slice(&prefix);
        tramp.extend_from_slice(&back);
        if tramp.len() > 1024 {
            return Ok(Err("trampoline too large".into()));
        }
        s.write(at, &tramp)?;
        self.relocs.borrow_mut().push((at, body as u32, from, lead as u32));
        let pid = s.pid() as u32;
        self.own_add(pid, at, prefix_at, crate::owncode::Kind::Relocated { map, calling: None });
        self.own_add(
            pid,
            end,
            end + back.len() as u64,
            crate::owncode::Kind::Relocated { map: vec![(end, addr)], calling: None },
        );
        self.own_trampoline(pid, prefix_at, &prefix, crate::owncode::Kind::Entry { site: addr });
        let mut patch = jmp.to_vec();
        patch.resize(lead, arch::TRAP);
        Ok(Ok(Placed { plan: (from, bytes, patch), tramp: at, retargets: Vec::new() }))
    }

    /// A veneer to `target` within a patch jump's reach of `site`, in a
    /// veneer page of this module's (one mapped near `site` when none is
    /// in reach): its address, or why there is none.
    fn veneer(&self, s: &mut Stopped, site: u64, target: u64) -> Result<Result<u64, String>, TargetError> {
        let Some(bytes) = patch::far_jump(target) else {
            return Ok(Err("trampoline out of jump range".into()));
        };
        let mut pages = self.veneers.borrow_mut();
        let reaches = |p: &CodeRegion| {
            let at = p.next.next_multiple_of(16);
            at + bytes.len() as u64 <= p.remote + p.size && patch::jmp_rel32(site, at).is_some()
        };
        let i = match pages.iter().position(reaches) {
            Some(i) => i,
            None => match inject::veneer_page(s, site) {
                Ok(p) => {
                    pages.push(p);
                    pages.len() - 1
                }
                Err(e) => return Ok(Err(format!("trampoline out of jump range, and no room for a veneer: {e}"))),
            },
        };
        let Some(at) = pages[i].alloc(bytes.len()) else {
            return Ok(Err("trampoline out of jump range, and no room for a veneer".into()));
        };
        s.write(at, &bytes)?;
        // A sample there is at the site still: nothing has run but the
        // veneer's load of x16.
        let kind = crate::owncode::Kind::Relocated { map: vec![(at, site)], calling: None };
        self.own_add(s.pid() as u32, at, at + bytes.len() as u64, kind);
        Ok(Ok(at))
    }

    /// The trampoline of one function (or of an instruction inside one
    /// whose jump displaces `site` bytes, as pass 2 planned it); the patch
    /// to apply, or why not.
    fn function(
        &self,
        s: &mut Stopped,
        code: &mut CodeRegion,
        addr: u64,
        size: u64,
        site: Option<usize>,
        t: Tramp,
    ) -> Result<Result<Placed, String>, TargetError> {
        let bytes = s.read(addr, site.unwrap_or((size as usize).clamp(1, 1 << 20)) + 16)?;
        let (hook, retargets) = match site {
            Some(displaced) => (patch::Hook { patch_at: addr, displaced }, Vec::new()),
            None => match patch::plan_loop(&bytes, addr, size) {
                Ok(h) => h,
                Err(why) => return Ok(Err(why.to_string())),
            },
        };
        let Some(at) = code.alloc(1024) else { return Ok(Err("no room for its trampoline".into())) };
        let itrace = match (&t.itrace, self.itrace_wait) {
            (Some(_), Some(w)) => Some((code.at(w), self.itraced.borrow().len() as u32)),
            (Some(_), None) => return Ok(Err("the runtime library lacks rt_itrace_wait".into())),
            _ => None,
        };
        let entry = trampoline::Entry {
            handlers: t.handlers,
            returns: t.returns,
            ret_tramp: t.ret_tramp,
            lean: t.lean,
            itrace,
            span: t.span,
            inside: t.inside,
            ra_saved: t.ra_saved,
            // The landing pad before the site, when it signs x30.
            ra_signed: (hook.patch_at - addr)
                .checked_sub(4)
                .and_then(|o| bytes.get(o as usize..o as usize + 4))
                .map_or(0, |w| patch::signs_return(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))),
            ..self.entry(code, at, addr)
        };
        let nothing = entry.handlers.is_empty() && entry.returns.is_empty() && entry.itrace.is_none();
        let prefix = match &t.clock_only {
            Some(so) => trampoline::clock_entry_prefix(&entry, so),
            None if nothing => Ok(Vec::new()),
            None => trampoline::entry_prefix(&entry),
        }
        .map_err(|e| TargetError::Unsupported(format!("assembling a trampoline: {e}")))?;
        let start = (hook.patch_at - addr) as usize;
        let displaced = &bytes[start..start + hook.displaced];
        // A trampoline out of the jump's reach (a module larger than it):
        // at a function's entry, through a veneer within reach, and back
        // by a far jump (aarch64: x16 is free there).
        let far = patch::jmp_rel32(hook.patch_at, at).is_none();
        if far && (site.is_some() || !retargets.is_empty()) {
            return Ok(Err(
                "trampoline out of jump range (a far trampoline is only reached at a function's entry)".into()
            ));
        }
        let reloc_at = at + prefix.len() as u64;
        let relocate = if far { patch::relocate_at_entry } else { patch::relocate_with_map };
        let (relocated, map) = match relocate(displaced, hook.patch_at, hook.displaced, reloc_at) {
            Ok(r) => r,
            Err(why) => return Ok(Err(why.to_string())),
        };
        let to = if far {
            match self.veneer(s, hook.patch_at, at)? {
                Ok(v) => v,
                Err(why) => return Ok(Err(why)),
            }
        } else {
            at
        };
        let Some(jmp) = patch::jmp_rel32(hook.patch_at, to) else {
            return Ok(Err("trampoline out of jump range".into()));
        };
        if let Some(name) = t.itrace {
            let resume = at + prefix.len() as u64;
            let mut traced = crate::itrace::Traced::new(name, hook.patch_at, displaced.to_vec(), resume, &relocated);
            traced.extra = retargets.iter().map(|r| (r.at, r.original.clone())).collect();
            traced.loop_entry = (!retargets.is_empty()).then_some(hook.patch_at + patch::JMP_REL32_LEN as u64);
            self.itraced.borrow_mut().push(traced);
        }
        self.relocs.borrow_mut().push((
            at + prefix.len() as u64,
            relocated.len() as u32,
            hook.patch_at,
            hook.displaced as u32,
        ));
        let prefix_len = prefix.len();
        let mut tramp = prefix;
        tramp.extend_from_slice(&relocated);
        if tramp.len() > 1024 {
            return Ok(Err("trampoline too large".into()));
        }
        s.write(at, &tramp)?;
        let pid = s.pid() as u32;
        self.own_trampoline(pid, at, &tramp[..prefix_len], crate::owncode::Kind::Entry { site: hook.patch_at });
        let back = hook.patch_at + hook.displaced as u64;
        let calling = map.calling.map(|(lo, hi)| (lo, hi, back));
        let end = at + tramp.len() as u64;
        self.own_add(pid, at + prefix_len as u64, end, crate::owncode::Kind::Relocated { map: map.map, calling });
        let mut patch = jmp.to_vec();
        if !retargets.is_empty() {
            // The loops' way in: a second jump, past the probe, to the
            // relocated first instructions.
            let slot = hook.patch_at + patch::JMP_REL32_LEN as u64;
            let Some(second) = patch::jmp_rel32(slot, at + prefix_len as u64) else {
                return Ok(Err("trampoline out of jump range".into()));
            };
            patch.extend_from_slice(&second);
        }
        patch.resize(hook.displaced, arch::TRAP);
        Ok(Ok(Placed {
            plan: (hook.patch_at, displaced.to_vec(), patch),
            tramp: at,
            retargets: retargets.into_iter().map(|r| (r.at, r.original, r.patched)).collect(),
        }))
    }
}

/// A function's own return trampoline: assembled where the code region's
/// next allocation starts, given exactly its length, written.
fn place(
    h: &Hooker,
    s: &mut Stopped,
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
fn apply(
    s: &mut Stopped,
    plans: Vec<Plan>,
    patches: &mut Vec<Patch>,
    relocs: &[(u64, u32, u64, u32)],
) -> Result<(), TargetError> {
    let ranges: Vec<(u64, u64)> = plans.iter().map(|(at, orig, _)| (*at, orig.len() as u64)).collect();
    for tid in s.threads().collect::<Vec<_>>() {
        let mut r = s.regs(tid)?;
        let pc = arch::pc(&r);
        let Some((at, orig, _)) = plans.iter().find(|(at, orig, _)| pc > *at && pc < at + orig.len() as u64) else {
            continue;
        };
        let copy = relocs.iter().find(|&&(_, _, o, n)| o == *at && n as usize == orig.len()).map(|r| r.0);
        if let Some(to) = copy.and_then(|c| arch::patch::relocated_pc(orig, *at, orig.len(), c, pc)) {
            arch::set_pc(&mut r, to);
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
fn run_out_of(s: &mut Stopped, ranges: &[(u64, u64)]) -> Result<(), String> {
    let inside = |pc: u64| ranges.iter().any(|&(at, n)| pc > at && pc < at + n);
    match s.run_out(&inside, 200).map_err(|e| e.to_string())?.first() {
        Some(tid) => Err(format!("thread {tid} stays inside bytes that must change back")),
        None => Ok(()),
    }
}

/// Single-step every thread whose program counter is strictly inside one
/// of `ranges` (start, length) out of it: bytes about to change under it.
/// A thread that does not leave (a tight loop inside) fails the write.
fn step_out(s: &mut Stopped, ranges: &[(u64, u64)]) -> Result<(), TargetError> {
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

/// The dynamic loader's `r_brk` (called around every dlopen), from the
/// program's `DT_DEBUG` entry; None for static programs.
fn r_brk(s: &Stopped) -> Option<u64> {
    let pid = s.pid();
    let auxv = crate::os::proc::auxv(pid).ok()?;
    let aux = |t: u64| crate::os::proc::aux_value(&auxv, t);
    let (phdr, phnum) = (aux(libc::AT_PHDR)?, aux(libc::AT_PHNUM)?);
    let phdrs = s.read(phdr, 56 * phnum as usize).ok()?;
    let field = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let mut bias = None;
    let mut dynamic = None;
    for ph in phdrs.chunks_exact(56) {
        let kind = u32::from_le_bytes(ph[..4].try_into().unwrap_or([0; 4]));
        match kind {
            6 => bias = Some(phdr.wrapping_sub(field(ph, 16))), // PT_PHDR: p_vaddr
            2 => dynamic = Some((field(ph, 16), field(ph, 40))), // PT_DYNAMIC: p_vaddr, p_memsz
            _ => {}
        }
    }
    let (vaddr, size) = dynamic?;
    // The program's own word, and a dynamic section is a few hundred
    // bytes: read at most 64 KB of it.
    let dynamic = s.read(bias.unwrap_or(0).wrapping_add(vaddr), size.min(64 << 10) as usize).ok()?;
    let debug = dynamic.chunks_exact(16).find(|d| field(d, 0) == 21).map(|d| field(d, 8))?; // DT_DEBUG
    if debug == 0 {
        return None;
    }
    let r = s.read(debug.wrapping_add(16), 8).ok()?; // struct r_debug: r_version, r_map, r_brk
    Some(field(&r, 0)).filter(|&a| a != 0)
}

/// The unwinder's entry points that walk a stack, and where a C++ catch
/// block starts.
const UNWINDERS: [&str; 4] =
    ["_Unwind_RaiseException", "_Unwind_ForcedUnwind", "_Unwind_Resume", "_Unwind_Resume_or_Rethrow"];
const CATCH: &str = "__cxa_begin_catch";

/// The unwinder's entry points in the target ([`UNWINDERS`], [`CATCH`]):
/// run-time address, symbol size, and whether it is the catch. They live
/// in libgcc_s and the C++ runtime (or are linked into the program).
fn unwinder_entries(maps: &[Mapping], exe: &Path) -> Vec<(PathBuf, Vec<(u64, u64, bool)>)> {
    let candidate = |p: &Path| {
        let name = p.to_string_lossy();
        same_file(p, exe) || ["libgcc_s", "libstdc++", "libc++", "libunwind"].iter().any(|l| name.contains(l))
    };
    let names: Vec<&str> = UNWINDERS.iter().copied().chain([CATCH]).collect();
    symbol_entries(maps, candidate, &names)
        .into_iter()
        .map(|(m, found)| (m, found.into_iter().map(|(a, size, i)| (a, size, names[i] == CATCH)).collect()))
        .collect()
}

/// Inject the artifact into the stopped target and hook every function
/// entry and return probe. Probes in libraries not loaded yet wait: the
/// dynamic loader's `r_brk` is hooked, and they are placed when the library
/// appears (`Armed::poll`). Returns the region (for the tracer-side session)
/// and the armed target.
pub fn arm(mut s: Stopped, a: &Artifact, child: bool) -> Result<(Region, Armed), TargetError> {
    let pid = s.pid();
    check_machine(pid)?;
    // First of all, the stub every later system call and call goes
    // through: from here on, a tracer that dies at any instant leaves
    // every thread able to go on (`os::ptrace`, `arch::native::stub`).
    let stub = s.install_stub(inject::slack(&s))?;
    let execname = crate::os::proc::comm(pid).trim().to_string();
    let injected = inject::region(&mut s, a, &execname)?;
    let threads_at = inject::threads(&mut s, a)?;
    let tid_off = tcb_tid_offset(&s).unwrap_or(0);
    {
        use telco_abi::region::Header;
        // In the region and its trusted mirror, from which handlers take them.
        injected.region.set_header_u64(core::mem::offset_of!(Header, threads_at), threads_at);
        injected.region.set_header_u32(core::mem::offset_of!(Header, tcb_tid_off), tid_off);
    }
    let maps = mappings(pid)?;
    let exe = crate::os::proc::exe_path(pid);
    let mut by_module: ByModule = BTreeMap::new();
    for (i, p) in a.probes.iter().enumerate() {
        match &p.attach {
            Attach::Function { module, file_offset, only_exe, .. } => {
                if only_exe.as_ref().is_some_and(|only| !same_file(only, &exe)) {
                    continue;
                }
                by_module.entry(module.clone()).or_default().entry(*file_offset).or_default().push(i);
            }
            Attach::Statement { module, file_offset, .. } => {
                by_module.entry(module.clone()).or_default().entry(*file_offset).or_default().push(i);
            }
            _ => {}
        }
    }
    let symbol = |name: &str| a.symbols.iter().find(|s| s.name == name).map(|s| s.offset);
    let (Some(ret_push), Some(ret_pop), Some(enter), Some(dlnotify)) =
        (symbol("rt_ret_push"), symbol("rt_ret_pop"), symbol("rt_enter"), symbol("rt_dlnotify"))
    else {
        return Err(TargetError::Unsupported("the runtime library lacks a trampoline helper".into()));
    };
    // Return probes replace return addresses: before an exception walks a
    // stack, the unwinder's entry points put them back (`rt_unwind`), and
    // where a catch block starts, the calls still running get them again
    // (`rt_caught`).
    let returns = a.probes.iter().any(|p| matches!(p.attach, Attach::Function { ret: true, .. }));
    let unwinders = if returns { unwinder_entries(&maps, &exe) } else { Vec::new() };
    let (unwind, caught) = (symbol("rt_unwind"), symbol("rt_caught"));
    // rt_unwind and rt_caught read the saved registers and the thread's
    // slot: the whole context.
    let mut entry_hooks: BTreeMap<u64, (u32, bool)> = unwinders
        .iter()
        .flat_map(|(_, entries)| entries.iter())
        .filter_map(|&(addr, _, catch)| Some((addr, (if catch { caught? } else { unwind? }, true))))
        .collect();
    // Libraries not loaded yet: the loader's r_brk is hooked (rt_dlnotify),
    // by a probe of the script's there if it has one.
    let waits =
        by_module.iter().any(|(m, f)| f.keys().next().is_some_and(|&off| runtime_addr(&maps, m, off).is_none()));
    // And when the symbol table takes libraries loaded later.
    let late_syms = crate::symtab::LateSymbols::wanted(a);
    let brk = if waits || late_syms { r_brk(&s) } else { None };
    if let Some(b) = brk {
        entry_hooks.insert(b, (dlnotify, false));
    }
    let exec_notify = symbol("rt_execnotify")
        .filter(|_| !a.probes.iter().any(|p| matches!(p.attach, Attach::Function { itrace: true, .. })));
    if let Some(f) = exec_notify {
        entry_hooks.extend(exec_entries(&maps).into_iter().map(|addr| (addr, (f, false))));
    }
    let hooker = Hooker {
        entry_hooks: std::cell::RefCell::new(entry_hooks),
        artifact: a.clone(),
        region: injected.region_remote,
        ret_push,
        ret_pop,
        enter,
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
        profiling: a.probes.iter().any(|p| matches!(p.attach, Attach::Profile { .. })),
    };
    let mut patches = Vec::new();
    let mut codes = Vec::new();
    let mut refused = Vec::new();
    let mut plans = Vec::new();
    let mut pending: ByModule = BTreeMap::new();
    for (module, functions) in by_module {
        let mapped = functions.keys().next().is_some_and(|&off| runtime_addr(&maps, &module, off).is_some());
        if !mapped {
            pending.insert(module, functions);
            continue;
        }
        let (code, p) = hooker.module(&mut s, &maps, &module, &functions, &mut refused)?;
        plans.extend(p);
        codes.extend(code);
    }
    let mut warnings: Vec<String> = Vec::new();
    let mut dl_watch = None;
    if !pending.is_empty() && brk.is_none() {
        let names: Vec<String> = pending.keys().map(|m| m.display().to_string()).collect();
        return Err(TargetError::NotMapped { module: names.join(", "), pid });
    }
    if let Some(brk) = brk {
        // Wait for the libraries, or hear of them: hook the loader's
        // notification function (unless a probe of the script's there does
        // it already).
        if !hooked(&plans, brk) {
            let mut code = inject::code(&mut s, a, brk, 4096)?;
            hooker.own_blob(pid as u32, &code);
            let bytes = s.read(brk, 32)?;
            let size = patch::plan(&bytes, brk, 1).map(|_| 1).unwrap_or(16);
            let notify = code.at(hooker.dlnotify);
            match hooker.function(&mut s, &mut code, brk, size, None, Tramp::call(notify))? {
                Ok(p) => {
                    plans.extend(p.into_plans());
                    codes.push(code);
                }
                Err(why) if pending.is_empty() => warnings.push(format!(
                    "backtraces will not name libraries loaded later (hooking the loader's r_brk: {why})"
                )),
                Err(why) => {
                    return Err(TargetError::Unsupported(format!(
                        "cannot watch for libraries loaded later (hooking the loader's r_brk: {why})"
                    )))
                }
            }
        }
        // The tracer hears of a thread waiting in r_brk at once, not at its
        // next poll.
        let at = core::mem::offset_of!(telco_abi::region::Header, dl_gen);
        match crate::os::sys::Watch::start(injected.region.fd(), 4096.min(a.region_size as usize), at) {
            Ok(w) => dl_watch = Some(w),
            Err(e) => warnings.push(format!("libraries loaded later wait for the 10 ms poll (no watcher: {e})")),
        }
        if !pending.is_empty() {
            // SAFETY: the header is at offset 0 of the live region.
            unsafe { header_u32(&injected.region, core::mem::offset_of!(telco_abi::region::Header, dl_wait)) }
                .store(1, std::sync::atomic::Ordering::Release);
        }
    }
    if returns {
        for (_, entries) in unwinders {
            // A probe of the script's there calls the hook already.
            let entries: Vec<_> = entries.into_iter().filter(|&(addr, _, _)| !hooked(&plans, addr)).collect();
            if entries.is_empty() {
                continue;
            }
            // One code region per library for its entry points.
            let mut code = inject::code(&mut s, a, entries[0].0, 1024 * entries.len() as u64 + 1024)?;
            hooker.own_blob(s.pid() as u32, &code);
            for (addr, size, catch) in entries {
                let Some(f) = (if catch { caught } else { unwind }) else { continue };
                let handler = code.at(f);
                match hooker.function(&mut s, &mut code, addr, size, None, Tramp::call(handler))? {
                    Ok(p) => plans.extend(p.into_plans()),
                    Err(why) if catch => refused.push(format!(
                        "the C++ runtime's catch at {addr:#x} ({why}): functions with a return probe that catch an \
                     exception will not have it run"
                    )),
                    Err(why) => refused.push(format!(
                        "the unwinder at {addr:#x} ({why}): a C++ exception through a frame with a return probe would \
                     end the program"
                    )),
                }
            }
            codes.push(code);
        }
    }
    if plans.is_empty() && pending.is_empty() && !refused.is_empty() {
        return Err(TargetError::NothingPlaced(refused.join("\n")));
    }
    // Follow execs (not with `.itrace`, whose single-stepper attaches to
    // threads itself).
    let follow = match symbol("rt_execnotify") {
        Some(f) if !a.probes.iter().any(|p| matches!(p.attach, Attach::Function { itrace: true, .. })) => {
            let mut codes = Vec::new();
            hook_execs(&hooker, &mut s, a, &maps, f, &mut plans, &mut codes, &mut refused)?;
            Some(Follow {
                region_fd: injected.region.fd(),
                mirror_fd: injected.region.mirror_fd(),
                region_ino: crate::os::proc::fd_inode(injected.region.fd()),
                region_remote: injected.region_remote,
                region_size: a.region_size,
                threads_at,
                execnotify: f,
                waiting: Vec::new(),
                execed: Vec::new(),
                children: Vec::new(),
                said: Default::default(),
                vforked: Default::default(),
                same_pid_ns: crate::os::proc::same_pid_namespace(pid),
                rows_checked: std::time::Instant::now(),
                _codes: codes,
            })
        }
        _ => None,
    };
    apply(&mut s, plans, &mut patches, &hooker.relocs.borrow())?;
    let semaphores = raise_semaphores(&s, a, &maps, &[], &patches);
    // SAFETY: the mirror's own base: handlers read the symbol table there.
    unsafe { publish_symbols(injected.region.trusted(), s.pid(), a, &maps, &hooker.relocs.borrow()) };
    if codes.is_empty() {
        // Room for the crash handler's stub and the lifecycle calls.
        let near = arch::pc(&s.regs(s.main_thread())?);
        let code = inject::code(&mut s, a, near, 4096)?;
        hooker.own_blob(s.pid() as u32, &code);
        codes.push(code);
    }
    let crash = codes.first_mut().and_then(|code| crate::crash::install(&mut s, code, a, injected.region_remote));
    let region_ino = crate::os::proc::fd_inode(injected.region.fd());
    let enabled = unsafe_enabled_ptr(&injected.region);
    let header = injected.region.base() as *const u8;
    let mirror = injected.region.trusted();
    let armed = Armed {
        pid,
        child,
        patches,
        stopped: Some(s),
        region_enabled: Some(enabled),
        header,
        mirror,
        creds: crate::os::creds::Credentials::of(pid),
        cut_off: Vec::new(),
        domains_checked: None,
        hooker,
        pending,
        late: BTreeMap::new(),
        exit_status: None,
        follow,
        killed_by: None,
        quiet: false,
        warnings: refused.into_iter().map(|r| format!("cannot probe {r}")).chain(warnings).collect(),
        late_syms: Default::default(),
        late_syms_said: 0,
        dl_watch,
        itracer: None,
        blocktracer: None,
        crash,
        crashes: Vec::new(),
        region_ino,
        exes: [(pid, exe)].into_iter().collect(),
        region_remote: injected.region_remote,
        region_fd: injected.region.fd(),
        semaphores,
        stub,
        _code: codes,
    };
    Ok((injected.region, armed))
}

/// Tell the symbol table (`Artifact::symtab_off`) where each of its modules
/// is loaded: the bias, then `mapped` (Release). Modules not mapped yet are
/// left for a later call (libraries loaded with dlopen). Also where the
/// trampolines' copies of first instructions are (`relocs`, all so far).
///
/// # Safety
/// `base` is the live region of `a`.
unsafe fn publish_symbols(base: *mut u8, pid: i32, a: &Artifact, maps: &[Mapping], relocs: &[(u64, u32, u64, u32)]) {
    use telco_abi::region::{SymReloc, SymTable, SymTableModule, SYM_MODULE_SIZE, SYM_RELOC_SIZE};
    if a.symtab_off == 0 {
        return;
    }
    let tab = base.add(a.symtab_off as usize);
    let field = |off: usize| std::sync::atomic::AtomicU32::from_ptr(tab.add(off).cast());
    // Where the entries go and how many fit: the artifact's word (the
    // region's copy is the target's to overwrite), within the region.
    let fixed = |off: usize| a.init_u32(a.symtab_off + off as u64).map(|v| v as usize);
    let (Some(cap), Some(at)) =
        (fixed(core::mem::offset_of!(SymTable, relocs_cap)), fixed(core::mem::offset_of!(SymTable, relocs)))
    else {
        return;
    };
    let room = (a.region_size as usize).saturating_sub(a.symtab_off as usize + at) / SYM_RELOC_SIZE;
    let n = relocs.len().min(cap).min(room);
    for (i, &(copy, copy_len, orig, orig_len)) in relocs.iter().enumerate().take(n) {
        let r = SymReloc { copy, orig, copy_len, orig_len };
        std::ptr::write_unaligned(tab.add(at + i * SYM_RELOC_SIZE).cast::<SymReloc>(), r);
    }
    // Release: a handler that sees the count sees the entries.
    field(core::mem::offset_of!(SymTable, nrelocs)).store(n as u32, std::sync::atomic::Ordering::Release);
    // The vDSO (pass 2's own image, the same in every process): where this
    // process maps it.
    let vdso = || {
        let maps = crate::os::proc::maps(pid).ok()?;
        maps.iter().find(|m| m.path.as_os_str() == "[vdso]").map(|m| m.start)
    };
    for (i, m) in a.symtab_modules.iter().enumerate() {
        let at = match m.path.as_os_str() == "[vdso]" {
            true => vdso().map(|v| v + m.anchor_offset),
            false => runtime_addr(maps, &m.path, m.anchor_offset),
        };
        let Some(at) = at else { continue };
        let md = base.add(a.symtab_off as usize + core::mem::size_of::<SymTable>() + i * SYM_MODULE_SIZE);
        std::sync::atomic::AtomicU64::from_ptr(md.add(core::mem::offset_of!(SymTableModule, bias)).cast())
            .store(at.wrapping_sub(m.anchor_addr), std::sync::atomic::Ordering::Relaxed);
        // Release: a handler that sees `mapped` sees the bias.
        std::sync::atomic::AtomicU32::from_ptr(md.add(core::mem::offset_of!(SymTableModule, mapped)).cast())
            .store(1, std::sync::atomic::Ordering::Release);
    }
}

/// Where the C library keeps a thread's id in its thread control block, as
/// an offset from the thread pointer (a u32 that the runtime library
/// sign-extends): the first 4-aligned word of the 4 KB after it (x86_64)
/// or before it (aarch64, `arch::TCB_WINDOW`) equal to the thread's id, the
/// same for every stopped thread (glibc on x86_64: 0x2d0; musl: 0x30). None when a thread has no
/// thread pointer yet (a static program before its C library set one up)
/// or no offset fits all of them; then `thread_slot` cannot tell a thread
/// from a later one with the same control block.
fn tcb_tid_offset(s: &Stopped) -> Option<u32> {
    let mut found: Option<Vec<u32>> = None;
    for tid in s.threads() {
        let tls = arch::TLS_REGSET.and_then(|nt| s.regset(tid, nt, 8).ok());
        let tp = arch::thread_pointer(&s.regs(tid).ok()?, tls.as_deref());
        if tp == 0 {
            return None;
        }
        // The window: after the thread pointer (x86_64) or before it (aarch64).
        let from = tp.wrapping_add_signed(arch::TCB_WINDOW);
        let block = s.read(from, 4096).ok()?;
        let here: Vec<u32> = (0..block.len() / 4)
            .map(|i| arch::TCB_WINDOW + 4 * i as i64)
            .filter(|&o| {
                let i = (o - arch::TCB_WINDOW) as usize;
                o.unsigned_abs() >= 8
                    && u32::from_le_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]) == tid as u32
            })
            .map(|o| o as i32 as u32)
            .collect();
        found = Some(match found {
            None => here,
            Some(prev) => prev.into_iter().filter(|o| here.contains(o)).collect(),
        });
    }
    found?.first().copied()
}

/// An atomic view of a u32/u64 header field of a live region.
///
/// # Safety
/// `off` must be a field of the right type in the header of `r`.
unsafe fn header_u32(r: &Region, off: usize) -> &std::sync::atomic::AtomicU32 {
    std::sync::atomic::AtomicU32::from_ptr(r.base().add(off).cast())
}

fn unsafe_enabled_ptr(r: &Region) -> *const u32 {
    // SAFETY: the header is at offset 0 of the region, which outlives the
    // session (Armed is dropped before the Region).
    unsafe { r.base().add(core::mem::offset_of!(telco_abi::region::Header, enabled)).cast() }
}

impl Armed {
    /// Where the symbol table finds the symbols of libraries the target
    /// loads later (`symtab.rs`); those it maps already but pass 2 did not
    /// read (preloaded ones) are added now.
    pub fn symbols_from(&mut self, source: Box<dyn crate::symtab::SymbolSource>) {
        if crate::symtab::LateSymbols::wanted(&self.hooker.artifact) {
            self.late_syms.set_source(source);
            self.publish_late_symbols();
            self.set_dl_wait();
        }
    }

    /// Threads in the loader's `r_brk` wait for the tracer while probes
    /// wait for a library or the symbol table takes new ones (the hook is
    /// there when either was wanted at arm time).
    fn set_dl_wait(&self) {
        if self.header.is_null() {
            return;
        }
        let wait = !(self.pending.is_empty() && self.late.is_empty()) || self.late_syms.active();
        let at = core::mem::offset_of!(telco_abi::region::Header, dl_wait);
        // SAFETY: the live region's header's dl_wait field.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.header.add(at) as *mut u32) }
            .store(u32::from(wait), std::sync::atomic::Ordering::Release);
    }

    /// Add the libraries mapped now to the symbol table's late slots; say
    /// once which ones found no room.
    fn publish_late_symbols(&mut self) {
        if !self.late_syms.active() || self.header.is_null() {
            return;
        }
        let Ok(maps) = mappings(self.pid) else { return };
        // SAFETY: the header pointer is the live region's base, mapped for
        // the artifact's region_size.
        unsafe { self.late_syms.publish(self.mirror, &self.hooker.artifact, &maps) };
        for p in &self.late_syms.no_room[self.late_syms_said..] {
            let w = format!("no room in the symbol table for {}: backtraces will not name it", p.display());
            if !self.quiet {
                crate::eprintln_escaped!("WARNING: {w}");
            }
            self.warnings.push(w);
        }
        self.late_syms_said = self.late_syms.no_room.len();
    }

    /// The command ended with wait status `status`: its exit status as a
    /// shell gives it (128 + the signal that killed it), and the signal.
    fn ended(&mut self, status: Status) {
        self.exit_status = status.shell_status();
        self.killed_by = status.killed_by();
    }

    fn alive(&mut self) -> bool {
        if self.exit_status.is_some() {
            return false;
        }
        if self.child {
            let r = crate::os::wait::wait(self.pid, false);
            if let Ok(Some((_, status))) = r {
                if status.ended() {
                    self.ended(status);
                    return false;
                }
                // A stop of the command while we follow it into an exec
                // (we trace it again then): the follower's.
                if let Some(f) = &mut self.follow {
                    if let Some(crate::os::ptrace::ExecWait::Exec) = crate::os::ptrace::exec_stop(self.pid, status) {
                        f.execed.push(self.pid);
                    }
                }
                return true;
            }
            return r.is_ok();
        }
        crate::os::proc::running(self.pid)
    }
}

impl Hooks for Armed {
    fn started(&mut self) -> Result<(), String> {
        if let Some(mut s) = self.stopped.take() {
            // The target starts (or is attached to) after the session's
            // begin probes: process.begin in it, thread.begin in each of
            // its other threads.
            if let Some(code) = self._code.first() {
                let exe = self.exes.get(&self.pid).cloned().unwrap_or_default();
                let main = s.main_thread();
                let others: Vec<i32> = s.threads().filter(|&t| t != main).collect();
                let a = &self.hooker.artifact;
                let mut said = lifecycle(&mut s, a, code, self.region_remote, main, LifeEvent::ProcessBegin, &exe);
                for t in others {
                    said.extend(lifecycle(&mut s, a, code, self.region_remote, t, LifeEvent::ThreadBegin, &exe));
                }
                for w in said {
                    if !self.quiet {
                        crate::eprintln_escaped!("WARNING: {w}");
                    }
                    self.warnings.push(w);
                }
            }
            s.detach().map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn own_code(&self) -> Option<crate::owncode::Shared> {
        Some(self.hooker.own.clone())
    }

    fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.dl_watch.as_ref().map(|w| w.fd())
    }

    fn watching(&self) -> bool {
        true
    }

    fn gone(&mut self) -> bool {
        !self.alive()
    }

    fn poll(&mut self) {
        if let Some(it) = &mut self.itracer {
            it.poll(&self.hooker.itraced.borrow());
        }
        if let Some(b) = &self.blocktracer {
            // MAXITRACE calls traced: the gates stop asking (they read the
            // slots' count from the trusted mirror, which only we write).
            if b.closed.load(std::sync::atomic::Ordering::Acquire) && !self.mirror.is_null() {
                let at = core::mem::offset_of!(telco_abi::region::Header, itrace_slots);
                // SAFETY: a u32 field of the live mirror's header.
                unsafe { std::sync::atomic::AtomicU32::from_ptr(self.mirror.add(at).cast()) }
                    .store(0, std::sync::atomic::Ordering::Relaxed);
            }
            // Functions of libraries loaded later join the traced ones.
            let now = self.hooker.itraced.borrow();
            if let Ok(mut t) = b.traced().lock() {
                if t.len() != now.len() {
                    *t = now.clone();
                }
            }
        }
        self.follow_execs();
        self.check_domains();
        self.reclaim_rows();
        self.take_crash();
        let probes_wait = !(self.pending.is_empty() && self.late.is_empty());
        if !(probes_wait || self.late_syms.active()) || self.header.is_null() {
            return;
        }
        use std::sync::atomic::{AtomicU64, Ordering};
        let header = self.header;
        let field = move |off: usize| {
            // SAFETY: `header` is the live region's header; dl_gen/dl_ack are u64 fields.
            unsafe { AtomicU64::from_ptr(header.add(off) as *mut u64) }
        };
        let gen_at = core::mem::offset_of!(telco_abi::region::Header, dl_gen);
        let ack_at = core::mem::offset_of!(telco_abi::region::Header, dl_ack);
        if let Some(w) = &self.dl_watch {
            w.drain();
        }
        // Acquire: pairs with rt_dlnotify's AcqRel increment.
        let gen = field(gen_at).load(Ordering::Acquire);
        if gen <= field(ack_at).load(Ordering::Relaxed) {
            return;
        }
        if probes_wait {
            if let Err(e) = self.place_pending() {
                self.warnings.push(format!("cannot probe a library loaded later: {e}"));
                if !self.quiet {
                    crate::eprintln_escaped!("WARNING: cannot probe a library loaded later: {e}");
                }
            }
        }
        self.publish_late_symbols();
        // Release: the hooks are written before the waiting thread goes on.
        field(ack_at).store(gen, Ordering::Release);
    }

    fn stopping(&mut self) {
        if let Some(it) = &mut self.itracer {
            // Requests made until now are served; then the gates give up.
            it.poll(&self.hooker.itraced.borrow());
        }
        if let Some(b) = &mut self.blocktracer {
            // Requests made until now are served; threads still tracing
            // leave the pool at their next block.
            b.finish();
        }
        if let Some(p) = self.region_enabled.take() {
            // SAFETY: see unsafe_enabled_ptr; Release pairs with the
            // handlers' Acquire load at entry.
            unsafe { std::sync::atomic::AtomicU32::from_ptr(p as *mut u32) }
                .store(0, std::sync::atomic::Ordering::Release);
        }
        self.take_leftover_crash();
        self.unfollow();
        self.restore();
        if let Some(it) = &mut self.itracer {
            // After the world stopped and went on: every gate has given up.
            it.count_missed();
        }
    }
}

impl Armed {
    /// Put the original bytes back (the end of a session): in the traced
    /// process, then in the processes it forked that still run its image
    /// (they share the region and carry copies of the patches).
    fn restore(&mut self) {
        let mut forks = self.forked_children();
        let cut: Vec<i32> =
            self.cut_off.iter().filter(|&&(p, fork)| fork && !forks.contains(&p)).map(|&(p, _)| p).collect();
        forks.extend(cut);
        let (crash, semaphores) = (self.crash, self.semaphores.clone());
        self.restore_main();
        for pid in forks {
            self.restore_fork(pid, crash.as_ref(), &semaphores);
        }
        self.patches.clear();
    }

    /// Why process `pid` is not of the session's trust domain (other
    /// credentials than its first process had, or a secure exec), or None.
    fn other_domain(&self, pid: i32) -> Option<String> {
        use crate::os::creds::{secure_exec, Credentials};
        let first = self.creds.as_ref()?;
        match Credentials::of(pid) {
            None => Some("its credentials cannot be read".into()),
            Some(c) if &c != first => Some(c.difference(first)),
            Some(_) if secure_exec(pid) => Some("a setuid, setgid or capability exec".into()),
            Some(_) => None,
        }
    }

    /// Children of the session (forked, or exec'd and followed) whose
    /// credentials are no longer the first process's (a worker that
    /// dropped its privileges): cut off from the region, every 50 ms at
    /// most. Their region is replaced by private zeroed memory at the same
    /// address, so the handlers their patched code still reaches find the
    /// session disabled and whatever they write stays in their own
    /// memory; the read-only mirror gives their code no address from a
    /// process of another domain. Until then they could forge data in the
    /// region, never move a write (the mirror: invariant 6). Cleaned at
    /// the end like other forked children (`restore`).
    fn check_domains(&mut self) {
        let now = std::time::Instant::now();
        if self.creds.is_none() || self.domains_checked.is_some_and(|t| now - t < std::time::Duration::from_millis(50))
        {
            return;
        }
        self.domains_checked = Some(now);
        let followed: Vec<i32> =
            self.follow.as_ref().map(|f| f.children.iter().map(|c| c.pid).collect()).unwrap_or_default();
        // Every descendant (cheap: no maps are read but those of one whose
        // credentials differ), and the followed ones.
        let mut pids = self.descendants();
        pids.extend(followed.iter().copied().filter(|p| !pids.contains(p)).collect::<Vec<_>>());
        for pid in pids {
            if self.cut_off.iter().any(|&(p, _)| p == pid) {
                continue;
            }
            // Gone (or a zombie): nothing of it runs any more.
            let Some(creds) = crate::os::creds::Credentials::of(pid) else { continue };
            let Some(why) = self.creds.as_ref().filter(|first| **first != creds).map(|first| creds.difference(first))
            else {
                continue;
            };
            // Not the session's (it maps no region of ours: exec'd unprobed,
            // a vfork child sharing its parent's memory, one cut off).
            let ours = crate::os::proc::maps_file(pid, "/memfd:telco-stap", self.region_ino);
            if !ours || crate::os::process::same_vm(pid, self.pid) {
                continue;
            }
            let what = format!("pid {pid} ({})", crate::os::proc::comm(pid).trim());
            let fork = !followed.contains(&pid);
            let note = match self.cut(pid, fork) {
                Ok(()) => format!(
                    "{what} changed its credentials ({why}): processes of different privileges never share a \
                     session's memory, so its probes are off from now on"
                ),
                // It ended meanwhile (perhaps right after it was cut off).
                Err(_) if crate::os::creds::Credentials::of(pid).is_none() => {
                    format!("{what} changed its credentials ({why}), then ended")
                }
                Err(e) => format!("{what} changed its credentials ({why}) and could not be cut off: {e}"),
            };
            self.cut_off.push((pid, fork));
            if !self.quiet {
                crate::eprintln_escaped!("WARNING: {note}");
            }
            self.warnings.push(note);
        }
    }

    /// Replace the region in process `pid` by zeroed private memory
    /// (`check_domains`); `fork`: it runs the first process's image (its
    /// remote-operation stub is there too).
    fn cut(&mut self, pid: i32, fork: bool) -> Result<(), String> {
        let mut s = Stopped::attach(pid).map_err(|e| e.to_string())?;
        if fork {
            s.use_stub(self.stub.as_ref());
        }
        let size = self.hooker.artifact.region_size.next_multiple_of(4096);
        let tid = s.main_thread();
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED) as u64;
        let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let r = s.syscall(tid, libc::SYS_mmap, [self.region_remote, size, prot, flags, u64::MAX, 0]);
        let r = r.map_err(|e| e.to_string())?;
        // Cut off once the mapping is replaced, whatever the detach says
        // (a process that ends meanwhile cannot be detached from).
        let _ = s.detach();
        if r as u64 != self.region_remote {
            return Err(format!("mmap in pid {pid} returned {r}"));
        }
        Ok(())
    }

    /// The descendants of the traced process (a few levels, a bounded
    /// number) that still run its image: they map the session's region
    /// (its memfd's inode), do not share its memory (a vfork child) and are
    /// not programs it exec'd (followed apart).
    fn forked_children(&self) -> Vec<i32> {
        let followed: Vec<i32> =
            self.follow.as_ref().map(|f| f.children.iter().map(|c| c.pid).collect()).unwrap_or_default();
        self.descendants()
            .into_iter()
            .filter(|&c| {
                !followed.contains(&c)
                    && crate::os::proc::maps_file(c, "/memfd:telco-stap", self.region_ino)
                    && !crate::os::process::same_vm(c, self.pid)
            })
            .take(256)
            .collect()
    }

    /// The descendants of the traced process: a few levels, at most 1024.
    fn descendants(&self) -> Vec<i32> {
        let mut out = Vec::new();
        let mut work = vec![self.pid];
        while let Some(p) = work.pop() {
            for c in crate::os::proc::children(p) {
                if out.len() < 1024 && !out.contains(&c) && c != self.pid {
                    out.push(c);
                    work.push(c);
                }
            }
        }
        out
    }

    /// A forked child: the patches it still holds (its own bytes checked:
    /// the traced process may have placed others after the fork, where the
    /// child has something else), the crash handler and semaphores it
    /// inherited, then what the session mapped, as in the traced process.
    fn restore_fork(&mut self, pid: i32, crash: Option<&crate::crash::Hook>, semaphores: &[u64]) {
        let mut s = match Stopped::attach(pid) {
            Ok(s) => s,
            Err(PtraceError::NoProcess(_)) => return,
            Err(e) => {
                crate::eprintln_escaped!(
                    "warning: cannot stop pid {pid}, forked from {}, to remove the probes: {e}",
                    self.pid
                );
                return;
            }
        };
        s.use_stub(self.stub.as_ref());
        let held: Vec<Patch> = self
            .patches
            .iter()
            .filter(|p| s.read(p.at, p.patched.len()).is_ok_and(|b| b == p.patched))
            .cloned()
            .collect();
        self.clean(s, &held, crash, semaphores, &format!("pid {pid} (forked from {})", self.pid));
    }

    /// Take the session out of a stopped process of it: the crash handler,
    /// the semaphores, the `patches` (threads inside them run out first),
    /// then what the session mapped; detach. `what` names the process in
    /// warnings.
    fn clean(
        &mut self,
        mut s: Stopped,
        patches: &[Patch],
        crash: Option<&crate::crash::Hook>,
        semaphores: &[u64],
        what: &str,
    ) {
        put_back(&mut s, patches, crash, semaphores, what);
        // A process on its way out (the session ended it) loses the
        // mappings with the rest of its memory.
        if let Err(why) =
            self.unmap_injected(&mut s).or_else(|e| if crate::os::proc::ending(s.pid()) { Ok(()) } else { Err(e) })
        {
            let w = format!("the session's memory stays mapped in {what}: {why}");
            if !self.quiet {
                crate::eprintln_escaped!("WARNING: {w}");
            }
            self.warnings.push(w);
        }
        if let Err(e) = s.detach() {
            crate::eprintln_escaped!("warning: {e}");
        }
    }

    /// The traced process's part of [`Armed::restore`].
    fn restore_main(&mut self) {
        if !self.alive() || (self.patches.is_empty() && self.crash.is_none() && self.semaphores.is_empty()) {
            return;
        }
        // After an exec the old image (and our hooks) are gone: writing the
        // saved bytes would corrupt the new program. Our region's mapping
        // tells which image this is.
        let ours = crate::os::proc::maps_file(self.pid, "/memfd:telco-stap", 0);
        if !ours {
            // (The patches stay for the processes it forked before.)
            self.crash = None;
            self.semaphores.clear();
            return;
        }
        // Put the original bytes back, with every thread stopped.
        let s = match self.stopped.take() {
            Some(s) => Ok(s),
            None => Stopped::attach(self.pid).map(|mut s| {
                s.use_stub(self.stub.as_ref());
                s
            }),
        };
        match s {
            Ok(s) => {
                let crash = self.crash.take();
                let semaphores = std::mem::take(&mut self.semaphores);
                let patches = self.patches.clone();
                self.clean(s, &patches, crash.as_ref(), &semaphores, &format!("pid {}", self.pid));
            }
            // It exited meanwhile: nothing left to restore.
            Err(PtraceError::NoProcess(_)) => {}
            Err(e) => crate::eprintln_escaped!("warning: cannot stop pid {} to remove the probes: {e}", self.pid),
        }
    }

    /// After the patches are restored (every thread stopped): unmap what the
    /// session put into the process — code regions, the shared region, the
    /// thread slots — so that a process traced again and again does not
    /// grow. Calls still running under a return probe get their own return
    /// addresses back first. Not while a thread is inside our code (a
    /// trampoline, a handler, a call waiting for the tracer) or a vfork
    /// child shares the memory: then why not.
    fn unmap_injected(&self, s: &mut Stopped) -> Result<(), String> {
        use telco_abi::region::ThreadSlot;
        let a = &self.hooker.artifact;
        let page = |n: u64| n.next_multiple_of(4096);
        let mut regions: Vec<(u64, u64)> = self._code.iter().map(|c| (c.remote, c.size)).collect();
        if let Some(f) = &self.follow {
            regions.extend(f._codes.iter().map(|c| (c.remote, c.size)));
        }
        let mut code = regions.clone();
        if let Some(p) = &self.stub {
            code.push((p.at, crate::arch::native::stub::SIZE));
        }
        // The block tracer's pool: threads in its code caches leave at
        // their next block (`BlockTracing::finish` sent them out).
        if let Some(b) = &self.blocktracer {
            let (ranges, pool) = b.ranges();
            code.extend(ranges.iter().copied());
            regions.push(pool);
        }
        regions.push((self.region_remote, page(a.region_size)));
        regions.push((self.region_remote - telco_abi::region::MIRROR_GAP, page(a.region_size)));
        let threads_at = self.hooker.threads_at;
        if threads_at != 0 {
            regions.push((threads_at, inject::threads_size(a)));
        }
        // A thread inside our code (a trampoline, a disabled handler)
        // runs on, alone, until it has left (`Stopped::run_out`: no single
        // steps, which a dying tracer would leave armed): with the patches
        // gone it does not come back (but through a return address, given
        // back below).
        let inside = |pc: u64| code.iter().any(|&(at, n)| pc >= at && pc < at + n);
        let stuck = s.run_out(&inside, 200).map_err(|e| e.to_string())?;
        if let Some(tid) = stuck.first() {
            return Err(format!("thread {tid} stayed inside a probe for 200 ms"));
        }
        // Calls still running whose return address is a trampoline's: the
        // return address goes back to the caller (as `rt_unwind` does for
        // an exception), so they return past the trampolines (their return
        // probes do not run: the session is over). A frame whose stack
        // slot holds something else was left by a longjmp.
        if threads_at != 0 {
            use telco_abi::region::ShadowFrame;
            let size = core::mem::size_of::<ThreadSlot>();
            let slots = s.read(threads_at, size * a.nthreads as usize).map_err(|e| e.to_string())?;
            let u32_at = |b: &[u8], off: usize| u32::from_le_bytes(b[off..off + 4].try_into().unwrap_or([0; 4]));
            let u64_at = |b: &[u8], off: usize| u64::from_le_bytes(b[off..off + 8].try_into().unwrap_or([0; 8]));
            // The frames are the target's word: a return address is put
            // back only over one of our trampolines' addresses, and only
            // in memory the program itself could write (a /proc/PID/mem
            // write would also go through read-only pages).
            let writable: Vec<(u64, u64)> = crate::os::proc::maps(s.pid())
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|m| m.writable)
                .map(|m| (m.start, m.end))
                .collect();
            let may_write = |at: u64| writable.iter().any(|&(lo, hi)| at >= lo && at.saturating_add(8) <= hi);
            for b in slots.chunks_exact(size) {
                let depth = u32_at(b, core::mem::offset_of!(ThreadSlot, depth)).min(a.shadow_depth);
                if u32_at(b, core::mem::offset_of!(ThreadSlot, pid)) != s.pid() as u32 || depth == 0 {
                    continue;
                }
                // The whole stack in one read (up to MAXRETURNDEPTH frames).
                let frames = u64_at(b, core::mem::offset_of!(ThreadSlot, frames));
                let stride = a.frame_size as usize;
                if stride < core::mem::size_of::<ShadowFrame>() {
                    return Err("the artifact's shadow frames are too small".into());
                }
                let stack = s.read(frames, stride * depth as usize).map_err(|e| e.to_string())?;
                // A stopped thread whose link register holds a trampoline's
                // address (aarch64: a probed function before its prologue
                // saved x30, or after its epilogue reloaded it).
                let tid = u32_at(b, core::mem::offset_of!(ThreadSlot, tid)) as i32;
                let mut regs = s.threads().any(|t| t == tid).then(|| s.regs(tid).ok()).flatten();
                let mut link_changed = false;
                for f in stack.chunks_exact(stride).rev() {
                    let (ret, sp, tramp) = (
                        u64_at(f, core::mem::offset_of!(ShadowFrame, ret)),
                        u64_at(f, core::mem::offset_of!(ShadowFrame, sp)),
                        u64_at(f, core::mem::offset_of!(ShadowFrame, tramp)),
                    );
                    // Where the function keeps it (`ShadowFrame::saved`:
                    // aarch64's prologue may save x30 below the slot).
                    let saved = u32_at(f, core::mem::offset_of!(ShadowFrame, saved)) as i32;
                    let at = sp.wrapping_add((saved & !telco_abi::region::SAVED_SIGNED) as i64 as u64);
                    // The word there signed as the function signs return
                    // addresses (aarch64: the PAC bits, above the address).
                    let holds = |w: &[u8]| u64_at(w, 0) & telco_abi::arch::native::PC_MASK == tramp;
                    if inside(tramp) && may_write(at) && s.read(at, 8).is_ok_and(|w| holds(&w)) {
                        s.write(at, &ret.to_le_bytes()).map_err(|e| e.to_string())?;
                    }
                    // The link register: the original return address as
                    // the function was given it (signed, where it signs),
                    // unless the function has authenticated it already: a
                    // thread at the `ret` after its `autiasp` (the only
                    // instruction between the two) gets it without the
                    // signature.
                    if let Some(r) = regs.as_mut().filter(|_| inside(tramp)) {
                        match crate::arch::native::link_register(r) {
                            Some(lr) if lr & telco_abi::arch::native::PC_MASK == tramp => {
                                let signed = saved & telco_abi::region::SAVED_SIGNED != 0;
                                let pc = crate::arch::native::pc(r);
                                let authenticated = signed
                                    && lr == tramp
                                    && s.read(pc, 4).is_ok_and(|w| crate::arch::native::is_return(&w));
                                let v = if authenticated { ret & telco_abi::arch::native::PC_MASK } else { ret };
                                crate::arch::native::set_link_register(r, v);
                                link_changed = true;
                            }
                            _ => {}
                        }
                    }
                }
                if let (true, Some(r)) = (link_changed, &regs) {
                    s.set_regs(tid, r).map_err(|e| e.to_string())?;
                }
            }
        }
        // A vfork child runs in this memory, and is not stopped.
        if let Some(c) =
            crate::os::proc::children(s.pid()).into_iter().find(|&c| crate::os::process::same_vm(c, s.pid()))
        {
            return Err(format!("its vfork child {c} shares its memory"));
        }
        let tid = s.main_thread();
        for (at, len) in regions {
            let r = s.syscall(tid, libc::SYS_munmap, [at, len, 0, 0, 0, 0]).map_err(|e| e.to_string())?;
            if r < 0 {
                return Err(format!("munmap({at:#x}, {len}): {}", std::io::Error::from_raw_os_error(-r as i32)));
            }
        }
        // The stub last.
        if let Some(p) = &self.stub {
            s.remove_stub(p).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Stop the target and hook the pending libraries that are mapped now;
    /// libraries armed earlier and unloaded since wait again.
    fn place_pending(&mut self) -> Result<(), TargetError> {
        let mut s = Stopped::attach(self.pid)?;
        s.use_stub(self.stub.as_ref());
        let maps = mappings(self.pid)?;
        let gone: Vec<PathBuf> = self
            .late
            .iter()
            .filter(|(m, l)| {
                let first = *l.functions.keys().next().unwrap_or(&0);
                runtime_addr(&maps, m, first) != Some(l.at)
            })
            .map(|(m, _)| m.clone())
            .collect();
        for m in gone {
            if let Some(l) = self.late.remove(&m) {
                // Its code went with it: nothing of ours to put back there.
                let (lo, hi) = l.range;
                self.patches.retain(|p| !(lo..hi).contains(&p.at));
                self.semaphores.retain(|a| !(lo..hi).contains(a));
                self.pending.entry(m).or_default().extend(l.functions);
            }
        }
        let ready: Vec<PathBuf> = self
            .pending
            .iter()
            .filter(|(m, f)| f.keys().next().is_some_and(|&off| runtime_addr(&maps, m, off).is_some()))
            .map(|(m, _)| m.clone())
            .collect();
        let mut refused = Vec::new();
        let mut plans = Vec::new();
        for m in ready {
            if let Some(functions) = self.pending.remove(&m) {
                let (code, p) = self.hooker.module(&mut s, &maps, &m, &functions, &mut refused)?;
                plans.extend(p);
                self._code.extend(code);
                let first = *functions.keys().next().unwrap_or(&0);
                if let (Some(at), Some(range)) = (runtime_addr(&maps, &m, first), mapped_range(&maps, &m)) {
                    self.late.insert(m, Late { functions, at, range });
                }
            }
        }
        apply(&mut s, plans, &mut self.patches, &self.hooker.relocs.borrow())?;
        let raised = raise_semaphores(&s, &self.hooker.artifact, &maps, &self.semaphores, &self.patches);
        self.semaphores.extend(raised);
        // SAFETY: the header pointer is the live region's base.
        unsafe { publish_symbols(self.mirror, s.pid(), &self.hooker.artifact, &maps, &self.hooker.relocs.borrow()) };
        for r in refused {
            if !self.quiet {
                crate::eprintln_escaped!("WARNING: cannot probe {r}");
            }
            self.warnings.push(format!("cannot probe {r}"));
        }
        self.set_dl_wait();
        s.detach()?;
        Ok(())
    }

    /// After a session that ended before its `-c` command (exit(), -T,
    /// Ctrl-C, SIGTERM): the command is ended too, as bpftrace does:
    /// SIGTERM, then SIGKILL if it is still there after a second. Its
    /// status is not the session's. Nothing to do for `-p` targets.
    pub fn end_child(&mut self) {
        if !self.child || self.exit_status.is_some() {
            return;
        }
        crate::os::process::terminate(self.pid, std::time::Duration::from_secs(1));
    }

    /// Functions whose calls their trampolines time and record without
    /// calling a handler (`--chrome` spans, durations into statistics).
    pub fn timed_inline(&self) -> Vec<String> {
        self.hooker.timed.borrow().clone()
    }

    /// Whether the target has `.itrace` probes hooked.
    pub fn has_itrace(&self) -> bool {
        !self.hooker.itraced.borrow().is_empty()
    }

    /// Trace `.itrace` calls into `path` (then `path.2`, …), at most
    /// `max_calls` of them.
    /// Trace the `.itrace` calls into `path` (`FILE`, `FILE.2`, …): in the
    /// target by the block tracer, or with `step` by the single-stepper.
    /// Before the target starts (the pool is mapped while it is stopped).
    pub fn itrace_to(&mut self, path: &std::path::Path, max_calls: u64, step: bool) -> std::io::Result<()> {
        let a = &self.hooker.artifact;
        // With a hardware shadow stack, calls and returns emulated in the
        // code cache would not match it: single-step instead.
        let step = step || {
            let shstk = crate::os::proc::shadow_stack(self.pid);
            if shstk {
                self.warnings
                    .push("the target uses a hardware shadow stack (CET): .itrace calls are single-stepped".into());
            }
            shstk
        };
        if step {
            let slots = (a.itrace_off, a.itrace_slots, a.region_size);
            self.itracer = Some(crate::itrace::Itracer::new(self.pid, self.header, slots, path, max_calls)?);
            return Ok(());
        }
        self.block_tracer(path, max_calls)
    }

    /// `.itrace` by the block tracer (`itrace_to`).
    fn block_tracer(&mut self, path: &std::path::Path, max_calls: u64) -> std::io::Result<()> {
        let a = &self.hooker.artifact;
        use crate::blocktrace as bt;
        let Some(s) = self.stopped.as_mut() else {
            return Err(std::io::Error::other("internal error: the target runs already"));
        };
        let code: Vec<(u64, u64)> = (0..bt::ARENAS as u64).map(|i| (i * bt::ARENA_SIZE, bt::CODE_SIZE)).collect();
        let (local, remote) =
            inject::itrace_pool(s, bt::POOL_SIZE, &code).map_err(|e| std::io::Error::other(e.to_string()))?;
        let traced = std::sync::Arc::new(std::sync::Mutex::new(self.hooker.itraced.borrow().clone()));
        let region = (self.region_fd, a.region_size);
        let mut server = bt::Server::new(
            self.pid,
            bt::Pool { local, remote },
            region,
            self.mirror,
            self.region_remote,
            (a.itrace_off, a.itrace_slots),
            traced.clone(),
            path.to_path_buf(),
            max_calls,
        )?;
        let code = server.code_ranges();
        let closed = server.closed.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::Builder::new().name("telco-itrace".into()).spawn(move || {
            let t0 = std::time::Instant::now();
            server.run(&halt);
            server.stop_all();
            server.report.time = t0.elapsed();
            server
        })?;
        self.blocktracer = Some(BlockTracing {
            stop,
            thread: Some(thread),
            traced,
            pool: (remote, bt::POOL_SIZE),
            code,
            done: None,
            closed,
        });
        Ok(())
    }

    /// After the session: what `.itrace` did (calls, instructions, time
    /// stepping), its warnings, and the calls that went untraced.
    /// Whether `.itrace` calls are single-stepped (asked for, or forced).
    pub fn itrace_stepped(&self) -> bool {
        self.itracer.is_some()
    }

    pub fn itrace_report(&mut self) -> Option<(u64, u64, std::time::Duration, u64, Vec<String>)> {
        if let Some(b) = &mut self.blocktracer {
            return b.take_report();
        }
        let it = self.itracer.as_mut()?;
        Some((it.calls, it.steps, it.stepping, it.missed, std::mem::take(&mut it.warnings)))
    }

    /// After the session: wait for a spawned command to finish.
    pub fn wait_child(&mut self) -> Option<i32> {
        if self.child && self.exit_status.is_none() {
            if let Ok(Some((_, status))) = crate::os::wait::wait(self.pid, true) {
                self.ended(status);
            }
        }
        self.exit_status
    }
}

/// Hook the C library's `execve` and `execveat` (in every process image
/// that maps it) with `rt_execnotify`.
#[allow(clippy::too_many_arguments)]
fn hook_execs(
    hooker: &Hooker,
    s: &mut Stopped,
    a: &Artifact,
    maps: &[Mapping],
    execnotify: u32,
    plans: &mut Vec<Plan>,
    codes: &mut Vec<CodeRegion>,
    refused: &mut Vec<String>,
) -> Result<(), TargetError> {
    for (_, entries) in symbol_entries(maps, |p| p.to_string_lossy().contains("/libc.so"), &["execve", "execveat"]) {
        // A probe of the script's there already calls rt_execnotify.
        let entries: Vec<_> = entries.into_iter().filter(|&(addr, _, _)| !hooked(plans, addr)).collect();
        if entries.is_empty() {
            continue;
        }
        let mut code = inject::code(s, a, entries[0].0, 1024 * entries.len() as u64 + 1024)?;
        hooker.own_blob(s.pid() as u32, &code);
        let handler = code.at(execnotify);
        for (addr, size, _) in entries {
            match hooker.function(s, &mut code, addr, size, None, Tramp::call(handler))? {
                Ok(p) => plans.extend(p.into_plans()),
                Err(why) => refused.push(format!(
                    "the C library's exec at {addr:#x} ({why}): programs the target runs will not get their probes"
                )),
            }
        }
        codes.push(code);
    }
    Ok(())
}

/// Whether a patch planned so far is at function entry `addr` (a probe of
/// the script's there, whose trampoline calls the runtime's hook too).
fn hooked(plans: &[Plan], addr: u64) -> bool {
    plans.iter().any(|(at, _, _)| (addr..addr + 16).contains(at))
}

/// The C library's exec entries (`execve`, `execveat`): run-time addresses.
fn exec_entries(maps: &[Mapping]) -> Vec<u64> {
    symbol_entries(maps, |p| p.to_string_lossy().contains("/libc.so"), &["execve", "execveat"])
        .into_iter()
        .flat_map(|(_, entries)| entries.into_iter().map(|(addr, _, _)| addr))
        .collect()
}

/// Run-time addresses and sizes of the function symbols `names` in the
/// mapped modules whose path `pick` accepts, by module.
fn symbol_entries(
    maps: &[Mapping],
    pick: impl Fn(&Path) -> bool,
    names: &[&str],
) -> Vec<(PathBuf, Vec<(u64, u64, usize)>)> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for m in maps {
        if !pick(&m.path) || !m.is_file() || !seen.insert((m.dev, m.inode)) {
            continue;
        }
        // The file as mapped (`os::modfile`: not the one its path names),
        // held mapped: only the pages its symbols are on are read.
        let Some(bytes) = crate::os::modfile::mapped(m) else { continue };
        let Ok(elf) = goblin::elf::Elf::parse(&bytes) else { continue };
        let file = (m.dev, m.inode);
        let Some(start) = maps.iter().find(|x| (x.dev, x.inode) == file && x.offset == 0).map(|x| x.start) else {
            continue;
        };
        let vaddr0 = elf
            .program_headers
            .iter()
            .find(|ph| ph.p_type == goblin::elf::program_header::PT_LOAD && ph.p_offset == 0)
            .map_or(0, |ph| ph.p_vaddr);
        let mut found: Vec<(u64, u64, usize)> = Vec::new();
        let mut at = std::collections::HashSet::new();
        let syms = elf.dynsyms.iter().map(|s| (s, &elf.dynstrtab)).chain(elf.syms.iter().map(|s| (s, &elf.strtab)));
        for (sym, strtab) in syms {
            let name = strtab.get_at(sym.st_name).unwrap_or("");
            let name = name.split('@').next().unwrap_or(name);
            let Some(index) = names.iter().position(|n| *n == name) else { continue };
            if sym.st_value != 0 && sym.is_function() {
                let addr = start.wrapping_sub(vaddr0).wrapping_add(sym.st_value);
                if at.insert(addr) {
                    found.push((addr, sym.st_size, index));
                }
            }
        }
        if !found.is_empty() {
            out.push((m.path.clone(), found));
        }
    }
    out
}

impl Armed {
    /// A thread asked to exec (`Header::exec_req`): attach to it so its new
    /// program stops at the start, and answer. Then look at the threads
    /// waiting to exec: a new program gets its probes; one that did not
    /// exec after a while is let go.
    fn follow_execs(&mut self) {
        use std::sync::atomic::{AtomicU64, Ordering};
        let Some(f) = &mut self.follow else { return };
        let header = self.header;
        let field = move |off: usize| {
            // SAFETY: `header` is the live region's header; exec_req and
            // exec_ack are u64 fields.
            unsafe { AtomicU64::from_ptr(header.add(off) as *mut u64) }
        };
        let req_at = core::mem::offset_of!(telco_abi::region::Header, exec_req);
        let ack_at = core::mem::offset_of!(telco_abi::region::Header, exec_ack);
        // Acquire: pairs with rt_execnotify's AcqRel compare-and-swap.
        let req = field(req_at).load(Ordering::Acquire);
        if req != 0 && field(ack_at).load(Ordering::Acquire) != req {
            let (pid, tid) = ((req >> 32) as i32, (req & 0xffff_ffff) as i32);
            // The request is the target's word: attach only to a thread of
            // a process this session traces (the command or one of its
            // descendants, seen from here: a target in another pid
            // namespace names ids that mean other processes here).
            if !ours(tid, pid, f.region_ino) {
                let note = format!(
                    "cannot follow pid {pid} (as the target names it) into the program it runs: no process of \
                     that id here maps this session's region (another pid namespace?)"
                );
                if f.said.insert(note.clone()) && !self.quiet {
                    crate::eprintln_escaped!("WARNING: {note}");
                }
                field(ack_at).store(req, Ordering::Release);
                return;
            }
            // Long enough for an exec on a loaded machine (the thread runs
            // meanwhile: only an exec that failed waits this out).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            match f.waiting.iter_mut().find(|w| w.0 == tid) {
                // Attached already (execvp trying one directory after
                // another): more time.
                Some(w) => w.2 = deadline,
                None => match crate::os::ptrace::seize_for_exec(tid) {
                    Ok(()) => {
                        f.waiting.push((tid, pid, deadline));
                        if shares_parent_memory(pid) {
                            f.vforked.insert(pid);
                        }
                    }
                    Err(e) => {
                        let note = format!("cannot follow pid {pid} into the program it runs: {e}");
                        if f.said.insert(note.clone()) && !self.quiet {
                            crate::eprintln_escaped!("WARNING: {note}");
                        }
                    }
                },
            }
            // Release: the thread goes on once we are attached.
            field(ack_at).store(req, Ordering::Release);
        }
        let waiting = std::mem::take(&mut f.waiting);
        let execed = std::mem::take(&mut f.execed);
        // A process exec's once per stop: its other waiting threads are
        // gone with the old image.
        let mut armed_now: Vec<i32> = Vec::new();
        for (tid, pid, deadline) in waiting {
            if armed_now.contains(&pid) {
                continue;
            }
            let seen = if execed.contains(&pid) {
                crate::os::ptrace::ExecWait::Exec
            } else {
                crate::os::ptrace::poll_exec(tid, pid)
            };
            match seen {
                crate::os::ptrace::ExecWait::Running if std::time::Instant::now() < deadline => {
                    if let Some(f) = &mut self.follow {
                        f.waiting.push((tid, pid, deadline));
                    }
                }
                crate::os::ptrace::ExecWait::Running => crate::os::ptrace::release(tid, pid),
                // The command itself ended here: its status is the session's.
                crate::os::ptrace::ExecWait::Gone(Some(status)) if pid == self.pid && self.child => self.ended(status),
                crate::os::ptrace::ExecWait::Gone(_) => {}
                crate::os::ptrace::ExecWait::Exec => {
                    armed_now.push(pid);
                    // The old image's hooks went with it: never written
                    // back into the new one.
                    if pid == self.pid {
                        self.patches.clear();
                        self.semaphores.clear();
                        self.crash = None;
                        // No library of the old image will load now; the
                        // symbol table's libraries were the old image's.
                        self.pending.clear();
                        self.late_syms.stop();
                        self.set_dl_wait();
                        self.refresh_execname();
                    }
                    if let Some(f) = &mut self.follow {
                        f.children.retain(|c| c.pid != pid);
                    }
                    if let Err(e) = self.arm_exec(pid) {
                        let exe = crate::os::proc::exe_path(pid);
                        let note = format!("cannot probe pid {pid} ({}): {e}", exe.display());
                        if let Some(f) = &mut self.follow {
                            if f.said.insert(note.clone()) && !self.quiet {
                                crate::eprintln_escaped!("WARNING: {note}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Process `pid` stopped at the start of a program it exec'd: run it to
    /// its entry point and arm the probes of every module it maps, then let
    /// it go.
    fn arm_exec(&mut self, pid: i32) -> Result<(), TargetError> {
        let mut s = Stopped::adopt(pid)?;
        // One trust domain per region: a program exec'd with privileges
        // the session's first process did not have (setuid, setgid, file
        // capabilities) runs unprobed; released as it is by the guard.
        if let Some(why) = self.other_domain(pid) {
            return Err(TargetError::Unsupported(format!(
                "it runs with other credentials than the session's first process ({why}): processes of different \
                 privileges never share a session's memory, so it runs without probes"
            )));
        }
        run_to_entry(&mut s)?;
        check_machine(pid)?;
        let a = &self.hooker.artifact;
        let maps = mappings(pid)?;
        // Another program: the old image's code of ours is gone.
        if let Ok(mut o) = self.hooker.own.write() {
            o.forget(pid as u32);
        }
        // Another program: the runtime's entry hooks were the old image's;
        // its own exec entries.
        {
            let mut hooks = self.hooker.entry_hooks.borrow_mut();
            hooks.clear();
            if let Some(f) = self.hooker.exec_notify {
                hooks.extend(exec_entries(&maps).into_iter().map(|addr| (addr, (f, false))));
            }
        }
        let exe = crate::os::proc::exe_path(pid);
        let mut by_module: ByModule = BTreeMap::new();
        for (i, p) in a.probes.iter().enumerate() {
            let (module, file_offset) = match &p.attach {
                Attach::Function { module, file_offset, only_exe, .. } => {
                    if only_exe.as_ref().is_some_and(|only| !same_file(only, &exe)) {
                        continue;
                    }
                    (module, file_offset)
                }
                Attach::Statement { module, file_offset, .. } => (module, file_offset),
                _ => continue,
            };
            if runtime_addr(&maps, module, *file_offset).is_some() {
                by_module.entry(module.clone()).or_default().entry(*file_offset).or_default().push(i);
            }
        }
        let Some(f) = &self.follow else { return Ok(()) };
        // The region and the thread slots at the addresses the trampolines
        // and the handlers know. Also in a program without probes of its
        // own: its exec hook follows the programs it runs in turn (`env
        // prog`, a shell's children).
        inject::map_region_at(&mut s, f.region_fd, f.mirror_fd, f.region_remote, f.region_size)?;
        inject::threads_at(&mut s, a, f.threads_at)?;
        let mut refused = Vec::new();
        let mut plans = Vec::new();
        let mut codes = Vec::new();
        for (module, functions) in &by_module {
            let (code, p) = self.hooker.module(&mut s, &maps, module, functions, &mut refused)?;
            plans.extend(p);
            codes.extend(code);
        }
        let execnotify = f.execnotify;
        let region_remote = f.region_remote;
        hook_execs(&self.hooker, &mut s, a, &maps, execnotify, &mut plans, &mut codes, &mut refused)?;
        let mut patches = Vec::new();
        apply(&mut s, plans, &mut patches, &self.hooker.relocs.borrow())?;
        let semaphores = raise_semaphores(&s, a, &maps, &[], &patches);
        if codes.is_empty() {
            let near = arch::pc(&s.regs(pid)?);
            let code = inject::code(&mut s, a, near, 4096)?;
            self.hooker.own_blob(pid as u32, &code);
            codes.push(code);
        }
        let crash = codes.first_mut().and_then(|code| crate::crash::install(&mut s, code, a, region_remote));
        // The old program ended (process.end, for the program this process
        // ran: its own, or its parent's when it forked), the new one begins.
        let old = self.exes.get(&pid).cloned().or_else(|| {
            let (_, ppid) = crate::os::proc::uid_and_parent(pid as u32)?;
            self.exes.get(&(ppid as i32)).cloned()
        });
        let vforked = self.follow.as_mut().is_some_and(|f| f.vforked.remove(&pid));
        let mut said = Vec::new();
        if let Some(code) = codes.first() {
            if let Some(old) = old.as_ref().filter(|_| !vforked) {
                said.extend(lifecycle(&mut s, a, code, region_remote, pid, LifeEvent::ProcessEnd, old));
            }
            said.extend(lifecycle(&mut s, a, code, region_remote, pid, LifeEvent::ProcessBegin, &exe));
        }
        s.detach()?;
        self.exes.insert(pid, exe);
        for r in refused {
            if !self.quiet {
                crate::eprintln_escaped!("WARNING: cannot probe {r} (pid {pid})");
            }
            self.warnings.push(format!("cannot probe {r} (pid {pid})"));
        }
        for w in said {
            if !self.quiet {
                crate::eprintln_escaped!("WARNING: {w}");
            }
            self.warnings.push(w);
        }
        if let Some(f) = &mut self.follow {
            f.children.push(Child { pid, patches, crash, semaphores });
            f._codes.extend(codes);
        }
        Ok(())
    }

    /// The end of a session: threads still waiting to exec are let go; the
    /// followed programs' code is put back (those still running it).
    fn unfollow(&mut self) {
        let Some(f) = &mut self.follow else { return };
        for (tid, pid, _) in f.waiting.drain(..) {
            crate::os::ptrace::release(tid, pid);
        }
        // An exec stop of the command that `alive` took after its thread
        // stopped waiting: it sits in that stop, let it go.
        for pid in f.execed.drain(..) {
            crate::os::ptrace::detach_stopped(pid);
        }
        for c in f.children.drain(..) {
            restore_patches(c.pid, &c.patches, c.crash.as_ref(), &c.semaphores);
        }
    }
}

/// Whether process `pid` shares its address space with its parent (a
/// vfork or posix_spawn child before its exec): `kcmp(KCMP_VM)`.
fn shares_parent_memory(pid: i32) -> bool {
    let Some((_, ppid)) = crate::os::proc::uid_and_parent(pid as u32) else { return false };
    crate::os::process::same_vm(pid, ppid as i32)
}

/// Run the handlers of the lifecycle probes of `event` in thread `tid` of
/// the stopped process (running program `exe`), by remote calls of
/// `rt_call_probe` in code region `code`.
/// What could not run is returned, for warnings.
fn lifecycle(
    s: &mut Stopped,
    a: &Artifact,
    code: &CodeRegion,
    region: u64,
    tid: i32,
    event: LifeEvent,
    exe: &Path,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let Some(call) = a.symbols.iter().find(|s| s.name == "rt_call_probe").map(|s| code.at(s.offset)) else {
        return warnings;
    };
    for (i, p) in a.probes.iter().enumerate() {
        let Attach::Lifecycle { event: e, module, .. } = &p.attach else { continue };
        if *e != event || module.as_ref().is_some_and(|m| !same_file(m, exe)) {
            continue;
        }
        // process.end at an exec: `$status` is -1 (the program did not exit).
        let arg1 = if event == LifeEvent::ProcessEnd { u64::MAX } else { 0 };
        let args = [region, code.at(p.handler), i as u64, u64::from(a.ctx_size), arg1];
        match s.call(tid, call, &args, code.trap()) {
            Ok(r) if r as i64 == -1 => warnings.push(format!(
                "`{}` did not run in pid {} ({}): its thread has no thread pointer yet (a static program at its \
                 start)",
                p.name,
                s.pid(),
                exe.display()
            )),
            Ok(_) => {}
            Err(e) => warnings.push(format!("cannot run `{}` in thread {tid}: {e}", p.name)),
        }
    }
    warnings
}

/// Raise the semaphores of the probed SDT markers whose modules are mapped
/// in the stopped process (a program runs a marker only while its
/// semaphore is non-zero), except those in `done`; returns their addresses
/// (to lower at the end).
fn raise_semaphores(s: &Stopped, a: &Artifact, maps: &[Mapping], done: &[u64], placed: &[Patch]) -> Vec<u64> {
    let mut raised: Vec<u64> = Vec::new();
    for p in &a.probes {
        let Attach::Statement { module, addr, file_offset, semaphore: Some(sem), .. } = &p.attach else { continue };
        let Some(pc) = runtime_addr(maps, module, *file_offset) else { continue };
        // Only for markers whose jump is in place.
        if !placed.iter().any(|q| q.at == pc) {
            continue;
        }
        let at = pc.wrapping_sub(*addr).wrapping_add(*sem);
        if done.contains(&at) || raised.contains(&at) {
            continue;
        }
        let Ok(b) = s.read(at, 2) else { continue };
        let v = u16::from_le_bytes([b[0], b[1]]).saturating_add(1);
        if s.write(at, &v.to_le_bytes()).is_ok() {
            raised.push(at);
        }
    }
    raised
}

/// The end of a session in a stopped process: the semaphores it raised.
fn lower_semaphores(s: &Stopped, semaphores: &[u64]) {
    for &at in semaphores {
        let Ok(b) = s.read(at, 2) else { continue };
        let v = u16::from_le_bytes([b[0], b[1]]).saturating_sub(1);
        let _ = s.write(at, &v.to_le_bytes());
    }
}

/// In a stopped process of the session: the crash handler out, the
/// semaphores lowered, the `patches`' original bytes back (threads inside
/// them run out first). `what` names the process in warnings.
fn put_back(s: &mut Stopped, patches: &[Patch], crash: Option<&crate::crash::Hook>, semaphores: &[u64], what: &str) {
    if let Some(hook) = crash {
        crate::crash::uninstall(s, hook);
    }
    lower_semaphores(s, semaphores);
    // A thread on a hop's or a loop's second jump sits inside a patch: out
    // of it first.
    let ranges: Vec<(u64, u64)> = patches.iter().map(|p| (p.at, p.original.len() as u64)).collect();
    if let Err(e) = run_out_of(s, &ranges) {
        crate::eprintln_escaped!("warning: {e}");
    }
    for p in patches {
        // Only where our bytes still are: a library unloaded since (and
        // whatever was mapped there after it) is left alone.
        if s.read(p.at, p.patched.len()).is_ok_and(|now| now != p.patched) {
            continue;
        }
        if let Err(e) = s.write(p.at, &p.original) {
            crate::eprintln_escaped!("warning: cannot restore the code at {:#x} in {what}: {e}", p.at);
        }
    }
}

/// Put `patches` back in process `pid` if it still runs the image they
/// were made in (our region is mapped there), every thread stopped.
fn restore_patches(pid: i32, patches: &[Patch], crash: Option<&crate::crash::Hook>, semaphores: &[u64]) {
    if patches.is_empty() && crash.is_none() && semaphores.is_empty() {
        return;
    }
    let ours = crate::os::proc::maps_file(pid, "/memfd:telco-stap", 0);
    if !ours {
        return;
    }
    match Stopped::attach(pid) {
        Ok(mut s) => {
            put_back(&mut s, patches, crash, semaphores, &format!("pid {pid}"));
            if let Err(e) = s.detach() {
                crate::eprintln_escaped!("warning: {e}");
            }
        }
        Err(PtraceError::NoProcess(_)) => {}
        Err(e) => crate::eprintln_escaped!("warning: cannot stop pid {pid} to remove the probes: {e}"),
    }
}

const _: () = assert!(core::mem::offset_of!(telco_abi::region::Header, execname) % 8 == 0);

/// Whether thread `tid` belongs to process `pid`, and `pid` maps the
/// session's region (the memfd of inode `region_ino`): only the processes
/// of the session do (it is injected into them, or inherited by a fork),
/// however they were reparented.
fn ours(tid: i32, pid: i32, region_ino: u64) -> bool {
    let tgid = crate::os::proc::tgid(tid);
    if tid <= 0 || pid <= 0 || region_ino == 0 || tgid != Some(pid) {
        return false;
    }
    crate::os::proc::maps_file(pid, "/memfd:telco-stap", region_ino)
}

impl Armed {
    /// Where the session's code is in the target's processes, for naming
    /// the place of a crash.
    fn our_code(&self) -> Vec<(u64, u64)> {
        let children = self.follow.iter().flat_map(|f| f._codes.iter());
        self._code.iter().chain(children).map(|c| (c.remote, c.size)).collect()
    }

    /// A process of the session is dying of a fatal signal (`rt_crash`
    /// waits for this answer): record where. The command's own is said at
    /// the end with its exit; any other process's at once.
    fn take_crash(&mut self) {
        if self.header.is_null() {
            return;
        }
        let codes = self.our_code();
        let relocs = self.hooker.relocs.borrow().clone();
        let ino = self.region_ino;
        let ours_ = crate::crash::Ours { codes: &codes, relocs: &relocs };
        let Some(c) = crate::crash::take(self.header, |pid, tid| ours(tid, pid, ino), &ours_) else { return };
        if !(c.pid == self.pid && self.child) {
            let exe = crate::os::proc::exe_path(c.pid);
            let line = format!("process {} ({}) is being killed by {}", c.pid, exe.display(), c.describe());
            if !self.quiet {
                crate::eprintln_escaped!("WARNING: {line}");
            }
            self.warnings.push(line);
        }
        self.crashes.push(c);
    }

    /// The crash of process `pid` recorded in the session, if one was
    /// (also one the tracer did not answer in time: `take_leftover_crash`).
    pub fn crash_of(&self, pid: i32) -> Option<crate::crash::Crash> {
        self.crashes.iter().rev().find(|c| c.pid == pid).cloned()
    }

    /// At the end, while the region is still mapped: a crash record of the
    /// command that nobody answered.
    fn take_leftover_crash(&mut self) {
        if self.header.is_null() || self.crashes.iter().any(|c| c.pid == self.pid) {
            return;
        }
        let codes = self.our_code();
        let relocs = self.hooker.relocs.borrow().clone();
        if let Some(c) =
            crate::crash::leftover(self.header, self.pid, &crate::crash::Ours { codes: &codes, relocs: &relocs })
        {
            self.crashes.push(c);
        }
    }

    /// The command exec'd: `execname()` in it is the new program's name.
    fn refresh_execname(&mut self) {
        let comm = crate::os::proc::comm(self.pid);
        let mut name = [0u8; 16];
        let bytes = comm.trim_end().as_bytes();
        name[..bytes.len().min(15)].copy_from_slice(&bytes[..bytes.len().min(15)]);
        let at = core::mem::offset_of!(telco_abi::region::Header, execname);
        for (i, chunk) in name.chunks_exact(8).enumerate() {
            // SAFETY: the live region's header; execname is 16 bytes at an
            // 8-aligned offset, read by handlers with plain loads.
            unsafe {
                std::sync::atomic::AtomicU64::from_ptr(self.header.add(at + 8 * i) as *mut u64).store(
                    u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
    }
}

impl Armed {
    /// Half the per-thread rows of the region are taken or more
    /// (`Header::rows_next`): mark the rows whose process has ended
    /// `ROW_FREE`, for `take_row` to hand out again once all have been
    /// taken once (early, so that the rows are free before a new thread
    /// needs one). Every 20 ms at most, and only when the target's pids
    /// are ours (one pid namespace); a process not reaped yet still holds
    /// its rows.
    fn reclaim_rows(&mut self) {
        use std::sync::atomic::{AtomicU32, Ordering};
        use telco_abi::region::{Header, ROW_FREE};
        let Some(f) = &mut self.follow else { return };
        if !f.same_pid_ns || self.header.is_null() || f.rows_checked.elapsed() < std::time::Duration::from_millis(20) {
            return;
        }
        f.rows_checked = std::time::Instant::now();
        let a = &self.hooker.artifact;
        let field = |off: usize| {
            // SAFETY: a u32 of the live region: the header's rows_next, or
            // one of the `nthreads` row owners at `row_owners_off` (4-aligned,
            // inside the region: layout.rs).
            unsafe { AtomicU32::from_ptr(self.header.add(off) as *mut u32) }
        };
        if field(core::mem::offset_of!(Header, rows_next)).load(Ordering::Relaxed) < a.nthreads / 2 {
            return;
        }
        for r in 0..a.nthreads as usize {
            let owner = field(a.row_owners_off as usize + 4 * r);
            let o = owner.load(Ordering::Acquire);
            if o == 0 || o == ROW_FREE || o > i32::MAX as u32 {
                continue;
            }
            if !crate::os::process::exists(o as i32) {
                let _ = owner.compare_exchange(o, ROW_FREE, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }
}
