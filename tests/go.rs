//! Go programs (issue: Go programs named, probed and profiled safely).
//! Built here with Debian's golang-go (Go 1.19), stripped (`-s -w`), as a
//! position-independent and as a fixed-address executable, and with cgo;
//! Debian's fzf (a stripped Go program). `.ci/run` installs both.
//!
//! * Names: Go functions are listed by their Go names from `.gopclntab`,
//!   which stripped binaries keep.
//! * Profiles: the CPU split between main.hot and main.cold shows under
//!   their Go names, and their caller, though they make no frame.
//! * Probes on Go functions' entries: exact counts while a thousand
//!   goroutines grow and copy their stacks, `$argN` by Go's register ABI,
//!   `goid()`; Go's preemption, collector and runtime/pprof's own CPU
//!   profile go on beside them and `timer.profile`; what cannot be probed
//!   safely is refused, located, with why.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// tests/programs/`src` built into `dir` with `flags` (and cgo linked in
/// when `cgo`).
fn go_build_from(dir: &Path, src: &str, name: &str, flags: &[&str], cgo: bool) -> PathBuf {
    let exe = dir.join(name);
    let pkg = dir.join(format!("{name}-src"));
    std::fs::create_dir_all(&pkg).expect("source dir");
    std::fs::copy(common::repo().join("tests/programs").join(src), pkg.join("main.go")).expect("copy the source");
    if cgo {
        // Every thread a pthread, the thread pointer the C library's.
        std::fs::write(pkg.join("cgo.go"), "package main\n\nimport _ \"runtime/cgo\"\n").expect("cgo.go");
    }
    let out = Command::new("go")
        .arg("build")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(".")
        .current_dir(&pkg)
        // Everything of the build in the test's scratch directory; no
        // network (the program has no dependencies).
        .env("GOCACHE", dir.join("gocache"))
        .env("GOPATH", dir.join("gopath"))
        .env("HOME", dir)
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-buildvcs=false")
        .env("GO111MODULE", "off")
        .env("CGO_ENABLED", if cgo { "1" } else { "0" })
        .output()
        .expect("run go build (Debian's golang-go: .ci/run installs it)");
    assert!(out.status.success(), "go build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// tests/programs/gospin.go built into `dir` with `flags`.
fn go_build(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    go_build_from(dir, "gospin.go", name, flags, false)
}

fn builds(dir: &Path) -> Vec<PathBuf> {
    vec![
        go_build(dir, "spin-pie", &["-ldflags=-s -w", "-buildmode=pie"]),
        go_build(dir, "spin-exe", &["-ldflags=-s -w"]),
    ]
}

#[test]
fn stripped_go_functions_are_listed_by_their_go_names() {
    let dir = common::scratch("go-names");
    for exe in builds(&dir) {
        let (out, err, code) =
            common::telco_run(&["-l", &format!("process(\"{}\").function(\"main.*\")", exe.display())]);
        assert_eq!(code, Some(0), "{err}");
        let names: Vec<&str> =
            out.lines().filter_map(|l| l.split(".function(\"").nth(1)?.strip_suffix("\")")).collect();
        assert_eq!(names, ["main.cold", "main.hot", "main.main"], "{}: {out}", exe.display());
    }
    // Debian's fzf: its thousands of Go functions, by name.
    let fzf = "/usr/bin/fzf";
    let (out, err, code) = common::telco_run(&["-l", &format!("process(\"{fzf}\").function(\"*\")")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().count() > 2000, "{} functions", out.lines().count());
    for name in ["main.main", "runtime.mallocgc", "runtime.goexit"] {
        assert!(out.contains(&format!(".function(\"{name}\")")), "fzf's {name} is not listed");
    }
}

#[test]
fn go_profiles_are_named_from_the_function_table() {
    let dir = common::scratch("go-profile");
    for exe in builds(&dir) {
        let folded = dir.join("p.folded");
        let (out, err, code) = common::telco_run(&[
            "-e",
            "probe timer.profile.hz(999) {}",
            "-c",
            &format!("{} 300", exe.display()),
            "--folded",
            folded.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{err}");
        assert!(out.contains("done true"), "{out}");
        let text = std::fs::read_to_string(&folded).expect("the folded file");
        let count = |leaf: &str| -> u64 {
            text.lines()
                .filter_map(|l| l.rsplit_once(' '))
                .filter(|(s, _)| s.rsplit(';').next() == Some(leaf))
                .map(|(_, n)| n.parse::<u64>().unwrap_or(0))
                .sum()
        };
        // main.hot and main.cold make no frame: their caller is found by
        // the frames of Go's function table (`pcsp`), not by the frame
        // pointer, which would skip main.main. (A sample in Go's signal
        // handler, on its own stack, ends at the interrupted frame: the
        // sample copies the signal stack, not the goroutine's.)
        let leaves = text
            .lines()
            .filter(|l| l.rsplit_once(' ').is_some_and(|(s, _)| s.ends_with(".hot") || s.ends_with(".cold")));
        for l in leaves {
            assert!(l.contains(";runtime.main;main.main;main."), "{}: {l}\n{text}", exe.display());
        }
        let (h, c) = (count("main.hot"), count("main.cold"));
        assert!(h + c >= 200, "{}: too few samples: {h} + {c}\n{text}", exe.display());
        let pct = 100.0 * h as f64 / (h + c) as f64;
        assert!((70.0..=80.0).contains(&pct), "{}: main.hot has {pct:.1}%, not 75 ± 5", exe.display());
    }
}

/// tests/programs/gowork.go three ways: stripped and position
/// independent, fixed-address with its symbols, and with cgo (threads
/// that are pthreads).
fn work_builds(dir: &Path) -> Vec<PathBuf> {
    vec![
        go_build_from(dir, "gowork.go", "work-pie", &["-ldflags=-s -w", "-buildmode=pie"], false),
        go_build_from(dir, "gowork.go", "work-exe", &[], false),
        go_build_from(dir, "gowork.go", "work-cgo", &[], true),
    ]
}

/// telco-stap with `args` and `env` added to its environment (which the
/// `-c` command inherits), under a bound: (stdout, stderr, exit code).
fn telco_env(args: &[&str], env: &[(&str, &str)]) -> (String, String, Option<i32>) {
    let o = Command::new("timeout")
        .args(["-s", "KILL", "120"])
        .arg(env!("CARGO_BIN_EXE_telco-stap"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run telco-stap");
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned(), o.status.code())
}

/// A thousand goroutines recurse 200 deep through a probed Go function
/// with a 256-byte local: their stacks start at 8 KiB and are grown and
/// copied several times each (`morestack` starts the function again),
/// and the scheduler moves them between threads. Every call is counted
/// once; `$arg1` is `n`, `$arg2`/`$arg3` the string's pointer and length
/// (Go's register ABI: RAX, RBX, RCX), `goid()` tells the goroutines apart;
/// every return runs its return probe with its own call's `@entry` values.
#[test]
fn go_entry_probes_count_every_call_while_stacks_grow_and_move() {
    let dir = common::scratch("go-stacks");
    let script = "global n, r, bad, deepest, ids, goroutines, dwarf
        probe process.function(\"main.rec\") {
            n++
            if ($arg3 != 5 || user_string_n($arg2, $arg3) != \"hello\") bad++
            if ($arg1 > deepest) deepest = $arg1
            ids[goid()] = 1
        }
        probe process.function(\"main.rec\") {
            # The tapset's reader, and the variables of Go's DWARF where
            # the program keeps it.
            if (go_string_arg(2) != \"hello\") bad++
            if (@defined($n)) {
                if ($n != $arg1 || user_string_n($s->str, $s->len) != \"hello\") bad++
                dwarf++
            }
        }
        # Return probes: each call's own entry values, found by goroutine
        # and depth while the stack moves.
        probe process.function(\"main.rec\").return {
            r++
            if (@entry(goid()) != goid() || @entry($arg1) > 200 || $return < 5) bad++
        }
        probe end {
            foreach (id in ids) goroutines++
            printf(\"n %d r %d bad %d deepest %d goroutines %d dwarf %d\\n\", n, r, bad, deepest, goroutines, dwarf)
        }";
    for exe in work_builds(&dir) {
        let (out, err, code) =
            telco_env(&["-e", script, "-c", &format!("{} stacks 1000 200", exe.display())], &[("GOMAXPROCS", "4")]);
        assert_eq!(code, Some(0), "{}: {err}", exe.display());
        assert!(out.contains("rec 201000"), "{}: {out}", exe.display());
        // The stripped build has no DWARF; the others read `$n`, `$s`.
        let dwarf = if exe.ends_with("work-pie") { 0 } else { 201000 };
        let want = format!("n 201000 r 201000 bad 0 deepest 200 goroutines 1000 dwarf {dwarf}");
        assert!(out.contains(&want), "{}: {out}\n{err}", exe.display());
        assert!(!err.contains("Skipped") && !err.contains("WARNING"), "{}: {err}", exe.display());
    }
}

/// Probes on a Go function called 8 million times by four spinning
/// goroutines while another runs the collector in a loop (Go stops the
/// world and preempts goroutines with SIGURG), runtime/pprof samples its
/// own CPU profile with SIGPROF, and `timer.profile` samples the threads:
/// exact counts, both profiles, and the program ends as it would.
#[test]
fn go_signals_collector_and_pprof_go_on_beside_probes_and_profiles() {
    let dir = common::scratch("go-preempt");
    let exe = go_build_from(&dir, "gowork.go", "work", &[], false);
    let pprof = dir.join("cpu.pprof");
    let folded = dir.join("p.folded");
    let script = "global n, samples
        probe process.function(\"main.step\") { n++ }
        probe timer.profile.hz(499) { samples++ }
        probe end { printf(\"n %d sampled %d\\n\", n, samples > 0) }";
    let (out, err, code) = telco_env(
        &["-e", script, "-c", &format!("{} preempt 2000000", exe.display()), "--folded", folded.to_str().unwrap()],
        &[("GOWORK_PPROF", pprof.to_str().unwrap()), ("GOMAXPROCS", "4")],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("step 8000000 gc true"), "{out}\n{err}");
    assert!(out.contains("n 8000000 sampled 1"), "{out}\n{err}");
    // Go's own profile, read by Go's own tool.
    let top = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(&exe)
        .arg(&pprof)
        .env("HOME", &dir)
        .env("GOCACHE", dir.join("gocache"))
        .output()
        .expect("go tool pprof");
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(top.status.success(), "{}", String::from_utf8_lossy(&top.stderr));
    // Its samples: in Go's code, or in our probes' (a probe on an 8 M-call
    // function costs more than its body: most of Go's few samples land in
    // our trampolines, which Go's profiler counts as
    // `runtime._ExternalCode`; once no sample of 16 fell in main.step).
    let samples = text.lines().find_map(|l| l.split("Total samples = ").nth(1)).unwrap_or("0");
    assert!(text.contains("Type: cpu") && !samples.starts_with("0"), "{text}");
    assert!(text.contains("main.") || text.contains("runtime._ExternalCode"), "{text}");
    // Ours names Go's frames.
    let ours = std::fs::read_to_string(&folded).expect("the folded file");
    assert!(ours.lines().any(|l| l.contains("main.step") || l.contains("main.main.func")), "{ours}");
}

/// What cannot be probed safely in a Go program is refused, located,
/// with why, before the program runs: a leaf too small for Go to check
/// its stack (its handlers could not switch stacks safely), its return
/// (no frame, so no epilogue a jump fits), statements inside Go
/// functions.
#[test]
fn unsafe_probes_on_go_functions_are_refused_with_why() {
    let dir = common::scratch("go-refused");
    let exe = go_build_from(&dir, "gowork.go", "work", &[], false);
    for (point, why) in [
        ("process.function(\"main.leaf\")", "not Go's stack-bound check"),
        ("process.function(\"main.leaf\").return", "not Go's stack-bound check"),
        ("process.statement(\"main.rec+4\")", "inside the Go function `main.rec`"),
    ] {
        let script = format!("probe {point} {{ }}");
        let (out, err, code) = common::telco_run(&["-e", &script, "-c", &format!("{} leaf", exe.display())]);
        assert_eq!(code, Some(1), "{point}: {err}");
        assert!(!out.contains("leaf"), "{point}: the program ran: {out}");
        assert!(err.contains("<input>:1:"), "{point}: {err}");
        assert!(err.contains(why), "{point}: {err}");
    }
    // By wildcard: the others are probed, the refused one named.
    let (out, err, code) = common::telco_run(&[
        "-e",
        "global n probe process.function(\"main.[lr]e*\") { n++ } probe end { println(n) }",
        "-c",
        &format!("{} leaf", exe.display()),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("skipped: cannot probe Go function `main.leaf`"), "{err}");
    assert!(out.contains("leaf 1") && out.ends_with("0\n"), "{out}");
}

/// Return probes on Go functions that panic and recover: `main.risky`
/// panics on one call in three and `main.guarded` recovers from it in a
/// deferred function. Every return of both runs its return probe with
/// its own call's `@entry` values and `$return` (Go's first result); the
/// calls the panics unwound are reported, not lost silently; the
/// durations from `@entry` are never negative.
#[test]
fn go_return_probes_see_panics_and_recovers() {
    let dir = common::scratch("go-panics");
    let script = "global g, r, bad, d
        probe process.function(\"main.guarded\").return {
            g++
            i = @entry($arg1)
            if ($return != (i % 3 == 0 ? -1 : 2 * i + 1)) bad++
            t = gettimeofday_ns() - @entry(gettimeofday_ns())
            if (t < 0) bad++
            d <<< t
        }
        probe process.function(\"main.risky\").return {
            r++
            if ($return != 2 * @entry($arg1)) bad++
        }
        probe end { printf(\"guarded %d risky %d bad %d timed %d\\n\", g, r, bad, @count(d)) }";
    for exe in work_builds(&dir) {
        let (out, err, code) = telco_env(&["-e", script, "-c", &format!("{} panics 3000", exe.display())], &[]);
        assert_eq!(code, Some(0), "{}: {err}", exe.display());
        assert!(out.contains("guarded 3000 panicked 1000 sum 6001000\n"), "{}: {out}", exe.display());
        assert!(out.ends_with("guarded 3000 risky 2000 bad 0 timed 3000\n"), "{}: {out}\n{err}", exe.display());
        assert_eq!(
            err,
            "WARNING: 1000 call(s) left by longjmp, an exception or a Go panic: their return probes did not run\n",
            "{}",
            exe.display()
        );
    }
}

/// Calls nested deeper than a goroutine's record keeps: their return
/// probes are skipped and counted, and the calls above them still find
/// their own entries. Ten goroutines recurse 200 deep with 100 frames
/// each: 101 calls a goroutine skipped, 100 returned.
#[test]
fn go_return_probes_too_deep_are_skipped_and_counted() {
    let dir = common::scratch("go-deep");
    let exe = go_build_from(&dir, "gowork.go", "work", &[], false);
    let script = "global r, bad
        probe process.function(\"main.rec\").return { r++; if (@entry($arg1) < 101) bad++ }
        probe end { printf(\"r %d bad %d\\n\", r, bad) }";
    let (out, err, code) = telco_env(
        &[
            "-D",
            "MAXRETURNDEPTH=100",
            "-D",
            "MAXSKIPPED=100000",
            "-e",
            script,
            "-c",
            &format!("{} stacks 10 200", exe.display()),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.ends_with("rec 2010\nr 1000 bad 0\n"), "{out}\n{err}");
    assert!(err.contains("WARNING: Skipped due to call depth: 1010 ("), "{err}");
    assert!(err.contains("more than 100 deep in one goroutine"), "{err}");
}

/// A goroutine that blocks inside a probed call and resumes on another
/// thread: its return probe finds its entry (kept by goroutine, not by
/// thread). `main.wait` returns 10i, +1 when the program saw it move;
/// the program runs until 50 calls moved.
#[test]
fn go_return_probes_follow_goroutines_across_threads() {
    let dir = common::scratch("go-migrate");
    let script = "global n, moved, bad
        probe process.function(\"main.wait\").return {
            n++
            m = tid() != @entry(tid())
            moved += m
            if ($return != 10 * @entry($arg2) + m) bad++
        }
        probe end { printf(\"returns %d moved %d bad %d\\n\", n, moved, bad) }";
    for exe in work_builds(&dir) {
        let (out, err, code) =
            telco_env(&["-e", script, "-c", &format!("{} migrate", exe.display())], &[("GOMAXPROCS", "4")]);
        assert_eq!(code, Some(0), "{}: {err}", exe.display());
        let (calls, moved) = out
            .lines()
            .find_map(|l| {
                let w: Vec<&str> = l.split(' ').collect();
                (w.len() == 4 && w[0] == "wait").then(|| (w[1].to_string(), w[3].to_string()))
            })
            .unwrap_or_else(|| panic!("{}: {out}", exe.display()));
        assert_eq!(moved, "50", "{}: {out}", exe.display());
        assert!(out.ends_with(&format!("returns {calls} moved 50 bad 0\n")), "{}: {out}\n{err}", exe.display());
        assert!(err.is_empty(), "{}: {err}", exe.display());
    }
}

/// Go's runtime can be probed; a hit on Go's scheduler stack (`g0`:
/// `runtime.newstack` runs there whenever a goroutine's stack grows) runs
/// no handler and is counted in the summary, never lost silently.
#[test]
fn hits_on_go_s_scheduler_stack_are_skipped_and_counted() {
    let dir = common::scratch("go-g0");
    let exe = go_build_from(&dir, "gowork.go", "work", &[], false);
    let (out, err, code) = telco_env(
        &[
            "-D",
            "MAXSKIPPED=1000000",
            "-e",
            "global n probe process.function(\"runtime.newstack\") { n++ } probe end { printf(\"n %d\\n\", n) }",
            "-c",
            &format!("{} stacks 10 200", exe.display()),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("rec 2010") && out.ends_with("n 0\n"), "{out}");
    let skipped = err
        .lines()
        .find_map(|l| l.strip_prefix("WARNING: Skipped in Go's runtime: "))
        .and_then(|r| r.split(' ').next()?.parse::<u64>().ok());
    assert!(skipped.is_some_and(|n| n > 0), "{err}");
}

/// Debian's fzf, stripped: its Go functions probed by their Go names.
#[test]
fn fzf_is_probed_by_go_name() {
    let (out, err, code) = common::telco_run(&[
        "-e",
        "global n probe process(\"/usr/bin/fzf\").function(\"main.main\") { n++ } probe end { printf(\"n %d\\n\", n) }",
        "-c",
        "/usr/bin/fzf --version",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.ends_with("n 1\n"), "{out}\n{err}");
}

/// Return probes on every function of fzf's own packages (a real,
/// stripped Go program, hundreds of functions with several returns each)
/// while it filters 20,000 lines on its goroutines: its output is the
/// untraced one, and each line went through `util.ToChars` and
/// `(*ChunkList).Push` once, each return seen once.
#[test]
fn fzf_s_functions_take_return_probes() {
    let dir = common::scratch("go-fzf");
    let lines: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    let input = dir.join("lines.txt");
    std::fs::write(&input, lines).unwrap();
    let fzf = format!("/usr/bin/fzf --filter 77 < {}", input.display());
    let untraced = Command::new("sh").args(["-c", &fzf]).output().expect("fzf");
    let script = "global r
        probe process(\"/usr/bin/fzf\").function(\"github.com/junegunn/fzf/src*\").return { r[ppfunc()]++ }
        probe end {
            printf(\"ToChars %d Push %d\\n\", r[\"github.com/junegunn/fzf/src/util.ToChars\"],
                   r[\"github.com/junegunn/fzf/src.(*ChunkList).Push\"])
        }";
    let cmd = format!("sh -c '{fzf}'");
    let (out, err, code) = common::telco_run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let want = format!("{}ToChars 20000 Push 20000\n", String::from_utf8_lossy(&untraced.stdout));
    assert_eq!(out, want, "{err}");
}
