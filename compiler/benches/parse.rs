//! Pass 1 throughput on a large generated script.
//!
//!     cargo bench -p telco-compiler --bench parse
//!
//! Prints a markdown table (median and range over several runs) for the
//! lexer alone and for the whole of pass 1 (lex, preprocess, parse,
//! validate). The goal is at least 20 MB/s for pass 1.

use std::time::{Duration, Instant};
use telco_compiler::{lexer, parse, ParseConfig, SourceMap};

/// A script of at least `min_bytes`, mixing every kind of construct.
fn generate(min_bytes: usize) -> String {
    let mut s = String::from("global counts[10000], totals, names, lat\n");
    let mut i = 0u64;
    while s.len() < min_bytes {
        s.push_str(&format!(
            r#"
# probe number {i}
probe process("/usr/bin/prog{m}").function("work_{i}*").return?, timer.ms({t}) {{
    counts[tid(), execname()]++
    totals += $arg1 * 2 + ($arg2 >> 3) - {i}
    lat <<< gettimeofday_ns() - @entry(gettimeofday_ns())
    if (totals % 7 == 0 && !({i} in names)) {{
        names[{i}] = sprintf("%s-%d", "name\t{i}", totals)
    }} else if (totals > 1000)
        totals = 0
    else
        totals -= 1
    foreach ([k1, k2-] in counts limit 5)
        printf("%d %s %d\n", k1, k2, counts[k1, k2])
    for (j = 0; j < 10; j++) {{ x = j ? j << 1 : -j; y .= "a" "b" }}
    while (x > 0) x--
    try {{ error("e{i}") }} catch (msg) {{ warn(msg) }}
    delete counts[{i}, "x"]
}}

function helper_{i}:long(a:long, b:string) {{
    /* block comment {i} */
    return a + strlen(b) * 0x{i:x} - 0{o:o} // trailing
}}
"#,
            m = i % 5,
            t = i % 100 + 1,
            o = i % 512,
        ));
        i += 1;
    }
    s
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// The allocator of the telco-stap binary, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // PARSE_BENCH_KB and PARSE_BENCH_RUNS shrink the run, e.g. for counting
    // instructions under `valgrind --tool=callgrind`.
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let text = generate(env("PARSE_BENCH_KB", 5 << 10) << 10);
    let mb = text.len() as f64 / (1 << 20) as f64;
    let runs = env("PARSE_BENCH_RUNS", 15);

    let mut sm = SourceMap::new();
    let id = sm.add("generated.tp", text.clone());
    let cfg = ParseConfig::default();
    let (script, diags) = parse(&sm, id, &cfg);
    assert!(diags.is_empty(), "the generated script must parse cleanly: {:?}", diags.first());
    let items = script.items.len();

    let mut lex_times = Vec::new();
    let mut parse_times = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let (toks, _) = lexer::lex(&text);
        std::hint::black_box(&toks);
        lex_times.push(t.elapsed());
        drop(toks);

        let t = Instant::now();
        let out = parse(&sm, id, &cfg);
        std::hint::black_box(&out);
        parse_times.push(t.elapsed());
    }
    let rate = |d: Duration| mb / d.as_secs_f64();
    println!("Generated script: {:.2} MiB, {} items, {} runs each\n", mb, items, runs);
    // This machine is a VM with noisy neighbours: the best run is the
    // figure least disturbed by them; the median and range are shown too.
    println!("| stage | best time | MiB/s (best) | MiB/s (median) | MiB/s (range) |");
    println!("|---|---|---|---|---|");
    for (name, times) in [("lex", lex_times), ("pass 1 (lex, preprocess, parse, validate)", parse_times)] {
        let (med, lo, hi) = median(times);
        println!(
            "| {name} | {:.1} ms | {:.1} | {:.1} | {:.1} – {:.1} |",
            lo.as_secs_f64() * 1e3,
            rate(lo),
            rate(med),
            rate(hi),
            rate(lo)
        );
    }
}
