//! `--chrome FILE` through the binary, against tests/programs/spans.c:
//! complete events for every call of every probed function (nested
//! correctly per thread), printf lines and trace_instant/trace_counter,
//! thread names; valid JSON however the session ends; the minimum
//! duration filter; a trace larger than the tracer's memory.
//!
//! Where the real-viewer check is installed (`tests/chrome/install.sh`),
//! the traces are also loaded into it (`tests/chrome/check.sh`).

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::telco_run as telco;
use common::viewer_check;

fn dir() -> PathBuf {
    common::scratch("chrome")
}

fn target() -> PathBuf {
    let exe = dir().join("spans");
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| common::gcc("spans.c", &dir().join("spans"), &[]));
    exe
}

/// The trace's events; panics unless the file is one valid JSON array.
fn events(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("trace written");
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(v)) => v,
        other => panic!("not a JSON array: {other:?}\n{}", &text[text.len().saturating_sub(300)..]),
    }
}

fn ph<'a>(ev: &'a [Value], p: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["ph"] == p).collect()
}

/// A time of the trace (microseconds with three decimals, relative to
/// the session's start) in integer nanoseconds.
fn ns(v: &Value) -> u64 {
    let us = v.as_f64().expect("a number");
    assert!(us >= 0.0 && us < 1e12, "time {us} is not relative to the session");
    (us * 1000.0).round() as u64
}

/// Per thread: (name, depth) of every complete event, checking that each
/// lies wholly inside the enclosing one (in integer nanoseconds, the unit
/// the trace is written in).
fn nesting(ev: &[Value]) -> HashMap<u64, Vec<(String, usize)>> {
    let mut by_tid: HashMap<u64, Vec<(u64, u64, String)>> = HashMap::new();
    for e in ph(ev, "X") {
        let (ts, dur) = (ns(&e["ts"]), ns(&e["dur"]));
        by_tid.entry(e["tid"].as_u64().expect("tid")).or_default().push((ts, dur, e["name"].as_str().unwrap().into()));
    }
    let mut out = HashMap::new();
    for (tid, mut v) in by_tid {
        v.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut stack: Vec<u64> = Vec::new();
        let mut list = Vec::new();
        for (ts, dur, name) in v {
            while stack.last().is_some_and(|&end| end <= ts) {
                stack.pop();
            }
            if let Some(&end) = stack.last() {
                assert!(ts + dur <= end, "{name} at {ts} ns overlaps its parent (ends {end} ns)");
            }
            list.push((name, stack.len()));
            stack.push(ts + dur);
        }
        out.insert(tid, list);
    }
    out
}

/// From the viewer's summary: per thread, how many slices of `name` it
/// put at `depth`.
fn viewer_depths(report: &Value, name_at_depth: &str) -> Vec<u64> {
    let mut v: Vec<u64> = report["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| t["depth_counts"][name_at_depth].as_u64().unwrap_or(0))
        .collect();
    v.sort();
    v
}

#[test]
fn calls_nest_per_thread_with_printf_and_script_events() {
    let exe = target();
    let out = dir().join("nest.json");
    let script = r#"probe process.function("top") { printf("top %d\n", $arg1); trace_instant("hit"); trace_counter("arg", $arg1) }
                    probe process.function("mid") {}
                    probe process.function("leaf").return {}"#;
    let cmd = format!("{} nest 20", exe.display());
    let (stdout, stderr, code) = telco(&["-e", script, "-c", &cmd, "--chrome", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("top ")).count(), 40);
    let ev = events(&out);
    // The session says what the trace holds, as perf record does.
    let said = format!("--chrome: {} events, ", ev.len());
    assert!(stderr.contains(&said) && stderr.contains("; none dropped"), "{said} in {stderr}");
    let n = nesting(&ev);
    assert_eq!(n.len(), 2, "two threads");
    for list in n.values() {
        let count = |name: &str, depth: usize| list.iter().filter(|(n, d)| n == name && *d == depth).count();
        assert_eq!((count("top", 0), count("mid", 1), count("leaf", 2)), (20, 20, 40), "{list:?}");
        assert_eq!(list.len(), 80);
    }
    // ts and dur are microseconds with nanosecond fractions.
    let text = std::fs::read_to_string(&out).unwrap();
    for field in ["\"ts\":", "\"dur\":"] {
        for at in text.match_indices(field).map(|(i, _)| i + field.len()) {
            let num: String = text[at..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            assert!(num.split('.').nth(1).is_some_and(|f| f.len() == 3), "{num}");
        }
    }
    let instants = ph(&ev, "i");
    assert_eq!(instants.iter().filter(|e| e["cat"] == "printf").count(), 40);
    assert!(instants.iter().any(|e| e["args"]["text"] == "top 7\n" && e["s"] == "t"));
    assert_eq!(instants.iter().filter(|e| e["name"] == "hit").count(), 40);
    assert_eq!(ph(&ev, "C").iter().filter(|e| e["name"] == "arg").count(), 40);
    let meta = ph(&ev, "M");
    assert!(meta.iter().any(|e| e["name"] == "process_name" && e["args"]["name"] == "spans"));
    assert_eq!(meta.iter().filter(|e| e["name"] == "thread_name").count(), 2);
    // Every event of a thread names the same process.
    let pids: std::collections::HashSet<u64> = ev.iter().filter_map(|e| e["pid"].as_u64()).collect();
    assert_eq!(pids.len(), 1);
    if let Some(report) = viewer_check(&out) {
        // Perfetto nests them the same way, on two named threads.
        assert_eq!(viewer_depths(&report, "top@0"), [20, 20], "{report}");
        assert_eq!(viewer_depths(&report, "mid@1"), [20, 20]);
        assert_eq!(viewer_depths(&report, "leaf@2"), [40, 40]);
        let threads = report["threads"].as_array().unwrap();
        assert!(threads.iter().all(|t| t["process_name"] == "spans" && t["thread_name"].is_string()));
        let counters = report["counters"].as_array().unwrap();
        assert_eq!(counters.iter().map(|c| c["count"].as_u64().unwrap()).sum::<u64>(), 40);
    } else {
        eprintln!("note: the Perfetto check is not installed (tests/chrome/install.sh)");
    }
}

/// Threads started one after another (each may reuse the last one's stack
/// and thread control block, hence its thread slot) keep their own ids.
#[test]
fn threads_that_reuse_a_control_block_keep_their_ids() {
    let exe = target();
    let out = dir().join("reuse.json");
    let cmd = format!("{} reuse 4", exe.display());
    let (stdout, stderr, code) = telco(&[
        "-e",
        r#"probe process.function("top"), process.function("mid"), process.function("leaf") {}"#,
        "-c",
        &cmd,
        "--chrome",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let tids: Vec<u64> = stdout.lines().filter_map(|l| l.strip_prefix("thread ")?.parse().ok()).collect();
    assert_eq!(tids.len(), 4, "{stdout}");
    let n = nesting(&events(&out));
    let mut seen: Vec<u64> = n.keys().copied().collect();
    seen.sort_unstable();
    let mut want = tids.clone();
    want.sort_unstable();
    assert_eq!(seen, want, "{n:?}");
    for t in &tids {
        let count = |name: &str| n[t].iter().filter(|(m, _)| m == name).count();
        assert_eq!((count("top"), count("mid"), count("leaf")), (3, 3, 6), "{t}: {:?}", n[t]);
    }
}

#[test]
fn the_minimum_duration_leaves_out_short_calls() {
    let exe = target();
    let out = dir().join("slow.json");
    let cmd = format!("{} slow 100", exe.display());
    let script = r#"probe process.function("slow"), process.function("fast") {}"#;
    let (_, stderr, code) =
        telco(&["-e", script, "-c", &cmd, "--chrome", out.to_str().unwrap(), "--chrome-min-dur", "1ms"]);
    assert_eq!(code, Some(0), "{stderr}");
    let ev = events(&out);
    let names: Vec<&str> = ph(&ev, "X").iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["slow", "slow", "slow"]);
    if let Some(report) = viewer_check(&out) {
        assert_eq!(report["slice_count"], 3, "{report}");
    }
    assert!(ph(&ev, "X").iter().all(|e| ns(&e["dur"]) >= 1_000_000));
    // Without the filter, all 103 calls.
    let (_, _, code) = telco(&["-e", script, "-c", &cmd, "--chrome", out.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert_eq!(ph(&events(&out), "X").len(), 103);
}

/// The trampolines' slow paths: recursion deeper than the shadow stack
/// (1024 frames here, `-D MAXRETURNDEPTH`: deeper calls are skipped and
/// counted), calls left by
/// `longjmp` (never returned: no span; their frames are dropped and
/// counted), calls from a signal handler.
#[test]
fn deep_recursion_longjmp_and_signals_keep_the_trace_exact() {
    let exe = target();
    let out = dir().join("deep.json");
    let cmd = format!("{} deep 1100", exe.display());
    let (stdout, stderr, code) = telco(&[
        "-D",
        "MAXRETURNDEPTH=1024",
        "-e",
        r#"probe process.function("rec") {}"#,
        "-c",
        &cmd,
        "--chrome",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "1110");
    // rec(1100, 0): 1101 calls, the outer 1024 timed; 3 × rec(2, 0) from
    // the handler; rec(10, 0).
    let ev = events(&out);
    let x = ph(&ev, "X");
    assert_eq!(x.len(), 1024 + 3 * 3 + 11, "{stderr}");
    assert!(x.iter().all(|e| e["name"] == "rec"));
    // Reported, not lost silently: the 77 calls past the shadow stack and
    // the 51 that longjmp left.
    assert!(stderr.contains("skipped probes: 77\n"), "{stderr}");
    assert!(stderr.contains("WARNING: 51 call(s) left by longjmp"), "{stderr}");
    let n = nesting(&ev);
    let list = n.values().next().unwrap();
    let deepest = list.iter().map(|(_, d)| *d).max().unwrap();
    assert_eq!(deepest, 1023, "{list:?}");
}

#[test]
fn a_crashing_target_leaves_a_valid_trace() {
    let exe = target();
    let out = dir().join("crash.json");
    let cmd = format!("{} crash 5", exe.display());
    let (stdout, stderr, code) =
        telco(&["-e", r#"probe process.function("top") {}"#, "-c", &cmd, "--chrome", out.to_str().unwrap()]);
    assert_eq!(stdout.trim(), "65");
    assert_eq!(code, Some(128 + 11), "{stderr}");
    assert_eq!(ph(&events(&out), "X").len(), 5);
    if let Some(report) = viewer_check(&out) {
        assert_eq!(viewer_depths(&report, "top@0"), [5], "{report}");
    }
}

/// A session stopped from outside, the target still running: the trace
/// is closed and holds the calls made until then.
fn stopped_from_outside(name: &str, extra: &[&str], signal: Option<i32>) {
    let exe = target();
    let out = dir().join(format!("{name}.json"));
    let cmd = format!("{} forever", exe.display());
    let mut args = vec!["-e", r#"probe process.function("top") {}"#, "-c", &cmd, "--chrome", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    // 10,000 calls made (the target says so) before the session is stopped.
    let (mut tracer, _lines) = common::tracer_when_busy(&args);
    if let Some(sig) = signal {
        // SAFETY: signalling our own child.
        unsafe { libc_kill(tracer.id() as i32, sig) };
    }
    let st = tracer.wait().expect("exit");
    assert!(st.code().is_some(), "telco-stap died of a signal: {st:?}");
    let spans = ph(&events(&out), "X").len() as u64;
    assert!(spans > 0);
    if let Some(report) = viewer_check(&out) {
        assert_eq!(report["slice_count"], spans, "{report}");
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn sigterm_sigint_and_timeouts_close_the_trace() {
    stopped_from_outside("term", &[], Some(15));
    stopped_from_outside("int", &[], Some(2));
    stopped_from_outside("timeout", &["-T", "0.3"], None);
}

/// One `--chrome` run of `spans many CALLS`: the trace's size and
/// telco-stap's peak resident size in bytes (from `-v`: its own, where
/// wait4's would count the memory of the test it was forked from), with
/// every call accounted for (written, or counted as dropped).
fn large_trace(calls: u64) -> (u64, u64) {
    let exe = target();
    let out = dir().join(format!("large{calls}.json"));
    let cmd = format!("{} many {calls}", exe.display());
    let (stdout, stderr, code) =
        telco(&["-v", "-e", r#"probe process.function("leaf") {}"#, "-c", &cmd, "--chrome", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.is_empty());
    let size = std::fs::metadata(&out).expect("trace").len();
    let dropped: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("WARNING: ")?.split(" event(s) were dropped").next()?.parse().ok())
        .unwrap_or(0);
    let text = std::fs::read_to_string(&out).expect("read");
    let spans = text.matches("\"ph\":\"X\"").count() as u64;
    assert_eq!(spans + dropped, calls, "{stderr}");
    assert!(text.ends_with("\n]\n"));
    std::fs::remove_file(&out).ok();
    let peak: u64 = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("Pass 5: run completed in ")?
                .split("using at most ")
                .nth(1)?
                .strip_suffix("res kb.")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no peak in {stderr}"));
    (size, peak * 1024)
}

/// Memory stays bounded: four times the calls (a trace of some 350 MB
/// when none is dropped) take no more memory than a million, whose
/// buffers are already full. (How much of the trace is written depends
/// on how much CPU the writer gets: on a loaded machine, some calls are
/// dropped and counted. The peak does not depend on it.)
#[test]
fn a_large_trace_needs_little_memory() {
    let (_, peak) = large_trace(1_000_000);
    let (size, large) = large_trace(4_000_000);
    assert!(
        large <= peak + (8 << 20) && large < 160 << 20,
        "peak RSS {large} bytes for 4M calls ({size} bytes written), {peak} for 1M"
    );
}

/// `--chrome` adds a return probe to functions that may have the user's
/// own: two return probes on one function both fire on every call, with
/// the right `$return`, and the target's result is unchanged.
#[test]
fn two_return_probes_on_one_function() {
    let exe = target();
    let out = dir().join("tworet.json");
    let cmd = format!("{} nest 50", exe.display());
    let script = r#"global a, b
        probe process.function("leaf").return { a += $return }
        probe process.function("leaf").return { b++ }
        probe end { printf("%d %d\n", a, b) }"#;
    let untraced = Command::new(&exe).args(["nest", "50"]).output().expect("run");
    let want_sum: i64 = (0..50i64).map(|x| (2 * x + 1) + (2 * x + 3)).sum::<i64>() * 2;
    for chrome in [false, true] {
        let mut args = vec!["-e", script, "-c", &cmd];
        if chrome {
            args.extend(["--chrome", out.to_str().unwrap()]);
        }
        let (stdout, stderr, code) = telco(&args);
        assert_eq!(code, Some(0), "{stderr}");
        let mut lines = stdout.lines();
        assert_eq!(lines.next(), String::from_utf8_lossy(&untraced.stdout).lines().next());
        assert_eq!(lines.next(), Some(format!("{want_sum} 200").as_str()));
        if chrome {
            assert_eq!(ph(&events(&out), "X").len(), 200);
        }
    }
}

/// Every function of a real program at once (issue 17): Debian's
/// python3.11, `function("*")` with `--chrome` on a Python one-liner. The
/// program's output is its own, every call is a complete span, and the
/// trace opens in Perfetto's trace processor with as many slices.
#[test]
fn every_python_function_traced_opens_in_perfetto() {
    let py = "/usr/bin/python3.11";
    if !std::path::Path::new(py).exists() {
        panic!("{py} is missing: the test command (.ci/run) installs Debian's python3.11");
    }
    let out = dir().join("python.json");
    let (stdout, stderr, code) = telco(&[
        "-w",
        "-e",
        &format!("probe process(\"{py}\").function(\"*\") {{}}"),
        "--chrome",
        out.to_str().unwrap(),
        "-c",
        &format!("{py} -c \"print(sum(range(10)))\""),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "45\n");
    assert!(stderr.contains("; none dropped"), "{stderr}");
    let ev = events(&out);
    let spans = ph(&ev, "X").len() as u64;
    assert!(spans > 10_000, "only {spans} calls of python3.11 recorded");
    if let Some(report) = viewer_check(&out) {
        assert_eq!(report["slice_count"], spans, "{report}");
    }
    std::fs::remove_file(&out).ok();
}

/// Every function of real libraries at once (issue 17), entry and return
/// probes with `--chrome`: the C library under `ls`, libstdc++ under a C++
/// program (strings, maps, streams, an exception unwinding through return
/// probes), libsqlite3 under Debian's sqlite3 shell. Each program prints
/// what it prints untraced, nothing is dropped, and the trace opens in
/// Perfetto's trace processor with every span.
#[test]
fn every_function_of_libc_libstdcxx_and_libsqlite3() {
    let d = common::scratch("chrome-libraries");
    let cxx = d.join("cxxreal");
    common::compile(&[&common::repo().join("tests/programs/cxxreal.cc")], &cxx, &["-O2"]);
    let sql = "create table t(a integer, b text); with recursive c(x) as (select 1 union all select x+1 from c where x < 300) insert into t select x, 'v'||x from c; select count(*), sum(a), max(b) from t;";
    let sqlite = "/usr/bin/sqlite3";
    if !std::path::Path::new(sqlite).exists() {
        panic!("{sqlite} is missing: the test command (.ci/run) installs Debian's sqlite3");
    }
    let cases: [(&str, Vec<String>, usize); 3] = [
        ("libc.so.6", vec!["/bin/ls".into(), "-la".into(), "/usr/lib".into()], 5_000),
        ("libstdc++.so.6", vec![cxx.display().to_string()], 2_000),
        ("libsqlite3.so.0", vec![sqlite.into(), ":memory:".into(), sql.into()], 20_000),
    ];
    for (lib, argv, at_least) in cases {
        let plain = Command::new(&argv[0]).args(&argv[1..]).output().expect("run untraced");
        let out = d.join(format!("{lib}.json"));
        let script =
            format!("probe process(\"{lib}\").function(\"*\"), process(\"{lib}\").function(\"*\").return {{}}");
        // Quoted for the shell `-c` hands a command with quotes to.
        let cmd = argv.iter().map(|a| format!("'{}'", a.replace('\'', "'\\''"))).collect::<Vec<_>>().join(" ");
        let (stdout, stderr, code) = telco(&["-w", "-e", &script, "--chrome", out.to_str().unwrap(), "-c", &cmd]);
        assert_eq!(code, Some(0), "{lib}: {stderr}");
        assert_eq!(stdout, String::from_utf8_lossy(&plain.stdout), "{lib}: the program's own output");
        assert!(stderr.contains("; none dropped"), "{lib}: {stderr}");
        let spans = ph(&events(&out), "X").len() as u64;
        assert!(spans as usize >= at_least, "{lib}: only {spans} calls recorded");
        if let Some(report) = viewer_check(&out) {
            assert_eq!(report["slice_count"], spans, "{lib}: {report}");
        }
        std::fs::remove_file(&out).ok();
    }
}

/// On a terminal, a long `--chrome` session draws a status line every
/// second, as `perf record` does (events, size, rate), which the summary
/// line replaces at the end. (`script` gives the session a terminal; the
/// session lasts 2 s: 10,000 calls of 200 µs.)
#[test]
fn a_long_trace_shows_its_progress_on_a_terminal() {
    let d = common::scratch("chrome-status");
    let exe = d.join("prog");
    common::gcc("probed.c", &exe, &[]);
    let out = d.join("trace.json");
    let cmd = format!(
        "{} -e 'probe process.function(\"spin\") {{}}' -c '{} spin 10000' --chrome {}",
        env!("CARGO_BIN_EXE_telco-stap"),
        exe.display(),
        out.display()
    );
    let o = std::process::Command::new("script")
        .args(["-qefc", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("\r--chrome: ") && text.contains(" events/s"), "no status line: {text:?}");
    // The summary: 10,000 calls and the process's, the clock's and the
    // thread's names; the status line cleared before it.
    assert!(text.contains("\r\x1b[K--chrome: 10003 events, "), "{text:?}");
    // Without a terminal: no status line.
    let (_, err, code) = common::telco_run(&[
        "-e",
        "probe process.function(\"spin\") {}",
        "-c",
        &format!("{} spin 3000", exe.display()),
        "--chrome",
        out.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains('\r') && !err.contains("events/s"), "{err}");
}
