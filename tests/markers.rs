//! SDT markers (`.mark`) and statement probes (`.statement`) on programs
//! gcc builds here (tests/programs/sdt.c), Debian's python3.11 and the
//! system libstdc++: exact counts, arguments, semaphores, refusals.

mod common;

use common::telco_run as telco;
use std::path::{Path, PathBuf};
use std::process::Command;

fn build(tag: &str) -> PathBuf {
    let exe = common::scratch(tag).join("sdt");
    common::gcc("sdt.c", &exe, &[]);
    exe
}

fn untraced(exe: &Path, args: &[&str]) -> String {
    let o = Command::new(exe).args(args).output().expect("run");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A symbol's address, from `nm`.
fn nm(exe: &Path, name: &str) -> u64 {
    let o = Command::new("nm").arg(exe).output().expect("nm");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = text.lines().find(|l| l.ends_with(&format!(" {name}"))).expect("symbol");
    u64::from_str_radix(line.split_whitespace().next().expect("address"), 16).expect("hex")
}

/// Markers fire once per pass with their arguments (signed, unsigned,
/// strings), `$$name`, `$$provider`, `$$parms`; `provider()` and globs
/// select them; the probed marker's semaphore is set while the session
/// runs (the program sees it), and only that one.
#[test]
fn markers_fire_with_their_arguments() {
    let exe = build("marks");
    assert_eq!(untraced(&exe, &["work", "2"]), "work 6\n");
    let cmd = format!("{} work 2", exe.display());
    let script = r#"global n
probe process.mark("loop") {
    n++
    printf("%s:%s %d %d %s [%s]\n", $$provider, $$name, $arg1, $arg2, user_string($arg3), $$parms)
}
probe end { println(n) }"#;
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // The loop marker's semaphore is not the tick's: step() adds nothing.
    assert_eq!(lines[0], "work 6");
    assert_eq!(lines.len(), 8, "{out}");
    assert!(lines[1].starts_with("app:loop 0 0 hello [arg1=0x0 arg2=0x0 arg3=0x"), "{out}");
    assert!(lines[6].starts_with("app:loop 1 2 hello [arg1=0x1 arg2=0x2 arg3=0x"), "{out}");
    assert_eq!(lines[7], "6");
    // tick: a signed 4-byte argument; its semaphore is seen (+1000 a call).
    let script = r#"global t, n probe process.provider("app").mark("tick") { t += $arg1; n++ }
probe process.provider("nope*").mark("*")? { n += 100 }
probe end { println(n, " ", t) }"#;
    let cmd = format!("{} work 4", exe.display());
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "work 4012\n4 -6\n");
    // Every marker by glob.
    let (out, err, code) = telco(&[
        "-e",
        "global n probe process.mark(\"*\") { n[$$name]++ } probe end { println(n[\"loop\"], n[\"tick\"]) }",
        "-c",
        &cmd,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "work 4012\n124\n");
}

/// `-l` and `-L` list markers, with their arguments.
#[test]
fn markers_are_listed() {
    let exe = build("list");
    let p = exe.display().to_string();
    let (out, err, code) = telco(&["-L", &format!("process(\"{p}\").mark(\"*\")")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!(
            "process(\"{p}\").provider(\"app\").mark(\"loop\") $arg1:long $arg2:long $arg3:long $$name:string"
        )),
        "{out}"
    );
    assert!(out.contains(&format!("process(\"{p}\").provider(\"app\").mark(\"tick\") $arg1:long $$name")), "{out}");
    // A marker that does not exist: the ones there are, by name.
    let (_, err, code) = telco(&["-e", &format!("probe process(\"{p}\").mark(\"nope\") {{ }}")]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("no marker `nope` in") && err.contains("its markers: `app:first`, `app:loop`, `app:second`"),
        "{err}"
    );
    // An argument the marker does not have.
    let (_, err, code) = telco(&["-e", &format!("probe process(\"{p}\").mark(\"tick\") {{ println($arg2) }}")]);
    assert_eq!(code, Some(1));
    assert!(err.contains("marker `tick` has 1 argument(s), not 2"), "{err}");
}

/// Attached to a running program: the semaphore is raised while the
/// session runs and lowered when it ends.
#[test]
fn semaphores_are_lowered_at_detach() {
    let exe = build("semwait");
    let mut target = common::Running::start(&exe, &["wait"]);
    assert_eq!(target.ready, "ready\n");
    let pid = target.pid().to_string();
    let script = "probe begin { println(\"armed\") } probe process.mark(\"tick\") { println($arg1); exit() }";
    let tracer = common::Tracer::start(&["-p", &pid, "-e", script], "armed");
    target.say("1");
    let (rest, err, code) = tracer.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rest, "-1\n");
    target.say("2");
    let (out, status) = target.finish();
    assert!(status.success());
    // Raised (step adds 1000) while traced, back to 0 after.
    assert_eq!(out, "semaphore 1\nsemaphore 0\nwait 1006\n");
}

/// A statement probe inside a leaf function leaves its red zone and its
/// flags as they were (the site is between a compare and its branch, the
/// function's values below the stack pointer), with a lean handler and with
/// one that reads the registers (the full frame).
#[test]
fn statements_keep_the_red_zone_and_the_flags() {
    let exe = build("live");
    let cmd = format!("{} live 20", exe.display());
    let site = nm(&exe, "live_site");
    let own = untraced(&exe, &["live", "20"]);
    // 0..9 take the branch with the carry set (x + 1 - 85), 10..19 fall
    // through without (x + 85).
    let expect = (0..10).map(|x| x + 1 - 85).sum::<i64>() + (10..20).map(|x| x + 85).sum::<i64>();
    assert_eq!(own, format!("live {expect}\n"));
    for body in ["n++", "n += register(\"rdi\") + uaddr() - uaddr()"] {
        let script = format!("global n probe process.statement({site:#x}) {{ {body} }} probe end {{ println(n) }}");
        let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{body}: {err}");
        let n = if body == "n++" { 20 } else { (0..20).sum::<i64>() };
        assert_eq!(out, format!("{own}{n}\n"), "{body}");
    }
}

/// Statement probes by address and by "function+offset" fire each time
/// the instruction runs (a loop's head); a site where the jump would cover
/// a branch target, and nothing before it can take one, gets a trap over
/// its one instruction, said in the summary and named by -v.
#[test]
fn statements_fire_where_the_jump_is_safe_and_a_trap_elsewhere() {
    let exe = build("stmt");
    let cmd = format!("{} loop 25", exe.display());
    let head = nm(&exe, "loop_head");
    let offset = head - nm(&exe, "looping");
    for point in [format!("process.statement({head:#x})"), format!("process.statement(\"looping+{offset}\")")] {
        let script = format!("global n probe {point} {{ n++ }} probe end {{ println(n) }}");
        let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{point}: {err}");
        assert_eq!(out, format!("{}25\n", untraced(&exe, &["loop", "25"])), "{point}");
    }
    let script = "global n probe process.statement(\"refuse_me\") { n += register(\"rdi\") } probe end { println(n) }";
    let (out, err, code) = telco(&["-v", "-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    // Called once, with 3.
    assert_eq!(out, format!("{}3\n", untraced(&exe, &["loop", "25"])));
    assert!(err.contains(": placed with a trap (no jump fits at the site, nor before it)"), "{err}");
    assert!(err.contains("WARNING: 1 probe point(s) placed with a trap where no jump fits"), "{err}");
    assert!(err.contains("): 1 hit(s)"), "{err}");
}

/// A one-byte `ret` ending a function, with the next function right after
/// it, takes no jump of its own: the probe's jump goes on the instructions
/// before it. After a call (`call triple; ret`), the call is probed at its
/// return (a shadow frame, as a return probe's); after `lea; pop rbx`,
/// those two run in the trampoline first. Each fires once per call with
/// the registers as at the `ret` (rax: the result), lean or full.
#[test]
fn a_one_byte_site_at_a_functions_end_takes_the_jump_before_it() {
    let exe = build("tails");
    let n = 30i64;
    let cmd = format!("{} tails {n}", exe.display());
    let own = untraced(&exe, &["tails", &n.to_string()]);
    let calls: i64 = (0..n).map(|i| 3 * (i + 1)).sum();
    let pops: i64 = (0..n).map(|i| 3 * i).sum();
    assert_eq!(own, format!("tails {}\n", calls + 1000 * pops));
    let (c, p) = (nm(&exe, "call_tail_site"), nm(&exe, "pop_tail_site"));
    for (site, sum, f) in [(c, calls, "call_tail"), (p, pops, "pop_tail")] {
        // rbx at the site is the caller's again (pop_tail restored it).
        let entry =
            if f == "pop_tail" { "probe process.function(\"pop_tail\") { e[tid()] = register(\"rbx\") }" } else { "" };
        let check = if f == "pop_tail" { "|| register(\"rbx\") != e[tid()]" } else { "" };
        let script = format!(
            "global n, r, e, bad {entry} probe process.statement({site:#x}) {{ n++; r += register(\"rax\") \
             if (usymname(uaddr()) != \"{f}\" {check}) bad++ }} probe end {{ printf(\"%d %d %d\\n\", n, r, bad) }}"
        );
        let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{f}: {err}");
        assert_eq!(out, format!("{own}{n} {sum} 0\n"), "{f}: {err}");
        // Lean: only a count.
        let script = format!("global n probe process.statement({site:#x}) {{ n++ }} probe end {{ println(n) }}");
        let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{f}: {err}");
        assert_eq!(out, format!("{own}{n}\n"), "{f}: {err}");
    }
}

const PYTHON: &str = "/usr/bin/python3.11";

/// Debian's python3.11 (stripped, non-PIE; markers guarded by semaphores):
/// function__entry and function__return count the calls of one Python
/// function exactly. CPython 3.11 runs function__entry only on its traced
/// path, so the script sets a profile function, as a user of the marker
/// must.
#[test]
fn python_function_markers_count_calls() {
    let d = common::scratch("python");
    let py = d.join("calls.py");
    std::fs::write(
        &py,
        "import sys\n\
         def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\
         def square(x):\n    return x * x\n\
         sys.setprofile(lambda *a: None)\n\
         print(fib(12), sum(map(square, range(100))))\n\
         sys.setprofile(None)\n",
    )
    .expect("write script");
    let script = r#"global e, r
probe process.mark("function__entry") { e[user_string($arg2)]++ }
probe process.mark("function__return") { r[user_string($arg2)]++ }
probe end { printf("fib %d/%d square %d/%d\n", e["fib"], r["fib"], e["square"], r["square"]) }"#;
    let cmd = format!("{PYTHON} {}", py.display());
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "144 328350\nfib 465/465 square 100/100\n");
}

/// The python tapset (tapsets/python.tp) on Debian's python3.11: each
/// call of a function with its file and line, returns, an explicit
/// collection (generation 2), an import, an audit event. (The script
/// prints nothing itself: its output would interleave with ours.)
#[test]
fn python_tapset_names_calls_collections_imports_and_audits() {
    let d = common::scratch("python-tapset");
    let py = d.join("app.py");
    std::fs::write(
        &py,
        "import sys, gc\n\
         def f(x):\n    return x + 1\n\
         sys.setprofile(lambda *a: None)\n\
         f(1); f(2)\n\
         sys.setprofile(None)\n\
         gc.collect()\n\
         import json\n\
         sys.audit(\"telco.test\", 1)\n",
    )
    .expect("write script");
    let script = r#"global returns, full
probe python.function.entry { if (funcname == "f") printf("%s %s:%d\n", funcname, filename, lineno) }
probe python.function.return { if (funcname == "f") returns++ }
probe python.gc.start { if (generation == 2) full++ }
probe python.import.done { if (modulename == "json") printf("import %s %d\n", modulename, found) }
probe python.audit { if (event == "telco.test") println("audit ", event) }
probe end { printf("%d returns, full collections: %d\n", returns, full > 0) }"#;
    let cmd = format!("{PYTHON} {}", py.display());
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    let file = py.display();
    assert_eq!(
        out,
        format!("f {file}:2\nf {file}:2\nimport json 1\naudit telco.test\n2 returns, full collections: 1\n")
    );
}

/// The system libstdc++'s markers count C++ throws and catches exactly.
#[test]
fn libstdcxx_markers_count_throws() {
    let d = common::scratch("throw");
    let src = d.join("throw.cc");
    std::fs::write(
        &src,
        "#include <cstdio>\n#include <cstdlib>\n#include <stdexcept>\n\
         int main(int argc, char **argv) {\n  int n = atoi(argv[1]), caught = 0;\n\
           for (int i = 0; i < n; i++) { try { throw std::runtime_error(\"x\"); } catch (const std::exception &) { caught++; } }\n\
           printf(\"caught %d\\n\", caught);\n}\n",
    )
    .expect("write");
    let exe = d.join("throw");
    common::compile(&[&src], &exe, &["-O2"]);
    let script = r#"global t, c
probe process("libstdc++.so.6").mark("throw") { t++ }
probe process("libstdc++.so.6").mark("catch") { c++ }
probe end { println(t, " ", c) }"#;
    let cmd = format!("{} 7", exe.display());
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "caught 7\n7 7\n");
}

/// The libstdcxx tapset: throws and catches with the thrown type's name,
/// for a standard exception, a program's own class in a namespace, and an
/// int (rethrown: caught twice, and `libstdcxx.rethrow` sees it: Debian's
/// libstdc++ has two bytes there before a branch target, and the probe
/// takes a short jump to the padding after the function).
#[test]
fn libstdcxx_tapset_names_thrown_types() {
    let d = common::scratch("throw-types");
    let src = d.join("types.cc");
    std::fs::write(
        &src,
        "#include <stdexcept>\nnamespace app { struct Oops { int code; }; }\n\
         static int f(int k) {\n  switch (k) {\n  case 0: throw std::runtime_error(\"x\");\n\
           case 1: throw app::Oops{7};\n  default: throw 42;\n  }\n}\n\
         int main() {\n  int n = 0;\n  for (int k = 0; k < 3; k++) {\n\
             try { try { f(k); } catch (...) { throw; } } catch (...) { n++; }\n  }\n  return n == 3 ? 0 : 1;\n}\n",
    )
    .expect("write");
    let exe = d.join("types");
    common::compile(&[&src], &exe, &["-O2"]);
    let script = r#"probe libstdcxx.throw { println("throw ", type) }
probe libstdcxx.catch { println("catch ", type) }"#;
    let (out, err, code) = telco(&["-e", script, "-c", exe.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let mut want = String::new();
    for t in ["std::runtime_error", "app::Oops", "int"] {
        want.push_str(&format!("throw {t}\ncatch {t}\ncatch {t}\n"));
    }
    assert_eq!(out, want);
    let script = r#"probe libstdcxx.rethrow { println("rethrow ", type) }
probe libstdcxx.throw { println("throw ", type) }"#;
    let (out, err, code) = telco(&["-e", script, "-c", exe.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let want: String =
        ["std::runtime_error", "app::Oops", "int"].iter().map(|t| format!("throw {t}\nrethrow {t}\n")).collect();
    assert_eq!(out, want);
}

/// `.statement("func@file.c:LINE")` from DWARF line tables, at -O0 and
/// -O2: the line's first instruction in the function fires once per pass
/// through the loop; a line without code says which lines near it have
/// some, and `.nearest` takes the next one.
#[test]
fn line_statements_fire_each_pass() {
    let src = std::fs::read_to_string(common::repo().join("tests/programs/sdt.c")).expect("source");
    let line = src.lines().position(|l| l.contains("the loop's line")).expect("marked line") + 1;
    let blank =
        src.lines().take(line).enumerate().filter(|(_, l)| l.trim().is_empty()).last().expect("a blank line").0 + 1;
    for opt in ["-O0", "-O2"] {
        let exe = common::scratch(&format!("lines{opt}")).join("sdt");
        common::gcc("sdt.c", &exe, &[opt, "-g"]);
        let cmd = format!("{} loop 25", exe.display());
        let script =
            format!("global n probe process.statement(\"looping@sdt.c:{line}\") {{ n++ }} probe end {{ println(n) }}");
        let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert_eq!(out, format!("{}25\n", untraced(&exe, &["loop", "25"])), "{opt}");
        let script = format!("probe process.statement(\"*@sdt.c:{blank}\") {{ }}");
        let (_, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(1), "{opt}");
        assert!(err.contains(&format!("line {blank} of `sdt.c` has no code; lines near it that have:")), "{err}");
        let script = format!(
            "global n probe process.statement(\"*@sdt.c:{blank}\").nearest {{ n++ }} probe end {{ println(n > 0) }}"
        );
        let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert!(out.ends_with("\n1\n"), "{out}");
    }
    // Without -g: said.
    let exe = build("nolines");
    let (_, err, code) =
        telco(&["-e", "probe process.statement(\"*@sdt.c:10\") { }", "-c", &exe.display().to_string()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("has no DWARF line tables (build it with -g)"), "{err}");
}

/// The tracer's own probes (here a timer) read the target's memory with
/// `user_string`, from the sandbox they run in: a pointer the target's
/// probe saved is read in the target, not in the tracer.
#[test]
fn timer_probes_read_the_targets_memory() {
    let exe = build("userread");
    let mut target = common::Running::start(&exe, &["wait"]);
    assert_eq!(target.ready, "ready\n");
    let pid = target.pid().to_string();
    let script = "global p probe begin { println(\"armed\") } probe process.function(\"step\") { p = $arg2 } \
                  probe timer.ms(20) { if (p) { println(user_string(p)); exit() } }";
    let tracer = common::Tracer::start(&["-p", &pid, "-e", script], "armed");
    target.say("1");
    let (rest, err, code) = tracer.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rest, "wait\n");
}

/// Arguments given as symbols (`STAP_SDT_ARG_CONSTRAINT=m`: gas writes
/// `4@total(%rip)`, `4@4+parts(%rip)`): found in the module's symbol
/// tables, globals and statics, in a PIE, a fixed-address program and a
/// shared library, each moved by its load bias.
#[test]
fn symbolic_marker_arguments_are_the_variables() {
    let d = common::scratch("sdtsyms");
    let src = common::repo().join("tests/programs/sdtsyms.c");
    let lib = d.join("libsdtsyms.so");
    common::compile(&[&src], &lib, &["-O2", "-shared", "-fPIC", "-DLIB", "-DSTAP_SDT_ARG_CONSTRAINT=m"]);
    let script = r#"probe process.mark("main"), process.library("libsdtsym*").mark("lib") {
    printf("P %s %d %d %d %d\n", $$name, $arg1, $arg2, $arg3, $arg4)
}"#;
    for (tag, pie) in [("pie", "-pie"), ("fixed", "-no-pie")] {
        let exe = d.join(format!("sdtsyms-{tag}"));
        let rpath = format!("-Wl,-rpath,{}", d.display());
        let libdir = format!("-L{}", d.display());
        common::compile(&[&src], &exe, &["-O2", pie, "-DSTAP_SDT_ARG_CONSTRAINT=m", &libdir, "-lsdtsyms", &rpath]);
        let (out, err, code) = telco(&["-e", script, "-c", &exe.display().to_string()]);
        assert_eq!(code, Some(0), "{tag}: {err}");
        // What the program says it passed, then what the probes read.
        let (ours, its): (Vec<&str>, Vec<&str>) = out.lines().partition(|l| l.starts_with("P "));
        assert_eq!(its, ["main 40 5 6 3", "lib 70 8 9 1"], "{tag}: {out}");
        let ours: Vec<String> = ours.iter().map(|l| l[2..].to_string()).collect();
        assert_eq!(ours, its, "{tag}: {out}");
    }
}

/// A marker at two places, one where no jump fits (a loop comes back
/// right after its `nop`): named exactly, as by a wildcard, both sites
/// are probed, that one with a trap: it fires once a call, the other
/// once a pass.
#[test]
fn a_marker_where_no_jump_fits_is_probed_with_a_trap() {
    let exe = build("twice");
    let cmd = format!("{} twice 7", exe.display());
    for name in ["twice", "tw*"] {
        let script = format!("global n probe process.mark(\"{name}\") {{ n++ }} probe end {{ println(n) }}");
        let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{name}: {err}");
        assert_eq!(out, format!("{}8\n", untraced(&exe, &["twice", "7"])), "{name}: {err}");
        assert!(!err.contains("skipped"), "{name}: {err}");
        assert!(err.contains("WARNING: 1 probe point(s) placed with a trap where no jump fits"), "{name}: {err}");
        assert!(!err.contains("error"), "{name}: {err}");
    }
}

/// `.statement("func@file.c:FIRST-LAST")` and `"func@file.c:*"`: every
/// line with code in the range (or in the file), each at its first
/// instruction in each matching function. At -O0 the loop's two lines
/// fire once a pass each; `*` covers them and the function's other lines.
#[test]
fn line_ranges_and_wildcards_probe_every_line() {
    let src = std::fs::read_to_string(common::repo().join("tests/programs/sdt.c")).expect("source");
    let line = src.lines().position(|l| l.contains("the loop's line")).expect("marked line") + 1;
    let exe = common::scratch("lines-range").join("sdt");
    common::gcc("sdt.c", &exe, &["-O0", "-g"]);
    let cmd = format!("{} loop 25", exe.display());
    let own = untraced(&exe, &["loop", "25"]);
    let count = |spec: &str| {
        let script = format!("global n probe process.statement(\"{spec}\") {{ n++ }} probe end {{ println(n) }}");
        let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
        assert_eq!(code, Some(0), "{spec}: {err}");
        assert!(!err.contains("error"), "{spec}: {err}");
        out.strip_prefix(&own).unwrap_or_else(|| panic!("{spec}: {out}")).trim().parse::<u64>().expect("a count")
    };
    assert_eq!(count(&format!("looping@sdt.c:{}-{line}", line - 1)), 50);
    // The loop's lines (the asm label's line shares its address with the
    // next one), and the function's lines that run once.
    let all = count("looping@sdt.c:*");
    assert!((54..=80).contains(&all), "{all}");
    let listed = |spec: &str| {
        let (out, err, code) = telco(&["-l", &format!("process(\"{}\").statement(\"{spec}\")", exe.display())]);
        assert_eq!(code, Some(0), "{spec}: {err}");
        out
    };
    let one = listed(&format!("looping@sdt.c:{line}"));
    assert!(listed("*@sdt.c:*").contains(one.trim()), "{one}");
    // A range with no code is said.
    let (_, err, code) = telco(&["-e", "probe process.statement(\"looping@sdt.c:1-2\") { }", "-c", &cmd]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no function matching `looping` has code on lines 1-2 of `sdt.c`"), "{err}");
}

/// `.label` needs DWARF: without it, and for a label no function has,
/// a located error says so; `-l` lists labels by their names (the probes
/// themselves: docs/probe-points.md's example, run by tests/docs.rs).
#[test]
fn labels_without_dwarf_or_match_are_located_errors() {
    let dir = common::scratch("labels");
    let plain = dir.join("plain");
    common::gcc("docs.c", &plain, &[]);
    let script = "probe process.function(\"leaf\").label(\"counted\") { }";
    let (_, err, code) = telco(&["-e", script, "-c", &plain.display().to_string()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("labels need debug information"), "{err}");
    assert!(err.contains("<input>:1:"), "{err}");
    let with = dir.join("with");
    common::gcc("docs.c", &with, &["-g"]);
    let script = "probe process.function(\"leaf\").label(\"nowhere\") { }";
    let (_, err, code) = telco(&["-e", script, "-c", &with.display().to_string()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no label matching `nowhere` in a function matching `leaf`"), "{err}");
    // Listed, and named by pp(), as SystemTap names them.
    let p = with.display();
    let (out, err, code) = telco(&["-l", &format!("process(\"{p}\").function(\"leaf\").label(\"*\")")]);
    assert_eq!((code, out), (Some(0), format!("process(\"{p}\").function(\"leaf\").label(\"counted\")\n")), "{err}");
}

/// Two markers one right after the other (two `nop`s): a jump at the first
/// would take the second's byte, so the first gets a trap and both fire,
/// with their arguments, N times each.
#[test]
fn adjacent_markers_both_fire() {
    let exe = build("adjacent");
    let cmd = format!("{} adjacent 9", exe.display());
    let script = "global f, s probe process.mark(\"first\") { f++ } probe process.mark(\"second\") { s += $arg1 } \
                  probe end { println(f, \" \", s) }";
    let (out, err, code) = telco(&["-v", "-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{}9 36\n", untraced(&exe, &["adjacent", "9"])), "{err}");
    assert!(err.contains("placed with a trap (another probe's site is inside the jump's bytes)"), "{err}");
}
