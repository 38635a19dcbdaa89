//! The command line, through the real binary: options are validated, bad
//! input gets a clear message and a non-zero exit, and passes that do not
//! exist yet say so instead of silently doing nothing.

use std::io::Write;
use std::process::{Command, Output, Stdio};

mod common;

fn telco(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_telco-stap")).args(args).output().expect("run telco-stap")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_fails(o: &Output, code: i32, needle: &str) {
    assert_eq!(o.status.code(), Some(code), "stdout: {}\nstderr: {}", stdout(o), stderr(o));
    assert!(stderr(o).contains(needle), "stderr lacks {needle:?}:\n{}", stderr(o));
    assert!(!stderr(o).contains("panicked"), "panic:\n{}", stderr(o));
}

#[test]
fn last_pass_1_prints_the_canonical_script() {
    let o = telco(&["--last-pass", "1", "-e", "probe begin { printf(\"%d\\n\", 6*7); exit() }"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "probe begin {\n    printf(\"%d\\n\", 6 * 7);\n    exit();\n}\n");
}

#[test]
fn last_pass_1_reads_a_file_and_stdin() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/hello.tp");
    let o = telco(&["--last-pass", "1", script]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("printf(\"%d\\n\", 6 * 7);"));

    let mut child = Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(["--last-pass", "1", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(b"probe end { println(1) }").expect("write");
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "probe end {\n    println(1);\n}\n");
}

#[test]
fn syntax_errors_are_rendered_with_file_line_col_and_caret() {
    let o = telco(&["--last-pass", "1", "-e", "probe begin {\n  x = = 3\n  y = 1 +\n}"]);
    assert_fails(&o, 1, "error[P0006]: unexpected `=`");
    let err = stderr(&o);
    assert!(err.contains("┌─ <input>:2:7"), "{err}");
    assert!(err.contains("^ expected an expression"), "{err}");
    // Recovery: the second error is reported too.
    assert!(err.contains("<input>:4:1"), "{err}");
    assert!(err.contains("Pass 1: parse failed with 2 errors."), "{err}");
}

/// A variable given a value in one probe and read in another is each
/// probe's own: the error points at the other and says `global n`.
#[test]
fn a_probe_s_variable_read_in_another_probe_asks_for_global() {
    let o = telco(&["-e", "probe begin { n++ } probe end { println(n) }"]);
    assert_fails(&o, 1, "error[E0010]: cannot tell the type of `n`");
    let err = stderr(&o);
    assert!(err.contains("this `n` is another probe's own variable"), "{err}");
    assert!(err.contains("help: to share one variable between probes, declare it: `global n`"), "{err}");
    // Declared, it runs.
    let o = telco(&["-e", "global n probe begin { n++; exit() } probe end { println(n) }"]);
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "1\n"), "{}", stderr(&o));
}

/// Every `-e` one-liner of `--help` and of the README's Usage block
/// compiles (pass 2; those on `process.function` with `-c` of a program
/// that has `work`, the by-path one on Debian's nginx).
#[test]
fn the_usage_one_liners_compile() {
    let readme = std::fs::read_to_string(common::repo().join("README.md")).expect("README.md");
    let usage = readme.split("## Usage").nth(1).and_then(|u| u.split("\n#").next()).expect("a Usage block");
    let help = stdout(&telco(&["--help"]));
    let prog = target_program();
    let mut seen = 0;
    for text in [usage, help.as_str()] {
        for part in text.split("-e '").skip(1) {
            let script = part.split('\'').next().unwrap_or_default().replace("\\\"", "\"");
            let mut args = vec!["--last-pass", "2", "-e", &script];
            if script.contains("process.function") {
                args.extend(["-c", prog.to_str().unwrap()]);
            }
            let o = telco(&args);
            assert_eq!(o.status.code(), Some(0), "{script}:\n{}", stderr(&o));
            seen += 1;
        }
    }
    assert!(seen >= 4, "{seen} one-liners");
}

/// `-p` of a kernel thread says what it is, not that there is no such
/// process.
#[test]
fn a_kernel_thread_is_named_as_one() {
    let kthread = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().nth(6)?.parse::<u64>().ok())
                    .is_some_and(|f| f & 0x0020_0000 != 0)
            })
        })
        .expect("a kernel thread in /proc (kthreadd is pid 2 outside a PID namespace)");
    let o = telco(&["-p", &kthread.to_string(), "-e", "probe process.function(\"main\") {}"]);
    assert_fails(&o, 1, &format!("pid {kthread} ("));
    assert!(stderr(&o).contains("is a kernel thread: it runs no program to probe"), "{}", stderr(&o));
}

#[test]
fn the_one_liner_of_the_issue_prints_42() {
    let o = telco(&["-e", "probe begin { printf(\"%d\\n\", 6*7); exit() }"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "42\n");
    assert_eq!(stderr(&o), "");
}

#[test]
fn last_pass_3_prints_clif_and_4_the_disassembly() {
    let o = telco(&["--last-pass", "3", "-e", "global n probe begin { n++; exit() }"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("; probe 0 (begin)") && out.contains("function u2:0(i64, i64) system_v"), "{out}");
    assert!(out.contains("atomic_rmw.i64 add"), "n++ on a global is an atomic add:\n{out}");
    let o = telco(&["--last-pass", "4", "-e", "global n probe begin { n++; exit() }"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("probe 0 (begin):") && out.contains("lock add"), "n++ is one locked add:\n{out}");
    assert!(out.contains("; rt_exit"), "calls into the runtime library are named:\n{out}");
}

/// A small target program with a function `work`, built with gcc.
fn target_program() -> std::path::PathBuf {
    // One directory per call: tests run in parallel.
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = common::scratch(&format!("cli-{n}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    common::compile_text(
        &dir,
        "prog",
        "__attribute__((noinline)) int work(int x) { return x + 1; }\nint main(void) { return work(-1); }\n",
        &["-O1"],
    )
}

#[test]
fn every_shipped_script_compiles_to_pass_4() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let prog = target_program();
    let prog = prog.to_string_lossy().into_owned();
    let cxx = prog.clone() + "-cxx";
    common::compile(&[&common::repo().join("tests/programs/exceptions.cc")], std::path::Path::new(&cxx), &["-O2"]);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("scripts/") {
        let p = e.expect("entry").path();
        if p.extension().is_none_or(|x| x != "tp") {
            continue;
        }
        // Scripts about a target get the small program and its `work`;
        // those of the python and libstdcxx tapsets, a program that has
        // their markers.
        let text = std::fs::read_to_string(&p).expect("read");
        let mut args = vec!["--last-pass", "4"];
        if text.contains("python.") {
            args.extend(["-c", "/usr/bin/python3.11"]);
        } else if text.contains("libstdcxx.") {
            args.extend(["-c", &cxx]);
        } else if text.contains("process.") || text.contains("libc.") || text.contains("pthread.") {
            args.extend(["-c", &prog]);
        }
        let ps = p.to_string_lossy().into_owned();
        args.push(&ps);
        if text.contains("@1") {
            args.push("work");
        }
        let o = telco(&args);
        assert_eq!(o.status.code(), Some(0), "{}: {}", p.display(), stderr(&o));
        assert!(stdout(&o).contains("; blob: "), "{}", p.display());
        n += 1;
    }
    assert!(n >= 5, "only {n} scripts found");
}

/// A `.stpm` macro library below an `-I` directory: its `@define`s are
/// every script's (and a broken one is named in the message).
#[test]
fn macro_libraries_below_include_directories() {
    let dir = common::scratch("stpm");
    let lib = dir.join("lib").join("deeper");
    std::fs::create_dir_all(&lib).expect("mkdir");
    std::fs::write(lib.join("twice.stpm"), "// doubles\n@define twice(x) %( (2 * (@x)) %)\n").expect("write");
    let inc = dir.join("lib");
    let o = telco(&["-I", &inc.to_string_lossy(), "-e", "probe begin { println(@twice(21)) exit() }"]);
    assert_eq!(stdout(&o), "42\n", "{}", stderr(&o));
    std::fs::write(lib.join("twice.stpm"), "@define twice(x) %( (2 * (@x))\n").expect("write");
    let o = telco(&["-I", &inc.to_string_lossy(), "-e", "probe begin { println(@twice(21)) exit() }"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("macro library") && stderr(&o).contains("twice.stpm"), "{}", stderr(&o));
}

#[test]
fn output_file_receives_printf_output() {
    let dir = common::scratch("o");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let f = dir.join("out.txt");
    let fs = f.to_string_lossy().into_owned();
    let o = telco(&["-o", &fs, "-e", "probe begin { println(\"to the file\"); warn(\"to stderr\"); exit() }"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
    assert_eq!(stderr(&o), "WARNING: to stderr\n");
    assert_eq!(std::fs::read_to_string(&f).expect("output file"), "to the file\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn timeout_ends_the_session_and_runs_end_probes() {
    let o = telco(&["-T", "0.2", "-e", "global n probe timer.ms(10) { n++ } probe end { println(n > 3) }"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "1\n");
}

#[test]
fn interrupt_runs_end_probes_and_exits_zero() {
    // Readiness by the pipe: the begin probe's line.
    let child =
        common::Tracer::start(&["-e", "probe begin { println(\"ready\") } probe end { println(\"bye\") }"], "ready");
    let pid = child.child.id().to_string();
    let k = Command::new("kill").args(["-INT", &pid]).status().expect("kill");
    assert!(k.success());
    let (rest, err, code) = child.finish();
    assert_eq!(rest, "bye\n");
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn itrace_probes_need_an_itrc_file_and_function_probes_run_by_path() {
    let prog = target_program();
    let prog = prog.to_string_lossy().into_owned();
    let o = telco(&["-e", "probe process.function(\"work\").itrace { }", "-c", &prog]);
    assert_fails(&o, 1, "this script has .itrace probes: name the instruction trace file with --itrc FILE");
    // Without -p or -c, by path: nothing runs it, and the end says so.
    let script = format!("global n probe process(\"{prog}\").function(\"work\") {{ n++ }}");
    let o = telco(&["-T", "0.3", "-e", &script]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("WARNING: no process ran or mapped {prog} while the session ran")),
        "{}",
        stderr(&o)
    );
}

#[test]
fn last_pass_2_prints_the_resolved_program() {
    let o = telco(&["--last-pass", "2", "-e", "global n probe begin { n = strlen(\"ab\"); exit() }"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("n:long"), "{out}");
    assert!(out.contains("probe begin"), "{out}");
    let o = telco(&["--last-pass", "2", "-e", "probe begin { x = 1; x = \"s\" }"]);
    assert_fails(&o, 1, "error[E0009]: type mismatch for `x`: string here, but long before");
    assert!(stderr(&o).contains("Pass 2: elaboration failed with 1 error."), "{}", stderr(&o));
}

#[test]
fn listing_parses_the_probe_point_first() {
    let o = telco(&["-l", "process(\"libc.so.6\").function(\"malloc\")"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("libc.so.6\").function(\"malloc\")"), "{}", stdout(&o));
    let o = telco(&["-L", "libc.malloc"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "libc.malloc bytes:long name:string\n");
    let o = telco(&["-l", "process(\"libc.so.6\").function(\"mem*\").retrun"]);
    assert_fails(&o, 1, "unknown probe point suffix `.retrun`");
    assert!(stderr(&o).contains("did you mean `.return`?"), "{}", stderr(&o));
    let o = telco(&["-L", "process(.function"]);
    assert_fails(&o, 1, "error[P0006]");
}

#[test]
fn missing_script_and_unreadable_files() {
    assert_fails(&telco(&[]), 1, "no script given");
    assert_fails(&telco(&["/nonexistent/x.tp"]), 1, "cannot read script `/nonexistent/x.tp`");
    let dir = common::scratch("cli");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let bin = dir.join("bin.tp");
    std::fs::write(&bin, b"probe begin { \xff }").expect("write");
    assert_fails(&telco(&["--last-pass", "1", bin.to_str().expect("utf8")]), 1, "is not UTF-8 text");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn options_are_validated() {
    let e = ["-e", "probe begin {}"];
    let cases: &[(&[&str], &str)] = &[
        (&["-p", "0"], "a process id is a positive number"),
        (&["-p", "abc"], "is not a process id"),
        (&["-x", "-5"], "a process id is a positive number"),
        (&["-p", "1", "-c", "true"], "cannot be used with"),
        (&["-c", "  "], "the command is empty"),
        (&["-D", "MAXACTON=5"], "did you mean MAXACTION?"),
        (&["-D", "MAXACTION"], "expected NAME=VALUE"),
        (&["-D", "MAXSTRINGLEN=abc"], "needs a non-negative whole number"),
        (&["-T", "-1"], "is not a positive number of seconds"),
        (&["-T", "0"], "is not a positive number of seconds"),
        (&["--last-pass", "6"], "6 is not in 1..=5"),
        (&["--last-pass", "0"], "0 is not in 1..=5"),
        (&["-I", "/nonexistent-dir"], "does not exist"),
        (&["--chrome-min-dur", "5us"], "--chrome <FILE>"),
        (&["--chrome", "x.json", "--chrome-min-dur", "fast"], "is not a duration"),
        (&["--bogus"], "unexpected argument '--bogus'"),
    ];
    for (args, needle) in cases {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(e);
        assert_fails(&telco(&all), 2, needle);
    }
}

#[test]
fn run_targets_and_outputs_are_checked_before_anything_runs() {
    let e = ["-e", "probe begin { exit() }"];
    let o = telco(&[&["-p", "2147483646"][..], &e].concat());
    assert_fails(&o, 1, "no process with pid 2147483646");
    let o = telco(&[&["-c", "/nonexistent/prog --flag"][..], &e].concat());
    assert_fails(&o, 1, "program `/nonexistent/prog` not found");
    let o = telco(&[&["-o", "/nonexistent-dir/out.txt"][..], &e].concat());
    assert_fails(&o, 1, "directory `/nonexistent-dir` does not exist");
    let o = telco(&[&["--chrome", "/"][..], &e].concat());
    assert_fails(&o, 1, "is a directory");
}

#[test]
fn options_may_follow_the_script_and_dashed_arguments_follow_double_dash() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/hello.tp");
    let o = telco(&[script, "--last-pass", "1", "x", "y"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = telco(&["-e", "probe begin { %( $# == 2 %? println(@2) %) }", "--last-pass", "1", "--", "-5", "-x"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("println(@2)"), "{}", stdout(&o));
}

#[test]
fn script_arguments_reach_the_preprocessor() {
    let script = "probe begin { %( $# == 2 %? two = @2 %: other = 1 %) }";
    let o = telco(&["--last-pass", "1", "-e", script, "a", "b"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("two = @2;"), "{}", stdout(&o));
    let o = telco(&["--last-pass", "1", "-e", script, "a"]);
    assert!(stdout(&o).contains("other = 1;"), "{}", stdout(&o));
}

#[test]
fn help_version_and_completions() {
    let o = telco(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let h = stdout(&o);
    for needle in ["Examples:", "-p <PID>", "--last-pass <N>", "--chrome <FILE>", "--itrc <FILE>", "itrc-dump"] {
        assert!(h.contains(needle), "--help lacks {needle}:\n{h}");
    }
    let o = telco(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with("telco-stap "), "{}", stdout(&o));
    for (shell, needle) in [("bash", "complete -F"), ("zsh", "#compdef telco-stap"), ("fish", "complete -c telco-stap")]
    {
        let o = telco(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains(needle), "{shell} completion lacks {needle}");
        assert!(stdout(&o).contains("last-pass"), "{shell} completion lacks options");
    }
}

#[test]
fn itrc_dump_reads_an_empty_trace_and_refuses_a_missing_file() {
    // More in tests/itrc.rs.
    assert_fails(&telco(&["itrc-dump", "/nonexistent.itrc"]), 1, "cannot read `/nonexistent.itrc`");
    let f = common::scratch("itrc-file").join("t.itrc");
    std::fs::write(&f, b"ITRC").expect("write");
    let o = telco(&["itrc-dump", f.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "summary: 0 blocks compiled, 0 blocks executed, 0 lost, no itrace:end\n");
    std::fs::remove_file(&f).ok();
}

#[test]
fn warnings_can_be_silenced_and_broken_pipes_end_quietly() {
    // A big canonical print into a pipe closed after the first line.
    let mut text = String::new();
    for i in 0..20000 {
        text.push_str(&format!("probe timer.ms({}) {{ x{i} = {i} }}\n", i + 1));
    }
    let mut child = Command::new("sh")
        .args(["-c", &format!("{} --last-pass 1 - | head -n 1", env!("CARGO_BIN_EXE_telco-stap"))])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write");
    let o = child.wait_with_output().expect("wait");
    assert_eq!(stdout(&o), "probe timer.ms(1) {\n");
    assert!(stderr(&o).is_empty(), "stderr: {}", stderr(&o));
}

/// Inputs that once crashed or hung pass 2 (found in review): each now
/// finishes with a clear result.
#[test]
fn pass_2_survives_hostile_scripts() {
    // A 10,000-deep `else if` chain and a 10,000-term sum: deep recursion.
    let chain: Vec<String> = (0..10_000).map(|i| format!("if (x == {i}) println({i})")).collect();
    let deep = format!("probe begin {{ x = 1; {} }}", chain.join(" else "));
    let sum = format!("probe begin {{ x = 1{}; println(x) }}", " + 1".repeat(10_000));
    let dir = common::scratch("hostile");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (name, text) in [("deep.tp", &deep), ("sum.tp", &sum)] {
        let f = dir.join(name);
        std::fs::write(&f, text).expect("write");
        let o = telco(&["--last-pass", "2", f.to_str().expect("utf8")]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
    }
    std::fs::remove_dir_all(&dir).ok();

    // An alias that expands into itself three ways: one error, at once.
    let o = telco(&["--last-pass", "2", "-e", "probe a = a, a, a {} probe a { }"]);
    assert_fails(&o, 1, "probe alias `a` expands into itself");
    assert_eq!(stderr(&o).matches("error[E0005]").count(), 1, "{}", stderr(&o));

    // Histogram bounds that overflow 64 bits.
    let o = telco(&[
        "--last-pass",
        "2",
        "-e",
        "global s probe begin { s <<< 1; print(@hist_linear(s, -1, 9223372036854775807, 1)) }",
    ]);
    assert_fails(&o, 1, "more than 10000 buckets");

    // A device as a module: refused, not read forever.
    let o = telco(&["--last-pass", "2", "-e", "probe process(\"/dev/zero\").function(\"x\") { }"]);
    assert_fails(&o, 1, "not a regular file");
}

/// `telco-stap man` renders the manual page from the command-line
/// definition; docs/telco-stap.1 is that output (regenerate it with
/// `telco-stap man > docs/telco-stap.1` when an option changes).
#[test]
fn the_manual_page_is_generated_and_current() {
    let (out, err, code) = common::telco_run(&["man"]);
    assert_eq!(code, Some(0), "{err}");
    for part in [".TH telco-stap 1", ".SH SYNOPSIS", "\\-\\-chrome", ".SH EXAMPLES", ".SH \"SEE ALSO\""] {
        assert!(out.contains(part), "no {part} in:\n{out}");
    }
    let committed = std::fs::read_to_string(common::repo().join("docs/telco-stap.1")).expect("docs/telco-stap.1");
    assert!(committed == out, "docs/telco-stap.1 is stale: run `telco-stap man > docs/telco-stap.1`");
}

/// `--dump-functions` and `--dump-probe-aliases` list what a script can
/// use, with the summary each tapset item's documentation comment gives
/// (and every shipped tapset item has one).
#[test]
fn functions_and_aliases_are_listed_with_their_documentation() {
    let (out, err, code) = common::telco_run(&["--dump-functions"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().any(|l| l == "printf:unknown (string, ...)"), "{out}");
    assert!(out.lines().any(|l| l == "user_string:string (long, [string])"), "{out}");
    assert!(out.contains("bytes_to_string:string (bytes:long)  [<tapset>/units.tp] - a byte count"), "{out}");
    let (aliases, err, code) = common::telco_run(&["--dump-probe-aliases"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        aliases
            .contains("libc.malloc = process(\"libc.so.6\").function(\"malloc\")  [<tapset>/libc.tp] - void *malloc"),
        "{aliases}"
    );
    for l in out.lines().filter(|l| l.contains("[<tapset>/")).chain(aliases.lines()) {
        assert!(l.contains("] - "), "no documentation summary: {l}");
    }
    assert!(aliases.lines().count() >= 15, "{aliases}");
}

mod generated {
    //! Generated command lines (options, values, scripts, in any order):
    //! an answer or a message and exit status 0, 1 or 2 (a usage error),
    //! never a panic (101) or a signal, within the time `timeout` allows.
    //! (No `-p` or `-c`: a generated line must not attach to this
    //! machine's processes or run its programs.)
    use proptest::prelude::*;

    const WORDS: &[&str] = &[
        "-e",
        "-o",
        "-s",
        "-D",
        "-T",
        "-g",
        "-w",
        "-u",
        "-v",
        "-l",
        "-L",
        "-I",
        "--chrome",
        "--chrome-min-dur",
        "--compatible",
        "--compatible=1.2",
        "--skip-badvars",
        "--itrc",
        "--last-pass",
        "--dump-functions",
        "--dump-probe-aliases",
        "-V",
        "--bogus",
        "itrc-dump",
        "man",
        "completions",
        "0",
        "1",
        "-1",
        "99999999999999999999",
        "5",
        "0.001",
        "MAXACTION=1",
        "MAXACTION",
        "=",
        "",
        "probe begin { exit() }",
        "probe end {",
        "process(\"/bin/true\").function(\"*\")",
        "libc.*",
        "/bin/true",
        "/nonexistent",
        "true",
        "bash",
        "zsh",
        "/dev/null",
        "x.json",
        "NAME=1",
        "%",
        "@1",
        "$1",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn generated_command_lines_get_an_answer_or_a_message(
            args in prop::collection::vec(prop::sample::select(WORDS), 0..7),
        ) {
            let dir = super::common::scratch("cli-generated");
            let o = std::process::Command::new("timeout")
                .args(["-s", "KILL", "30"])
                .arg(env!("CARGO_BIN_EXE_telco-stap"))
                .args(&args)
                .current_dir(&dir)
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run telco-stap");
            let err = String::from_utf8_lossy(&o.stderr);
            prop_assert!(matches!(o.status.code(), Some(0 | 1 | 2)), "{args:?}: {:?}\n{err}", o.status);
        }
    }
}

/// `-G NAME=VALUE` starts a global with a value (a number, or a string),
/// and SystemTap's argv tapset gives `argc` and `argv[]` from the script's
/// arguments, which `-G` overrides; a `-G` for no global is an error.
#[test]
fn globals_from_the_command_line_and_the_argv_tapset() {
    let dir = common::scratch("cli-argv");
    let script = dir.join("argv.stp");
    std::fs::write(
        &script,
        "probe begin { printf(\"argc=%d\\n\", argc) for (i = 1; i <= argc; i++) printf(\"argv[%d]=%s\\n\", i, argv[i]) exit() }\n",
    )
    .unwrap();
    let s = script.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![s];
        args.extend(extra);
        let (out, err, code) = common::telco_run(&args);
        assert_eq!(code, Some(0), "{extra:?}: {err}");
        out
    };
    assert_eq!(run(&[]), "argc=0\n");
    assert_eq!(run(&["hello", "world"]), "argc=2\nargv[1]=hello\nargv[2]=world\n");
    assert_eq!(run(&["-G", "argc=1", "-G", "argv_1=hi"]), "argc=1\nargv[1]=hi\n");
    assert_eq!(run(&["smelly", "panda", "-G", "argv_1=hello"]), "argc=2\nargv[1]=hello\nargv[2]=panda\n");
    let (out, err, code) = common::telco_run(&[
        "-G",
        "n=5",
        "-G",
        "s=abc",
        "-e",
        "global n, s = \"x\" probe begin { println(n, \" \", s); exit() }",
    ]);
    assert_eq!((out.as_str(), code), ("5 abc\n", Some(0)), "{err}");
    let (_, err, code) = common::telco_run(&["-G", "zz=1", "-e", "probe begin { exit() }"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("-G zz=...: the script has no global `zz`"), "{err}");
    let (_, err, code) = common::telco_run(&["-G", "n=abc", "-e", "global n = 1 probe begin { println(n); exit() }"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("`n` is a number, and `abc` is not one"), "{err}");
}
