//! Probes by path, system-wide (neither `-p` nor `-c`): every process that
//! runs or maps a probed file, those running when the session starts and
//! those that exec one later, until SIGINT, `-T` or `exit()`.
//!
//! Files are matched by identity (device and inode), never by the path a
//! process shows: a container's process running the same file is probed,
//! another file at the same path is not. A process that execs a probed
//! program later is held at its exec by fanotify (`os::fanotify`) until
//! the tracer has attached to the exec'ing thread, so it stops before its
//! first instruction and `main` fires once (the proc connector would
//! report it after the fact). The first process found is the session's
//! first process (its credentials are the session's trust domain,
//! invariant 6); the others are armed as `-p`'s other processes are
//! (`Armed::cover`) or, exec'd later, as followed children
//! (`Armed::arm_exec`).

use super::*;
use crate::os::fanotify::ExecWatch;
use crate::os::proc::FileId;
use std::time::{Duration, Instant};

/// The system-wide part of a session.
pub(super) struct SystemWide {
    pub(crate) watch: ExecWatch,
    /// The probed files.
    files: Vec<FileId>,
    /// `-D MAXPROCESSES`: processes armed at once, at most.
    max: usize,
    /// Processes left unprobed because of that limit.
    over: u64,
    /// The probed libraries (their opens are watched, not their execs).
    libraries: Vec<FileId>,
    /// Processes held after mapping one, not armed yet (pid, tid).
    held: Vec<(i32, i32)>,
    readers: super::late::Readers,
    /// What could not be armed, said once each.
    said: std::collections::BTreeSet<String>,
}

/// Where a system-wide session starts besides its first process: the
/// other processes running the files now, threads already attached at
/// their exec (tid, pid), and the watch.
pub(super) struct Found {
    pub(super) others: Vec<i32>,
    /// Processes held right after their loader mapped a probed library
    /// (pid, the thread held): armed at the first poll.
    pub(super) held: Vec<(i32, i32)>,
    pub(super) execing: Vec<(i32, i32)>,
    pub(super) system: SystemWide,
}

/// Whether process `pid` is the tracer or one of its own (its probes'
/// sandbox): never traced.
fn own(pid: i32) -> bool {
    let me = std::process::id() as i32;
    if pid == me {
        return true;
    }
    let mut p = pid;
    for _ in 0..64 {
        match crate::os::proc::uid_and_parent(p as u32) {
            Some((_, parent)) if parent as i32 == me => return true,
            Some((_, parent)) if parent > 1 => p = parent as i32,
            _ => return false,
        }
    }
    false
}

/// Whether process `pid` runs or maps one of `files`.
fn uses(pid: i32, files: &[FileId]) -> bool {
    if crate::os::proc::exe_id(pid).is_some_and(|id| files.contains(&id)) {
        return true;
    }
    crate::os::proc::maps(pid).is_ok_and(|ms| ms.iter().any(|m| files.contains(&(m.dev, m.inode))))
}

/// The processes running now that run or map one of `files` (the
/// tracer's own and zombies aside), by pid.
fn running_with(files: &[FileId]) -> Vec<i32> {
    let mut pids: Vec<i32> = crate::os::proc::all_pids()
        .into_iter()
        .filter(|&p| p > 0 && uses(p, files) && crate::os::proc::running(p) && !own(p))
        .collect();
    pids.sort_unstable();
    pids
}

/// The identities of `paths` (the libraries' too), and the watch on the
/// programs' execs and the libraries' opens.
fn watch(paths: &[PathBuf], libraries: &[PathBuf]) -> Result<(Vec<FileId>, Vec<FileId>, ExecWatch), TargetError> {
    let id = |p: &PathBuf| {
        crate::os::proc::file_id(p)
            .map_err(|e| TargetError::Unsupported(format!("cannot probe by path {}: {e}", p.display())))
    };
    let files = paths.iter().map(id).collect::<Result<Vec<_>, _>>()?;
    let libs = libraries.iter().map(id).collect::<Result<Vec<_>, _>>()?;
    let programs: Vec<&Path> = paths.iter().filter(|p| !libraries.contains(p)).map(PathBuf::as_path).collect();
    let libraries: Vec<&Path> = libraries.iter().map(PathBuf::as_path).collect();
    let watch = ExecWatch::new(&programs, &libraries).map_err(|e| {
        TargetError::Unsupported(format!(
            "probes by path without -p or -c hold the execs of the files with fanotify, which needs root \
             (CAP_SYS_ADMIN): {e}"
        ))
    })?;
    Ok((files, libs, watch))
}

/// Start a system-wide session on `paths`: the watch first (no exec
/// falls between the look at `/proc` and it), then the processes running
/// them now, the first of which is attached; with none, the first that
/// execs one is waited for, until `wait` passes or a signal comes (None:
/// nothing ran).
pub(super) fn start(
    paths: &[PathBuf],
    libraries: &[PathBuf],
    max: usize,
    wait: Option<Duration>,
    verbose: bool,
    quiet: bool,
) -> Result<Option<(Stopped, Found)>, TargetError> {
    let (files, libraries, watch) = watch(paths, libraries)?;
    crate::os::proc::match_by_identity();
    if verbose {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        crate::eprintln_escaped!("Pass 5: watching the processes of {}.", names.join(", "));
    }
    let mut system = SystemWide {
        watch,
        files,
        max: max.max(1),
        over: 0,
        libraries,
        held: Vec::new(),
        readers: Default::default(),
        said: Default::default(),
    };
    let running = running_with(&system.files);
    if running.len() > system.max {
        return Err(TargetError::Unsupported(format!(
            "{} running processes run or map {}, more than MAXPROCESSES={}: name a program \
             (process(\"/path/to/program\").library(\"...\")) or raise the limit with -D MAXPROCESSES=N",
            running.len(),
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            system.max
        )));
    }
    let mut not = Vec::new();
    for (i, &pid) in running.iter().enumerate() {
        match Stopped::attach(pid) {
            Ok(first) => {
                let others = running[i + 1..].to_vec();
                say_not_armed(&mut system, not);
                return Ok(Some((first, Found { others, execing: Vec::new(), held: Vec::new(), system })));
            }
            Err(PtraceError::NoProcess(_)) => {}
            Err(e) => not.push(item(pid, &e)),
        }
    }
    say_not_armed(&mut system, not);
    // None runs: the first to exec one.
    let deadline = wait.map(|w| Instant::now() + w);
    loop {
        if crate::os::sys::stop_requested() || deadline.is_some_and(|d| Instant::now() >= d) {
            // No session to say them at its end: now.
            for w in system.said.iter().filter(|_| !quiet) {
                crate::text::eprint_lines(&format!("WARNING: {w}"));
            }
            return Ok(None);
        }
        let left = deadline.map_or(Duration::from_millis(100), |d| d.saturating_duration_since(Instant::now()));
        if !system.watch.wait(left.min(Duration::from_millis(100))) {
            continue;
        }
        let (mut execing, mut opening) = (Vec::new(), Vec::new());
        let mut not = Vec::new();
        let me = std::process::id() as i32;
        system.watch.take(&mut |e| {
            // Ours already (its exec seen, its loader opening the library
            // next).
            if crate::os::proc::tracer_of(e.tid) != Some(me) {
                let list = if e.exec { &mut execing } else { &mut opening };
                seize(e.tid, e.exec, system.max, list, &mut not)
            }
        });
        system.said.extend(not);
        while !execing.is_empty() {
            let (tid, pid) = execing.remove(0);
            match stopped_at_exec(tid, pid) {
                Ok(Some(first)) => {
                    let held = mapping(&mut system, opening);
                    return Ok(Some((first, Found { others: Vec::new(), execing, held, system })));
                }
                Ok(None) => {}
                Err(e) => {
                    system.said.insert(item(pid, &e));
                }
            }
        }
        // A library opened: the first process to map it.
        let mut held = mapping(&mut system, opening);
        while !held.is_empty() {
            let (pid, tid) = held.remove(0);
            match Stopped::attach_holding(pid, Some(tid)) {
                Ok(first) => return Ok(Some((first, Found { others: Vec::new(), execing: Vec::new(), held, system }))),
                Err(e) => {
                    crate::os::ptrace::detach_stopped(tid);
                    if !matches!(e, PtraceError::NoProcess(_)) {
                        system.said.insert(item(pid, &e));
                    }
                }
            }
        }
    }
}

/// The processes of threads attached as they opened a probed library
/// (`opening`: tid, pid), each run until the loader mapped it executable
/// (then held, to be armed: `Stopped::attach_holding`) or given up: those
/// that mapped it, (pid, tid).
fn mapping(system: &mut SystemWide, opening: Vec<(i32, i32)>) -> Vec<(i32, i32)> {
    let libs = &system.libraries;
    let readers = &mut system.readers;
    opening
        .into_iter()
        .filter(|&(tid, pid)| super::late::until_mapped(tid, pid, readers, |id| libs.contains(&id)))
        .map(|(tid, pid)| (pid, tid))
        .collect()
}

/// The warning naming the processes that could not be traced.
fn say_not_armed(system: &mut SystemWide, not: Vec<String>) {
    if !not.is_empty() {
        system.said.insert(format!(
            "{} process(es) that run or map the probed files cannot be traced (another tracer, another user's \
             namespace) and run without probes:\n  {}",
            not.len(),
            not.join("\n  ")
        ));
    }
}

/// Attach to thread `tid` held at its exec (so that its new program stops
/// at its start) or at its open of a library (`exec` false: it stops as
/// the open returns): pushed to `list` as (tid, pid). (The caller left out
/// the threads the tracer has attached already.)
fn seize(tid: i32, exec: bool, max: usize, list: &mut Vec<(i32, i32)>, not: &mut Vec<String>) {
    let Some(pid) = crate::os::proc::tgid(tid) else { return };
    if tid <= 0 || own(pid) || list.len() >= max {
        return;
    }
    let seized = if exec { crate::os::ptrace::seize_for_exec(tid) } else { crate::os::ptrace::seize_for_open(tid) };
    match seized {
        Ok(()) => list.push((tid, pid)),
        Err(e) => not.push(format!("cannot probe {} as it starts", item(pid, &e))),
    }
}

/// Wait (10 s at most) for thread `tid` attached at its exec to stop at
/// the start of its new program, and run that to its entry point: the
/// session's first process. None: it never exec'd (let go) or is gone.
fn stopped_at_exec(tid: i32, pid: i32) -> Result<Option<Stopped>, TargetError> {
    match crate::os::ptrace::wait_exec(tid, pid, Duration::from_secs(10)) {
        crate::os::ptrace::ExecWait::Exec => {}
        crate::os::ptrace::ExecWait::Gone(_) => return Ok(None),
        crate::os::ptrace::ExecWait::Running => {
            crate::os::ptrace::release(tid, pid);
            return Ok(None);
        }
    }
    let mut s = Stopped::adopt(pid)?;
    check_machine(pid)?;
    run_to_entry(&mut s)?;
    Ok(Some(s))
}

impl Armed {
    /// A system-wide session: the watch, and what its start could not arm.
    pub(super) fn system_wide(&mut self, mut found: Found) {
        // (Kept: said once.)
        for w in found.system.said.clone() {
            self.warn(w);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        match &mut self.follow {
            Some(f) => f.waiting.extend(found.execing.iter().map(|&(tid, pid)| (tid, pid, deadline))),
            None => {
                found.execing.iter().for_each(|&(tid, pid)| crate::os::ptrace::release(tid, pid));
                found.held.drain(..).for_each(|(_, tid)| crate::os::ptrace::detach_stopped(tid));
            }
        }
        self.target.named = Vec::new();
        self.target.service = Some(found.others);
        found.system.held = found.held;
        self.target.system = Some(found.system);
    }

    /// The execs of probed programs held now: each thread is attached
    /// before its exec goes on (`follow_execs` arms the new program at
    /// its start), unless its process is the session's already (its exec
    /// hook had it attached), the tracer's own, or over MAXPROCESSES.
    pub(super) fn watch_execs(&mut self) {
        let first = self.target.pid;
        let (Some(sys), Some(f)) = (&mut self.target.system, &mut self.follow) else { return };
        let me = std::process::id() as i32;
        let inos = std::iter::once(self.region.ino).chain(self.domain.others.iter().map(|d| d.ino)).collect::<Vec<_>>();
        let max = sys.max;
        // Counted at the first exec held: the processes armed now (those
        // that ended are nothing to undo).
        let mut room: Option<usize> = None;
        let (mut execing, mut opening) = (Vec::new(), Vec::new());
        // Processes of the session opening a probed library they do not
        // map yet (tid, pid, the library).
        let mut loading: Vec<(i32, i32, FileId)> = Vec::new();
        let mut not = Vec::new();
        let mut over = 0;
        sys.watch.take(&mut |e| {
            // Ours already: attached by its exec hook (`follow_execs`), or
            // at its open of a probed library just before (an exec of a
            // program of the session that has no exec hook, a static one,
            // is attached here).
            if crate::os::proc::tracer_of(e.tid) == Some(me) {
                return;
            }
            let Some(pid) = crate::os::proc::tgid(e.tid) else { return };
            let ours = || crate::os::proc::maps_any(pid, "/memfd:telco-stap", &inos);
            let reader = !e.exec && sys.readers.has(pid);
            if reader || opening.iter().any(|&(_, p)| p == pid) || loading.iter().any(|&(_, p, _)| p == pid) {
                return;
            }
            if !e.exec && ours() {
                // In the session already: a library it loads now gets its
                // probes once mapped (the first process's loader hook arms
                // its own).
                if pid != first {
                    super::late::loading_push(&mut loading, &mut not, e.tid, pid, e.file);
                }
                return;
            }
            let room = *room.get_or_insert_with(|| {
                let running = f.children.iter().filter(|c| crate::os::proc::running(c.pid)).count();
                max.saturating_sub(1 + running + f.waiting.len())
            });
            if execing.len() + opening.len() >= room {
                over += 1;
                return;
            }
            let list = if e.exec { &mut execing } else { &mut opening };
            seize(e.tid, e.exec, room, list, &mut not);
        });
        sys.over += over;
        if over > 0 && sys.over == over {
            let w = format!(
                "more processes run the probed programs than MAXPROCESSES={}: those started over the limit run \
                 without probes (-D MAXPROCESSES=N raises it)",
                sys.max
            );
            not.push(w);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for &(tid, pid) in &execing {
            if shares_parent_memory(pid) {
                f.vforked.insert(pid);
            }
            // Allowed already: its exec stop comes within microseconds,
            // and it is armed in this poll, not the next (a held exec's
            // delay). A stop that takes longer is the next poll's.
            match crate::os::ptrace::wait_exec(tid, pid, Duration::from_millis(20)) {
                crate::os::ptrace::ExecWait::Gone(_) => continue,
                crate::os::ptrace::ExecWait::Exec => f.execed.push(pid),
                crate::os::ptrace::ExecWait::Running => {}
            }
            f.waiting.push((tid, pid, deadline));
        }
        // A probed library opened: armed once the loader mapped it (the
        // process holds still from that system call until it is).
        let mut mapped = std::mem::take(&mut sys.held);
        mapped.extend(if opening.is_empty() { Vec::new() } else { mapping(sys, opening) });
        for (pid, tid) in mapped {
            match self.arm_existing_holding(pid, Some(tid)) {
                Ok(()) | Err(TargetError::Ptrace(PtraceError::NoProcess(_))) => {}
                Err(e) => not.push(item(pid, &e)),
            }
        }
        if let Some(sys) = &mut self.target.system {
            let mut readers = std::mem::take(&mut sys.readers);
            self.arm_loading(loading, &mut readers, &mut not);
            if let Some(sys) = &mut self.target.system {
                sys.readers = readers;
            }
        }
        self.say_once(not);
    }

    /// Warnings of a session by path, each said once.
    fn say_once(&mut self, warnings: Vec<String>) {
        let Some(sys) = &mut self.target.system else { return };
        let new: Vec<String> = warnings.into_iter().filter(|w| sys.said.insert(w.clone())).collect();
        for w in new {
            self.warn(w);
        }
    }

    /// At the end of a system-wide session: how many processes the limit
    /// left unprobed.
    pub(super) fn say_over_limit(&mut self) {
        if let Some(sys) = self.target.system.take() {
            if sys.over > 0 {
                let w = format!("{} process(es) started over MAXPROCESSES={} ran without probes", sys.over, sys.max);
                self.warn(w);
            }
        }
    }
}
