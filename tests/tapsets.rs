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

/// The openssl tapset on Debian's openssl over a Unix socket: the server
/// (traced with -p) accepts, handshakes and reads the client's plaintext;
/// the client (traced with -c, asking `s_server -www` for its page) writes
/// the request and reads the answer, as SSL_write and SSL_read see them.
#[test]
fn openssl_tapset_sees_plaintext_and_handshakes() {
    use std::io::Write;
    let d = common::scratch("tapset-openssl");
    // The server side: echo mode, what the client sends arrives as plaintext.
    let srv = common::tls_server(&d, &[]);
    let pid = srv.pid().to_string();
    let script = r#"probe begin { println("armed") }
probe openssl.accept.return, openssl.handshake.return { printf("%s = %d\n", name, ret) }
probe openssl.read { printf("%s at most %d\n", name, num) }
probe openssl.read.return { printf("%s = %d %s\n", name, bytes, string_quoted(data)) }
probe openssl.shutdown { println(name) }"#;
    let tracer = common::Tracer::start(&["-p", &pid, "-e", script], "armed");
    let mut client = std::process::Command::new("openssl")
        .args(["s_client", "-unix", "tls.sock"])
        .current_dir(&d)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_client");
    client.stdin.take().expect("stdin").write_all(b"hello from client\n").expect("to the client");
    assert!(client.wait().expect("the client").success());
    // One connection served: the server ends, and so does the session.
    let (out, err, code) = tracer.finish();
    assert_eq!(code, Some(0), "{err}");
    let (_, status) = srv.finish();
    assert!(status.success(), "{status:?}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "SSL_do_handshake = 1",
            "SSL_accept = 1",
            "SSL_read at most 16384",
            "SSL_read = 18 \"hello from client\\n\"",
            "SSL_read at most 16384",
            "SSL_read = 0 \"\"",
            "SSL_shutdown",
        ],
        "{out}"
    );
    // The client side, against a server answering GET with its page.
    let srv = common::tls_server(&d, &["-www"]);
    // (s_client also calls SSL_write with 0 bytes, to drive the handshake.)
    let script = r#"probe openssl.write { if (num > 0) printf("%s %d %s\n", name, num, string_quoted(data)) }
probe openssl.write.return { if (bytes > 0) printf("%s = %d\n", name, bytes) }
probe openssl.read.return { if (bytes > 0 && !seen++) printf("%s %s\n", name, substr(data, 0, 15)) }
global seen"#;
    // The script's lines to a file of their own: on the command's standard
    // output they could land inside a line of its page (CI saw one).
    let client = ["-e", script, "-o", "probes.out", "-c", "openssl s_client -unix tls.sock -ign_eof -quiet"];
    let o = common::telco_with_input(&d, &client, b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let out = std::fs::read_to_string(d.join("probes.out")).expect("the script's output");
    let ours: Vec<&str> = out.lines().collect();
    assert_eq!(
        ours,
        ["SSL_write 18 \"GET / HTTP/1.0\\r\\n\\r\\n\"", "SSL_write = 18", "SSL_read HTTP/1.0 200 ok"],
        "{out}"
    );
    drop(srv);
}

/// `openssl s_server -www` (traced with -p) reads the request and writes
/// its page through an SSL BIO (BIO_f_ssl, under a buffering BIO), never
/// calling SSL_read or SSL_write: `openssl.bio_read` and `.bio_write` see
/// that plaintext, with the connection (the SSL the server's own
/// SSL_get_current_cipher call is given), and no other BIO's traffic.
#[test]
fn openssl_tapset_sees_ssl_bio_plaintext() {
    use std::io::Write;
    let d = common::scratch("tapset-openssl-bio");
    let srv = common::tls_server(&d, &["-www"]);
    let pid = srv.pid().to_string();
    let script = r#"probe begin { println("armed") }
probe process("libssl.so.3").function("SSL_get_current_cipher") { conn = pointer_arg(1) }
probe openssl.bio_read.return { if (bytes > 0) printf("%s = %d %s\n", name, bytes, string_quoted(data)); reads[ssl]++ }
probe openssl.bio_write { printf("%s %s\n", name, substr(data, 0, 15)); writes[ssl] += num }
probe openssl.bio_write.return { if (bytes > 0) total += bytes }
global conn, reads, writes, total
probe end { printf("the server's connection %d, all written %d\n", conn in reads && conn in writes, writes[conn] == total) }"#;
    let tracer = common::Tracer::start(&["-p", &pid, "-e", script], "armed");
    let mut client = std::process::Command::new("openssl")
        .args(["s_client", "-unix", "tls.sock", "-ign_eof", "-quiet"])
        .current_dir(&d)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_client");
    client.stdin.take().expect("stdin").write_all(b"GET / HTTP/1.0\r\n\r\n").expect("to the client");
    let o = client.wait_with_output().expect("the client");
    assert!(String::from_utf8_lossy(&o.stdout).contains("HTTP/1.0 200 ok"), "{o:?}");
    let (out, err, code) = tracer.finish();
    assert_eq!(code, Some(0), "{err}");
    let (_, status) = srv.finish();
    assert!(status.success(), "{status:?}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "BIO_read = 18 \"GET / HTTP/1.0\\r\\n\\r\\n\"",
            "BIO_write HTTP/1.0 200 ok",
            "the server's connection 1, all written 1"
        ],
        "{out}"
    );
}
