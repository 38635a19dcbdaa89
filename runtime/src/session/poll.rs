//! The session's side of the run loop (`Hooks`): started, polled
//! every few milliseconds, stopping, and whether the target still lives.

use super::*;

impl Hooks for Armed {
    fn trap_probes(&self) -> u64 {
        self.trapped().len() as u64
    }

    fn started(&mut self) -> Result<(), String> {
        if let Some(mut s) = self.target.stopped.take() {
            // The target starts (or is attached to) after the session's
            // begin probes: process.begin in it, thread.begin in each of
            // its other threads.
            if let Some(code) = self.undo._code.first() {
                let exe = self.target.exes.get(&self.target.pid).cloned().unwrap_or_default();
                let main = s.main_thread();
                let others: Vec<i32> = s.threads().filter(|&t| t != main).collect();
                let a = &self.hooker.artifact;
                let mut said = lifecycle(&mut s, a, code, self.region.remote, main, LifeEvent::ProcessBegin, &exe);
                for t in others {
                    said.extend(lifecycle(&mut s, a, code, self.region.remote, t, LifeEvent::ThreadBegin, &exe));
                }
                for w in said {
                    self.warn(w);
                }
            }
            // `-p`: the other processes, while this one holds the
            // region's descriptors for them; then it holds none.
            if let Some(others) = self.target.service.take() {
                let t0 = std::time::Instant::now();
                let before = self.follow.as_ref().map_or(0, |f| f.children.len());
                self.cover(&others);
                if self.report.verbose {
                    let n = self.follow.as_ref().map_or(0, |f| f.children.len()) - before;
                    let ms = t0.elapsed().as_secs_f64() * 1e3;
                    crate::eprintln_escaped!("Pass 5: {n} more process(es) armed in {ms:.3} ms.");
                }
            }
            if let Some(fds) = self.target.fds.take() {
                inject::close_in(&mut s, &[i64::from(fds.0), i64::from(fds.1)]);
            }
            s.detach().map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn symbols(&self) -> Option<std::rc::Rc<dyn crate::symtab::SymbolSource>> {
        Some(self.symbols.clone())
    }

    fn own_code(&self) -> Option<crate::owncode::Shared> {
        Some(self.hooker.own.clone())
    }

    fn wake_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        let held = self.target.system.as_ref().map(|w| w.watch.fd());
        let loads = self.libs.loads.as_ref().map(|l| l.watch.fd());
        self.libs.watch.as_ref().map(|w| w.fd()).into_iter().chain(held).chain(loads).collect()
    }

    fn busy(&self) -> bool {
        self.follow.as_ref().is_some_and(|f| !f.waiting.is_empty())
    }

    fn new_regions(&mut self) -> Vec<std::sync::Arc<crate::region::Region>> {
        let d = &mut self.domain;
        let fresh = d.others[d.handed..].iter().map(|o| o.region.clone()).collect();
        d.handed = d.others.len();
        fresh
    }

    fn fold_domains(&mut self) -> (Vec<String>, Vec<String>) {
        self.fold_domains()
    }

    fn watching(&self) -> bool {
        true
    }

    fn gone(&mut self) -> bool {
        !self.alive()
    }

    fn poll(&mut self) {
        if let Some(it) = &mut self.itrace.stepper {
            it.poll(&self.hooker.itraced.borrow());
        }
        if let Some(b) = &self.itrace.blocks {
            // MAXITRACE calls traced: the gates stop asking (they read the
            // slots' count from the trusted mirror, which only we write).
            if b.closed.load(std::sync::atomic::Ordering::Acquire) && !self.region.mirror.is_null() {
                let at = core::mem::offset_of!(telco_abi::region::Header, itrace_slots);
                // SAFETY: a u32 field of the live mirror's header.
                unsafe { std::sync::atomic::AtomicU32::from_ptr(self.region.mirror.add(at).cast()) }
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
        self.watch_execs();
        self.take_loads();
        self.follow_execs();
        self.prune_children();
        self.check_domains();
        self.reclaim_rows();
        self.take_crash();
        self.flight_poll();
        let probes_wait = !(self.libs.pending.is_empty() && self.libs.late.is_empty());
        if !(probes_wait || self.libs.syms.active()) || self.region.header.is_null() {
            return;
        }
        use std::sync::atomic::{AtomicU64, Ordering};
        let header = self.region.header;
        let field = move |off: usize| {
            // SAFETY: `header` is the live region's header; dl_gen/dl_ack are u64 fields.
            unsafe { AtomicU64::from_ptr(header.add(off) as *mut u64) }
        };
        let gen_at = core::mem::offset_of!(telco_abi::region::Header, dl_gen);
        let ack_at = core::mem::offset_of!(telco_abi::region::Header, dl_ack);
        if let Some(w) = &self.libs.watch {
            w.drain();
        }
        // Acquire: pairs with rt_dlnotify's AcqRel increment.
        let gen = field(gen_at).load(Ordering::Acquire);
        if gen <= field(ack_at).load(Ordering::Relaxed) {
            return;
        }
        if probes_wait {
            if let Err(e) = self.place_pending() {
                self.warn(format!("cannot probe a library loaded later: {e}"));
            }
        }
        self.publish_late_symbols();
        // Release: the hooks are written before the waiting thread goes on.
        field(ack_at).store(gen, Ordering::Release);
    }

    fn flight_last(&mut self) {
        self.flight_poll();
    }

    fn stopping(&mut self) {
        // flight_dump()s since the last poll (a command that ended right
        // after one), then the calls in flight at the end, while the
        // probes are in.
        self.flight_poll();
        self.flight_end();
        if let Some(it) = &mut self.itrace.stepper {
            // Requests made until now are served; then the gates give up.
            it.poll(&self.hooker.itraced.borrow());
        }
        if let Some(b) = &mut self.itrace.blocks {
            // Requests made until now are served; threads still tracing
            // leave the pool at their next block.
            b.finish();
        }
        if let Some(p) = self.region.enabled.take() {
            // SAFETY: see unsafe_enabled_ptr; Release pairs with the
            // handlers' Acquire load at entry.
            unsafe { std::sync::atomic::AtomicU32::from_ptr(p as *mut u32) }
                .store(0, std::sync::atomic::Ordering::Release);
        }
        for d in &self.domain.others {
            d.region.set_enabled(false);
        }
        // No exec is held from here on.
        self.say_over_limit();
        self.take_leftover_crash();
        self.unfollow();
        self.restore();
        self.say_unmapped();
        if let Some(it) = &mut self.itrace.stepper {
            // After the world stopped and went on: every gate has given up.
            it.count_missed();
        }
    }
}

impl Armed {
    /// The command ended with wait status `status`: its exit status as a
    /// shell gives it (128 + the signal that killed it), and the signal.
    pub(super) fn ended(&mut self, status: Status) {
        self.target.exit_status = status.shell_status();
        self.target.killed_by = status.killed_by();
    }

    pub(super) fn alive(&mut self) -> bool {
        // System-wide: until SIGINT, -T or exit().
        if self.target.system.is_some() {
            return true;
        }
        if self.target.exit_status.is_some() {
            return self.target.child && self.daemons_alive();
        }
        if self.target.child {
            let r = crate::os::wait::wait(self.target.pid, false);
            if let Ok(Some((_, status))) = r {
                if status.ended() {
                    self.ended(status);
                    // Its daemons keep the session going.
                    return self.daemons_alive();
                }
                // A stop of the command while we follow it into an exec
                // (we trace it again then): the follower's.
                if let Some(f) = &mut self.follow {
                    if let Some(crate::os::ptrace::ExecWait::Exec) =
                        crate::os::ptrace::exec_stop(self.target.pid, status)
                    {
                        f.execed.push(self.target.pid);
                    }
                }
                return true;
            }
            return r.is_ok();
        }
        crate::os::proc::running(self.target.pid) || self.target.named.iter().any(|&p| crate::os::proc::running(p))
    }

    /// `-c`, after the command ended: whether a process of the session
    /// still runs (a daemon it started: its orphans are the tracer's,
    /// `os::process::become_subreaper`). Those that ended are reaped;
    /// new ones are looked for every 100 ms.
    pub(super) fn daemons_alive(&mut self) -> bool {
        let me = std::process::id() as i32;
        self.target.daemons.retain(|&p| {
            if crate::os::proc::running(p) {
                return true;
            }
            // Ours to reap once adopted (a zombie otherwise).
            if crate::os::proc::uid_and_parent(p as u32).is_some_and(|(_, ppid)| ppid as i32 == me) {
                let _ = crate::os::wait::wait(p, false);
            }
            false
        });
        let now = std::time::Instant::now();
        let due = self.target.daemons_checked.is_none_or(|t| now - t >= std::time::Duration::from_millis(100));
        if due || self.target.daemons.is_empty() {
            self.target.daemons_checked = Some(now);
            for p in self.session_processes() {
                if p != self.target.pid && !self.target.daemons.contains(&p) {
                    self.target.daemons.push(p);
                }
            }
        }
        !self.target.daemons.is_empty()
    }

    /// The processes of the session that run now (not zombies): the
    /// descendants of the first process and of the tracer (orphans it
    /// adopted) that map the session's region, the tracer's own
    /// processes (its probes' sandbox) aside.
    pub(super) fn session_processes(&self) -> Vec<i32> {
        let me = std::process::id() as i32;
        let own_exe = crate::os::proc::exe_path(me);
        let mut out = Vec::new();
        for p in self.descendants_of(self.target.pid).into_iter().chain(self.descendants_of(me)) {
            if out.contains(&p)
                || !self.maps_session(p)
                || !crate::os::proc::running(p)
                || crate::os::proc::exe_path(p) == own_exe
            {
                continue;
            }
            out.push(p);
        }
        out
    }
}
