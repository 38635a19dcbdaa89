//! How fast the trace writers turn calls into files: the writer thread
//! must keep up with the target's calls, or the spool grows and the
//! session waits for it at the end.
//!
//!     cargo bench -p telco-runtime --bench chrome
//!
//! Prints ns per call, calls per second and bytes per call for `--chrome`
//! (JSON) and `--perfetto` (protobuf, compressed): best of 5 runs of 2 M
//! calls on two threads, written to files in the temp directory.

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
}
