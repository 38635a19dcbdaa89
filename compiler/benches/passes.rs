//! Passes 1–2 for every shipped script, and resolving every function of
//! the C library.
//!
//!     cargo bench -p telco-compiler --bench passes
//!
//! Prints a markdown table: median and range over several runs. Goal:
//! at most 20 ms each. Scripts that probe "the target" get this benchmark's
//! own executable (it has a full symbol table) as their `-c` program.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use telco_compiler::elaborate::{self, NoProcesses, TargetSpec};
use telco_compiler::preprocess::PpConfig;
use telco_compiler::{parse, Diagnostics, ParseConfig, SourceMap};

const RUNS: usize = 15;

fn passes_1_2(name: &str, text: &str, args: &[String], target: &TargetSpec) -> Result<(Duration, usize), String> {
    let t = Instant::now();
    let pcfg = ParseConfig { pp: PpConfig { script_args: args.to_vec(), ..Default::default() } };
    let mut sources = SourceMap::new();
    let id = sources.add(name, text);
    let (script, ds) = parse(&sources, id, &pcfg);
    let mut diags = Diagnostics::new();
    diags.extend(ds);
    let cfg = elaborate::Config {
        parse: &pcfg,
        tapsets: elaborate::tapsets::builtin(),
        target: target.clone(),
        query: &NoProcesses,
        args,
        guru: false,
    };
    let mut ds = Vec::new();
    let program = elaborate::elaborate(&mut sources, id, &script, &cfg, &mut ds);
    diags.extend(ds);
    let elapsed = t.elapsed();
    match program {
        Some(p) if !diags.has_errors() => Ok((elapsed, p.probes.iter().map(|pr| pr.points.len()).sum())),
        _ => Err(diags.summary(&sources)),
    }
}

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(v[v.len() / 2]), ms(v[0]), ms(v[v.len() - 1]))
}

/// The allocator of the telco-stap binary, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let me = std::env::current_exe().expect("own executable");
    let target = TargetSpec { pid: None, command: Some(me) };
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(repo.join("scripts"))
        .expect("scripts/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tp"))
        .collect();
    scripts.sort();

    println!("| workload | points | median ms | min–max ms |");
    println!("|---|---|---|---|");
    for s in &scripts {
        let name = s.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
        let text = std::fs::read_to_string(s).expect("read script");
        // Scripts that take a function pattern probe this program's `main`.
        let args: Vec<String> = if text.contains("@1") { vec!["main".into()] } else { Vec::new() };
        let mut times = Vec::new();
        let mut points = 0;
        for _ in 0..RUNS {
            match passes_1_2(&name, &text, &args, &target) {
                Ok((d, n)) => {
                    times.push(d);
                    points = n;
                }
                Err(e) => panic!("{name} does not elaborate:\n{e}"),
            }
        }
        let (med, lo, hi) = stats(times);
        println!("| passes 1–2: scripts/{name} | {points} | {med:.2} | {lo:.2}–{hi:.2} |");
    }

    let libc_all = "probe process(\"libc.so.6\").function(\"*\") {}";
    let mut times = Vec::new();
    let mut points = 0;
    for _ in 0..RUNS {
        let (d, n) = passes_1_2("libc-all.tp", libc_all, &[], &TargetSpec::default()).expect("libc resolves");
        times.push(d);
        points = n;
    }
    let (med, lo, hi) = stats(times);
    println!("| passes 1–2: process(\"libc.so.6\").function(\"*\") | {points} | {med:.2} | {lo:.2}–{hi:.2} |");
}
