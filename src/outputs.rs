//! The trace and profile files the command line asks for: created before
//! pass 5 runs, and what each holds said when it ends.

use crate::cli::Cli;
use crate::profile;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use telco_runtime::chrome::{self, Chrome};
use telco_runtime::eprintln_escaped;
use telco_runtime::feed;
use telco_runtime::otlp;
use telco_runtime::perfetto::{self, Perfetto};

/// The trace formats: each one's flag, the file the command line asks
/// for, and how it starts. A new format is a line here (`feed`'s
/// documentation says the rest).
fn trace_formats(cli: &Cli) -> [(&'static str, &Option<PathBuf>, feed::Open); 2] {
    [(chrome::FLAG, &cli.chrome, feed::open::<Chrome>), (perfetto::FLAG, &cli.perfetto, feed::open::<Perfetto>)]
}

/// The profile formats: each one's flag, the file the command line asks
/// for, and its writer. A new format is a line here (`profile`'s
/// documentation says the rest).
fn profile_formats(cli: &Cli) -> [(&'static str, &Option<PathBuf>, Box<dyn profile::ProfileWriter>); 5] {
    use profile::{flamegraph, folded, pprof, speedscope};
    [
        (folded::FLAG, &cli.folded, Box::new(folded::Folded)),
        (flamegraph::FLAG, &cli.flamegraph, Box::new(flamegraph::Flamegraph)),
        (speedscope::FLAG, &cli.speedscope, Box::new(speedscope::Speedscope)),
        (pprof::FLAG, &cli.pprof, Box::new(pprof::Pprof)),
        (profile::perfetto::FLAG, &cli.perfetto, Box::new(profile::perfetto::Samples)),
    ]
}

/// The profile files asked for (`--perfetto`'s samples included).
pub fn profile_files(cli: &Cli) -> profile::Files {
    let mut files = profile::Files::default();
    files.off_cpu = cli.off_cpu;
    for (flag, path, writer) in profile_formats(cli) {
        files.add(flag, path.as_ref(), writer);
    }
    files
}

/// Output files must be creatable before any tracing starts.
pub fn check_outputs(cli: &Cli) -> Result<()> {
    if let Some(rotate) = cli.rotate {
        // (The default --max-size too: 2G.)
        let max = max_size(cli);
        if rotate > max {
            let default = if cli.max_size.is_none() { " (the default)" } else { "" };
            bail!(
                "--rotate {} is larger than --max-size {}{default}: each file would stop at --max-size",
                feed::limit_text(rotate),
                feed::limit_text(max)
            );
        }
    }
    let traces = trace_formats(cli).map(|(flag, path, _)| (flag, path));
    // Samples written into a trace: its file is checked with it.
    let profiles =
        profile_formats(cli).into_iter().filter(|(_, _, w)| !w.into_trace()).map(|(flag, path, _)| (flag, path));
    let flags = [("-o", &cli.output)]
        .into_iter()
        .chain(traces)
        .chain([("--itrc", &cli.itrc), (telco_runtime::flight::FLAG, &cli.flight_recorder)])
        .chain(profiles);
    for (flag, path) in flags {
        if let Some(p) = path {
            let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !parent.is_dir() {
                bail!("{flag} {}: directory `{}` does not exist", p.display(), parent.display());
            }
            if p.is_dir() {
                bail!("{flag} {}: is a directory", p.display());
            }
            // Another user's symlink in /tmp is refused now, before any
            // tracing (and again when the file is opened).
            telco_runtime::outfile::check(p).with_context(|| format!("{flag} {}", p.display()))?;
        }
    }
    Ok(())
}

/// How many `.itrace` calls to record (`-D MAXITRACE=N`).
pub fn max_itrace(cli: &Cli) -> u64 {
    cli.defines.iter().rev().find(|(n, _)| n == "MAXITRACE").map_or(16, |(_, v)| (*v).max(1))
}

/// The trace files asked for (`--chrome FILE`, `--perfetto FILE`), started
/// for process `pid`: calls are named by their probe's function.
pub fn traces(
    cli: &Cli,
    artifact: &telco_abi::artifact::Artifact,
    pid: u32,
) -> Result<Option<telco_runtime::feed::Feed>> {
    let asked: Vec<(&PathBuf, feed::Open)> =
        trace_formats(cli).into_iter().filter_map(|(_, path, open)| Some((path.as_ref()?, open))).collect();
    // --otlp sends calls when there are some (a profile alone goes as
    // OpenTelemetry profiles: `profile::push`).
    let otlp = cli.otlp.as_ref().filter(|_| artifact.probes.iter().any(|p| p.span));
    if asked.is_empty() && otlp.is_none() {
        return Ok(None);
    }
    let comm = telco_runtime::os::proc::comm(pid as i32);
    let names: Vec<String> = artifact.probes.iter().map(|p| p.function.clone()).collect();
    let mut writers: Vec<Box<dyn feed::TraceWriter>> = Vec::with_capacity(asked.len() + 1);
    let base_ns = telco_runtime::os::sys::realtime_ns();
    for &(path, open) in &asked {
        let cfg = feed::Config {
            path,
            pid,
            process: comm.trim_end(),
            names: &names,
            max_size: max_size(cli),
            quiet: cli.no_warnings,
            status: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            base_ns,
        };
        let w = match cli.rotate {
            Some(size) => telco_runtime::rotate::Rotating::start(open, &cfg, size)
                .map(|r| Box::new(r) as Box<dyn feed::TraceWriter>),
            None => open(&cfg),
        };
        writers.push(w.with_context(|| format!("cannot create `{}`", path.display()))?);
    }
    if let Some(url) = otlp {
        let settings = otlp::Settings {
            endpoint: telco_runtime::export::Endpoint::parse(url).map_err(anyhow::Error::msg)?,
            url: url.clone(),
            service: cli.service.clone(),
            labels: cli.labels.clone(),
            queue: cli.export_queue.unwrap_or(telco_runtime::export::DEFAULT_QUEUE),
            timeout: cli.export_timeout.map_or(telco_runtime::export::DEFAULT_TIMEOUT, std::time::Duration::from_nanos),
            verbose: cli.verbose > 0,
        };
        writers.push(Box::new(
            otlp::Otlp::start(settings, pid, comm.trim_end(), &names).context("cannot start the --otlp exporter")?,
        ));
    }
    // The spool beside the first file (or in the temporary directory).
    let temp = std::env::temp_dir();
    let (dir, beside) = match asked.first() {
        Some(&(first, _)) => (first.parent().unwrap_or(Path::new(".")), format!("beside `{}`", first.display())),
        None => (temp.as_path(), format!("in `{}`", temp.display())),
    };
    let feed = telco_runtime::feed::Feed::start(writers, names.len(), dir)
        .with_context(|| format!("cannot create a spool file {beside}"))?;
    Ok(Some(feed))
}

/// `--flight-recorder FILE`: the history's settings.
pub fn flight(
    cli: &Cli,
    artifact: &telco_abi::artifact::Artifact,
    pid: u32,
) -> Result<Option<telco_runtime::flight::Flight>> {
    let Some(path) = &cli.flight_recorder else { return Ok(None) };
    let comm = telco_runtime::os::proc::comm(pid as i32);
    Ok(Some(telco_runtime::flight::Flight::new(telco_runtime::flight::Settings {
        path: path.clone(),
        size: cli.flight_size.unwrap_or(telco_runtime::flight::DEFAULT_SIZE),
        at_end: cli.flight_at_end,
        pid,
        process: comm.trim_end().to_string(),
        names: artifact.probes.iter().map(|p| p.function.clone()).collect(),
        quiet: cli.no_warnings,
    })))
}

/// `--max-size`, or the default of the trace files.
pub fn max_size(cli: &Cli) -> u64 {
    cli.max_size.unwrap_or(feed::DEFAULT_MAX_SIZE)
}

pub fn report_traces(cli: &Cli, outcome: &telco_runtime::session::Outcome) {
    // Always said, as perf record does: how much the trace holds and
    // whether anything is missing from it.
    if let Some(p) = &outcome.profile {
        // (A rotated --perfetto trace has them in its last file.)
        let last = outcome.traces.as_ref().and_then(|t| {
            t.files.iter().find(|f| f.flag == perfetto::FLAG && cli.rotate.is_some()).and_then(|f| f.path.clone())
        });
        let written: Vec<String> = profile_files(cli)
            .names()
            .into_iter()
            .map(|n| match (&last, n.starts_with(perfetto::FLAG)) {
                (Some(path), true) => format!("{} {}", perfetto::FLAG, path.display()),
                _ => n,
            })
            .collect();
        if !written.is_empty() {
            // (`--off-cpu`: the waits are samples too, counted apart.)
            let waits = if cli.off_cpu { format!(", {} of them waits off the CPU", p.waits) } else { String::new() };
            eprintln_escaped!(
                "timer.profile: {} samples ({} lost, {} stacks not unwound to their root, {} unknown frames{waits}), \
                 written to {}",
                p.samples,
                p.lost,
                p.truncated,
                p.unknown_frames,
                written.join(", ")
            );
        }
    }
    for line in &outcome.flight {
        eprintln_escaped!("{line}");
    }
    let Some(t) = &outcome.traces else { return };
    let dropped = match (outcome.dropped, t.dropped) {
        (0, 0) => "none dropped".to_string(),
        (n, 0) => format!("{n} dropped (see the warning)"),
        (n, k) => format!(
            "{} dropped ({k} printf lines, instants or counters the trace writer had no room for{})",
            n + k,
            if n > 0 { "; see the warning for the rest" } else { "" }
        ),
    };
    let how = feed::Reporting { dropped: &dropped, default_max_size: cli.max_size.is_none(), quiet: cli.no_warnings };
    for line in t.files.iter().flat_map(|f| f.lines(&how)) {
        eprintln_escaped!("{line}");
    }
}
