//! Passes 1–4 (parse, elaborate, translate, compile and link) for every
//! shipped script, for a generated script with 1,000 probes, and for
//! probing every function of the C library.
//!
//!     cargo bench -p telco-compiler --bench passes
//!
//! Prints a markdown table: median and range over several runs. Goal:
//! at most 30 ms for each shipped script. Target variables by name
//! (DWARF) are timed on large binaries with full debugging information
//! when they are here: Debian's debug build of libstdc++ (package
//! `libstdc++6-12-dbg`) and telco-stap's own debug build
//! (`target/debug/telco-stap`, a Rust binary), each against the same probe
//! reading `$arg1` (no DWARF read). Scripts that probe "the target" get
//! a small C program built with gcc as their `-c` program; one more row gives
//! them this benchmark's own executable (a large Rust binary with a full
//! symbol table).

use std::path::PathBuf;
use std::time::{Duration, Instant};
use telco_compiler::elaborate::{self, NoProcesses, TargetSpec};
use telco_compiler::preprocess::PpConfig;
use telco_compiler::{parse, Diagnostics, ParseConfig, SourceMap};

const RUNS: usize = 15;

/// Passes 1–4: the time, the probe points, and the code size.
fn passes_1_4(
    name: &str,
    text: &str,
    args: &[String],
    target: &TargetSpec,
) -> Result<(Duration, usize, usize), String> {
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
        skip_badvars: false,
        unoptimized: false,
        set_globals: &[],
    };
    let mut ds = Vec::new();
    let program = elaborate::elaborate(&mut sources, id, &script, &cfg, &mut ds);
    diags.extend(ds);
    let program = match program {
        Some(p) if !diags.has_errors() => p,
        _ => return Err(diags.summary(&sources)),
    };
    let t3 =
        telco_compiler::codegen::translate(&program, &sources, Default::default()).map_err(|d| format!("{d:?}"))?;
    let artifact = telco_compiler::codegen::codegen(t3, &program)?;
    let elapsed = t.elapsed();
    Ok((elapsed, program.probes.iter().map(|pr| pr.points.len()).sum(), artifact.code.len()))
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
    let big = TargetSpec { pid: None, command: Some(me) };
    let dir = std::env::temp_dir().join(format!("telco-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(
        dir.join("prog.c"),
        "__attribute__((noinline)) int work(int x) { return x + 1; }\nint main(void) { return work(-1); }\n",
    )
    .expect("prog.c");
    let st = std::process::Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(dir.join("prog"))
        .arg(dir.join("prog.c"))
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed");
    let target = TargetSpec { pid: None, command: Some(dir.join("prog")) };
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(repo.join("scripts"))
        .expect("scripts/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tp"))
        .collect();
    scripts.sort();

    println!("| workload (passes 1–4) | points | code bytes | median ms | min–max ms |");
    println!("|---|---|---|---|---|");
    for s in &scripts {
        let name = s.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
        let text = std::fs::read_to_string(s).expect("read script");
        // Scripts that take a function pattern probe the program's `main`.
        let args: Vec<String> = if text.contains("@1") { vec!["main".into()] } else { Vec::new() };
        let mut times = Vec::new();
        let (mut points, mut bytes) = (0, 0);
        for _ in 0..RUNS {
            match passes_1_4(&name, &text, &args, &target) {
                Ok((d, n, b)) => {
                    times.push(d);
                    points = n;
                    bytes = b;
                }
                Err(e) => panic!("{name} does not compile:\n{e}"),
            }
        }
        let (med, lo, hi) = stats(times);
        println!("| scripts/{name} | {points} | {bytes} | {med:.2} | {lo:.2}–{hi:.2} |");
    }

    // The same script against a large Rust executable.
    let text = std::fs::read_to_string(repo.join("scripts/count-calls.tp")).expect("count-calls.tp");
    let mut times = Vec::new();
    let (mut points, mut bytes) = (0, 0);
    for _ in 0..RUNS {
        let (d, n, b) = passes_1_4("count-calls.tp", &text, &["main".to_string()], &big).expect("compiles");
        times.push(d);
        points = n;
        bytes = b;
    }
    let (med, lo, hi) = stats(times);
    println!(
        "| scripts/count-calls.tp, target = this bench binary | {points} | {bytes} | {med:.2} | {lo:.2}–{hi:.2} |"
    );

    // 1,000 probes, each with its own handler body.
    let mut gen = String::from("global hits, lat\n");
    for i in 0..1000 {
        gen.push_str(&format!(
            "probe begin({i}) {{ hits[{i}]++; lat <<< {i} * 3; if (hits[{i}] > 1) printf(\"probe %d: %d\\n\", {i}, hits[{i}]) }}\n"
        ));
    }
    gen.push_str("probe end { print(@hist_log(lat)) }\n");
    let mut times = Vec::new();
    let (mut points, mut bytes) = (0, 0);
    for _ in 0..5 {
        let (d, n, b) = passes_1_4("gen-1000.tp", &gen, &[], &TargetSpec::default()).expect("1000 probes compile");
        times.push(d);
        points = n;
        bytes = b;
    }
    let (med, lo, hi) = stats(times);
    println!("| generated: 1,000 probes with bodies | {points} | {bytes} | {med:.2} | {lo:.2}–{hi:.2} |");

    let libc_all = "probe process(\"libc.so.6\").function(\"*\") {}";
    let mut times = Vec::new();
    let (mut points, mut bytes) = (0, 0);
    for _ in 0..RUNS {
        let (d, n, b) = passes_1_4("libc-all.tp", libc_all, &[], &TargetSpec::default()).expect("libc resolves");
        times.push(d);
        points = n;
        bytes = b;
    }
    let (med, lo, hi) = stats(times);
    println!("| process(\"libc.so.6\").function(\"*\") | {points} | {bytes} | {med:.2} | {lo:.2}–{hi:.2} |");

    // Target variables by name on large debug binaries, against `$arg1`.
    let debug_binaries = [
        (
            PathBuf::from("/usr/lib/x86_64-linux-gnu/debug/libstdc++.so.6.0.30"),
            "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_append",
            "printf(\"%d %s\\n\", $__n, $$parms$)",
        ),
        (repo.join("target/debug/telco-stap"), "telco_compiler::glob::glob_match", "println($$parms)"),
    ];
    for (file, func, body) in debug_binaries {
        if !file.exists() {
            println!("| `$name` in {} | (not here) | | | |", file.display());
            continue;
        }
        let mb = std::fs::metadata(&file).map(|m| m.len() >> 20).unwrap_or(0);
        for (what, body) in [("`$name`", body), ("`$arg1` (no DWARF)", "println($arg1)")] {
            let text = format!("probe process(\"{}\").function(\"{func}\") {{ {body} }}", file.display());
            let mut times = Vec::new();
            let (mut points, mut bytes) = (0, 0);
            for _ in 0..5 {
                let (d, n, b) = passes_1_4("dwarf.tp", &text, &[], &TargetSpec::default()).expect("compiles");
                times.push(d);
                points = n;
                bytes = b;
            }
            let (med, lo, hi) = stats(times);
            let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("?");
            println!("| {what} in {name} ({mb} MB) | {points} | {bytes} | {med:.2} | {lo:.2}–{hi:.2} |");
        }
    }
}
