//! `--otlp URL` through the binary: an OTLP/HTTP receiver of the test's
//! own (tests/otlp/receiver.py, installed by tests/otlp/install.sh)
//! decodes every request with the official OpenTelemetry classes, and the
//! spans are compared with the calls tests/programs/spans.c makes and with
//! the `--perfetto` trace of the same run (loaded into Perfetto's trace
//! processor): the same calls, names, nesting and times. `--pyroscope`
//! and OTLP profiles go to the same receiver: Pyroscope's pprof files are
//! decoded by tests/profile/check.js, the OTLP profiles by the official
//! classes.

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

    /// Its next request, while the tracer runs (at most a minute away).
    fn next(&self) -> Value {
        loop {
            let line = self.lines.recv_timeout(std::time::Duration::from_secs(60)).expect("a request within a minute");
            if line != "listening" {
                return serde_json::from_str(&line).expect("a JSON line");
            }
        }
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
        for flag in ["--otlp", "--pyroscope"] {
            let (_, stderr, code) = telco(&["-e", "probe begin { exit() }", flag, url]);
            assert_eq!(code, Some(2), "{url}: {stderr}");
            assert!(stderr.contains(why), "{url}: {stderr}");
        }
    }
    for alone in [["--service", "x"], ["--push-interval", "1"]] {
        let (_, stderr, code) = telco(&["-e", "probe begin { exit() }", alone[0], alone[1]]);
        assert_eq!(code, Some(2));
        assert!(stderr.contains("--otlp") && stderr.contains("--pyroscope"), "{stderr}");
    }
    let (_, stderr, code) =
        telco(&["-e", "probe begin { exit() }", "--pyroscope", "http://h:1", "--push-interval", "0"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("not a number of seconds from 0.1 to 86400"), "{stderr}");
    // Nothing to send: said, not silent.
    let (_, stderr, code) = telco(&["-e", "probe begin { exit() }", "--otlp", "http://127.0.0.1:1"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("WARNING: --otlp: the script has no function probe and no timer.profile"), "{stderr}");
}

/// Pyroscope refusing every request (HTTP 400): the samples are counted
/// as not delivered, with its words.
#[test]
fn a_pyroscope_that_refuses_is_reported() {
    let exe = dir().join("profile3");
    common::gcc("profile.c", &exe, &[]);
    let r = Receiver::start(&["--listen", "--status", "400"]);
    let cmd = format!("{} split 20000", exe.display());
    let (_, stderr, code) = telco(&["-c", &cmd, "--pyroscope", &r.url]);
    assert_eq!(code, Some(0), "{stderr}");
    let n = r.requests().len();
    assert!(n >= 1);
    let samples = said(&stderr, "timer.profile samples in");
    assert!(
        stderr.contains(&format!("--pyroscope: 0 of {samples} timer.profile samples in 0 of {n} profiles")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("WARNING: --pyroscope: {samples} samples not delivered: the endpoint refused them")),
        "{stderr}"
    );
    assert!(stderr.contains("said: HTTP 400: refused by the test"), "{stderr}");
}

/// `node tests/profile/check.js pprof FILE`, parsed.
fn pprof(file: &std::path::Path) -> Value {
    assert!(
        common::repo().join("tests/profile/node/.ready").exists(),
        "the profile check is not installed: run tests/profile/install.sh"
    );
    let o = Command::new("node")
        .arg(common::repo().join("tests/profile/check.js"))
        .arg("pprof")
        .arg(file)
        .output()
        .expect("run node");
    assert!(o.status.success(), "check.js: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// A running program profiled without a script, its samples pushed
/// every half second to Pyroscope (`/ingest`, pprof) and as OpenTelemetry
/// profiles while the session runs, each window once: the requests come
/// before the program ends; the two engines get the same samples, as
/// many as the --folded file of the same run, labelled with the service,
/// host, pid and --label; the windows follow one another; and the
/// samples hold the program's known split (hot() three quarters of the
/// loop's time).
#[test]
fn profiles_are_pushed_to_pyroscope_and_otlp_while_the_session_runs() {
    let exe = dir().join("profile");
    common::gcc("profile.c", &exe, &[]);
    let save = dir().join("ingest");
    std::fs::create_dir_all(&save).expect("mkdir");
    let r = Receiver::start(&["--listen", "--save", save.to_str().expect("utf-8")]);
    let mut target = common::Running::start(&exe, &["serve", "0"]);
    let pid = target.pid();
    let folded = dir().join("push.folded");
    let tracer = Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(["-p", &pid.to_string(), "--pyroscope", &r.url, "--otlp", &r.url, "--push-interval", "0.5"])
        .args(["--service", "shop", "--label", "env=test", "--folded", folded.to_str().expect("utf-8")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start telco-stap");
    // Two windows of each kind while the program runs.
    let mut got = Vec::new();
    let count = |got: &[Value], what: &str| got.iter().filter(|q| q["path"].as_str().unwrap().contains(what)).count();
    while count(&got, "/ingest") < 2 || count(&got, "/v1development/profiles") < 2 {
        got.push(r.next());
    }
    target.say("stop");
    let (out, status) = target.finish();
    assert!(status.success() && out.contains("done"), "{out}");
    let o = tracer.wait_with_output().expect("wait for telco-stap");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let url = r.url.clone();
    got.extend(r.requests());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname").trim().to_string();
    // Pyroscope: the labels in the name, contiguous windows, pprof files.
    let mut pyro: BTreeMap<String, u64> = BTreeMap::new();
    let (mut windows, mut until) = (0, 0u64);
    for q in got.iter().filter(|q| q["path"].as_str().unwrap().starts_with("/ingest?")) {
        let query = &q["query"];
        assert_eq!(query["name"], format!("shop.cpu{{host={host},service=shop,pid={pid},env=test}}"), "{q}");
        assert_eq!(
            (&query["format"], &query["spyName"], &query["sampleRate"]),
            (&"pprof".into(), &"telco-stap".into(), &"99".into())
        );
        assert!(q["type"].as_str().unwrap().starts_with("multipart/form-data; boundary="), "{q}");
        let (from, to): (u64, u64) =
            (query["from"].as_str().unwrap().parse().unwrap(), query["until"].as_str().unwrap().parse().unwrap());
        assert!(from <= to && from + 1 >= until, "window {from}..{to} after one until {until}");
        until = to;
        windows += 1;
        let p = pprof(std::path::Path::new(q["file"].as_str().expect("the profile field")));
        assert_eq!(p["sampleTypes"], serde_json::json!([["samples", "count"], ["cpu", "nanoseconds"]]));
        for s in p["samples"].as_array().expect("samples") {
            let leaf = s["stack"][0].as_str().unwrap_or("").to_string();
            *pyro.entry(leaf).or_default() += s["values"][0].as_u64().unwrap();
        }
    }
    // OTLP: the same samples, each with its thread and time.
    let mut otlp: BTreeMap<String, u64> = BTreeMap::new();
    let mut otlp_windows = 0;
    for q in got.iter().filter(|q| q["path"] == "/v1development/profiles") {
        assert_eq!(q["encoding"], "gzip");
        otlp_windows += 1;
        for p in q["profiles"].as_array().expect("profiles") {
            let a = &p["attributes"];
            assert_eq!(
                (&a["service.name"], &a["process.pid"], &a["env"]),
                (&"shop".into(), &pid.into(), &"test".into())
            );
            assert_eq!(a["host.name"], host.as_str());
            assert_eq!(p["sample_type"], serde_json::json!(["cpu", "nanoseconds"]));
            assert_eq!(p["period"], 1_000_000_000 / 99);
            let (start, end) =
                (p["time"].as_u64().unwrap(), p["time"].as_u64().unwrap() + p["duration"].as_u64().unwrap());
            for s in p["samples"].as_array().unwrap() {
                assert_eq!(s["attributes"]["thread.id"], pid, "{s}");
                let t = s["time"][0].as_u64().expect("a time");
                // Sampled in the window (ms apart at most: two clocks).
                assert!(t + 5_000_000 >= start && t <= end + 5_000_000, "{t} not in {start}..{end}");
                let stack: Vec<&str> = s["stack"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
                if matches!(stack[0], "hot" | "cold") {
                    assert!(stack.contains(&"run") && stack.contains(&"main"), "{stack:?}");
                }
                *otlp.entry(stack[0].to_string()).or_default() += 1;
            }
        }
    }
    assert!(windows >= 2 && otlp_windows == windows, "{windows} Pyroscope and {otlp_windows} OTLP profiles");
    assert_eq!(pyro, otlp, "the two engines got different samples");
    // The --folded file of the same run has every sample.
    let text = std::fs::read_to_string(&folded).expect("the folded file");
    let total: u64 = text.lines().filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok()).sum();
    assert_eq!(otlp.values().sum::<u64>(), total);
    for flag in ["--pyroscope", "--otlp"] {
        assert!(
            stderr.contains(&format!("{flag}: {total} of {total} timer.profile samples in {windows} of {windows} profiles delivered to {url}")),
            "{stderr}"
        );
    }
    let (hot, cold) = (otlp.get("hot").copied().unwrap_or(0), otlp.get("cold").copied().unwrap_or(0));
    assert!(hot + cold >= 50, "too few samples of hot and cold: {hot} + {cold}");
    // Five standard deviations of that many samples taken at random.
    let pct = 100.0 * hot as f64 / (hot + cold) as f64;
    let sd = 100.0 * (0.75f64 * 0.25 / (hot + cold) as f64).sqrt();
    assert!((pct - 75.0).abs() <= 5.0 * sd, "hot has {pct:.1}% of {} samples, not 75 ± {:.1}", hot + cold, 5.0 * sd);
    std::fs::remove_dir_all(&save).ok();
}

/// Two processes of one session (a shell's children): each window goes
/// to Pyroscope as a profile per process, labelled with its pid, each
/// holding only that process's samples.
#[test]
fn each_process_is_a_profile_of_its_own() {
    let exe = dir().join("profile2");
    common::gcc("profile.c", &exe, &[]);
    let save = dir().join("ingest2");
    std::fs::create_dir_all(&save).expect("mkdir");
    let r = Receiver::start(&["--listen", "--save", save.to_str().expect("utf-8")]);
    let e = exe.display();
    let cmd = format!("sh -c '{e} split 20000 > /dev/null & {e} split 20000 > /dev/null; wait'");
    let url = r.url.clone();
    let (_, stderr, code) = telco(&["-c", &cmd, "--pyroscope", &url, "--service", "pair"]);
    assert_eq!(code, Some(0), "{stderr}");
    let mut pids = std::collections::BTreeSet::new();
    for q in r.requests() {
        let name = q["query"]["name"].as_str().expect("a name").to_string();
        let pid: u64 = name
            .split_once("pid=")
            .and_then(|(_, p)| p.split([',', '}']).next()?.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {name}"));
        let p = pprof(std::path::Path::new(q["file"].as_str().expect("the profile field")));
        for s in p["samples"].as_array().expect("samples") {
            assert_eq!(s["labels"]["tid"], pid, "a sample of another process in {name}: {s}");
            if s["stack"][0] == "hot" {
                pids.insert(pid);
            }
        }
    }
    assert_eq!(pids.len(), 2, "hot() sampled in {pids:?}");
    std::fs::remove_dir_all(&save).ok();
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// SIGINT (and SIGTERM) in the middle of a session: what was queued is
/// sent before the tracer ends; the receiver has every span the report
/// says was delivered, and the report counts every call made.
#[test]
fn a_signal_sends_what_is_queued() {
    for sig in [2, 15] {
        let exe = target();
        let r = Receiver::start(&["--listen", "--count"]);
        let cmd = format!("{} forever", exe.display());
        // 10,000 calls made before the signal.
        let (tracer, _lines) =
            common::tracer_when_busy(&["-e", r#"probe process.function("top") {}"#, "-c", &cmd, "--otlp", &r.url]);
        // SAFETY: signalling our own child.
        unsafe { libc_kill(tracer.id() as i32, sig) };
        let o = tracer.wait_with_output().expect("exit");
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.code().is_some(), "telco-stap died of signal {sig}: {stderr}");
        let got: u64 = r.requests().iter().map(|q| q["spans"].as_u64().expect("spans")).sum();
        assert!(got > 10_000, "signal {sig}: {got} spans");
        assert!(stderr.contains(&format!("--otlp: {got} spans of {got} ")), "signal {sig}: {stderr}");
        assert!(stderr.contains("none dropped"), "signal {sig}: {stderr}");
    }
}

/// A long session (ten minutes; `TELCO_SOAK_SECONDS` sets another, five
/// at least) at a
/// steady 20,000 calls a second, streamed as it runs: spans to an OTLP
/// receiver, a --perfetto trace rotated every 4 MB, profiles to
/// Pyroscope every 5 s. The tracer's resident size, read every second of
/// the program's, stays flat from the second minute to the last, and every
/// call is delivered or counted as dropped. `.ci/run` runs it beside the rest of
/// the suite.
#[test]
fn a_ten_minute_session_keeps_its_memory() {
    // (Five minutes at least: the first is the buffers' filling.)
    let secs: u64 = std::env::var("TELCO_SOAK_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(600).max(300);
    let exe = target();
    let files = dir().join("soak");
    std::fs::create_dir_all(&files).expect("mkdir");
    let r = Receiver::start(&["--listen", "--count"]);
    let script = r#"probe process.function("top") {} probe process.function("mid") {}
                    probe process.function("leaf").return {}"#;
    let cmd = format!("{} steady {secs}", exe.display());
    let trace = files.join("t.pftrace");
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(["-e", script, "-c", &cmd, "--otlp", &r.url, "--pyroscope", &r.url, "--push-interval", "5"])
        .args(["--export-queue", "2M", "--perfetto", trace.to_str().expect("utf-8"), "--rotate", "4M"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start telco-stap");
    let tracer_pid = tracer.id();
    // Its error output, read as it comes (nothing may block on it).
    let mut err = tracer.stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let mut rss = Vec::new();
    let mut tops = 0u64;
    for line in BufReader::new(tracer.stdout.take().expect("stdout")).lines().map_while(Result::ok) {
        if line.starts_with("tick ") {
            rss.push(common::rss_kib(tracer_pid));
        } else if let Some(n) = line.strip_prefix("tops ") {
            tops = n.parse().expect("tops N");
        }
    }
    let status = tracer.wait().expect("wait for telco-stap");
    let stderr = err.join().expect("stderr");
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(tops, secs * 100 * 50, "{stderr}");
    assert_eq!(rss.len() as u64, secs);
    // Every call delivered, counted by the receiver.
    let (mut spans, mut requests) = (0, 0);
    for q in r.requests() {
        if q["path"] == "/v1/traces" {
            spans += q["spans"].as_u64().expect("spans");
            requests += 1;
        }
    }
    // (A receiver starved of CPU may fill the small queue: what did not
    // fit is counted, never lost silently.)
    let calls = 4 * tops;
    assert!(stderr.contains(&format!("--otlp: {spans} spans of {calls} ")), "{spans} received: {stderr}");
    assert!(stderr.contains(&format!("in {requests} requests delivered to")), "{stderr}");
    let lost: u64 = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("WARNING: --otlp: ")?.split(" spans not delivered").next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(spans + lost, calls, "{stderr}");
    assert!(spans * 2 > calls, "{spans} of {calls} spans delivered");
    let samples = said(&stderr, "timer.profile samples in");
    assert!(stderr.contains(&format!("--pyroscope: {samples} of {samples} timer.profile samples")), "{stderr}");
    let rotated = std::fs::read_dir(&files).expect("the trace files").count();
    // (Some 3 bytes a call: 36 MB, nine files, in ten minutes.)
    assert!(rotated as u64 >= (secs / 100).max(1), "{rotated} trace files");
    assert!(rotated == 1 || stderr.contains(&format!(" in {rotated} files (--rotate 4 MB)")), "{stderr}");
    std::fs::remove_dir_all(&files).ok();
    // Flat: minutes 2 to 4 (the buffers filled, the symbols read, the
    // queue at its usual depth; tenths of a shorter session) against the
    // last three. The resident size moves in plateaus some 10 MB apart
    // with the machine's load (the allocator's state, the queue's depth),
    // so the test compares what a leak raises: the median and the tenth
    // percentile (each within 4 MiB; the lowest sample alone is one dip
    // of the allocator's, it failed a run with the medians flat), and
    // bounds the peak (16 MiB above).
    let minute = ((secs / 10).min(60)) as usize;
    let early = &rss[minute..4 * minute];
    let late = &rss[rss.len() - 3 * minute..];
    let median = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let low = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v[v.len() / 10]
    };
    let top = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
    let summary = format!(
        "RSS (KiB) in minutes 2-4: median {} tenth percentile {} peak {}; in the last 3: median {} tenth percentile {} peak {}: {rss:?}",
        median(early),
        low(early),
        top(early),
        median(late),
        low(late),
        top(&rss[2 * minute..])
    );
    eprintln!("{summary}");
    assert!(median(late) <= median(early) + 4 * 1024, "{summary}");
    assert!(low(late) <= low(early) + 4 * 1024, "{summary}");
    assert!(top(&rss[2 * minute..]) <= top(early) + 16 * 1024, "{summary}");
}

/// `--otlp URL` without a script: the program's profile goes, as
/// OpenTelemetry profiles only (no spans, no span report).
#[test]
fn otlp_without_a_script_sends_the_profile() {
    let exe = dir().join("profile4");
    common::gcc("profile.c", &exe, &[]);
    let r = Receiver::start(&["--listen", "--count"]);
    let cmd = format!("{} split 20000", exe.display());
    let url = r.url.clone();
    let (_, stderr, code) = telco(&["-c", &cmd, "--otlp", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    let requests = r.requests();
    assert!(requests.iter().all(|q| q["path"] == "/v1development/profiles"), "{requests:?}");
    let samples: u64 = requests.iter().map(|q| q["samples"].as_u64().expect("samples")).sum();
    assert!(samples > 0);
    let n = requests.len();
    assert!(
        stderr.contains(&format!("--otlp: {samples} of {samples} timer.profile samples in {n} of {n} profiles")),
        "{stderr}"
    );
    assert!(!stderr.contains("spans"), "{stderr}");
}

/// `trace_span()` slices are spans too, nested in the calls around them.
#[test]
fn trace_spans_are_spans() {
    let exe = target();
    let r = Receiver::start(&["--listen"]);
    let script = r#"global start
        probe process.function("top") {}
        probe process.function("mid") { start[tid()] = gettimeofday_ns() }
        probe process.function("mid").return { trace_span("mid's part", start[tid()]) }"#;
    let cmd = format!("{} nest 20", exe.display());
    let (_, stderr, code) = telco(&["-e", script, "-c", &cmd, "--otlp", &r.url]);
    assert_eq!(code, Some(0), "{stderr}");
    let all = spans(&r.requests());
    let by_id: BTreeMap<String, &Value> =
        all.iter().map(|(s, _)| (s["span_id"].as_str().unwrap().to_string(), s)).collect();
    let named = |n: &str| all.iter().filter(|(s, _)| s["name"] == n).count();
    // mid's own calls are spans too (it is probed).
    assert_eq!((named("top"), named("mid"), named("mid's part"), all.len()), (40, 40, 40, 120), "{stderr}");
    for (s, _) in all.iter().filter(|(s, _)| s["name"] == "mid's part") {
        let parent = by_id.get(s["parent"].as_str().unwrap_or("")).unwrap_or_else(|| panic!("no parent: {s}"));
        assert!(parent["name"] == "top" || parent["name"] == "mid", "{parent}");
        assert!(parent["start"].as_u64() <= s["start"].as_u64() && s["end"].as_u64() <= parent["end"].as_u64());
    }
}

/// printf lines and `trace_instant()`s go as OpenTelemetry log records
/// (`/v1/logs`), with their thread and process; `trace_counter()` values
/// are counted as not sent.
#[test]
fn printf_lines_and_instants_are_log_records() {
    let exe = target();
    let r = Receiver::start(&["--listen"]);
    let script = r#"global n
        probe process.function("top") { n++; printf("top %d\n", n); if (n % 5 == 0) trace_instant("fifth") }
        probe process.function("leaf") { trace_counter("leaves", 1) }"#;
    let cmd = format!("{} nest 20", exe.display());
    let (stdout, stderr, code) = telco(&["-e", script, "-c", &cmd, "--otlp", &r.url]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("top ")).count(), 40, "{stdout}");
    let requests = r.requests();
    let mut bodies = std::collections::BTreeSet::new();
    let (mut instants, mut records) = (0, 0);
    for q in requests.iter().filter(|q| q["path"] == "/v1/logs") {
        assert_eq!(q["encoding"], "gzip");
        for res in q["logs"].as_array().expect("logs") {
            assert_eq!(res["attributes"]["service.name"], "spans");
            assert!(res["attributes"]["process.pid"].as_i64().is_some(), "{res}");
            for rec in res["records"].as_array().expect("records") {
                records += 1;
                assert!(rec["attributes"]["thread.id"].as_i64().is_some() && rec["time"].as_u64() > Some(0), "{rec}");
                match rec["body"].as_str() {
                    Some(b) => assert!(bodies.insert(b.to_string()), "{b} twice"),
                    None => {
                        assert_eq!(rec["event_name"], "fifth", "{rec}");
                        instants += 1;
                    }
                }
            }
        }
    }
    let want: std::collections::BTreeSet<String> = (1..=40).map(|i| format!("top {i}")).collect();
    assert_eq!((bodies, instants), (want, 8));
    assert!(
        stderr.contains(&format!("with {records} of 48 log records (printf lines, trace_instant()s) in ")),
        "{stderr}"
    );
    assert!(stderr.contains("WARNING: --otlp: 80 trace_counter() values are not exported"), "{stderr}");
    assert!(stderr.contains("--otlp: 120 spans of 120 "), "{stderr}");
}
