//! `.itrace` probes through the binary: every instruction of each call of
//! a function in a real target, into ITRC files that an independent reader
//! (tests/itrc_reader.py, written from the format's description) parses,
//! with register values that replay to what the function computes; and a
//! round trip through `itrc-dump`. The block tracer (the default) and the
//! single-stepper (`--itrace-step`) write the same files.

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

/// Replay the file's register writes from the start values: the
/// general-purpose registers after the last record (the vector registers'
/// 32-byte values are left out).
fn replay(t: &Value) -> std::collections::HashMap<String, u64> {
    let narrow = |name: &str| !name.starts_with("ymm");
    let mut regs: std::collections::HashMap<String, u64> = t["start"]
        .as_object()
        .expect("start")
        .iter()
        .filter(|(k, _)| narrow(k))
        .map(|(k, v)| (k.clone(), hex(v)))
        .collect();
    for r in t["records"].as_array().expect("records") {
        for w in r["writes"].as_array().expect("writes") {
            let name = w[1].as_str().expect("name");
            if narrow(name) {
                regs.insert(name.to_string(), hex(&w[2]));
            }
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

/// tests/programs/itrace_shapes.c, built once for all the tests (which
/// run at the same time).
fn shapes() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = dir().join("shapes");
            common::gcc("itrace_shapes.c", &exe, &[]);
            exe
        })
        .clone()
}

/// `telco-stap ARGS` with the address space's randomisation off (as `setarch
/// -R`): two runs of the same program see the same addresses.
fn telco_fixed(args: &[&str]) -> (String, String, Option<i32>) {
    let o = Command::new("setarch")
        .arg("-R")
        .arg(env!("CARGO_BIN_EXE_telco-stap"))
        .args(args)
        .output()
        .expect("setarch runs");
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned(), o.status.code())
}

/// Trace one call of `shapes NAME N` into `out`, by the block tracer or
/// (`step`) the single-stepper; the program's output.
fn trace_shape(name: &str, n: u64, out: &Path, step: bool) -> String {
    let exe = shapes();
    let cmd = format!("{} {name} {n}", exe.display());
    let probe = format!("probe process.function(\"{name}\").itrace {{}}");
    let mut args = vec!["-e", &probe, "-c", &cmd, "--itrc", out.to_str().unwrap()];
    if step {
        args.push("--itrace-step");
    }
    let (stdout, stderr, code) = telco_fixed(&args);
    assert_eq!(code, Some(0), "{name}: {stderr}");
    assert!(!stderr.contains("WARNING"), "{name}: {stderr}");
    stdout
}

/// The two recorders on the same calls (loops, recursion, a jump table
/// reading global data RIP-relative, `rep stosb` and `syscall`, indirect
/// calls, a loop back to the entry, whose branch our patch retargets, SSE
/// arithmetic (vector registers, recorded as `ymm0`…`ymm15`); PLT
/// calls resolved by the dynamic loader on the way): the files
/// are byte for byte the same (same blocks, same records, same values), and
/// the independent reader replays them to the function's result.
#[test]
fn both_recorders_write_the_same_file() {
    for (name, n) in [
        ("loops", 20),
        ("fib", 12),
        ("table", 40),
        ("strings", 30),
        ("indirect", 20),
        ("entry_loop", 5),
        ("vectors", 9),
    ] {
        let fast = dir().join(format!("{name}.fast.itrc"));
        let step = dir().join(format!("{name}.step.itrc"));
        let printed = trace_shape(name, n, &fast, false);
        assert_eq!(trace_shape(name, n, &step, true), printed);
        let (a, b) = (std::fs::read(&fast).expect("fast file"), std::fs::read(&step).expect("step file"));
        assert!(a == b, "{name}: the block tracer's file differs from the single-stepper's");
        let t = python(&fast);
        assert_eq!(t["end"], true, "{name}");
        if name == "vectors" {
            let ymm = t["records"].as_array().unwrap().iter().flat_map(|r| r["writes"].as_array().unwrap().iter());
            assert!(ymm.filter(|w| w[1].as_str().unwrap().starts_with("ymm")).count() >= 9, "{name}: no vector writes");
        }
        let result: u64 = printed.trim().parse::<i64>().expect("result") as u64;
        assert_eq!(replay(&t)["rax"], result, "{name}: rax at the return");
    }
}

/// A signal delivered inside the traced call: its handler runs natively
/// (untraced) and returns into the translated code; the trace goes on to
/// the return and replays to the function's result, which counted the
/// handler's run.
#[test]
fn a_signal_inside_the_traced_call_keeps_the_trace_right() {
    let out = dir().join("signalled.itrc");
    let printed = trace_shape("signalled", 20, &out, false);
    assert_eq!(printed.trim(), (190 + 1).to_string(), "the handler ran once");
    let t = python(&out);
    assert_eq!(t["end"], true);
    assert_eq!(replay(&t)["rax"], 191);
}

/// A long call: its records pass through the buffer's halves many times
/// (the tracer drains one while the thread fills the other); every block
/// is there: the instruction count grows by the loop's length per
/// iteration, exactly, and the values replay to the result.
#[test]
fn long_calls_are_recorded_whole() {
    let mut counts = Vec::new();
    for n in [100_000u64, 200_000, 300_000] {
        let exe = shapes();
        let out = dir().join(format!("spin{n}.itrc"));
        let cmd = format!("{} spin {n}", exe.display());
        let (stdout, stderr, code) = telco(&[
            "-v",
            "-e",
            r#"probe process.function("spin").itrace {}"#,
            "-c",
            &cmd,
            "--itrc",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(!stderr.contains("WARNING"), "{stderr}");
        let line = stderr.lines().find(|l| l.starts_with("itrace: 1 call(s), ")).expect("the -v line");
        let count: u64 = line.split_whitespace().nth(3).and_then(|c| c.parse().ok()).expect("count");
        counts.push(count);
        // The values, replayed with the format's own reader.
        let file = std::fs::File::open(&out).expect("file");
        let mut reader = telco_itrc::Reader::new(std::io::BufReader::new(file)).expect("ITRC");
        let (mut rax, mut records, mut ended) = (0u64, 0u64, false);
        while let Some(e) = reader.next_event().expect("readable") {
            match e {
                telco_itrc::Event::Record(r) => {
                    records += 1;
                    for w in r.writes() {
                        if w.name == "rax" {
                            rax = w.value.as_u64().unwrap_or(0);
                        }
                    }
                }
                telco_itrc::Event::End => ended = true,
                _ => {}
            }
        }
        assert!(ended);
        assert!(records > n, "{records} records for {n} iterations");
        assert_eq!(rax.to_string(), stdout.trim(), "rax at the return");
        let _ = std::fs::remove_file(&out);
    }
    assert_eq!(counts[2] - counts[1], counts[1] - counts[0], "{counts:?}");
    assert_eq!((counts[1] - counts[0]) % 100_000, 0, "{counts:?}");
}

/// Code that modifies itself: a function written into a page, called,
/// changed, called again. The block tracer sees the change when the code
/// is reached again (the dispatcher compares each block's bytes with the
/// ones translated), translates it anew and says so in the file (a second
/// `itrace:compile` for the address): the program computes what it does
/// untraced, and the trace replays to it.
#[test]
fn code_that_modifies_itself_runs_as_changed() {
    let out = dir().join("rewrite.itrc");
    let printed = trace_shape("rewrite", 3, &out, false);
    assert_eq!(printed.trim(), "121212");
    let t = python(&out);
    assert_eq!(t["end"], true);
    assert_eq!(replay(&t)["rax"], 121212);
    let (dump, err, code) = telco(&["itrc-dump", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let page_blocks: Vec<&str> =
        dump.lines().filter(|l| l.starts_with("compile 0x7f") && l.contains(": 6 bytes")).collect();
    assert!(page_blocks.len() >= 2, "{dump}");
}

/// A real program's large call: python3.11 running a statement through
/// `PyRun_SimpleStringFlags` (about 200,000 instructions in some 6,000
/// blocks of the interpreter and the C library), traced whole: the program
/// prints what it prints untraced, and the file reaches its end with
/// nothing lost. (The two recorders' files differ here only where the C
/// library's per-process random values, the stack canary and the pointer
/// guard, flow.)
#[test]
fn the_python_interpreter_runs_translated() {
    let python = Path::new("/usr/bin/python3.11");
    if !python.exists() {
        panic!("tests need Debian's python3.11 (installed by the test command)");
    }
    let out = dir().join("python.itrc");
    let cmd = format!("{} -c 'print(sum(x * x for x in range(100)))'", python.display());
    let (stdout, stderr, code) = telco(&[
        "-e",
        r#"probe process.function("PyRun_SimpleStringFlags").itrace {}"#,
        "-c",
        &cmd,
        "--itrc",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("WARNING"), "{stderr}");
    assert_eq!(stdout.trim(), "328350");
    let (dump, err, code) = telco(&["itrc-dump", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let summary = dump.lines().last().unwrap_or_default();
    assert!(summary.ends_with(", 0 lost, end reached"), "{summary}");
    let blocks: u64 = summary.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(blocks > 1000, "{summary}");
    let _ = std::fs::remove_file(&out);
}

/// A target that writes over the block tracer's arenas inside its traced
/// call (with 0xff, which makes its own code cache fault, and with zeros,
/// which make it loop): the tracer names what the target did, ends the
/// file, and the session ends (at -T) with a clear message, never a hang or
/// a panic.
#[test]
fn a_target_that_overwrites_its_code_cache_is_named() {
    let exe = dir().join("scribble");
    common::gcc("itrace_scribble.c", &exe, &[]);
    for fill in ["255", "0"] {
        let out = dir().join(format!("scribble{fill}.itrc"));
        let cmd = format!("{} {fill}", exe.display());
        let o = common::telco_bounded(
            &[
                "-T",
                "5",
                "-e",
                r#"probe process.function("victim").itrace {}"#,
                "-c",
                &cmd,
                "--itrc",
                out.to_str().unwrap(),
            ],
            60,
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.code().is_some(), "fill {fill}: killed ({:?}): {err}", o.status);
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains("the target overwrote the code cache's arena"), "fill {fill}: {err}");
        assert!(err.matches("not a block of this trace").count() <= 1, "{err}");
    }
}
