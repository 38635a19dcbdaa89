//! Function probes in real target processes, through the binary: each
//! target (tests/programs/probed.c, built here with gcc) runs with and
//! without tracing; its own output must be identical and the script's
//! counts exact. Readiness is always a line on a pipe.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};

mod common;
use common::telco_run as run;

fn build(name: &str, flags: &[&str]) -> PathBuf {
    let exe = common::scratch("target").join(name);
    common::gcc("probed.c", &exe, flags);
    exe
}

/// The end of `probed wait N` after the tracing: on "go" it makes its N
/// calls of work (2i + 1 each) and says so, on "end" it says it again and
/// exits 0.
fn wait_mode_works(mut target: common::Running, calls: i64) {
    target.say("go");
    let worked = target.line();
    let expect: i64 = (0..calls).map(|i| 2 * i + 1).sum();
    assert_eq!(worked, format!("worked {expect}\n"));
    target.say("end");
    let (last, status) = target.finish();
    assert!(status.success());
    assert_eq!(last, format!("wait {expect}\n"));
}

fn untraced(exe: &PathBuf, args: &[&str]) -> String {
    let o = Command::new(exe).args(args).output().expect("run target");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const SHAPES: &str = r#"global n
probe process.function("rip_first"), process.function("cond_first"), process.function("tiny"),
      process.function("loopy"), process.function("work") { n[ppfunc()]++ }
probe end { foreach (f+ in n) printf("%s %d\n", f, n[f]) }"#;

/// RIP-relative first instruction, a conditional jump in the first 5
/// bytes, a function shorter than the jump (padding after it), a loop back
/// to the entry: with and without `endbr64`.
#[test]
fn prologue_shapes_are_probed_exactly() {
    for (name, flags) in [("plain", &[][..]), ("cet", &["-fcf-protection"][..])] {
        let exe = build(name, flags);
        let cmd = format!("{} shapes 1000", exe.display());
        let (out, err, code) = run(&["-e", SHAPES, "-c", &cmd]);
        assert_eq!(code, Some(0), "{name}: {err}");
        assert_eq!(err, "", "{name}");
        let own = untraced(&exe, &["shapes", "1000"]);
        assert_eq!(out, format!("{own}cond_first 1000\nloopy 1000\nrip_first 1000\ntiny 1000\n"), "{name}");
    }
}

#[test]
fn eight_threads_count_exactly() {
    let exe = build("threads", &[]);
    let cmd = format!("{} threads 1000000", exe.display());
    let (out, err, code) =
        run(&["-e", "global n probe process.function(\"work\") { n++ } probe end { println(n) }", "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{}8000000\n", untraced(&exe, &["threads", "1000000"])));
}

/// Statistics updated in 8 target threads (each thread's own copy, updated
/// inline) read the same as the same values added in the tracer (one shared
/// copy, the runtime library's update): count, sum, extremes, histogram.
#[test]
fn statistics_from_threads_match_the_same_values_added_at_the_end() {
    let exe = build("threads-stats", &[]);
    let cmd = format!("{} threads 20000", exe.display());
    let script = "global s, t
        probe process.function(\"work\") { s <<< $arg1 - 10000 }
        probe end {
            for (i = 0; i < 20000; i++) for (k = 0; k < 8; k++) t <<< i - 10000
            printf(\"%d %d %d %d\\n\", @count(s), @sum(s), @min(s), @max(s))
            printf(\"%d %d %d %d\\n\", @count(t), @sum(t), @min(t), @max(t))
            print(@hist_log(s)); print(@hist_log(t))
        }";
    let (out, err, code) = run(&["-D", "MAXACTION=10000000", "-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let own = untraced(&exe, &["threads", "20000"]);
    let ours = out.strip_prefix(own.as_str()).unwrap_or_else(|| panic!("{out}"));
    let at = ours.find("value").expect("a histogram");
    let (lines, hists) = ours.split_at(ours[..at].rfind('\n').map_or(0, |n| n + 1));
    assert_eq!(lines, "160000 -80000 -10000 9999\n160000 -80000 -10000 9999\n");
    // Two histograms, the same text.
    let half = hists.len() / 2;
    assert_eq!(hists[..half], hists[half..], "{hists}");
    assert!(hists.contains("8192 |"), "{hists}");
}

#[test]
fn command_exit_status_and_arguments_pass_through() {
    let exe = build("status", &[]);
    let cmd = format!("{} exit3 5", exe.display());
    let (out, _, code) =
        run(&["-e", "global n probe process.function(\"work\") { n++ } probe end { println(n) }", "-c", &cmd]);
    assert_eq!(code, Some(3), "the command's status");
    assert_eq!(out, "exit3 0\n0\n");
}

/// Attach to a running program, count, detach at exit(): the code is
/// restored byte for byte and the program finishes correctly.
#[test]
fn attach_detach_restores_the_code() {
    let exe = build("attach", &[]);
    let mut target = common::Running::start(&exe, &["wait", "5000"]);
    let addr = u64::from_str_radix(target.ready.trim().trim_start_matches("ready 0x"), 16).expect("address of work");
    let pid = target.pid();
    let read_code = || {
        let f = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open mem");
        let mut buf = [0u8; 32];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, addr).expect("read code");
        buf
    };
    let before = read_code();

    let script = "global n probe begin { println(\"armed\") } probe process.function(\"work\") { n++; if (n == 5000) exit() } probe end { println(n) }";
    let tracer = common::Tracer::start(&["-p", &pid.to_string(), "-e", script], "armed");
    assert_ne!(read_code(), before, "the entry of work is patched while tracing");
    // SIGSEGV (bit 10 of SigCgt) goes to the tracer's crash handler while
    // the session runs, and is the program's default again after it.
    let segv_caught = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let cgt = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).expect("SigCgt");
        u64::from_str_radix(cgt.trim(), 16).expect("mask") & (1 << 10) != 0
    };
    assert!(segv_caught(), "SIGSEGV is handled while tracing");
    // Let the target work; the script exits after 5000 calls.
    target.say("go");
    let (rest, err, code) = tracer.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rest, "5000\n");
    let worked = target.line();
    assert!(worked.starts_with("worked "), "{worked}");
    assert_eq!(read_code(), before, "every patched byte is restored after detach");
    assert!(!segv_caught(), "SIGSEGV has its default action again after detach");
    target.say("end");
    let (last, status) = target.finish();
    assert!(status.success());
    let expect: i64 = (0..5000i64).map(|i| 2 * i + 1).sum();
    assert_eq!(worked, format!("worked {expect}\n"));
    assert_eq!(last, format!("wait {expect}\n"));
}

/// Attaching and detaching again and again leaves the process as it was:
/// every mapping the session made (code regions, the shared region, the
/// thread slots) is gone after each detach, no descriptor stays open, the
/// code is the file's, and the program then works as if never traced.
#[test]
fn attach_detach_cycles_leave_nothing_behind() {
    let exe = build("cycles", &[]);
    let target = common::Running::start(&exe, &["wait", "1000"]);
    let pid = target.pid();
    let maps = || std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).expect("fds").count();
    let (before, fds_before) = (maps(), fds());
    let pid_s = pid.to_string();
    for script in [
        "probe begin { exit() } probe process.function(\"work\") { }",
        "probe begin { exit() } probe process.function(\"work\").return { }",
        "global n probe begin { exit() } probe process.function(\"work\") { n++ } probe end { println(n) }",
    ] {
        // 3 scripts x 17: 51 cycles on one process.
        for _ in 0..17 {
            let (_, err, code) = run(&["-p", &pid_s, "-e", script]);
            assert_eq!(code, Some(0), "{err}");
            assert!(!err.contains("stays mapped"), "{err}");
            assert_eq!(maps(), before, "a mapping left behind by: {script}");
            assert_eq!(fds(), fds_before);
        }
    }
    let calls = 1000;
    wait_mode_works(target, calls);
}

/// The same while 4 threads recurse through return-probed calls: at each
/// detach, threads inside a trampoline step out of it, calls still running
/// get their own return addresses back, and everything is unmapped; the
/// program never sees a wrong result.
#[test]
fn detaching_from_a_busy_process_leaves_nothing_behind() {
    let exe = build("busy", &[]);
    let mut target = common::Running::start(&exe, &["busy"]);
    let pid = target.pid();
    let maps = || std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let before = maps();
    let script =
        "global n probe process.function(\"rec\").return { n++; if (n >= 20000) exit() } probe end { println(n > 0) }";
    for _ in 0..5 {
        let (out, err, code) = run(&["-p", &pid.to_string(), "-e", script]);
        assert_eq!((out.as_str(), code), ("1\n", Some(0)), "{err}");
        assert!(!err.contains("stays mapped"), "{err}");
        assert_eq!(maps(), before);
    }
    target.say("stop");
    let (last, status) = target.finish();
    assert!(status.success());
    assert_eq!(last, "busy 0\n");
}

const RETURNS: &str = r#"global e, r, v
probe process.function("rec"), process.function("jumper"), process.function("work") { e[ppfunc()]++ }
probe process.function("rec").return, process.function("jumper").return, process.function("work").return {
    r[ppfunc()]++; v[ppfunc()] += $return
}
probe end { foreach (k+ in e) printf("%s %d %d %d\n", k, e[k], r[k], v[k]) }"#;

/// Return probes by return-address replacement: deep recursion, longjmp
/// out of probed frames (their returns never happen, later calls are still
/// seen), a probed function called from a signal handler.
#[test]
fn return_probes_survive_recursion_longjmp_and_signals() {
    let exe = build("returns", &[]);
    let cases = [
        // rec(100) 100 times: 101 calls each, $return = depth.
        ("rec", "rec 10100 10100 505000\n"),
        // jumper(5) is left by longjmp: 6 entries, no return, each time.
        ("jump", "jumper 600 0 0\nrec 400 400 600\n"),
        // work(i) from the main loop (sum 10000) and work(1) = 3 from the
        // SIGUSR1 handler, 100 times each.
        ("signal", "work 200 200 10300\n"),
    ];
    for (mode, want) in cases {
        let cmd = format!("{} {mode} 100", exe.display());
        let (out, err, code) = run(&["-e", RETURNS, "-c", &cmd]);
        assert_eq!(code, Some(0), "{mode}: {err}");
        // The calls longjmp left are reported.
        let lost = if mode == "jump" {
            "WARNING: 600 call(s) left by longjmp, an exception or a Go panic: their return probes did not run\n"
        } else {
            ""
        };
        assert_eq!(err, lost, "{mode}");
        assert_eq!(out, format!("{}{want}", untraced(&exe, &[mode, "100"])), "{mode}");
    }
}

/// `@entry` in a return probe, in 8 threads at once.
#[test]
fn entry_values_reach_return_probes_in_threads() {
    let exe = build("entry", &[]);
    let cmd = format!("{} threads 100000", exe.display());
    let script = r#"global n, bad, lat
probe process.function("work").return {
    n++
    if ($return != 2 * @entry($arg1) + 1) bad++
    lat <<< gettimeofday_ns() - @entry(gettimeofday_ns())
}
probe end { printf("%d %d %d\n", n, bad, @count(lat)) }"#;
    let (out, err, code) = run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{}800000 0 800000\n", untraced(&exe, &["threads", "100000"])));
}

/// `@entry` of a script function with statements of its own (a loop, a
/// `try`): the entry handler sets up the MAXACTION budget the function
/// charges (it was left unset, and the first hit failed with "MAXACTION
/// exceeded").
#[test]
fn entry_values_may_call_script_functions() {
    let exe = build("entry-fn", &[]);
    let cmd = format!("{} threads 1000", exe.display());
    let script = r#"global n, bad
function twice:long (x:long) {
    s = 0
    for (i = 0; i < 2; i++) s += x
    try { s += 1 / x - 1 / x } catch { s += 0 }
    return s
}
probe process.function("work").return {
    n++
    if ($return != @entry(twice($arg1)) + 1) bad++
}
probe end { printf("%d %d\n", n, bad) }"#;
    let (out, err, code) = run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("MAXACTION"), "{err}");
    assert_eq!(out, format!("{}8000 0\n", untraced(&exe, &["threads", "1000"])));
}

/// The duration idiom `S <<< gettimeofday_ns() - @entry(gettimeofday_ns())`
/// alone in a return probe is done by the trampolines (no handler call):
/// it measures what the handlers measure (the same body with `+ 0` runs
/// them), every call counted, in threads, in recursion, and for calls of
/// a known least duration.
#[test]
fn durations_timed_by_the_trampolines_match_the_handlers() {
    let exe = build("durations", &[]);
    let script = |extra: &str, f: &str| {
        format!(
            "global lat probe process.function(\"{f}\").return {{ lat <<< gettimeofday_ns() - @entry(gettimeofday_ns()){extra} }}
probe end {{ printf(\"%d %d %d\\n\", @count(lat), @min(lat), @max(lat)) print(@hist_log(lat)) }}"
        )
    };
    let inline = "Pass 5: {f}: calls timed by its trampolines (no handler call)\n";
    // (mode, calls, function, least duration in ns)
    for (mode, n, f, least) in
        [("spin", "50", "spin", 200_000), ("threads", "100000", "work", 0), ("rec", "100", "rec", 0)]
    {
        let want_calls: i64 = match mode {
            "threads" => 800_000,
            "rec" => 10_100,
            _ => 50,
        };
        let cmd = format!("{} {mode} {n}", exe.display());
        for extra in ["", " + 0"] {
            let (out, err, code) = run(&["-vv", "-e", &script(extra, f), "-c", &cmd]);
            assert_eq!(code, Some(0), "{mode}{extra}: {err}");
            // Inline only for the idiom alone.
            let timed = err.contains(&inline.replace("{f}", f));
            assert_eq!(timed, extra.is_empty(), "{mode}{extra}: {err}");
            let own = untraced(&exe, &[mode, n]);
            let rest = out.strip_prefix(&own).unwrap_or_else(|| panic!("{mode}{extra}: {out}"));
            let mut lines = rest.lines();
            let v: Vec<i64> = lines.next().unwrap().split(' ').map(|x| x.parse().unwrap()).collect();
            assert_eq!(v[0], want_calls, "{mode}{extra}: {out}");
            // The program times its calls with CLOCK_MONOTONIC, the probes
            // with the TSC calibrated against CLOCK_REALTIME: the two
            // rates may differ by a few parts in 10^5 (calibration, NTP
            // slewing), so a 200 us call may read a few ns shorter.
            let floor = least - least / 1000;
            assert!(v[1] >= floor && v[1] <= v[2] && v[2] < 10_000_000_000, "{mode}{extra}: {out}");
            // Every call in the histogram, none below the least duration.
            let mut total = 0;
            for l in lines.filter(|l| l.contains('|') && !l.contains("count")) {
                let (value, rest) = l.split_once('|').unwrap();
                let value: i64 = value.trim().parse().unwrap();
                let count: i64 = rest.split_whitespace().last().unwrap().parse().unwrap();
                assert!(count == 0 || 2 * value.max(1) > least, "{mode}{extra}: {out}");
                total += count;
            }
            assert_eq!(total, want_calls, "{mode}{extra}: {out}");
        }
    }
}

/// A command with shell syntax runs through `sh -c 'exec ...'`: the probes
/// go into the program the shell execs.
#[test]
fn shell_commands_probe_the_program_they_exec() {
    let exe = build("shell", &[]);
    let cmd = format!("{} work $((250 * 2))", exe.display());
    let (out, err, code) =
        run(&["-e", "global n probe process.function(\"work\") { n++ } probe end { println(n) }", "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{}500\n", untraced(&exe, &["work", "500"])));
}

/// If the tracer is killed outright, the target keeps running correctly:
/// its hooks stay and the handlers keep working against the still-mapped
/// region (INTERNALS.md, invariant 2).
#[test]
fn the_target_survives_a_killed_tracer() {
    let exe = build("survivor", &[]);
    let target = common::Running::start(&exe, &["wait", "200000"]);
    let script =
        "global n probe begin { println(\"armed\") } probe process.function(\"work\") { n++; printf(\"%d\\n\", n) }";
    let mut tracer = common::Tracer::start(&["-p", &target.pid().to_string(), "-e", script], "armed");
    tracer.child.kill().expect("SIGKILL the tracer");
    tracer.child.wait().expect("reap");
    // The target now runs 200,000 probed calls with nobody draining events.
    let calls = 200_000;
    wait_mode_works(target, calls);
}

/// A forked child inherits the hooks and the shared region: its hits are
/// counted with the parent's (documented in INTERNALS.md), and both
/// processes run correctly.
#[test]
fn forked_children_keep_working_and_are_counted() {
    let exe = build("fork", &[]);
    let cmd = format!("{} fork 1000", exe.display());
    let (out, err, code) =
        run(&["-e", "global n probe process.function(\"work\") { n++ } probe end { println(n) }", "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{}2000\n", untraced(&exe, &["fork", "1000"])));
}

/// fork() inside a function with a return probe: the child returns through
/// the trampoline too, from its own copy of the shadow stack (thread slots
/// are private to a process), so both returns fire and both processes
/// live; the child's counts land in their own row (no lost updates), and
/// its pid() is its own.
#[test]
fn fork_inside_a_return_probed_function() {
    let exe = build("forkret", &[]);
    let cmd = format!("{} forkret 100000", exe.display());
    // pid() in the child is the child's: the pid fork() returned to the parent.
    let script = "global child, parent, n, kid, mine, theirs
        probe process.function(\"forked\").return {
            if ($return == 0) { child++; theirs = pid() } else { parent++; kid = $return; mine = pid() }
        }
        probe process.function(\"work\").return { n++ }
        probe end { println(child, \" \", parent, \" \", n, \" \", kid == theirs, \" \", mine != theirs) }";
    let (out, err, code) = run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{}1 1 200000 1 1\n", untraced(&exe, &["forkret", "100000"])));
}

/// print_ubacktrace() prints SystemTap's frame lines, symbolized from the
/// probed module: the probed function, its caller (whose call to it sits in
/// the relocated copy of its first bytes, and whose return address a
/// return probe took over), and on to main and through the C library to
/// `_start`, with frame pointers or without them (the modules' CFI);
/// usymname() names a function and gives unknown addresses in hex.
#[test]
fn backtraces_are_symbolized() {
    for flag in ["-fno-omit-frame-pointer", "-fomit-frame-pointer"] {
        let exe = common::scratch("target").join(format!("backtrace{flag}"));
        common::gcc("backtrace.c", &exe, &[flag]);
        let script = "probe process.function(\"leaf\") { print_ubacktrace(); println(usymname(uaddr()), \" \", usymname(0x1234)) }
                  probe process.function(\"mid\"), process.function(\"mid\").return {}";
        let (out, err, code) = run(&["-e", script, "-c", &exe.to_string_lossy()]);
        assert_eq!(code, Some(0), "{err}");
        // The program's own line ("8") may come before or after ours.
        assert_eq!(out.lines().filter(|l| *l == "8").count(), 1, "{out}");
        let text: String = out.lines().filter(|l| *l != "8").map(|l| format!("{l}\n")).collect();
        let calls: Vec<&str> = text.split_terminator("leaf 0x1234\n").collect();
        assert_eq!(calls.len(), 2, "{flag}: {out}");
        for call in calls {
            let frames: Vec<&str> = call.lines().collect();
            let names: Vec<&str> = frames
                .iter()
                .map(|l| {
                    let (addr, rest) = l.trim_start().split_once(" : ").unwrap_or_else(|| panic!("{l}"));
                    assert!(addr.starts_with("0x") && addr.len() == 18, "{l}");
                    rest.split('+').next().unwrap()
                })
                .collect();
            assert_eq!(names[..4], ["leaf", "mid", "top", "main"], "{flag}: {out}");
            assert_eq!(names.last(), Some(&"_start"), "{flag}: {out}");
            assert!(names.contains(&"__libc_start_main"), "{flag}: {out}");
            // Named from libc's debug file (libc6-dbg), not `sub_…`.
            assert!(names.contains(&"__libc_start_call_main"), "{flag}: {out}");
            for l in &frames[..4] {
                assert!(l.ends_with(&format!(" [{}]", exe.display())), "{l}");
            }
            assert!(frames[0].contains("leaf+0x0/"), "{out}");
        }
    }
}

/// A library loaded with dlopen after start gets its probes before the
/// program's first call into it (the loader's r_brk hook waits for them),
/// on a trap too.
#[test]
fn libraries_loaded_later_get_their_probes() {
    let dir = common::scratch("dlopen");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
    let lib = dir.join("libplugin.so");
    let host = dir.join("host");
    common::compile(&[&src.join("plugin.c")], &lib, &["-O2", "-shared", "-fPIC"]);
    common::compile(&[&src.join("host.c")], &host, &["-O2", "-ldl"]);
    let script = format!(
        "global n, r probe process(\"{}\").function(\"plugin\") {{ n++ }} probe process(\"{}\").function(\"plugin\").return {{ r += $return }} probe end {{ println(n, \" \", r) }}",
        lib.display(),
        lib.display()
    );
    let cmd = format!("{} {} 1000", host.display(), lib.display());
    let (out, err, code) = run(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err, "");
    let own = untraced(&host, &[&lib.to_string_lossy(), "1000"]);
    assert_eq!(out, format!("{own}1000 1498500\n"));
    // Its probe on a trap (forced): the first trap of the process, so its
    // handler and the C library's hooks come with the library.
    let (out, err, code) = run(&["-D", "TRAP_PROBES=1", "-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{own}1000 1498500\n"));
    assert!(err.contains("WARNING: 1 probe point(s) placed with a trap where no jump fits"), "{err}");
    assert!(err.contains("): 1000 hit(s)"), "{err}");
}

/// A backtrace in a function probe goes through a library the program
/// loaded with dlopen after start (built without frame pointers): its
/// functions are named and their CFI steps to the host's main, from the
/// first call on (the loader's r_brk hook waits while the tracer adds the
/// library to the symbol table).
#[test]
fn backtraces_name_libraries_loaded_later() {
    let dir = common::scratch("latesyms");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
    let lib = dir.join("libcallback.so");
    let host = dir.join("callback_host");
    let no_fp = ["-O2", "-fomit-frame-pointer", "-fno-optimize-sibling-calls"];
    common::compile(&[&src.join("callback_plugin.c")], &lib, &[&no_fp[..], &["-shared", "-fPIC"]].concat());
    common::compile(&[&src.join("callback_host.c")], &host, &[&no_fp[..], &["-ldl"]].concat());
    let script = "probe process.function(\"callback\") { println(sprint_ubacktrace()) }";
    let cmd = format!("{} {} 20", host.display(), lib.display());
    let (out, err, code) = run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err, "");
    let own = untraced(&host, &[&lib.to_string_lossy(), "20"]);
    let stacks: Vec<&str> = out.split("\n\n").filter(|s| !s.trim().is_empty() && s.trim() != own.trim()).collect();
    assert_eq!(stacks.len(), 20, "{out}");
    for s in stacks {
        let frames: Vec<&str> = s.lines().filter(|l| *l != own.trim()).collect();
        let names: Vec<&str> = frames.iter().map(|l| l.split('+').next().unwrap_or(l)).collect();
        assert_eq!(
            names.iter().take(4).copied().collect::<Vec<_>>(),
            ["callback", "plugin_inner", "plugin_outer", "main"],
            "{out}"
        );
        assert!(frames[1].ends_with(" [libcallback.so]"), "{out}");
    }
}

/// A library unloaded (dlclose) and loaded again, three times: each new
/// mapping gets its probes again, and nothing is written back into
/// memory the library no longer has.
#[test]
fn libraries_reloaded_get_their_probes_again() {
    let dir = common::scratch("reload");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
    let lib = dir.join("libplugin.so");
    let host = dir.join("reload");
    common::compile(&[&src.join("plugin.c")], &lib, &["-O2", "-shared", "-fPIC"]);
    common::compile(&[&src.join("reload.c")], &host, &["-O2", "-ldl"]);
    let script = format!(
        "global n, r probe process(\"{0}\").function(\"plugin\") {{ n++ }} probe process(\"{0}\").function(\"plugin\").return {{ r += $return }} probe end {{ println(n, \" \", r) }}",
        lib.display()
    );
    let cmd = format!("{} {} 100 3", host.display(), lib.display());
    let (out, err, code) = run(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err, "");
    let own = untraced(&host, &[&lib.to_string_lossy(), "100", "3"]);
    // Each round: 100 calls of plugin(i), which returns 3i.
    let per_round: i64 = (0..100).map(|i| 3 * i).sum();
    assert_eq!(out, format!("{own}300 {}\n", 3 * per_round));
}

/// A C++ exception thrown through frames with return probes: the unwinder
/// must see real return addresses (its entry points put them back), the
/// program's own output is unchanged, and the left frames' returns do not
/// fire. `.cold` parts of functions are never probed.
#[test]
fn cxx_exceptions_unwind_through_return_probes() {
    let dir = common::scratch("cxx");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = dir.join("exceptions");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/exceptions.cc");
    common::compile(&[&src], &exe, &["-O2"]);
    let script = r#"global e, r
probe process.function("leaf"), process.function("thrower"), process.function("catcher"),
      process.function("rethrower") { e[ppfunc()]++ }
probe process.function("leaf").return, process.function("thrower").return, process.function("catcher").return,
      process.function("rethrower").return { r[ppfunc()]++ }
probe end { foreach (k+ in e) printf("%s %d %d\n", k, e[k], r[k]) }"#;
    let cmd = format!("{} 100", exe.display());
    let (out, err, code) = run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let own = untraced(&exe, &["100"]);
    // Per iteration: thrower(3) throws through 4 thrower frames; catcher
    // catches what 3 thrower frames let through and returns (its return
    // probe runs); rethrower catches 2 thrower frames' exception and
    // throws it on through its own. Calls after a catch (leaf in catcher,
    // in main) return normally.
    assert_eq!(
        out,
        format!("{own}catcher(long) 100 100\nleaf(long) 200 200\nrethrower(long) 100 0\nthrower(long) 900 0\n")
    );
    // The 1,000 calls the exceptions left are reported, not lost silently.
    assert_eq!(
        err,
        "WARNING: 1000 call(s) left by longjmp, an exception or a Go panic: their return probes did not run\n"
    );
}

/// The script's own probes on the functions the runtime hooks for return
/// probes (the unwinder's `_Unwind_RaiseException`, the C++ runtime's
/// `__cxa_begin_catch`): one trampoline does both, so the script's probes
/// fire and the exceptions still unwind through the return-probed frames.
#[test]
fn probes_on_the_unwinder_and_the_catch_share_the_runtime_hooks() {
    let dir = common::scratch("cxxhooks");
    let exe = dir.join("exceptions");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/exceptions.cc");
    common::compile(&[&src], &exe, &["-O2"]);
    let script = r#"global thrown, caught, r
probe process.library("libgcc_s*").function("_Unwind_RaiseException") { thrown++ }
probe process.library("libstdc++*").function("__cxa_begin_catch") { caught++ }
probe process.function("catcher").return, process.function("leaf").return { r[ppfunc()]++ }
probe end { printf("thrown %d caught %d\n", thrown, caught) foreach (k+ in r) printf("%s %d\n", k, r[k]) }"#;
    let cmd = format!("{} 100", exe.display());
    let (out, err, code) = run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let own = untraced(&exe, &["100"]);
    // Per iteration three exceptions are thrown and one rethrown with
    // `throw;` (which raises it again), and four catch blocks start: the
    // counts without return probes (each probe alone is its function's
    // only hook).
    let alone = r#"global thrown, caught
probe process.library("libgcc_s*").function("_Unwind_RaiseException") { thrown++ }
probe process.library("libstdc++*").function("__cxa_begin_catch") { caught++ }
probe end { printf("thrown %d caught %d\n", thrown, caught) }"#;
    let (plain, err2, _) = run(&["-e", alone, "-c", &cmd]);
    assert_eq!(plain, format!("{own}thrown 400 caught 400\n"), "{err2}");
    assert_eq!(out, format!("{own}thrown 400 caught 400\ncatcher(long) 100\nleaf(long) 200\n"));
}

/// printf output from a target's probe appears while the target still runs
/// (the consumer thread drains the ring; no waiting for the end).
#[test]
fn output_streams_while_the_target_runs() {
    let exe = build("stream", &[]);
    let cmd = format!("{} once", exe.display());
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(["-e", "probe process.function(\"work\") { printf(\"work(%d)\\n\", $arg1) }", "-c", &cmd])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn telco-stap");
    let mut out = BufReader::new(tracer.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the probe's line");
    // The target is still blocked on its stdin (ours, inherited): the line
    // came while it runs.
    assert_eq!(line, "work(41)\n");
    drop(tracer.stdin.take());
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("rest");
    assert!(tracer.wait().expect("exit").success());
    assert_eq!(rest, "once 83\n");
}

/// A runtime error in a handler inside the target ends the session at once
/// (MAXERRORS = 0): one ERROR, the error probes instead of the end probes,
/// exit status 1; the target itself finishes normally.
#[test]
fn target_side_errors_end_the_session() {
    let exe = build("errors", &[]);
    let cmd = format!("{} work 100000", exe.display());
    let script = "global n probe process.function(\"work\") { x = 0; n += 1 / x } probe end { println(\"end\") } probe error { println(\"error probe\") }";
    let (out, err, code) = run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(1), "{err}");
    // The error probe, not the end probe. The command's own line comes
    // before or after it, or not at all: the session ends at the error
    // while the command runs, and ends the command (two processes, no
    // order between their outputs).
    let own = untraced(&exe, &["work", "100000"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.iter().filter(|l| **l == "error probe").count(), 1, "{out}");
    assert!(lines.iter().all(|l| *l == "error probe" || format!("{l}\n") == own), "{out}");
    assert_eq!(err, "ERROR: division by 0 near <input>:1:55\nWARNING: Number of errors: 1, skipped probes: 0\n");
}

/// Probe bodies that run away in the target (a loop past MAXACTION, an
/// array past its declared size): the session ends with one located ERROR
/// (SystemTap's wording) and exit 1; the target is not harmed (it prints
/// its own result, or is ended with the session).
#[test]
fn runaway_and_overflowing_probes_end_the_session_and_the_target_lives() {
    let exe = build("runaway", &[]);
    let cmd = format!("{} work 100000", exe.display());
    let own = untraced(&exe, &["work", "100000"]);
    for (script, error) in [
        ("probe process.function(\"work\") { while (1) { x++ } }", "ERROR: MAXACTION exceeded near <input>:1:"),
        (
            "global a[10] probe process.function(\"work\") { a[$arg1] = 1 }",
            "ERROR: Array overflow, check size limit (10) near <input>:1:47",
        ),
    ] {
        let (out, err, code) = run(&["-e", script, "-c", &cmd]);
        assert_eq!(code, Some(1), "{script}: {err}");
        assert!(err.starts_with(error), "{script}: {err}");
        assert!(out.is_empty() || out == own, "the target's own output: {out}");
    }
}

/// A target that ptraces its own child (the child asks with
/// PTRACE_TRACEME): both sides work and are counted (the child inherits
/// the probes at its fork); a child its parent traces cannot be followed
/// into the program it execs, which is said, and the session goes on.
#[test]
fn a_target_that_ptraces_its_own_child() {
    let exe = common::scratch("target").join("selftrace");
    common::gcc("selftrace.c", &exe, &[]);
    let script = "global n probe process.function(\"work\") { n++ } probe end { println(n) }";
    let (out, err, code) = run(&["-e", script, "-c", &format!("{} 1000", exe.display())]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("child 1000000\n") && out.contains("parent 1000000 stops 1 exited 1\n"), "{out}");
    assert!(out.ends_with("2000\n"), "{out}");
    let (out, err, code) = run(&["-e", script, "-c", &format!("{} 1000 exec", exe.display())]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("parent 1000000 stops 2 exited 1\n") && out.ends_with("2000\n"), "{out}");
    assert!(err.contains("cannot follow pid") && err.contains("into the program it runs"), "{err}");
}

/// `exec` ends the tracing of the old image cleanly: the counts of the old
/// image are kept, the new program (which has no probed module: it only
/// gets the exec hook that follows what it runs in turn) runs normally,
/// and the session ends when it exits.
#[test]
fn exec_leaves_the_new_image_alone() {
    let exe = build("exec", &[]);
    let cmd = format!("{} exec 1000", exe.display());
    let (out, err, code) =
        run(&["-e", "global n probe process.function(\"work\") { n++ } probe end { println(n) }", "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "before exec 1000000\nafter exec\n1000\n");
}

/// The target dies of SIGKILL in the middle of a `-p` session (four
/// threads calling a probed function): the tracer notices, runs its `end`
/// probe on the counts so far and exits by itself; the `--chrome`
/// trace it wrote is whole. Five times over, killed at a different count.
#[test]
fn a_killed_target_still_gets_its_end_probe() {
    let exe = build("killed", &[]);
    let d = common::scratch("killed-target");
    for (i, at) in [1_000, 5_000, 20_000, 50_000, 100_000].into_iter().enumerate() {
        let mut target = common::Running::start(&exe, &["busy"]);
        // (Four threads: a count may pass `at` twice before `said` is set.)
        let script = format!(
            "global n, said probe begin {{ println(\"armed\") }} \
             probe process.function(\"rec\") {{ n++; if (n >= {at} && !said) {{ said = 1; println(\"hit\") }} }} \
             probe end {{ println(\"end \", n >= {at}) }}"
        );
        let trace = d.join(format!("trace{i}.json"));
        let pid = target.pid().to_string();
        let mut tracer = common::Tracer::start(
            &["-p", &pid, "-e", &script, "--chrome", trace.to_str().expect("utf-8"), "--chrome-min-dur", "1ms"],
            "armed",
        );
        let mut hit = String::new();
        std::io::BufRead::read_line(&mut tracer.output, &mut hit).expect("the tracer's output");
        assert_eq!(hit, "hit\n");
        target.child.kill().expect("SIGKILL the target");
        let (rest, err, code) = tracer.finish();
        assert_eq!(code, Some(0), "killed at {at}: {err}");
        let rest: Vec<&str> = rest.lines().filter(|l| *l != "hit").collect();
        assert_eq!(rest, ["end 1"], "killed at {at}: {err}");
        let text = std::fs::read_to_string(&trace).expect("the trace");
        serde_json::from_str::<serde_json::Value>(&text).expect("the trace is JSON");
    }
}

/// SIGINT while the tracer attaches and arms (sent as soon as `-v` says
/// pass 4 is done, so it lands in pass 5's set-up): the tracer ends the
/// session by itself, never killed by the signal, its end probe runs, and
/// the target is left as it was: ten times on one process, which then
/// works as if never traced (code, mappings, results).
#[test]
fn sigint_during_the_attach_ends_the_session_cleanly() {
    use std::io::BufRead;
    let exe = build("sigint", &[]);
    let target = common::Running::start(&exe, &["wait", "1000"]);
    let pid = target.pid();
    let maps = || std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let before = maps();
    let script = "global n probe process.function(\"*\") { n++ } probe end { println(\"end\") }";
    for _ in 0..10 {
        let mut tracer = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap"))
            .args(["-v", "-p", &pid.to_string(), "-e", script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start telco-stap");
        let mut err = std::io::BufReader::new(tracer.stderr.take().expect("stderr"));
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).expect("telco-stap's stderr") == 0 {
                break;
            }
            said.push_str(&line);
            if line.starts_with("Pass 4:") {
                break;
            }
        }
        // SAFETY: signalling the tracer we started.
        unsafe { libc_kill(tracer.id() as i32, 2) };
        let o = tracer.wait_with_output().expect("wait for telco-stap");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).expect("the rest of stderr");
        assert_eq!(o.status.code(), Some(0), "{:?}\n{said}{rest}", o.status);
        assert_eq!(String::from_utf8_lossy(&o.stdout), "end\n", "{said}{rest}");
        assert!(!rest.contains("stays mapped"), "{rest}");
        assert_eq!(maps(), before);
    }
    wait_mode_works(target, 1000);
}

/// The tracer SIGKILLed at a different instant of the attach each time
/// (from the end of pass 4 to well after the probes are placed): every
/// system call and call it makes in the target goes through a stub that
/// restores the thread by itself (`arch::native::stub`), so the target
/// (four threads recursing through entry and return probes, the main
/// thread blocked in a read, `--chrome` on) finishes with every result
/// right, never killed by a signal.
#[test]
fn the_target_survives_a_tracer_killed_while_attaching() {
    let exe = build("killattach", &[]);
    let trace = common::scratch("killattach").join("trace.json");
    let script = "probe process.function(\"rec\"), process.function(\"rec\").return, process.function(\"work\") {}";
    for i in 0..16u64 {
        let mut target = common::Running::start(&exe, &["busy"]);
        let pid = target.pid();
        let (mut tracer, _err) =
            after_pass4(&["-v", "-p", &pid.to_string(), "--chrome", &trace.to_string_lossy(), "-e", script]);
        // Spread over the attach: 0 to 45 ms after pass 4 (arming takes
        // about 40).
        spin(i * 3000);
        tracer.kill().expect("SIGKILL the tracer");
        tracer.wait().expect("reap the tracer");
        target.say("stop");
        let (last, status) = target.finish();
        assert!(status.success(), "run {i}: the target ended with {status:?} ({last:?})");
        assert_eq!(last, "busy 0\n", "run {i}: wrong results in the target");
    }
}

/// `-c`: the tracer SIGKILLed while the command starts (run to its entry
/// point through the entry marker, no `int3`) and is armed: the command,
/// orphaned, runs on and prints its own result every time.
#[test]
fn a_command_survives_a_tracer_killed_while_it_starts() {
    use std::io::Read;
    let exe = build("killstart", &[]);
    let cmd = format!("{} work 20000", exe.display());
    let own = untraced(&exe, &["work", "20000"]);
    let script = "probe process.function(\"work\"), process.function(\"work\").return {}";
    for i in 0..16u64 {
        let (mut tracer, _err) = after_pass4(&["-v", "-c", &cmd, "-e", script]);
        // 0 to 8 ms after pass 4: the start and the arming.
        spin(i * 500);
        // Whether the command had been started when the tracer died (a
        // command started just after this read still counts as right if
        // it prints its result).
        let started = std::fs::read_dir(format!("/proc/{}/task", tracer.id())).is_ok_and(|tasks| {
            tasks
                .flatten()
                .any(|t| std::fs::read_to_string(t.path().join("children")).is_ok_and(|c| !c.trim().is_empty()))
        });
        tracer.kill().expect("SIGKILL the tracer");
        tracer.wait().expect("reap the tracer");
        // The command holds the pipe until it ends.
        let mut out = String::new();
        tracer.stdout.take().expect("stdout").read_to_string(&mut out).expect("the command's output");
        if started {
            assert_eq!(out, own, "run {i}: the command did not finish right");
        } else {
            assert!(out.is_empty() || out == own, "run {i}: {out}");
        }
    }
}

/// The entry marker (a command run to its entry point) unblocks SIGURG and
/// sends it to itself: the program finds at `main` the signal state it
/// would have found untraced (blocked, pending, ignored), with the mask it
/// inherited blocking SIGURG or not, in the command and in the program it
/// execs, and its probe fires once in each.
#[test]
fn the_entry_marker_leaves_the_signal_state_as_it_was() {
    let exe = common::scratch("target").join("sigstate");
    common::gcc("sigstate.c", &exe, &[]);
    let script = "global n probe process.function(\"work\") { n++ } probe end { println(n) }";
    for (args, calls) in [(vec![], 1), (vec!["block"], 1)] {
        let own = untraced(&exe, &args);
        assert!(own.contains("work 41"), "{own}");
        if args.is_empty() {
            assert!(own.starts_with("blocked:\npending:\n"), "{own}");
        } else {
            assert!(own.starts_with("blocked: 10 23\npending:\nignored: 28\n"), "{own}");
        }
        let cmd = std::iter::once(exe.display().to_string()).chain(args.iter().map(|a| a.to_string()));
        let cmd: Vec<String> = cmd.collect();
        let (out, err, code) = run(&["-e", script, "-c", &cmd.join(" ")]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(out, format!("{own}{calls}\n"), "{args:?}: {err}");
    }
}

/// A session that ends while its command execs in a loop: the exec in
/// flight at the end goes on unprobed, and no warning blames the tracer
/// for not answering it in 10 s (the session ended after 1).
#[test]
fn an_exec_in_flight_at_the_end_is_no_missed_answer() {
    let script = "global n probe process(\"/bin/bash\").function(\"execute_command\") { n++ } \
                  probe end { println(n > 0) }";
    for _ in 0..3 {
        let (out, err, code) = run(&["-T", "1", "-e", script, "-c", "bash -c 'while true; do /bin/true; done'"]);
        assert_eq!((code, out.as_str()), (Some(0), "1\n"), "{err}");
        assert!(!err.contains("did not answer"), "{err}");
    }
}

/// The tracer SIGKILLed while it detaches (ended by SIGINT, killed 0 to
/// 15 ms later): threads inside trampolines run out of them instead of
/// being single-stepped, and every system call and call goes through the
/// stub, so the target (four threads recursing through return probes)
/// finishes with every result right whatever step the detach was at.
#[test]
fn the_target_survives_a_tracer_killed_while_detaching() {
    let exe = build("killdetach", &[]);
    let script =
        "probe begin { println(\"armed\") } probe process.function(\"rec\"), process.function(\"rec\").return {}";
    for i in 0..16u64 {
        let mut target = common::Running::start(&exe, &["busy"]);
        let mut tracer = common::Tracer::start(&["-p", &target.pid().to_string(), "-e", script], "armed");
        // SAFETY: signalling the tracer we started.
        unsafe { libc_kill(tracer.child.id() as i32, 2) };
        spin(i * 1000);
        let _ = tracer.child.kill();
        let _ = tracer.child.wait();
        target.say("stop");
        let (last, status) = target.finish();
        assert!(status.success(), "run {i}: the target ended with {status:?} ({last:?})");
        assert_eq!(last, "busy 0\n", "run {i}: wrong results in the target");
    }
}

/// ^C pressed again and again while the session ends (the end probes,
/// the detach): SIGINT, SIGTERM and SIGHUP are the session's own from pass
/// 4 on, so a burst of them during the detach neither kills the tracer
/// halfway through restoring the process nor cuts the end probe short:
/// exit 0, the end probe's output, the process's mappings as they were,
/// and the process then works.
#[test]
fn signals_during_the_detach_leave_nothing_behind() {
    let exe = build("sigdetach", &[]);
    let target = common::Running::start(&exe, &["wait", "1000"]);
    let pid = target.pid();
    let maps = || std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let before = maps();
    let script = "probe begin { println(\"armed\") } probe process.function(\"*\") {} probe end { println(\"end\") }";
    for (i, sig) in [2, 15, 1, 2, 2].into_iter().enumerate() {
        let tracer = common::Tracer::start(&["-p", &pid.to_string(), "-e", script], "armed");
        // A burst over about 20 ms: the first ends the session, the rest
        // land in the end probe and the detach.
        for k in 0..40u64 {
            // SAFETY: signalling the tracer we started.
            unsafe { libc_kill(tracer.child.id() as i32, if k == 0 { 2 } else { sig }) };
            spin(500);
        }
        let (out, err, code) = tracer.finish();
        assert_eq!(code, Some(0), "run {i} (signal {sig}): {err}");
        assert_eq!(out, "end\n", "run {i}: {err}");
        assert!(!err.contains("stays mapped"), "run {i}: {err}");
        assert_eq!(maps(), before, "run {i}");
    }
    wait_mode_works(target, 1000);
}

/// A process the traced one forked while the session ran carries copies
/// of the patches and the session's mappings: the detach cleans it too
/// (the patches it still holds, its mappings), and it goes on working.
#[test]
fn forked_children_are_cleaned_at_detach() {
    let exe = build("forkclean", &[]);
    let mut target = common::Running::start(&exe, &["forkwait", "1000"]);
    let script =
        "global n probe begin { println(\"armed\") } probe process.function(\"work\") { n++ } probe end { println(n) }";
    let tracer = common::Tracer::start(&["-p", &target.pid().to_string(), "-e", script], "armed");
    target.say("fork");
    let child: i32 = target.line().trim().strip_prefix("child ").expect("the child's pid").parse().expect("a pid");
    let expect: i64 = (0..1000).map(|i| 2 * i + 1).sum();
    target.say("work");
    assert_eq!(target.line(), format!("worked {expect}\n"));
    let mapped = || std::fs::read_to_string(format!("/proc/{child}/maps")).expect("the child's maps");
    assert!(mapped().contains("memfd:telco-stap"), "the child shares the session's region");
    // SAFETY: signalling the tracer we started.
    unsafe { libc_kill(tracer.child.id() as i32, 2) };
    let (out, err, code) = tracer.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "1000\n", "{err}");
    assert!(!err.contains("stays mapped"), "{err}");
    assert!(!mapped().contains("memfd:telco-stap"), "left in the child:\n{}", mapped());
    target.say("work");
    assert_eq!(target.line(), format!("worked {expect}\n"));
    target.say("end");
    let (last, status) = target.finish();
    assert!(status.success());
    assert_eq!(last, "forkwait 0\n");
}

/// telco-stap started with `args` (`-v` among them), once it has said that
/// pass 4 is done: the moment the fault tests count from. Its error output
/// comes too, to be kept open (the tracer must not die of a closed pipe).
fn after_pass4(args: &[&str]) -> (std::process::Child, std::io::BufReader<std::process::ChildStderr>) {
    use std::io::BufRead;
    let mut tracer = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start telco-stap");
    let mut err = std::io::BufReader::new(tracer.stderr.take().expect("stderr"));
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).expect("telco-stap's stderr") == 0 || line.starts_with("Pass 4:") {
            break;
        }
    }
    (tracer, err)
}

/// Spin for `us` microseconds: the instant of an injected fault, spread
/// over what it interrupts (not a wait for readiness).
fn spin(us: u64) {
    let until = std::time::Instant::now() + std::time::Duration::from_micros(us);
    while std::time::Instant::now() < until {
        std::hint::spin_loop();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// `exit()` stops the probes at once, as in SystemTap: after it returns no
/// handler starts (a tight loop of 1,000,000 probed calls in one thread:
/// exactly the 100 hits before it; a backtrace printed with it, once).
#[test]
fn exit_stops_the_probes() {
    let exe = build("probed-exit", &[]);
    let exe_s = exe.to_str().expect("utf-8 path");
    let script = "global n probe process.function(\"work\") { n++; if (n == 100) exit() } probe end { println(n) }";
    let (out, err, code) = run(&["-e", script, "-c", &format!("{exe_s} work 1000000")]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().last(), Some("100"), "{out}\n{err}");
    let script = "global n probe process.function(\"work\") { if (++n == 10) { print_ubacktrace(); exit() } }";
    let (out, err, code) = run(&["-e", script, "-c", &format!("{exe_s} work 1000000")]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().filter(|l| l.contains(" : work+")).count(), 1, "{out}\n{err}");
}

/// A session that ends (`-T`) while its shell forks and execs as fast as
/// it can: the processes that end while the probes are taken out (a fork
/// about to exec, its memory going) are nothing to clean, and nothing is
/// said about them.
#[test]
fn a_forking_shell_s_session_ends_without_a_word() {
    let script = "global n probe process.function(\"main\") { n++ } probe end { println(n) }";
    for _ in 0..3 {
        let (out, err, code) =
            run(&["-T", "1", "-e", script, "-c", "bash -c 'while :; do /bin/true; /bin/echo x >/dev/null; done'"]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(out, "1\n");
        assert_eq!(err, "", "the end said something");
    }
}

/// SystemTap's stack helpers on a real target: `ucallers(n)` is the
/// stack without the probe point's own frame, `sprint_usyms()` and
/// `print_usyms()` name a string of addresses as `sprint_ubacktrace()` and
/// `print_ubacktrace()` name frames, `umodname()` is the path of the module
/// (an error for an address in none), and `user_string_quoted()` quotes a
/// string of the target's (its address in hex where none can be read).
#[test]
fn stack_helpers_name_callers_and_modules() {
    let exe = common::scratch("target").join("backtrace-helpers");
    common::gcc("backtrace.c", &exe, &["-fno-omit-frame-pointer"]);
    let script = r#"probe process.function("leaf") {
    println(sprint_usyms(ucallers(2)))
    print_usyms(ucallers(1))
    println(umodname(uaddr()))
    println(user_string_quoted(0))
    try { println(umodname(16)) } catch (e) { println(e) }
    exit()
}"#;
    let (out, err, code) = run(&["-e", script, "-c", &exe.to_string_lossy()]);
    assert_eq!(code, Some(0), "{err}");
    let e = exe.display().to_string();
    let base = exe.file_name().unwrap().to_string_lossy().into_owned();
    let lines: Vec<&str> = out.lines().filter(|l| *l != "8").collect();
    assert!(lines[0].starts_with("mid+0x") && lines[0].ends_with(&format!(" [{base}]")), "{out}");
    assert!(lines[1].starts_with("top+0x") && lines[1].ends_with(&format!(" [{base}]")), "{out}");
    assert_eq!(lines[2], "", "{out}");
    let (addr, rest) = lines[3].trim_start().split_once(" : ").unwrap_or_else(|| panic!("{out}"));
    assert!(addr.starts_with("0x") && addr.len() == 18, "{out}");
    assert!(rest.starts_with("mid+0x") && rest.ends_with(&format!(" [{e}]")), "{out}");
    assert_eq!(lines[4], e, "{out}");
    assert_eq!(lines[5], "0x0", "{out}");
    assert_eq!(lines[6], "umodname: 0x10 is in no module the session knows", "{out}");
}

/// `cmdline_str()`: the probed process's arguments joined by spaces, in
/// its probes (its own /proc/self/cmdline) and in the tracer's (read from
/// its memory, where /proc/PID/stat says they are).
#[test]
fn cmdline_str_is_the_processs_command_line() {
    let exe = common::scratch("target").join("backtrace-cmdline");
    common::gcc("backtrace.c", &exe, &[]);
    let script = r#"probe begin { println("begin ", cmdline_str()) }
probe process.function("leaf") { println("leaf ", cmdline_str()); exit() }"#;
    let cmd = format!("{} first 'sec ond'", exe.display());
    let (out, err, code) = run(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let want = format!("{} first sec ond", exe.display());
    assert_eq!(
        out.lines().filter(|l| l.starts_with("begin ") || l.starts_with("leaf ")).collect::<Vec<_>>(),
        [format!("begin {want}"), format!("leaf {want}")]
    );
}

/// SystemTap's `&` on a target variable's member (its address), and `$`/
/// `$$` after an index (`$it[0]$$`): on tests/programs/docs.c's leaf,
/// whose `it` points at `struct item { int id; char tag; const char *name;
/// const unsigned short *w16; const unsigned *w32; }`.
/// A variable in a register has no address: a located error.
#[test]
fn address_of_and_pretty_printing_after_an_index() {
    let exe = common::scratch("target").join("docs-address");
    common::gcc("docs.c", &exe, &["-O1", "-g", "-fno-inline"]);
    let script = r#"probe process.function("leaf") { println(user_int8(&$it->tag), " ", &$it->tag - $it, " ", $it[0]$$); exit() }"#;
    let (out, err, code) = run(&["-e", script, "-c", &exe.to_string_lossy()]);
    assert_eq!(code, Some(0), "{err}");
    // (w16 and w32 are pointers to unsigned integers: addresses.)
    assert!(out.starts_with("107 4 {.id=7, .tag='k', .name=\"hello\", .w16=0x"), "{out}");
    assert!(out.contains(", .w32=0x") && out.ends_with("}\n"), "{out}");
    let (_, err, code) =
        run(&["-e", "probe process.function(\"leaf\") { println(&$x) }", "-c", &exe.to_string_lossy()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("`&$x`: it is not in memory here"), "{err}");
    assert!(err.contains("<input>:1:42"), "{err}");
}

/// A thread without a slot (the 256 slots all held by threads that ran a
/// probe and still live) that execs: the exec hook runs on it all the
/// same, so the program it runs gets its probes, and nothing counts the
/// hook as a skipped hit; the rows the old image's threads held are free
/// again for the new image's (its `process.begin` has one).
#[test]
fn a_thread_without_a_slot_is_followed_into_its_exec() {
    let dir = common::scratch("target-noslot");
    let text = r#"
#include <pthread.h>
#include <unistd.h>
__attribute__((noinline)) long work(long x) { __asm__ volatile("" ::: "memory"); return x + 1; }
static pthread_barrier_t ran, done;
static void *worker(void *a) { work((long)a); pthread_barrier_wait(&ran); pthread_barrier_wait(&done); return 0; }
int main(void) {
    enum { N = 300 };
    pthread_t t[N];
    pthread_barrier_init(&ran, 0, N + 1);
    pthread_barrier_init(&done, 0, N + 1);
    for (long i = 0; i < N; i++) pthread_create(&t[i], 0, worker, (void *)i);
    pthread_barrier_wait(&ran);
    /* Every slot is held by a worker that ran work(); main never ran it. */
    execl("/usr/bin/true", "true", (char *)0);
    return 1;
}
"#;
    let exe = common::compile_text(&dir, "noslot", text, &["-O2", "-pthread"]);
    let script = "global n probe process.function(\"work\") { n++ } \
                  probe process(\"/usr/bin/true\").begin { println(\"true began\") } probe end { println(n) }";
    let (out, err, code) = run(&["-e", script, "-c", &exe.to_string_lossy()]);
    assert_eq!(code, Some(0), "{err}");
    // The first 256 workers' hits; the other 44 had no slot (said).
    assert_eq!(out, "true began\n256\n", "{err}");
    assert!(err.contains("WARNING: Skipped due to too many threads: 44 "), "{err}");
}

/// A thread asleep in a system call whose instruction ends the patched
/// bytes (tests/programs/restart.c), attached to: a signal handled with
/// SA_RESTART makes the kernel restart the call two bytes back, which
/// would be inside the jump; the call restarts in the trampoline's copy
/// instead, and after the detach (the thread asleep in the copy, entered
/// through the probe) at the original call again.
#[test]
fn system_calls_restart_across_the_patch_and_the_detach() {
    let exe = common::scratch("target").join("restart");
    common::gcc("restart.c", &exe, &["-pthread"]);
    let mut target = common::Running::start(&exe, &[]);
    let tid: u32 = target.ready.trim().trim_start_matches("ready ").parse().expect("the reader's tid");
    let pid = target.pid();
    // Asleep in its read (the first field of /proc's `syscall` is the
    // call's number) before the attach.
    let syscall = format!("/proc/{pid}/task/{tid}/syscall");
    while std::fs::read_to_string(&syscall).unwrap_or_default().split(' ').next() != Some("0") {
        std::thread::yield_now();
    }
    let maps = || std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let before = maps();
    let script = "global n probe begin { println(\"armed\") } \
                  probe process.function(\"raw_read\") { if (++n == 2) exit() } probe end { println(n) }";
    let tracer = common::Tracer::start(&["-p", &pid.to_string(), "-e", script], "armed");
    target.say("sig");
    assert_eq!(target.line(), "handled 1\n");
    target.say("byte");
    assert_eq!(target.line(), "read 1\n");
    target.say("sig");
    assert_eq!(target.line(), "handled 2\n");
    target.say("byte");
    assert_eq!(target.line(), "read 2\n");
    let (out, err, code) = tracer.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!((out.as_str(), err.as_str()), ("2\n", ""));
    assert_eq!(maps(), before);
    target.say("sig");
    assert_eq!(target.line(), "handled 3\n");
    target.say("byte");
    assert_eq!(target.line(), "read 3\n");
    target.say("end");
    let (last, status) = target.finish();
    assert!(status.success(), "{status}");
    assert_eq!(last, "done 3 3\n");
}
