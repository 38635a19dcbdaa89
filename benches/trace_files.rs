//! `--perfetto` against `--chrome` on the same workload, in one run: a C
//! program (gcc -O2) times N calls of a small function and prints ns per
//! call; it runs untraced, then with every call written to a Chrome JSON
//! file, a Perfetto file, and both at once, then with every call kept by
//! `--flight-recorder` (no dump asked for), and with a counter probe
//! (`n++`, no file) for comparison (runs interleaved, 5 each).
//!
//!     cargo bench --bench trace_files            # 1 M and 10 M calls
//!     TELCO_STAP=path/to/older/telco-stap cargo bench --bench trace_files
//!
//! Prints a markdown table: ns per call (median, min–max), added ns per
//! call against the untraced runs, bytes in the file per call, calls per
//! second over the whole session (until the file is complete), and the
//! most events any run dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const TARGET: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) long work(long x) { return x * 2 + 1; }
int main(int argc, char **argv) {
    long n = atol(argv[1]), s = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) s += work(i);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.3f %ld\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n, s);
    return 0;
}
"#;

fn telco() -> PathBuf {
    if let Some(p) = std::env::var_os("TELCO_STAP") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().expect("own path");
    me.parent().and_then(Path::parent).map(|d| d.join("telco-stap")).expect("target dir")
}

struct Run {
    ns: f64,
    secs: f64,
    bytes: u64,
    dropped: u64,
}

/// The probe of every traced run; the counter's.
const EMPTY: &str = "probe process.function(\"work\") {}";
const COUNTER: &str = "global n probe process.function(\"work\") { n++ }";

fn run(exe: &Path, calls: u64, script: &str, files: &[(&str, &Path)]) -> Run {
    let mut cmd = if files.is_empty() && script.is_empty() {
        Command::new(exe)
    } else {
        let mut c = Command::new(telco());
        c.args(["-e", script]);
        for (flag, path) in files {
            c.arg(flag).arg(path);
        }
        c.arg("-c").arg(format!("{} {calls}", exe.display()));
        c
    };
    if files.is_empty() && script.is_empty() {
        cmd.arg(calls.to_string());
    }
    let t0 = Instant::now();
    let o = cmd.output().expect("run");
    let secs = t0.elapsed().as_secs_f64();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let ns = out.split_whitespace().next().and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("no timing: {err}"));
    let dropped = err
        .lines()
        .find_map(|l| l.strip_prefix("WARNING: ")?.split(" event(s) were dropped").next()?.parse().ok())
        .unwrap_or(0);
    let bytes = files.iter().map(|(_, p)| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)).sum();
    for (_, p) in files {
        let _ = std::fs::remove_file(p);
    }
    Run { ns, secs, bytes, dropped }
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let dir = std::env::temp_dir().join(format!("telco-trace-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("work.c"), TARGET).expect("write");
    let exe = dir.join("work");
    let st = Command::new("gcc").args(["-O2", "-o"]).arg(&exe).arg(dir.join("work.c")).status().expect("gcc");
    assert!(st.success());
    let json = dir.join("t.json");
    let proto = dir.join("t.pftrace");
    let flight = dir.join("f.pftrace");
    let variants: [(&str, &str, Vec<(&str, &Path)>); 6] = [
        ("untraced", "", vec![]),
        ("`--chrome`", EMPTY, vec![("--chrome", &json)]),
        ("`--perfetto`", EMPTY, vec![("--perfetto", &proto)]),
        (
            "`--chrome` and `--perfetto` in one run (bytes: both files)",
            EMPTY,
            vec![("--chrome", &json), ("--perfetto", &proto)],
        ),
        ("`--flight-recorder` (every call kept, no dump)", EMPTY, vec![("--flight-recorder", &flight)]),
        ("a counter probe (`n++`), no file", COUNTER, vec![]),
    ];
    for calls in [1_000_000u64, 10_000_000] {
        let mut runs: Vec<Vec<Run>> = variants.iter().map(|_| Vec::new()).collect();
        for _ in 0..5 {
            for (i, (_, script, files)) in variants.iter().enumerate() {
                runs[i].push(run(&exe, calls, script, files));
            }
        }
        println!("\n{} M calls of `work`:\n", calls / 1_000_000);
        println!("| output | ns per call, median | min–max | added ns per call | bytes per call | calls per second, whole session | most dropped |");
        println!("|---|---|---|---|---|---|---|");
        let (base, _, _) = median(runs[0].iter().map(|r| r.ns).collect());
        for (i, (name, script, files)) in variants.iter().enumerate() {
            let (m, lo, hi) = median(runs[i].iter().map(|r| r.ns).collect());
            if script.is_empty() {
                println!("| {name} | {m:.2} | {lo:.2}–{hi:.2} | — | — | — | — |");
                continue;
            }
            if files.iter().all(|(flag, _)| *flag == "--flight-recorder") {
                // No file written: the session's end is the command's.
                let dropped = runs[i].iter().map(|r| r.dropped).max().unwrap_or(0);
                println!("| {name} | {m:.2} | {lo:.2}–{hi:.2} | {:.2} | — | — | {dropped} |", m - base);
                continue;
            }
            let (bytes, _, _) = median(runs[i].iter().map(|r| r.bytes as f64 / calls as f64).collect());
            let (rate, _, _) = median(runs[i].iter().map(|r| calls as f64 / r.secs).collect());
            let dropped = runs[i].iter().map(|r| r.dropped).max().unwrap_or(0);
            println!(
                "| {name} | {m:.2} | {lo:.2}–{hi:.2} | {:.2} | {bytes:.2} | {:.1} M | {dropped} |",
                m - base,
                rate / 1e6
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
