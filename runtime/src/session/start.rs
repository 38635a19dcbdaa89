//! The session as a driver sees it: [`Session::start`] (spawn or attach,
//! arm, the symbol source, `.itrace`), [`Session::run`] (the tracer-side
//! run loop with the armed target's hooks, the end, the command's exit
//! status, the crash that killed it, the `.itrace` report). `src/pass5.rs`
//! calls these and nothing else of pass 5's choreography.

use super::*;
use crate::symtab::SymbolSource;
use std::time::Instant;

/// What a session traces.
pub enum Target {
    /// Only the tracer's own probes (`begin`, `end`, `timer.*`).
    None,
    /// `-p PID`, repeated: those processes and their descendants (the
    /// first is `target()`).
    Pids(Vec<i32>),
    /// `-c CMD`, as an argument vector.
    Command(Vec<String>),
    /// Neither: every process that runs or maps one of `files` (the
    /// probed modules, absolute paths), running now or exec'ing one later
    /// (`system.rs`), at most `max_processes` at once; with none running,
    /// the first is waited for `wait` at most (`-T`).
    /// `target()` is `target` (`-x PID`), else 0.
    /// `libraries`: those of `files` that are libraries (their opens are
    /// watched; the others' execs).
    System {
        files: Vec<PathBuf>,
        libraries: Vec<PathBuf>,
        max_processes: usize,
        wait: Option<std::time::Duration>,
        target: Option<u32>,
    },
}

impl Target {
    /// Whether `-c CMD` needs a shell: it has a character the shell gives a
    /// meaning (a pipe, a redirection, a quote, a variable, a glob).
    pub fn has_shell_syntax(cmd: &str) -> bool {
        cmd.chars().any(|c| "|&;<>()$`\\\"'*?[]#~=%".contains(c))
    }

    /// `-c CMD`'s argument vector: words, or `/bin/sh -c 'exec CMD'` when
    /// it has shell syntax.
    pub fn command(cmd: &str) -> Target {
        Target::Command(if Target::has_shell_syntax(cmd) {
            vec!["/bin/sh".into(), "-c".into(), format!("exec {cmd}")]
        } else {
            cmd.split_whitespace().map(str::to_string).collect()
        })
    }
}

/// How a session starts.
pub struct Options {
    pub target: Target,
    /// Where the symbols of modules the target loads later come from.
    pub symbols: Box<dyn SymbolSource>,
    /// `--itrc FILE`, `-D MAXITRACE`, `--itrace-step`.
    pub itrc: Option<(PathBuf, u64, bool)>,
    /// `-w`.
    pub quiet: bool,
    /// `-v`: how long arming took; `-vv`: the calls timed inline.
    pub verbose: u8,
    /// The probed modules that are libraries: under `-p`/`-c`, the loads
    /// of those the first process did not map at the start, by the
    /// session's other processes, are watched (`Armed::watch_loads`).
    pub libraries: Vec<PathBuf>,
    /// `--flight-recorder`: Some(`--flight-at-end`).
    pub flight: Option<bool>,
}

/// A session started: its target armed (or none).
pub struct Session<'a> {
    artifact: &'a Artifact,
    /// The target's pid, or the tracer's own.
    pid: u32,
    armed: Option<(Region, Armed)>,
    /// ^C or SIGTERM came while the target held the attach up: the target
    /// was let go, and the session runs its own probes only and fails.
    interrupted: bool,
    itrc: Option<(PathBuf, u64, bool)>,
    quiet: bool,
    verbose: u8,
}

/// How a session ended.
pub struct Ended {
    pub outcome: Result<Outcome, RunError>,
    /// The command's exit status (`-c`), as a shell gives it.
    pub exit_status: Option<i32>,
    /// The session failed before the run (^C while attaching).
    pub interrupted: bool,
}

impl Ended {
    /// The process's exit code: 1 on errors, else the command's status.
    pub fn code(&self) -> u8 {
        match &self.outcome {
            Ok(o) if self.interrupted || o.errors > 0 || o.too_many_skipped || o.corrupted.is_some() => 1,
            Ok(_) => self.exit_status.map_or(0, |c| c.clamp(0, 255) as u8),
            Err(_) => 1,
        }
    }
}

impl<'a> Session<'a> {
    /// Spawn or attach to the target and arm it; say the warnings of
    /// arming (unless quiet).
    pub fn start(artifact: &'a Artifact, opts: Options) -> Result<Session<'a>, TargetError> {
        let t0 = Instant::now();
        let mut session = Session {
            artifact,
            pid: std::process::id(),
            armed: None,
            interrupted: false,
            itrc: opts.itrc,
            quiet: opts.quiet,
            verbose: opts.verbose,
        };
        let mut found = None;
        let (stopped, child) = match &opts.target {
            Target::None => return Ok(session),
            Target::System { files, libraries, max_processes, wait, .. } => {
                match system::start(files, libraries, *max_processes, *wait, opts.verbose > 0, opts.quiet)? {
                    Some((first, f)) => {
                        found = Some(f);
                        (first, false)
                    }
                    None => {
                        if !opts.quiet {
                            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
                            crate::eprintln_escaped!(
                                "WARNING: no process ran or mapped {} while the session ran, so its probes never fired",
                                names.join(", ")
                            );
                        }
                        return Ok(session);
                    }
                }
            }
            Target::Pids(pids) => match pids.first() {
                Some(&first) => (Stopped::attach(first)?, false),
                None => return Ok(session),
            },
            Target::Command(argv) => {
                // Its daemons stay in the tracer's process tree.
                if let Err(e) = crate::os::process::become_subreaper() {
                    crate::eprintln_escaped!("WARNING: daemons the command starts will not be followed: {e}");
                }
                (spawn(argv)?, true)
            }
        };
        session.pid = stopped.pid() as u32;
        let symbols: std::rc::Rc<dyn SymbolSource> = opts.symbols.into();
        let (region, mut armed) = match arm(stopped, artifact, child, symbols.clone()) {
            Ok(armed) => armed,
            // ^C or SIGTERM while the target held the attach up: it is let
            // go as it was (`os::ptrace`), and the session ends as on any
            // ^C: its own probes (begin, end) run and its output files are
            // written.
            Err(e) if crate::os::sys::stop_requested() => {
                eprintln!("ERROR: {e}");
                if child {
                    crate::os::process::terminate(session.pid as i32, std::time::Duration::from_secs(1));
                }
                session.interrupted = true;
                return Ok(session);
            }
            Err(e) => return Err(e),
        };
        armed.symbols_from(symbols);
        if matches!(opts.target, Target::Pids(_) | Target::Command(_)) {
            armed.watch_loads(&opts.libraries);
        }
        if let Some(f) = found {
            armed.system_wide(f);
            // SystemTap's: -x PID, else none.
            let target = match &opts.target {
                Target::System { target, .. } => u64::from(target.unwrap_or(0)),
                _ => 0,
            };
            region.set_header_u64(core::mem::offset_of!(telco_abi::region::Header, target), target);
        }
        if let Target::Pids(pids) = &opts.target {
            let mut others: Vec<i32> = Vec::new();
            for &p in pids.iter().skip(1) {
                if p != pids[0] && !others.contains(&p) {
                    others.push(p);
                }
            }
            armed.cover_at_start(others);
        }
        if let (true, Some((path, max, step))) = (armed.has_itrace(), &session.itrc) {
            armed
                .itrace_to(path, *max, *step)
                .map_err(|e| TargetError::Unsupported(format!("cannot trace pid {}: {e}", session.pid)))?;
        }
        armed.report.quiet = opts.quiet;
        armed.flights = flights::Watch::new(opts.flight.is_some(), opts.flight == Some(true));
        armed.report.verbose = opts.verbose > 0;
        for w in armed.report.warnings.iter().filter(|_| !opts.quiet) {
            crate::text::eprint_lines(&format!("WARNING: {w}"));
        }
        if opts.verbose > 0 {
            crate::eprintln_escaped!("Pass 5: probes armed in {:.3} ms.", t0.elapsed().as_secs_f64() * 1e3);
            for (name, why) in armed.trapped() {
                crate::eprintln_escaped!("Pass 5: {name}: placed with a trap ({why})");
            }
        }
        if opts.verbose > 1 {
            for f in armed.timed_inline() {
                crate::eprintln_escaped!("Pass 5: {f}: calls timed by its trampolines (no handler call)");
            }
        }
        session.armed = Some((region, armed));
        Ok(session)
    }

    /// The target's pid (the tracer's own without one): what trace files
    /// are named for.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Run until the end (`exit()`, `-T`, a signal, the command's end),
    /// take the probes out, and say what the end found: the `.itrace`
    /// report, the signal that killed the command.
    pub fn run(self, cfg: Config) -> Result<Ended, RunError> {
        let Some((region, mut armed)) = self.armed else {
            let outcome = Local::new(self.artifact)?.run(cfg);
            return Ok(Ended { outcome, exit_status: None, interrupted: self.interrupted });
        };
        let outcome = Local::with_region(self.artifact, region)?.run_with(cfg, &mut armed);
        armed.end_child();
        if let Some((calls, steps, time, missed, warnings)) = armed.itrace_report() {
            for w in warnings.iter().filter(|_| !self.quiet) {
                crate::eprintln_escaped!("WARNING: {w}");
            }
            if missed > 0 {
                let max = self.itrc.as_ref().map_or(0, |i| i.1);
                crate::eprintln_escaped!(
                    "WARNING: {missed} call(s) of .itrace functions were not traced (after -D MAXITRACE={max}, or \
                     waiting too long)"
                );
            }
            if self.verbose > 0 {
                let rate = steps as f64 / time.as_secs_f64().max(1e-9);
                if armed.itrace_stepped() {
                    crate::eprintln_escaped!(
                        "itrace: {calls} call(s), {steps} instructions single-stepped in {:.3} s ({rate:.0} per \
                         second).",
                        time.as_secs_f64()
                    );
                } else {
                    crate::eprintln_escaped!("itrace: {calls} call(s), {steps} instructions recorded in the target.");
                }
            }
        }
        if outcome.is_ok() {
            if let Some(sig) = armed.target.killed_by {
                say_killed(&armed, self.pid, sig);
            }
        }
        Ok(Ended { outcome, exit_status: armed.target.exit_status, interrupted: false })
    }
}

/// The command died, not the session: never silent, and where.
fn say_killed(armed: &Armed, pid: u32, sig: i32) {
    match armed.crash_of(pid as i32).filter(|c| c.signal == sig) {
        Some(c) => crate::eprintln_escaped!("WARNING: the command (pid {pid}) was killed by {}", c.describe()),
        None => crate::eprintln_escaped!(
            "WARNING: the command (pid {pid}) was killed by {}{}",
            crate::os::process::signal_name(sig),
            if crate::crash::SIGNALS.contains(&sig) {
                " (no place recorded: the program handles that signal itself, or no handler could run, as in a \
                 stack overflow)"
            } else {
                ""
            }
        ),
    }
}
