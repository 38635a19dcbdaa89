//! The `telco-stap` binary: reads the command line, runs the passes in
//! order, stops after the first pass with errors, honours `--last-pass N`.

mod cli;
mod itrc_dump;
mod profile;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser};
use cli::{Cli, Command, Shell};
use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;
use telco_compiler::elaborate::{self, TargetQuery, TargetSpec};
use telco_compiler::{parse, ParseConfig, SourceMap};
use telco_runtime::eprintln_escaped;

/// A compiler allocates many small nodes: mimalloc makes pass 1 about 7%
/// faster than glibc's allocator (docs/PERFORMANCE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The passes recurse over the script's nesting (a 10,000-deep `else if`
/// chain is legal); they run on a thread with room for that.
const COMPILER_STACK_BYTES: usize = 512 << 20;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let worker =
        std::thread::Builder::new().name("telco-stap".into()).stack_size(COMPILER_STACK_BYTES).spawn(move || run(cli));
    let result = match worker {
        Ok(handle) => {
            handle.join().unwrap_or_else(|_| Err(anyhow::anyhow!("internal error: the compiler thread panicked")))
        }
        Err(e) => Err(anyhow::anyhow!("cannot start the compiler thread: {e}")),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            match e.downcast_ref::<Usage>() {
                // Our own text alone, on several lines.
                Some(u) => eprintln!("error: {u}"),
                None => eprintln_escaped!("error: {e:#}"),
            }
            ExitCode::from(1)
        }
    }
}

/// An error whose text is the tracer's own alone (the usage): printed as
/// it is, on its several lines. Every other error line is escaped
/// (`telco_runtime::text`): it may name what the target or a file said.
#[derive(Debug)]
struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A closed stdout (`telco-stap ... | head`) ends the program quietly.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

fn run(cli: Cli) -> Result<ExitCode> {
    if let Some(cmd) = &cli.subcommand {
        return subcommand(cmd);
    }
    if let Some(pattern) = cli.list.as_deref().filter(|p| p.starts_with("timer")) {
        // `-l 'timer.*'`: the timer family's points, as SystemTap lists them.
        let strip = |t: &str| t.replace("(number)", "");
        let hits: Vec<String> = telco_compiler::validate::timer_points()
            .into_iter()
            .filter(|t| {
                telco_compiler::glob::glob_match(pattern, t) || telco_compiler::glob::glob_match(pattern, &strip(t))
            })
            .collect();
        if !hits.is_empty() {
            let mut out = std::io::stdout().lock();
            for t in hits {
                writeln!(out, "{t}")?;
            }
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    if cli.dump_functions || cli.dump_probe_aliases {
        let mut tapsets = elaborate::tapsets::builtin();
        tapsets.extend(elaborate::tapsets::from_dirs(&cli.include).map_err(anyhow::Error::msg)?);
        let lines = if cli.dump_functions {
            elaborate::tapsets::dump_functions(&tapsets)
        } else {
            elaborate::tapsets::dump_aliases(&tapsets)
        };
        let mut out = std::io::stdout().lock();
        for l in lines {
            writeln!(out, "{l}")?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let (name, text, args) = script_source(&cli)?;
    check_outputs(&cli)?;
    let mut sink = telco_compiler::Diagnostics::new();
    sink.suppress_warnings = cli.no_warnings;
    telco_runtime::os::modfile::set_quiet(cli.no_warnings);
    let color = std::io::stderr().is_terminal();

    // Pass 1.
    let mut sources = SourceMap::new();
    let file = sources.add(name, text);
    let cfg = ParseConfig {
        pp: telco_compiler::preprocess::PpConfig {
            guru_mode: cli.guru,
            script_args: args.clone(),
            systemtap_v: cli
                .compatible
                .clone()
                .unwrap_or_else(|| telco_compiler::preprocess::PpConfig::default().systemtap_v),
            library: elaborate::tapsets::macro_libraries(&cli.include).map_err(anyhow::Error::msg)?,
            ..Default::default()
        },
    };
    let t0 = Instant::now();
    let (script, diags) = parse(&sources, file, &cfg);
    let elapsed = t0.elapsed();
    sink.extend(diags);
    if cli.verbose > 0 {
        eprintln_escaped!(
            "Pass 1: parsed user script ({} items) in {:.3} ms.",
            script.items.len(),
            elapsed.as_secs_f64() * 1e3
        );
    }
    if sink.has_errors() {
        return Ok(fail_pass(&sink, &sources, color, 1, "parse"));
    }
    let last = cli.last_pass.unwrap_or(5);
    if last == 1 {
        render(&sink, &sources, color);
        let mut out = std::io::stdout().lock();
        out.write_all(telco_compiler::print::print_script(&script).as_bytes())?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }

    // Pass 2 (or a listing, which is pass 2 on one probe point).
    if last == 5 || cli.list.is_some() || cli.list_vars.is_some() {
        check_target(&cli)?;
    }
    let mut tapsets = elaborate::tapsets::builtin();
    tapsets.extend(elaborate::tapsets::from_dirs(&cli.include).map_err(anyhow::Error::msg)?);
    let query = ProcQuery::default();
    let target = TargetSpec { pid: cli.pid, command: command_program(&cli)? };
    let ecfg = elaborate::Config {
        parse: &cfg,
        tapsets,
        target,
        query: &query,
        args: &args,
        guru: cli.guru,
        skip_badvars: cli.skip_badvars,
        unoptimized: cli.unoptimized,
    };
    let mut diags = Vec::new();
    let t0 = Instant::now();
    if cli.list.is_some() || cli.list_vars.is_some() {
        let lines = elaborate::list(&mut sources, &script, &ecfg, cli.list_vars.is_some(), &mut diags);
        sink.extend(diags);
        if sink.has_errors() {
            return Ok(fail_pass(&sink, &sources, color, 2, "elaboration"));
        }
        render(&sink, &sources, color);
        let mut out = std::io::stdout().lock();
        for l in lines {
            writeln!(out, "{l}")?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let program = elaborate::elaborate(&mut sources, file, &script, &ecfg, &mut diags);
    let elapsed = t0.elapsed();
    sink.extend(diags);
    if cli.verbose > 0 {
        if let Some(p) = &program {
            let points: usize = p.probes.iter().map(|pr| pr.points.len()).sum();
            eprintln_escaped!(
                "Pass 2: analyzed script: {} probe(s) at {} point(s), {} function(s), {} global(s) in {:.3} ms.",
                p.probes.len(),
                points,
                p.functions.len(),
                p.globals.len(),
                elapsed.as_secs_f64() * 1e3
            );
        }
    }
    let Some(mut program) = program.filter(|_| !sink.has_errors()) else {
        return Ok(fail_pass(&sink, &sources, color, 2, "elaboration"));
    };
    if cli.chrome.is_some() || cli.perfetto.is_some() {
        // Every probed function's calls become spans; a function not
        // entered by a call (the ELF entry point, vfork, setjmp) cannot
        // be timed by a return trampoline.
        let mut modules: std::collections::HashMap<std::path::PathBuf, Option<telco_compiler::elf::Module>> =
            Default::default();
        let mut returns = |f: &telco_compiler::program::FunctionPoint| {
            // A running target's file as it maps it (`ProcQuery::image`).
            let m = modules.entry(f.module.clone()).or_insert_with(|| {
                match cli.pid.and_then(|pid| query.image(pid, &f.module)) {
                    Some(image) => telco_compiler::elf::Module::from_image(&f.module, image.ok()?).ok(),
                    None => telco_compiler::elf::Module::load(&f.module).ok(),
                }
            });
            let m = m.as_ref()?;
            m.no_return_address(m.function_at(f.addr)?).map(|why| why.to_string())
        };
        let refused = program.add_chrome_spans(cli.min_dur.unwrap_or(0), &mut returns);
        let flag = if cli.perfetto.is_some() { "--perfetto" } else { "--chrome" };
        for (name, why) in refused.iter().filter(|(_, why)| !cli.no_warnings && !why.contains("ELF entry point")) {
            // (The entry point never returns: its span is missed by nobody.)
            eprintln_escaped!("WARNING: {flag}: calls of {name} are not timed: {why}");
        }
    }
    if profile_files(&cli).any() {
        program.add_profile();
    }
    render(&sink, &sources, color);
    if last == 2 {
        let mut out = std::io::stdout().lock();
        out.write_all(elaborate::show::print_program(&program).as_bytes())?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    // Pass 3.
    telco_compiler::codegen::durations_in_ticks(&mut program);
    let limits = limits(&cli);
    let t0 = Instant::now();
    let translated = match telco_compiler::codegen::translate(&program, &sources, limits) {
        Ok(t) => t,
        Err(diags) => {
            sink.extend(diags);
            return Ok(fail_pass(&sink, &sources, color, 3, "translation"));
        }
    };
    if cli.verbose > 0 {
        eprintln_escaped!(
            "Pass 3: translated to Cranelift IR: {} function(s) in {:.3} ms.",
            translated.functions.len(),
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    if last == 3 {
        let mut out = std::io::stdout().lock();
        out.write_all(telco_compiler::codegen::print_clif(&translated).as_bytes())?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }

    // Pass 4.
    let t0 = Instant::now();
    let artifact = telco_compiler::codegen::codegen(translated, &program).map_err(anyhow::Error::msg)?;
    if last >= 5 {
        // From here on ^C ends the session cleanly, even during the
        // attach (before, it ends the compilation at once).
        telco_runtime::os::sys::catch_session_signals().context("cannot install signal handlers")?;
    }
    if cli.verbose > 0 {
        eprintln_escaped!(
            "Pass 4: compiled and linked {} bytes of code, {} bytes of shared region in {:.3} ms.",
            artifact.code.len(),
            artifact.region_size,
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    if last == 4 {
        let mut out = std::io::stdout().lock();
        out.write_all(telco_compiler::codegen::disassemble(&artifact).as_bytes())?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }

    run_pass5(&cli, &artifact)
}

/// `-D NAME=VALUE` over SystemTap's defaults.
fn limits(cli: &Cli) -> telco_abi::artifact::Limits {
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

fn run_pass5(cli: &Cli, artifact: &telco_abi::artifact::Artifact) -> Result<ExitCode> {
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
    let mut cfg = telco_runtime::local::Config {
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
        let outcome = telco_runtime::local::Local::new(artifact)?.run(cfg)?;
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
            (telco_runtime::target::spawn(&argv)?, true)
        }
        (None, None) => bail!("internal error: a target without -p or -c"),
    };
    let pid = stopped.pid() as u32;
    let (region, mut armed) = match telco_runtime::target::arm(stopped, artifact, child) {
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
            let outcome = telco_runtime::local::Local::new(artifact)?.run(cfg)?;
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
    let outcome = telco_runtime::local::Local::with_region(artifact, region)?.run_with(cfg, &mut armed);
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

/// How many `.itrace` calls to record (`-D MAXITRACE=N`).
fn max_itrace(cli: &Cli) -> u64 {
    cli.defines.iter().rev().find(|(n, _)| n == "MAXITRACE").map_or(16, |(_, v)| (*v).max(1))
}

/// `--chrome FILE` and `--perfetto FILE`, started for process `pid`:
/// calls are named by their probe's function.
fn traces(cli: &Cli, artifact: &telco_abi::artifact::Artifact, pid: u32) -> Result<Option<telco_runtime::feed::Feed>> {
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
fn max_size(cli: &Cli) -> u64 {
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

fn report_traces(cli: &Cli, outcome: &telco_runtime::local::Outcome) {
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

/// Print the diagnostics and the pass's failure line; the exit status is 1.
fn fail_pass(sink: &telco_compiler::Diagnostics, sources: &SourceMap, color: bool, pass: u8, name: &str) -> ExitCode {
    render(sink, sources, color);
    let n = sink.error_count();
    eprintln_escaped!("Pass {pass}: {name} failed with {n} error{}.", if n == 1 { "" } else { "s" });
    ExitCode::from(1)
}

/// The diagnostics, their texts escaped (they may quote a symbol or a
/// path of the target's) before the renderer adds its own colours.
fn render(sink: &telco_compiler::Diagnostics, sources: &SourceMap, color: bool) {
    if sink.is_empty() {
        return;
    }
    let esc = |t: &str| telco_runtime::text::escape(t.as_bytes()).into_owned();
    let mut safe = telco_compiler::Diagnostics::new();
    for d in sink.iter() {
        let mut d = d.clone();
        d.message = esc(&d.message);
        d.label = esc(&d.label);
        d.help = d.help.as_deref().map(esc);
        for l in &mut d.secondary {
            l.message = esc(&l.message);
        }
        safe.push(d);
    }
    eprint!("{}", safe.render(sources, color));
}

/// The program `-c CMD` runs, found on `$PATH` like a shell would.
fn command_program(cli: &Cli) -> Result<Option<std::path::PathBuf>> {
    let Some(cmd) = &cli.command else { return Ok(None) };
    let prog = first_word(cmd);
    let prog = prog.as_str();
    match telco_compiler::elf::find_on_path(prog) {
        Some(p) => Ok(Some(p)),
        None => bail!("-c {cmd:?}: program `{prog}` not found"),
    }
}

/// The first word of a shell command, its quotes taken off as the shell
/// does (`'/bin/ls' -l` runs `/bin/ls`; `"my prog" x` runs `my prog`).
fn first_word(cmd: &str) -> String {
    let mut word = String::new();
    let mut chars = cmd.trim_start().chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => break,
            '\'' => word.extend(chars.by_ref().take_while(|&c| c != '\'')),
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => word.extend(chars.next()),
            c => word.push(c),
        }
    }
    word
}

/// Facts about running processes come from the runtime's `/proc` reader;
/// their files are opened as the process maps them, never by the path it
/// shows (`telco_runtime::os::modfile`): each path named is remembered
/// with its file, or with why it has none.
#[derive(Default)]
struct ProcQuery {
    #[allow(clippy::type_complexity)]
    files: std::cell::RefCell<
        std::collections::HashMap<(u32, std::path::PathBuf), Result<telco_runtime::os::modfile::Image, String>>,
    >,
}

impl ProcQuery {
    fn remember(&self, pid: u32, path: &std::path::Path, file: Option<telco_runtime::os::modfile::Image>) {
        let file = file.ok_or_else(|| format!("{}: cannot read it as process {pid} maps it", path.display()));
        self.files.borrow_mut().entry((pid, path.to_path_buf())).or_insert(file);
    }
}

impl TargetQuery for ProcQuery {
    fn executable(&self, pid: u32) -> Result<std::path::PathBuf, String> {
        let path = telco_runtime::os::proc::executable(pid)?;
        if !self.files.borrow().contains_key(&(pid, path.clone())) {
            self.remember(pid, &path, telco_runtime::os::modfile::executable(pid as i32));
        }
        Ok(path)
    }
    fn mapped_files(&self, pid: u32) -> Result<Vec<std::path::PathBuf>, String> {
        let mut out = Vec::new();
        for m in telco_runtime::os::proc::mapped_files(pid)? {
            if !self.files.borrow().contains_key(&(pid, m.path.clone())) {
                self.remember(pid, &m.path, telco_runtime::os::modfile::mapped(&m));
            }
            out.push(m.path);
        }
        Ok(out)
    }
    fn image(&self, pid: u32, path: &std::path::Path) -> Option<Result<telco_compiler::elf::Image, String>> {
        let files = self.files.borrow();
        let file = files.get(&(pid, path.to_path_buf()))?;
        Some(file.clone().map(|f| telco_compiler::elf::Image::given(f)))
    }
}

/// Where the script comes from: (display name, text, script arguments).
fn script_source(cli: &Cli) -> Result<(String, String, Vec<String>)> {
    if let Some(point) = cli.list.as_ref().or(cli.list_vars.as_ref()) {
        // `-l PROBE` is `probe PROBE {}` whose matches are listed: parse it
        // as such so a malformed point is reported like any script error.
        let flag = if cli.list.is_some() { "-l" } else { "-L" };
        return Ok((format!("<{flag} argument>"), format!("probe {point} {{}}"), cli.positional.clone()));
    }
    if let Some(text) = &cli.script_text {
        return Ok(("<input>".into(), text.clone(), cli.positional.clone()));
    }
    if cli.positional.is_empty() && profile_files(cli).any() {
        // `telco-stap -p PID --flamegraph cpu.svg`: a profile needs no script.
        return Ok(("<profile>".into(), "probe timer.profile {}".into(), Vec::new()));
    }
    let Some((path, args)) = cli.positional.split_first() else {
        let mut cmd = Cli::command();
        let usage = cmd.render_usage();
        return Err(Usage(format!(
            "no script given: name a SCRIPT.tp file or pass one with -e 'SCRIPT'\n\n{usage}\n\nFor more information, \
             try '--help'."
        ))
        .into());
    };
    let text = if path == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("cannot read the script from standard input")?;
        s
    } else {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read script `{path}`"))?;
        String::from_utf8(bytes).map_err(|e| {
            anyhow::anyhow!(
                "script `{path}` is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )
        })?
    };
    Ok((path.clone(), text, args.to_vec()))
}

/// Output files must be creatable before any tracing starts.
/// The profile files asked for.
fn profile_files(cli: &Cli) -> profile::Files {
    profile::Files {
        folded: cli.folded.clone(),
        flamegraph: cli.flamegraph.clone(),
        speedscope: cli.speedscope.clone(),
        pprof: cli.pprof.clone(),
        perfetto: None,
    }
}

fn check_outputs(cli: &Cli) -> Result<()> {
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

/// The target of a run must exist; say so before anything else happens.
fn check_target(cli: &Cli) -> Result<()> {
    if let Some(pid) = cli.pid {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
    }
    if let Some(cmd) = &cli.command {
        let shell_syntax = cmd.chars().any(|c| "|&;<>()$`\\\"'*?[]#~=%".contains(c));
        let prog = cmd.split_whitespace().next().unwrap_or("");
        if !shell_syntax && !program_exists(prog) {
            bail!("-c {cmd:?}: program `{prog}` not found");
        }
    }
    Ok(())
}

fn program_exists(prog: &str) -> bool {
    if prog.contains('/') {
        return Path::new(prog).is_file();
    }
    std::env::var_os("PATH").map(|paths| std::env::split_paths(&paths).any(|d| d.join(prog).is_file())).unwrap_or(false)
}

/// telco-stap(1): clap_mangen's rendering of the command line, then the
/// examples and where the full documentation is.
fn man_page(out: &mut dyn Write) -> std::io::Result<()> {
    let cmd = Cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    man.render_subcommands_section(out)?;
    let mut r = clap_mangen::roff::Roff::new();
    r.control("SH", ["EXAMPLES"]);
    for line in cli::EXAMPLES.lines().skip(1) {
        r.control("TP", []).text([clap_mangen::roff::roman(line.trim())]);
    }
    r.control("SH", ["FILES"]);
    r.text([clap_mangen::roff::roman(
        "Tapsets: built in, and any directory given with -I. Scripts: files ending in .tp, or -e TEXT.",
    )]);
    r.control("SH", ["SEE ALSO"]);
    r.text([clap_mangen::roff::roman(
        "The language reference (docs/language.md) and the probe points (docs/probe-points.md) in the \
         telco-stap source tree; stap(1), the SystemTap language telco-stap follows.",
    )]);
    r.to_writer(out)?;
    man.render_version_section(out)
}

fn subcommand(cmd: &Command) -> Result<ExitCode> {
    match cmd {
        Command::Completions { shell } => {
            let mut c = Cli::command();
            let mut out = std::io::stdout().lock();
            let sh = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            clap_complete::generate(sh, &mut c, "telco-stap", &mut out);
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            let mut out = std::io::stdout().lock();
            man_page(&mut out)?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::ItrcDump { file, disasm, chrome } => {
            itrc_dump::run(file, *disasm, chrome.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The symbols of a library the target loads later, read as pass 2 reads
/// the modules it knows (names, a debug file's names, CFI rows).
struct ElfSymbols;

impl telco_runtime::symtab::SymbolSource for ElfSymbols {
    fn symbols(
        &self,
        path: &std::path::Path,
        file: &telco_runtime::os::modfile::Image,
    ) -> Option<telco_runtime::symtab::ModuleSymbols> {
        let image = telco_compiler::elf::Image::given(file.clone());
        let m = telco_compiler::elf::Module::from_image(path, image).ok()?;
        let s = telco_compiler::elaborate::module_symbols(&m, path)?;
        Some(telco_runtime::symtab::ModuleSymbols {
            anchor_addr: s.module.anchor_addr,
            anchor_offset: s.module.anchor_offset,
            functions: s.functions,
            unwind: s.unwind,
        })
    }
}
