//! The ptrace layer against a real process: stop every thread, run system
//! calls inside the target, read and write its memory, detach, and the
//! target carries on. The target (built with gcc) prints the address of a
//! flag and spins until the flag changes; readiness is that line on a pipe.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use telco_runtime::ptrace::{PtraceError, Stopped};

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

fn build() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("telco-ptrace-{}", std::process::id()));
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
