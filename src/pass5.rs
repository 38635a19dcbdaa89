//! Pass 5 as the command line drives it: the session's limits and
//! outputs, the target spawned or attached, the run, and the exit status.

use crate::cli::Cli;
use crate::outputs::{max_itrace, max_size, profile_files, report_traces, traces};
use crate::profile;
use crate::query::ElfSymbols;
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;
use telco_runtime::eprintln_escaped;

/// `-D NAME=VALUE` over SystemTap's defaults.
pub fn limits(cli: &Cli) -> telco_abi::artifact::Limits {
    let mut l = telco_abi::artifact::Limits::default();
    let mut interruptible = None;
    for (name, v) in &cli.defines {
        match name.as_str() {
            "MAXSTRINGLEN" => l.maxstringlen = (*v).clamp(2, 1 << 20) as u32,
            "MAXMAPENTRIES" => l.maxmapentries = (*v).clamp(1, 1 << 28) as u32,
            "MAXACTION" => l.maxaction = (*v).min(i64::MAX as u64 / 16) as i64,
            "MAXACTION_INTERRUPTIBLE" => interruptible = Some((*v).min(i64::MAX as u64 / 16) as i64),
            "MAXNESTING" => l.maxnesting = (*v).min(u64::from(u32::MAX)) as u32,
            "MAXERRORS" => l.maxerrors = *v,
            "MAXSKIPPED" => l.maxskipped = *v,
            "MAXRETURNDEPTH" => l.maxreturndepth = (*v).clamp(16, 10_000_000) as u32,
            _ => {}
        }
    }
    l.maxaction_interruptible = interruptible.unwrap_or(l.maxaction.saturating_mul(10));
    // The ring is a power of two. With a trace file, 16 MB: 25 ms of calls
    // at full speed while the consumer is away, and small enough to stay
    // in the last-level cache, so the target's copies into it do not wait
    // for memory (64 MB cost about 3 ns more per call).
    let mb = cli.buffer_mb.unwrap_or(if cli.chrome.is_some() || cli.perfetto.is_some() { 16 } else { 1 });
    l.ring_size = (mb << 20).next_power_of_two();
    l
}

pub fn run_pass5(cli: &Cli, artifact: &telco_abi::artifact::Artifact) -> Result<ExitCode> {
    use telco_abi::artifact::Attach;
    let needs_target = artifact.probes.iter().any(|p| {
        !matches!(p.attach, Attach::Begin { .. } | Attach::End { .. } | Attach::Error { .. } | Attach::Timer { .. })
    });
    if needs_target && cli.pid.is_none() && cli.command.is_none() {
        bail!("this script probes a process: name it with -p PID or -c CMD");
    }
    if cli.itrc.is_none() && artifact.probes.iter().any(|p| matches!(p.attach, Attach::Function { itrace: true, .. })) {
        bail!("this script has .itrace probes: name the instruction trace file with --itrc FILE");
    }
    let output: Box<dyn Write + Send> = match &cli.output {
        Some(p) => {
            Box::new(telco_runtime::outfile::create(p).with_context(|| format!("cannot create `{}`", p.display()))?)
        }
        None => Box::new(std::io::stdout()),
    };
    let mut cfg = telco_runtime::session::Config {
        timeout: cli.timeout.map(std::time::Duration::from_secs_f64),
        output,
        messages: Box::new(std::io::stderr()),
        traces: None,
        suppress_warnings: cli.no_warnings,
        profile: None,
    };
    // timer.profile's samples go to the profile files, and to the
    // --perfetto trace once its writer has finished it.
    let mut perfetto_samples = None;
    if artifact.probes.iter().any(|p| matches!(p.attach, Attach::Profile { .. })) {
        let mut files = profile_files(cli);
        if cli.perfetto.is_some() {
            let slot = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            files.perfetto = Some(slot.clone());
            perfetto_samples = Some(slot);
        }
        if files.any() || files.perfetto.is_some() {
            cfg.profile = Some(Box::new(profile::Profile::new(files)));
        }
    }
    let t0 = Instant::now();
    if cli.pid.is_none() && cli.command.is_none() {
        cfg.traces = traces(cli, artifact, std::process::id())?;
        let outcome = telco_runtime::session::Local::new(artifact)?.run(cfg)?;
        report_traces(cli, &outcome);
        if cli.verbose > 0 {
            eprintln_escaped!("Pass 5: run completed in {:.3} ms.", t0.elapsed().as_secs_f64() * 1e3);
        }
        return Ok(if outcome.errors > 0 || outcome.too_many_skipped || outcome.corrupted.is_some() {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    let (stopped, child) = match (cli.pid, &cli.command) {
        (Some(pid), _) => (telco_runtime::os::ptrace::Stopped::attach(pid as i32)?, false),
        (None, Some(cmd)) => {
            let argv: Vec<String> = if cmd.chars().any(|c| "|&;<>()$`\\\"'*?[]#~=%".contains(c)) {
                vec!["/bin/sh".into(), "-c".into(), format!("exec {cmd}")]
            } else {
                cmd.split_whitespace().map(str::to_string).collect()
            };
            (telco_runtime::session::spawn(&argv)?, true)
        }
        (None, None) => bail!("internal error: a target without -p or -c"),
    };
    let pid = stopped.pid() as u32;
    let (region, mut armed) = match telco_runtime::session::arm(stopped, artifact, child) {
        Ok(armed) => armed,
        // ^C or SIGTERM while the target held the attach up: it is let go
        // as it was (`os::ptrace`), and the session ends as on any ^C: its
        // own probes (begin, end) run and its output files are written.
        Err(e) if telco_runtime::os::sys::stop_requested() => {
            eprintln!("ERROR: {e}");
            if child {
                telco_runtime::os::process::terminate(pid as i32, std::time::Duration::from_secs(1));
            }
            cfg.traces = traces(cli, artifact, pid)?;
            let outcome = telco_runtime::session::Local::new(artifact)?.run(cfg)?;
            report_traces(cli, &outcome);
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    armed.symbols_from(Box::new(ElfSymbols));
    cfg.traces = traces(cli, artifact, pid)?;
    if let (true, Some(path)) = (armed.has_itrace(), &cli.itrc) {
        armed.itrace_to(path, max_itrace(cli), cli.itrace_step).with_context(|| format!("cannot trace pid {pid}"))?;
    }
    armed.quiet = cli.no_warnings;
    for w in armed.warnings.iter().filter(|_| !cli.no_warnings) {
        eprintln_escaped!("WARNING: {w}");
    }
    if cli.verbose > 0 {
        eprintln_escaped!("Pass 5: probes armed in {:.3} ms.", t0.elapsed().as_secs_f64() * 1e3);
    }
    if cli.verbose > 1 {
        for f in armed.timed_inline() {
            eprintln_escaped!("Pass 5: {f}: calls timed by its trampolines (no handler call)");
        }
    }
    let outcome = telco_runtime::session::Local::with_region(artifact, region)?.run_with(cfg, &mut armed);
    armed.end_child();
    if let Some((calls, steps, time, missed, warnings)) = armed.itrace_report() {
        for w in warnings.iter().filter(|_| !cli.no_warnings) {
            eprintln_escaped!("WARNING: {w}");
        }
        if missed > 0 {
            eprintln_escaped!(
                "WARNING: {missed} call(s) of .itrace functions were not traced (after -D MAXITRACE={}, \
                 or waiting too long)",
                max_itrace(cli)
            );
        }
        if cli.verbose > 0 {
            let rate = steps as f64 / time.as_secs_f64().max(1e-9);
            if armed.itrace_stepped() {
                eprintln_escaped!(
                    "itrace: {calls} call(s), {steps} instructions single-stepped in {:.3} s ({rate:.0} per second).",
                    time.as_secs_f64()
                );
            } else {
                eprintln_escaped!("itrace: {calls} call(s), {steps} instructions recorded in the target.");
            }
        }
    }
    let outcome = outcome?;
    if let Some(sig) = armed.killed_by {
        // Never silent: the command died, not the session; and where.
        match armed.crash_of(pid as i32).filter(|c| c.signal == sig) {
            Some(c) => eprintln_escaped!("WARNING: the command (pid {pid}) was killed by {}", c.describe()),
            None => eprintln_escaped!(
                "WARNING: the command (pid {pid}) was killed by {}{}",
                telco_runtime::os::process::signal_name(sig),
                if telco_runtime::crash::SIGNALS.contains(&sig) {
                    " (no place recorded: the program handles that signal itself, or no handler could run, as \
                     in a stack overflow)"
                } else {
                    ""
                }
            ),
        }
    }
    if let (Some(path), Some(samples)) = (&cli.perfetto, &perfetto_samples) {
        let left_out = profile::append_to_perfetto(path, samples, max_size(cli))
            .with_context(|| format!("cannot add the samples to `{}`", path.display()))?;
        if let Some(n) = left_out {
            eprintln_escaped!(
                "WARNING: --perfetto: the timer.profile samples ({}) were left out of {}: they would take it past \
                 --max-size {}",
                telco_runtime::chrome::size_text(n as u64),
                path.display(),
                telco_runtime::chrome::limit_text(max_size(cli))
            );
        }
    }
    report_traces(cli, &outcome);
    if outcome.errors > 0 || outcome.too_many_skipped || outcome.corrupted.is_some() {
        return Ok(ExitCode::from(1));
    }
    // The command's exit status passes through.
    Ok(match armed.exit_status {
        Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
        None => ExitCode::SUCCESS,
    })
}
