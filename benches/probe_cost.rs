//! What a probe hit costs a target, measured by the target itself: a C
//! program (built here with gcc -O2) times 10 M calls of a small function
//! with CLOCK_MONOTONIC and prints ns per call; it runs untraced, then under
//! telco-stap with (a) a counter on entry, (b) entry + return with an
//! `@entry` timestamp into a `@hist_log`. Then attach latency to a running
//! program with 1 and 1,000 probes (time until the begin probe prints).
//!
//!     cargo bench --bench probe_cost
//!     TELCO_STAP=path/to/older/telco-stap cargo bench --bench probe_cost
//!
//! Prints a markdown table: median of 5 runs, min–max; then where (b) and
//! (c) go, one variant at a time.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const TARGET: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/sdt.h>
__attribute__((noinline)) long work(long x) { return x * 2 + 1; }
/* An SDT marker inside a function, and an instruction (`stmt_here`)
 * inside another: the marker and statement rows. */
__attribute__((noinline)) long marked(long x) { DTRACE_PROBE1(cost, tick, x); return x * 2 + 1; }
__attribute__((noinline)) long stmt(long x) {
    __asm__ volatile(".globl stmt_here\nstmt_here:");
    return x * 2 + 1;
}
static inline __attribute__((always_inline)) double timed(long (*f)(long), long *sum) {
    long n = 10000000, s = 0;
    struct timespec a, b;
    for (long i = 0; i < 100000; i++) s += f(i);   /* warm up */
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) s += f(i);
    clock_gettime(CLOCK_MONOTONIC, &b);
    *sum = s;
    return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
}
FUNCS
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "rdtsc")) {
        /* The clock alone: rdtsc back to back, ns each. */
        long n = 10000000;
        unsigned long s = 0;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < n; i++) s += __builtin_ia32_rdtsc();
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("%.3f %lu\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n, s & 1);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "wait")) {
        printf("ready\n");
        fflush(stdout);
        char line[8];
        if (!fgets(line, sizeof line, stdin)) return 1;
        return 0;
    }
    long s = 0;
    double ns;
    if (argc > 1 && !strcmp(argv[1], "mark"))
        ns = timed(marked, &s);
    else if (argc > 1 && !strcmp(argv[1], "stmt"))
        ns = timed(stmt, &s);
    else
        ns = timed(work, &s);
    printf("%.3f %ld\n", ns, s);
    return 0;
}
"#;

fn build(dir: &Path) -> PathBuf {
    let mut funcs = String::new();
    for i in 0..1000 {
        funcs.push_str(&format!("__attribute__((noinline, used)) long f{i}(long x) {{ return x + {i}; }}\n"));
    }
    std::fs::write(dir.join("cost.c"), TARGET.replace("FUNCS", &funcs)).expect("write cost.c");
    let exe = dir.join("cost");
    let st = Command::new("gcc").args(["-O2", "-o"]).arg(&exe).arg(dir.join("cost.c")).status().expect("gcc");
    assert!(st.success(), "gcc failed");
    exe
}

fn telco() -> PathBuf {
    // $TELCO_STAP (an older build, to compare in one run), else the release
    // binary next to this bench's directory.
    if let Some(p) = std::env::var_os("TELCO_STAP") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().expect("own path");
    me.parent().and_then(Path::parent).map(|d| d.join("telco-stap")).expect("target dir")
}

fn ns_per_call(cmd: &mut Command) -> f64 {
    let o = cmd.output().expect("run");
    let text = String::from_utf8_lossy(&o.stdout);
    let first = text.lines().next().unwrap_or_default().split_whitespace().next().unwrap_or_default().to_string();
    first.parse().unwrap_or_else(|_| panic!("no timing in output: {text} {}", String::from_utf8_lossy(&o.stderr)))
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn attach_ms(exe: &Path, script: &str) -> f64 {
    let mut target =
        Command::new(exe).arg("wait").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("target");
    let mut t_out = BufReader::new(target.stdout.take().expect("stdout"));
    let mut line = String::new();
    t_out.read_line(&mut line).expect("ready");
    let t0 = Instant::now();
    let mut tracer = Command::new(telco())
        .args(["-p", &target.id().to_string(), "-e", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("telco-stap");
    let mut s_out = BufReader::new(tracer.stdout.take().expect("stdout"));
    let mut armed = String::new();
    s_out.read_line(&mut armed).expect("armed");
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(armed, "armed\n");
    let _ = Command::new("kill").args(["-INT", &tracer.id().to_string()]).status();
    let _ = tracer.wait();
    let _ = target.stdin.take().expect("stdin").write_all(b"go\n");
    let _ = target.wait();
    ms
}

fn main() {
    let dir = std::env::temp_dir().join(format!("telco-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = build(&dir);
    let counter = "global n probe process.function(\"work\") { n++ } probe end { printf(\"calls %d\\n\", n) }";
    let latency = "global lat probe process.function(\"work\").return { lat <<< gettimeofday_ns() - @entry(gettimeofday_ns()) } probe end { printf(\"calls %d\\n\", @count(lat)); print(@hist_log(lat)) }";
    const RUNS: usize = 5;
    let mut base = Vec::new();
    let mut a = Vec::new();
    let mut b = Vec::new();
    let mut c = Vec::new();
    let mut c_rate = Vec::new();
    let mut c_drops = Vec::new();
    let trace = dir.join("trace.json");
    for _ in 0..RUNS {
        base.push(ns_per_call(&mut Command::new(&exe)));
        a.push(ns_per_call(Command::new(telco()).args(["-e", counter, "-c"]).arg(&exe)));
        b.push(ns_per_call(Command::new(telco()).args(["-e", latency, "-c"]).arg(&exe)));
        // (c) --chrome: every call a complete event; events per second
        // over the whole session (until the file is closed).
        let t0 = Instant::now();
        let o = Command::new(telco())
            .args(["-v", "-e", "probe process.function(\"work\") {}", "--chrome"])
            .arg(&trace)
            .arg("-c")
            .arg(&exe)
            .output()
            .expect("run");
        let secs = t0.elapsed().as_secs_f64();
        let text = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        c.push(
            text.split_whitespace().next().and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("no timing: {err}")),
        );
        let events: f64 =
            err.lines().find_map(|l| l.strip_prefix("--chrome: ")?.split(' ').next()?.parse().ok()).unwrap_or(0.0);
        c_rate.push(events / secs);
        c_drops.push(
            err.lines()
                .find_map(|l| l.strip_prefix("WARNING: ")?.split(" event(s) were dropped").next()?.parse::<f64>().ok())
                .unwrap_or(0.0),
        );
    }
    let _ = std::fs::remove_file(&trace);
    let (bm, blo, bhi) = stats(base);
    println!("| workload (10 M calls of a small function) | ns per call, median | min–max | added ns per call |");
    println!("|---|---|---|---|");
    println!("| untraced | {bm:.2} | {blo:.2}–{bhi:.2} | — |");
    let (am, alo, ahi) = stats(a);
    println!("| (a) counter on entry: `n++` | {am:.2} | {alo:.2}–{ahi:.2} | {:.2} |", am - bm);
    let (cm, clo, chi) = stats(b);
    println!(
        "| (b) entry + return, `@entry` timestamp into a statistic with `@hist_log` use | {cm:.2} | {clo:.2}–{chi:.2} | {:.2} |",
        cm - bm
    );
    let (dm, dlo, dhi) = stats(c);
    let (rm, _, _) = stats(c_rate);
    let (_, _, drop_max) = stats(c_drops);
    println!(
        "| (c) `--chrome`: a complete event per call (10.1 M events incl. warm-up) | {dm:.2} | {dlo:.2}–{dhi:.2} | {:.2} |",
        dm - bm
    );
    println!();
    println!(
        "(c) wrote {:.1} M events per second over the whole session (median); most events dropped in any run: {drop_max}",
        rm / 1e6
    );
    println!();
    println!("| variant (probes on `work`) | added ns per call, median of {RUNS} |");
    println!("|---|---|");
    let trace_arg = trace.to_string_lossy().into_owned();
    let by_handlers = "global lat probe process.function(\"work\").return { lat <<< gettimeofday_ns() - @entry(gettimeofday_ns()) + 0 } probe end { print(@hist_log(lat)) }";
    let variants: [(&str, Vec<&str>); 9] = [
        ("entry counter `n++` (a)", vec!["-e", counter]),
        ("entry `x = $arg1`: the full context (every register saved and reloaded)", vec!["-e", "global x probe process.function(\"work\") { x = $arg1 }"]),
        ("empty return probe: entry and return trampolines, shadow stack", vec!["-e", "probe process.function(\"work\").return {}"]),
        ("return: `lat <<< n` with `@hist_log` (n a global)", vec!["-e", "global n, lat probe process.function(\"work\").return { lat <<< n } probe end { print(@hist_log(lat)) }"]),
        ("return: `lat <<< n - @entry(n)` (an entry handler too)", vec!["-e", "global n, lat probe process.function(\"work\").return { lat <<< n - @entry(n) } probe end { print(@hist_log(lat)) }"]),
        ("(b) through the handlers (`+ 0` after the duration: not the idiom the trampolines do)", vec!["-e", by_handlers]),
        ("(b): the duration alone, timed by the trampolines", vec!["-e", latency]),
        ("`--chrome --min-dur 1s` (every call timed, none kept)", vec!["--chrome", &trace_arg, "--min-dur", "1s", "-e", "probe process.function(\"work\") {}"]),
        ("`--chrome` (c)", vec!["--chrome", &trace_arg, "-e", "probe process.function(\"work\") {}"]),
    ];
    for (name, args) in variants {
        let v: Vec<f64> =
            (0..RUNS).map(|_| ns_per_call(Command::new(telco()).args(&args).arg("-c").arg(&exe))).collect();
        let (m, _, _) = stats(v);
        println!("| {name} | {:.1} |", m - bm);
    }
    let _ = std::fs::remove_file(&trace);
    // A marker and a statement, each against the same loop untraced, and
    // the entry counter on the same run's baseline.
    let counted = |point: &str| format!("global n probe {point} {{ n++ }} probe end {{ printf(\"calls %d\\n\", n) }}");
    for (name, mode, script) in [
        ("marker hit: `n++` on `process.mark(\"tick\")`", "mark", counted("process.mark(\"tick\")")),
        ("statement hit: `n++` on `process.statement(\"stmt\")`", "stmt", counted("process.statement(\"stmt\")")),
        ("entry counter `n++` on `marked` (same run)", "mark", counted("process.function(\"marked\")")),
    ] {
        let base: Vec<f64> = (0..RUNS).map(|_| ns_per_call(Command::new(&exe).arg(mode))).collect();
        let cmd = format!("{} {mode}", exe.display());
        let v: Vec<f64> =
            (0..RUNS).map(|_| ns_per_call(Command::new(telco()).args(["-e", &script, "-c", &cmd]))).collect();
        let (m, _, _) = stats(v);
        let (b0, _, _) = stats(base);
        println!("| {name} | {:.1} |", m - b0);
    }
    let v: Vec<f64> = (0..RUNS).map(|_| ns_per_call(Command::new(&exe).arg("rdtsc"))).collect();
    let (m, _, _) = stats(v);
    println!("| for reference: `rdtsc` back to back in a C loop, no probe | {m:.1} each |");
    println!();
    println!("| attach to a running program | ms until the begin probe ran, median | min–max |");
    println!("|---|---|---|");
    let one = "global n probe begin { println(\"armed\") } probe process.function(\"work\") { n++ }";
    let mut many = String::from("global n probe begin { println(\"armed\") } probe ");
    many.push_str(&(0..1000).map(|i| format!("process.function(\"f{i}\")")).collect::<Vec<_>>().join(", "));
    many.push_str(" { n++ }");
    for (name, script) in [("1 probe", one.to_string()), ("1,000 probes", many)] {
        let v: Vec<f64> = (0..RUNS).map(|_| attach_ms(&exe, &script)).collect();
        let (m, lo, hi) = stats(v);
        println!("| {name} | {m:.1} | {lo:.1}–{hi:.1} |");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
