//! How fast the trace writers turn calls into files: the writer thread
//! must keep up with the target's calls, or the spool grows and the
//! session waits for it at the end.
//!
//!     cargo bench -p telco-runtime --bench chrome
//!
//! Prints ns per call, calls per second and bytes per call for `--chrome`
//! (JSON) and `--perfetto` (protobuf, compressed): best of 5 runs of 2 M
//! calls on two threads, written to files in the temp directory. Then
//! `--otlp` in the same run: the process's CPU time (the writer, the
//! exporter thread, and a local endpoint that reads and discards) per
//! call sent as a span, against `--perfetto`'s for the same calls.

use std::time::Instant;
use telco_runtime::chrome::Chrome;
use telco_runtime::feed::Summary;
use telco_runtime::perfetto::Perfetto;

fn main() {
    let dir = std::env::temp_dir();
    let json = dir.join(format!("telco-chrome-bench-{}.json", std::process::id()));
    let proto = dir.join(format!("telco-perfetto-bench-{}.pftrace", std::process::id()));
    let n = 2_000_000u64;
    let names = ["work".to_string(), "other".to_string()];
    let clock = telco_runtime::os::sys::clock();
    // Calls 37 ticks apart lasting 45–52 ticks, alternating threads.
    let call = |i: u64| {
        (4242 + (i & 1) as u32, (i & 1) as u16, clock.tsc_base + i * 37, clock.tsc_base + i * 37 + 45 + (i & 7))
    };
    let (mut best_c, mut best_p) = (f64::MAX, f64::MAX);
    let (mut bytes_c, mut bytes_p) = (0, 0);
    for _ in 0..5 {
        let mut c = Chrome::create(&json, 4242, "bench", &names).expect("create");
        let t0 = Instant::now();
        for i in 0..n {
            let (tid, p, s, e) = call(i);
            c.span(tid, p, clock.ns(s), clock.ns(e)).expect("span");
        }
        bytes_c = c.finish().expect("finish").bytes;
        best_c = best_c.min(t0.elapsed().as_secs_f64() * 1e9 / n as f64);

        let mut p = Perfetto::create(&proto, 4242, "bench", &names).expect("create");
        let t0 = Instant::now();
        for i in 0..n {
            let (tid, probe, s, e) = call(i);
            p.call(tid, probe, s, e).expect("call");
        }
        bytes_p = p.finish(&Summary::default()).expect("finish").bytes;
        best_p = best_p.min(t0.elapsed().as_secs_f64() * 1e9 / n as f64);
    }
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&proto);
    let (otlp_cpu, perfetto_cpu, otlp_bytes) = otlp_against_perfetto(n, &proto);
    println!("| trace writer (2 M calls, 2 threads) | ns per call (best of 5) | calls per second | bytes per call |");
    println!("|---|---|---|---|");
    println!(
        "| `--chrome`: a complete event (`ph: X`) | {best_c:.1} | {:.1} M | {:.1} |",
        1e3 / best_c,
        bytes_c as f64 / n as f64
    );
    println!(
        "| `--perfetto`: a begin and an end packet, compressed | {best_p:.1} | {:.1} M | {:.2} |",
        1e3 / best_p,
        bytes_p as f64 / n as f64
    );
    println!();
    println!("| 2 M calls, 2 threads, best of 5 | CPU ns per call (all threads) | bytes per call |");
    println!("|---|---|---|");
    println!("| `--perfetto` (file) | {perfetto_cpu:.1} | {:.2} |", bytes_p as f64 / n as f64);
    println!(
        "| `--otlp` (spans, gzip'd protobuf, POSTed to a local endpoint) | {otlp_cpu:.1} | {:.1} |",
        otlp_bytes as f64 / n as f64
    );
}

/// The process's CPU time so far (every thread), in ns.
fn cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// CPU ns per call of `--otlp` (to a local endpoint that discards) and
/// of `--perfetto` (to `proto`), best of 5 each, and the bytes the
/// endpoint got in the last run.
fn otlp_against_perfetto(n: u64, proto: &std::path::Path) -> (f64, f64, u64) {
    use std::io::{Read, Write};
    use telco_runtime::feed::{Calls, TraceWriter};
    use telco_runtime::otlp::{Otlp, Settings};
    let names = ["work".to_string(), "other".to_string()];
    let clock = telco_runtime::os::sys::clock();
    // The spool's records (feed::Calls, 24 bytes each), as the trace
    // writer reads them: a batch of 43,690 at a time, as the feed's.
    let mut spool = Vec::with_capacity(n as usize * 24);
    for i in 0..n {
        spool.extend_from_slice(&(4242 + (i & 1) as u32).to_le_bytes());
        spool.extend_from_slice(&((i & 1) as u16).to_le_bytes());
        spool.extend_from_slice(&[0, 0]);
        spool.extend_from_slice(&(clock.tsc_base + i * 37).to_le_bytes());
        spool.extend_from_slice(&(45 + (i & 7)).to_le_bytes());
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let got = received.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = vec![0u8; 1 << 16];
            let mut all = Vec::new();
            // Headers, then Content-Length bytes of body.
            let need = loop {
                let k = s.read(&mut buf).unwrap_or(0);
                if k == 0 {
                    break None;
                }
                all.extend_from_slice(&buf[..k]);
                if let Some(end) = all.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&all[..end]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                        .unwrap_or(0);
                    break Some(end + 4 + len);
                }
            };
            let Some(need) = need else { continue };
            while all.len() < need {
                let k = s.read(&mut buf).unwrap_or(0);
                if k == 0 {
                    break;
                }
                all.extend_from_slice(&buf[..k]);
            }
            got.fetch_add(all.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let (mut best_o, mut best_p, mut bytes) = (f64::MAX, f64::MAX, 0);
    for _ in 0..5 {
        let before = received.load(std::sync::atomic::Ordering::Relaxed);
        let settings = Settings {
            endpoint: telco_runtime::export::Endpoint::parse(&format!("http://127.0.0.1:{port}")).expect("url"),
            url: String::new(),
            service: None,
            labels: Vec::new(),
            queue: 1 << 30,
            timeout: std::time::Duration::from_secs(60),
            verbose: false,
        };
        let c0 = cpu_ns();
        let mut o: Box<dyn TraceWriter> = Box::new(Otlp::start(settings, 4242, "bench", &names).expect("start"));
        for chunk in spool.chunks(24 * 43_690) {
            o.calls(Calls::new(chunk)).expect("calls");
            o.flush().expect("flush");
        }
        let report = o.finish(&Default::default()).expect("finish");
        assert!(report.lacks.is_empty(), "{report:?}");
        best_o = best_o.min((cpu_ns() - c0) as f64 / n as f64);
        bytes = received.load(std::sync::atomic::Ordering::Relaxed) - before;

        let c0 = cpu_ns();
        let mut p = Perfetto::create(proto, 4242, "bench", &names).expect("create");
        for chunk in spool.chunks(24 * 43_690) {
            TraceWriter::calls(&mut p, Calls::new(chunk)).expect("calls");
            TraceWriter::flush(&mut p).expect("flush");
        }
        p.finish(&Summary::default()).expect("finish");
        best_p = best_p.min((cpu_ns() - c0) as f64 / n as f64);
    }
    let _ = std::fs::remove_file(proto);
    (best_o, best_p, bytes)
}
