//! What `--off-cpu` costs a blocking-heavy program, against the untraced
//! run and `perf record -e sched:sched_switch --call-graph dwarf` (the
//! off-CPU baseline perf users reach for), runs interleaved: a parent and
//! its child pass a byte back and forth over two pipes 100,000 times
//! (tests/programs/offcpu.c `pingpong`, gcc -O2), both on CPU 1, every
//! read a wait, two context switches a round trip; the program times the
//! round trips.
//!
//!     cargo bench --bench offcpu_cost
//!     OFFCPU_ROUNDS=20000 OFFCPU_REPS=3 cargo bench --bench offcpu_cost
//!
//! Prints a markdown table: the round trips' wall time (median, min–max),
//! the overhead against the untraced median, the waits each tool recorded
//! (telco-stap: the waits its summary counts, or the script's; perf: the
//! samples `perf script` lists) and whether any were lost. Then the same
//! for a fifth of the round trips with the child working 50 µs before
//! each answer (a service's rate of waits, not the worst case).

use std::path::{Path, PathBuf};
use std::process::Command;

fn telco() -> PathBuf {
    if let Some(p) = std::env::var_os("TELCO_STAP") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().expect("own path");
    me.parent().and_then(Path::parent).map(|d| d.join("telco-stap")).expect("target dir")
}

#[derive(Clone, Copy, PartialEq)]
enum How {
    Untraced,
    /// `--off-cpu --folded` (CPU samples at 99 Hz and every wait).
    OffCpu,
    /// `process.blocked` counting waits by system call, no files.
    Blocked,
    PerfSwitch,
}

impl How {
    fn name(self) -> &'static str {
        match self {
            How::Untraced => "untraced",
            How::OffCpu => "telco-stap --off-cpu --folded",
            How::Blocked => "telco-stap process.blocked { waits[$syscall] <<< $duration }",
            How::PerfSwitch => "perf record -e sched:sched_switch --call-graph dwarf",
        }
    }
}

struct Run {
    ns: u64,
    waits: u64,
    lost: bool,
}

fn run(dir: &Path, exe: &Path, rounds: &str, work: &str, how: How) -> Run {
    let folded = dir.join("w.folded");
    let data = dir.join("perf.data");
    let target = format!("{} pingpong {rounds} {work} {CPU}", exe.display());
    let out = match how {
        How::Untraced => Command::new(exe).args(["pingpong", rounds, work, CPU]).output(),
        How::OffCpu => Command::new(telco()).args(["-c", &target, "--off-cpu", "--folded"]).arg(&folded).output(),
        How::Blocked => Command::new(telco())
            .args([
                "-e",
                "global waits probe process.blocked { waits[$syscall] <<< $duration } \
                 probe end { foreach (s in waits) printf(\"waits %d\\n\", @count(waits[s])) }",
                "-c",
                &target,
            ])
            .output(),
        How::PerfSwitch => Command::new("perf")
            .args(["record", "-q", "-e", "sched:sched_switch", "--call-graph", "dwarf", "-o"])
            .arg(&data)
            .args(["--", exe.to_str().unwrap(), "pingpong", rounds, work, CPU])
            .output(),
    }
    .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", how.name());
    let ns = text.lines().find_map(|l| l.strip_prefix("ns ")).and_then(|n| n.parse().ok()).expect("ns N");
    let waits = match how {
        How::OffCpu => err
            .lines()
            .filter(|l| l.starts_with("timer.profile: "))
            .flat_map(|l| l.split(", "))
            .find_map(|p| p.strip_suffix(" of them waits off the CPU)")?.parse().ok())
            .unwrap_or(0),
        How::Blocked => text.lines().filter_map(|l| l.strip_prefix("waits ")?.parse::<u64>().ok()).sum(),
        How::PerfSwitch => {
            // One line a sample, without its stack.
            let o = Command::new("perf")
                .args(["script", "-G", "-F", "comm", "-i"])
                .arg(&data)
                .output()
                .expect("perf script");
            String::from_utf8_lossy(&o.stdout).lines().count() as u64
        }
        How::Untraced => 0,
    };
    let lost = err.contains("lost") && !err.contains("(0 lost");
    Run { ns, waits, lost }
}

/// Both processes of the ping-pong run on this CPU: each round trip is
/// two context switches there, whatever the machine's idle states (on
/// two CPUs a wake-up is an interrupt to a CPU that may be asleep, and a
/// tracer keeping the other CPU busy made the program faster), and the
/// tracer has the other CPU.
const CPU: &str = "1";

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("telco-bench-offcpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    let exe = dir.join("offcpu");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/offcpu.c");
    let ok = Command::new("gcc").args(["-O2", "-pthread", "-o"]).arg(&exe).arg(src).status().expect("gcc");
    assert!(ok.success());
    let rounds = std::env::var("OFFCPU_ROUNDS").unwrap_or_else(|_| "100000".into());
    let reps: usize = std::env::var("OFFCPU_REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    // The bare ping-pong (every switch a wait, nothing else: the worst
    // case), then one whose server works 50 µs an answer (a service's
    // rate of waits), a fifth of the round trips.
    let fifth = (rounds.parse::<u64>().unwrap_or(100_000) / 5).to_string();
    for (rounds, work) in [(rounds.as_str(), "0"), (fifth.as_str(), "50")] {
        table(&dir, &exe, rounds, work, reps);
        println!();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn table(dir: &Path, exe: &Path, rounds: &str, work: &str, reps: usize) {
    let hows = [How::Untraced, How::OffCpu, How::Blocked, How::PerfSwitch];
    let mut wall: Vec<Vec<u64>> = vec![Vec::new(); hows.len()];
    let mut waits = vec![0u64; hows.len()];
    let mut lost = vec![false; hows.len()];
    for _ in 0..reps {
        for (i, h) in hows.iter().enumerate() {
            let r = run(dir, exe, rounds, work, *h);
            wall[i].push(r.ns);
            waits[i] = waits[i].max(r.waits);
            lost[i] |= r.lost;
        }
    }
    let base = median(&mut wall[0].clone()) as f64;
    println!(
        "| pipe ping-pong, {rounds} round trips, {work} µs of work an answer, {reps} runs each, interleaved | wall ms, median | min–max | overhead (medians) | µs a round trip | waits recorded (most) | lost |"
    );
    println!("|---|---|---|---|---|---|---|");
    let n: f64 = rounds.parse().unwrap_or(1.0);
    for (i, h) in hows.iter().enumerate() {
        let mut w = wall[i].clone();
        let m = median(&mut w) as f64;
        println!(
            "| {} | {:.1} | {:.1}–{:.1} | {} | {:.2} | {} | {} |",
            h.name(),
            m / 1e6,
            w[0] as f64 / 1e6,
            w[w.len() - 1] as f64 / 1e6,
            if i == 0 { "—".to_string() } else { format!("{:+.1}%", 100.0 * (m - base) / base) },
            m / 1e3 / n,
            if *h == How::Untraced { "—".into() } else { waits[i].to_string() },
            if lost[i] { "yes" } else { "0" },
        );
    }
}
