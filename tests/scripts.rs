//! Every bundled script in `scripts/` runs as its usage comment says, on a
//! program with a known answer, and gives that answer. The commands are
//! read from the comments themselves (`//   telco-stap ...` lines), with
//! `/tmp/prog` (tests/programs/probed.c, as the comments say to build it)
//! and `/tmp/out.*` moved into this test's scratch directory; a comment
//! that drifts from what works fails here.

use std::path::{Path, PathBuf};

mod common;

/// The usage lines of a script: each command as words (single quotes
/// group, as the shell reads them).
fn usage(script: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(script).expect("script readable");
    text.lines()
        .filter_map(|l| l.strip_prefix("//   telco-stap "))
        .map(|cmd| {
            let mut words = Vec::new();
            let mut cur = String::new();
            let (mut quoted, mut any) = (false, false);
            for c in cmd.chars() {
                match c {
                    '\'' => {
                        quoted = !quoted;
                        any = true;
                    }
                    ' ' if !quoted => {
                        if any {
                            words.push(std::mem::take(&mut cur));
                        }
                        any = false;
                    }
                    c => {
                        cur.push(c);
                        any = true;
                    }
                }
            }
            assert!(!quoted, "{}: unbalanced quote in `{cmd}`", script.display());
            if any {
                words.push(cur);
            }
            words
        })
        .collect()
}

struct Run {
    stdout: String,
    stderr: String,
}

/// Run one usage command in `dir` (which holds `prog`); it must exit 0.
fn run(dir: &Path, words: &[String]) -> Run {
    run_status(dir, words, 0)
}

/// Run one usage command; it must exit with `want` (a command's own
/// status passes through).
fn run_status(dir: &Path, words: &[String], want: i32) -> Run {
    let words: Vec<String> = words
        .iter()
        .map(|w| {
            w.replace("/tmp/prog", &dir.join("prog").display().to_string())
                .replace("/tmp/out.", &format!("{}/out.", dir.display()))
        })
        .collect();
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    let (stdout, stderr, code) = common::telco_in(&common::repo(), &args);
    assert_eq!(code, Some(want), "telco-stap {}: {stderr}", words.join(" "));
    Run { stdout, stderr }
}

/// A scratch directory holding the target program; removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = common::scratch(&format!("scripts-{tag}"));
        common::gcc("probed.c", &d.join("prog"), &[]);
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn script(name: &str) -> (Scratch, Vec<Vec<String>>) {
    let cmds = usage(&common::repo().join("scripts").join(name));
    assert!(!cmds.is_empty(), "{name} has no usage line");
    (Scratch::new(name.trim_end_matches(".tp")), cmds)
}

/// The usage lines that need a running process (`-p PID`) are for users;
/// every other line runs here.
fn runnable(cmds: &[Vec<String>]) -> Vec<&Vec<String>> {
    cmds.iter().filter(|c| !c.iter().any(|w| w == "PID")).collect()
}

#[test]
fn every_script_is_tested_here() {
    let mut names: Vec<String> = std::fs::read_dir(common::repo().join("scripts"))
        .expect("scripts/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tp"))
        .collect();
    names.sort();
    let this = std::fs::read_to_string(common::repo().join("tests/scripts.rs")).expect("this file");
    for n in names {
        assert!(this.contains(&format!("script(\"{n}\")")), "scripts/{n} is run by no test in tests/scripts.rs");
    }
}

#[test]
fn hello() {
    let (d, cmds) = script("hello.tp");
    for c in runnable(&cmds) {
        assert_eq!(run(&d.0, c).stdout, "42\n");
    }
}

#[test]
fn count_calls() {
    let (d, cmds) = script("count-calls.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    assert_eq!(r.stdout, format!("work 1000000\n{:<40} {:>12}\n{:<40} {:>12}\n", "FUNCTION", "CALLS", "work", 1000));
}

#[test]
fn file_opens() {
    let (d, cmds) = script("file-opens.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 2);
    // Our program: two opens of /dev/null, one that fails.
    let r = run(&d.0, c[0]);
    assert_eq!(r.stdout, "open 3\n     2  /dev/null\n     1  /nonexistent/telco-stap\n1 failed open calls\n");
    // cat: its one failed open is counted (an `int` -1, not 4294967295);
    // cat's own status (1, a file missing) is the session's.
    let r = run_status(&d.0, c[1], 1);
    assert!(r.stdout.contains("     1  /nonexistent\n"), "{}", r.stdout);
    assert!(r.stdout.ends_with("\n1 failed open calls\n"), "{}", r.stdout);
}

#[test]
fn malloc_sizes() {
    let (d, cmds) = script("malloc-sizes.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    // 100 x malloc(100) and 100 x malloc(5000), one thread, nothing else.
    let (head, thread) = r.stdout.rsplit_once("thread ").expect("a thread line");
    assert_eq!(
        head,
        "alloc 200\n200 allocations, 498.0 KiB in total, average 2550 bytes\n\
         value |-------------------------------------------------- count\n\
         \x20  16 |                                                     0\n\
         \x20  32 |                                                     0\n\
         \x20  64 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 100\n\
         \x20 128 |                                                     0\n\
         \x20 256 |                                                     0\n\
         \x20     ~\n\
         \x201024 |                                                     0\n\
         \x202048 |                                                     0\n\
         \x204096 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 100\n\
         \x208192 |                                                     0\n\
         16384 |                                                     0\n\n"
    );
    let (tid, rest) = thread.split_once(": ").expect("thread: bytes");
    assert!(tid.parse::<u32>().is_ok(), "{thread}");
    assert_eq!(rest, "498.0 KiB\n");
}

#[test]
fn latency() {
    let (d, cmds) = script("latency.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    // Five calls of spin, each at least 200 us: all counted, none in a
    // bucket below 131072 ns.
    assert!(r.stdout.starts_with("spin 5\n"), "{}", r.stdout);
    let mut total = 0;
    for line in r.stdout.lines().filter(|l| l.contains('|') && !l.contains("count")) {
        let (value, rest) = line.split_once('|').expect("a histogram row");
        let value: u64 = value.trim().parse().expect("bucket value");
        let count: u64 = rest.split_whitespace().last().and_then(|n| n.parse().ok()).expect("count");
        assert!(count == 0 || value >= 131072, "{line}");
        total += count;
    }
    assert_eq!(total, 5, "{}", r.stdout);
}

#[test]
fn itrace() {
    let (d, cmds) = script("itrace.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 2);
    let r = run(&d.0, c[0]);
    assert_eq!(r.stdout, "work 9\n", "{}", r.stderr);
    // One file per call of work (3).
    for f in ["out.itrc", "out.itrc.2", "out.itrc.3"] {
        assert!(d.0.join(f).exists(), "{f} written");
    }
    assert!(!d.0.join("out.itrc.4").exists());
    // The dump of the first call: work's two instructions, run once.
    let r = run(&d.0, c[1]);
    assert!(r.stdout.contains("lea rax, [rdi+rdi+1]"), "{}", r.stdout);
    assert!(r.stdout.contains("summary: 1 blocks compiled, 1 blocks executed, 0 lost, end reached"), "{}", r.stdout);
}

#[test]
fn trace_calls() {
    let (d, cmds) = script("trace-calls.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    assert_eq!(r.stdout, "work 1000000\n");
    let text = std::fs::read_to_string(d.0.join("out.json")).expect("trace written");
    let ev: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let calls = ev.as_array().expect("array").iter().filter(|e| e["ph"] == "X" && e["name"] == "work").count();
    assert_eq!(calls, 1000);
}

#[test]
fn python_calls() {
    let (d, cmds) = script("python-calls.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    // calendar's output (under cProfile, with its own report), then ours.
    let (_, ours) = r.stdout.split_once("FUNCTION (FILE)").expect("the report's header");
    let rows: Vec<&str> = ours.lines().skip(1).collect();
    assert_eq!(rows.len(), 10, "{ours}");
    // Time includes the callees': the calendar module and the calls that
    // run it come first, one call each.
    let first: Vec<(&str, &str)> = rows[..3]
        .iter()
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (l.split(" (").next().unwrap_or(""), cols[cols.len() - 2])
        })
        .collect();
    assert_eq!(first, [("run_module", "1"), ("_run_code", "1"), ("<module>", "1")], "{ours}");
    assert!(rows[2].contains("(/usr/lib/python3.11/calendar.py)"), "{ours}");
}

#[test]
fn libc_calls() {
    let (d, cmds) = script("libc-calls.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    // cat's status (a file missing) is the session's.
    let r = run_status(&d.0, c[0], 1);
    let log: Vec<(&str, &str)> =
        r.stdout.lines().filter_map(|l| l.split_once(' ')).filter(|(p, _)| p.parse::<u32>().is_ok()).collect();
    let calls: Vec<&str> = log.iter().map(|(_, c)| *c).collect();
    for want in ["open(\"/etc/hostname\") = 3", "close(3) = 0", "open(\"/nonexistent\") = -1", "exit(1)"] {
        assert!(calls.contains(&want), "{want} in {}", r.stdout);
    }
    // Its error message, written to standard error.
    assert!(calls.iter().any(|c| c.starts_with("write(2) = ")), "{}", r.stdout);
    // All from one process.
    assert!(log.iter().all(|(p, _)| *p == log[0].0), "{}", r.stdout);
}

#[test]
fn malloc_leaks() {
    let (d, cmds) = script("malloc-leaks.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    // 30 blocks of 32..61 bytes kept by keeper(); borrower()'s freed. The
    // allocating function is named though only libc is probed.
    assert_eq!(
        r.stdout,
        format!(
            "leak 30\n{:<32} {:>8} {:>10}\n{:<32} {:>8} {:>10}\n",
            "ALLOCATED IN", "BLOCKS", "BYTES", "keeper", 30, 1395
        )
    );
}

/// On Debian's curl (its TLS library set up, about 2500 blocks live at
/// once): no array overflows, and libc's own allocations are named.
#[test]
fn malloc_leaks_on_curl() {
    let (stdout, stderr, code) =
        common::telco_in(&common::repo(), &["scripts/malloc-leaks.tp", "-c", "curl -s file:///etc/hostname"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("ERROR"), "{stderr}");
    assert!(stdout.contains("ALLOCATED IN") && stdout.lines().count() > 2, "{stdout}");
}

#[test]
fn exceptions() {
    let (d, cmds) = script("exceptions.tp");
    common::compile(&[&common::repo().join("tests/programs/exceptions.cc")], &d.0.join("prog-cxx"), &["-O2"]);
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    // Each of 10 rounds throws three ints (one of them caught, thrown
    // again with `throw;` and caught again): 30 thrown, 40 caught.
    assert_eq!(
        r.stdout.lines().skip(1).collect::<Vec<_>>(),
        [format!("{:<40} {:>8} {:>8}", "TYPE", "THROWN", "CAUGHT"), format!("{:<40} {:>8} {:>8}", "int", 30, 40)]
    );
}

#[test]
fn ssl_sniffer() {
    let (d, cmds) = script("ssl-sniffer.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    // Its client asks `openssl s_server -www` (one connection) for its page.
    let srv = common::tls_server(&d.0, &["-www"]);
    let words: Vec<String> = c[0]
        .iter()
        .map(|w| {
            let w = w.replace("/tmp/tls.sock", "tls.sock");
            if w.starts_with("scripts/") {
                common::repo().join(&w).display().to_string()
            } else {
                w
            }
        })
        .collect();
    // The script's lines to a file of their own: the client prints the
    // page to the same output, and one of our lines could land inside a
    // line of it.
    let args: Vec<&str> = ["-o", "probes.out"].into_iter().chain(words.iter().map(String::as_str)).collect();
    let o = common::telco_with_input(&d.0, &args, b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let out = std::fs::read_to_string(d.0.join("probes.out")).expect("the script's output");
    let ours: Vec<&str> = out.lines().filter(|l| l.starts_with("openssl[")).collect();
    let conn = ours[0].split_whitespace().nth(2).expect("the connection");
    assert!(ours[0].ends_with(&format!("> {conn} 18 bytes: \"GET / HTTP/1.0\\r\\n\\r\\n\"")), "{out}");
    assert!(ours[1].contains(&format!("< {conn} ")) && ours[1].contains(": \"HTTP/1.0 200 ok\\r\\n"), "{out}");
    let received: u64 = ours[1..]
        .iter()
        .map(|l| {
            assert!(l.contains(&format!("< {conn} ")), "{l}");
            l.split_whitespace().nth(3).and_then(|n| n.parse::<u64>().ok()).expect("a byte count")
        })
        .sum();
    // The status page lists every cipher: several kB.
    assert!(received > 2000, "{out}");
    let table: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("CONNECTION")).collect();
    assert_eq!(table.len(), 2, "{out}");
    assert_eq!(table[1].split_whitespace().collect::<Vec<_>>(), [conn, "18", &received.to_string()], "{out}");
    drop(srv);
}

#[test]
fn mutex_contention() {
    let (d, cmds) = script("mutex-contention.tp");
    let text = std::fs::read_to_string(common::repo().join("scripts/mutex-contention.tp")).expect("script");
    // Built as its comment says.
    let gcc = text.lines().find_map(|l| l.strip_prefix("//   gcc ")).expect("the build line");
    assert!(gcc.ends_with("tests/programs/locks.c"), "{gcc}");
    // Without frame pointers: the stacks come from the CFI.
    common::gcc("locks.c", &d.0.join("locks"), &["-fomit-frame-pointer"]);
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let words: Vec<String> =
        c[0].iter().map(|w| w.replace("/tmp/locks", &d.0.join("locks").display().to_string())).collect();
    let r = run(&d.0, &words);
    let rows: Vec<Vec<&str>> = r.stdout.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    // The program's one mutex: 2000 locks in the two adders, one in the
    // consumer, one in main; each row with its count and waits.
    let ours: Vec<(&str, &str)> =
        rows.iter().filter(|r| ["adder", "consumer", "main"].contains(&r[4])).map(|r| (r[4], r[1])).collect();
    let mut sorted = ours.clone();
    sorted.sort();
    assert_eq!(sorted, [("adder", "2000"), ("consumer", "1"), ("main", "1")], "{}", r.stdout);
    let mutexes: std::collections::BTreeSet<&str> =
        rows.iter().filter(|r| ["adder", "consumer", "main"].contains(&r[4])).map(|r| r[0]).collect();
    assert_eq!(mutexes.len(), 1, "{}", r.stdout);
    for r in &rows {
        assert!(r[2].ends_with("us") && r[3].ends_with("us"), "{r:?}");
    }
    // Whole stacks: a thread's to where threads start, main's to _start.
    for l in r.stdout.lines().filter(|l| l.contains("  adder <- ")) {
        assert!(l.ends_with("clone3") || l.ends_with("clone"), "{l}");
    }
    assert!(r.stdout.lines().any(|l| l.contains("  main <- ") && l.ends_with("_start")), "{}", r.stdout);
}

#[test]
fn call_graph() {
    let (d, cmds) = script("call-graph.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    // Per thread (its tid in the prefix), calls nest: each `->` one level
    // deeper than the last open call, each `<-` closing it at its level.
    let mut stacks: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    let mut calls: std::collections::BTreeMap<String, usize> = Default::default();
    for l in r.stdout.lines().filter(|l| l.contains(" prog(")) {
        let (_, rest) = l.split_once(" prog(").expect("the thread");
        let (tid, rest) = rest.split_once("):").expect("the tid");
        let tid: u32 = tid.parse().expect("a tid");
        assert!(tid > 0, "{l}");
        let depth = rest.len() - rest.trim_start().len();
        let mut words = rest.split_whitespace();
        let (arrow, func) = (words.next().expect("arrow"), words.next().expect("function").to_string());
        let stack = stacks.entry(tid).or_default();
        if arrow == "->" {
            assert_eq!(depth, stack.len(), "{l}");
            stack.push(func.clone());
            *calls.entry(func).or_default() += 1;
        } else {
            assert_eq!(stack.pop().as_deref(), Some(func.as_str()), "{l}");
            assert_eq!(depth, stack.len(), "{l}");
            assert!(words.next().is_some_and(|t| t.ends_with("ns")), "{l}");
        }
    }
    // Eight threads, two calls of work each; _start and main in the first.
    assert_eq!(stacks.len(), 9, "{}", r.stdout);
    assert_eq!(calls.get("thread_main"), Some(&8), "{}", r.stdout);
    assert_eq!(calls.get("work"), Some(&16), "{}", r.stdout);
    assert_eq!(calls.get("main"), Some(&1), "{}", r.stdout);
}

#[test]
fn python_flame() {
    let (d, cmds) = script("python-flame.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    // The same run's --chrome file: the same slices.
    let chrome: Vec<String> = c[0]
        .iter()
        .map(|w| if w == "--perfetto" { "--chrome".into() } else { w.replace("/tmp/out.pftrace", "/tmp/out.json") })
        .collect();
    let rc = run(&d.0, &chrome);
    // calendar's output and cProfile's, then ours: the calls per function.
    let lines: Vec<&str> = r.stdout.lines().collect();
    let report: std::collections::BTreeMap<String, u64> = lines[lines.len().saturating_sub(10)..]
        .iter()
        .filter_map(|l| l.trim_start().split_once("  "))
        .filter_map(|(n, f)| Some((f.to_string(), n.parse().ok()?)))
        .collect();
    assert_eq!(report.len(), 10, "{}", r.stdout);
    let mut per_file = Vec::new();
    for f in ["out.pftrace", "out.json"] {
        let v = common::viewer_check(&d.0.join(f)).expect("the Perfetto check (tests/chrome/install.sh)");
        assert_eq!(v["accepted"], true, "{v}");
        // The interpreter's main thread: every call a slice, nested.
        let t = v["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .find(|t| t["thread_name"] == "python3.11")
            .unwrap_or_else(|| panic!("no python3.11 thread in {f}: {v}"))
            .clone();
        let depths: std::collections::BTreeMap<String, u64> = t["depth_counts"]
            .as_object()
            .expect("depth counts")
            .iter()
            .map(|(k, n)| (k.clone(), n.as_u64().expect("a count")))
            .collect();
        let cal = "/usr/lib/python3.11/calendar.py";
        // formatweek joins a generator whose items call formatday.
        assert_eq!(depths.get(&format!("formatweek ({cal}:317)@6")), Some(&63), "{f}: {depths:?}");
        assert_eq!(depths.get(&format!("<genexpr> ({cal}:321)@7")), Some(&504), "{f}: {depths:?}");
        assert_eq!(depths.get(&format!("formatday ({cal}:307)@8")), Some(&441), "{f}: {depths:?}");
        // The report's counts are the slices'.
        for (name, n) in &report {
            let slices: u64 =
                depths.iter().filter(|(k, _)| k.rsplit_once('@').map(|x| x.0) == Some(name)).map(|(_, n)| n).sum();
            assert_eq!(slices, *n, "{f}: {name}");
        }
        per_file.push(depths);
    }
    assert_eq!(per_file[0], per_file[1], "--perfetto and --chrome differ");
    let _ = rc;
}

#[test]
fn profile() {
    let (d, cmds) = script("profile.tp");
    let c = runnable(&cmds);
    assert_eq!(c.len(), 1);
    let r = run(&d.0, c[0]);
    // `spin` (and the clock it reads) has all the CPU time: the top stack
    // goes through spin to main, whatever the leaf (the vDSO's clock).
    let n: u64 =
        r.stdout.lines().find_map(|l| l.strip_suffix(" samples")).and_then(|x| x.parse().ok()).expect("N samples");
    assert!(n >= 200, "{}", r.stdout);
    let top = r.stdout.split("\n\n").nth(1).expect("the top stack");
    assert!(top.contains("spin+0x") && top.contains("main+0x"), "{}", r.stdout);
    assert!(r.stdout.lines().any(|l| l.starts_with("spin ")), "{}", r.stdout);
    let svg = std::fs::read_to_string(d.0.join("out.svg")).expect("the flame graph");
    assert!(svg.contains("<title>spin (") && svg.contains("<title>main ("), "the flame graph lacks spin/main");
    // The vDSO's clock is named from its own image.
    assert!(!svg.contains("<title>[vdso] ("), "the vDSO's frames have no names");
}
