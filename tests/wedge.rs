//! The target cannot wedge the tracer (issue 41): a target run as an
//! unprivileged user (uid 12345, tests/programs/wedge.c) that makes the
//! page of the tracer's remote-operation stub non-executable, or hands the
//! system calls the tracer injects to a seccomp listener that never
//! answers. The tracer (root, under `timeout`: a regression fails rather
//! than hangs) proceeds or ends with an error naming the pid, the call and
//! the fault; SIGINT ends attach and detach within a second, the `end`
//! probe still runs and the `--chrome` file is whole; the target survives
//! and works on.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const SCRIPT: &str = "global n probe begin { println(\"armed\") } probe process.function(\"work\") { n++ } \
                      probe end { println(\"end \", n) }";

/// Seconds `timeout` gives a tracer: far more than any case needs.
const LIMIT_SECS: u32 = 30;

/// From SIGINT to the tracer's exit, at most (a second, and room for a
/// loaded two-core machine: the give-up itself is a quarter of a second).
const SIGINT_MS: u128 = 1000;

fn program() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let exe = common::scratch("wedge").join("wedge");
        common::gcc("wedge.c", &exe, &[]);
        exe
    })
    .clone()
}

/// `wedge ARGS` as uid and gid 12345, no supplementary groups: its
/// "ready" line has come. Killed if it still runs after `LIMIT_SECS`
/// twice (a target left wedged fails the test, reading from it ends),
/// unless the watchdog returned is dropped first.
fn target(args: &[&str]) -> (common::Running, std::sync::mpsc::Sender<()>) {
    let exe = program();
    let mut all = vec!["--reuid=12345", "--regid=12345", "--clear-groups", exe.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    let t = common::Running::start(std::path::Path::new("setpriv"), &all);
    assert!(t.ready.starts_with("ready "), "{:?}", t.ready);
    let (dog, bark) = std::sync::mpsc::channel::<()>();
    let pid = t.pid() as i32;
    std::thread::spawn(move || {
        let limit = std::time::Duration::from_secs(2 * u64::from(LIMIT_SECS));
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = bark.recv_timeout(limit) {
            // SAFETY: killing our own child, which is not reaped yet (the
            // test holds it).
            unsafe { libc_kill(pid, 9) };
        }
    });
    (t, dog)
}

/// The target goes on working, and ends well.
fn survives(mut t: common::Running) {
    t.say("work 100");
    assert_eq!(t.line(), "worked 10000\n");
    let (rest, status) = t.finish();
    assert!(status.success(), "the target ended with {status:?} ({rest:?})");
}

/// telco-stap with `args` under `timeout -s KILL`, run under an allow-all
/// seccomp filter when `filtered` (the kernel then refuses it
/// `PTRACE_O_SUSPEND_SECCOMP`); its error output read by a thread.
struct Tracer {
    timeout: Child,
    out: BufReader<std::process::ChildStdout>,
    err: std::sync::mpsc::Receiver<String>,
}

impl Tracer {
    fn start(args: &[&str], filtered: bool) -> Tracer {
        let mut cmd = Command::new("timeout");
        cmd.args(["-s", "KILL", &LIMIT_SECS.to_string()]);
        if filtered {
            cmd.arg(program()).arg("filtered");
        }
        let mut timeout = cmd
            .arg(env!("CARGO_BIN_EXE_telco-stap"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start telco-stap under timeout");
        let out = BufReader::new(timeout.stdout.take().expect("stdout"));
        let mut stderr = BufReader::new(timeout.stderr.take().expect("stderr"));
        let (tx, err) = std::sync::mpsc::channel();
        std::thread::spawn(move || loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 || tx.send(line).is_err() {
                break;
            }
        });
        Tracer { timeout, out, err }
    }

    /// Its next line of output.
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).expect("telco-stap's output");
        l
    }

    /// Its error output up to a line that starts with `prefix` (`-v`'s
    /// "Pass 4:"): the moment it starts attaching.
    fn said(&mut self, prefix: &str) -> String {
        let mut all = String::new();
        while let Ok(l) = self.err.recv() {
            all.push_str(&l);
            if l.starts_with(prefix) {
                return all;
            }
        }
        panic!("telco-stap never said {prefix:?}:\n{all}");
    }

    /// telco-stap itself (the child of `timeout`).
    fn pid(&self) -> i32 {
        let t = self.timeout.id();
        let children = std::fs::read_to_string(format!("/proc/{t}/task/{t}/children")).expect("timeout's children");
        children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("telco-stap runs")
    }

    /// SIGINT to telco-stap.
    fn interrupt(&self) {
        // SAFETY: signalling the process we started.
        assert_eq!(unsafe { libc_kill(self.pid(), 2) }, 0);
    }

    /// The rest of its output and error output, its exit code (137: killed
    /// by `timeout`), and the milliseconds it took to end from `since`.
    fn finish(mut self, since: Instant) -> (String, String, Option<i32>, u128) {
        let code = self.timeout.wait().expect("wait for telco-stap").code();
        let ms = since.elapsed().as_millis();
        eprintln!("telco-stap ended {ms} ms after the mark");
        let mut out = String::new();
        self.out.read_to_string(&mut out).expect("telco-stap's output");
        let err: String = self.err.iter().collect();
        (out, err, code, ms)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Ok(None) = self.timeout.try_wait() {
            let _ = self.timeout.kill();
            let _ = self.timeout.wait();
        }
    }
}

/// The trace file is JSON (then removed).
fn whole_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::remove_file(path).expect("remove the trace");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("the trace is not JSON ({e}):\n{text}"))
}

fn has_session_memory(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps").contains("memfd:telco-stap")
}

/// The page the stub goes to (past the end of the program's code) made
/// non-executable before the attach: the tracer puts its stub elsewhere
/// and the session works; SIGINT ends it. (Before: every injected system
/// call faulted at the stub, forever, the tracer spinning and deaf to
/// SIGINT.)
#[test]
fn a_stub_page_made_non_executable_before_the_attach() {
    let (mut t, _dog) = target(&["stub"]);
    t.say("protect");
    assert_eq!(t.line(), "protected 0\n");
    let pid = t.pid().to_string();
    let mut tracer = Tracer::start(&["-p", &pid, "-e", SCRIPT], false);
    assert_eq!(tracer.line(), "armed\n");
    t.say("work 10");
    assert_eq!(t.line(), "worked 100\n");
    let t0 = Instant::now();
    tracer.interrupt();
    let (out, err, code, ms) = tracer.finish(t0);
    assert_eq!((code, out.as_str()), (Some(0), "end 10\n"), "{err}");
    assert!(ms < SIGINT_MS, "{ms} ms from SIGINT to the end");
    assert!(!err.contains("stays mapped"), "{err}");
    assert!(!has_session_memory(t.pid()));
    t.say("unprotect");
    assert_eq!(t.line(), "unprotected\n");
    survives(t);
}

/// The stub's page made non-executable while the session runs: the
/// detach's first system call (a `munmap` through the stub) faults; the
/// tracer says so (pid, call, SIGSEGV), puts the thread back, leaves the
/// rest mapped, and ends within a second of SIGINT with the `end` probe
/// run. The target, which never runs the stub's bytes itself, goes on.
#[test]
fn a_stub_page_made_non_executable_during_the_session() {
    let (mut t, _dog) = target(&["stub"]);
    let pid = t.pid().to_string();
    let trace = common::scratch("stubpage").join("trace.json");
    let mut tracer = Tracer::start(&["-p", &pid, "-e", SCRIPT, "--chrome", trace.to_str().expect("utf-8")], false);
    assert_eq!(tracer.line(), "armed\n");
    t.say("protect");
    assert_eq!(t.line(), "protected 1\n", "the stub is in the program's last code page");
    t.say("work 10");
    assert_eq!(t.line(), "worked 100\n");
    let t0 = Instant::now();
    tracer.interrupt();
    let (out, err, code, ms) = tracer.finish(t0);
    assert_ne!(code, Some(137), "killed by timeout (a wedged tracer): {err}");
    assert_eq!(out, "end 10\n", "{err}");
    assert!(ms < SIGINT_MS, "{ms} ms from SIGINT to the end:\n{err}");
    let said = err.lines().find(|l| l.contains("faulted")).unwrap_or_else(|| panic!("no fault named:\n{err}"));
    for word in [pid.as_str(), "munmap", "SIGSEGV"] {
        assert!(said.contains(word), "{word} not named: {said}");
    }
    whole_json(&trace);
    t.say("unprotect");
    assert_eq!(t.line(), "unprotected\n");
    survives(t);
}

/// memfd_create and munmap held by a seccomp listener that never answers:
/// the tracer's injected calls are not the program's, the filter is
/// suspended for them (`PTRACE_O_SUSPEND_SECCOMP`), and the session arms
/// and detaches as usual, under `--chrome`. (Before: the attach hung at
/// memfd_create forever.) The program's own calls stay filtered.
#[test]
fn a_seccomp_listener_that_never_answers_holds_nothing() {
    let (mut t, _dog) = target(&["seccomp", "memfd_create,munmap"]);
    let pid = t.pid().to_string();
    let trace = common::scratch("seccomp").join("trace.json");
    let mut tracer = Tracer::start(&["-p", &pid, "-e", SCRIPT, "--chrome", trace.to_str().expect("utf-8")], false);
    assert_eq!(tracer.line(), "armed\n");
    t.say("work 10");
    assert_eq!(t.line(), "worked 100\n");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    assert!(status.contains("Seccomp:\t2"), "the filter applies while traced:\n{status}");
    let t0 = Instant::now();
    tracer.interrupt();
    let (out, err, code, ms) = tracer.finish(t0);
    assert_eq!((code, out.as_str()), (Some(0), "end 10\n"), "{err}");
    assert!(ms < SIGINT_MS, "{ms} ms from SIGINT to the end");
    assert!(!err.contains("stays mapped"), "{err}");
    assert!(!has_session_memory(t.pid()));
    let trace = whole_json(&trace);
    assert!(trace.to_string().contains("work"), "{trace}");
    survives(t);
}

/// The same listener on memfd_create, and a tracer the kernel refuses to
/// suspend seccomp for (itself under a filter): the attach's memfd_create
/// waits. Left alone, the tracer gives it up at its deadline (2 s) with
/// an error naming the pid and the call; interrupted, it gives up within
/// a second, lets the target go, runs `end` and writes a whole trace. The
/// target's thread is put back each time and works on.
#[test]
fn a_held_attach_ends_by_its_deadline_or_sigint() {
    let (t, _dog) = target(&["seccomp", "memfd_create"]);
    let pid = t.pid().to_string();
    let trace = common::scratch("heldattach").join("trace.json");
    let args = ["-v", "-p", &pid, "-e", SCRIPT, "--chrome", trace.to_str().expect("utf-8")];
    let mut tracer = Tracer::start(&args, true);
    let t0 = Instant::now();
    tracer.said("Pass 4:");
    let (out, err, code, ms) = tracer.finish(t0);
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    let said = err.lines().find(|l| l.contains("memfd_create")).unwrap_or_else(|| panic!("the call not named:\n{err}"));
    assert!(said.contains(&pid) && said.contains("2 s"), "{said}");
    assert!((2000..10_000).contains(&ms), "{ms} ms");
    assert!(!err.contains("stays mapped"), "{err}");

    let mut tracer = Tracer::start(&args, true);
    tracer.said("Pass 4:");
    let t0 = Instant::now();
    tracer.interrupt();
    let (out, err, code, ms) = tracer.finish(t0);
    assert_ne!(code, Some(137), "killed by timeout (a wedged tracer): {err}");
    assert_eq!(out, "armed\nend 0\n", "{err}");
    assert!(err.contains("memfd_create"), "{err}");
    assert!(ms < SIGINT_MS, "{ms} ms from SIGINT to the end:\n{err}");
    whole_json(&trace);
    survives(t);
}

/// A listener on munmap, the tracer refused suspension: the session arms,
/// and its detach's munmap waits. The SIGINT that ended the session makes
/// it give that wait up within a second: the
/// probes are out, the session's memory stays mapped (a warning naming
/// munmap), `end` runs, the trace is whole and the target works on.
#[test]
fn a_held_detach_ends_by_sigint() {
    let (mut t, _dog) = target(&["seccomp", "munmap"]);
    let pid = t.pid().to_string();
    let trace = common::scratch("helddetach").join("trace.json");
    let mut tracer = Tracer::start(&["-p", &pid, "-e", SCRIPT, "--chrome", trace.to_str().expect("utf-8")], true);
    assert_eq!(tracer.line(), "armed\n");
    t.say("work 10");
    assert_eq!(t.line(), "worked 100\n");
    let t0 = Instant::now();
    tracer.interrupt();
    let (out, err, code, ms) = tracer.finish(t0);
    assert_ne!(code, Some(137), "killed by timeout (a wedged tracer): {err}");
    assert_eq!(out, "end 10\n", "{err}");
    assert!(ms < SIGINT_MS, "{ms} ms from SIGINT to the end:\n{err}");
    assert!(err.lines().any(|l| l.contains("stays mapped") && l.contains("munmap")), "{err}");
    let trace = whole_json(&trace);
    assert!(trace.to_string().contains("work"), "{trace}");
    survives(t);
}

/// A listener that takes the held memfd_create (a child of the target,
/// with SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV) and never answers: the
/// call waits killably, where the tracer's interrupt does not reach, and
/// the tracer (refused suspension) cannot stop the thread again. It does
/// not wait for it: past the deadline it says so and exits, the thread
/// left in the session's stub. When the call ends (the listener killed:
/// it fails with ENOSYS), the stub puts the thread back by itself and the
/// target works on.
#[test]
fn a_thread_that_cannot_be_stopped_is_left_to_the_stub() {
    let (t, _dog) = target(&["seccomp", "memfd_create", "received"]);
    let listener: i32 = t.ready.split_whitespace().nth(2).and_then(|p| p.parse().ok()).expect("the listener's pid");
    let pid = t.pid().to_string();
    let mut tracer = Tracer::start(&["-v", "-p", &pid, "-e", SCRIPT], true);
    let t0 = Instant::now();
    tracer.said("Pass 4:");
    let (out, err, code, ms) = tracer.finish(t0);
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    let said = err.lines().find(|l| l.contains("memfd_create")).unwrap_or_else(|| panic!("the call not named:\n{err}"));
    assert!(said.contains(&pid) && said.contains("does not stop") && said.contains("stub"), "{said}");
    assert!((2000..10_000).contains(&ms), "{ms} ms");
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).expect("wchan");
    assert!(wchan.contains("seccomp"), "the thread still waits in the held call: {wchan}");
    // SAFETY: killing the target's listener (our grandchild).
    assert_eq!(unsafe { libc_kill(listener, 9) }, 0);
    survives(t);
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
