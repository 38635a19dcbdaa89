//! Helpers shared by the data-driven corpora (parse and sem).
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `.tp` files of a directory, sorted.
pub fn tp_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "tp"))
        .collect();
    v.sort();
    v
}

/// Script arguments from a first line `# args: A B ...`.
pub fn args_of(text: &str) -> Vec<String> {
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("# args:"))
        .map(|a| a.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Compare with the expected file, or write it under `BLESS=1`. Returns a
/// failure message.
pub fn check_file(path: &Path, actual: &str) -> Option<String> {
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, actual).expect("write expected file");
        return None;
    }
    match std::fs::read_to_string(path) {
        Ok(expected) if expected == actual => None,
        Ok(expected) => Some(format!(
            "{} differs (BLESS=1 to update)\n--- expected\n{expected}\n--- actual\n{actual}",
            path.display()
        )),
        Err(_) => Some(format!("{} is missing (BLESS=1 creates it); actual:\n{actual}", path.display())),
    }
}

pub fn name_of(f: &Path) -> String {
    f.file_name().and_then(|n| n.to_str()).expect("utf-8 name").to_string()
}

/// A scratch directory for this test binary's run: `TAG` under one
/// directory per process (`telco-test-PID` in the system's temporary
/// directory), which is removed when the process exits, whatever the
/// tests' outcome: nothing is left behind.
pub fn scratch(tag: &str) -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let root = ROOT.get_or_init(|| {
        extern "C" fn remove_root() {
            let root = std::env::temp_dir().join(format!("telco-test-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(root);
        }
        extern "C" {
            fn atexit(f: extern "C" fn()) -> i32;
        }
        // SAFETY: registers a plain function without arguments, once.
        unsafe { atexit(remove_root) };
        std::env::temp_dir().join(format!("telco-test-{}", std::process::id()))
    });
    let d = root.join(tag);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Compile a target program from `srcs` into `exe` with `flags` (gcc; g++
/// when a source is C++). Panics with the compiler's messages on failure.
pub fn compile(srcs: &[&Path], exe: &Path, flags: &[&str]) {
    let cxx = srcs.iter().any(|s| s.extension().is_some_and(|e| e == "cc" || e == "cpp"));
    // Flags after the sources: libraries (`-lwork`) then link in order.
    let o = std::process::Command::new(if cxx { "g++" } else { "gcc" })
        .arg("-o")
        .arg(exe)
        .args(srcs)
        .args(flags)
        .output()
        .expect("the C compiler runs");
    assert!(o.status.success(), "compiling {srcs:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
}

/// Write `text` to `dir/NAME.c` and compile it into `dir/NAME`.
pub fn compile_text(dir: &Path, name: &str, text: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, text).expect("write the program's source");
    let exe = dir.join(name);
    compile(&[&src], &exe, flags);
    exe
}

/// Build `tests/programs/SRC` with `gcc -O2 -pthread FLAGS` into `exe`.
pub fn gcc(src: &str, exe: &Path, flags: &[&str]) {
    let mut all = vec!["-O2", "-pthread"];
    all.extend_from_slice(flags);
    compile(&[&repo().join("tests/programs").join(src)], exe, &all);
}

/// A target program running with pipes on its stdin and stdout, started
/// by [`Running::start`] once its first line (its readiness) has come;
/// killed and reaped when dropped.
pub struct Running {
    pub child: std::process::Child,
    pub input: Option<std::process::ChildStdin>,
    pub output: std::io::BufReader<std::process::ChildStdout>,
    /// The first line it printed.
    pub ready: String,
}

impl Running {
    pub fn start(exe: &Path, args: &[&str]) -> Running {
        Running::start_with_env(exe, args, &[])
    }

    /// [`Running::start`] with these environment variables set.
    pub fn start_with_env(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Running {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = std::process::Command::new(exe)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the target");
        let input = child.stdin.take().expect("stdin");
        let mut output = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut ready = String::new();
        output.read_line(&mut ready).expect("the target's ready line");
        Running { child, input: Some(input), output, ready }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Write a line to its stdin.
    pub fn say(&mut self, line: &str) {
        use std::io::Write;
        writeln!(self.input.as_mut().expect("stdin is open"), "{line}").expect("write to the target");
    }

    /// Its next line of output.
    pub fn line(&mut self) -> String {
        use std::io::BufRead;
        let mut l = String::new();
        self.output.read_line(&mut l).expect("read from the target");
        l
    }

    /// Close its stdin, then the rest of its output and its exit status.
    pub fn finish(mut self) -> (String, std::process::ExitStatus) {
        use std::io::Read;
        drop(self.input.take());
        let mut rest = String::new();
        self.output.read_to_string(&mut rest).expect("read the target's output");
        (rest, self.child.wait().expect("wait for the target"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// telco-stap running in the background with `args`, started by
/// [`Tracer::start`] once its first line of output (`first`, usually the
/// script's `armed` from a begin probe) has come; killed and reaped when
/// dropped unfinished.
pub struct Tracer {
    pub child: std::process::Child,
    pub output: std::io::BufReader<std::process::ChildStdout>,
    /// [`Tracer::start_on_stderr`]: what it said up to the line waited
    /// for, and the reader of the rest.
    err: Option<(String, std::thread::JoinHandle<String>)>,
}

impl Tracer {
    /// telco-stap started with `args`, its output and error output piped.
    fn spawn(args: &[&str]) -> (std::process::Child, std::io::BufReader<std::process::ChildStdout>) {
        use std::process::Stdio;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start telco-stap");
        let output = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        (child, output)
    }

    pub fn start(args: &[&str], first: &str) -> Tracer {
        use std::io::Read;
        let (mut t, line) = Tracer::start_first(args);
        if line.trim_end() != first {
            let mut err = String::new();
            let _ = t.child.kill();
            if let Some(mut e) = t.child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let _ = t.child.wait();
            panic!("telco-stap said {line:?}, not {first:?}:\n{err}");
        }
        t
    }

    /// Start telco-stap and wait for its first line of output, whatever
    /// it is: the tracer and that line.
    pub fn start_first(args: &[&str]) -> (Tracer, String) {
        use std::io::BufRead;
        let (child, mut output) = Tracer::spawn(args);
        let mut line = String::new();
        output.read_line(&mut line).expect("telco-stap's first line");
        (Tracer { child, output, err: None }, line)
    }

    /// Start telco-stap and wait for a line of its error output that
    /// contains `needle` (`-v`'s "Pass 5: ..." lines).
    pub fn start_on_stderr(args: &[&str], needle: &str) -> Tracer {
        use std::io::{BufRead, Read};
        let (mut child, output) = Tracer::spawn(args);
        let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr"));
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("telco-stap ended before saying {needle:?}:\n{said}");
            }
            said.push_str(&line);
            if line.contains(needle) {
                break;
            }
        }
        let rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Tracer { child, output, err: Some((said, rest)) }
    }

    /// The rest of its output, its error output and exit code.
    pub fn finish(mut self) -> (String, String, Option<i32>) {
        use std::io::Read;
        let mut out = String::new();
        self.output.read_to_string(&mut out).expect("read telco-stap's output");
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        if let Some((said, rest)) = self.err.take() {
            err = said + &rest.join().unwrap_or_default();
        }
        let code = self.child.wait().expect("wait for telco-stap").code();
        (out, err, code)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// telco-stap started with `args`, whose `-c` command is
/// tests/programs/spans.c's `forever`, once the program has said "ready"
/// and "busy" (10,000 calls made): the tracer, and the rest of its
/// output.
pub fn tracer_when_busy(
    args: &[&str],
) -> (std::process::Child, std::io::Lines<std::io::BufReader<std::process::ChildStdout>>) {
    use std::io::BufRead;
    use std::process::Stdio;
    let mut tracer = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = std::io::BufReader::new(tracer.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("busy"));
    (tracer, lines)
}

/// Run telco-stap: (stdout, stderr, exit code).
pub fn telco_run(args: &[&str]) -> (String, String, Option<i32>) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap")).args(args).output().expect("run telco-stap");
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned(), o.status.code())
}

/// Run telco-stap with `args` under `timeout -s KILL SECS` (a hang is a
/// failure, not a stuck test), stdin empty: its whole output.
pub fn telco_bounded(args: &[&str], secs: u32) -> std::process::Output {
    std::process::Command::new("timeout")
        .args(["-s", "KILL", &secs.to_string()])
        .arg(env!("CARGO_BIN_EXE_telco-stap"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run telco-stap under timeout")
}

/// Run telco-stap in directory `dir`: (stdout, stderr, exit code).
pub fn telco_in(dir: &Path, args: &[&str]) -> (String, String, Option<i32>) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run telco-stap");
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned(), o.status.code())
}

/// The real viewer's check (Perfetto's trace processor, the engine of
/// ui.perfetto.dev), where installed (`tests/chrome/install.sh`): it must
/// accept the file (Chrome JSON or Perfetto protobuf); its summary
/// (`tests/chrome/chrome_check.py`).
pub fn viewer_check(path: &Path) -> Option<serde_json::Value> {
    let script = repo().join("tests/chrome/check.sh");
    if !script.exists() {
        return None;
    }
    let o = std::process::Command::new(&script).arg(path).output().expect("check runs");
    if o.status.code() == Some(77) {
        return None; // not installed
    }
    assert!(
        o.status.success(),
        "the viewer rejected {}: {}{}",
        path.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(serde_json::from_slice(&o.stdout).expect("the checker prints JSON"))
}

/// `openssl s_server` on a Unix socket in `dir` (`tls.sock`, named
/// relative to `dir`, its working directory: s_server fails on socket
/// paths longer than about 32 bytes; with a fresh self-signed key and
/// certificate there), serving one connection (`-naccept 1`) then
/// exiting; `extra` adds options (`-www`: answer a GET with a status
/// page). Returned once it listens (its `ACCEPT` line); its stdin stays
/// open (at its end s_server would stop).
#[allow(dead_code)]
pub fn tls_server(dir: &Path, extra: &[&str]) -> Running {
    let (key, cert, sock) = (dir.join("key.pem"), dir.join("cert.pem"), dir.join("tls.sock"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-subj", "/CN=localhost", "-days", "1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run openssl req");
    assert!(made.success(), "openssl req: {made:?}");
    let _ = std::fs::remove_file(&sock);
    let mut args = vec!["s_server", "-unix", "tls.sock", "-cert", "cert.pem", "-key", "key.pem", "-naccept", "1"];
    args.extend_from_slice(extra);
    let mut child = std::process::Command::new("openssl")
        .args(&args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start openssl s_server");
    let input = child.stdin.take().expect("stdin");
    let output = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut srv = Running { child, input: Some(input), output, ready: String::new() };
    let mut line = srv.line();
    while !line.starts_with("ACCEPT") {
        line = srv.line();
        assert!(!line.is_empty(), "openssl s_server ended before listening");
    }
    srv
}

/// Run telco-stap in `dir` with `input` on its standard input (which the
/// command of `-c` inherits): its whole output.
#[allow(dead_code)]
pub fn telco_with_input(dir: &Path, args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut t = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start telco-stap");
    t.stdin.take().expect("stdin").write_all(input).expect("telco-stap's input");
    t.wait_with_output().expect("wait for telco-stap")
}

/// Wait until process `pid` has ended (a pidfd: no polling).
pub fn wait_gone(pid: u32) {
    // SAFETY: pidfd_open and poll on a descriptor we own.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) as libc::c_int;
        if fd < 0 {
            return; // Gone (and reaped) already.
        }
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        assert_eq!(libc::poll(&mut p, 1, 60_000), 1, "pid {pid} did not end");
        libc::close(fd);
    }
}

/// [`viewer_check`]'s summary of `path`; the test fails if the viewer
/// rejects the file, or is not installed (the README's test command
/// installs it: tests/chrome/install.sh).
pub fn viewer(path: &Path) -> serde_json::Value {
    viewer_check(path).unwrap_or_else(|| panic!("the Perfetto check is not installed: run tests/chrome/install.sh"))
}

/// Per thread of a viewer's summary (by tid, in order), its slices per
/// `name@depth`.
pub fn depths(report: &serde_json::Value) -> Vec<std::collections::BTreeMap<String, u64>> {
    report["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| {
            t["depth_counts"]
                .as_object()
                .expect("depth counts")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
                .collect()
        })
        .collect()
}

/// Process `pid`'s resident size now, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok()).unwrap_or(0)
}
