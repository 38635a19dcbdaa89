//! `timer.profile` and the profile files, on programs with a known CPU
//! split (tests/programs/profile.c: `hot` three quarters, `cold` one
//! quarter), built with and without frame pointers, with threads, with the
//! program's own SIGPROF timer, with every signal blocked, attached with
//! -p, and Debian's python3.11. Every file is read back by independent
//! code: the folded text here, the SVG's own percentages, the speedscope
//! file against speedscope's schema and the pprof file by Datadog's
//! decoder (tests/profile/check.js; `tests/profile/install.sh`).
//!
//! Samples are taken every millisecond of a thread's CPU time (999 Hz),
//! so a 1.2 s run gives about 1,200 samples and the split is measured, not
//! guessed: the loops alternate every 30 µs, far below the period, and
//! the bounds (5 points) are four standard deviations of a 3:1 split over
//! that many samples wide (at 600 samples they were under three, and one
//! run in a few hundred fell outside).

mod common;

use common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROUNDS: &str = "90000";

fn build(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    gcc("profile.c", &exe, flags);
    exe
}

/// `node tests/profile/check.js KIND FILE`, parsed.
fn check(kind: &str, file: &Path) -> serde_json::Value {
    let script = repo().join("tests/profile/check.js");
    assert!(
        repo().join("tests/profile/node/.ready").exists(),
        "the profile readers are not installed: run tests/profile/install.sh (the README's test command does)"
    );
    let o = std::process::Command::new("node").arg(script).arg(kind).arg(file).output().expect("run node");
    assert!(o.status.success(), "check.js {kind} failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("check.js prints JSON")
}

/// Folded lines: (stack, count).
fn folded(path: &Path) -> Vec<(Vec<String>, u64)> {
    let text = std::fs::read_to_string(path).expect("read the folded file");
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("`stack count`");
            (stack.split(';').map(str::to_string).collect(), n.parse().expect("a count"))
        })
        .collect()
}

/// Percent of `a` among the samples whose leaf is `a` or `b`.
fn share(samples: &[(Vec<String>, u64)], a: &str, b: &str) -> f64 {
    let count = |f: &str| samples.iter().filter(|(s, _)| s.last().is_some_and(|l| l == f)).map(|x| x.1).sum::<u64>();
    let (x, y) = (count(a), count(b));
    assert!(x + y >= 200, "too few samples of {a} and {b}: {x} + {y}");
    100.0 * x as f64 / (x + y) as f64
}

fn around_75(what: &str, pct: f64) {
    assert!((70.0..=80.0).contains(&pct), "{what}: hot has {pct:.1}% of hot+cold, not 75 ± 5");
}

/// The SVG's own numbers: the percentage inferno gives `name`.
fn svg_percent(svg: &str, name: &str) -> f64 {
    let key = format!("<title>{name} (");
    let at = svg.find(&key).unwrap_or_else(|| panic!("{name} is not in the flame graph"));
    let rest = &svg[at + key.len()..];
    let end = rest.find("%)").expect("a percentage");
    let num = rest[..end].rsplit(", ").next().expect("samples, percent");
    num.trim().parse().expect("a number")
}

/// Run a profile of `args` (a -c command) with every file written, and
/// check the split in each.
fn profile_all(dir: &Path, cmd: &str) -> (String, Vec<(Vec<String>, u64)>) {
    let f = dir.join("p.folded");
    let svg = dir.join("p.svg");
    let ss = dir.join("p.speedscope.json");
    let pp = dir.join("p.pb.gz");
    let (out, err, code) = telco_run(&[
        "-e",
        "probe timer.profile.hz(999) {}",
        "-c",
        cmd,
        "--folded",
        f.to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
        "--speedscope",
        ss.to_str().unwrap(),
        "--pprof",
        pp.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "telco-stap failed:\n{err}");
    assert!(out.contains("done"), "the program did not finish: {out}\n{err}");
    let stacks = folded(&f);
    around_75("folded", share(&stacks, "hot", "cold"));
    // Every sample of the loops reaches main through run.
    for (s, n) in stacks.iter().filter(|(s, _)| s.last().is_some_and(|l| l == "hot" || l == "cold")) {
        let joined = s.join(";");
        assert!(joined.contains(";main;run;"), "a stack ({n} samples) does not reach main: {joined}");
        assert!(joined.contains("_start"), "not rooted at _start: {joined}");
    }
    // The SVG's own percentages.
    let text = std::fs::read_to_string(&svg).expect("the SVG");
    assert!(text.contains("<svg") && text.contains("</svg>"));
    let (h, c) = (svg_percent(&text, "hot"), svg_percent(&text, "cold"));
    around_75("flame graph", 100.0 * h / (h + c));
    // speedscope: valid against its schema; the split by weight.
    let v = check("speedscope", &ss);
    assert_eq!(v["valid"], true, "the speedscope file is not valid: {}", v["errors"]);
    let mut weighted = Vec::new();
    for p in v["profiles"].as_array().expect("profiles") {
        for (s, w) in p["samples"].as_array().unwrap().iter().zip(p["weights"].as_array().unwrap()) {
            let names: Vec<String> = s.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
            weighted.push((names, w.as_u64().unwrap() / 1000));
        }
    }
    let pct = {
        let count =
            |f: &str| weighted.iter().filter(|(s, _)| s.last().is_some_and(|l| l == f)).map(|x| x.1).sum::<u64>();
        100.0 * count("hot") as f64 / (count("hot") + count("cold")) as f64
    };
    around_75("speedscope", pct);
    // pprof: decoded by Datadog's reader; cpu nanoseconds by leaf.
    let v = check("pprof", &pp);
    assert_eq!(v["sampleTypes"], serde_json::json!([["samples", "count"], ["cpu", "nanoseconds"]]));
    let mut cpu: HashMap<String, u64> = HashMap::new();
    for s in v["samples"].as_array().expect("samples") {
        let leaf = s["stack"][0].as_str().unwrap_or("").to_string();
        *cpu.entry(leaf).or_default() += s["values"][1].as_u64().unwrap();
        assert!(s["labels"]["tid"].as_u64().is_some(), "a sample without its thread: {s}");
    }
    let (h, c) = (cpu.get("hot").copied().unwrap_or(0), cpu.get("cold").copied().unwrap_or(0));
    around_75("pprof", 100.0 * h as f64 / (h + c) as f64);
    let exe = cmd.split_whitespace().next().unwrap();
    assert!(
        v["mappings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["file"] == exe && m["buildId"].as_str().is_some_and(|b| b.len() == 40)),
        "the program's mapping with its build id is missing: {}",
        v["mappings"]
    );
    (out, stacks)
}

#[test]
fn a_cpu_split_is_profiled_with_and_without_frame_pointers() {
    let dir = scratch("profile-split");
    for (name, flag) in [("nofp", "-fomit-frame-pointer"), ("fp", "-fno-omit-frame-pointer")] {
        let exe = build(&dir, name, &[flag]);
        profile_all(&dir, &format!("{} split {ROUNDS}", exe.display()));
    }
}

#[test]
fn the_programs_own_sigprof_and_blocked_signals_are_untouched() {
    let dir = scratch("profile-signals");
    let exe = build(&dir, "profile", &[]);
    let (out, _) = profile_all(&dir, &format!("{} sigprof {ROUNDS}", exe.display()));
    let ticks: u64 = out.lines().find_map(|l| l.strip_prefix("done ")).and_then(|n| n.parse().ok()).expect("done N");
    assert!(ticks > 10, "the program's own SIGPROF timer stopped: {ticks} ticks");
    profile_all(&dir, &format!("{} blocked {ROUNDS}", exe.display()));
}

#[test]
fn threads_are_sampled_apart() {
    let dir = scratch("profile-threads");
    let exe = build(&dir, "profile", &[]);
    let f = dir.join("t.folded");
    let ss = dir.join("t.json");
    let cmd = format!("{} threads 30000", exe.display());
    let (_, err, code) = telco_run(&[
        "-e",
        "probe timer.profile.hz(999) {}",
        "-c",
        &cmd,
        "--folded",
        f.to_str().unwrap(),
        "--speedscope",
        ss.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let stacks = folded(&f);
    for (thread, mine, other) in [("alpha", "alpha_work", "beta_work"), ("beta", "beta_work", "alpha_work")] {
        let of: Vec<_> = stacks.iter().filter(|(s, _)| s[0] == thread).collect();
        let total: u64 = of.iter().map(|x| x.1).sum();
        let in_mine: u64 = of.iter().filter(|(s, _)| s.last().is_some_and(|l| l == mine)).map(|x| x.1).sum();
        assert!(total >= 200, "{thread}: only {total} samples:\n{stacks:?}");
        assert!(in_mine * 10 >= total * 9, "{thread}: {in_mine} of {total} samples in {mine}");
        assert!(!of.iter().any(|(s, _)| s.iter().any(|x| x == other)), "{thread} has {other}'s frames");
    }
    let v = check("speedscope", &ss);
    assert_eq!(v["valid"], true, "{}", v["errors"]);
    let names: Vec<&str> = v["profiles"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.starts_with("alpha")) && names.iter().any(|n| n.starts_with("beta")), "{names:?}");
}

#[test]
fn the_probe_body_sees_the_sampled_thread() {
    let dir = scratch("profile-body");
    let exe = build(&dir, "profile", &[]);
    let cmd = format!("{} split {ROUNDS}", exe.display());
    let script = r#"
global where, who, stacks, sps
probe timer.profile.hz(999) {
    where[usymname(uaddr())] <<< 1
    who[tid() == target()] <<< 1
    stacks[sprint_ubacktrace()] <<< 1
    sps <<< (register("rsp") != 0)
}
probe end {
    printf("hot %d cold %d\n", @count(where["hot"]), @count(where["cold"]))
    printf("target %d other %d\n", @count(who[1]), @count(who[0]))
    printf("rsp %d of %d\n", @sum(sps), @count(sps))
    foreach (s in stacks- limit 1) print(s)
}
"#;
    let (out, err, code) = telco_run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let num = |line: &str, key: &str| -> u64 {
        let l = out.lines().find(|l| l.starts_with(line)).unwrap_or_else(|| panic!("no `{line}` in {out}"));
        let w: Vec<&str> = l.split_whitespace().collect();
        w[w.iter().position(|x| *x == key).unwrap() + 1].parse().unwrap()
    };
    let (h, c) = (num("hot", "hot"), num("hot", "cold"));
    around_75("usymname(uaddr())", 100.0 * h as f64 / (h + c) as f64);
    assert_eq!(num("target", "other"), 0, "a sample with another tid: {out}");
    assert!(num("rsp", "rsp") > 0 && num("rsp", "rsp") == num("rsp", "of"), "{out}");
    assert!(out.contains("\nhot+0x") && out.contains("\nrun+0x") && out.contains("main+0x"), "{out}");
    assert!(out.contains(" [nofp]") || out.contains(" [profile]"), "frames name their module: {out}");
}

/// A process's CPU time so far (user and system), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = stat.rsplit_once(')').expect("comm").1;
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime), counted from the state (field 3).
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

#[test]
fn a_running_process_is_profiled_without_a_script() {
    let dir = scratch("profile-attach");
    let exe = build(&dir, "profile", &[]);
    let mut target = Running::start(&exe, &["serve", "0"]);
    let f = dir.join("a.folded");
    let pid = target.pid().to_string();
    let cpu_before = cpu_ticks(target.pid());
    let (_, err, code) = telco_run(&["-p", &pid, "-T", "2", "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let cpu = cpu_ticks(target.pid()) - cpu_before;
    target.say("stop");
    let (out, _) = target.finish();
    assert!(out.contains("done"), "the target did not live on: {out}");
    // One sample per 1/99 s of the thread's CPU time: about 200 in 2 s on
    // an idle machine, as many fewer as the machine's load took from the
    // target (the bound follows the CPU time it got, in clock ticks).
    let stacks = folded(&f);
    let total: u64 = stacks.iter().map(|x| x.1).sum();
    let hz = ticks_per_second();
    let expect = cpu * 99 / hz;
    assert!(
        total * 10 >= expect * 6 && total * 10 <= expect * 13 + 100,
        "{total} samples for {cpu} ticks of CPU time ({expect} expected at 99 Hz)"
    );
    let count = |f: &str| stacks.iter().filter(|(s, _)| s.last().is_some_and(|l| l == f)).map(|x| x.1).sum::<u64>();
    let (hot, cold) = (count("hot"), count("cold"));
    assert!(hot + cold >= 50, "too few samples of hot and cold: {hot} + {cold}");
    let pct = 100.0 * hot as f64 / (hot + cold) as f64;
    // Few samples (99 Hz for 2 s, fewer on a loaded machine): the bound
    // is 5 standard deviations of that many samples taken at random
    // (±15 points for 200, ±22 for 100; 64.4% out of ±10 failed once by
    // chance), so it fails only when the stacks are wrong.
    let sd = 100.0 * (0.75f64 * 0.25 / (hot + cold) as f64).sqrt();
    assert!((pct - 75.0).abs() <= 5.0 * sd, "hot has {pct:.1}% of {} samples, not 75 ± {:.1}", hot + cold, 5.0 * sd);
}

#[test]
fn python_stacks_go_through_the_interpreter() {
    let dir = scratch("profile-python");
    let py = dir.join("work.py");
    std::fs::write(
        &py,
        // At least 0.4 s of CPU time whatever the machine's speed: the
        // sample count follows it (a fixed amount of work gave 194
        // samples on a faster machine).
        "import time\n\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nwhile time.process_time() < 0.4:\n    fib(20)\nprint('done')\n",
    )
    .unwrap();
    let f = dir.join("py.folded");
    let cmd = format!("/usr/bin/python3.11 {}", py.display());
    let (out, err, code) =
        telco_run(&["-e", "probe timer.profile.hz(999) {}", "-c", &cmd, "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("done"), "{out}");
    let stacks = folded(&f);
    let total: u64 = stacks.iter().map(|x| x.1).sum();
    assert!(total >= 200, "{total} samples");
    let rooted: u64 = stacks
        .iter()
        .filter(|(s, _)| s.len() > 3 && s[1] == "_start" && s[2] == "__libc_start_main")
        .map(|x| x.1)
        .sum();
    let eval: u64 = stacks.iter().filter(|(s, _)| s.iter().any(|x| x == "_PyEval_EvalFrameDefault")).map(|x| x.1).sum();
    assert!(rooted * 10 >= total * 9, "{rooted} of {total} samples rooted at _start");
    assert!(eval * 10 >= total * 8, "{eval} of {total} samples in the interpreter's loop");
}

#[test]
fn profile_points_are_listed_and_checked() {
    let (out, _, code) = telco_run(&["-l", "timer.*"]);
    assert_eq!(code, Some(0));
    assert!(out.lines().any(|l| l == "timer.profile") && out.lines().any(|l| l == "timer.profile.hz(number)"), "{out}");
    let (_, err, code) = telco_run(&["-e", "probe timer.profile.hz(0) {}", "-p", "1", "--last-pass", "2"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("profiling rate is out of range"), "{err}");
    let (_, err, code) = telco_run(&["-e", "probe timer.profile { println($arg1) }", "-p", "1", "--last-pass", "2"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("timer.profile"), "{err}");
    // A profile needs a process.
    let dir = scratch("profile-cli");
    let f = dir.join("x.folded");
    let (_, err, code) = telco_run(&["-e", "probe begin { exit() }", "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("-p PID or -c CMD"), "{err}");
}

#[test]
fn cxx_frames_are_demangled() {
    let dir = scratch("profile-cxx");
    let src = dir.join("shapes.cc");
    std::fs::write(
        &src,
        r#"#include <cstdio>
#include <ctime>
namespace geo {
struct Widget {
    long n;
    __attribute__((noinline)) long draw(long k) {
        long x = 0;
        for (long i = 0; i < k; i++) { x += i * n; __asm__ volatile("" : "+r"(x)); }
        return x;
    }
};
}
int main() {
    geo::Widget w{3};
    long s = 0;
    // At least 0.3 s of CPU time whatever the machine's speed (the
    // sample count follows it).
    while (std::clock() < CLOCKS_PER_SEC * 3 / 10) s += w.draw(200000);
    std::printf("done %ld\n", s & 1);
}
"#,
    )
    .unwrap();
    let exe = dir.join("shapes");
    compile(&[&src], &exe, &["-O2"]);
    let f = dir.join("c.folded");
    let (out, err, code) = telco_run(&[
        "-e",
        "probe timer.profile.hz(999) {}",
        "-c",
        exe.to_str().unwrap(),
        "--folded",
        f.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("done"), "{out}");
    let stacks = folded(&f);
    let total: u64 = stacks.iter().map(|x| x.1).sum();
    let in_draw: u64 =
        stacks.iter().filter(|(s, _)| s.last().is_some_and(|l| l == "geo::Widget::draw(long)")).map(|x| x.1).sum();
    assert!(total >= 100 && in_draw * 10 >= total * 8, "{in_draw} of {total} in geo::Widget::draw(long):\n{stacks:?}");
}

#[test]
fn samples_go_into_the_perfetto_trace() {
    let dir = scratch("profile-perfetto");
    let exe = build(&dir, "profile", &[]);
    let trace = dir.join("p.pftrace");
    let cmd = format!("{} threads 30000", exe.display());
    let (_, err, code) =
        telco_run(&["-e", "probe timer.profile.hz(999) {}", "-c", &cmd, "--perfetto", trace.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("timer.profile: ") && err.contains("--perfetto"), "{err}");
    let v = viewer_check(&trace).expect("Perfetto's trace processor loads the trace");
    assert_eq!(v["errors"], serde_json::json!([]), "{v}");
    let rows = v["perf_samples"].as_array().expect("perf_samples");
    for (thread, work) in [("alpha", "alpha_work"), ("beta", "beta_work")] {
        let of = |leaf: Option<&str>| -> u64 {
            rows.iter()
                .filter(|r| r["thread_name"] == thread && leaf.is_none_or(|l| r["leaf"] == l))
                .map(|r| r["n"].as_u64().unwrap())
                .sum()
        };
        let (mine, all) = (of(Some(work)), of(None));
        // About 400 each (30000 rounds of 40000 iterations at 999 Hz).
        assert!(all >= 200 && mine * 10 >= all * 9, "{thread}: {mine} of {all} samples in {work}: {rows:?}");
    }
    // Thread stacks are rooted where threads start.
    let roots: Vec<&str> =
        v["perf_sample_roots"].as_array().unwrap().iter().map(|r| r["root"].as_str().unwrap()).collect();
    assert!(roots.iter().all(|r| ["clone3", "clone", "_start"].contains(r)), "{roots:?}");
}

/// Where perf events are refused, threads are sampled by stopping them
/// with ptrace (forced here with TELCO_PROFILE_SAMPLER=ptrace): coarser
/// (at most 100 samples a second a thread, each weighted by the CPU time
/// since the last), said with a warning, and the stacks the same.
#[test]
fn the_fallback_sampler_works_without_perf_events() {
    let dir = scratch("profile-fallback");
    let exe = build(&dir, "profile", &[]);
    let f = dir.join("f.folded");
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap"))
            .args(args)
            .env("TELCO_PROFILE_SAMPLER", "ptrace")
            .output()
            .expect("run telco-stap");
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
            o.status.code(),
        )
    };
    let cmd = format!("{} split 150000", exe.display());
    let (out, err, code) = run(&["-c", &cmd, "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("done"), "{out}");
    assert!(err.contains("sampling by stopping threads with ptrace"), "{err}");
    let stacks = folded(&f);
    let count =
        |leaf: &str| stacks.iter().filter(|(s, _)| s.last().is_some_and(|l| l == leaf)).map(|x| x.1).sum::<u64>();
    let (h, c) = (count("hot"), count("cold"));
    // About 50 samples a second for 2 s: a loose bound (the split itself
    // is checked above, with perf events).
    assert!(h + c >= 40 && h > c && h * 100 >= (h + c) * 55, "hot {h}, cold {c}: {stacks:?}");
    assert!(stacks.iter().all(|(s, _)| s.join(";").contains("_start;__libc_start_main")), "{stacks:?}");
    let cmd = format!("{} threads 40000", exe.display());
    let (_, err, code) = run(&["-c", &cmd, "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let stacks = folded(&f);
    for (thread, work) in [("alpha", "alpha_work"), ("beta", "beta_work")] {
        let n: u64 =
            stacks.iter().filter(|(s, _)| s[0] == thread && s.last().is_some_and(|l| l == work)).map(|x| x.1).sum();
        assert!(n >= 10, "{thread}: {n} samples in {work}: {stacks:?}");
    }
}

/// A sample in a signal handler unwinds through the signal frame into
/// the code the signal interrupted, down to `_start`.
///
/// The program's SIGPROF timer and the samples both count CPU time, and
/// the handler runs right after each tick of the timer: at 999 Hz (a
/// period of 1.001 ms against the kernel's tick) the samples kept the same
/// phase against the handler for a whole run, and landed in it 0 to 55
/// times by chance. 773 Hz is no fraction of the tick: the phase sweeps.
#[test]
fn samples_in_a_signal_handler_reach_the_interrupted_code() {
    let dir = scratch("profile-handler");
    let exe = build(&dir, "profile", &[]);
    let f = dir.join("h.folded");
    let cmd = format!("{} handler {ROUNDS}", exe.display());
    let (out, err, code) =
        telco_run(&["-e", "probe timer.profile.hz(773) {}", "-c", &cmd, "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("done"), "{out}");
    let stacks = folded(&f);
    let in_handler: Vec<String> = stacks
        .iter()
        .filter(|(s, _)| s.last().is_some_and(|l| l == "handler_work"))
        .map(|(s, n)| format!("{} {n}", s.join(";")))
        .collect();
    let n: u64 = in_handler.iter().filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok()).sum();
    assert!(n >= 8, "{n} samples in the handler: {stacks:?}");
    for l in &in_handler {
        assert!(
            l.starts_with("profile;_start;__libc_start_main;")
                && l.contains(";main;run;")
                && l.contains(";[signal handler called];"),
            "not unwound through the signal frame: {l}"
        );
    }
}

/// With a return probe on `run`, its return address on the stack is a
/// trampoline's: samples below it go on to main through the thread's
/// shadow stack (frame pointers or not).
#[test]
fn samples_unwind_through_return_probes() {
    let dir = scratch("profile-returns");
    let exe = build(&dir, "profile", &["-fomit-frame-pointer"]);
    let f = dir.join("r.folded");
    let cmd = format!("{} split {ROUNDS}", exe.display());
    let script = "global n probe process.function(\"run\").return { n++ } probe timer.profile.hz(999) {} probe end { println(n) }";
    let (out, err, code) = telco_run(&["-e", script, "-c", &cmd, "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().any(|l| l == "1"), "the return probe ran once: {out}");
    let stacks = folded(&f);
    let leaf = |s: &Vec<String>| s.last().is_some_and(|l| l == "hot" || l == "cold");
    let all: u64 = stacks.iter().filter(|(s, _)| leaf(s)).map(|x| x.1).sum();
    let rooted: u64 = stacks
        .iter()
        .filter(|(s, _)| leaf(s) && s.join(";").contains("_start;__libc_start_main;__libc_start_call_main;main;run;"))
        .map(|x| x.1)
        .sum();
    assert!(all >= 200 && rooted * 100 >= all * 99, "{rooted} of {all} samples reach main: {stacks:?}");
    around_75("with a return probe", share(&stacks, "hot", "cold"));
}

/// Samples taken in the probes' own code — an entry or return trampoline
/// (lean, or saving every register for `uaddr()`), a statement's, the
/// relocated first instructions, a compiled handler, the runtime library —
/// go on to main like any other: that time is `[telco-stap]`, right under
/// the probed function (or, after a return, its caller), never `[unknown]`.
/// Built without frame pointers; tiny() is called millions of times, so a
/// good part of the samples land in our code.
#[test]
fn samples_in_trampolines_and_handlers_reach_main() {
    let dir = scratch("profile-own");
    let exe = build(&dir, "profile", &["-fomit-frame-pointer", "-g"]);
    let source = std::fs::read_to_string(repo().join("tests/programs/profile.c")).expect("the source");
    let line = source.lines().position(|l| l.contains("/* statement probe */")).expect("the marked line") + 1;
    let cmd = format!("{} calls 25000000", exe.display());
    let scripts = [
        ("lean", r#"global n probe process.function("tiny") { n++ } probe process.function("tiny").return { n++ }"#.to_string()),
        (
            "full",
            r#"global n probe process.function("tiny") { if (uaddr()) n++ } probe process.function("tiny").return { if ($return) n++ }"#
                .to_string(),
        ),
        ("statement", format!(r#"global n probe process.statement("calls@profile.c:{line}") {{ n++ }}"#)),
    ];
    for (what, probes) in scripts {
        let f = dir.join(format!("{what}.folded"));
        let script = format!("{probes} probe timer.profile.hz(999) {{}} probe end {{ println(n > 0) }}");
        let (out, err, code) = telco_run(&["-e", &script, "-c", &cmd, "--folded", f.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{what}: {err}");
        assert!(out.lines().any(|l| l == "1"), "{what}: the probes ran: {out}");
        let stacks = folded(&f);
        let in_calls: Vec<&(Vec<String>, u64)> =
            stacks.iter().filter(|(s, _)| s.iter().any(|x| x == "calls")).collect();
        let all: u64 = in_calls.iter().map(|x| x.1).sum();
        let rooted: u64 = in_calls
            .iter()
            .filter(|(s, _)| s.join(";").contains("_start;__libc_start_main;__libc_start_call_main;main;calls"))
            .map(|x| x.1)
            .sum();
        let own: u64 = in_calls.iter().filter(|(s, _)| s.iter().any(|x| x == "[telco-stap]")).map(|x| x.1).sum();
        assert!(all >= 150 && rooted * 100 >= all * 99, "{what}: {rooted} of {all} samples reach main: {stacks:?}");
        assert!(own * 10 >= all, "{what}: only {own} of {all} samples in the probes' code: {stacks:?}");
        // Not one unknown frame in a hundred under the loop.
        let unknown: u64 = in_calls.iter().filter(|(s, _)| s.iter().any(|x| x == "[unknown]")).map(|x| x.1).sum();
        assert!(unknown * 100 <= all, "{what}: {unknown} of {all} samples with an unknown frame: {stacks:?}");
        for (s, _) in &stacks {
            if let Some(i) = s.iter().position(|x| x == "[telco-stap]") {
                assert!(
                    i > 0 && ["calls", "tiny"].contains(&s[i - 1].as_str()),
                    "{what}: the probes' time is not under the probed function: {}",
                    s.join(";")
                );
            }
        }
    }
}

/// A sample taken in a system call carries the kernel's own frames on top
/// of the user stack (named from /proc/kallsyms, `_[k]` as FlameGraph marks
/// them), as `perf record -g` shows them: reads of /dev/zero spend their
/// time in the kernel, under the program's `read`.
#[test]
fn samples_in_system_calls_show_the_kernels_frames() {
    let dir = scratch("profile-kernel");
    let exe = build(&dir, "profile", &[]);
    let f = dir.join("k.folded");
    let cmd = format!("{} syscalls 200000", exe.display());
    let (_, err, code) =
        telco_run(&["-e", "probe timer.profile.hz(999) {}", "-c", &cmd, "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let stacks = folded(&f);
    let under: Vec<&(Vec<String>, u64)> = stacks.iter().filter(|(s, _)| s.iter().any(|x| x == "zeroes")).collect();
    let all: u64 = under.iter().map(|x| x.1).sum();
    let kernel: u64 = under
        .iter()
        .filter(|(s, _)| {
            let user = s.iter().position(|x| x == "zeroes").unwrap_or(0);
            let k = s.iter().position(|x| x.ends_with("_[k]"));
            // Kernel frames above the user stack's, a system call's entry
            // among them, the program's stack below reaching _start.
            k.is_some_and(|k| k > user)
                && s.iter().any(|x| x.ends_with("_[k]") && x.to_lowercase().contains("syscall"))
                && s.join(";").contains("_start;__libc_start_main;__libc_start_call_main;main;zeroes;")
        })
        .map(|x| x.1)
        .sum();
    assert!(all >= 100 && kernel * 10 >= all * 8, "{kernel} of {all} samples with the kernel's frames: {stacks:?}");
}

/// In a `timer.profile` probe, `usymname()` names the vDSO's functions
/// (the kernel's one image, read in pass 2 from the tracer's own), where a
/// program calling clock_gettime spends its time: no sample's function is
/// a bare address.
#[test]
fn the_vdso_is_named_in_the_probe() {
    let dir = scratch("profile-vdso");
    let exe = build(&dir, "profile", &[]);
    let cmd = format!("{} clock 20000000", exe.display());
    let script = "global n probe timer.profile.hz(999) { n[usymname(uaddr())]++ } \
                  probe end { foreach (k in n-) printf(\"fn %s %d\\n\", k, n[k]) }";
    let (out, err, code) = telco_run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let counts: Vec<(&str, u64)> = out
        .lines()
        .filter_map(|l| l.strip_prefix("fn ")?.rsplit_once(' '))
        .filter_map(|(k, n)| Some((k, n.parse().ok()?)))
        .collect();
    let all: u64 = counts.iter().map(|c| c.1).sum();
    let vdso: u64 = counts.iter().filter(|c| c.0.contains("vdso")).map(|c| c.1).sum();
    let bare: u64 = counts.iter().filter(|c| c.0.starts_with("0x")).map(|c| c.1).sum();
    assert!(all >= 100 && vdso * 2 >= all, "{vdso} of {all} samples in the vDSO: {out}");
    assert!(bare * 100 <= all, "{bare} of {all} samples unnamed: {out}");
}

/// A stripped program's functions are named in every profile file as
/// `-l`, `usymname()` and backtraces name them (`sub_` and the file
/// offset of their start, from the unwind table), not all as the module:
/// the split between hot and cold shows under their `sub_` names.
#[test]
fn a_stripped_program_s_functions_are_named_as_l_names_them() {
    let dir = scratch("profile-stripped");
    let exe = build(&dir, "full", &[]);
    let stripped = dir.join("stripped");
    assert!(Command::new("strip").arg("-o").arg(&stripped).arg(&exe).status().expect("strip").success());
    // The offsets of hot and cold, from the program before strip (a PIE's
    // text: addresses are file offsets).
    let nm = String::from_utf8_lossy(&Command::new("nm").arg(&exe).output().expect("nm").stdout).into_owned();
    let sub = |name: &str| {
        let line = nm.lines().find(|l| l.ends_with(&format!(" {name}"))).expect("symbol");
        format!("sub_{:x}", u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap())
    };
    let (hot, cold) = (sub("hot"), sub("cold"));
    let f = dir.join("p.folded");
    let (out, err, code) = telco_run(&[
        "-e",
        "probe timer.profile.hz(999) {}",
        "-c",
        &format!("{} split {ROUNDS}", stripped.display()),
        "--folded",
        f.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("done"), "{out}");
    let stacks = folded(&f);
    around_75("folded, stripped", share(&stacks, &hot, &cold));
    let (listed, _, _) = telco_run(&["-l", &format!("process(\"{}\").function(\"*\")", stripped.display())]);
    for name in [&hot, &cold] {
        assert!(listed.contains(&format!(".function(\"{name}\")")), "-l does not name {name}:\n{listed}");
    }
    assert!(
        !stacks.iter().any(|(s, _)| s.iter().skip(1).any(|f| f == "[stripped]")),
        "a frame of a known function named as the module"
    );
}

/// telco-stap `args`, killed after two minutes (a hung program is a
/// failure, not a stuck suite): stdout, stderr, exit code.
fn bounded(args: &[&str]) -> (String, String, Option<i32>) {
    let o = telco_bounded(args, 120);
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned(), o.status.code())
}

/// Sum of the folded lines whose stack holds every one of `parts` (in
/// order, anywhere).
fn under(stacks: &[(Vec<String>, u64)], parts: &[&str]) -> u64 {
    stacks
        .iter()
        .filter(|(s, _)| {
            let mut at = 0;
            parts.iter().all(|p| match s[at..].iter().position(|f| f == p) {
                Some(i) => {
                    at += i + 1;
                    true
                }
                None => false,
            })
        })
        .map(|x| x.1)
        .sum()
}

/// "waited N" (ns) as the program measured it.
fn waited(out: &str) -> u64 {
    out.lines().find_map(|l| l.strip_prefix("waited ")?.parse().ok()).unwrap_or_else(|| panic!("no waited line: {out}"))
}

fn within(what: &str, got: u64, want: u64, pct: u64) {
    assert!(got * 100 >= want * (100 - pct) && got * 100 <= want * (100 + pct), "{what}: {got}, not {want} ± {pct}%");
}

/// `--off-cpu`: a thread that burns 5 ms then sleeps 15 ms, 40 times.
/// Every file is of wall-clock time: burn() a quarter, rest() three
/// quarters (its leaf `[off-cpu] clock_nanosleep`), within 5 points in
/// the folded file, the SVG, speedscope (weights) and pprof (cpu plus
/// off_cpu); the pprof `cpu` values alone still put the CPU time in burn;
/// the Perfetto trace has each sleep as a slice on the thread's track.
/// The quarter is the one the program measured around its calls: on a
/// loaded machine (the suite's tests run in parallel on two CPUs) the
/// sleeper wakes late and the spinner is preempted, and the profile must
/// say so.
#[test]
fn off_cpu_time_splits_a_burn_and_a_sleep() {
    let dir = scratch("offcpu-split");
    let exe = dir.join("offcpu");
    gcc("offcpu.c", &exe, &[]);
    let (f, svg, ss, pp, pf) =
        (dir.join("w.folded"), dir.join("w.svg"), dir.join("w.json"), dir.join("w.pb.gz"), dir.join("w.pftrace"));
    let cmd = format!("{} split 40", exe.display());
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let (out, err, code) = bounded(&[
        "-e",
        "probe timer.profile.hz(999) {}",
        "-c",
        &cmd,
        "--off-cpu",
        "--folded",
        &path(&f),
        "--flamegraph",
        &path(&svg),
        "--speedscope",
        &path(&ss),
        "--pprof",
        &path(&pp),
        "--perfetto",
        &path(&pf),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("done"), "{out}");
    // The split the program measured (a quarter, where the machine wakes
    // the sleeper on time; a loaded one wakes it late).
    let (b, r): (f64, f64) = out
        .lines()
        .find_map(|l| {
            let mut w = l.strip_prefix("split ")?.split(' ').map(|x| x.parse::<f64>().ok());
            Some((w.next()??, w.next()??))
        })
        .unwrap_or_else(|| panic!("no split line: {out}"));
    let want = 100.0 * b / (b + r);
    assert!((10.0..=40.0).contains(&want), "the program measured {want:.1}% in burn");
    let quarter = |what: &str, burn: f64, rest: f64| {
        let pct = 100.0 * burn / (burn + rest);
        assert!((pct - want).abs() <= 5.0, "{what}: burn has {pct:.1}% of the wall-clock time, not {want:.1} ± 5");
    };
    // Folded: microseconds. The sleeps: 40 of 15 ms (and the wake-ups'
    // delay): the time the program measured in rest().
    let stacks = folded(&f);
    let (burn, rest) = (under(&stacks, &["main", "burn"]), under(&stacks, &["main", "rest"]));
    let slept = under(&stacks, &["main", "rest", "[off-cpu] clock_nanosleep"]);
    assert!(slept >= 600_000, "{slept} µs asleep in rest: {stacks:?}");
    within("µs asleep in rest", slept * 1000, r as u64, 10);
    quarter("folded", burn as f64, rest as f64);
    let text = std::fs::read_to_string(&svg).expect("the SVG");
    assert!(text.contains("wall-clock"), "the flame graph's title");
    quarter("flame graph", svg_percent(&text, "burn"), svg_percent(&text, "rest"));
    let v = check("speedscope", &ss);
    assert_eq!(v["valid"], true, "the speedscope file is not valid: {}", v["errors"]);
    let (mut b, mut r) = (0u64, 0u64);
    for p in v["profiles"].as_array().expect("profiles") {
        for (s, w) in p["samples"].as_array().unwrap().iter().zip(p["weights"].as_array().unwrap()) {
            let names: Vec<&str> = s.as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
            let w = w.as_u64().unwrap();
            if names.contains(&"burn") {
                b += w;
            } else if names.contains(&"rest") {
                r += w;
            }
        }
    }
    quarter("speedscope", b as f64, r as f64);
    let v = check("pprof", &pp);
    assert_eq!(
        v["sampleTypes"],
        serde_json::json!([["samples", "count"], ["cpu", "nanoseconds"], ["off_cpu", "nanoseconds"]])
    );
    let (mut cpu, mut off) = (HashMap::<&str, u64>::new(), HashMap::<&str, u64>::new());
    for s in v["samples"].as_array().expect("samples") {
        let names: Vec<&str> = s["stack"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        let Some(k) = ["burn", "rest"].into_iter().find(|k| names.contains(k)) else { continue };
        *cpu.entry(k).or_default() += s["values"][1].as_u64().unwrap();
        *off.entry(k).or_default() += s["values"][2].as_u64().unwrap();
    }
    let (cb, cr) = (cpu.get("burn").copied().unwrap_or(0), cpu.get("rest").copied().unwrap_or(0));
    assert!(cb >= 50_000_000 && cr * 20 <= cb, "CPU time: burn {cb} ns, rest {cr} ns");
    quarter("pprof", (cb + off.get("burn").unwrap_or(&0)) as f64, (cr + off.get("rest").unwrap_or(&0)) as f64);
    // Perfetto: the 40 sleeps, each a slice on the thread's track.
    let v = viewer(&pf);
    assert_eq!(v["errors"], serde_json::json!([]), "{v}");
    let sleeps: Vec<u64> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["slices"].as_array().into_iter().flatten())
        .filter(|s| s["name"] == "[off-cpu] clock_nanosleep")
        .map(|s| s["dur_ns"].as_u64().unwrap())
        .collect();
    // (A timer may fire a few µs before its time, at its slack's start.)
    assert!((40..=42).contains(&sleeps.len()), "{sleeps:?}");
    assert!(sleeps.iter().filter(|&&d| d >= 14_900_000).count() >= 40, "{sleeps:?}");
    within("the sleep slices' ns", sleeps.iter().sum(), r as u64, 10);
}

/// Two threads and a mutex held 10 ms at a time: the waiting thread's
/// time under its lock call (`waiter_lock`, `[off-cpu] futex`) is the time
/// it measured itself waiting, within 10%.
#[test]
fn a_mutex_wait_is_under_the_lock_call() {
    let dir = scratch("offcpu-mutex");
    let exe = dir.join("offcpu");
    gcc("offcpu.c", &exe, &[]);
    let f = dir.join("m.folded");
    let cmd = format!("{} mutex 30", exe.display());
    let (out, err, code) = bounded(&["-c", &cmd, "--off-cpu", "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let stacks = folded(&f);
    let locked = under(&stacks, &["waiter", "waiter_lock", "[off-cpu] futex"]);
    // (30 holdings of 10 ms: the waiter catches most, all but the few a
    // loaded machine keeps it from.)
    assert!(waited(&out) >= 100_000_000, "the waiter hardly waited: {out}");
    within("µs in waiter_lock's futex", locked * 1000, waited(&out), 10);
}

/// A thread blocked in read(2) on a pipe for 300 ms: the wait is `read`'s,
/// under reader(), in the folded file and in a `process.blocked` probe,
/// whose `$duration` is the time the program measured.
#[test]
fn a_read_on_a_pipe_is_a_wait_in_read() {
    let dir = scratch("offcpu-pipe");
    let exe = dir.join("offcpu");
    gcc("offcpu.c", &exe, &[]);
    let f = dir.join("r.folded");
    let cmd = format!("{} pipe 300", exe.display());
    let script = r#"global waits
        probe process.blocked { waits[$syscall] <<< $duration
            if ($syscall == "read") { printf("blocked read %d\n", $duration); print_ubacktrace() } }
        probe end { printf("reads %d\n", @count(waits["read"])) }"#;
    let (out, err, code) = bounded(&["-e", script, "-c", &cmd, "--off-cpu", "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let want = waited(&out);
    let stacks = folded(&f);
    within("µs in reader's read", under(&stacks, &["main", "reader", "read", "[off-cpu] read"]) * 1000, want, 10);
    let got: Vec<u64> = out.lines().filter_map(|l| l.strip_prefix("blocked read ")?.parse().ok()).collect();
    assert_eq!(got.len(), 1, "{out}");
    within("$duration", got[0], want, 10);
    assert!(out.contains(" : reader+"), "the backtrace of the wait: {out}");
    assert!(out.contains("reads 1\n"), "{out}");
}

/// python3.11 in `time.sleep(0.3)`: 300 ms in clock_nanosleep under the
/// interpreter's loop.
#[test]
fn python_waits_in_time_sleep() {
    let dir = scratch("offcpu-python");
    let py = dir.join("sleep.py");
    std::fs::write(&py, "import time\n\ndef waiting():\n    time.sleep(0.3)\n\nwaiting()\nprint('done')\n").unwrap();
    let f = dir.join("py.folded");
    let cmd = format!("/usr/bin/python3.11 {}", py.display());
    let (out, err, code) = bounded(&["-c", &cmd, "--off-cpu", "--folded", f.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("done"), "{out}");
    let stacks = folded(&f);
    let slept = under(&stacks, &["_start", "_PyEval_EvalFrameDefault", "[off-cpu] clock_nanosleep"]);
    // (Python sleeps to a deadline it computed before the call: a few µs
    // less; a loaded machine wakes it late.)
    assert!((295_000..=360_000).contains(&slept), "{slept} µs in time.sleep: {stacks:?}");
}

/// What `--off-cpu` and `process.blocked` refuse.
#[test]
fn off_cpu_refusals() {
    let (_, err, code) = bounded(&["--off-cpu", "-c", "true"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("--off-cpu") && err.contains("--folded"), "{err}");
    let (_, err, code) =
        bounded(&["--off-cpu", "--folded", "/dev/null", "--pyroscope", "http://127.0.0.1:1", "-c", "true"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (_, err, code) = bounded(&["-e", "probe process.blocked { println($x) }", "-c", "true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("`$x` is not available") && err.contains("$duration"), "{err}");
    let (_, err, code) = bounded(&["-e", r#"probe process("/bin/true").blocked { println($duration) }"#, "-c", "true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("takes no program"), "{err}");
    let (_, err, code) = bounded(&["-e", "probe timer.profile { println($duration) }", "-c", "true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("`$duration`"), "{err}");
    // The processes are named.
    let (_, err, code) = bounded(&["-e", "probe process.blocked { }"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("-p PID or -c CMD"), "{err}");
    // Where perf events are refused (forced here), waits have no
    // fallback: said, and the session fails.
    let o = Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(["-e", "probe process.blocked { }", "-c", "true"])
        .env("TELCO_PROFILE_SAMPLER", "ptrace")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("off-CPU time") && err.contains("kernel samples"), "{err}");
}
