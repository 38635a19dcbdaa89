//! Probe-point resolution against real ELF files.
//!
//!     cargo bench -p telco-compiler --bench elf
//!
//! Prints a markdown table (median and range over several runs) for loading
//! libc, matching `*` and `mem*` in it, telling which of its functions take
//! no return probe, and loading the closure of /bin/ls.
//! The goal: `process("libc.so.6").function("*")` (find, load, match) well
//! under 20 ms.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use telco_compiler::elf::{find_module, load_closure, Module};

const RUNS: usize = 15;

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn time<T>(mut f: impl FnMut() -> T) -> (Duration, Duration, Duration) {
    // One warm-up run so the page cache holds the files.
    std::hint::black_box(f());
    let samples = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn row(what: &str, detail: &str, (med, lo, hi): (Duration, Duration, Duration)) {
    println!("| {what} | {detail} | {} | {} – {} |", ms(med), ms(lo), ms(hi));
}

fn main() {
    let shell = match load_closure(Path::new("/bin/sh")) {
        Ok(modules) => modules,
        Err(e) => {
            eprintln!("cannot run the ELF benchmark: {e}");
            std::process::exit(1);
        }
    };
    let libc: PathBuf = match find_module("libc.so.6", &shell) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot run the ELF benchmark: {e}");
            std::process::exit(1);
        }
    };
    let loaded = match Module::load(&libc) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("cannot run the ELF benchmark: {e}");
            std::process::exit(1);
        }
    };
    let (all, _) = loaded.match_functions("*");
    let (mem, _) = loaded.match_functions("mem*");
    let n_all = all.len();
    let n_mem = mem.len();
    let closure_len = load_closure(Path::new("/bin/ls")).map(|m| m.len()).unwrap_or(0);

    println!("ELF resolution, {} runs each, median and range in ms ({})\n", RUNS, libc.display());
    println!("| operation | result | median ms | range ms |");
    println!("|---|---|---|---|");
    row(
        "Module::load(libc)",
        &format!(
            "{} functions, {} skipped, stripped={}",
            loaded.functions.len(),
            loaded.skipped.len(),
            loaded.stripped
        ),
        time(|| Module::load(&libc).map(|m| m.functions.len())),
    );
    row("match_functions(\"*\")", &format!("{n_all} functions"), time(|| loaded.match_functions("*").0.len()));
    row("match_functions(\"mem*\")", &format!("{n_mem} functions"), time(|| loaded.match_functions("mem*").0.len()));
    row(
        "process(\"libc.so.6\").function(\"*\")",
        "load_closure(/bin/sh) + find_module + load + match",
        time(|| {
            let closure = load_closure(Path::new("/bin/sh")).unwrap_or_default();
            let path = find_module("libc.so.6", &closure).ok();
            // The closure already holds libc: a caller reuses it rather than loading again.
            let module = closure.iter().find(|m| Some(&m.path) == path.as_ref());
            module.map(|m| m.match_functions("*").0.len())
        }),
    );
    // What `.return` on every function adds: each function's first
    // instructions decoded (`Module::no_return_address`).
    let refused = loaded.functions.iter().filter(|f| loaded.no_return_address(f).is_some()).count();
    row(
        "no_return_address for every libc function",
        &format!("{n_all} functions, {refused} refused"),
        time(|| loaded.functions.iter().filter(|f| loaded.no_return_address(f).is_some()).count()),
    );
    row(
        "load_closure(/bin/ls)",
        &format!("{closure_len} modules"),
        time(|| load_closure(Path::new("/bin/ls")).map(|m| m.len())),
    );

    // A C++ library: many mangled names, so this is the demangler's cost.
    let cxx = find_module("libstdc++.so.6", &[]).ok().and_then(|p| Module::load(&p).ok());
    if let Some(m) = cxx {
        row(
            "Module::load(libstdc++)",
            &format!("{} functions, {} skipped", m.functions.len(), m.skipped.len()),
            time(|| Module::load(&m.path).map(|m| m.functions.len())),
        );
        row(
            "match_functions(\"std::*\") in libstdc++",
            &format!("{} functions", m.match_functions("std::*").0.len()),
            time(|| m.match_functions("std::*").0.len()),
        );
    } else {
        println!("\n(libstdc++.so.6 not found: its rows are left out)");
    }
}
