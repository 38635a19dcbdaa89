//! Following the target's processes into the programs they exec: the
//! exec hook's requests answered, the new image armed at its entry.

use super::*;

/// A process armed after the first (after an exec, or a `-p` process and
/// its descendants found at the start): what to undo at the end.
#[derive(Clone)]
pub(super) struct Child {
    pub(crate) pid: i32,
    pub(crate) patches: Vec<Patch>,
    pub(crate) crash: Option<crate::crash::Hook>,
    pub(crate) semaphores: Vec<u64>,
    /// The code regions mapped into it (start, size), and the
    /// remote-operation stub installed in it (attached while running).
    pub(crate) codes: Vec<(u64, u64)>,
    pub(crate) stub: Option<crate::os::ptrace::StubPlace>,
}

/// The function and statement probes of `a` that process `pid` maps (at
/// an address `keep` accepts), by module and file offset; a probe of
/// `process("P").library("L")` only where `pid` runs P.
fn probes_in(a: &Artifact, pid: i32, maps: &[Mapping], keep: impl Fn(u64) -> bool) -> ByModule {
    let mut by_module: ByModule = BTreeMap::new();
    let mut runs = Program::runs(pid);
    for (i, p) in a.probes.iter().enumerate() {
        let (module, file_offset) = match &p.attach {
            Attach::Function { module, file_offset, only_exe, .. } => {
                if only_exe.as_ref().is_some_and(|only| !runs(only)) {
                    continue;
                }
                (module, file_offset)
            }
            Attach::Statement { module, file_offset, .. } => (module, file_offset),
            _ => continue,
        };
        if runtime_addr(maps, module, *file_offset).is_some_and(&keep) {
            by_module.entry(module.clone()).or_default().entry(*file_offset).or_default().push(i);
        }
    }
    by_module
}

/// Following the target's children into the programs they `exec`: the C
/// library's `execve` is hooked (`rt_execnotify`), the thread about to exec
/// is attached (`ptrace::seize_for_exec`), and the new program, stopped at
/// its entry point, gets the region mapped at the same address, thread
/// slots at the same address, and the probes of every module it maps.
pub(super) struct Follow {
    /// The region's memfd in the tracer (`/proc/TRACER/fd/N` for children).
    pub(crate) region_fd: i32,
    /// The trusted mirror's memfd in the tracer (`Region::mirror_fd`).
    pub(crate) mirror_fd: i32,
    pub(crate) region_remote: u64,
    pub(crate) region_size: u64,
    pub(crate) threads_at: u64,
    /// `rt_execnotify`'s offset in the blob.
    pub(crate) execnotify: u32,
    /// Threads attached for an exec: (tid, pid, when to give up).
    pub(crate) waiting: Vec<(i32, i32, std::time::Instant)>,
    /// Processes whose exec stop `Armed::alive` took (the command: it
    /// waits for its own child).
    pub(crate) execed: Vec<i32>,
    /// Processes armed after an exec: pid, the bytes to put back.
    pub(crate) children: Vec<Child>,
    /// What could not be followed, said once each.
    pub(crate) said: std::collections::BTreeSet<String>,
    /// Processes about to exec that share their parent's memory (vfork,
    /// posix_spawn): they never ran a program of their own, so their exec
    /// ends none (no process.end).
    pub(crate) vforked: std::collections::BTreeSet<i32>,
    /// The target sees the pids we see (one pid namespace): the rows'
    /// owners can be checked from here (`Armed::reclaim_rows`).
    pub(crate) same_pid_ns: bool,
    /// When the rows were last checked.
    pub(crate) rows_checked: std::time::Instant,
    /// Code regions of the first process's exec hooks (kept for the
    /// session, like `Undo::_code`; a child's are its own).
    pub(crate) _codes: Vec<CodeRegion>,
    /// The region's holder for an unprivileged domain (`os::holder`),
    /// started the first time a process needs it.
    pub(crate) holder: Option<crate::os::holder::Holder>,
    /// When the records of ended processes were last pruned
    /// (`Armed::prune_children`).
    pub(crate) pruned: std::time::Instant,
}

/// Hook the C library's `execve` and `execveat` (in every process image
/// that maps it) with `rt_execnotify`.
#[allow(clippy::too_many_arguments)]
pub(super) fn hook_execs(
    source: &dyn SymbolSource,
    hooker: &Hooker,
    s: &mut Stopped,
    a: &Artifact,
    maps: &[Mapping],
    execnotify: u32,
    plans: &mut Vec<Plan>,
    codes: &mut Vec<CodeRegion>,
    refused: &mut Vec<String>,
) -> Result<(), TargetError> {
    for (_, entries) in
        symbol_entries(source, maps, |p| p.to_string_lossy().contains("/libc.so"), &["execve", "execveat"])
    {
        // A probe of the script's there already calls rt_execnotify.
        let entries: Vec<_> = entries.into_iter().filter(|&(addr, _, _)| !hooked(plans, addr)).collect();
        if entries.is_empty() {
            continue;
        }
        let mut code = inject::code(s, a, entries[0].0, 1024 * entries.len() as u64 + 1024)?;
        hooker.own_blob(s.pid() as u32, &code);
        let handler = code.at(execnotify);
        for (addr, size, _) in entries {
            // On every thread, one without a slot too (`Tramp::always`).
            match hooker.function(s, &mut code, addr, size, None, Tramp::always(handler, hooker.region))? {
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
pub(super) fn hooked(plans: &[Plan], addr: u64) -> bool {
    plans.iter().any(|(at, _, _)| (addr..addr + 16).contains(at))
}

/// The C library's exec entries (`execve`, `execveat`): run-time addresses.
pub(super) fn exec_entries(source: &dyn SymbolSource, maps: &[Mapping]) -> Vec<u64> {
    symbol_entries(source, maps, |p| p.to_string_lossy().contains("/libc.so"), &["execve", "execveat"])
        .into_iter()
        .flat_map(|(_, entries)| entries.into_iter().map(|(addr, _, _)| addr))
        .collect()
}

/// One process in a list of those a warning names (one line each: what
/// the target chose, its name, and what an error quotes, escaped).
pub(super) fn item(pid: i32, e: &dyn std::fmt::Display) -> String {
    let name = crate::text::escape(crate::os::proc::comm(pid).trim().as_bytes()).into_owned();
    format!("pid {pid} ({name}): {}", crate::text::escape(e.to_string().as_bytes()))
}

/// Whether process `pid` shares its address space with its parent (a
/// vfork or posix_spawn child before its exec): `kcmp(KCMP_VM)`.
pub(super) fn shares_parent_memory(pid: i32) -> bool {
    let Some((_, ppid)) = crate::os::proc::uid_and_parent(pid as u32) else { return false };
    crate::os::process::same_vm(pid, ppid as i32)
}

const _: () = assert!(core::mem::offset_of!(telco_abi::region::Header, execname) % 8 == 0);

/// Whether thread `tid` belongs to process `pid`, and `pid` maps the
/// session's region (the memfd of inode `region_ino`): only the processes
/// of the session do (it is injected into them, or inherited by a fork),
/// however they were reparented.
pub(super) fn ours(tid: i32, pid: i32, region_ino: u64) -> bool {
    let tgid = crate::os::proc::tgid(tid);
    if tid <= 0 || pid <= 0 || region_ino == 0 || tgid != Some(pid) {
        return false;
    }
    crate::os::proc::maps_file(pid, "/memfd:telco-stap", region_ino)
}

impl Armed {
    /// A thread asked to exec (`Header::exec_req`): attach to it so its new
    /// program stops at the start, and answer. Then look at the threads
    /// waiting to exec: a new program gets its probes; one that did not
    /// exec after a while is let go.
    pub(super) fn follow_execs(&mut self) {
        if self.follow.is_none() {
            return;
        }
        // The session's region's requests, then its other domains'.
        let mut regions = vec![(self.region.header, self.region.ino)];
        regions.extend(self.domain.others.iter().map(|d| (d.region.base() as *const u8, d.ino)));
        for (header, ino) in regions {
            self.take_exec_request(header, ino);
        }
        self.follow_waiting();
    }

    /// The exec request in the region at `header` (in the tracer; of memfd
    /// inode `ino`), if there is one: the thread attached, answered.
    fn take_exec_request(&mut self, header: *const u8, ino: u64) {
        use std::sync::atomic::{AtomicU64, Ordering};
        let Some(f) = &mut self.follow else { return };
        if header.is_null() {
            return;
        }
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
            if !ours(tid, pid, ino) {
                let note = format!(
                    "cannot follow pid {pid} (as the target names it) into the program it runs: no process of \
                     that id here maps this session's region (another pid namespace?)"
                );
                if f.said.insert(note.clone()) && !self.report.quiet {
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
                        if f.said.insert(note.clone()) && !self.report.quiet {
                            crate::eprintln_escaped!("WARNING: {note}");
                        }
                    }
                },
            }
            // Release: the thread goes on once we are attached.
            field(ack_at).store(req, Ordering::Release);
        }
    }

    /// The threads waiting to exec: a new program gets its probes; one
    /// that did not exec after a while is let go.
    fn follow_waiting(&mut self) {
        let Some(f) = &mut self.follow else { return };
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
                crate::os::ptrace::ExecWait::Gone(Some(status)) if pid == self.target.pid && self.target.child => {
                    self.ended(status)
                }
                crate::os::ptrace::ExecWait::Gone(_) => {}
                crate::os::ptrace::ExecWait::Exec => {
                    armed_now.push(pid);
                    // The old image's hooks went with it: never written
                    // back into the new one.
                    if pid == self.target.pid {
                        self.undo.patches.clear();
                        self.undo.semaphores.clear();
                        self.undo.crash = None;
                        // No library of the old image will load now; the
                        // symbol table's libraries were the old image's.
                        self.libs.pending.clear();
                        self.libs.syms.stop();
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
                            if f.said.insert(note.clone()) && !self.report.quiet {
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
    pub(super) fn arm_exec(&mut self, pid: i32) -> Result<(), TargetError> {
        let mut s = Stopped::adopt(pid)?;
        // One trust domain per region: a program exec'd as another user
        // works in its domain's region; one exec'd with privileges its
        // parent did not have (setuid, setgid, file capabilities) runs
        // unprobed, released as it is by the guard.
        let domain = self.domain_for(pid).map_err(TargetError::Unsupported)?;
        run_to_entry(&mut s)?;
        check_machine(pid)?;
        // Another program: the old image's code of ours is gone.
        if let Ok(mut o) = self.hooker.own.write() {
            o.forget(pid as u32);
        }
        self.arm_image(s, pid, None, true, domain)
    }

    /// Process `pid`, running when the session started (a `-p` process
    /// after the first, a descendant of one: the workers of a master, the
    /// backends of a postmaster): attached, armed as an exec'd program is
    /// (the session's region at the same address, its thread slots, the
    /// probes of every module it maps), `process.begin` in it and
    /// `thread.begin` in its other threads, then let go.
    pub(super) fn arm_existing(&mut self, pid: i32) -> Result<(), TargetError> {
        self.arm_existing_holding(pid, None)
    }

    /// [`Armed::arm_existing`], with thread `held` of `pid` ours already,
    /// in an interrupt stop (let go whatever happens).
    pub(super) fn arm_existing_holding(&mut self, pid: i32, held: Option<i32>) -> Result<(), TargetError> {
        let attached = match self.follow {
            None => {
                Err(TargetError::Unsupported("a session with .itrace probes traces one process (the first -p)".into()))
            }
            Some(_) => Stopped::attach_holding(pid, held).map_err(TargetError::from),
        };
        let mut s = match attached {
            Ok(s) => s,
            Err(e) => {
                if let Some(tid) = held {
                    crate::os::ptrace::detach_stopped(tid);
                }
                return Err(e);
            }
        };
        let domain = self.domain_for(pid).map_err(TargetError::Unsupported)?;
        check_machine(pid)?;
        // First of all, as at any attach: a tracer that dies from here on
        // leaves every thread able to go on.
        let stub = s.install_stub(inject::slack(&s))?;
        self.arm_image(s, pid, stub, false, domain)
    }

    /// `-p`: cover the other processes named and every descendant once
    /// the session's begin probes ran (`Armed::cover`).
    pub(super) fn cover_at_start(&mut self, others: Vec<i32>) {
        self.target.named = others.clone();
        self.target.service = Some(others);
    }

    /// `-p`: the processes running when the session started that it
    /// covers besides the first: the other processes named (`others`) and
    /// the descendants of each and of the first (a master's workers, a
    /// postmaster's backends). Each is armed as an exec'd program is
    /// (`arm_existing`); those that cannot be (another user's, already
    /// traced, gone) are named in one warning.
    pub(super) fn cover(&mut self, others: &[i32]) {
        let first = self.target.pid;
        let mut pids: Vec<i32> = Vec::new();
        // System-wide, the processes that run or map the files only.
        let system = self.target.system.is_some();
        for &root in std::iter::once(&first).chain(others) {
            let descendants = if system { Vec::new() } else { self.descendants_of(root) };
            for p in std::iter::once(root).chain(descendants) {
                if p != first && !pids.contains(&p) {
                    pids.push(p);
                }
            }
        }
        let mut not = Vec::new();
        for pid in pids {
            // Forked since the first was armed (it runs the armed image
            // already), or a vfork child running in an armed process's
            // memory.
            if self.maps_session(pid) || crate::os::process::same_vm(pid, first) {
                continue;
            }
            match self.arm_existing(pid) {
                Ok(()) => {}
                // Gone meanwhile (or a zombie): nothing of it runs.
                Err(TargetError::Ptrace(PtraceError::NoProcess(_))) => {}
                Err(e) => not.push(item(pid, &e)),
            }
        }
        if !not.is_empty() {
            let w =
                format!("{} process(es) of the traced service run without probes:\n  {}", not.len(), not.join("\n  "));
            self.warn(w);
        }
    }

    /// The process whose descriptors (the tracer's own numbers) a process
    /// armed now opens the region through: the tracer for a root domain,
    /// else the domain's holder, started now if it is not yet.
    fn region_holder(&mut self) -> Result<i32, TargetError> {
        let ids = self.domain.creds.as_ref().and_then(|c| c.ids()).filter(|i| i.unprivileged());
        let (Some(ids), Some(f)) = (ids, &mut self.follow) else { return Ok(std::process::id() as i32) };
        if f.holder.is_none() {
            let h = crate::os::holder::Holder::spawn(&ids, [f.region_fd, f.mirror_fd]).map_err(|e| {
                TargetError::Unsupported(format!("no holder of the session's memory for its user: {e}"))
            })?;
            f.holder = Some(h);
        }
        Ok(f.holder.as_ref().map_or(std::process::id() as i32, |h| h.pid()))
    }

    /// The part of arming another process that an exec'd program and one
    /// running at the start share; `exec`: it is at the entry of a program
    /// it exec'd (`process.end` of the old one first); `domain`: the
    /// other trust domain whose region it maps (`Armed::domain_for`).
    fn arm_image(
        &mut self,
        mut s: Stopped,
        pid: i32,
        stub: Option<crate::os::ptrace::StubPlace>,
        exec: bool,
        domain: Option<usize>,
    ) -> Result<(), TargetError> {
        let maps = mappings(pid)?;
        // The runtime's entry hooks are the first process's: this image's
        // own exec entries while it is armed, the first's again after.
        let first_hooks = {
            let mut hooks = self.hooker.entry_hooks.borrow_mut();
            let saved = std::mem::take(&mut *hooks);
            if let Some(f) = self.hooker.exec_notify {
                hooks.extend(exec_entries(&*self.symbols, &maps).into_iter().map(|addr| (addr, (f, false))));
            }
            saved
        };
        let armed = self.arm_image_with(&mut s, pid, &maps, exec, stub, domain);
        *self.hooker.entry_hooks.borrow_mut() = first_hooks;
        let (child, said) = armed?;
        s.detach()?;
        for w in said {
            self.warn(w);
        }
        if let (Some(f), Some(child)) = (&mut self.follow, child) {
            // One entry a pid: an earlier process of that pid ended (what
            // it held went with it).
            f.children.retain(|c| c.pid != child.pid);
            f.children.push(child);
        }
        Ok(())
    }

    /// [`Armed::arm_image`] with the entry hooks set: the probes placed,
    /// the lifecycle probes run; what to undo (None: execs are not
    /// followed, nothing was armed), and what to say.
    fn arm_image_with(
        &mut self,
        s: &mut Stopped,
        pid: i32,
        maps: &[Mapping],
        exec: bool,
        stub: Option<crate::os::ptrace::StubPlace>,
        domain: Option<usize>,
    ) -> Result<(Option<Child>, Vec<String>), TargetError> {
        if self.follow.is_none() {
            return Ok((None, Vec::new()));
        }
        // Another domain's region: through its holder (or the tracer).
        let other = match domain {
            Some(i) => Some(self.domain_access(i).map_err(TargetError::Unsupported)?),
            None => None,
        };
        // Through the first process's descriptors while it holds them (at
        // the start: the processes of its user may not open the tracer's),
        // else the tracer's (a root domain) or the domain's holder.
        let holder = match (other, self.target.fds) {
            (Some((h, _, _)), _) => h,
            (None, Some(_)) if !exec => self.target.pid,
            _ => self.region_holder()?,
        };
        let a = &self.hooker.artifact;
        let maps = maps.to_vec();
        let by_module = probes_in(a, pid, &maps, |_| true);
        let Some(f) = &self.follow else { return Ok((None, Vec::new())) };
        // The region and the thread slots at the addresses the trampolines
        // and the handlers know. Also in a program without probes of its
        // own: its exec hook follows the programs it runs in turn (`env
        // prog`, a shell's children).
        let (fd, mfd) = match (other, self.target.fds) {
            (Some((_, fd, mfd)), _) => (fd, mfd),
            (None, Some(fds)) if !exec => fds,
            _ => (f.region_fd, f.mirror_fd),
        };
        inject::map_region_at(s, holder, fd, mfd, f.region_remote, f.region_size)?;
        inject::threads_at(s, a, f.threads_at)?;
        let mut refused = Vec::new();
        let mut plans = Vec::new();
        let mut codes = Vec::new();
        let exe = crate::os::proc::exe_path(pid);
        let (mut signals, first_always) = traps::prepare(&self.hooker, &*self.symbols, &maps, Some(&exe));
        let placed = by_module.iter().try_for_each(|(module, functions)| {
            let (code, p) = self.hooker.module(s, &maps, module, functions, &mut refused)?;
            plans.extend(p);
            codes.extend(code);
            Ok::<_, TargetError>(())
        });
        *self.hooker.always_hooks.borrow_mut() = first_always;
        placed?;
        let Some(f) = &self.follow else { return Ok((None, Vec::new())) };
        let execnotify = f.execnotify;
        let region_remote = f.region_remote;
        let mut trap_hook = None;
        traps::place(
            &self.hooker,
            s,
            &mut signals,
            &mut plans,
            &[],
            &mut codes,
            &mut refused,
            &mut trap_hook,
            region_remote,
        )?;
        hook_execs(&*self.symbols, &self.hooker, s, a, &maps, execnotify, &mut plans, &mut codes, &mut refused)?;
        let mut patches = Vec::new();
        apply(s, plans, &mut patches, &self.hooker.relocs.borrow())?;
        let semaphores = raise_semaphores(s, a, &maps, &[], &patches);
        if codes.is_empty() {
            let near = arch::pc(&s.regs(pid)?);
            let code = inject::code(s, a, near, 4096)?;
            self.hooker.own_blob(pid as u32, &code);
            codes.push(code);
        }
        let crash = codes.first_mut().and_then(|code| crate::crash::install(s, code, a, region_remote, trap_hook));
        let mut said: Vec<String> = refused.into_iter().map(|r| format!("cannot probe {r} (pid {pid})")).collect();
        if exec {
            self.free_rows_of(pid);
        }
        if let Some(code) = codes.first() {
            if exec {
                // The old program ended (process.end, for the program this
                // process ran: its own, or its parent's when it forked),
                // the new one begins.
                let old = self.target.exes.get(&pid).cloned().or_else(|| {
                    let (_, ppid) = crate::os::proc::uid_and_parent(pid as u32)?;
                    self.target.exes.get(&(ppid as i32)).cloned()
                });
                let vforked = self.follow.as_mut().is_some_and(|f| f.vforked.remove(&pid));
                if let Some(old) = old.as_ref().filter(|_| !vforked) {
                    said.extend(lifecycle(s, a, code, region_remote, pid, LifeEvent::ProcessEnd, old));
                }
                said.extend(lifecycle(s, a, code, region_remote, pid, LifeEvent::ProcessBegin, &Program::of(pid)));
            } else {
                // Attached running: process.begin, and thread.begin in its
                // other threads, as in the first `-p` process.
                let main = s.main_thread();
                let others: Vec<i32> = s.threads().filter(|&t| t != main).collect();
                let program = Program::of(pid);
                said.extend(lifecycle(s, a, code, region_remote, main, LifeEvent::ProcessBegin, &program));
                for t in others {
                    said.extend(lifecycle(s, a, code, region_remote, t, LifeEvent::ThreadBegin, &program));
                }
            }
        }
        self.target.exes.insert(pid, Program::of(pid));
        let codes = codes.iter().map(|c| (c.remote, c.size)).collect();
        Ok((Some(Child { pid, patches, crash, semaphores, codes, stub }), said))
    }

    /// Process `pid` of the session (armed after the first, or forked by
    /// an armed one) held at thread `tid` right after its loader mapped
    /// the probed library `file` (a session by path: `dlopen` of a module,
    /// of an extension): that library's probes placed in it, then let go.
    /// A fork first becomes a `Child` of its own, holding what it
    /// inherited (the patches still its own, the code, the crash handler,
    /// the stub), so that what it gets now is undone with it at the end.
    pub(super) fn arm_library(&mut self, pid: i32, tid: i32, file: crate::os::proc::FileId) -> Result<(), TargetError> {
        let mut s = match Stopped::attach_holding(pid, Some(tid)) {
            Ok(s) => s,
            Err(e) => {
                crate::os::ptrace::detach_stopped(tid);
                return Err(e.into());
            }
        };
        let known = self.follow.as_ref().and_then(|f| f.children.iter().find(|c| c.pid == pid).cloned());
        let mut child = match known {
            Some(c) => c,
            None => match self.owner_of(pid) {
                Some(owner) if owner == self.target.pid => {
                    s.use_stub(self.undo.stub.as_ref());
                    let codes = self.first_codes();
                    Child {
                        pid,
                        patches: super::detach::still_patched(&s, &self.undo.patches),
                        crash: self.undo.crash,
                        semaphores: self.undo.semaphores.clone(),
                        codes,
                        stub: self.undo.stub.clone(),
                    }
                }
                Some(owner) => {
                    let children = self.follow.as_ref().map(|f| f.children.as_slice()).unwrap_or_default();
                    let Some(o) = children.iter().find(|c| c.pid == owner) else {
                        return Err(TargetError::Unsupported("the process it was forked from is not armed".into()));
                    };
                    s.use_stub(o.stub.as_ref());
                    Child { pid, patches: super::detach::still_patched(&s, &o.patches), ..o.clone() }
                }
                None => return Err(TargetError::Unsupported("no armed process it was forked from".into())),
            },
        };
        s.use_stub(child.stub.as_ref());
        let maps = mappings(pid)?;
        let in_file = |addr: u64| maps.iter().any(|m| (m.dev, m.inode) == file && m.start <= addr && addr < m.end);
        let a = &self.hooker.artifact;
        let by_module = probes_in(a, pid, &maps, in_file);
        let mut refused = Vec::new();
        let mut plans = Vec::new();
        for (module, functions) in &by_module {
            let (code, p) = self.hooker.module(&mut s, &maps, module, functions, &mut refused)?;
            plans.extend(p);
            child.codes.extend(code.iter().map(|c| (c.remote, c.size)));
        }
        let mut patches = Vec::new();
        apply(&mut s, plans, &mut patches, &self.hooker.relocs.borrow())?;
        child.semaphores.extend(raise_semaphores(&s, a, &maps, &child.semaphores, &patches));
        child.patches.extend(patches);
        s.detach()?;
        for r in refused {
            self.warn(format!("cannot probe {r} (pid {pid})"));
        }
        if let Some(f) = &mut self.follow {
            f.children.retain(|c| c.pid != pid);
            f.children.push(child);
        }
        Ok(())
    }

    /// The end of a session: threads still waiting to exec are let go; the
    /// followed programs' code is put back (those still running it).
    pub(super) fn unfollow(&mut self) {
        let Some(f) = &mut self.follow else { return };
        for (tid, pid, _) in f.waiting.drain(..) {
            crate::os::ptrace::release(tid, pid);
        }
        // An exec stop of the command that `alive` took after its thread
        // stopped waiting: it sits in that stop, let it go.
        for pid in f.execed.drain(..) {
            crate::os::ptrace::detach_stopped(pid);
        }
        // Each cleaned with the list whole: a fork's owner is its nearest
        // armed ancestor among them (the workers a `-p` process or one
        // found by path forked later; the first process's are told from
        // theirs by it).
        let children = f.children.clone();
        for c in &children {
            self.clean_child(c);
        }
    }

    /// The command exec'd: `execname()` in it is the new program's name.
    pub(super) fn refresh_execname(&mut self) {
        let comm = crate::os::proc::comm(self.target.pid);
        let mut name = [0u8; 16];
        let bytes = comm.trim_end().as_bytes();
        name[..bytes.len().min(15)].copy_from_slice(&bytes[..bytes.len().min(15)]);
        let at = core::mem::offset_of!(telco_abi::region::Header, execname);
        for (i, chunk) in name.chunks_exact(8).enumerate() {
            // SAFETY: the live region's header; execname is 16 bytes at an
            // 8-aligned offset, read by handlers with plain loads.
            unsafe {
                std::sync::atomic::AtomicU64::from_ptr(self.region.header.add(at + 8 * i) as *mut u64).store(
                    u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
    }
}
