//! `--otlp URL` through the binary: an OTLP/HTTP receiver of the test's
//! own (tests/otlp/receiver.py, installed by tests/otlp/install.sh)
//! decodes every request with the official OpenTelemetry classes, and the
//! spans are compared with the calls tests/programs/spans.c makes and with
//! the `--perfetto` trace of the same run (loaded into Perfetto's trace
//! processor): the same calls, names, nesting and times.

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

mod common;
use common::telco_run as telco;

fn dir() -> PathBuf {
    common::scratch("otlp")
}

fn target() -> PathBuf {
    let exe = dir().join("spans");
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| common::gcc("spans.c", &dir().join("spans"), &["-pthread"]));
    exe
}

/// tests/otlp/receiver.py, bound to a port of the kernel's choosing. Its
/// lines are read as they come (a request's line may be larger than a
/// pipe holds, and the receiver answers only once it is written).
struct Receiver {
    child: Child,
    input: Option<ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    url: String,
}

impl Receiver {
    fn start(args: &[&str]) -> Receiver {
        let dir = common::repo().join("tests/otlp");
        let python = dir.join("venv/bin/python");
        assert!(python.exists(), "the OTLP receiver is not installed: run tests/otlp/install.sh");
        let mut child = Command::new(python)
            .arg(dir.join("receiver.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the receiver");
        let input = child.stdin.take();
        let mut output = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        output.read_line(&mut line).expect("the receiver's port");
        let port: u16 = line.trim().strip_prefix("port ").and_then(|p| p.parse().ok()).expect("port N");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in output.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Receiver { child, input, lines, url: format!("http://127.0.0.1:{port}") }
    }

    fn say(&mut self, what: &str) {
        writeln!(self.input.as_mut().expect("stdin"), "{what}").expect("write to the receiver");
    }

    /// Every request it got (the tracer has ended: each was printed
    /// before its answer).
    fn requests(mut self) -> Vec<Value> {
        self.say("quit");
        let mut got = Vec::new();
        for line in self.lines.iter() {
            match line.as_str() {
                "end" => break,
                "listening" => continue,
                _ => got.push(serde_json::from_str(&line).expect("a JSON line")),
            }
        }
        got
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every span of `requests`, with its resource's attributes.
fn spans(requests: &[Value]) -> Vec<(Value, Value)> {
    requests
        .iter()
        .flat_map(|r| r["resources"].as_array().expect("resources").clone())
        .flat_map(|res| {
            let attrs = res["attributes"].clone();
            res["spans"].as_array().expect("spans").iter().map(move |s| (s.clone(), attrs.clone())).collect::<Vec<_>>()
        })
        .collect()
}

/// The number after `what` in the report line of --otlp.
fn said(stderr: &str, what: &str) -> u64 {
    let line = stderr.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no {what:?} in {stderr}"));
    let at = line.find(what).unwrap_or(0);
    let n = line[..at].split_whitespace().last().map(|w| w.trim_start_matches('('));
    n.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

/// Each thread's calls as spans, with depth (from the parents) and
/// times, against the same run's --perfetto trace: the same calls, names,
/// depths, durations to the nanosecond, and starts one constant apart
/// (the trace processor's clock is CLOCK_BOOTTIME, OTLP's the Unix time).
#[test]
fn calls_become_nested_spans_like_the_perfetto_trace() {
    let exe = target();
    let proto = dir().join("nest.pftrace");
    let r = Receiver::start(&["--listen"]);
    let script = r#"probe process.function("top") {} probe process.function("mid") {}
                    probe process.function("leaf").return {}"#;
    let cmd = format!("{} nest 20", exe.display());
    let (stdout, stderr, code) = telco(&[
        "-e",
        script,
        "-c",
        &cmd,
        "--perfetto",
        proto.to_str().expect("utf-8"),
        "--otlp",
        &r.url,
        "--label",
        "deployment.environment=test",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "1720\n");
    let url = r.url.clone();
    let requests = r.requests();
    assert!(!requests.is_empty());
    for q in &requests {
        assert_eq!(
            (&q["path"], &q["encoding"], &q["type"]),
            (&"/v1/traces".into(), &"gzip".into(), &"application/x-protobuf".into())
        );
    }
    let all = spans(&requests);
    // 20 top, 20 mid and 40 leaf calls on each of two threads.
    assert_eq!(all.len(), 160);
    assert!(
        stderr.contains(&format!("--otlp: 160 spans of 160 (40 traces) in {} request", requests.len())),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("delivered to {url}; none dropped")), "{stderr}");
    let pid = all[0].1["process.pid"].as_i64().expect("process.pid");
    let by_id: BTreeMap<String, &Value> =
        all.iter().map(|(s, _)| (s["span_id"].as_str().unwrap().to_string(), s)).collect();
    assert_eq!(by_id.len(), 160, "span ids are unique");
    let mut threads: BTreeMap<i64, Vec<(String, u64, u64, u64)>> = BTreeMap::new();
    for (s, res) in &all {
        assert_eq!(res["service.name"], "spans");
        assert_eq!(res["process.executable.name"], "spans");
        assert_eq!(res["process.pid"], pid);
        assert_eq!(res["deployment.environment"], "test");
        assert!(res["host.name"].as_str().is_some_and(|h| !h.is_empty()), "{res}");
        assert_eq!(s["kind"], 1, "SPAN_KIND_INTERNAL");
        assert!(s["attributes"]["thread.name"].as_str().is_some_and(|n| !n.is_empty()), "{s}");
        // Its depth through its parents, each in the same trace and
        // around it in time.
        let mut depth = 0;
        let mut at: &Value = s;
        while let Some(p) = at["parent"].as_str().filter(|p| !p.is_empty()) {
            let parent = by_id.get(p).unwrap_or_else(|| panic!("no parent {p} for {at}"));
            assert_eq!(parent["trace_id"], s["trace_id"]);
            assert_eq!(parent["attributes"]["thread.id"], s["attributes"]["thread.id"]);
            assert!(parent["start"].as_u64() <= at["start"].as_u64() && at["end"].as_u64() <= parent["end"].as_u64());
            depth += 1;
            at = *parent;
        }
        let want = match s["name"].as_str().unwrap() {
            "top" => 0,
            "mid" => 1,
            "leaf" => 2,
            n => panic!("a span named {n}"),
        };
        assert_eq!(depth, want, "{s}");
        let (start, end) = (s["start"].as_u64().unwrap(), s["end"].as_u64().unwrap());
        let tid = s["attributes"]["thread.id"].as_i64().unwrap();
        threads.entry(tid).or_default().push((s["name"].as_str().unwrap().into(), depth, start, end - start));
    }
    assert_eq!(threads.len(), 2);
    assert!(threads.contains_key(&pid));
    // The Perfetto trace of the same run.
    let p = common::viewer_check(&proto).expect("the Perfetto check is not installed: run tests/chrome/install.sh");
    let mut offset: Option<i64> = None;
    for t in p["threads"].as_array().expect("threads") {
        let tid = t["tid"].as_i64().expect("tid");
        let mut slices: Vec<(String, u64, u64, u64)> = t["slices"]
            .as_array()
            .expect("slices")
            .iter()
            .map(|s| {
                let name = s["name"].as_str().unwrap().to_string();
                (name, s["depth"].as_u64().unwrap(), s["ts_ns"].as_u64().unwrap(), s["dur_ns"].as_u64().unwrap())
            })
            .collect();
        let mut ours = threads.remove(&tid).unwrap_or_else(|| panic!("no spans of thread {tid}"));
        slices.sort_by_key(|s| (s.2, s.1));
        ours.sort_by_key(|s| (s.2, s.1));
        assert_eq!(slices.len(), ours.len(), "thread {tid}");
        for (a, b) in slices.iter().zip(&ours) {
            assert_eq!((&a.0, a.1, a.3), (&b.0, b.1, b.3), "thread {tid}");
            let d = a.2 as i64 - b.2 as i64;
            assert_eq!(*offset.get_or_insert(d), d, "thread {tid}: {a:?} {b:?}");
        }
    }
    assert!(threads.is_empty(), "{threads:?}");
}

/// `--service` names the service; `--min-dur` leaves the short calls out,
/// as from the trace files.
#[test]
fn the_service_and_the_minimum_duration() {
    let exe = target();
    let r = Receiver::start(&["--listen"]);
    let script = r#"probe process.function("slow"), process.function("fast") {}"#;
    let cmd = format!("{} slow 1000", exe.display());
    let (_, stderr, code) =
        telco(&["-e", script, "-c", &cmd, "--otlp", &r.url, "--service", "checkout", "--min-dur", "1ms"]);
    assert_eq!(code, Some(0), "{stderr}");
    let all = spans(&r.requests());
    assert_eq!(all.len(), 3, "{all:?}");
    for (s, res) in &all {
        assert_eq!((&s["name"], &res["service.name"]), (&"slow".into(), &"checkout".into()));
        assert!(s["end"].as_u64().unwrap() - s["start"].as_u64().unwrap() >= 1_000_000, "{s}");
        assert_eq!(s["parent"], "");
    }
}

/// The endpoint refuses connections until the exporter has tried and
/// said it will try again (`-v`): nothing is lost; the report says the
/// attempts retried.
#[test]
fn an_endpoint_that_comes_up_late_loses_nothing() {
    let exe = target();
    let mut r = Receiver::start(&[]);
    let script = r#"probe process.function("top") {}"#;
    let cmd = format!("{} nest 500", exe.display());
    let tracer = common::Tracer::start_on_stderr(&["-v", "-e", script, "-c", &cmd, "--otlp", &r.url], "trying again");
    r.say("listen");
    let (_, stderr, code) = tracer.finish();
    assert_eq!(code, Some(0), "{stderr}");
    let all = spans(&r.requests());
    assert_eq!(all.len(), 1000);
    assert!(stderr.contains("--otlp: 1000 spans of 1000 (1000 traces) in "), "{stderr}");
    assert!(said(&stderr, "attempt") >= 1, "{stderr}");
    assert!(stderr.contains("; none dropped"), "{stderr}");
}

/// A queue too small for what comes while the endpoint is down: the
/// spans that did not fit are dropped and counted; the report's counts
/// and the receiver's add up to every call.
#[test]
fn a_full_queue_drops_new_spans_and_says_how_many() {
    let exe = target();
    let mut r = Receiver::start(&[]);
    let script = r#"probe process.function("leaf") {}"#;
    let cmd = format!("{} many 100000", exe.display());
    let tracer = common::Tracer::start_on_stderr(
        &["-v", "-e", script, "-c", &cmd, "--otlp", &r.url, "--export-queue", "1M"],
        "trying again",
    );
    r.say("listen");
    let (_, stderr, code) = tracer.finish();
    assert_eq!(code, Some(0), "{stderr}");
    let got = spans(&r.requests()).len() as u64;
    let delivered = said(&stderr, "spans of 100000");
    let dropped = if stderr.contains("the export queue was full") { said(&stderr, "spans not delivered") } else { 0 };
    assert_eq!((got, got + dropped), (delivered, 100000), "{stderr}");
    assert!(got > 0, "{stderr}");
}

/// An endpoint that refuses every request (HTTP 400): the spans are
/// counted as refused, and its words are in the report; the exit status
/// is the session's.
#[test]
fn an_endpoint_that_refuses_is_reported() {
    let exe = target();
    let r = Receiver::start(&["--listen", "--status", "400"]);
    let script = r#"probe process.function("top") {}"#;
    let cmd = format!("{} nest 10", exe.display());
    let (_, stderr, code) = telco(&["-e", script, "-c", &cmd, "--otlp", &r.url]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(r.requests().len(), 1);
    assert!(stderr.contains("WARNING: --otlp: 20 spans not delivered: the endpoint refused them"), "{stderr}");
    assert!(stderr.contains("said: HTTP 400: refused by the test"), "{stderr}");
}

#[test]
fn bad_endpoints_are_refused_before_tracing() {
    for (url, why) in [
        ("https://collector:4318", "https is not supported"),
        ("localhost:4318", "is not an http:// URL"),
        ("http://:4318", "names no host"),
        ("http://h:99999", "is not a port"),
    ] {
        let (_, stderr, code) = telco(&["-e", "probe begin { exit() }", "--otlp", url]);
        assert_eq!(code, Some(2), "{url}: {stderr}");
        assert!(stderr.contains(why), "{url}: {stderr}");
    }
    let (_, stderr, code) = telco(&["-e", "probe begin { exit() }", "--service", "x"]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("--otlp"), "{stderr}");
}
