//! The end of a session: every patched byte put back and everything the
//! session mapped unmapped, in the traced process, its forked children and
//! the programs it exec'd; semaphores lowered.

use super::*;

/// The end of a session in a stopped process: the semaphores it raised.
pub(super) fn lower_semaphores(s: &Stopped, semaphores: &[u64]) {
    for &at in semaphores {
        let Ok(b) = s.read(at, 2) else { continue };
        let v = u16::from_le_bytes([b[0], b[1]]).saturating_sub(1);
        let _ = s.write(at, &v.to_le_bytes());
    }
}

/// In a stopped process of the session: the crash handler out, the
/// semaphores lowered, the `patches`' original bytes back (threads inside
/// them run out first). `what` names the process in warnings.
pub(super) fn put_back(
    s: &mut Stopped,
    patches: &[Patch],
    relocs: &[(u64, u32, u64, u32)],
    crash: Option<&crate::crash::Hook>,
    semaphores: &[u64],
    what: &str,
) {
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
    back_to_system_calls(s, patches, relocs);
    // The signal handlers last: no trap is left to reach SIGTRAP's (the
    // threads stopped on one were put back on it when they stopped).
    if let Some(hook) = crash {
        if let Err(e) = crate::crash::uninstall(s, hook) {
            crate::eprintln_escaped!("warning: {what}: {e}");
        }
    }
}

/// A thread asleep in a system call in a trampoline's copy of a patch's
/// bytes (`place::apply` moved it there, or it entered the copy through
/// the probe): back to the original call, whose bytes are back, so that
/// it leaves our code as it wakes (`unmap_injected` would otherwise wait
/// for it in vain), and a restart finds the call there.
fn back_to_system_calls(s: &mut Stopped, patches: &[Patch], relocs: &[(u64, u32, u64, u32)]) {
    let sys = arch::syscall_instruction();
    let tids: Vec<i32> = s.threads().collect();
    for tid in tids {
        let Ok(mut r) = s.regs(tid) else { continue };
        let pc = arch::pc(&r);
        let back = patches.iter().find_map(|p| {
            let len = p.original.len();
            let &(copy, _, _, _) = relocs
                .iter()
                .find(|&&(c, n, o, l)| o == p.at && l as usize == len && pc > c && pc <= c + u64::from(n))?;
            (0..len).find_map(|i| {
                let ip = p.at + i as u64;
                if !p.original[i..].starts_with(sys) {
                    return None;
                }
                // On the call (aarch64 rewinds a call to restart before
                // the stop) or just past it (x86_64 rewinds after).
                let there = arch::patch::relocated_pc(&p.original, p.at, len, copy, ip)?;
                let past = sys.len() as u64;
                (pc == there).then_some(ip).or((pc == there + past).then_some(ip + past))
            })
        });
        if let Some(to) = back {
            arch::set_pc(&mut r, to);
            let _ = s.set_regs(tid, &r);
        }
    }
}

/// The patches of `patches` a fork still holds: where its bytes are still
/// ours (the process it was forked from may have placed others since,
/// where the fork has something else).
pub(super) fn still_patched(s: &Stopped, patches: &[Patch]) -> Vec<Patch> {
    patches.iter().filter(|p| s.read(p.at, p.patched.len()).is_ok_and(|b| b == p.patched)).cloned().collect()
}

/// What the session put into one process besides the region, its mirror
/// and the thread slots (which are at the same addresses in every process
/// of the session): its code regions (start, size) and its
/// remote-operation stub.
pub(super) struct Mapped {
    pub(super) codes: Vec<(u64, u64)>,
    pub(super) stub: Option<crate::os::ptrace::StubPlace>,
    /// The first process's: the block tracer's pool is there too.
    pub(super) first: bool,
}

impl Armed {
    /// Put the original bytes back (the end of a session): in the traced
    /// process, then in the processes it forked that still run its image
    /// (they share the region and carry copies of the patches). Processes
    /// forked by the programs it exec'd, or by the other processes armed at
    /// the start, are cleaned with those (`Armed::unfollow`).
    pub(super) fn restore(&mut self) {
        let forks = self.forked_children();
        // Forks cut off from every region (no region of ours shows which
        // image they run: the armed process whose patches they hold
        // does). Those moved to another domain's region are found by it
        // like the others.
        let cut: Vec<i32> =
            self.domain.cut_off.iter().filter(|&&(p, fork)| fork && !forks.contains(&p)).map(|&(p, _)| p).collect();
        let (crash, semaphores) = (self.undo.crash, self.undo.semaphores.clone());
        self.restore_main();
        for pid in forks {
            self.restore_fork(pid, crash.as_ref(), &semaphores);
        }
        for pid in cut {
            let children = self.follow.as_ref().map(|f| f.children.clone()).unwrap_or_default();
            let owner = self.owner_of(pid);
            match children.iter().find(|c| Some(c.pid) == owner) {
                Some(c) => self.clean_fork_of(c, pid),
                None if owner == Some(self.target.pid) => self.restore_fork(pid, crash.as_ref(), &semaphores),
                None => {}
            }
        }
        self.sweep();
        self.undo.patches.clear();
    }

    /// The first process's own mappings.
    fn first_mapped(&self) -> Mapped {
        Mapped { codes: self.first_codes(), stub: self.undo.stub.clone(), first: true }
    }

    /// The code regions mapped into the first process (start, size).
    pub(super) fn first_codes(&self) -> Vec<(u64, u64)> {
        let mut codes: Vec<(u64, u64)> = self.undo._code.iter().map(|c| (c.remote, c.size)).collect();
        if let Some(f) = &self.follow {
            codes.extend(f._codes.iter().map(|c| (c.remote, c.size)));
        }
        codes
    }

    /// A process armed after the first (`Child`), at the end: if it still
    /// runs the image it was armed in (our region is mapped there, by its
    /// inode), its patches back and what the session mapped out of it,
    /// then the processes it forked since that run that image too.
    pub(super) fn clean_child(&mut self, c: &Child) {
        let forks: Vec<i32> = self.forked_from(c.pid);
        for pid in std::iter::once(c.pid).chain(forks) {
            self.clean_as(c, pid);
        }
    }

    /// Process `pid`, `c` itself or a fork of it, if it maps the session's
    /// region: cleaned with `c`'s record.
    fn clean_as(&mut self, c: &Child, pid: i32) {
        if !self.maps_session(pid) {
            return;
        }
        self.clean_fork_of(c, pid);
    }

    /// [`Armed::clean_as`] whatever `pid` maps (one cut off from every
    /// region still holds `c`'s patches and code).
    fn clean_fork_of(&mut self, c: &Child, pid: i32) {
        let mut s = match Stopped::attach(pid) {
            Ok(s) => s,
            // Gone, or on its way out (its memory with it).
            Err(PtraceError::NoProcess(_)) => return,
            Err(_) if crate::os::proc::ending(pid) => return,
            Err(e) => {
                crate::eprintln_escaped!("warning: cannot stop pid {pid} to remove the probes: {e}");
                return;
            }
        };
        s.use_stub(c.stub.as_ref());
        // A fork holds the patches it inherited where its bytes are
        // still ours.
        let held = if pid == c.pid { c.patches.clone() } else { still_patched(&s, &c.patches) };
        let mapped = Mapped { codes: c.codes.clone(), stub: c.stub.clone(), first: false };
        let what = if pid == c.pid { format!("pid {pid}") } else { format!("pid {pid} (forked from {})", c.pid) };
        self.clean_with(s, &held, c.crash.as_ref(), &c.semaphores, &mapped, &what);
    }

    /// The end's last look: every process that still maps the session's
    /// region, the whole system over, cleaned as the armed process whose
    /// patches it holds. These are forks that no process tree leads to: a
    /// daemon forked by a process armed after the first (a program exec'd,
    /// found by path, a `-p` worker), whose parent exited, so that init
    /// adopted it. (A `-c` command's are the tracer's: its subreaper.)
    fn sweep(&mut self) {
        for pid in self.holding_region() {
            let children = self.follow.as_ref().map(|f| f.children.clone()).unwrap_or_default();
            match self.owner_of(pid) {
                Some(o) if o == self.target.pid && !children.iter().any(|c| c.pid == o) => {
                    let (crash, semaphores) = (self.undo.crash, self.undo.semaphores.clone());
                    self.restore_fork(pid, crash.as_ref(), &semaphores);
                }
                Some(o) => {
                    if let Some(c) = children.iter().find(|c| c.pid == o) {
                        self.clean_as(c, pid);
                    }
                }
                None => {}
            }
            if self.maps_session(pid) {
                crate::eprintln_escaped!(
                    "warning: pid {pid} ({}) still maps the session's memory: no record of the probes it holds",
                    crate::os::proc::comm(pid).trim()
                );
            }
        }
    }

    /// The processes that map the session's region, the whole system over
    /// (the tracer and its probes' sandbox left out).
    fn holding_region(&self) -> Vec<i32> {
        let me = std::process::id() as i32;
        let own_exe = crate::os::proc::exe_id(me);
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        let pids = dir.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok());
        pids.filter(|&pid| {
            pid != me
                && self.maps_session(pid)
                && !(crate::os::proc::uid_and_parent(pid as u32).map(|(_, p)| p as i32) == Some(me)
                    && crate::os::proc::exe_id(pid) == own_exe)
        })
        .collect()
    }

    /// The records of armed processes that ended (`Child`), once more than
    /// 64 have piled up (a session by path on a program run over and over,
    /// a `-c` build running thousands of commands): dropped, but for those
    /// whose forks still run with their patches (a daemon whose parent
    /// exited, cleaned with that record at the end: `sweep`). Looked at
    /// every second at most; the forks are found the whole system over.
    pub(super) fn prune_children(&mut self) {
        let Some(f) = &mut self.follow else { return };
        if f.pruned.elapsed() < std::time::Duration::from_secs(1) {
            return;
        }
        f.pruned = std::time::Instant::now();
        let ended: Vec<i32> = f.children.iter().map(|c| c.pid).filter(|&p| !crate::os::proc::running(p)).collect();
        if ended.len() <= 64 {
            return;
        }
        let owners: Vec<i32> = self.holding_region().into_iter().filter_map(|p| self.owner_of(p)).collect();
        let Some(f) = &mut self.follow else { return };
        let before = f.children.len();
        f.children.retain(|c| !ended.contains(&c.pid) || owners.contains(&c.pid));
        if self.report.verbose {
            let kept = f.children.iter().filter(|c| ended.contains(&c.pid)).count();
            crate::eprintln_escaped!(
                "Pass 5: {} ended process(es) forgotten, {kept} kept (their forks run with probes).",
                before - f.children.len()
            );
        }
    }

    /// A forked child: the patches it still holds (its own bytes checked:
    /// the traced process may have placed others after the fork, where the
    /// child has something else), the crash handler and semaphores it
    /// inherited, then what the session mapped, as in the traced process.
    pub(super) fn restore_fork(&mut self, pid: i32, crash: Option<&crate::crash::Hook>, semaphores: &[u64]) {
        let mut s = match Stopped::attach(pid) {
            Ok(s) => s,
            // Gone, or on its way out (its memory with it).
            Err(PtraceError::NoProcess(_)) => return,
            Err(_) if crate::os::proc::ending(pid) => return,
            Err(e) => {
                crate::eprintln_escaped!("warning: cannot stop {}, to remove the probes: {e}", self.fork_name(pid));
                return;
            }
        };
        s.use_stub(self.undo.stub.as_ref());
        let held = still_patched(&s, &self.undo.patches);
        let what = self.fork_name(pid);
        self.clean(s, &held, crash, semaphores, &what);
    }

    /// How messages name process `pid`: "pid N (forked from M)", or only
    /// "pid N" when it is the session's process itself.
    fn fork_name(&self, pid: i32) -> String {
        match self.target.pid {
            p if p == pid => format!("pid {pid}"),
            p => format!("pid {pid} (forked from {p})"),
        }
    }

    /// The first process's part of the end in a stopped process of it (or
    /// one it forked): [`Armed::clean_with`] its mappings.
    pub(super) fn clean(
        &mut self,
        s: Stopped,
        patches: &[Patch],
        crash: Option<&crate::crash::Hook>,
        semaphores: &[u64],
        what: &str,
    ) {
        let mapped = self.first_mapped();
        self.clean_with(s, patches, crash, semaphores, &mapped, what);
    }

    /// Take the session out of a stopped process of it: the crash handler,
    /// the semaphores, the `patches` (threads inside them run out first),
    /// then what the session mapped (`mapped`, the region, the thread
    /// slots); detach. `what` names the process in warnings.
    pub(super) fn clean_with(
        &mut self,
        mut s: Stopped,
        patches: &[Patch],
        crash: Option<&crate::crash::Hook>,
        semaphores: &[u64],
        mapped: &Mapped,
        what: &str,
    ) {
        let relocs = self.hooker.relocs.borrow().clone();
        put_back(&mut s, patches, &relocs, crash, semaphores, what);
        // A process on its way out (the session ended it) loses the
        // mappings with the rest of its memory.
        if let Err(why) =
            self.unmap_injected(&mut s, mapped)
                .or_else(|e| if crate::os::proc::ending(s.pid()) { Ok(()) } else { Err(e) })
        {
            let w = format!("the session's memory stays mapped in {what}: {why}");
            self.warn(w);
        }
        if let Err(e) = s.detach() {
            crate::eprintln_escaped!("warning: {e}");
        }
    }

    /// The traced process's part of [`Armed::restore`].
    pub(super) fn restore_main(&mut self) {
        if !self.alive()
            || (self.undo.patches.is_empty() && self.undo.crash.is_none() && self.undo.semaphores.is_empty())
        {
            return;
        }
        // After an exec the old image (and our hooks) are gone: writing the
        // saved bytes would corrupt the new program. Our region's mapping
        // tells which image this is.
        let ours = crate::os::proc::maps_file(self.target.pid, "/memfd:telco-stap", 0);
        if !ours {
            // (The patches stay for the processes it forked before.)
            self.undo.crash = None;
            self.undo.semaphores.clear();
            return;
        }
        // Put the original bytes back, with every thread stopped.
        let s = match self.target.stopped.take() {
            Some(s) => Ok(s),
            None => Stopped::attach(self.target.pid).map(|mut s| {
                s.use_stub(self.undo.stub.as_ref());
                s
            }),
        };
        match s {
            Ok(mut s) => {
                // (A session that ended before its begin probes finished.)
                if let Some(fds) = self.target.fds.take() {
                    inject::close_in(&mut s, &[i64::from(fds.0), i64::from(fds.1)]);
                }
                let crash = self.undo.crash.take();
                let semaphores = std::mem::take(&mut self.undo.semaphores);
                let patches = self.undo.patches.clone();
                self.clean(s, &patches, crash.as_ref(), &semaphores, &format!("pid {}", self.target.pid));
            }
            // It exited meanwhile: nothing left to restore.
            Err(PtraceError::NoProcess(_)) => {}
            Err(_) if crate::os::proc::ending(self.target.pid) => {}
            Err(e) => {
                crate::eprintln_escaped!("warning: cannot stop pid {} to remove the probes: {e}", self.target.pid)
            }
        }
    }

    /// After the patches are restored (every thread stopped): unmap what the
    /// session put into the process — code regions, the shared region, the
    /// thread slots — so that a process traced again and again does not
    /// grow. Calls still running under a return probe get their own return
    /// addresses back first. Not while a thread is inside our code (a
    /// trampoline, a handler, a call waiting for the tracer) or a vfork
    /// child shares the memory: then why not.
    pub(super) fn unmap_injected(&self, s: &mut Stopped, mapped: &Mapped) -> Result<(), String> {
        use telco_abi::region::ThreadSlot;
        let a = &self.hooker.artifact;
        let page = |n: u64| n.next_multiple_of(4096);
        let mut regions: Vec<(u64, u64)> = mapped.codes.clone();
        let mut code = regions.clone();
        if let Some(p) = &mapped.stub {
            code.push((p.at, crate::arch::native::stub::SIZE));
        }
        // The block tracer's pool: threads in its code caches leave at
        // their next block (`BlockTracing::finish` sent them out).
        if let Some(b) = self.itrace.blocks.as_ref().filter(|_| mapped.first) {
            let (ranges, pool) = b.ranges();
            code.extend(ranges.iter().copied());
            regions.push(pool);
        }
        regions.push((self.region.remote, page(a.region_size)));
        regions.push((self.region.remote - telco_abi::region::MIRROR_GAP, page(a.region_size)));
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
            let slots = match s.read(threads_at, size * a.nthreads as usize) {
                Ok(slots) => slots,
                // A fork that exec'd before it was stopped: its memory
                // (ours with it) is another program's now; nothing to take.
                Err(_) if !crate::os::proc::maps_file(s.pid(), "/memfd:telco-stap", 0) => return Ok(()),
                Err(e) => return Err(e.to_string()),
            };
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
        if let Some(p) = &mapped.stub {
            s.remove_stub(p).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// After a session that ended before its `-c` command (exit(), -T,
    /// Ctrl-C, SIGTERM): the command is ended too, as bpftrace does:
    /// SIGTERM, then SIGKILL if it is still there after a second. Its
    /// status is not the session's. Nothing to do for `-p` targets.
    pub fn end_child(&mut self) {
        if !self.target.child || self.target.exit_status.is_some() {
            return;
        }
        crate::os::process::terminate(self.target.pid, std::time::Duration::from_secs(1));
    }

    /// After the session: wait for a spawned command to finish.
    pub fn wait_child(&mut self) -> Option<i32> {
        if self.target.child && self.target.exit_status.is_none() {
            if let Ok(Some((_, status))) = crate::os::wait::wait(self.target.pid, true) {
                self.ended(status);
            }
        }
        self.target.exit_status
    }
}
