//! Privilege boundaries (INTERNALS.md, invariant 6): processes of
//! different credentials around one session. tests/programs/privsep.c
//! plays the unprivileged side (uid 12345) the way an attacker who
//! controls it would: it points the shared ring's data offset at an
//! address of its choosing, the attack that made a root process write
//! there when target-side code took addresses from the region.
//!
//! * A root master whose forked worker drops to uid 12345 and forges the
//!   ring: the master's events still go into the ring (its `canary` is
//!   untouched), the worker cannot make the trusted mirror writable, and
//!   the tracer cuts the worker off with a warning naming it.
//! * An unprivileged program (traced with `-p`) that forges the ring and
//!   runs Debian's setuid `su`: `su` is never armed (a warning names it
//!   and says why), and it ends by itself, not by a signal.

mod common;

use std::path::{Path, PathBuf};

fn program(d: &Path) -> PathBuf {
    let exe = d.join("privsep");
    if !exe.exists() {
        common::gcc("privsep.c", &exe, &[]);
    }
    exe
}

/// The header's `ring_off` field, the ring header's `head` and `data_off`.
fn ring_fields() -> [String; 3] {
    use telco_abi::region::{Header, RingHeader};
    [
        core::mem::offset_of!(Header, ring_off).to_string(),
        core::mem::offset_of!(RingHeader, head).to_string(),
        core::mem::offset_of!(RingHeader, data_off).to_string(),
    ]
}

/// The master (`-c`, root) and its worker: the master's output and the
/// tracer's error output.
fn master_and_worker(tag: &str, forge: bool) -> (String, String) {
    let script = "probe begin { println(\"armed\") } \
                  probe process.function(\"work\") { printf(\"w %d\\n\", $arg1) }";
    let (out, err, events) = run_master(tag, script, forge, 0);
    // What reached the tracer is the master's own calls (a worker that
    // forges the ring may forge events: data, never a write elsewhere).
    assert!(forge || events.lines().all(|l| l.starts_with("w ") || l == "armed"), "forged output:\n{events}");
    (out, err)
}

/// The master (`-c`, root) and its worker running `script`, the worker
/// calling work() `wcalls` times once moved: the master's output, the
/// tracer's error output and the script's.
fn run_master(tag: &str, script: &str, forge: bool, wcalls: u32) -> (String, String, String) {
    let d = common::scratch(tag);
    let exe = program(&d);
    let [ring, head, data] = ring_fields();
    // The tracer spawns the master (root) with the test's pipes: it starts
    // once the begin probe has run, at the tracer's first line.
    let mut tracer = std::process::Command::new("timeout");
    tracer
        .args(["-s", "KILL", "120"])
        .arg(env!("CARGO_BIN_EXE_telco-stap"))
        .args(["-e", script, "-o"])
        .arg(d.join("out.txt"))
        .arg("-c")
        .arg(format!("{} worker {ring} {head} {data} 1000 {} {wcalls}", exe.display(), u8::from(forge)))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = tracer.spawn().expect("start telco-stap");
    use std::io::{BufRead, Read, Write};
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the master's ready line");
    assert_eq!(line.trim(), "ready", "the master did not start");
    let mut input = child.stdin.take().expect("stdin");
    writeln!(input, "go").expect("start the master");
    let mut errors = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut err = String::new();
    if wcalls > 0 {
        // The worker calls work() once the tracer says it moved it.
        loop {
            let mut l = String::new();
            if errors.read_line(&mut l).expect("the tracer's errors") == 0 {
                break;
            }
            err.push_str(&l);
            if l.contains("its probes go on in memory of their own") {
                break;
            }
        }
        writeln!(input, "moved").expect("let the worker go on");
    }
    drop(input);
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("the master's output");
    errors.read_to_string(&mut err).expect("the tracer's errors");
    let status = child.wait().expect("wait for telco-stap");
    let events = std::fs::read_to_string(d.join("out.txt")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&d);
    assert_ne!(status.code(), None, "the tracer was killed: {err}");
    (rest, err, events)
}

#[test]
fn a_worker_that_drops_privileges_moves_no_write_of_its_root_master() {
    let (out, err) = master_and_worker("privilege-forge", true);
    assert!(out.contains("worker forged 1,"), "the worker found no region to forge:\n{out}\n{err}");
    assert!(
        out.contains("mirror mprotect refused, mirror write refused"),
        "the worker could make the trusted mirror writable:\n{out}"
    );
    assert!(
        out.contains("calls 1000 canary 0x5afe"),
        "a write of the master went where the worker said:\n{out}\n{err}"
    );
    // The tracer saw the forged ring (and ended the session), or cut the
    // worker off first: either way the worker lost the region.
    assert!(out.contains("worker cut off 1"), "the worker kept the region:\n{out}\n{err}");
}

#[test]
fn a_worker_that_drops_privileges_is_cut_off_and_named() {
    let (out, err) = master_and_worker("privilege-cut", false);
    assert!(out.contains("worker cut off 1"), "the worker was not cut off:\n{out}\n{err}");
    assert!(out.contains("calls 1000 canary 0x5afe"), "{out}");
    assert!(
        err.lines().any(|l| l.starts_with("WARNING: pid ")
            && l.contains("(privsep) changed its credentials")
            && l.contains("Uid 12345 12345 12345 12345 against 0 0 0 0")),
        "no warning names the worker:\n{err}\n{out}"
    );
    assert!(!err.contains("ERROR"), "{err}");
}

/// A worker that dropped its privileges keeps its probes, in a region of
/// its own domain: its calls are counted with the master's (a sharded
/// counter, a statistic), a thread it starts after the move takes its slot
/// there too, its `printf` reaches the output, and the master's region
/// was never its.
#[test]
fn a_worker_that_drops_privileges_goes_on_in_a_region_of_its_own() {
    let script = "global n, s probe begin { println(\"armed\") } \
                  probe process.function(\"work\") { n++; s <<< $arg1; \
                  if ($arg1 >= 1000000) printf(\"worker %d uid %d\\n\", $arg1, uid()) } \
                  probe end { printf(\"n=%d count=%d max=%d\\n\", n, @count(s), @max(s)) }";
    let (out, err, events) = run_master("privilege-domain", script, false, 5);
    assert!(out.contains("worker moved 1"), "the worker was not moved:\n{out}\n{err}");
    assert!(out.contains("calls 1000 canary 0x5afe"), "{out}");
    assert!(
        err.lines().any(|l| l.starts_with("WARNING: pid ")
            && l.contains("(privsep) changed its credentials")
            && l.contains("its probes go on in memory of their own (the domain of uid 12345)")),
        "no warning names the worker:\n{err}\n{out}"
    );
    let workers: Vec<&str> = events.lines().filter(|l| l.starts_with("worker ")).collect();
    // Five calls, then one on a thread new since the move.
    let want: Vec<String> =
        (0..5).map(|i| 1_000_000 + i).chain([2_000_000]).map(|i| format!("worker {i} uid 12345")).collect();
    assert_eq!(workers, want, "{events}\n{err}");
    assert!(events.contains("n=1006 count=1006 max=2000000\n"), "{events}\n{err}");
    assert!(!err.contains("ERROR"), "{err}");
}

/// `exit()` in a process of another domain ends the session: its own
/// domain's probes stop at once (one line printed of five calls), the
/// session's within its next look.
#[test]
fn exit_in_a_worker_of_another_domain_ends_the_session() {
    let script = "probe begin { println(\"armed\") } \
                  probe process.function(\"work\") { if ($arg1 >= 1000000) { printf(\"exit %d\\n\", $arg1); exit() } }";
    let (out, err, events) = run_master("privilege-exit", script, false, 5);
    assert!(out.contains("worker moved 1"), "the worker was not moved:\n{out}\n{err}");
    assert_eq!(events, "armed\nexit 1000000\n", "{err}");
    assert!(!err.contains("ERROR"), "{err}");
}

#[test]
fn a_setuid_program_run_by_an_unprivileged_one_is_never_armed() {
    let d = common::scratch("privilege-su");
    let exe = program(&d);
    // The program runs as uid 12345 (its directory open to it).
    let _ = std::process::Command::new("chmod").arg("755").arg(&d).status();
    let [ring, head, data] = ring_fields();
    let exe_s = exe.to_str().expect("utf-8 path");
    let setpriv = ["--reuid=12345", "--regid=12345", "--clear-groups", exe_s, "su", &ring, &head, &data];
    let mut target = common::Running::start(Path::new("/usr/bin/setpriv"), &setpriv);
    assert_eq!(target.ready.trim(), "ready");
    let pid = target.pid().to_string();
    let script = "global n probe begin { println(\"armed\") } \
                  probe process(\"libc.so.6\").function(\"getuid\") { n++ } probe end { println(\"n \", n) }";
    let tracer = common::Tracer::start(&["-e", script, "-p", &pid], "armed");
    target.say("go");
    let (said, status) = target.finish();
    let (out, err, _code) = tracer.finish();
    let _ = std::fs::remove_dir_all(&d);
    assert!(status.success(), "the unprivileged program failed: {status:?}\n{said}");
    assert!(said.contains("forged 1 uid 12345"), "it found no region to forge:\n{said}");
    assert!(said.contains("su exit "), "su did not end by itself:\n{said}\n{err}");
    assert!(
        err.lines().any(|l| l.starts_with("WARNING: cannot probe pid ")
            && l.contains("su")
            && l.contains("other credentials than the session's first process")),
        "no warning says su was left unarmed:\n{err}"
    );
    // The forged ring ends the session with an ERROR naming it (the
    // tracer's own probes trust no region the target wrote).
    assert!(err.contains("ERROR: the target overwrote the event ring's geometry"), "{out}\n{err}");
}

/// `.itrace`: the block tracer's answer to a traced call is taken from the
/// trusted mirror, and only when it names the call's own request: a
/// thread that forges RUN with its own resume address in every waiting
/// slot (as any process sharing the region could) sends no call there.
/// Every one of the 200 calls returns, with its result, and the block
/// tracer's code (shared with every process the pool is) cannot be made
/// writable.
#[test]
fn a_forged_itrace_answer_sends_no_thread_anywhere() {
    let d = common::scratch("privilege-itrace");
    let exe = program(&d);
    let exe_s = exe.to_str().expect("utf-8 path");
    let mut target = common::Running::start(&exe, &["itrace", "200"]);
    assert_eq!(target.ready.trim(), "ready");
    let pid = target.pid().to_string();
    let itrc = d.join("calls.itrc");
    let script = "probe begin { println(\"armed\") } probe process.function(\"work\").itrace {}";
    let tracer = common::Tracer::start(&["-e", script, "-p", &pid, "--itrc", itrc.to_str().expect("utf-8")], "armed");
    target.say("go");
    let (said, status) = target.finish();
    let (_out, err, _code) = tracer.finish();
    let _ = std::fs::remove_dir_all(&d);
    let _ = exe_s;
    let expect: i64 = (0..200).map(|i| 2 * i + 1).sum();
    assert!(status.success(), "the traced program died: {status:?}\n{said}\n{err}");
    assert_eq!(said.trim(), format!("pool code sealed\nitrace {expect}"), "{err}");
}
