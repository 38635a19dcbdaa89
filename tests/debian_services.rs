//! Debian's own services, started by the tests on Unix sockets in their
//! scratch directories (no TCP port): nginx (a root master and three
//! workers: `-p` of the master counts every worker's accepted
//! connections; by path, the workers a reload starts are caught) and
//! redis (`--daemonize yes` under `-c`: its daemon counted whole, nothing
//! left in it after the session). `.ci/run` installs them.

mod common;
use common::Tracer;
use std::io::{BufRead, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const NGINX: &str = "/usr/sbin/nginx";
const REDIS: &str = "/usr/bin/redis-server";

/// nginx in the foreground with `workers` worker processes (root, its
/// workers keeping root's uid with `user root root`; or, as Debian's own
/// configuration has it, `user www-data`), serving "ok" on `DIR/sock`;
/// its error log is its standard error, where it says each worker it
/// starts.
struct Nginx {
    child: Child,
    log: std::io::BufReader<std::process::ChildStderr>,
    dir: PathBuf,
}

/// One nginx at a time: a session by path arms every process running
/// nginx, another test's too.
static ONE_NGINX: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Nginx {
    fn start(tag: &str, workers: u32) -> Nginx {
        Nginx::start_as(tag, workers, "root root")
    }

    /// [`Nginx::start`] with `user USER` in its configuration.
    fn start_as(tag: &str, workers: u32, user: &str) -> Nginx {
        let mut child = Command::new(NGINX);
        let dir = Nginx::configure(tag, workers, user);
        child.arg("-c").arg(dir.join("nginx.conf")).arg("-p").arg(&dir).arg("-e").arg("stderr");
        let mut child =
            child.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start nginx");
        let log = std::io::BufReader::new(child.stderr.take().expect("stderr"));
        let mut n = Nginx { child, log, dir };
        n.workers_started(workers);
        n
    }

    /// A scratch directory with its nginx.conf.
    fn configure(tag: &str, workers: u32, user: &str) -> PathBuf {
        assert!(Path::new(NGINX).exists(), "Debian's nginx is needed (.ci/run installs it)");
        let dir = common::scratch(tag);
        // Workers of another user reach the socket there.
        let _ = Command::new("chmod").arg("755").arg(&dir).status();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process on;\nworker_processes {workers};\nuser {user};\npid {d}/nginx.pid;\n\
             error_log stderr notice;\nevents {{ worker_connections 64; accept_mutex off; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
             server {{ listen unix:{d}/sock; location / {{ return 200 \"ok\\n\"; }} }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).expect("write nginx.conf");
        dir
    }

    /// Wait until the master says it started `count` more workers: their
    /// pids.
    fn workers_started(&mut self, count: u32) -> Vec<u32> {
        let mut pids = Vec::new();
        while pids.len() < count as usize {
            let mut l = String::new();
            assert!(self.log.read_line(&mut l).expect("nginx's log") > 0, "nginx ended");
            if let Some(p) = l.split("start worker process ").nth(1) {
                pids.push(p.trim().parse().expect("a worker's pid"));
            }
        }
        pids
    }

    fn master(&self) -> u32 {
        self.child.id()
    }

    /// One request on a connection of its own: nginx's answer's body.
    fn get(&self) -> String {
        get_from(&self.dir)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // A graceful stop (SIGQUIT), its workers with it.
        // SAFETY: a signal to the master this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGQUIT) };
        let _ = self.child.wait();
    }
}

/// One request to the nginx serving on `DIR/sock`: its answer's body.
fn get_from(dir: &Path) -> String {
    let mut s = UnixStream::connect(dir.join("sock")).expect("connect to nginx");
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("send");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("nginx's answer");
    answer.rsplit("\r\n\r\n").next().unwrap_or("").to_string()
}

/// Successful `accept4` calls by process, from the C library as nginx
/// loads it (an `int`: -1 is 0xffffffff in the 64-bit register, as
/// SystemTap's `returnval()` gives it too).
const ACCEPTS: &str = r#"global n
probe process("/usr/sbin/nginx").begin { printf("armed %d\n", pid()) }
probe process("/usr/sbin/nginx").library("libc.so.6").function("accept4").return { if ((returnval() & 0xffffffff) < 0x80000000) n[pid()]++ }
probe end { t = 0; foreach (p in n) t += n[p]; printf("%d accepted\n", t); foreach (p+ in n) printf("%d\n", p) }"#;

/// `armed PID` lines for `n` processes: the pids, sorted.
fn armed(t: &mut Tracer, n: usize) -> Vec<u32> {
    let mut pids: Vec<u32> = (0..n)
        .map(|_| {
            let mut l = String::new();
            t.output.read_line(&mut l).expect("telco-stap's output");
            l.trim_end().strip_prefix("armed ").and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{l:?}"))
        })
        .collect();
    pids.sort();
    pids
}

/// Wait for the `armed PID` lines of every process of `pids` (others'
/// lines pass).
fn armed_all(t: &mut Tracer, pids: &[u32]) {
    let mut left: Vec<u32> = pids.to_vec();
    while !left.is_empty() {
        let pid = armed(t, 1)[0];
        left.retain(|&p| p != pid);
    }
}

fn sigint(t: Tracer) -> String {
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGINT) }, 0);
    let (out, err, code) = t.finish();
    assert_eq!(code, Some(0), "{err}");
    out
}

/// Nothing of the session is mapped into `pid`.
fn clean(pid: u32) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    assert!(!maps.contains("memfd:telco"), "pid {pid}: the session's memory is left:\n{maps}");
}

/// `-p` of nginx's master: its three workers, already running, are
/// armed, and every connection one of them accepted is counted.
#[test]
fn p_of_nginx_s_master_counts_every_worker_s_accepts() {
    p_of_master_counts_workers("nginx-p", "root root");
}

/// `-p` of an nginx master whose workers run as `user`: each is armed
/// (in memory of its own trust domain when `user` is not root), each
/// connection counted once, nothing said, nothing left in any process.
fn p_of_master_counts_workers(tag: &str, user: &str) {
    let _one = ONE_NGINX.lock().unwrap_or_else(|e| e.into_inner());
    let mut ngx = Nginx::start_as(tag, 3, user);
    let master = ngx.master();
    let kids = std::fs::read_to_string(format!("/proc/{master}/task/{master}/children")).unwrap();
    let mut workers: Vec<u32> = kids.split_whitespace().map(|k| k.parse().unwrap()).collect();
    workers.sort();
    assert_eq!(workers.len(), 3);
    let mut t = Tracer::start(&["-e", ACCEPTS, "-p", &master.to_string()], &format!("armed {master}"));
    assert_eq!(armed(&mut t, 3), workers, "every worker armed");
    let own_domain = !user.starts_with("root");
    for w in &workers {
        let maps = std::fs::read_to_string(format!("/proc/{w}/maps")).expect("maps");
        assert_eq!(maps.contains("/memfd:telco-stap-domain"), own_domain, "worker {w}'s memory:\n{maps}");
    }
    for _ in 0..30 {
        assert_eq!(ngx.get(), "ok\n");
    }
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGINT) }, 0);
    let (out, err, code) = t.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("WARNING"), "{err}");
    let (total, who) = out.split_once('\n').unwrap();
    assert_eq!(total, "30 accepted", "{out}\n{err}");
    for p in who.lines() {
        assert!(workers.contains(&p.parse().unwrap()), "accepted by a worker: {out}");
    }
    for p in std::iter::once(master).chain(workers) {
        clean(p);
    }
    assert_eq!(ngx.get(), "ok\n", "nginx serves on");
    let _ = ngx.workers_started(0);
}

/// By path, with neither -p nor -c: the master and its workers running
/// at the start, then the three workers a reload (SIGHUP) starts, which
/// serve every request after it: all counted. Its workers run as
/// www-data (Debian's default), moved to their domain's memory as they
/// drop root.
#[test]
fn nginx_by_path_catches_the_workers_of_a_reload() {
    let _one = ONE_NGINX.lock().unwrap_or_else(|e| e.into_inner());
    // Another nginx, started first: the session's first process is its
    // master, and ours is one armed after it (whose forks are cleaned
    // with it at the end).
    let other = Nginx::start("nginx-other", 1);
    let mut ngx = Nginx::start_as("nginx-path", 3, "www-data");
    let master = ngx.master();
    let mut t = Tracer::start_on_stderr(&["-v", "-e", ACCEPTS], "Pass 5: probes armed");
    // (An nginx of the machine's own would be armed too: its lines are
    // not waited for.)
    let kids = std::fs::read_to_string(format!("/proc/{master}/task/{master}/children")).unwrap();
    let first: Vec<u32> = std::iter::once(master).chain(kids.split_whitespace().map(|k| k.parse().unwrap())).collect();
    armed_all(&mut t, &first);
    // SAFETY: a signal to the master this test started.
    assert_eq!(unsafe { libc::kill(master as i32, libc::SIGHUP) }, 0);
    let fresh = ngx.workers_started(3);
    armed_all(&mut t, &fresh);
    // The old workers close their sockets and leave: the new ones serve.
    for p in first.iter().filter(|&&p| p != master) {
        common::wait_gone(*p);
    }
    for _ in 0..20 {
        assert_eq!(ngx.get(), "ok\n");
    }
    let out: String = sigint(t).lines().filter(|l| !l.starts_with("armed ")).map(|l| format!("{l}\n")).collect();
    let (total, who) = out.split_once('\n').unwrap();
    assert_eq!(total, "20 accepted", "{out}");
    for p in who.lines() {
        assert!(fresh.contains(&p.parse().unwrap()), "accepted by a new worker: {out}");
    }
    clean(master);
    for p in fresh {
        clean(p);
    }
    clean(other.master());
}

/// `-p` of the master of Debian's default shape: a root master whose
/// workers run as www-data. The workers work in a region of their own
/// trust domain (never the master's), and every connection they accepted
/// is counted, with no warning that probes are off.
#[test]
fn p_of_nginx_s_master_counts_the_accepts_of_its_www_data_workers() {
    p_of_master_counts_workers("nginx-www", "www-data");
}

/// `-c nginx` (the foreground master, root) with www-data workers: each
/// worker is moved to its domain's region when it drops its privileges,
/// goes on being traced there, and every accept is counted.
#[test]
fn c_nginx_counts_its_www_data_workers_accepts() {
    let _one = ONE_NGINX.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Nginx::configure("nginx-c-www", 3, "www-data");
    // Through a shell that gives it no descriptor of the tracer's (nginx
    // outlives the session, and would hold its pipes open).
    let cmd = format!(
        "/bin/sh -c 'exec {NGINX} -c {}/nginx.conf -p {} -e /dev/null </dev/null >/dev/null 2>&1'",
        dir.display(),
        dir.display()
    );
    let (mut t, first) = Tracer::start_first(&["-e", ACCEPTS, "-c", &cmd]);
    assert!(first.starts_with("armed "), "{first}");
    // The tracer says each worker it moves to its domain's region (its
    // error output, read here until then).
    let mut err_lines = std::io::BufReader::new(t.child.stderr.take().expect("stderr"));
    let mut said = String::new();
    let mut workers: Vec<u32> = Vec::new();
    while workers.len() < 3 {
        let mut l = String::new();
        if err_lines.read_line(&mut l).expect("telco-stap's errors") == 0 {
            panic!("telco-stap ended:\n{said}");
        }
        if l.contains("its probes go on in memory of their own (the domain of uid 33 (www-data))") {
            let pid = l.strip_prefix("WARNING: pid ").and_then(|r| r.split(' ').next()).expect("a pid");
            workers.push(pid.parse().expect("a worker's pid"));
        }
        said.push_str(&l);
    }
    let get = || get_from(&dir);
    for _ in 0..30 {
        assert_eq!(get(), "ok\n");
    }
    let master = std::fs::read_to_string(dir.join("nginx.pid")).expect("nginx.pid").trim().parse::<i32>().unwrap();
    // SAFETY: a signal to our own child process, then to the nginx it runs.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGINT) }, 0);
    let mut rest_err = String::new();
    err_lines.read_to_string(&mut rest_err).expect("telco-stap's errors");
    let (out, _, code) = t.finish();
    let err = said + &rest_err;
    // SAFETY: the nginx this test started (it may have ended with the session).
    unsafe { libc::kill(master, libc::SIGQUIT) };
    common::wait_gone(master as u32);
    let _ = std::fs::remove_dir_all(&dir);
    assert_ne!(code, None, "{err}");
    let rest: Vec<&str> = out.lines().filter(|l| !l.starts_with("armed ")).collect();
    assert_eq!(rest.first().copied(), Some("30 accepted"), "{out}\n{err}");
    for p in &rest[1..] {
        assert!(workers.contains(&p.parse().unwrap()), "accepted by a worker: {out}");
    }
    assert!(!err.contains("probes are off") && !err.contains("ERROR"), "{err}");
}

/// A RESP client on redis's Unix socket.
fn redis(sock: &Path, command: &str) -> String {
    let mut s = UnixStream::connect(sock).expect("connect to redis");
    s.write_all(format!("{command}\r\n").as_bytes()).expect("send");
    let mut r = std::io::BufReader::new(s);
    let mut l = String::new();
    r.read_line(&mut l).expect("redis's answer");
    l
}

/// `-c 'redis-server --daemonize yes'`: the command exits at once, its
/// daemon serves on; the session follows the daemon, counts each of its
/// commands, and after SIGINT leaves nothing in it; then it serves on.
#[test]
fn a_daemonized_redis_is_counted_whole_and_left_clean() {
    assert!(Path::new(REDIS).exists(), "Debian's redis-server is needed (.ci/run installs it)");
    let dir = common::scratch("redis");
    let sock = dir.join("sock");
    let cmd = format!(
        "{REDIS} --daemonize yes --port 0 --unixsocket {} --dir {} --pidfile {} --save '' --appendonly no \
         --logfile {}",
        sock.display(),
        dir.display(),
        dir.join("redis.pid").display(),
        dir.join("redis.log").display()
    );
    // aeMain: the daemon listens and serves from here on.
    let script = r#"global n
probe process("/usr/bin/redis-server").function("aeMain") { printf("serving %d\n", pid()) }
probe process("/usr/bin/redis-server").function("processCommand") { n[pid()]++ }
probe end { foreach (p in n) printf("%d commands in %d\n", n[p], p) }"#;
    let (t, l) = Tracer::start_first(&["-e", script, "-c", &cmd]);
    let daemon: u32 = l.trim_end().strip_prefix("serving ").and_then(|p| p.parse().ok()).expect("serving PID");
    for k in 0..7 {
        assert_eq!(redis(&sock, &format!("SET k{k} {k}")), "+OK\r\n");
    }
    assert_eq!(redis(&sock, "PING"), "+PONG\r\n");
    let out = sigint(t);
    assert_eq!(out, format!("8 commands in {daemon}\n"));
    clean(daemon);
    assert_eq!(redis(&sock, "GET k3"), "$1\r\n", "redis serves on");
    // SHUTDOWN closes the connection without an answer.
    let mut s = UnixStream::connect(&sock).expect("connect to redis");
    s.write_all(b"SHUTDOWN NOSAVE\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    common::wait_gone(daemon);
}
