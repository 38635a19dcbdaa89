//! The tapsets on real programs: tapsets/libc.tp's process, socket, file
//! and library probes on tests/programs/libcalls.c (a TCP connection to
//! itself on loopback, a child that runs /bin/true, dlopen), with their
//! named arguments and `.return` variants.

mod common;
use common::telco_run as telco;

#[test]
fn libc_tapset_sees_files_sockets_processes_and_libraries() {
    let d = common::scratch("tapset-libc");
    let exe = d.join("libcalls");
    common::gcc("libcalls.c", &exe, &["-ldl"]);
    // Events of the command itself, in order, and of its child (where the
    // fork returns too, then /bin/true runs and exits).
    let script = r#"global n
probe libc.close, libc.connect, libc.accept, libc.send, libc.recv, libc.fork, libc.dlopen, libc.execve, libc.exit {
    n[name, pid() == target()]++
}
probe libc.connect { if (pid() == target()) printf("connect to a port: %d\n", port > 0) }
probe libc.accept.return { printf("accept: %d\n", newfd > fd) }
probe libc.send { printf("send %d bytes: %s\n", len, user_string_n(buf, len)) }
probe libc.recv.return { printf("recv %d bytes: %s\n", bytes, user_string_n(buf, bytes)) }
probe libc.fork.return { if (pid() == target()) printf("fork: a child %d\n", child > 0) }
probe libc.dlopen.return { printf("dlopen %s: %d\n", filename, handle != 0) }
probe libc.exit { if (pid() == target()) printf("exit %d\n", status) }
probe end {
    foreach ([k, own] in n+)
        printf("%s %s %d\n", own ? "target" : "child", k, n[k, own])
}"#;
    let (out, err, code) = telco(&["-e", script, "-c", exe.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // The command's own events in order (the child's may come between).
    let own: Vec<&str> =
        lines.iter().copied().filter(|l| !l.starts_with("child ") && !l.starts_with("target ")).collect();
    assert_eq!(
        own,
        [
            "connect to a port: 1",
            "accept: 1",
            "send 5 bytes: hello",
            "recv 5 bytes: hello",
            "fork: a child 1",
            "dlopen libm.so.6: 1",
            "exit 3",
        ],
        "{out}"
    );
    let mut counts: Vec<&str> =
        lines.iter().copied().filter(|l| l.starts_with("child ") || l.starts_with("target ")).collect();
    counts.sort();
    assert_eq!(
        counts,
        [
            "child execve 1",
            "child exit 1",
            "target accept 1",
            "target close 4",
            "target connect 1",
            "target dlopen 1",
            "target exit 1",
            "target fork 1",
            "target recv 1",
            "target send 1",
        ],
        "{out}"
    );
}

/// The pthread tapset on tests/programs/locks.c: two threads take a
/// mutex 1000 times each (main and a consumer once more), a reader and a
/// writer share a rwlock, five threads are created and joined; the
/// `.return` probes' wait times are never negative.
#[test]
fn pthread_tapset_counts_locks_threads_and_waits() {
    let d = common::scratch("tapset-pthread");
    let exe = d.join("locks");
    common::gcc("locks.c", &exe, &[]);
    let script = r#"global per_mutex, n, waits, bad
probe pthread.mutex_lock { per_mutex[mutex]++ }
probe pthread.rwlock_rdlock, pthread.rwlock_wrlock, pthread.rwlock_unlock, pthread.create, pthread.join { n[name]++ }
probe pthread.mutex_lock.return, pthread.rwlock_rdlock.return, pthread.rwlock_wrlock.return,
      pthread.join.return, pthread.cond_wait.return {
    waits[name]++
    if (wait_ns < 0 || ret != 0) bad++
}
probe pthread.create.return { if (thread == 0 || ret != 0) bad++ }
probe end {
    foreach (m in per_mutex- limit 1) printf("busiest mutex %d\n", per_mutex[m])
    foreach (k+ in n) printf("%s %d\n", k, n[k])
    printf("rwlock waits %d %d, joins %d, bad %d\n", waits["pthread_rwlock_rdlock"], waits["pthread_rwlock_wrlock"],
           waits["pthread_join"], bad)
}"#;
    let (out, err, code) = telco(&["-e", script, "-c", exe.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "busiest mutex 2002\npthread_create 5\npthread_join 5\npthread_rwlock_rdlock 100\npthread_rwlock_unlock 150\n\
         pthread_rwlock_wrlock 50\nrwlock waits 100 50, joins 5, bad 0\n"
    );
}
