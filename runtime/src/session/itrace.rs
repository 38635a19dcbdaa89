//! `.itrace` functions: the single-stepper or the block tracer's thread,
//! started once the target is armed, and their reports.

use super::*;

/// The block tracer's thread (`blocktrace.rs`) and its pool.
pub(super) struct BlockTracing {
    pub(crate) stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub(crate) thread: Option<std::thread::JoinHandle<crate::blocktrace::Server>>,
    pub(crate) traced: std::sync::Arc<std::sync::Mutex<Vec<crate::itrace::Traced>>>,
    /// The pool in the target (address, size) and its code ranges.
    pub(crate) pool: (u64, u64),
    pub(crate) code: Vec<(u64, u64)>,
    /// What it reported, and the calls that went untraced.
    pub(crate) done: Option<(crate::blocktrace::Report, u64)>,
    /// It traced MAXITRACE calls (`Server::closed`).
    pub(crate) closed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl BlockTracing {
    /// The traced functions the thread translates.
    pub(super) fn traced(&self) -> &std::sync::Mutex<Vec<crate::itrace::Traced>> {
        &self.traced
    }

    /// Its code ranges in the target, and its pool (address, size).
    pub(super) fn ranges(&self) -> (&[(u64, u64)], (u64, u64)) {
        (&self.code, self.pool)
    }

    /// What it reported: calls, instructions, time, calls missed,
    /// warnings.
    pub(super) fn take_report(&mut self) -> Option<(u64, u64, std::time::Duration, u64, Vec<String>)> {
        let (r, missed) = self.done.take()?;
        Some((r.calls, r.instructions, r.time, missed, r.warnings))
    }

    /// Stop the thread (it serves what is pending, then sends every
    /// thread still tracing out of the pool) and keep its report.
    pub(super) fn finish(&mut self) {
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

impl Armed {
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
            let shstk = crate::os::proc::shadow_stack(self.target.pid);
            if shstk {
                self.report
                    .warnings
                    .push("the target uses a hardware shadow stack (CET): .itrace calls are single-stepped".into());
            }
            shstk
        };
        if step {
            let slots = (a.itrace_off, a.itrace_slots, a.region_size);
            self.itrace.stepper =
                Some(crate::itrace::Itracer::new(self.target.pid, self.region.header, slots, path, max_calls)?);
            return Ok(());
        }
        self.block_tracer(path, max_calls)
    }

    /// `.itrace` by the block tracer (`itrace_to`).
    pub(super) fn block_tracer(&mut self, path: &std::path::Path, max_calls: u64) -> std::io::Result<()> {
        let a = &self.hooker.artifact;
        use crate::blocktrace as bt;
        let Some(s) = self.target.stopped.as_mut() else {
            return Err(std::io::Error::other("internal error: the target runs already"));
        };
        let code: Vec<(u64, u64)> = (0..bt::ARENAS as u64).map(|i| (i * bt::ARENA_SIZE, bt::CODE_SIZE)).collect();
        let (local, remote) =
            inject::itrace_pool(s, bt::POOL_SIZE, &code).map_err(|e| std::io::Error::other(e.to_string()))?;
        let traced = std::sync::Arc::new(std::sync::Mutex::new(self.hooker.itraced.borrow().clone()));
        let region = (self.region.fd, a.region_size);
        let mut server = bt::Server::new(
            self.target.pid,
            bt::Pool { local, remote },
            region,
            self.region.mirror,
            self.region.remote,
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
        self.itrace.blocks = Some(BlockTracing {
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
        self.itrace.stepper.is_some()
    }

    pub fn itrace_report(&mut self) -> Option<(u64, u64, std::time::Duration, u64, Vec<String>)> {
        if let Some(b) = &mut self.itrace.blocks {
            return b.take_report();
        }
        let it = self.itrace.stepper.as_mut()?;
        Some((it.calls, it.steps, it.stepping, it.missed, std::mem::take(&mut it.warnings)))
    }
}
