//! `--perfetto FILE` through the binary, against tests/programs/spans.c,
//! every file loaded into Perfetto's trace processor (the engine of
//! ui.perfetto.dev, installed by tests/chrome/install.sh): the same
//! slices, depths, threads, thread names and counters as `--chrome` in
//! the same run; printf lines and instants; the session's summary as
//! metadata; `--min-dur`; sessions that end abruptly; a long trace in
//! few bytes.

use serde_json::Value;
use std::io::BufRead;
use std::path::PathBuf;

mod common;
use common::telco_run as telco;
use common::{depths, viewer};

fn dir() -> PathBuf {
    common::scratch("perfetto")
}

fn target() -> PathBuf {
    let exe = dir().join("spans");
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| common::gcc("spans.c", &dir().join("spans"), &["-pthread"]));
    exe
}

#[test]
fn calls_nest_like_chrome_with_printf_counters_and_summary() {
    let exe = target();
    let proto = dir().join("nest.pftrace");
    let json = dir().join("nest.json");
    let script = r#"probe process.function("top") { printf("top %d\n", $arg1); trace_instant("hit"); trace_counter("arg", $arg1) }
                    probe process.function("mid") {}
                    probe process.function("leaf").return {}"#;
    let cmd = format!("{} nest 20", exe.display());
    let (stdout, stderr, code) =
        telco(&["-e", script, "-c", &cmd, "--perfetto", proto.to_str().unwrap(), "--chrome", json.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("top ")).count(), 40);
    // The session says what each file holds.
    assert!(stderr.contains("--perfetto: 160 calls, "), "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("--perfetto:") && l.ends_with("; none dropped")), "{stderr}");
    assert!(stderr.contains("--chrome: "), "{stderr}");
    let p = viewer(&proto);
    let c = viewer(&json);
    assert_eq!(p["trace_type"], "proto");
    // Two threads, each: top@0, mid@1, leaf@2 (and the instants).
    let pd = depths(&p);
    assert_eq!(pd.len(), 2, "{p}");
    for d in &pd {
        assert_eq!((d["top@0"], d["mid@1"], d["leaf@2"]), (20, 20, 40), "{d:?}");
        // Every instant outside the calls: at depth 0, or at 1 where it has
        // the very nanosecond of the printf's instant just before it (the
        // trace processor nests an instant under another at the same time;
        // two clock reads that close can be one TSC tick apart here).
        let hits = |depth: &str| d.get(&format!("hit@{depth}")).copied().unwrap_or(0);
        assert_eq!(hits("0") + hits("1"), 20, "{d:?}");
        assert!(d.keys().all(|k| !k.starts_with("hit@") || k == "hit@0" || k == "hit@1"), "{d:?}");
    }
    // ... and never inside a call: no `hit` within a slice of its thread.
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).expect("the JSON file")).expect("JSON");
    let events = doc["traceEvents"].as_array().or(doc.as_array()).expect("events");
    for h in events.iter().filter(|e| e["name"] == "hit") {
        let ts = h["ts"].as_f64().expect("ts");
        let inside = events.iter().filter(|e| e["ph"] == "X" && e["tid"] == h["tid"]).find(|e| {
            let (s, d) = (e["ts"].as_f64().unwrap_or(0.0), e["dur"].as_f64().unwrap_or(0.0));
            s <= ts && ts < s + d
        });
        assert!(inside.is_none(), "{h} inside {inside:?}");
    }
    // The same slices at the same depths as the JSON of the same run.
    assert_eq!(pd, depths(&c), "perfetto {p}\nchrome {c}");
    assert_eq!(p["slice_count"], c["slice_count"]);
    for t in p["threads"].as_array().unwrap() {
        assert_eq!(t["process_name"], "spans");
        assert!(t["thread_name"].as_str().is_some_and(|n| !n.is_empty()), "{t}");
    }
    // printf lines are instants with the text as an argument.
    let slices: Vec<&Value> =
        p["threads"].as_array().unwrap().iter().flat_map(|t| t["slices"].as_array().unwrap()).collect();
    assert!(slices.iter().any(|s| s["name"] == "top 7" && s["args.text"] == "top 7\n"), "{p}");
    // trace_counter: a counter track of the process, every value.
    let counters = p["counters"].as_array().unwrap();
    assert_eq!(counters.len(), 1, "{p}");
    assert_eq!(counters[0]["name"], "arg");
    assert_eq!(counters[0]["count"], 40);
    let mut values: Vec<f64> = counters[0]["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    values.sort_by(f64::total_cmp);
    let mut want: Vec<f64> = (0..20).chain(0..20).map(f64::from).collect();
    want.sort_by(f64::total_cmp);
    assert_eq!(values, want);
    // The session's summary, as metadata.
    assert_eq!(p["telco_stap"]["calls"], 160, "{p}");
    assert_eq!(p["telco_stap"]["dropped"], 0);
    assert_eq!(p["telco_stap"]["errors"], 0);
    // Times: each call inside its parent, in integer ns.
    for t in p["threads"].as_array().unwrap() {
        let mut open: Vec<(u64, u64)> = Vec::new();
        for s in t["slices"].as_array().unwrap() {
            let (ts, dur) = (s["ts_ns"].as_u64().unwrap(), s["dur_ns"].as_u64().unwrap());
            let depth = s["depth"].as_u64().unwrap() as usize;
            open.truncate(depth);
            if let Some(&(pts, pdur)) = open.last() {
                assert!(ts >= pts && ts + dur <= pts + pdur, "{s} outside its parent");
            }
            open.push((ts, dur));
        }
    }
}

#[test]
fn the_minimum_duration_applies_to_both_files() {
    let exe = target();
    let proto = dir().join("slow.pftrace");
    let json = dir().join("slow.json");
    let cmd = format!("{} slow 100", exe.display());
    let script = r#"probe process.function("slow"), process.function("fast") {}"#;
    let (_, stderr, code) = telco(&[
        "-e",
        script,
        "-c",
        &cmd,
        "--perfetto",
        proto.to_str().unwrap(),
        "--chrome",
        json.to_str().unwrap(),
        "--min-dur",
        "1ms",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    for f in [&proto, &json] {
        let r = viewer(f);
        assert_eq!(r["slice_count"], 3, "{r}");
        let d = depths(&r);
        assert_eq!(d[0]["slow@0"], 3);
    }
    // The old spelling still works; --min-dur needs a trace file.
    let (_, stderr, code) =
        telco(&["-e", script, "-c", &cmd, "--perfetto", proto.to_str().unwrap(), "--chrome-min-dur", "1ms"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(viewer(&proto)["slice_count"], 3);
    let (_, stderr, code) = telco(&["-e", script, "-c", &cmd, "--min-dur", "1ms"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--perfetto") || stderr.contains("--chrome"), "{stderr}");
}

/// Deep recursion past the shadow stack, longjmp, signal handlers: the
/// same calls as the JSON, but for those nested deeper than Perfetto's
/// trace processor keeps (512 levels on a thread): left out, and said.
#[test]
fn deep_recursion_longjmp_and_signals_match_chrome() {
    let exe = target();
    let proto = dir().join("deep.pftrace");
    let json = dir().join("deep.json");
    let cmd = format!("{} deep 1100", exe.display());
    let (stdout, stderr, code) = telco(&[
        "-D",
        "MAXRETURNDEPTH=1024",
        "-e",
        r#"probe process.function("rec") {}"#,
        "-c",
        &cmd,
        "--perfetto",
        proto.to_str().unwrap(),
        "--chrome",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "1110");
    assert!(stderr.contains("WARNING: --perfetto: 512 calls nested more than 512 deep were left out"), "{stderr}");
    let p = viewer(&proto);
    assert_eq!(p["slice_count"], 512 + 3 * 3 + 11, "{stderr}");
    assert_eq!(p["threads"][0]["max_depth"], 511);
    // rec(1100): its outer 512 calls; rec(2) three times and rec(10).
    let pd = depths(&p);
    assert_eq!((pd[0]["rec@0"], pd[0]["rec@1"], pd[0]["rec@2"], pd[0]["rec@3"]), (5, 5, 5, 2), "{pd:?}");
    assert_eq!(pd[0]["rec@511"], 1);
    // The JSON holds every timed call.
    assert_eq!(viewer(&json)["slice_count"], 1024 + 3 * 3 + 11);
}

#[test]
fn a_crashing_target_leaves_a_valid_trace() {
    let exe = target();
    let proto = dir().join("crash.pftrace");
    let cmd = format!("{} crash 5", exe.display());
    let (stdout, stderr, code) =
        telco(&["-e", r#"probe process.function("top") {}"#, "-c", &cmd, "--perfetto", proto.to_str().unwrap()]);
    assert_eq!(stdout.trim(), "65");
    assert_eq!(code, Some(128 + 11), "{stderr}");
    assert_eq!(depths(&viewer(&proto))[0]["top@0"], 5);
}

/// Stopped from outside (SIGINT, SIGTERM, -T) while the target runs: the
/// file is complete and holds the calls made until then.
#[test]
fn sigterm_sigint_and_timeouts_complete_the_file() {
    let exe = target();
    for (name, extra, signal) in
        [("int", &[][..], Some(2)), ("term", &[][..], Some(15)), ("timeout", &["-T", "0.3"][..], None)]
    {
        let proto = dir().join(format!("{name}.pftrace"));
        let cmd = format!("{} forever", exe.display());
        let mut args =
            vec!["-e", r#"probe process.function("top") {}"#, "-c", &cmd, "--perfetto", proto.to_str().unwrap()];
        args.extend_from_slice(extra);
        let mut tracer = common::Tracer::start(&args, "ready");
        let mut line = String::new();
        tracer.output.read_line(&mut line).expect("busy");
        assert_eq!(line, "busy\n");
        if let Some(sig) = signal {
            // SAFETY: signalling our own child.
            unsafe { libc_kill(tracer.child.id() as i32, sig) };
        }
        let (_, stderr, code) = tracer.finish();
        assert!(code.is_some(), "telco-stap died of a signal: {stderr}");
        let calls: u64 = stderr
            .lines()
            .find_map(|l| l.strip_prefix("--perfetto: ")?.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{stderr}"));
        assert!(calls > 10_000, "{stderr}");
        let r = viewer(&proto);
        assert_eq!(r["slice_count"], calls, "{name}: {r}");
        assert_eq!(r["telco_stap"]["calls"], calls);
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// A thread that renames itself while traced is shown by its new name
/// (`-p`: the thread still exists when the session ends).
#[test]
fn a_thread_that_renames_itself_keeps_its_new_name() {
    let exe = target();
    let proto = dir().join("named.pftrace");
    let json = dir().join("named.json");
    let mut t = common::Running::start(&exe, &["named"]);
    assert_eq!(t.ready, "ready\n");
    let pid = t.pid().to_string();
    let tracer = common::Tracer::start(
        &[
            "-p",
            &pid,
            "-e",
            r#"probe begin { println("armed") } probe process.function("top") {}"#,
            "--perfetto",
            proto.to_str().unwrap(),
            "--chrome",
            json.to_str().unwrap(),
        ],
        "armed",
    );
    t.say("go");
    assert_eq!(t.line(), "renamed\n");
    // SAFETY: signalling our own child.
    unsafe { libc_kill(tracer.child.id() as i32, 2) };
    let (_, stderr, code) = tracer.finish();
    assert_eq!(code, Some(0), "{stderr}");
    // The worker's calls (the begin probe's printf is on telco-stap's
    // own thread).
    let worker = |r: &Value| -> Value {
        let t = r["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["counts"]["top"].is_u64())
            .cloned()
            .collect::<Vec<_>>();
        assert_eq!(t.len(), 1, "{r}");
        t[0].clone()
    };
    let w = worker(&viewer(&proto));
    assert_eq!(w["thread_name"], "renamed-worker", "{w}");
    assert_eq!(w["counts"]["top"], 2000);
    // --chrome names the thread by its comm too (when it first saw it).
    let w = worker(&viewer(&json));
    let name = w["thread_name"].as_str().unwrap().to_string();
    assert!(name == "spans" || name == "renamed-worker", "{name}");
    drop(t);
}

/// A million calls: a few bytes each (JSON takes about 94), every call in
/// the file, nothing dropped.
#[test]
fn a_million_calls_in_a_few_bytes_each() {
    let exe = target();
    let proto = dir().join("many.pftrace");
    let calls = 1_000_000u64;
    let cmd = format!("{} many {calls}", exe.display());
    let (stdout, stderr, code) =
        telco(&["-e", r#"probe process.function("leaf") {}"#, "-c", &cmd, "--perfetto", proto.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.is_empty());
    assert!(stderr.contains(&format!("--perfetto: {calls} calls, ")) && stderr.contains("none dropped"), "{stderr}");
    let size = std::fs::metadata(&proto).unwrap().len();
    assert!(size < 12 * calls, "{size} bytes for {calls} calls");
    let o = std::process::Command::new(common::repo().join("tests/chrome/check.sh"))
        .args(["--no-slices"])
        .arg(&proto)
        .output()
        .expect("check");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["slice_count"], calls, "{r}");
    assert_eq!(r["threads"][0]["depth_counts"]["leaf@0"], calls);
    std::fs::remove_file(&proto).ok();
}

/// `--rotate`: the trace goes on in FILE.1, FILE.2, ... once a file has
/// reached the size; each file is accepted alone by the trace processor,
/// and every call is in exactly one of them. `--chrome` too (fewer calls:
/// its files take 90 bytes a call where Perfetto's take one).
#[test]
fn rotated_files_each_open_alone_and_hold_every_call_once() {
    let exe = target();
    for (flag, name, calls) in [("--perfetto", "rot.pftrace", 300_000u64), ("--chrome", "rot.json", 3_000)] {
        let first = dir().join(name);
        let cmd = format!("{} many {calls}", exe.display());
        let (_, stderr, code) = telco(&[
            "-e",
            r#"probe process.function("leaf") {}"#,
            "-c",
            &cmd,
            flag,
            first.to_str().unwrap(),
            "--rotate",
            "64K",
        ]);
        assert_eq!(code, Some(0), "{stderr}");
        let mut files = vec![first.clone()];
        for n in 1.. {
            let f = PathBuf::from(format!("{}.{n}", first.display()));
            if !f.exists() {
                break;
            }
            files.push(f);
        }
        assert!(files.len() >= 3, "{flag}: {} files\n{stderr}", files.len());
        let last = files.last().unwrap().display().to_string();
        assert!(
            stderr.contains(&format!("in {} files (--rotate 64 KB): {} to {last}", files.len(), first.display())),
            "{flag}: {stderr}"
        );
        // Times are absolute (Perfetto's clock snapshot, Chrome's
        // `telco_clock_base`, the session's start in every file): no call
        // is in two files, and all are in one.
        // The one thread's calls follow one another: each file's come
        // after the last of the file before (one timebase in all).
        let mut seen = std::collections::HashSet::new();
        let mut total = 0;
        let mut before = 0;
        for f in &files {
            let v = viewer(f);
            let (mut first, mut last) = (u64::MAX, 0);
            for t in v["threads"].as_array().expect("threads") {
                for s in t["slices"].as_array().expect("slices") {
                    let key = (t["tid"].as_u64(), s["ts_ns"].as_u64(), s["name"].as_str().map(String::from));
                    assert!(seen.insert(key), "{flag}: {s} twice");
                    total += 1;
                    let ts = s["ts_ns"].as_u64().expect("ts_ns");
                    (first, last) = (first.min(ts), last.max(ts));
                }
            }
            assert!(
                first >= before,
                "{flag}: {} starts at {first}, before the last call before it ({before})",
                f.display()
            );
            before = before.max(last);
            std::fs::remove_file(f).expect("remove");
        }
        assert_eq!(total, calls, "{flag}");
    }
}

#[test]
fn a_rotation_larger_than_the_maximum_size_is_refused() {
    let path = dir().join("never.pftrace");
    let (_, stderr, code) = telco(&[
        "-e",
        "probe begin { exit() }",
        "--perfetto",
        path.to_str().unwrap(),
        "--rotate",
        "2M",
        "--max-size",
        "1M",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--rotate 2 MB is larger than --max-size 1 MB"), "{stderr}");
    assert!(!path.exists());
}

/// `--rotate` as large as `--max-size` (the default's 2G too): files are
/// cut before they are full, and no call is left out of every file.
#[test]
fn a_rotation_as_large_as_the_maximum_size_loses_nothing() {
    let (_, stderr, code) = telco(&["-e", "probe begin { exit() }", "--perfetto", "/dev/null", "--rotate", "3G"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--rotate 3 GB is larger than --max-size 2 GB (the default)"), "{stderr}");
    let exe = target();
    let first = dir().join("same.json");
    let cmd = format!("{} many 3000", exe.display());
    let (_, stderr, code) = telco(&[
        "-e",
        r#"probe process.function("leaf") {}"#,
        "-c",
        &cmd,
        "--chrome",
        first.to_str().unwrap(),
        "--rotate",
        "64K",
        "--max-size",
        "64K",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("left out"), "{stderr}");
    let mut total = 0;
    for n in 0.. {
        let f = if n == 0 { first.clone() } else { PathBuf::from(format!("{}.{n}", first.display())) };
        if !f.exists() {
            assert!(n >= 3, "{n} files: {stderr}");
            break;
        }
        let text = std::fs::read_to_string(&f).expect("read");
        assert!(text.len() <= 64 << 10, "{} has {} bytes", f.display(), text.len());
        total += text.matches("\"ph\":\"X\"").count();
        std::fs::remove_file(&f).expect("remove");
    }
    assert_eq!(total, 3000, "{stderr}");
}
