//! Services: a master and the workers it forked before the session came
//! (tests/programs/service.c). `-p` of the master covers them all, `-p`
//! may be repeated, and the end leaves nothing in any of them. Readiness
//! is a line on a pipe: the script's `process.begin` says `armed PID` in
//! each process it arms.

mod common;
use common::{Running, Tracer};
use std::path::{Path, PathBuf};

/// tests/programs/service.c, built once for every test of this file.
fn service() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let exe = common::scratch("service").join("service");
        common::gcc("service.c", &exe, &[]);
        exe
    })
    .clone()
}

fn script(exe: &Path) -> String {
    format!(
        r#"global n
probe process.begin {{ printf("armed %d\n", pid()) }}
probe process("{}").function("work") {{ n[pid()]++ }}
probe end {{ t = 0; c = 0; foreach (p in n) {{ c++; t += n[p] }} printf("%d processes, %d calls\n", c, t) }}"#,
        exe.display()
    )
}

/// The processes of a running service: the master, then its children.
fn processes(master: u32) -> Vec<u32> {
    let kids = std::fs::read_to_string(format!("/proc/{master}/task/{master}/children")).unwrap_or_default();
    std::iter::once(master).chain(kids.split_whitespace().filter_map(|k| k.parse().ok())).collect()
}

/// `armed PID` lines for `n` processes, in any order: the pids.
fn armed(t: &mut Tracer, n: usize) -> Vec<u32> {
    use std::io::BufRead;
    let mut pids = Vec::new();
    for _ in 0..n {
        let mut l = String::new();
        t.output.read_line(&mut l).expect("telco-stap's output");
        let pid = l.trim_end().strip_prefix("armed ").and_then(|p| p.parse().ok());
        pids.push(pid.unwrap_or_else(|| panic!("not an armed line: {l:?}")));
    }
    pids.sort();
    pids
}

/// The bytes of `work` in the file, and where `nm` says it is.
fn work_in_file(exe: &Path) -> (u64, Vec<u8>) {
    let o = std::process::Command::new("nm").arg(exe).output().expect("nm runs");
    let text = String::from_utf8_lossy(&o.stdout);
    let addr = text
        .lines()
        .find_map(|l| l.strip_suffix(" T work").and_then(|a| u64::from_str_radix(a, 16).ok()))
        .expect("work in nm's output");
    let bytes = std::fs::read(exe).expect("read the program");
    // A PIE's text is at the same offset in the file as in its link-time
    // addresses (gcc's layout): checked against the maps below.
    (addr, bytes[addr as usize..addr as usize + 16].to_vec())
}

/// `work`'s first bytes in process `pid`, and its maps.
fn work_in_process(pid: u32, exe: &Path, addr: u64) -> (Vec<u8>, String) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let exe = exe.to_string_lossy();
    let (start, offset) = maps
        .lines()
        .filter(|l| l.ends_with(exe.as_ref()))
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (lo, hi) = f[0].split_once('-')?;
            let (lo, hi) = (u64::from_str_radix(lo, 16).ok()?, u64::from_str_radix(hi, 16).ok()?);
            let off = u64::from_str_radix(f[2], 16).ok()?;
            (addr >= off && addr - off < hi - lo).then_some((lo, off))
        })
        .expect("work's mapping");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open mem");
    let mut b = vec![0u8; 16];
    std::os::unix::fs::FileExt::read_exact_at(&mem, &mut b, start + (addr - offset)).expect("read mem");
    (b, maps)
}

/// `-p` of the master: the three workers it forked before the session
/// are armed too, and every call of every process is counted.
#[test]
fn p_of_a_master_covers_the_workers_it_already_has() {
    let exe = service();
    let mut svc = Running::start(&exe, &["3"]);
    let master = svc.pid();
    let all = processes(master);
    assert_eq!(all.len(), 4, "a master and 3 workers: {all:?}");
    let mut t = Tracer::start(&["-e", &script(&exe), "-p", &master.to_string()], &format!("armed {master}"));
    let mut workers = armed(&mut t, 3);
    workers.insert(0, master);
    workers.sort();
    let mut expect = all.clone();
    expect.sort();
    assert_eq!(workers, expect, "every process of the service armed once");
    svc.say("go");
    assert_eq!(svc.line(), "worked 4000000\n");
    svc.say("end");
    let (rest, status) = svc.finish();
    assert!(status.success() && rest.is_empty(), "{rest}");
    // The master ended: so does the session.
    let (out, err, code) = t.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "4 processes, 4000 calls\n", "{err}");
}

/// Ended by SIGINT while the service runs on: in the master and in every
/// worker, `work`'s bytes are the file's again and the maps are what they
/// were before the session (nothing of it is mapped); the service then
/// works on, right.
#[test]
fn the_end_leaves_nothing_in_any_process_of_the_service() {
    let exe = service();
    let (addr, original) = work_in_file(&exe);
    let mut svc = Running::start(&exe, &["3", "stay"]);
    let master = svc.pid();
    let all = processes(master);
    let before: Vec<String> = all.iter().map(|&p| work_in_process(p, &exe, addr).1).collect();
    for (&p, maps) in all.iter().zip(&before) {
        assert!(!maps.contains("memfd:telco"), "pid {p}: ours before the session?");
    }
    let mut t = Tracer::start(&["-e", &script(&exe), "-p", &master.to_string()], &format!("armed {master}"));
    armed(&mut t, 3);
    for &p in &all {
        let (now, maps) = work_in_process(p, &exe, addr);
        assert_ne!(now, original, "pid {p}: work is patched while the session runs");
        assert!(maps.contains("/memfd:telco-stap"), "pid {p}: the session's region is mapped");
    }
    svc.say("go");
    assert_eq!(svc.line(), "worked 4000000\n");
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGINT) }, 0);
    let (out, err, code) = t.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "4 processes, 4000 calls\n", "{err}");
    for (&p, was) in all.iter().zip(&before) {
        let (now, maps) = work_in_process(p, &exe, addr);
        assert_eq!(now, original, "pid {p}: work's bytes are the file's again");
        assert_eq!(&maps, was, "pid {p}: the maps are not what they were before the session");
    }
    svc.say("go");
    assert_eq!(svc.line(), "worked 4000000\n", "the service works on");
    svc.say("end");
    let (_, status) = svc.finish();
    assert!(status.success());
}

/// `-p A -p B`: two services (a master and one worker each), all four
/// processes counted; the session goes on until both have ended.
#[test]
fn p_may_be_repeated() {
    let exe = service();
    let mut a = Running::start(&exe, &["1"]);
    let mut b = Running::start(&exe, &["1"]);
    let (pa, pb) = (a.pid(), b.pid());
    let mut t =
        Tracer::start(&["-e", &script(&exe), "-p", &pa.to_string(), "-p", &pb.to_string()], &format!("armed {pa}"));
    let mut pids = armed(&mut t, 3);
    pids.push(pa);
    pids.sort();
    let mut expect: Vec<u32> = processes(pa).into_iter().chain(processes(pb)).collect();
    expect.sort();
    assert_eq!(pids, expect);
    a.say("go");
    assert_eq!(a.line(), "worked 2000000\n");
    a.say("end");
    assert!(a.finish().1.success());
    // A has ended; B runs, and its calls still count.
    b.say("go");
    assert_eq!(b.line(), "worked 2000000\n");
    b.say("end");
    assert!(b.finish().1.success());
    let (out, err, code) = t.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "4 processes, 4000 calls\n", "{err}");
}

/// A probe on a program no traced process runs (another program's path)
/// is said at the end, naming it; the session's status is still 0.
#[test]
fn a_probe_point_whose_module_no_process_mapped_is_said() {
    let exe = service();
    let other = common::scratch("service").join("other");
    common::gcc("probed.c", &other, &[]);
    let script = format!(
        r#"global n
probe process("{}").function("work") {{ n++ }}
probe process("{}").function("work") {{ n++ }}
probe end {{ printf("%d\n", n) }}"#,
        exe.display(),
        other.display()
    );
    let mut svc = Running::start(&exe, &["1"]);
    let master = svc.pid();
    let mut t = Tracer::start(
        &[
            "-e",
            &format!("probe process.begin {{ printf(\"armed %d\\n\", pid()) }} {script}"),
            "-p",
            &master.to_string(),
        ],
        &format!("armed {master}"),
    );
    armed(&mut t, 1);
    svc.say("go");
    assert_eq!(svc.line(), "worked 2000000\n");
    svc.say("end");
    assert!(svc.finish().1.success());
    let (out, err, code) = t.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "2000\n");
    assert_eq!(
        err,
        format!(
            "WARNING: process(\"{0}\").function(\"work\"): no traced process mapped {0}, so it never fired\n",
            other.display()
        )
    );
}

/// telco-stap `-c 'service daemon'` with pipes on its stdin and stdout
/// (the command and its daemon inherit them).
struct DaemonSession {
    child: std::process::Child,
    input: Option<std::process::ChildStdin>,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl DaemonSession {
    fn start(exe: &Path) -> DaemonSession {
        use std::process::{Command, Stdio};
        let script = format!(
            r#"global n
probe process("{}").function("work") {{ n++ }}
probe end {{ printf("%d calls\n", n) }}"#,
            exe.display()
        );
        let cmd = format!("{} daemon", exe.display());
        let mut child = Command::new(env!("CARGO_BIN_EXE_telco-stap"))
            .args(["-e", &script, "-c", &cmd])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start telco-stap");
        let input = child.stdin.take();
        let output = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        DaemonSession { child, input, output }
    }

    fn line(&mut self) -> String {
        use std::io::BufRead;
        let mut l = String::new();
        self.output.read_line(&mut l).expect("read");
        l
    }

    fn say(&mut self, l: &str) {
        use std::io::Write;
        writeln!(self.input.as_mut().expect("stdin"), "{l}").expect("write");
    }

    /// The pid after `word` on the next line.
    fn pid(&mut self, word: &str) -> u32 {
        let l = self.line();
        let rest = l.strip_prefix(word).unwrap_or_else(|| panic!("not `{word} PID`: {l:?}"));
        rest.split_whitespace().next().and_then(|p| p.parse().ok()).expect("a pid")
    }
}

impl Drop for DaemonSession {
    fn drop(&mut self) {
        // The daemon ends at the end of its input.
        drop(self.input.take());
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// `-c` of a command that starts a daemon and exits: the session goes on
/// while the daemon runs, its calls are counted, and it ends when the
/// daemon does, with the command's status.
#[test]
fn a_command_s_daemon_keeps_the_session_going() {
    let exe = service();
    let mut t = DaemonSession::start(&exe);
    let command = t.pid("command ");
    let daemon = t.pid("daemon ");
    assert_ne!(command, daemon);
    // The command has ended: the session runs on for its daemon.
    common::wait_gone(command);
    t.say("go");
    assert_eq!(t.line(), "worked 1000000\n");
    assert!(matches!(t.child.try_wait(), Ok(None)), "the session ended with the command");
    t.say("go");
    assert_eq!(t.line(), "worked 1000000\n");
    // Its input ends: the daemon exits, and so does the session.
    drop(t.input.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut t.output, &mut rest).expect("read");
    assert_eq!(rest, "3000 calls\n");
    let status = t.child.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
}

/// Ended by SIGINT while the daemon runs on: the daemon keeps running,
/// with `work`'s bytes the file's again and nothing of the session mapped.
#[test]
fn the_end_leaves_nothing_in_a_daemon() {
    let exe = service();
    let (addr, original) = work_in_file(&exe);
    let mut t = DaemonSession::start(&exe);
    let command = t.pid("command ");
    let daemon = t.pid("daemon ");
    common::wait_gone(command);
    t.say("go");
    assert_eq!(t.line(), "worked 1000000\n");
    let (now, maps) = work_in_process(daemon, &exe, addr);
    assert_ne!(now, original, "work is patched in the daemon");
    assert!(maps.contains("/memfd:telco-stap"));
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGINT) }, 0);
    // (The daemon holds the output pipe open: a line, not the end.)
    assert_eq!(t.line(), "2000 calls\n");
    assert_eq!(t.child.wait().expect("wait").code(), Some(0));
    let (now, maps) = work_in_process(daemon, &exe, addr);
    assert_eq!(now, original, "work's bytes are the file's again");
    assert!(!maps.contains("memfd:telco"), "the session's memory stays in the daemon:\n{maps}");
    // It works on, untraced.
    t.say("go");
    // (Its output pipe is telco-stap's stdout, which the test still reads.)
    assert_eq!(t.line(), "worked 1000000\n");
    drop(t.input.take());
    common::wait_gone(daemon);
}

/// Debian's PostgreSQL 15: `-p` of the postmaster arms its backends and
/// background processes already running; each backend's queries are
/// counted exactly (`pg_parse_query`, once a simple query, and the
/// `query__plan__done` marker, where only a trap fits), and after SIGINT
/// the backends hold nothing of the session and serve on.
#[test]
fn p_of_a_postmaster_counts_every_backend_s_queries() {
    use std::io::{BufRead, Write};
    use std::process::{Command, Stdio};
    const BIN: &str = "/usr/lib/postgresql/15/bin";
    assert!(Path::new(BIN).join("postgres").exists(), "Debian's postgresql-15 is needed (.ci/run installs it)");
    let dir = common::scratch("postgres");
    let chown = |p: &Path| {
        let ok = Command::new("chown").args(["-R", "postgres"]).arg(p).status().expect("chown").success();
        assert!(ok, "chown {}", p.display());
    };
    chown(&dir);
    let data = dir.join("data");
    let init = Command::new("runuser")
        .args(["-u", "postgres", "--", &format!("{BIN}/initdb"), "-A", "trust", "--no-sync", "-U", "postgres", "-D"])
        .arg(&data)
        .output()
        .expect("initdb");
    assert!(init.status.success(), "initdb: {}", String::from_utf8_lossy(&init.stderr));
    // A Unix socket in the scratch directory, no TCP port; no autovacuum
    // workers coming and going.
    let mut pg = Command::new("runuser")
        .args(["-u", "postgres", "--", &format!("{BIN}/postgres"), "-D"])
        .arg(&data)
        .arg("-k")
        .arg(&dir)
        .args(["-c", "listen_addresses=", "-c", "fsync=off", "-c", "autovacuum=off"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start postgres");
    let mut log = std::io::BufReader::new(pg.stderr.take().expect("stderr"));
    loop {
        let mut l = String::new();
        assert!(log.read_line(&mut l).expect("postgres's log") > 0, "postgres ended before it was ready");
        if l.contains("ready to accept connections") {
            break;
        }
    }
    let pid_file = std::fs::read_to_string(data.join("postmaster.pid")).expect("postmaster.pid");
    let postmaster: u32 = pid_file.lines().next().and_then(|l| l.trim().parse().ok()).expect("the postmaster's pid");
    struct Psql {
        child: std::process::Child,
        backend: u32,
    }
    let query = |p: &mut Psql, q: &str| -> String {
        writeln!(p.child.stdin.as_mut().expect("stdin"), "{q}").expect("write to psql");
        let mut l = String::new();
        std::io::BufReader::new(p.child.stdout.as_mut().expect("stdout")).read_line(&mut l).expect("psql's answer");
        l
    };
    let mut sessions: Vec<Psql> = (0..3)
        .map(|_| {
            let child = Command::new("psql")
                .arg("-h")
                .arg(&dir)
                .args(["-U", "postgres", "-d", "postgres", "-A", "-t", "-q"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("psql");
            let mut p = Psql { child, backend: 0 };
            p.backend = query(&mut p, "select pg_backend_pid();").trim().parse().expect("a backend pid");
            p
        })
        .collect();
    let children = processes(postmaster).len() - 1;
    let script = format!(
        r#"global n, d
probe process.begin {{ printf("armed %d\n", pid()) }}
probe process("{BIN}/postgres").function("pg_parse_query") {{ n[pid()]++ }}
probe process("{BIN}/postgres").mark("query__plan__done") {{ d[pid()]++ }}
probe end {{ foreach (p+ in n) printf("%d %d %d\n", p, n[p], d[p]) }}"#
    );
    let mut t = Tracer::start(&["-e", &script, "-p", &postmaster.to_string()], &format!("armed {postmaster}"));
    let armed_pids = armed(&mut t, children);
    for s in &sessions {
        assert!(armed_pids.contains(&s.backend), "backend {} armed: {armed_pids:?}", s.backend);
    }
    for (k, s) in sessions.iter_mut().enumerate() {
        for _ in 0..3 + 2 * k {
            assert_eq!(query(s, "select 1;"), "1\n");
        }
    }
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGINT) }, 0);
    let (out, err, code) = t.finish();
    assert_eq!(code, Some(0), "{err}");
    let expect: String = sessions
        .iter()
        .enumerate()
        .map(|(k, s)| (s.backend, 3 + 2 * k))
        .collect::<std::collections::BTreeMap<u32, usize>>()
        .iter()
        .map(|(b, n)| format!("{b} {n} {n}\n"))
        .collect();
    assert_eq!(out, expect, "{err}");
    // query__plan__done's site has no room for a jump: a trap, hit by every
    // query (3 + 5 + 7).
    assert!(err.contains("WARNING: 1 probe point(s) placed with a trap where no jump fits"), "{err}");
    assert!(err.contains("): 15 hit(s)"), "{err}");
    for s in sessions.iter_mut() {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", s.backend)).expect("maps");
        assert!(!maps.contains("memfd:telco"), "backend {}: the session's memory is left", s.backend);
        assert_eq!(query(s, "select 2;"), "2\n", "the backend serves on");
        drop(s.child.stdin.take());
        assert!(s.child.wait().expect("psql").success());
    }
    let maps = std::fs::read_to_string(format!("/proc/{postmaster}/maps")).expect("maps");
    assert!(!maps.contains("memfd:telco"), "the postmaster's maps");
    // A fast shutdown.
    // SAFETY: a signal to a process this test started.
    assert_eq!(unsafe { libc::kill(postmaster as i32, libc::SIGINT) }, 0);
    assert!(pg.wait().expect("postgres").success());
}
