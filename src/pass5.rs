//! Pass 5 as the command line drives it: the session's limits and
//! outputs, the target spawned or attached, the run, and the exit status.

use crate::cli::Cli;
use crate::outputs::{flight, max_itrace, max_size, profile_files, report_traces, traces};
use crate::profile;
use crate::query::ElfSymbols;
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;
use telco_runtime::eprintln_escaped;
use telco_runtime::session::{Options, Session, Target};

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
            "TRAP_PROBES" => l.trap_probes = *v != 0,
            _ => {}
        }
    }
    l.maxaction_interruptible = interruptible.unwrap_or(l.maxaction.saturating_mul(10));
    // The ring is a power of two. With a trace file, 16 MB: 25 ms of calls
    // at full speed while the consumer is away, and small enough to stay
    // in the last-level cache, so the target's copies into it do not wait
    // for memory (64 MB cost about 3 ns more per call).
    let mb = cli.buffer_mb.unwrap_or(if cli.calls_out().is_some() { 16 } else { 1 });
    l.ring_size = (mb << 20).next_power_of_two();
    l
}

pub fn run_pass5(cli: &Cli, artifact: &telco_abi::artifact::Artifact) -> Result<ExitCode> {
    use telco_abi::artifact::{Attach, Runs};
    let needs_target = artifact.probes.iter().any(|p| p.attach.runs_in().needs_target());
    let by_path = needs_target && cli.pids.is_empty() && cli.command.is_none();
    let files = if by_path { system_wide_files(artifact)? } else { Vec::new() };
    // Libraries: their opens are watched (the loader's, dlopen's), not
    // their execs.
    let libraries: Vec<std::path::PathBuf> =
        if by_path { files.iter().filter(|f| is_library(f)).cloned().collect() } else { probed_libraries(artifact) };
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
        flight: None,
        suppress_warnings: cli.no_warnings,
        profile: None,
        off_cpu: cli.off_cpu,
    };
    let target = match (cli.pids.is_empty(), &cli.command) {
        (false, _) => Target::Pids(cli.pids.iter().map(|&p| p as i32).collect()),
        (true, Some(cmd)) => Target::command(cmd),
        (true, None) if by_path => Target::System {
            files,
            libraries: libraries.clone(),
            max_processes: max_processes(cli),
            target: cli.target_pid,
            wait: cli.timeout.map(std::time::Duration::from_secs_f64),
        },
        (true, None) => {
            if cli.flight_recorder.is_some() {
                bail!(
                    "--flight-recorder keeps the calls of traced processes: name them (-c CMD, -p PID, or \
                     process(\"PATH\") probes)"
                );
            }
            Target::None
        }
    };
    if cli.flight_recorder.is_some() {
        // SIGUSR2 asks for a dump: from before the attach, so that one
        // sent meanwhile does not end the tracer.
        telco_runtime::os::sys::catch_dump_signal().context("cannot catch SIGUSR2")?;
    }
    let t0 = Instant::now();
    let (usr0, sys0, _) = telco_runtime::os::proc::own_usage();
    let opts = Options {
        target,
        symbols: Box::new(ElfSymbols),
        itrc: cli.itrc.clone().map(|path| (path, max_itrace(cli), cli.itrace_step)),
        quiet: cli.no_warnings,
        verbose: cli.verbose,
        libraries,
        flight: cli.flight_recorder.as_ref().map(|_| cli.flight_at_end),
    };
    let session = Session::start(artifact, opts)?;
    // timer.profile's samples go to the profile files, and to the
    // --perfetto trace once its writer has finished it.
    let mut perfetto_samples = None;
    let mut pushed = None;
    let sampling = artifact.probes.iter().any(|p| p.attach.runs_in() == Runs::TracerSampling);
    if cli.otlp.is_some() && !sampling && !artifact.probes.iter().any(|p| p.span) && !cli.no_warnings {
        eprintln!("WARNING: --otlp: the script has no function probe and no timer.profile: nothing to send");
    }
    if sampling {
        let files = profile_files(cli);
        perfetto_samples = files.perfetto.clone();
        if cli.pyroscope.is_some() || cli.otlp.is_some() {
            // Sent as the session runs (and to the files at the end).
            let push = profile::push::Push::start(push_settings(cli, session.pid())?, files)
                .context("cannot start the profile exporter")?;
            pushed = Some(push.report.clone());
            cfg.profile = Some(Box::new(push));
        } else if files.any() || files.perfetto.is_some() {
            cfg.profile = Some(Box::new(profile::Profile::new(files)));
        }
    }
    cfg.traces = traces(cli, artifact, session.pid())?;
    cfg.flight = flight(cli, artifact, session.pid())?;
    let ended = session.run(cfg)?;
    let interrupted = ended.interrupted;
    let code = ended.code();
    let outcome = ended.outcome?;
    if cli.verbose > 0 {
        // SystemTap's words, and the peak of our own memory.
        let (usr, sys, peak) = telco_runtime::os::proc::own_usage();
        let (usr, sys) = (usr.saturating_sub(usr0), sys.saturating_sub(sys0));
        let real = t0.elapsed().as_millis();
        eprintln_escaped!("Pass 5: run completed in {usr}usr/{sys}sys/{real}real ms, using at most {peak}res kb.");
    }
    // (The last file of a rotated trace.)
    let last = outcome
        .traces
        .as_ref()
        .and_then(|t| t.files.iter().find(|f| f.flag == telco_runtime::perfetto::FLAG).and_then(|f| f.path.clone()));
    if let (Some(path), Some(samples), false) =
        (last.as_ref().or(cli.perfetto.as_ref()), &perfetto_samples, interrupted)
    {
        let left_out = profile::append_to_perfetto(path, samples, max_size(cli))
            .with_context(|| format!("cannot add the samples to `{}`", path.display()))?;
        if let Some(n) = left_out {
            eprintln_escaped!(
                "WARNING: --perfetto: the timer.profile samples ({}) were left out of {}: they would take it past \
                 --max-size {}",
                telco_runtime::feed::size_text(n as u64),
                path.display(),
                telco_runtime::feed::limit_text(max_size(cli))
            );
        }
    }
    report_traces(cli, &outcome);
    for line in pushed.iter().flat_map(|r| r.lock().map(|l| l.clone()).unwrap_or_default()) {
        eprintln_escaped!("{line}");
    }
    // 1 on errors; else the command's exit status passes through.
    Ok(ExitCode::from(code))
}

/// `-D MAXPROCESSES=N`: how many processes a session arms at once, at most
/// (probes by path on a library every process maps; `-p 1`).
pub fn max_processes(cli: &Cli) -> usize {
    cli.defines.iter().rev().find(|(n, _)| n == "MAXPROCESSES").map_or(256, |(_, v)| (*v).clamp(1, 1 << 20) as usize)
}

/// `-p`/`-c`: the probed modules that are libraries (absolute paths), whose
/// later loads by the session's processes are watched.
fn probed_libraries(artifact: &telco_abi::artifact::Artifact) -> Vec<std::path::PathBuf> {
    use telco_abi::artifact::Attach;
    let mut out: Vec<std::path::PathBuf> = Vec::new();
    for p in &artifact.probes {
        let (Attach::Function { module, .. } | Attach::Statement { module, .. }) = &p.attach else { continue };
        if module.is_absolute() && !out.contains(module) && is_library(module) {
            out.push(module.clone());
        }
    }
    out
}

/// Whether the ELF file at `path` is a shared library, not a program
/// (`image::is_library`).
fn is_library(path: &std::path::Path) -> bool {
    std::fs::read(path).is_ok_and(|b| telco_compiler::image::is_library(&b))
}

/// Probes by path with neither `-p` nor `-c`: the files the probes name
/// (a program, or a library; `process("P").library("L")`'s program), each
/// an absolute path.
fn system_wide_files(artifact: &telco_abi::artifact::Artifact) -> Result<Vec<std::path::PathBuf>> {
    use telco_abi::artifact::Attach;
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for p in &artifact.probes {
        let file = match &p.attach {
            Attach::Function { module, only_exe, .. } => only_exe.as_ref().unwrap_or(module),
            Attach::Statement { module, .. } => module,
            Attach::Lifecycle { module: Some(m), .. } => m,
            Attach::Profile { .. } | Attach::Blocked => {
                bail!("`{}` samples the processes telco-stap traces: name them with -p PID or -c CMD", p.name)
            }
            Attach::Lifecycle { module: None, .. } => bail!(
                "`{}` names no program: name one (process(\"/path/to/program\")), or the processes with -p PID or \
                 -c CMD",
                p.name
            ),
            _ => continue,
        };
        if !file.is_absolute() {
            bail!("`{}`: probes by path need an absolute path (or -p PID, -c CMD): {}", p.name, file.display());
        }
        if !files.contains(file) {
            files.push(file.clone());
        }
    }
    Ok(files)
}

/// Where `--pyroscope` and `--otlp` send the profiles.
fn push_settings(cli: &Cli, pid: u32) -> Result<profile::push::Settings> {
    use telco_runtime::export::{Endpoint, DEFAULT_QUEUE, DEFAULT_TIMEOUT};
    let endpoint = |u: &Option<String>| -> Result<Option<(Endpoint, String)>> {
        match u {
            Some(u) => Ok(Some((Endpoint::parse(u).map_err(anyhow::Error::msg)?, u.clone()))),
            None => Ok(None),
        }
    };
    let service = cli.service.clone().unwrap_or_else(|| match &cli.command {
        Some(c) => c.split_whitespace().next().map_or("telco-stap", |p| p.rsplit('/').next().unwrap_or(p)).to_string(),
        None => telco_runtime::os::proc::comm(pid as i32),
    });
    Ok(profile::push::Settings {
        pyroscope: endpoint(&cli.pyroscope)?,
        otlp: endpoint(&cli.otlp)?,
        every: std::time::Duration::from_secs_f64(cli.push_interval.unwrap_or(10.0)),
        service: if service.is_empty() { "telco-stap".into() } else { service },
        labels: cli.labels.clone(),
        queue: cli.export_queue.unwrap_or(DEFAULT_QUEUE),
        timeout: cli.export_timeout.map_or(DEFAULT_TIMEOUT, std::time::Duration::from_nanos),
        verbose: cli.verbose > 0,
    })
}
