//! `.itrace` probes through the binary: every instruction of each call of
//! a function in a real target, into ITRC files that an independent reader
//! (tests/itrc_reader.py, written from the format's description) parses,
//! with register values that replay to what the function computes; and a
//! round trip through `itrc-dump`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::telco_run as telco;

fn dir() -> PathBuf {
    common::scratch("itrace")
}

fn target(flags: &[&str], name: &str) -> PathBuf {
    let exe = dir().join(name);
    common::gcc("itraced.c", &exe, flags);
    exe
}

/// The independent reader's view of a file.
fn python(path: &Path) -> Value {
    let reader = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/itrc_reader.py");
    let o = Command::new("python3").arg(&reader).arg(path).output().expect("python3 runs");
    assert!(o.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("reader JSON")
}

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("hex string").trim_start_matches("0x"), 16).expect("hex")
}

/// Replay the file's register writes from the start values: the registers
/// after the last record.
fn replay(t: &Value) -> std::collections::HashMap<String, u64> {
    let mut regs: std::collections::HashMap<String, u64> =
        t["start"].as_object().expect("start").iter().map(|(k, v)| (k.clone(), hex(v))).collect();
    for r in t["records"].as_array().expect("records") {
        for w in r["writes"].as_array().expect("writes") {
            regs.insert(w[1].as_str().expect("name").to_string(), hex(&w[2]));
        }
    }
    regs
}

fn sum_sq(n: u64) -> u64 {
    (1..=n).map(|i| i * i).sum()
}

#[test]
fn each_call_is_traced_and_replays_to_its_result() {
    for (name, flags) in [("plain", &[][..]), ("cet", &["-fcf-protection"][..])] {
        let exe = target(flags, name);
        let out = dir().join(format!("{name}.itrc"));
        let cmd = format!("{} 5 3", exe.display());
        let untraced = Command::new(&exe).args(["5", "3"]).output().expect("run");
        let (stdout, stderr, code) = telco(&[
            "-e",
            r#"probe process.function("sum").itrace { printf("sum(%d)\n", $arg1) }"#,
            "-c",
            &cmd,
            "--itrc",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(!stderr.contains("WARNING"), "{stderr}");
        // The program's own output is unchanged; the probe body ran per call.
        assert!(stdout.contains(String::from_utf8_lossy(&untraced.stdout).trim()), "{stdout}");
        assert_eq!(stdout.matches("sum(").count(), 3);
        for (k, n) in [(1, 5u64), (2, 6), (3, 7)] {
            let file = if k == 1 { out.clone() } else { dir().join(format!("{name}.itrc.{k}")) };
            let t = python(&file);
            assert_eq!(t["end"], true, "{}", file.display());
            assert_eq!(t["python_json"], true);
            let names: Vec<&str> = t["registers"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap()).collect();
            assert_eq!(&names[..3], ["rip", "r15", "r14"]);
            let start = &t["start"];
            assert_eq!(hex(&start["rdi"]), n, "the argument");
            let regs = replay(&t);
            assert_eq!(regs["rax"], sum_sq(n), "sum({n}) in rax at the return");
            // The stack pointer is back where the caller left it, plus the
            // popped return address; the return address was the link.
            assert_eq!(regs["rsp"], hex(&start["rsp"]) + 8);
            // sq ran n times: its entry block appears n times, named.
            let blocks = t["blocks"].as_object().unwrap();
            let records = t["records"].as_array().unwrap();
            let first = records[0]["address"].as_str().unwrap();
            assert_eq!(hex(&start["rip"]), hex(&Value::from(first)));
            assert!(blocks.len() >= 4, "{blocks:?}");
        }
        // Round trip: itrc-dump reads what we wrote, disassembles and converts.
        let (dump, err, code) = telco(&["itrc-dump", out.to_str().unwrap(), "--disasm"]);
        assert_eq!(code, Some(0), "{err}");
        assert!(dump.contains("ret") && dump.contains("imul"), "{dump}");
        let chrome = dir().join(format!("{name}.json"));
        let (_, err, code) = telco(&["itrc-dump", out.to_str().unwrap(), "--chrome", chrome.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap()).expect("JSON");
        assert!(v.to_string().contains("\"ph\":\"X\""));
    }
}

#[test]
fn threads_are_traced_one_call_each() {
    let exe = target(&[], "threads");
    let out = dir().join("threads.itrc");
    let cmd = format!("{} 4 1 threads", exe.display());
    let (stdout, stderr, code) =
        telco(&["-e", r#"probe process.function("sum").itrace {}"#, "-c", &cmd, "--itrc", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), (sum_sq(4) + sum_sq(5)).to_string());
    let mut results: Vec<u64> =
        [out.clone(), dir().join("threads.itrc.2")].iter().map(|f| replay(&python(f))["rax"]).collect();
    results.sort();
    assert_eq!(results, [sum_sq(4), sum_sq(5)]);
}

#[test]
fn calls_after_maxitrace_are_counted_not_traced() {
    let exe = target(&[], "limit");
    let out = dir().join("limit.itrc");
    let cmd = format!("{} 3 5", exe.display());
    let (stdout, stderr, code) = telco(&[
        "-D",
        "MAXITRACE=2",
        "-e",
        r#"global n probe process.function("sum").itrace { n++ } probe end { printf("hits %d\n", n) }"#,
        "-c",
        &cmd,
        "--itrc",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("hits 5"), "{stdout}");
    assert!(dir().join("limit.itrc.2").exists());
    assert!(!dir().join("limit.itrc.3").exists());
    assert!(stderr.contains("WARNING: 3 call(s) of .itrace functions were not traced"), "{stderr}");
    // Without --itrc: a clear error.
    let (_, stderr, code) = telco(&["-e", r#"probe process.function("sum").itrace {}"#, "-c", &cmd]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--itrc FILE"), "{stderr}");
}
