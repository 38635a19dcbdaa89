//! The trace and profile files the command line asks for: created before
//! pass 5 runs, and what each holds said when it ends.

use crate::cli::Cli;
use crate::profile;
use anyhow::{bail, Context, Result};
use std::path::Path;
use telco_runtime::eprintln_escaped;

/// The profile files asked for.
pub fn profile_files(cli: &Cli) -> profile::Files {
    profile::Files {
        folded: cli.folded.clone(),
        flamegraph: cli.flamegraph.clone(),
        speedscope: cli.speedscope.clone(),
        pprof: cli.pprof.clone(),
        perfetto: None,
    }
}

/// Output files must be creatable before any tracing starts.
pub fn check_outputs(cli: &Cli) -> Result<()> {
    for (flag, path) in [
        ("-o", &cli.output),
        ("--chrome", &cli.chrome),
        ("--perfetto", &cli.perfetto),
        ("--itrc", &cli.itrc),
        ("--folded", &cli.folded),
        ("--flamegraph", &cli.flamegraph),
        ("--speedscope", &cli.speedscope),
        ("--pprof", &cli.pprof),
    ] {
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

/// `--chrome FILE` and `--perfetto FILE`, started for process `pid`:
/// calls are named by their probe's function.
pub fn traces(
    cli: &Cli,
    artifact: &telco_abi::artifact::Artifact,
    pid: u32,
) -> Result<Option<telco_runtime::feed::Feed>> {
    if cli.chrome.is_none() && cli.perfetto.is_none() {
        return Ok(None);
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let names: Vec<String> = artifact.probes.iter().map(|p| p.function.clone()).collect();
    let mut writers = telco_runtime::feed::Writers { chrome: None, perfetto: None };
    if let Some(path) = &cli.chrome {
        let c = telco_runtime::chrome::Chrome::create(path, pid, comm.trim_end(), &names)
            .with_context(|| format!("cannot create `{}`", path.display()))?
            .max_size(max_size(cli))
            .quiet(cli.no_warnings)
            // One status line: --chrome's, which is the slower to write.
            .status(std::io::IsTerminal::is_terminal(&std::io::stderr()));
        writers.chrome = Some(c);
    }
    if let Some(path) = &cli.perfetto {
        let p = telco_runtime::perfetto::Perfetto::create(path, pid, comm.trim_end(), &names)
            .with_context(|| format!("cannot create `{}`", path.display()))?
            .max_size(max_size(cli));
        writers.perfetto = Some(p);
    }
    let first = cli.chrome.as_ref().or(cli.perfetto.as_ref()).map(|p| p.as_path()).unwrap_or(Path::new("."));
    let dir = first.parent().unwrap_or(Path::new("."));
    let feed = telco_runtime::feed::Feed::start(writers, dir)
        .with_context(|| format!("cannot create a spool file beside `{}`", first.display()))?;
    Ok(Some(feed))
}

/// `--max-size`, or the default of the trace files.
pub fn max_size(cli: &Cli) -> u64 {
    cli.max_size.unwrap_or(telco_runtime::chrome::DEFAULT_MAX_SIZE)
}

/// "FLAG trace reached --max-size SIZE: N events left out", if it did
/// (said even with -w: the file lacks events).
fn report_left_out(cli: &Cli, flag: &str, left_out: u64, max: u64) {
    if left_out > 0 {
        let default = if cli.max_size.is_none() { " (the default)" } else { "" };
        eprintln_escaped!(
            "{flag} trace reached --max-size {}{default}: {left_out} events left out",
            telco_runtime::chrome::limit_text(max)
        );
    }
}

pub fn report_traces(cli: &Cli, outcome: &telco_runtime::session::Outcome) {
    // Always said, as perf record does: how much the trace holds and
    // whether anything is missing from it.
    if let Some(p) = &outcome.profile {
        let files = profile_files(cli);
        let written: Vec<String> = [
            ("--folded", &files.folded),
            ("--flamegraph", &files.flamegraph),
            ("--speedscope", &files.speedscope),
            ("--pprof", &files.pprof),
            ("--perfetto", &cli.perfetto),
        ]
        .iter()
        .filter_map(|(flag, path)| path.as_ref().map(|p| format!("{flag} {}", p.display())))
        .collect();
        if !written.is_empty() {
            eprintln_escaped!(
                "timer.profile: {} samples ({} lost, {} stacks not unwound to their root, {} unknown frames), \
                 written to {}",
                p.samples,
                p.lost,
                p.truncated,
                p.unknown_frames,
                written.join(", ")
            );
        }
    }
    let Some(t) = outcome.traces else { return };
    let dropped = match (outcome.dropped, t.dropped) {
        (0, 0) => "none dropped".to_string(),
        (n, 0) => format!("{n} dropped (see the warning)"),
        (n, k) => format!(
            "{} dropped ({k} printf lines, instants or counters the trace writer had no room for{})",
            n + k,
            if n > 0 { "; see the warning for the rest" } else { "" }
        ),
    };
    if let (Some(path), Some(w)) = (&cli.chrome, t.chrome) {
        let size = telco_runtime::chrome::size_text(w.bytes);
        eprintln_escaped!("--chrome: {} events, {size}, written to {}; {dropped}", w.events, path.display());
        report_left_out(cli, "--chrome", w.left_out, w.max_size);
    }
    if let (Some(path), Some(w)) = (&cli.perfetto, t.perfetto) {
        let size = telco_runtime::chrome::size_text(w.bytes);
        let per_call =
            if w.calls > 0 { format!(" ({:.1} bytes a call)", w.bytes as f64 / w.calls as f64) } else { String::new() };
        eprintln_escaped!(
            "--perfetto: {} calls, {} events, {size}{per_call}, written to {}; {dropped}",
            w.calls,
            w.events,
            path.display()
        );
        report_left_out(cli, "--perfetto", w.left_out, w.max_size);
        if w.too_deep > 0 {
            // Said even with -w: the file lacks calls.
            eprintln_escaped!(
                "WARNING: --perfetto: {} calls nested more than {} deep were left out (Perfetto keeps {} levels \
                 on a thread; --chrome shows them)",
                w.too_deep,
                telco_runtime::perfetto::order::MAX_DEPTH,
                telco_runtime::perfetto::order::MAX_DEPTH
            );
        }
        if w.misplaced > 0 && !cli.no_warnings {
            eprintln_escaped!(
                "WARNING: --perfetto: {} calls began in the same nanosecond as calls they hold that were written \
                 before they returned; they may be drawn one level too deep",
                w.misplaced
            );
        }
    }
}
