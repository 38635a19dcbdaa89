//! Probes by path with neither `-p` nor `-c` (system-wide): every process
//! that runs the file, running at the start or exec'ing it later, matched
//! by identity (a container's mount namespace included). Readiness: the
//! `-v` line that says the execs are watched, then each process's
//! `process("P").begin` line. Each test builds its own copy of the
//! program (the sessions of tests running at once must not watch one
//! file).

mod common;
use common::Tracer;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `prog N [wait]`: N calls of work(), then "sum S"; with `wait`, says
/// "ready" first and waits for a line on its stdin.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) long work(long x) { __asm__ volatile("" ::: "memory"); return 2 * x + 1; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1, s = 0;
    if (argc > 2 && strcmp(argv[2], "wait") == 0) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 2;
    }
    for (long i = 0; i < n; i++) s += work(i);
    printf("sum %ld\n", s);
    return 0;
}
"#;

fn program(tag: &str) -> PathBuf {
    let dir = common::scratch(tag);
    common::compile_text(&dir, "prog", PROGRAM, &["-O2"])
}

fn script(exe: &Path) -> String {
    let e = exe.display();
    format!(
        r#"global n, mains
probe process("{e}").begin {{ printf("armed %d\n", pid()) }}
probe process("{e}").function("main") {{ mains++ }}
probe process("{e}").function("work") {{ n[pid()]++ }}
probe end {{ t = 0; c = 0; foreach (p in n) {{ c++; t += n[p] }} printf("%d processes, %d calls, main %d\n", c, t, mains) }}"#
    )
}

/// A session on `exe` by path, once it watches its execs.
fn session(exe: &Path) -> Tracer {
    Tracer::start_on_stderr(&["-v", "-e", &script(exe)], "Pass 5: watching the processes of")
}

/// SIGINT, then what it printed.
fn end(t: Tracer) -> (String, String) {
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGINT) }, 0);
    let (out, err, code) = t.finish();
    assert_eq!(code, Some(0), "{err}");
    (out, err)
}

/// The next line of the session's output.
fn line(t: &mut Tracer) -> String {
    let mut l = String::new();
    t.output.read_line(&mut l).expect("telco-stap's output");
    l
}

fn run(exe: &Path, calls: u32) -> std::process::Output {
    Command::new(exe).arg(calls.to_string()).stdin(Stdio::null()).output().expect("run the program")
}

/// A program started after the session began is caught at its exec:
/// `main` fires once, every call is counted; a second run too.
#[test]
fn a_program_started_later_is_probed_from_its_start() {
    let exe = program("bypath-later");
    let mut t = session(&exe);
    let o = run(&exe, 1000);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "sum 1000000\n");
    assert!(line(&mut t).starts_with("armed "), "process.begin in it");
    let o = run(&exe, 500);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "sum 250000\n");
    assert!(line(&mut t).starts_with("armed "), "process.begin in the second");
    let (out, err) = end(t);
    assert_eq!(out, "2 processes, 1500 calls, main 2\n", "{err}");
}

/// Processes running when the session starts are armed; so are those
/// started while it runs, 20 at once.
#[test]
fn twenty_processes_started_at_once_are_all_counted() {
    let exe = program("bypath-twenty");
    let mut early: Vec<std::process::Child> = (0..3)
        .map(|_| {
            let mut c = Command::new(&exe)
                .args(["100", "wait"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start");
            let mut r = std::io::BufReader::new(c.stdout.as_mut().unwrap());
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            assert_eq!(l, "ready\n");
            c
        })
        .collect();
    let mut t = session(&exe);
    for _ in 0..3 {
        assert!(line(&mut t).starts_with("armed "));
    }
    let late: Vec<std::process::Child> =
        (0..20).map(|_| Command::new(&exe).arg("1000").stdout(Stdio::piped()).spawn().expect("start")).collect();
    for c in late {
        let o = c.wait_with_output().expect("wait");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "sum 1000000\n");
    }
    for c in &mut early {
        c.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    for c in early {
        let o = c.wait_with_output().expect("wait");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "sum 10000\n");
    }
    let (out, err) = end(t);
    // Each started later said so once; those running at the start had
    // run main already.
    let (said, total) =
        out.rsplit_once("armed ").map_or(("", out.as_str()), |(a, b)| (a, b.split_once('\n').map_or(b, |x| x.1)));
    assert_eq!(said.matches("armed ").count() + 1, 20, "{out}\n{err}");
    assert_eq!(total, "23 processes, 20300 calls, main 20\n", "{err}");
}

/// In another mount namespace (a container's): the same file under
/// another path is probed; another file at the program's own path is not
/// probed, and nothing of the session is mapped into it.
#[test]
fn a_container_s_process_is_matched_by_the_file_not_the_path() {
    let exe = program("bypath-ns");
    let dir = exe.parent().unwrap();
    let other = common::compile_text(dir, "other", PROGRAM, &["-O1"]);
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut t = session(&exe);
    // The same file, bind-mounted under another name in a namespace of its own.
    let same = format!("mount --bind {} {} && exec {}/prog 300", dir.display(), mnt.display(), mnt.display());
    let o = Command::new("unshare").args(["-m", "--propagation", "private", "sh", "-c", &same]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "sum 90000\n");
    assert!(line(&mut t).starts_with("armed "));
    // Another file at the program's path: it says its maps.
    let different = format!("mount --bind {} {} && exec {} 200 wait", other.display(), exe.display(), exe.display());
    let mut c = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &different])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut r = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert_eq!(l, "ready\n");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", c.id())).unwrap();
    assert!(maps.contains(&exe.display().to_string()), "it shows the program's path: {maps}");
    assert!(!maps.contains("telco-stap"), "another file at the path is not touched: {maps}");
    c.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut r, &mut rest).unwrap();
    assert_eq!(rest, "sum 40000\n");
    assert!(c.wait().unwrap().success());
    let (out, err) = end(t);
    assert_eq!(out, "1 processes, 300 calls, main 1\n", "{err}");
}

/// A library every process maps, by path: refused over MAXPROCESSES,
/// with the limit named.
#[test]
fn a_library_every_process_maps_needs_a_limit() {
    let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("the C library");
    // This test and its tracer map it, at least.
    let (out, err, code) = common::telco_run(&[
        "-D",
        "MAXPROCESSES=1",
        "-e",
        &format!("probe process(\"{libc}\").function(\"malloc\") {{ }}"),
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("more than MAXPROCESSES=1") && err.contains("-D MAXPROCESSES=N"), "{err}");
}

/// A probe without a program, by path: told to name one.
#[test]
fn a_process_probe_without_a_program_is_told_to_name_one() {
    let (_, err, code) = common::telco_run(&["-e", "probe process.begin { }"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("names no program") || err.contains("-p PID"), "{err}");
}

/// `--chrome` and `--perfetto` of a session on several processes: each
/// process is a track of its own, named, with its own threads' calls (as
/// Perfetto's trace processor reads them), though both had ended before
/// the files were written.
#[test]
fn every_process_gets_its_own_track() {
    let exe = program("bypath-tracks");
    let dir = exe.parent().unwrap().to_path_buf();
    let (json, pb) = (dir.join("t.json"), dir.join("t.pftrace"));
    let script = format!("probe process(\"{}\").function(\"work\") {{ }}", exe.display());
    let t = Tracer::start_on_stderr(
        &["-v", "-e", &script, "--chrome", json.to_str().unwrap(), "--perfetto", pb.to_str().unwrap()],
        "Pass 5: watching the processes of",
    );
    let mut pids = Vec::new();
    for calls in [300, 200] {
        let c = Command::new(&exe).arg(calls.to_string()).stdout(Stdio::piped()).spawn().expect("start");
        pids.push((c.id(), calls));
        assert!(c.wait_with_output().expect("wait").status.success());
    }
    end(t);
    for file in [&json, &pb] {
        let Some(v) = common::viewer_check(file) else { return };
        let threads = v["threads"].as_array().expect("threads");
        for &(pid, calls) in &pids {
            let th = threads
                .iter()
                .find(|t| t["pid"].as_u64() == Some(u64::from(pid)))
                .unwrap_or_else(|| panic!("{}: no track of pid {pid}: {v}", file.display()));
            assert_eq!(th["tid"].as_u64(), Some(u64::from(pid)), "{th}");
            assert_eq!(th["process_name"], "prog", "{th}");
            assert_eq!(th["counts"]["work"].as_u64(), Some(calls), "{th}");
        }
    }
}

/// A library by path: a process that maps it at the start, and programs
/// started later whose loader maps it (its open is held until the tracer
/// has attached; the process is armed right after the mapping, before
/// the library's code runs): every call counted, in those processes only.
#[test]
fn a_library_by_path_is_probed_in_every_process_that_loads_it() {
    let dir = common::scratch("bypath-lib");
    let lib = common::compile_text(
        &dir,
        "libbp.so",
        "__attribute__((noinline)) long lib_work(long x) { __asm__ volatile(\"\" ::: \"memory\"); return 3 * x + 1; }\n",
        &["-O2", "-shared", "-fPIC"],
    );
    let user = PROGRAM.replace("s += work(i)", "s += lib_work(i)").replace(
        "__attribute__((noinline)) long work(long x) { __asm__ volatile(\"\" ::: \"memory\"); return 2 * x + 1; }",
        "long lib_work(long x);",
    );
    let d = dir.to_str().unwrap();
    let exe =
        common::compile_text(&dir, "user", &user, &["-O2", &format!("-L{d}"), "-lbp", &format!("-Wl,-rpath,{d}")]);
    let other = program("bypath-lib-other");
    let mut early =
        Command::new(&exe).args(["100", "wait"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start");
    let mut r = std::io::BufReader::new(early.stdout.take().unwrap());
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert_eq!(l, "ready\n");
    let script = format!(
        "global n probe process(\"{}\").function(\"lib_work\") {{ n++ }} probe end {{ printf(\"%d calls\\n\", n) }}",
        lib.display()
    );
    let t = Tracer::start_on_stderr(&["-v", "-e", &script], "Pass 5: probes armed");
    // A process that reads the file (opens it, never maps it): let go,
    // untouched.
    let o = Command::new("cmp").arg(&lib).arg(&lib).output().expect("cmp");
    assert!(o.status.success(), "{o:?}");
    for calls in [1000, 500] {
        let o = Command::new(&exe).arg(calls.to_string()).output().expect("run");
        assert!(o.status.success());
    }
    // A program that does not load it is not touched.
    let o = run(&other, 10);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "sum 100\n");
    early.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut r, &mut rest).unwrap();
    assert!(early.wait().unwrap().success());
    let (out, err) = end(t);
    assert_eq!(out, "1600 calls\n", "{err}");
}

/// An unprivileged user's processes, by path: the one running at the start
/// is the session's first (its user the session's), and those the user
/// starts later map the session's memory through a holder of that user
/// (the tracer's own descriptors are root's, which they may not open).
#[test]
fn an_unprivileged_user_s_programs_started_later_are_probed() {
    let exe = program("bypath-user");
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"]).arg(&exe).args(args);
        c
    };
    let mut early = as_nobody(&["100", "wait"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start");
    let mut r = std::io::BufReader::new(early.stdout.take().unwrap());
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert_eq!(l, "ready\n");
    let mut t = session(&exe);
    assert!(line(&mut t).starts_with("armed "), "the first process");
    for calls in [500, 300] {
        let o = as_nobody(&[&calls.to_string()]).output().expect("run");
        assert_eq!(String::from_utf8_lossy(&o.stdout), format!("sum {}\n", calls * calls));
    }
    early.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut r, &mut rest).unwrap();
    assert_eq!(rest, "sum 10000\n");
    assert!(early.wait().unwrap().success());
    let (out, err) = end(t);
    // process.begin in each program started later, then the counts.
    assert_eq!(out.matches("armed ").count(), 2, "{out}\n{err}");
    assert!(out.ends_with("\n3 processes, 900 calls, main 2\n"), "{out}\n{err}");
    assert!(!err.contains("WARNING"), "{err}");
}

/// By path, processes of two users: root's first (the session's own
/// memory), then nobody's, one running at the start and two started
/// later, and root's again: nobody's work in memory of their own trust
/// domain, and every call and every `main` is counted in the one total.
#[test]
fn processes_of_two_users_are_counted_together() {
    let exe = program("bypath-two-users");
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"]).arg(&exe).args(args);
        c
    };
    let start = |mut c: Command| {
        let mut p = c.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start");
        let mut r = std::io::BufReader::new(p.stdout.take().unwrap());
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert_eq!(l, "ready\n");
        (p, r)
    };
    let mut root_early = Command::new(&exe);
    root_early.args(["100", "wait"]);
    let (mut first, mut first_out) = start(root_early);
    let (mut other, mut other_out) = start(as_nobody(&["200", "wait"]));
    // runuser's child runs the program.
    let ru = other.id();
    let kids = std::fs::read_to_string(format!("/proc/{ru}/task/{ru}/children")).unwrap();
    let other_pid: u32 = kids.split_whitespace().next().and_then(|k| k.parse().ok()).expect("runuser's child");
    let mut t = session(&exe);
    let armed: Vec<String> = (0..2).map(|_| line(&mut t)).collect();
    assert!(armed.iter().all(|l| l.starts_with("armed ")), "{armed:?}");
    let maps = std::fs::read_to_string(format!("/proc/{other_pid}/maps")).unwrap();
    assert!(maps.contains("/memfd:telco-stap-domain"), "nobody's process is not in its domain's memory:\n{maps}");
    for calls in [500, 300] {
        let o = as_nobody(&[&calls.to_string()]).output().expect("run");
        assert_eq!(String::from_utf8_lossy(&o.stdout), format!("sum {}\n", calls * calls));
    }
    assert_eq!(run(&exe, 50).stdout, b"sum 2500\n");
    for (p, r, calls) in [(&mut first, &mut first_out, 100), (&mut other, &mut other_out, 200)] {
        p.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(r, &mut rest).unwrap();
        assert_eq!(rest, format!("sum {}\n", calls * calls));
        assert!(p.wait().unwrap().success());
    }
    let (out, err) = end(t);
    // process.begin in each program started later, then the counts.
    assert_eq!(out.matches("armed ").count(), 3, "{out}\n{err}");
    assert!(out.ends_with("\n5 processes, 1150 calls, main 3\n"), "{out}\n{err}");
    assert!(!err.contains("WARNING") && !err.contains("ERROR"), "{err}");
}

/// `host LIB N [fork|forklater]`: says "ready", and on a line loads LIB
/// (`dlopen`) and makes N calls of its lib_work; with `fork`, a child
/// forked at the start (`forklater`: at that line) does the same after its
/// parent, then both wait for a last line and make the N calls again.
const HOST: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) long work(long x) { __asm__ volatile("" ::: "memory"); return 2 * x + 1; }
static long load(const char *lib, long n) {
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); exit(3); }
    long (*f)(long) = (long (*)(long))dlsym(h, "lib_work");
    long s = 0;
    for (long i = 0; i < n; i++) s += f(i);
    return s;
}
int main(int argc, char **argv) {
    long n = atol(argv[2]);
    int later = argc > 3 && strcmp(argv[3], "forklater") == 0;
    int forked = later || (argc > 3 && strcmp(argv[3], "fork") == 0);
    int go[2], done[2];
    char b, line[16];
    if (pipe(go) || pipe(done)) return 2;
    pid_t c = forked && !later ? fork() : -1;
    /* Each end where it is used: a child whose parent died reads EOF. */
    if (c == 0) {
    child:
        close(go[1]);
        close(done[0]);
        if (read(go[0], &b, 1) != 1) _exit(2);
        printf("child %d sum %ld\n", getpid(), load(argv[1], n));
        fflush(stdout);
        if (write(done[1], "x", 1) != 1 || read(go[0], &b, 1) != 1) _exit(2);
        printf("child again %ld\n", load(argv[1], n));
        fflush(stdout);
        _exit(0);
    }
    printf("ready %ld\n", work(1));
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 2;
    if (later && (c = fork()) == 0) goto child;
    close(go[0]);
    close(done[1]);
    printf("sum %ld\n", load(argv[1], n));
    fflush(stdout);
    if (forked && (write(go[1], "x", 1) != 1 || read(done[0], &b, 1) != 1)) return 2;
    printf("loaded\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 2;
    printf("again %ld\n", load(argv[1], n));
    fflush(stdout);
    int status = 0;
    if (forked && (write(go[1], "x", 1) != 1 || waitpid(c, &status, 0) != c || status != 0)) return 2;
    return 0;
}
"#;

/// A host process, killed if the test ends early (its forked child then
/// reads EOF and ends).
struct Host(std::process::Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A library by path that processes already in the session load later
/// (`dlopen`): the first process (its loader hook), another process armed
/// at the start, and a child that one forked before loading it (it gets a
/// record of its own, so that what it got is undone with it): every call
/// counted, and nothing of the session left in any of them after it.
#[test]
fn a_library_loaded_later_by_processes_of_the_session_is_probed() {
    let (out, err) = library_loaded_later("bypath-dlopen", &[&["1000"], &["700", "fork"]], false);
    assert_eq!(out, "3 processes, 2400 calls\n", "{err}");
}

/// The same under `-p` (one for each of two hosts): the first process
/// (its loader hook), a child it forks during the session, a second
/// process and the child it had forked before (armed at the start): the
/// opens of the library are watched for the session's processes too.
#[test]
fn a_library_loaded_later_by_the_processes_of_a_p_session_is_probed() {
    let (out, err) = library_loaded_later("p-dlopen", &[&["1000", "forklater"], &["700", "fork"]], true);
    assert_eq!(out, "4 processes, 3400 calls\n", "{err}");
}

/// Start `host` once for each of `runs` (its arguments after the
/// library), trace them by path (or with a `-p` each), let each load the
/// library, end the session: its output and messages, once nothing of it
/// is left in any host and the hosts' calls after it work.
fn library_loaded_later(tag: &str, runs: &[&[&str]], by_pid: bool) -> (String, String) {
    let dir = common::scratch(tag);
    let lib = common::compile_text(
        &dir,
        "libdl.so",
        "__attribute__((noinline)) long lib_work(long x) { __asm__ volatile(\"\" ::: \"memory\"); return 3 * x + 1; }\n",
        &["-O2", "-shared", "-fPIC"],
    );
    let exe = common::compile_text(&dir, "host", HOST, &["-O2"]);
    let lib_arg = lib.to_str().unwrap();
    let start = |args: &[&str]| {
        let mut c = Command::new(&exe)
            .arg(lib_arg)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start host");
        let mut r = std::io::BufReader::new(c.stdout.take().unwrap());
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert_eq!(l, "ready 3\n");
        (Host(c), r)
    };
    let mut hosts: Vec<_> = runs.iter().map(|args| start(args)).collect();
    let script = format!(
        "global n probe process(\"{}\").function(\"work\") {{ }} \
         probe process(\"{}\").function(\"lib_work\") {{ n[pid()]++ }} \
         probe end {{ c = 0; t = 0; foreach (p in n) {{ c++; t += n[p] }} printf(\"%d processes, %d calls\\n\", c, t) }}",
        exe.display(),
        lib.display()
    );
    let mut pids: Vec<u32> = hosts.iter().map(|(c, _)| c.0.id()).collect();
    let named: Vec<String> = pids.iter().map(u32::to_string).collect();
    let mut args: Vec<&str> = vec!["-v"];
    for pid in named.iter().filter(|_| by_pid) {
        args.extend(["-p", pid]);
    }
    args.extend(["-e", &script]);
    let t = Tracer::start_on_stderr(&args, "more process(es) armed");
    for (Host(c), r) in &mut hosts {
        c.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert!(l.starts_with("sum "), "{l}");
        l.clear();
        r.read_line(&mut l).unwrap();
        if let Some(rest) = l.strip_prefix("child ") {
            pids.push(rest.split(' ').next().unwrap().parse().unwrap());
            l.clear();
            r.read_line(&mut l).unwrap();
        }
        assert_eq!(l, "loaded\n");
    }
    let (out, err) = end(t);
    for pid in &pids {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
        assert!(!maps.contains("memfd:telco"), "pid {pid}: the session's memory is left:\n{maps}");
    }
    // The probed code is whole again: the calls after the session work.
    for (mut c, mut r) in hosts {
        c.0.stdin.take().unwrap().write_all(b"end\n").unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut r, &mut rest).unwrap();
        assert!(c.0.wait().unwrap().success(), "{rest}");
        assert_eq!(rest.matches("again ").count(), if rest.contains("child") { 2 } else { 1 }, "{rest}");
    }
    (out, err)
}

/// `daemon`: forks, and its parent exits; the child, adopted by init,
/// says "daemon PID", then on each line "work N" makes N calls of work()
/// and says the sum, until its stdin ends.
const DAEMON: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline)) long work(long x) { __asm__ volatile("" ::: "memory"); return 2 * x + 1; }
int main(void) {
    char line[32];
    if (fork() != 0) return 0;
    setsid();
    printf("daemon %d\n", getpid());
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        long n = atol(line + 5), s = 0;
        for (long i = 0; i < n; i++) s += work(i);
        printf("sum %ld\n", s);
        fflush(stdout);
    }
    return 0;
}
"#;

/// A program started during a session by path that daemonizes (its
/// parent exits, init adopts the child): the daemon's calls are counted,
/// and at the end it is found, the whole system over, and cleaned (no
/// process tree leads to it), so that it works on untouched.
#[test]
fn a_daemon_adopted_by_init_is_cleaned_at_the_end() {
    let dir = common::scratch("bypath-daemon");
    let exe = common::compile_text(&dir, "daemon", DAEMON, &["-O2"]);
    let script = format!(
        "global n probe process(\"{}\").function(\"work\") {{ n++ }} probe end {{ printf(\"%d calls\\n\", n) }}",
        exe.display()
    );
    let t = Tracer::start_on_stderr(&["-v", "-e", &script], "Pass 5: watching the processes of");
    let mut parent = Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start");
    let mut input = parent.stdin.take().unwrap();
    let mut r = std::io::BufReader::new(parent.stdout.take().unwrap());
    assert!(parent.wait().unwrap().success());
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    let pid: u32 = l.strip_prefix("daemon ").and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("{l}"));
    // Killed if the test ends early (it is init's, not ours to reap).
    struct Daemon(u32, bool);
    impl Drop for Daemon {
        fn drop(&mut self) {
            if !self.1 {
                // SAFETY: a signal to the daemon this test started.
                unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
            }
        }
    }
    let mut daemon = Daemon(pid, false);
    let mut ask = |n: u32| {
        writeln!(input, "work {n}").unwrap();
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        l
    };
    assert_eq!(ask(100), "sum 10000\n");
    let (out, err) = end(t);
    assert_eq!(out, "100 calls\n", "{err}");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    assert!(!maps.contains("memfd:telco"), "the session's memory is left in the daemon:\n{maps}");
    assert_eq!(ask(10), "sum 100\n");
    // Its stdin closed, it ends.
    drop(input);
    common::wait_gone(pid);
    daemon.1 = true;
}

/// The records of processes that ended are dropped once many pile up
/// (a program run over and over), but not that of a process whose daemon
/// still runs with its probes: the daemon is cleaned at the end with it.
#[test]
fn ended_processes_are_forgotten_but_not_a_daemon_s_parent() {
    let dir = common::scratch("bypath-prune");
    let exe = common::compile_text(&dir, "daemon", DAEMON, &["-O2"]);
    let script = format!("probe process(\"{}\").function(\"work\") {{ }}", exe.display());
    // Daemons: one running at the start (the session's first process),
    // one started later (its parent, exited, is a record of the session).
    let daemon = || {
        let mut parent = Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start");
        let input = parent.stdin.take().unwrap();
        let mut r = std::io::BufReader::new(parent.stdout.take().unwrap());
        assert!(parent.wait().unwrap().success());
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        let pid: u32 = l.strip_prefix("daemon ").and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("{l}"));
        (pid, input)
    };
    // Killed if the test ends early: the daemons (init's) and the tracer.
    struct Guard(Vec<u32>, Option<std::process::Child>);
    impl Drop for Guard {
        fn drop(&mut self) {
            for &p in &self.0 {
                // SAFETY: signals to the processes this test started.
                unsafe { libc::kill(p as i32, libc::SIGKILL) };
            }
            if let Some(t) = &mut self.1 {
                let _ = t.kill();
                let _ = t.wait();
            }
        }
    }
    let mut guard = Guard(Vec::new(), None);
    let first = daemon();
    guard.0.push(first.0);
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(["-v", "-e", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start telco-stap");
    let mut err = std::io::BufReader::new(tracer.stderr.take().unwrap());
    let tracer_pid = tracer.id();
    guard.1 = Some(tracer);
    let mut said = String::new();
    let mut wait_for = |needle: &str| loop {
        let mut l = String::new();
        assert!(err.read_line(&mut l).unwrap() > 0, "telco-stap ended before {needle:?}:\n{said}");
        said.push_str(&l);
        if l.contains(needle) {
            return l;
        }
    };
    wait_for("Pass 5: probes armed");
    let later = daemon();
    guard.0.push(later.0);
    // Each of these daemons ends at once (its stdin is empty).
    for _ in 0..70 {
        let o = Command::new(&exe).stdin(Stdio::null()).stdout(Stdio::piped()).output().expect("run");
        assert!(o.status.success());
    }
    let line = wait_for("ended process(es) forgotten");
    assert!(line.contains(", 1 kept"), "{line}");
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(tracer_pid as i32, libc::SIGINT) }, 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let mut tracer = guard.1.take().unwrap();
    assert!(tracer.wait().unwrap().success(), "{rest}");
    guard.0.clear();
    for (pid, input) in [first, later] {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
        drop(input);
        common::wait_gone(pid);
        assert!(!maps.contains("memfd:telco"), "the session's memory is left in daemon {pid}:\n{maps}");
    }
}
