//! The traced process is untrusted input (INTERNALS.md, invariant 6): a
//! hostile target (tests/programs/hostile.c) overwrites the region it
//! shares with the tracer with all-ones, patterned and random bytes, at the
//! start, in the middle of the run and at random moments through attach,
//! run and detach; forges ring records (a huge length, an unknown kind, an
//! unknown format, a histogram of 2^31 buckets); breaks an array's geometry
//! or holds its lock; puts a statistic into an impossible state. Scripts:
//! printf, a counter printed in `end`, a map walked in `end` and by a timer,
//! a statistic, `--chrome` and `--perfetto`, `.itrace`. In every case the tracer exits by
//! itself (never by a signal: `timeout` would say 137) with status 1 and an
//! ERROR naming what the target did, within the time `timeout` allows and
//! the address space `prlimit` allows, and its output files are valid.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const COUNTER: &str = "global n probe process.function(\"work\") { n++ } probe end { println(n) }";
const PRINTF: &str = "probe process.function(\"work\") { if ($arg1 % 1000 == 0) printf(\"w %d\\n\", $arg1) }";
const MAP_END: &str =
    "global m probe process.function(\"work\") { m[$arg1 % 5]++ } probe end { foreach (k in m) println(k, \" \", m[k]) }";
const MAP_TIMER: &str = "global m, n probe process.function(\"work\") { m[$arg1 % 5]++ } \
                         probe timer.ms(1) { foreach (k in m) n += m[k] } probe end { println(n) }";
/// The map is touched only by the tracer's own probe (a held lock stops
/// the sandbox, not the target's threads).
const MAP_LOCKED: &str = "global n, m probe process.function(\"work\") { n++ } \
                          probe end { m[1] = n; foreach (k in m) println(k, \" \", m[k]) }";
const STAT: &str = "global s probe process.function(\"work\") { s <<< $arg1 } \
                    probe end { println(@count(s), \" \", @min(s), \" \", @max(s)); print(@hist_log(s)) }";
const SPANS: &str = "probe process.function(\"work\") {}";
const ITRACE: &str = "probe process.function(\"work\").itrace {}";

/// The tracer's address space may not grow past this (prlimit --as).
const MAX_ADDRESS_SPACE: u64 = 8 << 30;

struct Case<'a> {
    what: &'a str,
    when: &'a str,
    script: &'a str,
}

fn program(d: &Path) -> PathBuf {
    let exe = d.join("hostile");
    if !exe.exists() {
        common::gcc("hostile.c", &exe, &[]);
    }
    exe
}

/// The numbers `ring`, `table` and `lock` need to find what they forge.
fn offsets(what: &str) -> Vec<String> {
    use telco_abi::region::{Header, RingHeader, TableHeader};
    let v: Vec<usize> = match what {
        "ring" => vec![
            core::mem::offset_of!(Header, ring_off),
            core::mem::offset_of!(RingHeader, head),
            core::mem::offset_of!(RingHeader, size),
            core::mem::offset_of!(RingHeader, data_off),
        ],
        // -D MAXMAPENTRIES=777: 777 entries in 2048 slots.
        "table" | "lock" => {
            vec![777, 2048, core::mem::offset_of!(TableHeader, capacity), core::mem::offset_of!(TableHeader, nslots)]
        }
        _ => vec![],
    };
    v.iter().map(usize::to_string).collect()
}

/// telco-stap bounded in time and address space: (stdout, stderr, status).
fn bounded(args: &[String]) -> (String, String, Option<i32>) {
    let o = Command::new("timeout")
        .args(["-s", "KILL", "120", "prlimit", &format!("--as={MAX_ADDRESS_SPACE}"), "--"])
        .arg(env!("CARGO_BIN_EXE_telco-stap"))
        .args(args)
        .output()
        .expect("run telco-stap under timeout and prlimit");
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned(), o.status.code())
}

/// What the tracer says when it finds the target's doing.
fn names_the_target(err: &str) -> bool {
    err.lines().any(|l| {
        l.starts_with("ERROR: ")
            && (l.contains("the target corrupted")
                || l.contains("the target overwrote")
                || l.contains("statistic damaged")
                || l.contains("the sandbox running probe"))
    })
}

/// The output files a run wrote are whole: the trace is JSON, the ITRC
/// files read back.
fn check_files(d: &Path, label: &str) {
    let chrome = d.join("trace.json");
    if chrome.exists() {
        let text = std::fs::read_to_string(&chrome).expect("read the trace");
        if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
            panic!("{label}: the trace is not JSON ({e})");
        }
        std::fs::remove_file(&chrome).expect("remove the trace");
    }
    let perfetto = d.join("trace.pftrace");
    if perfetto.exists() {
        let bytes = std::fs::read(&perfetto).expect("read the trace");
        assert!(whole_packets(&bytes), "{label}: the Perfetto trace is not whole packets");
        std::fs::remove_file(&perfetto).expect("remove the trace");
    }
    for e in std::fs::read_dir(d).expect("scratch dir") {
        let p = e.expect("entry").path();
        if p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("calls.itrc")) {
            let (_, err, code) = common::telco_run(&["itrc-dump", p.to_str().expect("utf-8")]);
            assert_eq!(code, Some(0), "{label}: {} does not read back: {err}", p.display());
            std::fs::remove_file(&p).expect("remove the ITRC file");
        }
    }
}

/// A Perfetto trace file: `Trace.packet` fields (tag 0x0a, a varint
/// length, that many bytes) to its very end.
fn whole_packets(mut b: &[u8]) -> bool {
    while !b.is_empty() {
        if b[0] != 0x0a {
            return false;
        }
        let (mut len, mut shift, mut i) = (0u64, 0, 1);
        loop {
            let Some(&byte) = b.get(i) else { return false };
            len |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            i += 1;
            if byte & 0x80 == 0 || shift > 63 {
                break;
            }
        }
        let Some(rest) = b.get(i + len as usize..) else { return false };
        b = rest;
    }
    true
}

fn run(d: &Path, c: &Case) {
    let exe = program(d);
    let mut cmd = vec![exe.display().to_string(), "20000".into(), c.what.into(), c.when.into(), "7".into()];
    cmd.extend(offsets(c.what));
    let mut args: Vec<String> = vec!["-e".into(), c.script.into(), "-c".into(), cmd.join(" ")];
    if matches!(c.what, "table" | "lock") {
        args.extend(["-D".into(), "MAXMAPENTRIES=777".into()]);
    }
    if c.script == SPANS {
        args.extend(["--chrome".into(), d.join("trace.json").display().to_string()]);
        args.extend(["--perfetto".into(), d.join("trace.pftrace").display().to_string()]);
    }
    if c.script == ITRACE {
        args.extend(["--itrc".into(), d.join("calls.itrc").display().to_string(), "-D".into(), "MAXITRACE=2".into()]);
    }
    let label = format!("{} {} `{}`", c.what, c.when, c.script);
    let (_, err, code) = bounded(&args);
    assert_eq!(code, Some(1), "{label}: exit status {code:?}\n{err}");
    assert!(names_the_target(&err), "{label}: no ERROR names the target's doing:\n{err}");
    check_files(d, &label);
}

#[test]
fn overwriting_the_whole_region_at_the_start_and_in_the_middle() {
    let d = common::scratch("hostile-fill");
    for (what, when) in [("fill:255", "start"), ("fill:170", "middle")] {
        for script in [COUNTER, PRINTF, MAP_END, MAP_TIMER, STAT, SPANS, ITRACE] {
            run(&d, &Case { what, when, script });
        }
    }
}

#[test]
fn random_bytes_in_the_middle_and_at_random_moments() {
    let d = common::scratch("hostile-random");
    for script in [COUNTER, MAP_END, SPANS] {
        run(&d, &Case { what: "random", when: "middle", script });
    }
    for script in [PRINTF, MAP_TIMER, ITRACE] {
        run(&d, &Case { what: "random", when: "always", script });
    }
}

#[test]
fn forged_ring_records() {
    let d = common::scratch("hostile-ring");
    for script in [PRINTF, COUNTER, SPANS] {
        run(&d, &Case { what: "ring", when: "middle", script });
    }
}

#[test]
fn a_broken_array_and_a_held_lock() {
    let d = common::scratch("hostile-table");
    run(&d, &Case { what: "table", when: "middle", script: MAP_END });
    run(&d, &Case { what: "table", when: "middle", script: MAP_TIMER });
    // A lock held for ever: the end probe spins in the sandbox until it is
    // stopped (os::sandbox, session::SANDBOX_STALL).
    run(&d, &Case { what: "lock", when: "middle", script: MAP_LOCKED });
}

#[test]
fn a_statistic_in_an_impossible_state() {
    let d = common::scratch("hostile-stat");
    run(&d, &Case { what: "stat", when: "middle", script: STAT });
}

/// `-p`: the target scribbles at random moments from before the tracer
/// attaches until after it detaches (`-T 1`).
#[test]
fn scribbling_through_attach_run_and_detach() {
    let d = common::scratch("hostile-attach");
    let exe = program(&d);
    for (what, script) in [("fill:255", COUNTER), ("random", MAP_TIMER), ("fill:85", SPANS)] {
        let mut target = common::Running::start_with_env(&exe, &["-1", what, "always", "11"], &[("HOSTILE_WAIT", "1")]);
        target.say("go");
        let pid = target.pid().to_string();
        let mut args: Vec<String> = ["-e", script, "-p", &pid, "-T", "1"].iter().map(|s| s.to_string()).collect();
        if script == SPANS {
            args.extend(["--chrome".into(), d.join("trace.json").display().to_string()]);
            args.extend(["--perfetto".into(), d.join("trace.pftrace").display().to_string()]);
        }
        let label = format!("-p {what} `{script}`");
        let (_, err, code) = bounded(&args);
        assert_eq!(code, Some(1), "{label}: exit status {code:?}\n{err}");
        assert!(names_the_target(&err), "{label}: no ERROR names the target's doing:\n{err}");
        check_files(&d, &label);
    }
}
