//! What `timer.profile` costs the profiled program, against the untraced
//! run and `perf record --call-graph dwarf` (the profiling baseline) at
//! the same rates, in one run (runs interleaved, 5 each): the program
//! (tests/programs/profile.c, gcc -O2, no frame pointers) times its own
//! work, a CPU-bound loop, and prints it.
//!
//!     cargo bench --bench profile_cost
//!     TELCO_STAP=path/to/older/telco-stap cargo bench --bench profile_cost
//!     TELCO_STAP_OLD=path/to/older/telco-stap cargo bench --bench profile_cost
//!
//! (`TELCO_STAP_OLD` adds rows for that binary at both rates, in the same
//! interleaved runs: a change against the code before it.)
//!
//! Prints a markdown table: the work's time (median, min–max), the
//! overhead against the untraced median, the samples written and lost, and
//! the tool's own CPU time (getrusage of the children, less the program's
//! work: on a busy machine, that comes out of the workload). perf appears
//! twice: `perf record` alone, and followed by `perf script`, which unwinds
//! the samples into stacks (what `--folded` has when telco-stap ends).
//! A second table: two busy threads at 999 Hz, samples per second of the
//! session with nothing lost.

use std::path::{Path, PathBuf};
use std::process::Command;

fn telco() -> PathBuf {
    if let Some(p) = std::env::var_os("TELCO_STAP") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().expect("own path");
    me.parent().and_then(Path::parent).map(|d| d.join("telco-stap")).expect("target dir")
}

#[derive(Clone, Copy)]
enum How {
    Untraced,
    Telco(u32),
    /// `TELCO_STAP_OLD`'s binary.
    Old(u32),
    Perf(u32),
    /// `perf record`, then `perf script` (the stacks).
    PerfScript(u32),
}

fn old_telco() -> Option<PathBuf> {
    std::env::var_os("TELCO_STAP_OLD").map(PathBuf::from)
}

impl How {
    fn name(self) -> String {
        match self {
            How::Untraced => "untraced".into(),
            How::Telco(hz) => format!("telco-stap timer.profile.hz({hz}) --folded"),
            How::Old(hz) => format!("older telco-stap (TELCO_STAP_OLD) timer.profile.hz({hz}) --folded"),
            How::Perf(hz) => format!("perf record -F {hz} --call-graph dwarf"),
            How::PerfScript(hz) => format!("perf record -F {hz} --call-graph dwarf, then perf script"),
        }
    }
}

struct Run {
    ns: u64,
    /// The process's CPU time over the work (the kernel's sampling work
    /// in its context included; the VM's steal time not).
    cpu: u64,
    samples: u64,
    lost: bool,
    /// CPU time of the tool and the program (and perf script), ns.
    total: u64,
}

/// User + system CPU time of this process's waited-for children, ns.
fn children_cpu() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(r.ru_utime) + us(r.ru_stime)) * 1000
}

fn run(dir: &Path, exe: &Path, mode: &str, rounds: &str, how: How) -> Run {
    let folded = dir.join("p.folded");
    let data = dir.join("perf.data");
    let target = format!("{} {mode} {rounds}", exe.display());
    let before = children_cpu();
    let out = match how {
        How::Untraced => Command::new(exe).args([mode, rounds]).output(),
        How::Telco(hz) | How::Old(hz) => {
            Command::new(if let How::Old(_) = how { old_telco().expect("TELCO_STAP_OLD") } else { telco() })
                .args(["-e", &format!("probe timer.profile.hz({hz}) {{}}"), "-c", &target, "--folded"])
                .arg(&folded)
                .output()
        }
        How::Perf(hz) | How::PerfScript(hz) => Command::new("perf")
            .args(["record", "-q", "-F", &hz.to_string(), "--call-graph", "dwarf", "-o"])
            .arg(&data)
            .args(["--", exe.to_str().unwrap(), mode, rounds])
            .output(),
    }
    .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", how.name());
    if let How::PerfScript(_) = how {
        let script = Command::new("perf")
            .args(["script", "-i"])
            .arg(&data)
            .stdout(std::fs::File::create(dir.join("perf.script")).expect("scratch"))
            .stderr(std::process::Stdio::null())
            .status()
            .expect("perf script");
        assert!(script.success(), "perf script");
    }
    let total = children_cpu() - before;
    let ns = text.lines().find_map(|l| l.strip_prefix("ns ")).and_then(|n| n.parse().ok()).expect("ns N");
    let cpu = text.lines().find_map(|l| l.strip_prefix("cpu ")).and_then(|n| n.parse().ok()).expect("cpu N");
    let samples = match how {
        How::Telco(_) | How::Old(_) => std::fs::read_to_string(&folded)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum(),
        _ => 0,
    };
    // "timer.profile: N samples (L lost, ...)", or perf's own warning.
    let lost = err.lines().any(|l| {
        l.split_once(" samples (").and_then(|(_, r)| r.split_whitespace().next()).is_some_and(|n| n != "0")
            || l.contains("lost") && !l.starts_with("timer.profile: ")
    });
    Run { ns, cpu, samples, lost, total }
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("telco-bench-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    let exe = dir.join("profile");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/profile.c");
    let ok = Command::new("gcc")
        .args(["-O2", "-pthread", "-fomit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(src)
        .status()
        .expect("gcc");
    assert!(ok.success());
    let mut hows = vec![
        How::Untraced,
        How::Telco(99),
        How::Telco(999),
        How::Perf(99),
        How::Perf(999),
        How::PerfScript(99),
        How::PerfScript(999),
    ];
    if old_telco().is_some() {
        hows.extend([How::Old(99), How::Old(999)]);
    }
    let reps = 7;
    let mut wall: Vec<Vec<u64>> = vec![Vec::new(); hows.len()];
    let mut cpu: Vec<Vec<u64>> = vec![Vec::new(); hows.len()];
    let mut total: Vec<Vec<u64>> = vec![Vec::new(); hows.len()];
    let mut samples = vec![0u64; hows.len()];
    let mut lost = vec![false; hows.len()];
    for _ in 0..reps {
        for (i, h) in hows.iter().enumerate() {
            let r = run(&dir, &exe, "split", "150000", *h);
            wall[i].push(r.ns);
            cpu[i].push(r.cpu);
            total[i].push(r.total);
            samples[i] = samples[i].max(r.samples);
            lost[i] |= r.lost;
        }
    }
    let (cbase, wbase) = (median(&mut cpu[0].clone()) as f64, median(&mut wall[0].clone()) as f64);
    let cmin = *cpu[0].iter().min().unwrap_or(&1) as f64;
    // The tool's own CPU: each run's total less the program's work (the
    // program's noise cancels; what is left is the tool, and the program's
    // start and exit, as in the untraced row).
    let own: Vec<Vec<u64>> =
        (0..hows.len()).map(|i| total[i].iter().zip(&cpu[i]).map(|(t, c)| t.saturating_sub(*c)).collect()).collect();
    println!(
        "| 2 s of CPU work (split 150000), {reps} runs each, interleaved | CPU ms, median | min–max | CPU overhead (medians) | CPU overhead (minimums) | wall ms, median | wall overhead | samples (most) | lost | the tool's own CPU ms, median (min–max) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (i, h) in hows.iter().enumerate() {
        let mut c = cpu[i].clone();
        let m = median(&mut c) as f64;
        let w = median(&mut wall[i].clone()) as f64;
        let pct = |x: f64, b: f64| if i == 0 { "—".to_string() } else { format!("{:+.1}%", 100.0 * (x - b) / b) };
        let mut o = own[i].clone();
        let om = median(&mut o) as f64;
        println!(
            "| {} | {:.1} | {:.1}–{:.1} | {} | {} | {:.1} | {} | {} | {} | {:.1} ({:.1}–{:.1}) |",
            h.name(),
            m / 1e6,
            c[0] as f64 / 1e6,
            c[c.len() - 1] as f64 / 1e6,
            pct(m, cbase),
            pct(c[0] as f64, cmin),
            w / 1e6,
            pct(w, wbase),
            if matches!(h, How::Telco(_) | How::Old(_)) { samples[i].to_string() } else { "—".into() },
            if lost[i] { "yes" } else { "0" },
            om / 1e6,
            o[0] as f64 / 1e6,
            o[o.len() - 1] as f64 / 1e6,
        );
    }
    // Sustained: two busy threads at 999 Hz.
    println!();
    println!("| two busy threads, timer.profile.hz(999) | work ms | samples | samples per second of work | lost |");
    println!("|---|---|---|---|---|");
    for _ in 0..3 {
        let r = run(&dir, &exe, "threads", "60000", How::Telco(999));
        println!(
            "| run | {:.1} | {} | {:.0} | {} |",
            r.ns as f64 / 1e6,
            r.samples,
            r.samples as f64 / (r.ns as f64 / 1e9),
            if r.lost { "yes" } else { "0" }
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
