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
