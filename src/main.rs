//! The `telco-stap` binary: reads the command line, runs the passes in
//! order, stops after the first pass with errors, honours `--last-pass N`.

mod cli;
mod itrc_dump;
mod man;
mod outputs;
mod pass5;
mod profile;
mod query;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};
use cli::Cli;
use outputs::{check_outputs, profile_files};
use query::{check_target, command_program, ProcQuery};
use std::io::{IsTerminal, Read, Write};
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
        return man::subcommand(cmd);
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
    let target = TargetSpec { pid: cli.pid(), command: command_program(&cli)? };
    let ecfg = elaborate::Config {
        parse: &cfg,
        tapsets,
        target,
        query: &query,
        args: &args,
        guru: cli.guru,
        skip_badvars: cli.skip_badvars,
        unoptimized: cli.unoptimized,
        set_globals: &cli.set_globals,
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
    if let Some(flag) = cli.calls_out() {
        // Every probed function's calls become spans; a function not
        // entered by a call (the ELF entry point, vfork, setjmp) cannot
        // be timed by a return trampoline.
        let mut modules: std::collections::HashMap<std::path::PathBuf, Option<telco_compiler::elf::Module>> =
            Default::default();
        let mut returns = |f: &telco_compiler::program::FunctionPoint| {
            // A running target's file as it maps it (`ProcQuery::image`).
            let m = modules.entry(f.module.clone()).or_insert_with(|| {
                match cli.pid().and_then(|pid| query.image(pid, &f.module)) {
                    Some(image) => telco_compiler::elf::Module::from_image(&f.module, image.ok()?).ok(),
                    None => telco_compiler::elf::Module::load(&f.module).ok(),
                }
            });
            let Some((m, func)) = m.as_ref().and_then(|m| Some((m, m.function_at(f.addr)?))) else {
                return Ok(f.go.clone());
            };
            // A Go function's returns are its epilogues.
            if f.go.is_some() {
                return m.go_entry(func, true).map(Some);
            }
            m.no_return_address(func).map_or(Ok(None), |why| Err(why.to_string()))
        };
        let refused = program.add_chrome_spans(cli.min_dur.unwrap_or(0), &mut returns);
        if cli.flight_recorder.is_some() {
            program.flight_size = cli.flight_size.unwrap_or(telco_runtime::flight::DEFAULT_SIZE);
        }
        for (name, why) in refused.iter().filter(|(_, why)| !cli.no_warnings && !why.contains("ELF entry point")) {
            // (The entry point never returns: its span is missed by nobody.)
            eprintln_escaped!("WARNING: {flag}: calls of {name} are not timed: {why}");
        }
    }
    if profile_files(&cli).any() || cli.pyroscope.is_some() || cli.off_cpu {
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
    let limits = pass5::limits(&cli);
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

    pass5::run_pass5(&cli, &artifact)
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
    let pushed = cli.pyroscope.is_some() || cli.otlp.is_some();
    if cli.positional.is_empty() && (profile_files(cli).any() || pushed || cli.off_cpu) {
        // `telco-stap -p PID --flamegraph cpu.svg`: a profile needs no
        // script (nor does `--pyroscope URL` or `--otlp URL`: profiles
        // pushed).
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
