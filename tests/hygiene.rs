//! Output hygiene at the privilege boundary (issue 41): telco-stap runs
//! as root and what it prints or writes must not let a traced program or
//! another user reach the administrator's terminal or files.
//!
//! * Names from the target (its path, `execname()`, its symbols, a
//!   crash's place, its `warn()`s) reach standard error with their escape
//!   sequences escaped; the script's own output stays as it is.
//! * An output file is never written through another user's symlink in a
//!   sticky world-writable directory; one's own symlink works; a FIFO
//!   nobody reads is an error, not a hang.
//! * `--max-size` keeps a hot trace within its size, valid, with the
//!   events left out counted in the summary.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

mod common;

fn dir() -> PathBuf {
    common::scratch("hygiene")
}

fn run(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap")).args(args).output().expect("run telco-stap")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// tests/programs/escnames.c, built into a file whose name holds an SGR
/// escape sequence.
fn escnames() -> PathBuf {
    let exe = dir().join("prog\x1b[31mname");
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| common::gcc("escnames.c", &exe, &[]));
    exe
}

/// No byte of `err` is a control character but the newlines that end
/// lines (ESC, BEL, C1 CSI as UTF-8 or as a byte).
fn assert_no_controls(err: &[u8]) {
    let bad: Vec<u8> = err.iter().copied().filter(|&b| (b < 0x20 && b != b'\n') || b == 0x7f || b == 0x9b).collect();
    assert!(bad.is_empty(), "raw control bytes {bad:x?} on stderr:\n{}", text(err).escape_debug());
}

#[test]
fn names_from_the_target_reach_the_terminal_escaped() {
    let exe = escnames();
    // Quoted: the name holds `[`, which -c would hand to a shell.
    let cmd = format!("'{}' crash", exe.display());
    // Pass 2: the module's path in an error.
    let o = run(&["-e".as_ref(), r#"probe process.function("nosuch") {}"#.as_ref(), "-c".as_ref(), cmd.as_ref()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_no_controls(&o.stderr);
    assert!(text(&o.stderr).contains("prog\\x1b[31mname"), "{}", text(&o.stderr));

    // Pass 5: a -vv line naming a symbol, the script's warn() of
    // execname(), the crash report naming the function and the path.
    let json = dir().join("names.json");
    let script = r#"probe process.function("evil*") {}
                    probe process.function("main") { warn(execname()); printf("out:%s\n", execname()) }"#;
    let o = run(&[
        "-vv".as_ref(),
        "-e".as_ref(),
        script.as_ref(),
        "-c".as_ref(),
        cmd.as_ref(),
        "--chrome".as_ref(),
        json.as_os_str(),
    ]);
    let err = text(&o.stderr);
    assert!(o.status.code().is_some(), "{err}");
    assert_no_controls(&o.stderr);
    for said in [
        "Pass 5: evil\\x1b[31mred: calls timed by its trampolines",
        "WARNING: prog\\x1b[31mname\n",
        "was killed by SIGSEGV",
        "in boom\\x1b]0;pwned\\x07+0x",
        "/prog\\x1b[31mname)",
    ] {
        assert!(err.contains(said), "stderr lacks {said:?}:\n{err}");
    }
    // The script's output is the user's data: printed as it is.
    let raw = b"out:prog\x1b[31mname\n";
    assert!(o.stdout.windows(raw.len()).any(|w| w == raw), "{}", text(&o.stdout).escape_debug());
    // In the trace, names are JSON strings (escaped by JSON's rules).
    let trace = std::fs::read_to_string(&json).expect("trace");
    assert!(trace.contains(r#""name":"evil\u001b[31mred""#), "{trace}");
    let _ = std::fs::remove_file(&json);
}

/// A sticky world-writable directory of the test's own, as /tmp is.
fn sticky(tag: &str) -> PathBuf {
    let d = dir().join(tag);
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).expect("chmod 1777");
    d
}

/// `ln -s to at` as user 12345 (setpriv), or by chown where setpriv is
/// missing.
fn planted_symlink(to: &Path, at: &Path) {
    let made = std::process::Command::new("setpriv")
        .args(["--reuid=12345", "--regid=12345", "--clear-groups", "ln", "-s"])
        .arg(to)
        .arg(at)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        std::os::unix::fs::symlink(to, at).expect("symlink");
        std::os::unix::fs::lchown(at, Some(12345), Some(12345)).expect("lchown");
    }
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::symlink_metadata(at).expect("planted").uid(), 12345);
}

#[test]
fn another_users_symlink_in_a_sticky_directory_is_not_followed() {
    let d = sticky("sticky");
    let victim = dir().join("victim");
    std::fs::write(&victim, b"keep\n").expect("victim");
    let planted = d.join("out.txt");
    planted_symlink(&victim, &planted);
    let hello = r#"probe begin { println("hello"); exit() }"#;
    for flag in ["-o", "--chrome", "--perfetto", "--folded", "--pprof"] {
        let o = run(&["-e".as_ref(), hello.as_ref(), flag.as_ref(), planted.as_os_str()]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flag}: {err}");
        assert!(err.contains(&planted.display().to_string()) && err.contains("symlink owned by uid 12345"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(o.stdout.is_empty(), "{flag}: the session ran");
    }
    assert_eq!(std::fs::read(&victim).expect("victim"), b"keep\n");

    // Our own symlink in the same directory is followed.
    let ours = d.join("ours.txt");
    let target = dir().join("ours-target");
    std::os::unix::fs::symlink(&target, &ours).expect("symlink");
    let o = run(&["-e".as_ref(), hello.as_ref(), "-o".as_ref(), ours.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(&target).expect("written through our link"), b"hello\n");

    // Another user's file there is not written either (the kernel's
    // protected_regular); a FIFO nobody reads is an error at once.
    let theirs = d.join("theirs.txt");
    std::fs::write(&theirs, b"theirs\n").expect("file");
    std::os::unix::fs::chown(&theirs, Some(12345), Some(12345)).expect("chown");
    let o = run(&["-e".as_ref(), hello.as_ref(), "-o".as_ref(), theirs.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("a file owned by uid 12345"), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(&theirs).expect("theirs"), b"theirs\n");
    let fifo = d.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let o = common::telco_bounded(&["-e", hello, "-o", fifo.to_str().expect("utf-8")], 60);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("FIFO that nobody reads"), "{}", text(&o.stderr));
    std::fs::remove_dir_all(&d).expect("cleanup");
}

/// Spans of the trace file, checking it is one JSON array.
fn spans_in(path: &Path) -> u64 {
    let t = std::fs::read_to_string(path).expect("trace");
    match serde_json::from_str::<serde_json::Value>(&t) {
        Ok(serde_json::Value::Array(v)) => v.iter().filter(|e| e["ph"] == "X").count() as u64,
        other => panic!("not a JSON array: {:?}\n{}", other.err(), &t[t.len().saturating_sub(300)..]),
    }
}

/// `N` in "FLAG trace reached --max-size SIZE: N events left out".
fn left_out(err: &str, flag: &str, size: &str) -> u64 {
    let head = format!("{flag} trace reached --max-size {size}: ");
    err.lines()
        .find_map(|l| l.strip_prefix(&head)?.strip_suffix(" events left out")?.parse().ok())
        .unwrap_or_else(|| panic!("no `{head}N events left out` line:\n{err}"))
}

/// Events the ring had no room for (counted apart from those left out).
fn ring_dropped(err: &str) -> u64 {
    err.lines()
        .find_map(|l| l.strip_prefix("WARNING: ")?.split(" event(s) were dropped").next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_hot_trace_stops_at_max_size_and_stays_valid() {
    let exe = dir().join("spans");
    common::gcc("spans.c", &exe, &[]);
    let calls = 3_000_000u64;
    let cmd = format!("{} many {calls}", exe.display());
    let json = dir().join("max.json");
    let pf = dir().join("max.pftrace");
    let o = common::telco_bounded(
        &[
            "-e",
            r#"probe process.function("leaf") {}"#,
            "-c",
            &cmd,
            "--chrome",
            json.to_str().unwrap(),
            "--perfetto",
            pf.to_str().unwrap(),
            "--max-size",
            "1M",
        ],
        600,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    // No slack: the writer counts every byte it adds and keeps room for
    // the closing `\n]\n`, so the file is at most 1 MiB, and short of it
    // by less than one event (about 90 bytes).
    let size = std::fs::metadata(&json).expect("trace").len();
    assert!(size <= 1 << 20 && size > (1 << 20) - 200, "{size} bytes");
    let spans = spans_in(&json);
    let n = left_out(&err, "--chrome", "1 MB");
    // Every call is in the file, left out, or dropped by a full ring.
    assert_eq!(spans + n + ring_dropped(&err), calls, "{err}");
    assert!(std::fs::read(&json).expect("trace").ends_with(b"}\n]\n"));

    // --perfetto: at most 1 MiB, a valid sequence of `Trace.packet`s (the
    // viewer loads it, where installed), begins and ends left out counted.
    let bytes = std::fs::read(&pf).expect("perfetto trace");
    assert!(bytes.len() <= 1 << 20, "{} bytes", bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        assert_eq!(bytes[at], 0x0a, "a Trace.packet at {at}");
        let (mut len, mut shift) = (0usize, 0);
        at += 1;
        loop {
            let b = bytes[at];
            at += 1;
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        at += len;
    }
    assert_eq!(at, bytes.len(), "the file ends with a whole packet");
    assert!(left_out(&err, "--perfetto", "1 MB") > 0, "{err}");
    if let Some(report) = common::viewer_check(&json) {
        assert_eq!(report["slice_count"], spans, "{report}");
    }
    if let Some(report) = common::viewer_check(&pf) {
        assert!(report["slice_count"].as_u64().is_some_and(|n| n > 0), "{report}");
    }
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&pf);
}

#[test]
fn max_size_needs_a_size_and_a_trace_file() {
    for (args, says) in [
        (&["--max-size", "1M", "-e", "probe begin { exit() }"][..], "--chrome"),
        (&["--max-size", "lots", "--chrome", "x.json", "-e", "probe begin { exit() }"][..], "is not a size"),
        (&["--max-size", "1000", "--chrome", "x.json", "-e", "probe begin { exit() }"][..], "64K"),
    ] {
        let o = common::telco_in(&dir(), args);
        assert_eq!(o.2, Some(2), "{args:?}: {}", o.1);
        assert!(o.1.contains(says), "{args:?}: {}", o.1);
    }
    assert!(!dir().join("x.json").exists());
}
