//! The ptrace layer against a real process: stop every thread, run system
//! calls inside the target, read and write its memory, detach, and the
//! target carries on. The target (built with gcc) prints the address of a
//! flag and spins until the flag changes; readiness is that line on a pipe.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use telco_runtime::os::ptrace::{PtraceError, Stopped};

const TARGET: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
volatile int flag;
static void *spin(void *p) { (void)p; while (!flag) ; return 0; }
int main(void) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, spin, 0);
    printf("%p\n", (void *)&flag);
    fflush(stdout);
    while (!flag) usleep(1000);   /* the main thread sleeps in a syscall */
    for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
    printf("done %d\n", flag);
    return 0;
}
"#;

/// Kills the target if a test fails half-way, so no spinning process is
/// left behind.
struct Reap(u32);

impl Drop for Reap {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a pid we spawned; harmless if it already exited.
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}

/// This process's scratch directory (`telco-test-ptrace-PID`), removed
/// when the process exits.
fn scratch_root() -> std::path::PathBuf {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn remove_root() {
        let _ = std::fs::remove_dir_all(root());
    }
    extern "C" {
        fn atexit(f: extern "C" fn()) -> i32;
    }
    fn root() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("telco-test-ptrace-{}", std::process::id()))
    }
    // SAFETY: registers a plain function without arguments, once.
    ONCE.call_once(|| unsafe {
        atexit(remove_root);
    });
    root()
}

fn build() -> std::path::PathBuf {
    // One directory per test: tests run in parallel, and a program being
    // written cannot be executed ("text file busy").
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch_root().join(n.to_string());
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("spin.c");
    std::fs::write(&src, TARGET).expect("write spin.c");
    let exe = dir.join("spin");
    let st = Command::new("gcc").args(["-O1", "-pthread", "-o"]).arg(&exe).arg(&src).status().expect("gcc");
    assert!(st.success(), "gcc failed");
    exe
}

#[test]
fn syscalls_memory_and_detach_leave_the_target_running() {
    let exe = build();
    let mut child = Command::new(&exe).stdout(Stdio::piped()).spawn().expect("spawn target");
    let _reap = Reap(child.id());
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready line");
    let flag = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).expect("flag address");
    let pid = child.id() as i32;

    let mut s = Stopped::attach(pid).expect("attach");
    assert_eq!(s.threads().count(), 4, "main thread and three spinners");
    let tid = s.main_thread();
    // getpid() inside the target.
    assert_eq!(s.syscall(tid, libc::SYS_getpid, [0; 6]).expect("getpid"), i64::from(pid));
    // mmap a page in the target, write and read it back.
    let addr = s
        .syscall(
            tid,
            libc::SYS_mmap,
            [
                0,
                4096,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
                u64::MAX,
                0,
            ],
        )
        .expect("mmap");
    assert!(addr > 0, "mmap returned {addr}");
    s.write(addr as u64, b"telco").expect("write");
    assert_eq!(s.read(addr as u64, 5).expect("read"), b"telco");
    // A system call in a spinning thread too.
    let spinner = s.threads().find(|&t| t != tid).expect("a spinner");
    assert_eq!(s.syscall(spinner, libc::SYS_gettid, [0; 6]).expect("gettid"), i64::from(spinner));
    // Release the target: set its flag, detach.
    s.write(flag, &7i32.to_le_bytes()).expect("write flag");
    s.detach().expect("detach");

    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("rest of output");
    let status = child.wait().expect("wait");
    assert_eq!(rest, "done 7\n", "the target finished its work normally");
    assert!(status.success());
}

#[test]
fn attach_errors_are_clear() {
    match Stopped::attach(999_999_999) {
        Err(PtraceError::NoProcess(999_999_999)) => {}
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("attached to a process that does not exist"),
    }
    // A process we already trace cannot be attached twice.
    let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = child.id() as i32;
    let first = Stopped::attach(pid).expect("first attach");
    match Stopped::attach(pid) {
        Err(e @ PtraceError::AlreadyTraced { .. }) => {
            assert!(e.to_string().contains("already being traced"), "{e}")
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("attached twice"),
    }
    drop(first);
    let _ = child.kill();
    let _ = child.wait();
}

/// The artifact of a small script, compiled by the real compiler.
fn compile(text: &str) -> telco_abi::artifact::Artifact {
    telco_compiler::codegen::compile_text("inject.tp", text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_same_compiled_handler_runs_inside_the_target() {
    use telco_runtime::inject;
    let a = compile(
        r#"global n, s
probe timer.s(1) { n += 5; s = sprintf("pid %d", pid()); printf("in the target: n=%d %s %s\n", n, s, execname()) }"#,
    );
    let exe = build();
    let mut child = Command::new(&exe).stdout(Stdio::piped()).spawn().expect("spawn target");
    let _reap = Reap(child.id());
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready line");
    let flag = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).expect("flag address");
    let pid = child.id() as i32;

    let mut s = Stopped::attach(pid).expect("attach");
    let injected = inject::region(&mut s, &a, "spin", false).expect("region");
    let code = inject::code(&mut s, &a, flag, 64 << 10).expect("code");
    assert!(code.remote.abs_diff(flag) < 1 << 31, "code within reach of the module");
    // A context in scratch memory of the target, then the handler, twice.
    let tid = s.main_thread();
    let scratch = s
        .syscall(
            tid,
            libc::SYS_mmap,
            [
                0,
                4096,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
                u64::MAX,
                0,
            ],
        )
        .expect("scratch") as u64;
    for _ in 0..2 {
        s.call(tid, code.at(a.probes[0].handler), &[injected.region_remote, scratch], code.trap()).expect("call");
    }
    let local = telco_runtime::os::sys::ExecMemory::new(&a.code).expect("local code");
    let text = telco_runtime::session::drain_text(&a, &injected.region, &local).expect("drain");
    assert_eq!(
        text,
        format!("in the target: n=5 pid {pid} spin\nin the target: n=10 pid {pid} spin\n"),
        "printf events written by the target, formatted by the tracer"
    );
    s.write(flag, &1i32.to_le_bytes()).expect("release");
    s.detach().expect("detach");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("rest");
    assert_eq!(rest, "done 1\n");
    assert!(child.wait().expect("wait").success());
}

/// A remote call that never returns is stopped and undone after its
/// deadline (5 s): the tracer does not hang, the target runs on.
#[test]
fn a_remote_call_that_never_returns_is_undone() {
    let exe = build();
    let mut child = Command::new(&exe).stdout(Stdio::piped()).spawn().expect("spawn target");
    let _reap = Reap(child.id());
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready line");
    let flag = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).expect("flag address");
    let pid = child.id() as i32;
    let mut s = Stopped::attach(pid).expect("attach");
    let tid = s.main_thread();
    let page = s
        .syscall(
            tid,
            libc::SYS_mmap,
            [
                0,
                4096,
                (libc::PROT_READ | libc::PROT_EXEC) as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
                u64::MAX,
                0,
            ],
        )
        .expect("mmap") as u64;
    // `jmp .`, then the trap byte a return would reach.
    s.write(page, &[0xeb, 0xfe, 0xcc]).expect("write code");
    let before = s.regs(tid).expect("regs").rip;
    let err = s.call(tid, page, &[], page + 2).expect_err("the call never returns");
    assert!(matches!(err, telco_runtime::os::ptrace::PtraceError::TimedOut { .. }), "{err}");
    assert_eq!(s.regs(tid).expect("regs").rip, before, "the thread is back where it was");
    s.write(flag, &3i32.to_le_bytes()).expect("write flag");
    s.detach().expect("detach");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("rest of output");
    assert!(child.wait().expect("wait").success());
    assert_eq!(rest, "done 3\n");
}
