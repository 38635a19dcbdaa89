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

mod arm;
mod consumer;
mod crashes;
mod detach;
mod domains;
mod flights;
mod follow;
mod itrace;
mod late;
mod lifecycle;
mod poll;
mod rows;
mod run;
mod runner;
mod spawn;
mod start;
mod summary;
mod system;
mod traps;

pub use arm::arm;
pub use consumer::drain_text;
pub use run::{Config, Hooks, Local, NoTarget, Outcome};
pub use runner::{stall_limit, SANDBOX_STALL};
pub use spawn::spawn;
pub use start::{Ended, Options, Session, Target};
pub use summary::summary;

use arm::*;
use consumer::*;
use follow::*;
use itrace::*;
use late::*;
use lifecycle::*;
use run::*;
use runner::*;
use spawn::*;

use crate::arch::native::{self as arch, patch};
pub use crate::error::{RunError, TargetError};
use crate::inject::{self, CodeRegion};
use crate::os::proc::{mapped_range, runtime_addr, same_file, Mapping};
use crate::os::ptrace::{PtraceError, Stopped};
use crate::os::wait::Status;
use crate::place::{apply, run_out_of, Hooker, Patch, Plan, Tramp};
pub use crate::region::Region;
use crate::symtab::SymbolSource;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use telco_abi::artifact::{Artifact, Attach, LifeEvent};

/// The target's mappings of files.
pub(super) fn mappings(pid: i32) -> Result<Vec<Mapping>, TargetError> {
    let maps = crate::os::proc::maps(pid).map_err(|err| TargetError::Proc { pid, file: "maps", err })?;
    Ok(maps.into_iter().filter(|m| m.path.starts_with("/")).collect())
}
/// A target with its probes armed: its fields grouped by concern, each
/// group's methods in the file named for it.
pub struct Armed {
    /// Where symbols come from (the driver's: the runtime parses no ELF).
    symbols: std::rc::Rc<dyn SymbolSource>,
    /// The first process, its state and how it ended (`poll.rs`).
    target: FirstProcess,
    /// The region as the target's processes map it.
    region: InTarget,
    /// What was written into the first process, to put back (`detach.rs`).
    undo: Undo,
    /// The placer, with the artifact and the runtime helpers' offsets.
    hooker: Hooker,
    /// Libraries loaded later (`late.rs`).
    libs: LateLibraries,
    /// The trust domain (`domains.rs`).
    domain: Domain,
    /// `.itrace` probes (`itrace.rs`).
    itrace: Itracing,
    /// Programs the target's processes exec: they get their probes too
    /// (`follow.rs`).
    follow: Option<Follow>,
    /// What the session has to say: warnings, crashes.
    report: Report,
    /// The flight recorder's triggers (`flights.rs`).
    flights: flights::Watch,
}

impl Armed {
    /// A warning found while the session runs: printed at once (unless
    /// `-w`) and kept for the end.
    fn warn(&mut self, w: String) {
        if !self.report.quiet {
            crate::text::eprint_lines(&format!("WARNING: {w}"));
        }
        self.report.warnings.push(w);
    }

    /// [`Armed::warn`], once a session for each text.
    fn warn_once(&mut self, w: String) {
        if self.follow.as_mut().is_none_or(|f| f.said.insert(w.clone())) {
            self.warn(w);
        }
    }
}

/// The program a process runs: its path (for display) and its file's
/// identity (`process("P")` probes match it, whatever the process's
/// mount namespace calls it).
#[derive(Clone, Default)]
pub(super) struct Program {
    pub(super) path: PathBuf,
    pub(super) id: Option<crate::os::proc::FileId>,
}

impl Program {
    pub(super) fn of(pid: i32) -> Program {
        Program { path: crate::os::proc::exe_path(pid), id: crate::os::proc::exe_id(pid) }
    }

    /// Whether it is the file `module` names (`os::proc::is_module`).
    pub(super) fn is(&self, module: &Path) -> bool {
        crate::os::proc::is_module(self.id, &self.path, module)
    }

    /// [`Program::is`] for process `pid`'s program, once a path asked
    /// about (a probe's `only_exe`: every function of a library named
    /// with `process("P").library("L")` asks for the same P).
    pub(super) fn runs(pid: i32) -> impl FnMut(&Path) -> bool {
        let program = Program::of(pid);
        let mut seen: Vec<(PathBuf, bool)> = Vec::new();
        move |path| match seen.iter().find(|(p, _)| p == path) {
            Some(&(_, is)) => is,
            None => {
                let is = program.is(path);
                seen.push((path.to_path_buf(), is));
                is
            }
        }
    }
}

/// The first process of the session.
struct FirstProcess {
    pid: i32,
    /// We spawned it (`-c`): its exit status is ours to collect.
    child: bool,
    /// Held stopped from arming until the session's begin probes ran.
    stopped: Option<Stopped>,
    /// The program each process of the session was armed running (for
    /// `process("P").end` at an exec).
    exes: HashMap<i32, Program>,
    /// The command's exit status as a shell gives it, once it ended.
    exit_status: Option<i32>,
    /// The signal that killed the command (`-c`), if one did.
    killed_by: Option<i32>,
    /// `-p`: the first process's descendants, and the other processes
    /// named and theirs, are armed once the begin probes ran
    /// (`Armed::cover`); the other processes named.
    service: Option<Vec<i32>>,
    /// The other processes named with `-p`: the session goes on while
    /// any of them (or the first) runs.
    named: Vec<i32>,
    /// `-c`: the session's processes that outlived the command (its
    /// daemons: the tracer reaps its descendants' orphans), and when they
    /// were last looked for; the session goes on while one runs.
    daemons: Vec<i32>,
    daemons_checked: Option<std::time::Instant>,
    /// The region's and the mirror's descriptors in it, open until the
    /// begin probes ran (`inject::Injected::target_fds`).
    fds: Option<(i32, i32)>,
    /// Probes by path, system-wide (`system.rs`): the session goes on
    /// until it is ended, and every process that execs a probed program
    /// joins it.
    system: Option<system::SystemWide>,
}

/// The region as the target's processes map it.
struct InTarget {
    /// `Header::enabled`, until the session stops.
    enabled: Option<*const u32>,
    /// The region's header (for the dlopen handshake).
    header: *const u8,
    /// Its trusted mirror (`Region::trusted`): where the symbol table of
    /// libraries loaded later goes.
    mirror: *mut u8,
    /// The inode of the region's memfd (which processes are the session's).
    ino: u64,
    /// The region's address in the target's processes.
    remote: u64,
    /// The region's memfd in the tracer (open while the session runs).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the block tracer maps it
    fd: i32,
}

/// What the session wrote into its first process.
struct Undo {
    patches: Vec<Patch>,
    /// SDT semaphores raised in the target (lowered at the end).
    semaphores: Vec<u64>,
    /// The handler of fatal signals installed in the target (`crash`).
    crash: Option<crate::crash::Hook>,
    /// The remote-operation stub (`Stopped::install_stub`).
    stub: Option<crate::os::ptrace::StubPlace>,
    /// The code regions mapped (kept for the session).
    _code: Vec<CodeRegion>,
}

/// Libraries loaded later.
struct LateLibraries {
    /// Probes in libraries not loaded yet.
    pending: ByModule,
    /// Libraries armed once loaded: if one is unloaded (`dlclose`), its
    /// probes wait for it again, and nothing is written back where it was.
    late: BTreeMap<PathBuf, Late>,
    /// The symbol table's libraries loaded later (`symtab.rs`), and how
    /// many of those left out for want of room were warned about.
    syms: crate::symtab::LateSymbols,
    syms_said: usize,
    /// Wakes the session when a thread waits in the loader's r_brk.
    watch: Option<crate::os::sys::Watch>,
    /// `-p`/`-c`: the opens of the probed libraries the first process did
    /// not map at the start, for the session's other processes that load
    /// them later (`late.rs`).
    loads: Option<Loads>,
}

/// The session's trust domains (`domains.rs`).
struct Domain {
    /// The credentials of its first process when it was armed: the
    /// session's own region serves processes of these only (invariant 6).
    creds: Option<crate::os::creds::Credentials>,
    /// The regions of the other domains.
    others: Vec<domains::DomainRegion>,
    /// How many of `others` the session's consumer was given.
    handed: usize,
    /// Processes cut off from every region (their probes disabled), and
    /// whether each was forked (cleaned at the end like the other forked
    /// children; followed ones are cleaned with them); when they were
    /// last looked for.
    cut_off: Vec<(i32, bool)>,
    checked: Option<std::time::Instant>,
    /// Processes seen with other credentials than their region's at the
    /// last check, and those credentials: moved only once two checks
    /// agree (a worker dropping its privileges changes its group ids,
    /// then its user ids: the state between is no domain).
    settling: Vec<(i32, crate::os::creds::Credentials)>,
}

/// `.itrace` probes: the single-stepper (with `--itrc FILE
/// --itrace-step`), or the block tracer's thread (`blocktrace.rs`).
#[derive(Default)]
struct Itracing {
    stepper: Option<crate::itrace::Itracer>,
    blocks: Option<BlockTracing>,
}

/// What the session has to say.
#[derive(Default)]
struct Report {
    warnings: Vec<String>,
    /// `-w`: warnings found while the session runs (libraries loaded
    /// later) are kept in `warnings` but not printed.
    quiet: bool,
    /// Fatal signals in the session's processes, as they were recorded.
    crashes: Vec<crate::crash::Crash>,
    /// `-v`: how long covering the other processes took.
    verbose: bool,
}

/// Function probes by module, then by file offset (an entry and a return
/// probe of one function share its trampoline).
pub(crate) type ByModule = BTreeMap<PathBuf, BTreeMap<u64, Vec<usize>>>;
