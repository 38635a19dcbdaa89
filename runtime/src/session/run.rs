//! Running a compiled artifact in the tracer: the shared region, the blob
//! mapped executable, `begin`/`timer`/`end`/`error` probes called on the
//! tracer's own thread with the same code that function probes run in
//! targets, and the consumer thread that turns events into output.
//!
//! Session states follow SystemTap's: begin probes run in order; then timers
//! fire until `exit()`, `-T`, a signal, too many errors (MAXERRORS) or
//! skipped hits (MAXSKIPPED); then `end` probes run — or, when the session
//! ends because of errors, `error` probes instead; then the globals the
//! script wrote and never read are displayed, and the [`summary`]: errors,
//! skipped hits by reason (reentrancy, no thread slot, call depth, counted
//! in the header by compiler/rt/rt.c), calls left by `longjmp` or an
//! exception, dropped events naming `-s`. A session with a target drives it
//! through [`Hooks`] (`session::Armed`): started after the begin probes,
//! polled every 10 ms, stopped at the end.
//!

use super::*;
use crate::os::sandbox::Sandbox;
use crate::os::sys::{self, ExecMemory, Signals};
use crate::render;
use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use telco_abi::artifact::{Artifact, Attach};
use telco_abi::region::{self as abi, Header};

pub struct Config {
    /// `-T SECONDS`.
    pub timeout: Option<Duration>,
    /// Where printf output goes (stdout or `-o FILE`).
    pub output: Box<dyn Write + Send>,
    /// Where ERROR and WARNING lines go.
    pub messages: Box<dyn Write + Send>,
    /// `--chrome FILE`, `--perfetto FILE`: calls, printf lines,
    /// trace_instant/trace_counter.
    pub traces: Option<crate::feed::Feed>,
    /// `--flight-recorder FILE`: the history kept, dumps written when asked.
    pub flight: Option<crate::flight::Flight>,
    /// `-w`: no WARNING lines, except those that say the output is
    /// incomplete (errors, skipped probes, dropped events, return probes
    /// that did not run).
    pub suppress_warnings: bool,
    /// `--folded`, `--flamegraph`, `--speedscope`, `--pprof`: where the
    /// `timer.profile` samples go (besides the script's handlers).
    pub profile: Option<Box<dyn crate::profile::Sink>>,
    /// `--off-cpu`: the profile has each thread's waits too (weighted by
    /// their length), besides its CPU samples.
    pub off_cpu: bool,
}

/// How the session went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub errors: u64,
    pub skipped: u64,
    /// `skipped` by reason: reentrancy, no thread slot, call depth.
    pub skipped_busy: u64,
    pub skipped_noslot: u64,
    pub skipped_deep: u64,
    pub skipped_go: u64,
    /// The session ended because more than MAXSKIPPED probes were skipped.
    pub too_many_skipped: bool,
    pub dropped: u64,
    /// Calls left by longjmp, an exception or a Go panic (`Header::unreturned`).
    pub unreturned: u64,
    /// Execs the tracer did not answer in time (`Header::unfollowed_execs`).
    pub unfollowed_execs: u64,
    /// Probes placed with a trap where no jump fits (distinct probe
    /// points, in every process), and their hits (`Header::trap_hits`).
    pub trap_probes: u64,
    pub trap_hits: u64,
    /// What `--chrome` and `--perfetto` wrote.
    pub traces: Option<crate::feed::Finished>,
    /// What each `--flight-recorder` dump holds (or why it failed).
    pub flight: Vec<String>,
    /// `flight_dump()` calls (`Header::flight_asks`).
    pub flight_asks: u64,
    /// The target corrupted the event ring (said when found; the session
    /// fails).
    pub corrupted: Option<String>,
    /// `timer.profile`: what the sampler counted.
    pub profile: Option<crate::profile::Summary>,
}

/// How a session with a target process drives it.
pub trait Hooks {
    /// After the begin probes: let the target run.
    fn started(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Whether the target is gone (it exited).
    fn gone(&mut self) -> bool {
        false
    }
    /// Whether `gone` must be polled.
    fn watching(&self) -> bool {
        false
    }
    /// Called about every 10 ms while the session runs (new libraries).
    fn poll(&mut self) {}
    /// Before the end probes: take the probes out of the target.
    fn stopping(&mut self) {}
    /// The code the session wrote into the target, for unwinding samples
    /// taken in it.
    fn own_code(&self) -> Option<crate::owncode::Shared> {
        None
    }
    /// Where the target's symbols and ELF layout come from (the driver's).
    fn symbols(&self) -> Option<std::rc::Rc<dyn crate::symtab::SymbolSource>> {
        None
    }
    /// Descriptors that become readable when `poll` has work at once (a
    /// thread waits in the loader for the tracer, an exec is held),
    /// besides the 10 ms polls.
    fn wake_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        Vec::new()
    }
    /// Work is due within a millisecond (a process about to stop at its
    /// exec): `poll` is called every millisecond meanwhile.
    /// How many probe points were placed with a trap (`Outcome::trap_probes`).
    fn trap_probes(&self) -> u64 {
        0
    }

    fn busy(&self) -> bool {
        false
    }
    /// The regions of other trust domains made since the last call
    /// (`domains.rs`): their rings are drained and their counters summed
    /// with the session's.
    fn new_regions(&mut self) -> Vec<std::sync::Arc<Region>> {
        Vec::new()
    }
    /// After the end probes: `flight_dump()`s they made.
    fn flight_last(&mut self) {}
    /// After `stopping`, before the end probes: fold what the other trust
    /// domains' processes wrote into the session's region; (warnings,
    /// errors) to say.
    fn fold_domains(&mut self) -> (Vec<String>, Vec<String>) {
        (Vec::new(), Vec::new())
    }
}

/// A session without a target.
pub struct NoTarget;

impl Hooks for NoTarget {}

/// What the consumer thread hands back: the output, the message stream,
/// and what `--chrome` and `--perfetto` wrote.
pub(super) type Drained =
    (Box<dyn Write + Send>, Box<dyn Write + Send>, Option<crate::feed::Finished>, Option<String>, Vec<String>);

pub(super) type FormatFn = extern "C" fn(*mut u8, i64, *const u8, *const i64, i64) -> i64;

/// A writer into shared memory of the process, for [`Local::drain_text`].
#[derive(Clone, Default)]
pub(super) struct SharedBuf(pub(super) std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(b);
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The tracer-side part of a session.
pub struct Local<'a> {
    pub(super) artifact: &'a Artifact,
    pub(super) region: Region,
    pub(super) code: ExecMemory,
}

impl<'a> Local<'a> {
    pub fn new(artifact: &'a Artifact) -> Result<Local<'a>, RunError> {
        let pid = std::process::id() as u64;
        let region = Region::new(artifact, pid, "telco-stap")?;
        Local::with_region(artifact, region)
    }

    /// Run begin/end/timer probes against a region that serves a target
    /// (created by `inject::region`).
    pub fn with_region(artifact: &'a Artifact, region: Region) -> Result<Local<'a>, RunError> {
        let code = ExecMemory::new(&artifact.code).map_err(RunError::Code)?;
        Ok(Local { artifact, region, code })
    }
}

impl<'a> Local<'a> {
    /// The region the probes work on.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Call probe `probe`'s handler on the calling thread, as a trampoline
    /// in a target thread would (for tests and benchmarks: any number of
    /// threads may call at once).
    pub fn call_probe(&self, probe: usize) {
        let mut ctx = vec![0u64; (self.artifact.ctx_size as usize).div_ceil(8)];
        call(self.artifact, &self.region, &self.code, &mut ctx, probe, std::process::id() as u64, sys::gettid());
    }

    /// The handler of probe `probe` and the region base it takes, for
    /// benchmarks that call it in a loop with their own context (as a
    /// trampoline would).
    pub fn handler(&self, probe: usize) -> (extern "C" fn(*mut u8, *mut u8), *mut u8) {
        // SAFETY: as in `call`: a handler offset from the artifact.
        let f: Handler = unsafe { std::mem::transmute(self.code.addr(self.artifact.probes[probe].handler)) };
        (f, self.region.base())
    }

    /// Format every pending event into text (stdout and stderr lines
    /// together), without a consumer thread.
    pub fn drain_text(&self) -> Result<String, std::io::Error> {
        drain_text(self.artifact, &self.region, &self.code)
    }

    /// Run the session to its end.
    pub fn run(self, cfg: Config) -> Result<Outcome, RunError> {
        self.run_with(cfg, &mut NoTarget)
    }

    /// Run the session to its end, with a target's life cycle in `hooks`.
    pub fn run_with(self, cfg: Config, hooks: &mut dyn Hooks) -> Result<Outcome, RunError> {
        let signals = Signals::install().map_err(RunError::Signals)?;
        let deadline = cfg.timeout.map(|t| Instant::now() + t);
        let stop = AtomicBool::new(false);
        // SAFETY: artifact.format_fn is rt_format's offset in the blob,
        // with this signature.
        let format: extern "C" fn(*mut u8, i64, *const u8, *const i64, i64) -> i64 =
            unsafe { std::mem::transmute(self.code.addr(self.artifact.format_fn)) };
        let artifact = self.artifact;
        let by_order = |pred: &dyn Fn(&Attach) -> Option<i64>| -> Vec<usize> {
            let mut v: Vec<(i64, usize)> =
                artifact.probes.iter().enumerate().filter_map(|(i, p)| pred(&p.attach).map(|o| (o, i))).collect();
            v.sort_by_key(|x| x.0);
            v.into_iter().map(|x| x.1).collect()
        };
        let begins = by_order(&|a| if let Attach::Begin { order } = a { Some(*order) } else { None });
        let ends = by_order(&|a| if let Attach::End { order } = a { Some(*order) } else { None });
        let errors = by_order(&|a| if let Attach::Error { order } = a { Some(*order) } else { None });
        let timers: Vec<(usize, Duration, u64)> = artifact
            .probes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.attach {
                Attach::Timer { period_ns, randomize_ns } => {
                    Some((i, Duration::from_nanos(period_ns.max(1)), randomize_ns.min(period_ns.saturating_sub(1))))
                }
                _ => None,
            })
            .collect();
        // `.randomize(M)`: each period gets a uniform offset in [-M, M].
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.subsec_nanos());
        let mut seed = (std::process::id() as u64) << 32 | u64::from(nanos) | 1;
        let mut jitter = move |period: Duration, spread: u64| -> Duration {
            if spread == 0 {
                return period;
            }
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let off = (seed % (2 * spread + 1)) as i128 - spread as i128;
            Duration::from_nanos((period.as_nanos() as i128 + off).max(1) as u64)
        };
        // `timer.profile` probes: (probe, period); the sampler runs at the
        // shortest period and each probe runs once its own period of CPU
        // time has been sampled.
        let profiles: Vec<(usize, u64)> = artifact
            .probes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.attach {
                Attach::Profile { period_ns } => Some((i, period_ns.max(1))),
                _ => None,
            })
            .collect();
        // An empty body (`probe timer.profile {}`, the one the profile
        // files add) samples without a round trip to the sandbox.
        let runs_body: Vec<bool> = profiles.iter().map(|&(i, _)| !artifact.probes[i].empty).collect();
        // `process.blocked` probes: run on each wait as it ends.
        let blocked: Vec<usize> = artifact
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p.attach, Attach::Blocked) && !p.empty)
            .map(|(i, _)| i)
            .collect();
        let waits = cfg.off_cpu || artifact.probes.iter().any(|p| matches!(p.attach, Attach::Blocked));
        let maxerrors = artifact.limits.maxerrors;
        let errors_at = core::mem::offset_of!(Header, errors);
        let skipped_at = core::mem::offset_of!(Header, skipped);
        let dropped_at = core::mem::offset_of!(Header, dropped);
        let maxskipped = artifact.limits.maxskipped;
        let Config { output, messages, traces, suppress_warnings, profile: mut sink, flight, off_cpu, .. } = cfg;
        // SIGUSR2 holds the history at once (`flight`).
        let _hold = flight.as_ref().map(|_| crate::flight::Holding::new(&self.region));
        let region = &self.region;
        let code = &self.code;
        // Every tracer-side handler runs in the sandbox (os::sandbox),
        // forked before the consumer thread starts.
        let (pid, tid) = (std::process::id() as u64, sys::gettid());
        let words = (artifact.ctx_size as usize).div_ceil(8).max(abi::CTX_SIZE / 8);
        // It may read and write the memory of the process the region
        // serves, as the tracer knows it (none other, whatever the region
        // says). A sandbox that cannot start ends the tracer's probes like
        // one that failed: the target, armed already, is still let go.
        let sandbox =
            Sandbox::start_with_input(words, SAMPLE_WORDS, self.region.written.pid as libc::pid_t, |probe, page| {
                let (ctx, sample) = page.split_at_mut(words);
                call_with(artifact, region, code, ctx, probe as usize, pid, tid, Some(sample))
            })
            .map_err(|e| format!("cannot start the sandbox for the tracer's probes: {e}"));
        // The regions of the session's other trust domains.
        let domains: std::sync::Mutex<Vec<std::sync::Arc<Region>>> = std::sync::Mutex::new(Vec::new());
        let others = || domains.lock().map(|d| d.clone()).unwrap_or_default();
        // A header counter summed over the session's region and its
        // domains'; whether any asked to exit.
        let total = |field: usize| others().iter().fold(region.counter(field), |t, d| t.wrapping_add(d.counter(field)));
        let exit_requested = || region.exit_requested() || others().iter().any(|d| d.exit_requested());
        // The consumer's passes over the rings, completed.
        let passes = AtomicU64::new(0);
        let draining = AtomicBool::new(false);
        let ring_broken = AtomicBool::new(false);
        let consumed = AtomicU64::new(0);
        let result = std::thread::scope(|scope| -> Result<(Outcome, Box<dyn Write + Send>), RunError> {
            let consumer = scope.spawn(|| -> Result<Drained, std::io::Error> {
                let mut c = Consumer {
                    artifact,
                    region,
                    format,
                    out: std::io::BufWriter::new(output),
                    messages,
                    warned: HashSet::new(),
                    buf: Vec::new(),
                    traces,
                    flight,
                    suppress_warnings,
                    tail: region
                        .u64_at(artifact.ring_off as usize + core::mem::offset_of!(abi::RingHeader, tail))
                        .load(Ordering::Relaxed),
                    corrupted: None,
                    rings: Vec::new(),
                };
                loop {
                    // New domains' rings.
                    for d in others().into_iter().skip(c.rings.len()) {
                        c.rings.push(super::consumer::Ring::new(d, artifact));
                    }
                    draining.store(true, Ordering::Relaxed);
                    let any = c.drain()?;
                    draining.store(false, Ordering::Relaxed);
                    // --flight-recorder's dumps asked for since the last pass.
                    let summary = || crate::feed::Summary {
                        errors: total(errors_at),
                        dropped: total(dropped_at),
                        skipped: total(skipped_at),
                        writer_dropped: 0,
                    };
                    if c.flight.is_some() {
                        c.flight_dumps(summary());
                    }
                    passes.fetch_add(1, Ordering::Release);
                    if c.corrupted.is_some() {
                        ring_broken.store(true, Ordering::Relaxed);
                    }
                    if any {
                        consumed.fetch_add(1, Ordering::Relaxed);
                    } else {
                        if stop.load(Ordering::Acquire) {
                            c.drain()?;
                            if c.flight.is_some() {
                                c.flight_dumps(summary());
                            }
                            c.take_stages()?;
                            // No handler runs any more: the counters are final.
                            let written = match c.traces.take() {
                                Some(f) => Some(f.finish(summary())?),
                                None => None,
                            };
                            let corrupted = c.corrupted.clone().or_else(|| c.domain_damage().map(str::to_string));
                            let unkept = total(core::mem::offset_of!(Header, flight_unkept));
                            let flown = c.flight.take().map(|f| f.report(unkept));
                            let out = c.out.into_inner().map_err(|e| e.into_error())?;
                            return Ok((out, c.messages, written, corrupted, flown.unwrap_or_default()));
                        }
                        // With a trace file every call is an event: come
                        // back sooner, before the ring fills.
                        let nap = if c.traces.is_some() { 1 } else { 20 };
                        std::thread::park_timeout(Duration::from_millis(nap));
                    }
                }
            });
            let wake = || consumer.thread().unpark();
            // The regions of trust domains made since the last look, to the
            // consumer.
            let hand_over = |hooks: &mut dyn Hooks| {
                let fresh = hooks.new_regions();
                if !fresh.is_empty() {
                    if let Ok(mut d) = domains.lock() {
                        d.extend(fresh);
                    }
                    wake();
                }
            };
            let (sandbox, lost) = match sandbox {
                Ok(s) => (Some(s), None),
                Err(e) => (None, Some(e)),
            };
            let mut runner = Runner {
                sandbox,
                region,
                draining: &draining,
                consumed: &consumed,
                ring_broken: &ring_broken,
                tick: 0,
                stall: stall_limit(artifact),
                stopped: lost.is_some(),
                lost,
            };
            let mut failed = false;
            let too_many_errors = || total(errors_at) > maxerrors;
            // More than MAXSKIPPED hits skipped: the output is no longer
            // worth much, and the session ends (as SystemTap's does).
            let too_many_skipped = || total(skipped_at) > maxskipped;
            let mut skipped_out = false;
            for &p in &begins {
                if !runner.run(artifact, p) {
                    break;
                }
                wake();
                if too_many_errors() {
                    failed = true;
                    break;
                }
                if region.exit_requested() {
                    break;
                }
            }
            // Sampling starts before the target runs on (a command still
            // at its entry point is sampled from its first instruction).
            let mut profiler = None;
            let mut due = vec![0u64; profiles.len()];
            if !failed && !region.exit_requested() && runner.ok() && (!profiles.is_empty() || waits) {
                let period = profiles.iter().map(|p| p.1).min();
                let target = self.region.written.pid as i32;
                match crate::profile::Profiler::start(target, period, waits) {
                    Ok(mut p) => {
                        if artifact.shadow_depth > 0 {
                            p.set_shadow_stacks(crate::profile::ShadowStacks {
                                // Set at injection (the target's word, but
                                // only read back from its own memory).
                                threads_at: self.region.counter(core::mem::offset_of!(Header, threads_at)),
                                nthreads: self.region.written.nthreads,
                                frame_size: artifact.frame_size,
                                depth: artifact.shadow_depth,
                            });
                        }
                        if let Some(own) = hooks.own_code() {
                            p.set_own_code(own);
                        }
                        if let Some(symbols) = hooks.symbols() {
                            p.set_symbols(symbols);
                        }
                        if let Some(why) = &p.fallback {
                            // Said even with -w: the profile is coarser.
                            crate::eprintln_escaped!("WARNING: {why}");
                        }
                        profiler = Some(p);
                    }
                    Err(e) => {
                        // One ERROR at the end, and the session fails (exit 1).
                        let what = match waits {
                            true => "off-CPU time (--off-cpu, process.blocked): cannot sample the context switches of",
                            false => "timer.profile: cannot sample",
                        };
                        runner.lost = Some(format!(
                            "{what} process {target}: perf_event_open: {e} (the kernel must allow perf events{}: as \
                             root, or with CAP_PERFMON; in a container, a seccomp policy that permits \
                             perf_event_open)",
                            if waits {
                                " with kernel samples (perf_event_paranoid 1 or less) and 8 MiB of locked ring a CPU \
                                 (CAP_IPC_LOCK)"
                            } else {
                                ""
                            }
                        ));
                        runner.stopped = true;
                        failed = true;
                    }
                }
            }
            let mut sampled = |runner: &mut Runner<'_>, profiler: &mut crate::profile::Profiler| {
                profiler.poll(&mut |st| {
                    if let Some(k) = sink.as_mut().filter(|_| st.off_cpu.is_none() || off_cpu) {
                        k.sample(st);
                    }
                    if st.off_cpu.is_some() {
                        for &probe in &blocked {
                            if !runner.run_sample(artifact, probe, words, st) {
                                return;
                            }
                        }
                        return;
                    }
                    for (k, (probe, period)) in profiles.iter().enumerate() {
                        due[k] += st.period;
                        if due[k] >= *period && runs_body[k] {
                            due[k] = (due[k] - period).min(*period);
                            if !runner.run_sample(artifact, *probe, words, st) {
                                return;
                            }
                        }
                    }
                });
                if let Some(k) = sink.as_mut() {
                    k.tick();
                }
            };
            if !failed && !region.exit_requested() && runner.ok() {
                if let Err(e) = hooks.started() {
                    crate::eprintln_escaped!("ERROR: {e}");
                    failed = true;
                }
            }
            if !failed && !region.exit_requested() && runner.ok() {
                // Timers, until exit(), -T, a signal, too many errors or the
                // target's exit.
                let start = Instant::now();
                let mut next: Vec<Instant> = timers.iter().map(|(_, p, r)| start + jitter(*p, *r)).collect();
                loop {
                    if exit_requested() || deadline.is_some_and(|d| Instant::now() >= d) {
                        break;
                    }
                    // Errors reported by handlers in the target end the
                    // session too (MAXERRORS), as do skipped hits
                    // (MAXSKIPPED).
                    if too_many_errors() {
                        failed = true;
                        break;
                    }
                    if too_many_skipped() {
                        skipped_out = true;
                        failed = true;
                        break;
                    }
                    if hooks.watching() {
                        if hooks.gone() {
                            break;
                        }
                        hooks.poll();
                        hand_over(&mut *hooks);
                    }
                    let now = Instant::now();
                    let due = next.iter().copied().min();
                    let mut wake_at = match (due, deadline) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    if hooks.watching() || profiler.is_some() {
                        // Notice the target's exit (and drain the samples)
                        // within 10 ms.
                        let soon = now + Duration::from_millis(if hooks.busy() { 1 } else { 10 });
                        wake_at = Some(wake_at.map_or(soon, |w| w.min(soon)));
                    }
                    if let Some(p) = profiler.as_mut() {
                        sampled(&mut runner, p);
                        wake();
                    }
                    if let Some(t) = wake_at.filter(|t| *t > now) {
                        // (A perf ring half full wakes the loop too: waits
                        // come in bursts faster than every 10 ms.)
                        let mut fds = hooks.wake_fds();
                        let perf: Vec<i32> = profiler.as_ref().map(|p| p.fds()).unwrap_or_default();
                        // SAFETY: the profiler's descriptors, open while it
                        // lives (past this wait).
                        fds.extend(perf.iter().map(|&fd| unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }));
                        if signals.wait_or(Some(t - now), &fds) {
                            break;
                        }
                        continue;
                    }
                    if wake_at.is_none() {
                        signals.wait(None);
                        break;
                    }
                    if signals.pending() {
                        break;
                    }
                    for (k, (probe, period, spread)) in timers.iter().enumerate() {
                        if next[k] <= Instant::now() {
                            if !runner.run(artifact, *probe) {
                                break;
                            }
                            // Catch up without a burst after a stall.
                            next[k] += jitter(*period, *spread);
                            if next[k] < Instant::now() {
                                next[k] = Instant::now() + *period;
                            }
                        }
                    }
                    wake();
                    if !runner.ok() {
                        break;
                    }
                    if too_many_errors() {
                        failed = true;
                        break;
                    }
                }
            }
            // The samples taken until now (a target that exited leaves
            // its last ones in the rings).
            let profiled = match profiler.as_mut() {
                Some(p) => {
                    p.stop();
                    sampled(&mut runner, p);
                    wake();
                    Some(p.summary)
                }
                None => None,
            };
            if let (Some(k), Some(summary)) = (sink.as_mut(), profiled.as_ref()) {
                if let Err(e) = k.finish(summary) {
                    crate::eprintln_escaped!("ERROR: writing the profile failed: {e}");
                    failed = true;
                }
            }
            hooks.stopping();
            // Domains made by the last poll (the loop may have ended right
            // after it): their rings are drained and counted too, and what
            // every domain's processes printed comes out before the end
            // probes' output: a whole pass of the consumer that began
            // after now (the second to complete from now), 2 s at most. A
            // pass drains the session's ring before the domains': one
            // that began earlier could leave a domain's line for after
            // the end probes' (bypath.rs saw an 'armed' line after the
            // summary).
            hand_over(&mut *hooks);
            if !others().is_empty() {
                let from = passes.load(Ordering::Acquire);
                let since = Instant::now();
                while passes.load(Ordering::Acquire) < from + 2 && since.elapsed() < Duration::from_secs(2) {
                    wake();
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            // What the other trust domains' processes wrote, into the
            // session's region, before the end probes read it.
            let (said, damaged) = hooks.fold_domains();
            for w in said {
                crate::eprintln_escaped!("WARNING: {w}");
            }
            let mut domain_damage = None;
            for e in damaged {
                crate::eprintln_escaped!("ERROR: {e}");
                domain_damage = Some(e);
            }
            // Errors that arrived while stopping (a target that exited right
            // after its last failing hit) count too.
            if !failed && too_many_errors() {
                failed = true;
            }
            if !failed && too_many_skipped() {
                skipped_out = true;
                failed = true;
            }
            // The target's hooks are out (or it is gone); the session's own
            // end and error probes still run.
            region.set_enabled(true);
            for &p in if failed { &errors } else { &ends } {
                if !runner.run(artifact, p) {
                    break;
                }
                wake();
                if !failed && too_many_errors() {
                    // An error in an end probe: the rest of the end probes
                    // are skipped and the error probes run (the failing
                    // handler disabled the region: on again for them).
                    region.set_enabled(true);
                    for &e in &errors {
                        if !runner.run(artifact, e) {
                            break;
                        }
                    }
                    break;
                }
            }
            region.set_enabled(false);
            hooks.flight_last();
            stop.store(true, Ordering::Release);
            consumer.thread().unpark();
            let (mut output, mut messages, traces, corrupted, flight) = match consumer.join() {
                Ok(r) => r.map_err(RunError::Output)?,
                Err(_) => return Err(RunError::Output(std::io::Error::other("the output thread panicked"))),
            };
            let corrupted = corrupted.or(domain_damage);
            let mut corrupted = corrupted;
            // One ERROR: the consumer's, if it found the damage first.
            if let Some(lost) = runner.lost.take() {
                if corrupted.is_none() {
                    let _ = writeln!(messages, "ERROR: {}", crate::text::escape(lost.as_bytes()));
                    corrupted = Some(lost);
                }
            }
            // What the display reads must be sound first.
            if corrupted.is_none() {
                if let Some(d) = region.damage(artifact) {
                    let _ = writeln!(messages, "ERROR: {}", crate::text::escape(d.as_bytes()));
                    corrupted = Some(d);
                }
            }
            if !failed && corrupted.is_none() && !artifact.display.is_empty() {
                // SAFETY: no handler runs any more (enabled is 0 and this
                // thread ran the last one); the region is ours to read.
                let bytes = unsafe { std::slice::from_raw_parts(region.base(), artifact.region_size as usize) };
                match render::display_globals(bytes, artifact) {
                    Ok(text) => output.write_all(text.as_bytes()).map_err(RunError::Output)?,
                    Err(what) => {
                        let _ = writeln!(messages, "ERROR: {}", crate::text::escape(what.as_bytes()));
                        corrupted = Some(what);
                    }
                }
            }
            output.flush().map_err(RunError::Output)?;
            Ok((
                Outcome {
                    errors: total(errors_at),
                    skipped: total(skipped_at),
                    skipped_busy: total(core::mem::offset_of!(Header, skipped_busy)),
                    skipped_noslot: total(core::mem::offset_of!(Header, skipped_noslot)),
                    skipped_deep: total(core::mem::offset_of!(Header, skipped_deep)),
                    skipped_go: total(core::mem::offset_of!(Header, skipped_go)),
                    too_many_skipped: skipped_out,
                    dropped: total(dropped_at),
                    unreturned: total(core::mem::offset_of!(Header, unreturned)),
                    unfollowed_execs: total(core::mem::offset_of!(Header, unfollowed_execs)),
                    trap_probes: hooks.trap_probes(),
                    trap_hits: total(core::mem::offset_of!(Header, trap_hits)),
                    traces,
                    flight,
                    flight_asks: total(core::mem::offset_of!(Header, flight_asks)),
                    corrupted,
                    profile: profiled,
                },
                messages,
            ))
        });
        let (outcome, mut messages) = result?;
        drop(self);
        for line in summary(&outcome, artifact, suppress_warnings) {
            let _ = writeln!(messages, "{}", crate::text::escape(line.as_bytes()));
        }
        let _ = messages.flush();
        Ok(outcome)
    }
}
