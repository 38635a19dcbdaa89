//! `--flight-recorder FILE` through the binary, against
//! tests/programs/flight.c, every dump loaded into Perfetto's trace
//! processor (tests/chrome/install.sh): a fault after ten million
//! iterations, two SIGUSR2s, `flight_dump()` from a return probe, threads
//! with their own histories, the tracer's memory over a minute of calls,
//! and the command line's refusals.

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::telco_run as telco;
use common::{depths, viewer};

fn dir() -> PathBuf {
    common::scratch("flight")
}

fn target() -> PathBuf {
    let exe = dir().join("flight");
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| common::gcc("flight.c", &dir().join("flight"), &["-pthread"]));
    exe
}

/// Every slice of every thread.
fn slices(report: &Value) -> Vec<&Value> {
    report["threads"].as_array().unwrap().iter().flat_map(|t| t["slices"].as_array().unwrap()).collect()
}

fn end_ns(s: &Value) -> i64 {
    s["ts_ns"].as_i64().unwrap() + s["dur_ns"].as_i64().unwrap()
}

const PROBES: &str = r#"probe process.function("first"), process.function("second"), process.function("third"),
                        process.function("fourth") {}"#;

/// The chunks of history `--flight-size` holds, and the calls in each
/// (a thread slot's stage: 64 calls of 24 bytes after a 16-byte header,
/// on 64-byte lines).
fn calls_held(size: u64) -> u64 {
    size / 1600 * 64
}

#[test]
fn a_fault_leaves_the_calls_before_it() {
    let exe = target();
    let out = dir().join("fault.pftrace");
    let cmd = format!("{} crash 10000000", exe.display());
    let (_, stderr, code) =
        telco(&["-e", PROBES, "-c", &cmd, "--flight-recorder", out.to_str().unwrap(), "--flight-size", "8M"]);
    // The command's death passes through.
    assert_eq!(code, Some(128 + 11), "{stderr}");
    assert!(stderr.contains("killed by SIGSEGV"), "{stderr}");
    // 30 M calls made; the history holds the last that fit 8 MB, and the
    // call of `fourth` in flight.
    let held = calls_held(8 << 20);
    let line = stderr.lines().find(|l| l.starts_with("--flight-recorder: 1 (SIGSEGV in process ")).expect(&stderr);
    assert!(line.contains(&format!(": {} calls of 1 thread, 1 in flight, ", held + 1)), "{line}");
    assert!(line.ends_with(&format!("written to {}", out.display())), "{line}");
    let size = std::fs::metadata(&out).expect("the dump").len();
    assert!(size <= 8 << 20, "{size} bytes");
    let p = viewer(&out);
    assert_eq!(p["telco_stap"]["calls"], held + 1, "{}", p["telco_stap"]);
    let d = depths(&p);
    assert_eq!(d.len(), 1, "{d:?}");
    let d = &d[0];
    // Nested as called; only the oldest edge may cut a call from its
    // callees (those returned first, in an older chunk).
    let keys: Vec<&str> = d.keys().map(String::as_str).collect();
    assert_eq!(keys, ["SIGSEGV@1", "first@0", "fourth@0", "second@1", "third@2"], "{d:?}");
    assert!(d["first@0"] - d["second@1"] <= 1 && d["second@1"] - d["third@2"] <= 1, "{d:?}");
    assert_eq!(d["first@0"] + d["second@1"] + d["third@2"], held, "{d:?}");
    // The last slice is the function that faulted, open until the fault,
    // which is an instant inside it with the crash report.
    let all = slices(&p);
    let calls: Vec<&&Value> = all.iter().filter(|s| s["name"] != "SIGSEGV").collect();
    let last = calls.iter().max_by_key(|s| s["ts_ns"].as_i64().unwrap()).unwrap();
    assert_eq!(last["name"], "fourth", "{last}");
    let fault = all.iter().find(|s| s["name"] == "SIGSEGV").unwrap();
    assert_eq!(fault["parent"], "fourth");
    let text = fault["args.text"].as_str().unwrap();
    assert!(text.contains("address 0x0 not mapped") && text.contains("in fourth+"), "{text}");
    assert_eq!(end_ns(last), fault["ts_ns"].as_i64().unwrap());
    std::fs::remove_file(&out).ok();
}

/// CLOCK_BOOTTIME ns: the trace processor's time line.
fn boottime_ns() -> i64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(id: i32, ts: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: CLOCK_BOOTTIME (7) into a valid timespec.
    unsafe { clock_gettime(7, &mut ts) };
    ts.sec * 1_000_000_000 + ts.nsec
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn each_sigusr2_writes_the_history_up_to_it() {
    let exe = target();
    let out = dir().join("usr2.pftrace");
    let cmd = format!("{} run", exe.display());
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(["-e", PROBES, "-c", &cmd, "--flight-recorder", out.to_str().unwrap(), "--flight-size", "4M"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = std::io::BufReader::new(tracer.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
    let mut said = std::io::BufReader::new(tracer.stderr.take().unwrap()).lines();
    let mut sent = Vec::new();
    for k in 1..=2 {
        sent.push(boottime_ns());
        // SAFETY: signalling our own child.
        unsafe { libc_kill(tracer.id() as i32, 12) };
        // Each dump is said once written.
        let line = said.next().and_then(Result::ok).unwrap_or_default();
        assert!(line.starts_with(&format!("--flight-recorder: {k} (SIGUSR2): ")), "{line}");
    }
    // SAFETY: as above.
    unsafe { libc_kill(tracer.id() as i32, 2) };
    let rest: Vec<String> = said.map_while(Result::ok).collect();
    assert!(tracer.wait().expect("exit").code().is_some());
    // The summary says both again, and how many calls were made while
    // the history was held for them (from each signal until the tracer
    // had copied it).
    assert_eq!(rest.iter().filter(|l| l.contains(" (SIGUSR2): ")).count(), 2, "{rest:?}");
    assert!(rest.iter().any(|l| l.contains(" calls were not kept in the history: made while a dump")), "{rest:?}");
    let files = [out.clone(), PathBuf::from(format!("{}.2", out.display()))];
    for (f, at) in files.iter().zip(&sent) {
        let p = viewer(f);
        let newest = slices(&p).iter().map(|s| end_ns(s)).max().expect("calls");
        // The history ends at the signal: its newest call returned in the
        // last few milliseconds before the tracer took it (the loop calls
        // without pause; the tracer may wait that long for a CPU of this
        // machine's two before its handler runs).
        assert!(
            newest <= at + 20_000_000 && newest >= at - 20_000_000,
            "{}: newest {newest}, signal {at}",
            f.display()
        );
        let d = depths(&p);
        assert_eq!(d.len(), 1, "{d:?}");
        // The whole history: the loop had made more calls than it holds.
        let held = calls_held(4 << 20);
        assert!(d[0]["first@0"] * 3 >= held - 3 * 64, "{d:?}");
        std::fs::remove_file(f).ok();
    }
}

#[test]
fn flight_dump_from_a_return_probe() {
    let exe = target();
    let out = dir().join("slow.pftrace");
    // One call in a hundred sleeps 15 ms: the 100th.
    let script = r#"probe process.function("maybe_slow").return {
                        if (gettimeofday_ns() - @entry(gettimeofday_ns()) > 10000000) flight_dump()
                    }"#;
    let cmd = format!("{} slow 100", exe.display());
    let (_, stderr, code) = telco(&["-e", script, "-c", &cmd, "--flight-recorder", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("--flight-recorder: ")).collect();
    // Said when written, and in the summary.
    assert_eq!(said.len(), 2, "{stderr}");
    assert!(
        said[0].starts_with("--flight-recorder: 1 (flight_dump()): 100 calls of 1 thread, 0 in flight"),
        "{stderr}"
    );
    assert!(!Path::new(&format!("{}.2", out.display())).exists());
    let p = viewer(&out);
    assert_eq!(depths(&p), vec![BTreeMap::from([("maybe_slow@0".to_string(), 100)])]);
    let all = slices(&p);
    let last = all.iter().max_by_key(|s| s["ts_ns"].as_i64().unwrap()).unwrap();
    assert!(last["dur_ns"].as_i64().unwrap() >= 15_000_000, "{last}");
    assert_eq!(all.iter().filter(|s| s["dur_ns"].as_i64().unwrap() >= 10_000_000).count(), 1);
    std::fs::remove_file(&out).ok();
}

#[test]
fn each_thread_has_its_own_history() {
    let exe = target();
    let out = dir().join("threads.pftrace");
    let cmd = format!("{} threads 1000 4", exe.display());
    let (_, stderr, code) =
        telco(&["-e", PROBES, "-c", &cmd, "--flight-recorder", out.to_str().unwrap(), "--flight-at-end"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("--flight-recorder: 1 (the end of the session): 12000 calls of 4 threads, 0 in flight"),
        "{stderr}"
    );
    let p = viewer(&out);
    let d = depths(&p);
    let want =
        BTreeMap::from([("first@0".to_string(), 1000), ("second@1".to_string(), 1000), ("third@2".to_string(), 1000)]);
    assert_eq!(d, vec![want; 4]);
    let tids: std::collections::BTreeSet<u64> =
        p["threads"].as_array().unwrap().iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    assert_eq!(tids.len(), 4);
    std::fs::remove_file(&out).ok();
}

/// A minute of calls as fast as the program makes them: the tracer's
/// memory is what it was after the first seconds (nothing of the history
/// is in it), and a dump at the end still works.
#[test]
fn the_tracer_keeps_its_memory_for_a_minute() {
    let exe = target();
    let out = dir().join("minute.pftrace");
    let cmd = format!("{} steady 60", exe.display());
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(["-e", PROBES, "-c", &cmd, "--flight-recorder", out.to_str().unwrap(), "--flight-at-end"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = tracer.id();
    let mut rss = Vec::new();
    let mut calls = 0u64;
    // A line each second of the program's: the seconds, its calls so far.
    for line in std::io::BufReader::new(tracer.stdout.take().unwrap()).lines().map_while(Result::ok) {
        rss.push(common::rss_kib(pid));
        calls = line.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(calls);
    }
    let o = tracer.wait_with_output().expect("exit");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert_eq!(rss.len(), 60, "{rss:?}");
    eprintln!("{} M calls a second; tracer RSS (KiB) by second: {rss:?}", calls / 60 / 1_000_000);
    // From the fifth second to the last: within 1 MiB.
    let settled = rss[4];
    let most = *rss[4..].iter().max().unwrap();
    assert!(most <= settled + 1024, "the tracer grew from {settled} KiB to {most} KiB: {rss:?}");
    assert!(stderr.contains(&format!(": {} calls of 1 thread, ", calls_held(crate::DEFAULT_MB << 20))), "{stderr}");
    std::fs::remove_file(&out).ok();
}

const DEFAULT_MB: u64 = 32;

#[test]
fn the_command_line_refuses_what_cannot_work() {
    let exe = target();
    let cmd = format!("{} slow 1", exe.display());
    let cases: [(&[&str], &str); 4] = [
        (&["--flight-size", "8M"], "--flight-recorder"),
        (&["--flight-at-end"], "--flight-recorder"),
        (
            &["--flight-recorder", "/tmp/x.pftrace", "--flight-size", "100K"],
            "smaller than the least flight recorder, 1M",
        ),
        (&["--flight-recorder", "/tmp/x.pftrace", "--perfetto", "/tmp/y.pftrace"], "cannot be used with"),
    ];
    for (args, want) in cases {
        let mut all = vec!["-e", "probe process.function(\"maybe_slow\") {}", "-c", &cmd];
        all.extend_from_slice(args);
        let (_, stderr, code) = telco(&all);
        assert!(matches!(code, Some(1) | Some(2)), "{args:?}: {code:?} {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    // Without a traced process there are no calls to keep.
    let (_, stderr, code) = telco(&["-e", "probe timer.s(1) { exit() }", "--flight-recorder", "/tmp/x.pftrace"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--flight-recorder keeps the calls of traced processes: name them"), "{stderr}");
    assert!(!Path::new("/tmp/x.pftrace").exists());
    // flight_dump() without the flight recorder: said, nothing written.
    let (_, stderr, code) = telco(&["-e", "probe process.function(\"maybe_slow\") { flight_dump() }", "-c", &cmd]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("WARNING: flight_dump() was called 1 time(s) and wrote nothing: the flight recorder is off"),
        "{stderr}"
    );
}

/// A target that overwrites its region (tests/programs/hostile.c),
/// history included, while the flight recorder keeps it: the tracer says
/// so and ends as it does for any damage, the dump at the end leaves out
/// what no probe wrote, and the file it writes is whole.
#[test]
fn a_target_that_scribbles_over_its_history() {
    let d = dir();
    let exe = d.join("hostile");
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| common::gcc("hostile.c", &d.join("hostile"), &[]));
    for (what, when) in [("fill:255", "start"), ("fill:170", "middle"), ("random", "always")] {
        let out = d.join(format!("hostile-{when}.pftrace"));
        let cmd = format!("{} 200000 {what} {when} 7", exe.display());
        let o = Command::new("timeout")
            .args(["-s", "KILL", "120"])
            .arg(env!("CARGO_BIN_EXE_telco-stap"))
            .args(["-e", "probe process.function(\"work\") {}", "-c", &cmd])
            .args(["--flight-recorder", out.to_str().unwrap(), "--flight-at-end"])
            .output()
            .expect("run telco-stap");
        let err = String::from_utf8_lossy(&o.stderr);
        let label = format!("{what} {when}");
        assert_eq!(o.status.code(), Some(1), "{label}: {err}");
        assert!(!err.contains("panicked"), "{label}: {err}");
        assert!(err.lines().any(|l| l.starts_with("ERROR: ") && l.contains("the target")), "{label}: {err}");
        // (A region overwritten with 0xff asks for a dump too: flight_dump()'s
        // count changed.)
        let line = err.lines().find(|l| l.contains(" (the end of the session): ")).expect(&err);
        assert!(line.contains("written to "), "{label}: {line}");
        // Each dump once (those asked for are said twice), its file loaded
        // when it holds calls (the checker refuses an empty trace).
        let dumps: BTreeMap<&str, &str> =
            err.lines().filter_map(|l| l.strip_prefix("--flight-recorder: ")?.split_once(" (")).collect();
        for (k, rest) in dumps {
            let f = rest.rsplit_once("written to ").map(|(_, f)| PathBuf::from(f)).expect(rest);
            let calls: u64 = rest.split_once("): ").and_then(|(_, r)| r.split(' ').next()?.parse().ok()).expect(rest);
            if calls > 0 {
                // Whatever was kept is `work` on the program's one thread.
                for (name, _) in depths(&viewer(&f)).iter().flatten() {
                    assert!(name.starts_with("work@"), "{label}: {name} in dump {k}");
                }
            }
            std::fs::remove_file(&f).expect("the dump's file");
        }
    }
}
