//! Correct on real programs: return probes on every function of Debian's
//! python3.11 and of a non-PIE program leave them working (functions not
//! entered by a call are refused with a located warning), `-w` silences
//! warnings, `target()`, and skipped probes reported by reason with the
//! limit that ends the session (MAXSKIPPED).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::telco_run as telco;

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        Scratch(common::scratch(&format!("real-{tag}")))
    }
    /// tests/programs/probed.c built with `flags` as `name`.
    fn probed(&self, name: &str, flags: &[&str]) -> PathBuf {
        let exe = self.0.join(name);
        common::gcc("probed.c", &exe, flags);
        exe
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn untraced(exe: &Path, args: &[&str]) -> String {
    let o = Command::new(exe).args(args).output().expect("run target");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const PYTHON: &str = "/usr/bin/python3.11";

/// `.return` on every function of python3.11 (non-PIE, stripped): `_start`
/// is refused with a warning that points at the probe point, everything
/// else is probed and python runs as it would.
#[test]
fn every_function_of_python_returns_through_its_probe() {
    assert!(Path::new(PYTHON).exists(), "{PYTHON} is needed (.ci/run installs Debian's python3.11)");
    let script = format!(
        "global n probe process(\"{PYTHON}\").function(\"*\").return {{ n++ }} \
         probe end {{ printf(\"returns seen: %d\\n\", n > 1000) }}"
    );
    let cmd = format!("{PYTHON} -c 'print(sum(range(10)))'");
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "45\nreturns seen: 1\n");
    assert!(
        err.contains("warning[E0017]: skipped: no return probe on `_start`: it is the program's ELF entry point"),
        "{err}"
    );
    assert!(err.contains("<input>:1:"), "the warning is located: {err}");
    // -w: nothing on stderr (neither pass 2's warning nor pass 5's
    // functions that cannot be probed), the same answer.
    let (out, err, code) = telco(&["-w", "-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "45\nreturns seen: 1\n");
    assert_eq!(err, "");
}

/// Named exactly, a function that cannot take a return probe is an error
/// (its entry probe is fine).
#[test]
fn the_entry_point_takes_no_return_probe() {
    let d = Scratch::new("entry");
    let exe = d.probed("nopie", &["-no-pie", "-fno-pie"]);
    let cmd = format!("{} work 10", exe.display());
    let (_, err, code) = telco(&["-e", "probe process.function(\"_start\").return {}", "-c", &cmd]);
    assert_eq!(code, Some(1));
    assert!(err.contains("error[E0017]: no return probe on `_start`"), "{err}");
    assert!(err.contains("help: probe its entry instead"), "{err}");
    let (out, err, code) = telco(&["-e", "probe process.function(\"_start\") { println(\"start\") }", "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    // The probe's line and the program's own come through different
    // streams: either order.
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["start", "work 100"]);
}

/// A non-PIE program with a return probe on every function: its output is
/// unchanged, and the probes count what it did.
#[test]
fn every_function_of_a_non_pie_program() {
    let d = Scratch::new("nopie");
    for (name, flags) in [("nopie", &["-no-pie", "-fno-pie"][..]), ("pie", &[][..])] {
        let exe = d.probed(name, flags);
        for mode in ["work", "rec", "threads", "forkret"] {
            let cmd = format!("{} {mode} 100", exe.display());
            let script = "global n probe process.function(\"*\").return { n[ppfunc()]++ } \
                          probe end { printf(\"work %d rec %d\\n\", n[\"work\"], n[\"rec\"]) }";
            let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
            assert_eq!(code, Some(0), "{name} {mode}: {err}");
            let (work, rec) = match mode {
                "work" => (100, 0),
                "rec" => (0, 100 * 101),
                "threads" => (800, 0),
                // Each process counts its own calls into the same map: the
                // parent's 100 and the child's 100.
                _ => (200, 0),
            };
            let own = untraced(&exe, &[mode, "100"]);
            assert_eq!(out, format!("{own}work {work} rec {rec}\n"), "{name} {mode}: {err}");
        }
    }
}

#[test]
fn target_is_the_traced_process() {
    let d = Scratch::new("target");
    let exe = d.probed("prog", &[]);
    let cmd = format!("{} work 10", exe.display());
    let script =
        "global mine, pid0 probe process.function(\"work\") { if (pid() == target()) mine++; pid0 = target() } \
                  probe end { printf(\"%d %d\\n\", mine, pid0 > 1) }";
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "work 100\n10 1\n");
    // Without -c or -p there is no target.
    let (out, _, code) = telco(&["-e", "probe begin { println(target()); exit() }"]);
    assert_eq!((out.as_str(), code), ("0\n", Some(0)));
}

/// Return probes on calls nested deeper than a thread's frames (1024
/// here, `-D MAXRETURNDEPTH`) are skipped, counted and explained; past MAXSKIPPED the session ends with an
/// error naming the limit, as SystemTap's does.
#[test]
fn skipped_probes_are_explained_and_limited() {
    let d = Scratch::new("deep");
    let exe = d.probed("prog", &[]);
    let script = "global n probe process.function(\"rec\").return { n++ } probe end { println(n) }";
    // One recursion 1101 deep: 77 skipped, under the default 100.
    let cmd = format!("{} deep 1", exe.display());
    let (out, err, code) = telco(&["-D", "MAXRETURNDEPTH=1024", "-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "deep 1100\n1024\n");
    assert_eq!(
        err,
        "WARNING: Number of errors: 0, skipped probes: 77\n\
         WARNING: Skipped due to call depth: 77 (return probes on calls nested more than 1024 deep in one thread: \
         -D MAXRETURNDEPTH=N for more)\n"
    );
    // Two: 154 skipped, more than MAXSKIPPED: no end probe, an error.
    let cmd = format!("{} deep 2", exe.display());
    let (out, err, code) = telco(&["-D", "MAXRETURNDEPTH=1024", "-e", script, "-c", &cmd]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(out, "deep 2200\n");
    assert!(
        err.starts_with(
            "ERROR: Skipped too many probes (154 > MAXSKIPPED=100): the session ended early; -D MAXSKIPPED=N allows more\n"
        ),
        "{err}"
    );
    // The limit raised: the end probe runs; -w keeps the data-loss lines.
    let (out, err, code) =
        telco(&["-w", "-D", "MAXSKIPPED=1000", "-D", "MAXRETURNDEPTH=1024", "-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "deep 2200\n2048\n");
    assert!(err.contains("skipped probes: 154\n"), "{err}");
    // By default a thread keeps 100,000 frames: nothing is skipped.
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!((out.as_str(), err.as_str()), ("deep 2200\n2202\n", ""));
}

/// Recursion 10,000 deep, three times: every return probe runs, with its
/// own call's `@entry` value (the shadow stack holds 100,000 frames).
#[test]
fn return_probes_are_exact_at_any_depth() {
    let d = Scratch::new("deeper");
    let exe = d.probed("prog", &[]);
    let script = "global e, r, bad probe process.function(\"rec\") { e++ } \
                  probe process.function(\"rec\").return { r++; if (@entry($arg1) != $return) bad++ } \
                  probe end { printf(\"%d %d %d\\n\", e, r, bad) }";
    let cmd = format!("{} rec10k 3", exe.display());
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err, "");
    assert_eq!(out, format!("{}30003 30003 0\n", untraced(&exe, &["rec10k", "3"])));
}

/// `-w` silences the script's own warn() messages too.
#[test]
fn no_warnings_silences_warn() {
    let script = "probe begin { warn(\"careful\"); println(\"done\"); exit() }";
    let (out, err, code) = telco(&["-e", script]);
    assert_eq!((out.as_str(), err.as_str(), code), ("done\n", "WARNING: careful\n", Some(0)));
    let (out, err, code) = telco(&["-w", "-e", script]);
    assert_eq!((out.as_str(), err.as_str(), code), ("done\n", "", Some(0)));
}

/// A tail call between two functions whose trampolines time their calls
/// (`--chrome`, or a duration into a statistic): the callee's arguments
/// arrive intact (its trampoline once clobbered r8, the fifth), and both
/// calls are timed.
#[test]
fn tail_calls_between_timed_functions_keep_their_arguments() {
    let d = Scratch::new("tail");
    let exe = d.probed("prog", &[]);
    let cmd = format!("{} tail 1000", exe.display());
    let own = untraced(&exe, &["tail", "1000"]);
    let trace = d.0.join("t.json");
    let (out, err, code) = telco(&[
        "-e",
        "probe process.function(\"tail5\"), process.function(\"five\") {}",
        "--chrome",
        trace.to_str().expect("utf-8"),
        "-c",
        &cmd,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, own);
    let text = std::fs::read_to_string(&trace).expect("trace");
    let ev: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let count =
        |name: &str| ev.as_array().expect("array").iter().filter(|e| e["ph"] == "X" && e["name"] == name).count();
    assert_eq!((count("tail5"), count("five")), (1000, 1000));
    let script = "global t probe process.function(\"tail5\").return, process.function(\"five\").return \
                  { t <<< gettimeofday_ns() - @entry(gettimeofday_ns()) } probe end { println(@count(t)) }";
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{own}2000\n"));
}

/// A module holding V8's embedded builtins (node, Chromium): its
/// `Builtins_*` functions take no return probe (V8 walks their frames by
/// return address); its other functions do. A stand-in program with the
/// same symbols: node itself takes 25 s to probe whole.
#[test]
fn v8_builtins_take_no_return_probe() {
    let d = Scratch::new("v8");
    let src = d.0.join("v8.c");
    std::fs::write(
        &src,
        "__asm__(\".text\\n.globl v8_Default_embedded_blob_code_\\nv8_Default_embedded_blob_code_:\\n\");\n\
         __attribute__((noinline)) long Builtins_Add(long a, long b) { return a + b; }\n\
         __attribute__((noinline)) long helper(long a) { return a * 3; }\n\
         int main(int argc, char **argv) { (void)argv; return (int)(Builtins_Add(argc, 1) + helper(argc)) - 5; }\n",
    )
    .expect("write v8.c");
    let exe = d.0.join("v8");
    common::compile(&[&src], &exe, &["-O2"]);
    let exe = exe.display().to_string();
    let named = format!("probe process(\"{exe}\").function(\"Builtins_Add\").return {{}}");
    let (_, err, code) = telco(&["--last-pass", "2", "-e", &named]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no return probe on `Builtins_Add`: it is one of V8's embedded builtins"), "{err}");
    let all = format!("global n probe process(\"{exe}\").function(\"*\").return {{ n[ppfunc()]++ }} probe end {{ println(n[\"helper\"], n[\"Builtins_Add\"]) }}");
    let (out, err, code) = telco(&["-w", "-e", &all, "-c", &exe]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "10\n");
}

/// Guru mode: writes to `$argN` and `$return` change what the function
/// and its caller see (they were accepted and ignored once).
#[test]
fn guru_writes_change_arguments_and_results() {
    let d = Scratch::new("guru");
    let exe = d.probed("prog", &[]);
    let run = |script: &str, mode: &str| {
        let cmd = format!("{} {mode} 10", exe.display());
        let (out, err, code) = telco(&["-g", "-e", script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{script}: {err}");
        out
    };
    // work(x) = 2x + 1 for x in 0..10: 100 untraced.
    assert_eq!(untraced(&exe, &["work", "10"]), "work 100\n");
    assert_eq!(run("probe process.function(\"work\") { $arg1 = 0 }", "work"), "work 10\n");
    assert_eq!(run("probe process.function(\"work\").return { $return = 7 }", "work"), "work 70\n");
    assert_eq!(run("probe process.function(\"work\").return { $return += 100 }", "work"), "work 1100\n");
    // Register arguments 5 and 6, and 8 on the stack.
    assert_eq!(untraced(&exe, &["eight", "10"]), "eight 4660\n");
    assert_eq!(run("probe process.function(\"eight\") { $arg6 = 0; $arg8 = 1 }", "eight"), "eight 1150\n");
    // Without -g: refused, with the place.
    let cmd = format!("{} work 10", exe.display());
    let (_, err, code) = telco(&["-e", "probe process.function(\"work\") { $arg1 = 0 }", "-c", &cmd]);
    assert_eq!(code, Some(1));
    assert!(err.contains("writing `$arg1` needs guru mode") && err.contains("<input>:1:"), "{err}");
    // In a return probe an argument is its value at entry: writing it
    // would change nothing, so it is refused.
    let (_, err, code) = telco(&["-g", "-e", "probe process.function(\"work\").return { $arg1 = 0 }", "-c", &cmd]);
    assert_eq!(code, Some(1));
    assert!(err.contains("writing `$arg1` in a return probe"), "{err}");
}

/// The command's children are followed into the programs they exec: a
/// shell running the probed program three times (once through `env`), and
/// `ls` counted under its own name.
#[test]
fn children_that_exec_are_followed() {
    let d = Scratch::new("follow");
    let exe = d.probed("prog", &[]);
    let p = exe.display().to_string();
    let script = format!(
        "global n probe process(\"{p}\").function(\"work\") {{ n[pid(), execname()]++ }} \
         probe end {{ foreach ([pid, name] in n) printf(\"%s %d\\n\", name, n[pid, name]) }}"
    );
    let cmd = format!("sh -c '{p} work 10; {p} work 20; env {p} work 5'");
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let (own, counts): (Vec<&str>, Vec<&str>) = out.lines().partition(|l| l.starts_with("work "));
    assert_eq!(own, ["work 100", "work 400", "work 25"]);
    let mut counts = counts;
    counts.sort();
    assert_eq!(counts, ["prog 10", "prog 20", "prog 5"], "{out}");
    // A library's probes in every program the command runs (the issue's
    // own example): malloc counted by execname in sh and in its two ls.
    let script = "global n probe process(\"libc.so.6\").function(\"malloc\") { n[execname()]++ } \
                  probe end { foreach (k+ in n) printf(\"%s %d\\n\", k, n[k] > 0) }";
    let (out, err, code) = telco(&["-e", script, "-c", "sh -c 'ls / > /dev/null; ls / > /dev/null'"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "ls 1\nsh 1\n");
}

/// vfork + exec and posix_spawn are followed too.
#[test]
fn vfork_and_posix_spawn_are_followed() {
    let d = Scratch::new("spawn");
    let exe = d.probed("prog", &[]);
    let p = exe.display().to_string();
    let src = d.0.join("spawner.c");
    std::fs::write(
        &src,
        format!(
            "#include <spawn.h>\n#include <sys/wait.h>\n#include <unistd.h>\nextern char **environ;\n\
             int main(void) {{\n\
             pid_t p = vfork();\n\
             if (p == 0) {{ execl(\"{p}\", \"prog\", \"work\", \"4\", (char *)0); _exit(127); }}\n\
             waitpid(p, 0, 0);\n\
             char *argv[] = {{\"prog\", \"work\", \"6\", 0}};\n\
             pid_t q; if (posix_spawn(&q, \"{p}\", 0, 0, argv, environ)) return 1;\n\
             waitpid(q, 0, 0);\n return 0;\n}}\n"
        ),
    )
    .expect("write spawner.c");
    let spawner = d.0.join("spawner");
    common::compile(&[&src], &spawner, &["-O2"]);
    let script = format!("global n probe process(\"{p}\").function(\"work\") {{ n++ }} probe end {{ println(n) }}");
    let (out, err, code) = telco(&["-e", &script, "-c", spawner.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "work 16\nwork 36\n10\n");
}

/// A command killed by a signal: the session's output is whole, the
/// signal is named, and the status is the shell's (128 + signal).
#[test]
fn a_command_killed_by_a_signal_is_reported() {
    let d = Scratch::new("crash");
    let exe = d.probed("prog", &[]);
    let cmd = format!("{} crash 10", exe.display());
    let (out, err, code) =
        telco(&["-e", "global n probe process.function(\"work\") { n++ } probe end { println(n) }", "-c", &cmd]);
    assert_eq!(code, Some(128 + 11), "{err}");
    assert_eq!(out, "10\n");
    assert!(
        err.contains("WARNING: the command (pid ") && err.contains(") was killed by SIGSEGV (Segmentation fault)"),
        "{err}"
    );
    // raise(): sent, not a fault, from the C library, with no probe running.
    assert!(err.contains("SIGSEGV (Segmentation fault), sent by a thread of the process"), "{err}");
    assert!(err.contains("libc.so.6"), "{err}");
    assert!(err.contains("no probe was running on that thread"), "{err}");
}

/// A fault is reported with its address, the function and module where
/// the program counter was, and whether a probe was running; in a probed
/// function's first instructions (which run in its trampoline), the
/// function is still named. The status is the shell's.
#[test]
fn a_fault_is_reported_with_its_place() {
    let d = Scratch::new("fault");
    let exe = d.probed("prog", &[]);
    let cmd = format!("{} fault 10", exe.display());
    let path = exe.display().to_string();
    for (probe, place) in [
        ("work", format!("in poke+0x0 ({path})")),
        ("poke", format!("in the relocated first instructions of poke+0x0 ({path})")),
    ] {
        let script = format!("global n probe process.function(\"{probe}\") {{ n++ }} probe end {{ println(n) }}");
        let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(128 + 11), "{err}");
        assert_eq!(out, if probe == "work" { "10\n" } else { "1\n" });
        assert!(err.contains("was killed by SIGSEGV (Segmentation fault), address 0x0 not mapped, at 0x"), "{err}");
        assert!(err.contains(&place), "{place} in {err}");
        assert!(err.contains("no probe was running on that thread"), "{err}");
        assert_eq!(err.matches("killed by").count(), 1, "{err}");
    }
}

/// A process the command runs that dies of a fault is reported when it
/// happens (the command goes on).
#[test]
fn a_child_that_faults_is_reported() {
    let d = Scratch::new("childfault");
    let exe = d.probed("prog", &[]);
    let p = exe.display().to_string();
    let script = format!("global n probe process(\"{p}\").function(\"work\") {{ n++ }} probe end {{ println(n) }}");
    let cmd = format!("sh -c '{p} fault 3; {p} work 4; exit 7'");
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(7), "{err}");
    assert!(out.ends_with("7\n"), "{out}");
    assert!(
        err.contains(&format!("is being killed by SIGSEGV (Segmentation fault), address 0x0 not mapped, at 0x")),
        "{err}"
    );
    assert!(err.contains(&format!("in poke+0x0 ({p})")), "{err}");
}

/// The target's word is not the tracer's command: a target that posts an
/// exec request naming a process outside the session (here a sleeping
/// process of the test's own) gets a warning, and that process is never
/// attached to.
#[test]
fn a_forged_exec_request_attaches_to_nothing() {
    let d = Scratch::new("forged");
    let src = d.0.join("forge.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n\
         __attribute__((noinline)) long work(long x) { return x + 1; }\n\
         int main(int argc, char **argv) {\n\
           long victim = atol(argv[1]), off = atol(argv[2]);\n\
           FILE *m = fopen(\"/proc/self/maps\", \"r\"); char line[512]; unsigned long base = 0;\n\
           while (fgets(line, sizeof line, m)) if (strstr(line, \"memfd:telco-stap\")) { base = strtoul(line, 0, 16); break; }\n\
           if (!base) return 3;\n\
           volatile unsigned long *req = (unsigned long *)(base + off), *ack = req + 1;\n\
           unsigned long me = (unsigned long)victim << 32 | (unsigned long)victim;\n\
           *req = me;\n\
           /* The tracer answers (exec_ack) whether it follows or refuses. */\n\
           for (long i = 0; *ack != me; i++) { work(i); if (i > 2000000000L) return 4; }\n\
           return 0;\n}\n",
    )
    .expect("write forge.c");
    let exe = d.0.join("forge");
    common::compile(&[&src], &exe, &["-O2"]);
    let mut victim = Command::new("sleep").arg("30").spawn().expect("sleep");
    let off = core::mem::offset_of!(telco_abi::region::Header, exec_req);
    // exec_ack is the next word (the program reads it there).
    assert_eq!(core::mem::offset_of!(telco_abi::region::Header, exec_ack), off + 8);
    let cmd = format!("{} {} {off}", exe.display(), victim.id());
    let (_, err, code) = telco(&["-e", "probe process.function(\"work\") {}", "-c", &cmd]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", victim.id())).expect("victim status");
    let _ = victim.kill();
    let _ = victim.wait();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("no process of that id here maps this session's region"), "{err}");
    assert!(status.contains("TracerPid:\t0\n"), "{status}");
}

/// More processes than the region has per-thread rows (256), one after
/// another: rows of processes that ended are taken again, so no hit is
/// skipped and every count adds up.
#[test]
fn more_processes_than_thread_rows() {
    let d = Scratch::new("rows");
    let exe = d.probed("prog", &[]);
    let p = exe.display().to_string();
    let script = format!(
        "global n, s probe process(\"{p}\").function(\"work\") {{ n++; s <<< $arg1 }} \
         probe end {{ printf(\"%d %d %d\\n\", n, @count(s), @sum(s)) }}"
    );
    let cmd = format!("sh -c 'i=0; while [ $i -lt 270 ]; do {p} work 2 > /dev/null; i=$((i+1)); done'");
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    // work(0) and work(1) in each of 270 processes.
    assert_eq!(out, "540 540 270\n");
    assert_eq!(err, "");
}

const LIFECYCLE: &str = r#"global pb, pe, tb, te, main
probe process.begin { pb++; if (pid() == target()) main++ }
probe process.end { pe++ }
probe process.thread.begin { if (tid() != pid()) tb++ }
probe process.thread.end { te++ }
probe end { printf("process %d/%d thread %d/%d main %d\n", pb, pe, tb, te, main) }"#;

/// Lifecycle probes count every process and thread: the command (begin at
/// its start, end at its exit), forked children (exit and _exit), a forked
/// child that execs (its program ends at the exec, the new one begins), a
/// spawned child (posix_spawn: it begins at its exec, and ends), and four
/// threads (two end by pthread_exit). The program's own output is
/// unchanged.
#[test]
fn process_and_thread_lifecycles_are_counted() {
    let d = Scratch::new("life");
    let exe = d.probed("prog", &[]);
    let untraced_out = untraced(&exe, &["life", "3"]);
    let cmd = format!("{} life 3", exe.display());
    let (out, err, code) = telco(&["-e", LIFECYCLE, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    // begin: the command, 3 forks, 2 execs; end: 2 exits, 1 exec, 3 exits.
    // (Its warnings say which process was not followed, if one was not.)
    assert!(out.ends_with("process 6/6 thread 4/4 main 1\n"), "{out}{err}");
    let mut lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("process ")).collect();
    lines.sort_unstable();
    let mut want: Vec<&str> = untraced_out.lines().collect();
    want.sort_unstable();
    assert_eq!(lines, want);
    // process("P") only where P runs: the shell's own begin and end are
    // not counted.
    let p = exe.display().to_string();
    let script = LIFECYCLE.replace("process.", &format!("process(\"{p}\")."));
    let cmd = format!("sh -c '{p} life 3; true'");
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    // The shell's vfork child begins at its exec of P; it never ran the
    // shell's program, so nothing ends there.
    assert!(out.ends_with("process 6/6 thread 4/4 main 0\n"), "{out}");
    // `$status`: what the process gave _exit; -1 for a program an exec ended.
    let script = "probe process.end { printf(\"%d %d\\n\", pid() == target(), $status) }";
    let cmd = format!("{p} exit3");
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(out, "exit3 0\n1 3\n");
    let cmd = format!("{p} exec 2");
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    // (The exec's end is said while the new program starts: its own
    // output may come before or after it.)
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["1 -1", "1 0", "after exec", "before exec 4"]);
    let (_, err, code) = telco(&["-e", "probe process.begin { println($status) }", "-c", &cmd]);
    assert_eq!(code, Some(1));
    assert!(err.contains("`$status` outside a `process.end` probe"), "{err}");
}

/// Attached to a running process: process.begin fires in it at attach, and
/// thread.begin in each of its other threads.
#[test]
fn attaching_begins_the_process_and_its_threads() {
    let d = Scratch::new("lifewait");
    let exe = d.probed("prog", &[]);
    let mut target = common::Running::start(&exe, &["lifewait"]);
    assert_eq!(target.ready, "ready\n");
    let pid = target.pid().to_string();
    let script = "global tb probe process.begin { printf(\"begin %d\\n\", pid() == target()) } \
                  probe process.thread.begin { tb++ } \
                  probe process.function(\"work\") { printf(\"threads %d\\n\", tb); exit() }";
    let tracer = common::Tracer::start(&["-p", &pid, "-e", script], "begin 1");
    target.say("go");
    let (rest, err, code) = tracer.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rest, "threads 2\n");
    let (last, status) = target.finish();
    assert!(status.success());
    assert_eq!(last, "lifewait 3\n");
}

/// The target set (tapsets/target_set.tp): the command and what descends
/// from it, with ppid() each process's own parent.
#[test]
fn the_target_set_holds_the_commands_descendants() {
    let d = Scratch::new("targetset");
    let exe = d.probed("prog", &[]);
    let p = exe.display().to_string();
    // In `life` mode, `work` runs in the command (its threads), in a
    // forked child that exec'd, and in a spawned one: all of the set, and
    // the children's parent is the command.
    let script = format!(
        "global inset, other, kids probe process(\"{p}\").function(\"work\") {{ \
           if (target_set_pid(pid())) inset[pid() == target()]++; else other++; \
           if (pid() != target() && ppid() == target()) kids[pid()] = 1 }} \
         probe end {{ printf(\"%d %d %d %d %d\\n\", inset[1], inset[0], other, target_set_pid(12345678), \
           [target()] in kids) }}"
    );
    let cmd = format!("{p} life 3");
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    // work: 2 threads × 3 + 2 threads × 1 in the command; 1 + 2 in the
    // two children.
    assert!(out.ends_with("8 3 0 0 0\n"), "{out}");
    // Under a shell: the shell is the target, its children are in the set.
    let script = format!(
        "global n probe process(\"{p}\").function(\"work\") {{ if (target_set_pid(pid()) && ppid() == target()) n++ }} \
         probe end {{ println(n) }}"
    );
    let cmd = format!("sh -c '{p} work 2; {p} work 3; true'");
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.ends_with("\n5\n"), "{out}");
}

/// Debian's gzip is stripped: its functions without a symbol come from
/// `.eh_frame` as `sub_<offset>`, listed, globbed and probed (entry and
/// return) while it compresses a file, byte for byte as untraced.
#[test]
fn every_function_of_a_stripped_gzip_is_probed() {
    let d = Scratch::new("gzip");
    let data = d.0.join("data.bin");
    let mut bytes = Vec::new();
    for i in 0..200_000u32 {
        bytes.extend_from_slice(format!("{} {}\n", i, i.wrapping_mul(2654435761) % 1000).as_bytes());
    }
    std::fs::write(&data, &bytes).expect("write data");
    let gz = d.0.join("data.bin.gz");
    let st = Command::new("gzip").args(["-k", "-f"]).arg(&data).status().expect("gzip");
    assert!(st.success());
    let reference = std::fs::read(&gz).expect("reference");
    std::fs::remove_file(&gz).expect("remove");
    let (out, err, code) = telco(&["-l", "process(\"/usr/bin/gzip\").function(\"sub_*\")"]);
    assert_eq!(code, Some(0), "{err}");
    let unnamed = out.lines().count();
    assert!(unnamed > 20, "{out}");
    let cmd = format!("gzip -k -f {}", data.display());
    let script = "global n, r, f probe process.function(\"*\") { n++; if (substr(ppfunc(), 0, 4) == \"sub_\") f++ } \
                  probe process.function(\"*\").return { r++ } probe end { println(n > 100000, \" \", f > 0, \" \", n - r < 10) }";
    let (out, err, code) = telco(&["-w", "-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "1 1 1\n");
    assert_eq!(std::fs::read(&gz).expect("traced output"), reference, "gzip's output changed");
}

/// Functions shorter than the 5-byte jump with no padding after them
/// (packed by -falign-functions=1) are hooked through a 2-byte hop into a
/// neighbour, entry and return, at full speed; a lone 1-byte `ret`, with
/// no room even for the hop, with a trap. With and without `endbr64`.
#[test]
fn packed_short_functions_are_hooked_through_a_hop() {
    let d = Scratch::new("packed");
    let script = "global n, r probe process.function(\"*\") { n[ppfunc()]++ } probe process.function(\"*\").return { r[ppfunc()]++ } \
                  probe end { foreach (k in n) if (k != \"_start\" && k != \"main\") printf(\"%s %d %d\\n\", k, n[k], r[k]) }";
    for (cet, want) in [
        ("-fcf-protection=none", vec!["ident 10 10", "mix 10 10", "neg 10 10", "nothing 10 10", "zero 10 10"]),
        ("-fcf-protection=full", vec!["ident 10 10", "mix 10 10", "neg 10 10", "nothing 10 10", "zero 10 10"]),
    ] {
        let exe = d.0.join(format!("packed{cet}"));
        common::gcc("packed.c", &exe, &["-falign-functions=1", cet]);
        let cmd = format!("{} 10", exe.display());
        let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{err}");
        let mut lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.remove(0), untraced(&exe, &["10"]).trim_end());
        lines.retain(|l| want.iter().any(|w| w.split(' ').next() == l.split(' ').next()));
        lines.sort_unstable();
        assert_eq!(lines, want, "{cet}: {out}");
        assert!(!err.contains("cannot probe"), "{err}");
        // Entry and return, 10 calls: 10 traps (the return is the trampoline's).
        assert!(err.contains("WARNING: 1 probe point(s) placed with a trap where no jump fits"), "{err}");
        assert!(err.contains("): 10 hit(s)"), "{err}");
    }
}

/// Functions whose loops jump back to their first instruction from past
/// the jump's bytes: a short loop runs whole in the trampoline's copy; a
/// long one's branch is retargeted past the probe. Each call fires once,
/// entry and return, and the results are unchanged.
#[test]
fn loops_back_to_the_entry_fire_once_per_call() {
    let d = Scratch::new("loops");
    let exe = d.probed("prog", &[]);
    let script = "global n probe process.function(\"loop_*\") { n[ppfunc()]++ } \
                  probe process.function(\"loop_*\").return { n[ppfunc() . \".return\"]++ } \
                  probe end { foreach (k in n+) printf(\"%s %d\\n\", k, n[k]) }";
    let cmd = format!("{} loops 10", exe.display());
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err, "");
    let mut lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.remove(0), untraced(&exe, &["loops", "10"]).trim_end());
    lines.sort_unstable();
    assert_eq!(lines, ["loop_long 10", "loop_long.return 10", "loop_small 10", "loop_small.return 10"]);
}

/// The traced process may not change the size of the region it shares
/// with the tracer (a shrunk memfd would make the tracer's next read a
/// SIGBUS): the memfd is sealed before the target maps it.
#[test]
fn the_target_cannot_resize_the_shared_region() {
    let d = Scratch::new("shrink");
    let exe = d.probed("prog", &[]);
    let cmd = format!("{} shrink 10", exe.display());
    let (out, err, code) =
        telco(&["-e", "global n probe process.function(\"work\") { n++ } probe end { println(n) }", "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "open ok\nshrink refused\ngrow refused\nshrink 100\n10\n");
}

/// A hostile target overwrites the whole region it shares with the
/// tracer: the tracer says so and exits non-zero by itself, never by a
/// signal, whatever the script (printf, a counter, a map walked in `end`
/// or by a timer).
#[test]
fn a_target_scribbling_on_the_region_cannot_crash_the_tracer() {
    let d = Scratch::new("scribble");
    let exe = d.probed("prog", &[]);
    let scripts = [
        "global n probe process.function(\"work\") { n++ } probe end { println(n) }",
        "probe process.function(\"work\") { printf(\"w %d\\n\", $arg1) }",
        "global m probe process.function(\"work\") { m[$arg1 % 5]++ } probe end { foreach (k in m) println(k, \" \", m[k]) }",
        "global m, n probe process.function(\"work\") { m[$arg1 % 5]++ } probe timer.ms(1) { foreach (k in m) n += m[k] }",
    ];
    for byte in ["255", "170"] {
        for script in scripts {
            let cmd = format!("{} scribble 5 {byte}", exe.display());
            let o =
                Command::new(env!("CARGO_BIN_EXE_telco-stap")).args(["-e", script, "-c", &cmd]).output().expect("run");
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "byte {byte}, {script}: {:?}\n{err}", o.status);
            assert!(
                err.contains("ERROR: the target corrupted the event ring")
                    || err.contains("ERROR: the target overwrote the shared region's header (its magic)"),
                "byte {byte}, {script}: {err}"
            );
        }
    }
}

/// A library named by a glob, as SystemTap's tests name glibc
/// (`process("/lib*/libc.so.*")`: `*` crosses `/`, and the path before
/// /usr was merged counts): the target's C library; `--ldd` (SystemTap's)
/// is accepted.
#[test]
fn a_library_named_by_a_glob_is_the_targets_match() {
    let script = "global n probe process(\"/lib*/libc.so.*\").function(\"exit\") { n++ } probe end { println(n) }";
    let (out, err, code) = telco(&["--ldd", "-e", script, "-c", "/bin/true"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "1\n");
    let script = "probe process(\"/nowhere*/libc.so.*\").function(\"exit\") { }";
    let (_, err, code) = telco(&["-e", script, "-c", "/bin/true"]);
    assert_eq!(code, Some(1), "{err}");
}
