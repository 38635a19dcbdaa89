//! `.itrace` speed: one call of a function running a 5-instruction loop
//! 10 M times (bench/itrace_loop.c, gcc -O1), traced to ITRC by the block
//! tracer; the same call untraced; and the single-stepper on a call 100
//! times shorter (at its speed the long one takes over ten minutes).
//!
//!     cargo bench --bench itrace_speed
//!
//! The program times the call itself (CLOCK_MONOTONIC around it); the
//! instruction count is telco-stap's (`-v`). Prints a markdown table:
//! instructions per second of the traced call, its slowdown against the
//! untraced call, the file's size. 5 runs each, interleaved.

use std::path::Path;
use std::process::Command;

fn telco() -> std::path::PathBuf {
    let me = std::env::current_exe().expect("own path");
    me.parent().and_then(Path::parent).map(|d| d.join("telco-stap")).expect("target dir")
}

/// (call ns, instructions, file bytes)
fn run(dir: &Path, exe: &Path, n: u64, how: Option<bool>) -> (u64, u64, u64) {
    let file = dir.join("loop.itrc");
    let cmd = format!("{} {n}", exe.display());
    let out = match how {
        None => Command::new(exe).arg(n.to_string()).output(),
        Some(step) => {
            let mut c = Command::new(telco());
            c.args(["-v", "-e", r#"probe process.function("spin").itrace {}"#, "-c", &cmd, "--itrc"]).arg(&file);
            if step {
                c.arg("--itrace-step");
            }
            c.output()
        }
    }
    .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let ns = text.split_whitespace().next().and_then(|v| v.parse().ok()).expect("NS ns RESULT");
    let count = err
        .lines()
        .find(|l| l.starts_with("itrace: "))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|p| p.split_whitespace().next())
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&file);
    (ns, count, bytes)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("telco-bench-itrace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    let exe = dir.join("itrace_loop");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/itrace_loop.c");
    assert!(Command::new("gcc").args(["-O1", "-o"]).arg(&exe).arg(src).status().expect("gcc").success());
    let n = 10_000_000;
    let (mut plain, mut fast) = (Vec::new(), Vec::new());
    let (mut count, mut bytes) = (0, 0);
    for _ in 0..5 {
        plain.push(run(&dir, &exe, n, None).0);
        let (ns, c, b) = run(&dir, &exe, n, Some(false));
        fast.push(ns);
        (count, bytes) = (c, b);
    }
    let (step_ns, step_count, _) = run(&dir, &exe, n / 100, Some(true));
    let (p, f) = (median(plain), median(fast));
    println!("| one call, spin(N) (5 instructions an iteration) | N | instructions | call ms (median of 5) | instructions per second | slowdown | ITRC bytes |");
    println!("|---|---|---|---|---|---|---|");
    println!("| untraced | {n} | — | {:.1} | — | — | — |", p as f64 / 1e6);
    println!(
        "| block tracer (in the target) | {n} | {count} | {:.1} | {:.1} M | {:.0}× | {bytes} |",
        f as f64 / 1e6,
        count as f64 / (f as f64 / 1e9) / 1e6,
        f as f64 / p.max(1) as f64
    );
    println!(
        "| single-stepper (`--itrace-step`) | {} | {step_count} | {:.1} | {:.3} M | — | — |",
        n / 100,
        step_ns as f64 / 1e6,
        step_count as f64 / (step_ns as f64 / 1e9) / 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
}
