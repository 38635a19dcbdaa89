//! The conformance corpus (SystemTap's testsuite style): every
//! `tests/run/NAME.tp` runs through the real binary and must print exactly
//! `NAME.out` on stdout and `NAME.err` on stderr (no `.err` file: stderr must
//! be empty), and exit with status 0 unless the script says otherwise.
//!
//! Directives, in `#` comment lines at the top of a script:
//! * `# args: A B ...`: script arguments;
//! * `# opts: -D MAXACTION=10 ...`: more command-line options;
//! * `# exit: N`: the expected exit status.
//!
//! The scripts run with `tests/run` as the working directory, so messages
//! name `NAME.tp`. A run that takes more than 60 s is killed and fails.
//! `BLESS=1` rewrites the expected files: review the diff, the expected text
//! must be what SystemTap prints, not merely what we print.

mod common;

use common::{check_file, name_of, repo, tp_files};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The corpus holds at least this many cases; a smaller one lost files.
const MIN_CASES: usize = 150;

fn directive<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    text.lines().take_while(|l| l.starts_with('#')).find_map(|l| l.strip_prefix(key).map(str::trim))
}

struct Run {
    stdout: String,
    stderr: String,
    status: Option<i32>,
}

fn run(dir: &std::path::Path, name: &str, text: &str) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_telco-stap"));
    cmd.current_dir(dir);
    if let Some(o) = directive(text, "# opts:") {
        cmd.args(o.split_whitespace());
    }
    cmd.arg(name);
    if let Some(a) = directive(text, "# args:") {
        cmd.args(a.split_whitespace());
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn telco-stap");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    // Wait for the exit on another thread; a run that outlives the limit is
    // killed (a hang is a failure, not a stuck test).
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait().ok().and_then(|s| s.code()));
    });
    let status = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(code) => code,
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            let _ = rx.recv();
            None
        }
    };
    let stdout = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned();
    Run { stdout, stderr, status }
}

#[test]
fn conformance_corpus() {
    let dir = repo().join("tests/run");
    let files = tp_files(&dir);
    assert!(files.len() >= MIN_CASES, "tests/run has {} cases, expected at least {MIN_CASES}", files.len());
    let bless = std::env::var_os("BLESS").is_some();
    let mut failures = Vec::new();
    for f in &files {
        let name = name_of(f);
        let text = std::fs::read_to_string(f).expect("read script");
        let r = run(&dir, &name, &text);
        let want_status: i32 = directive(&text, "# exit:").and_then(|s| s.parse().ok()).unwrap_or(0);
        if r.status != Some(want_status) {
            failures.push(format!(
                "{name}: exit status {:?}, expected {want_status}\n--- stdout\n{}--- stderr\n{}",
                r.status, r.stdout, r.stderr
            ));
            continue;
        }
        if let Some(m) = check_file(&f.with_extension("out"), &r.stdout) {
            failures.push(m);
        }
        let err_file = f.with_extension("err");
        if err_file.exists() || (bless && !r.stderr.is_empty()) {
            if let Some(m) = check_file(&err_file, &r.stderr) {
                failures.push(m);
            }
        } else if !r.stderr.is_empty() {
            failures.push(format!("{name}: unexpected stderr (add {name}.err):\n{}", r.stderr));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n\n{}", failures.len(), files.len(), failures.join("\n\n"));
}
