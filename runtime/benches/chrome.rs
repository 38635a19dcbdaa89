//! How fast the `--chrome` writer turns spans into JSON: the consumer
//! thread must keep up with the target's calls or the ring fills.
//!
//!     cargo bench -p telco-runtime --bench chrome
//!
//! Prints ns per span and spans per second (best of 5 runs of 2 M spans,
//! written to a file in the temp directory).

use std::time::Instant;
use telco_runtime::chrome::Chrome;

fn main() {
    let path =
        std::path::PathBuf::from(std::env::args().nth(1).filter(|a| !a.starts_with("--")).unwrap_or_else(|| {
            std::env::temp_dir().join(format!("telco-chrome-bench-{}.json", std::process::id())).display().to_string()
        }));
    let n = 2_000_000u64;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let mut c = Chrome::create(&path, 4242, "bench", &["work".to_string(), "other".to_string()]).expect("create");
        let base = telco_runtime::os::sys::realtime_ns();
        let t0 = Instant::now();
        for i in 0..n {
            c.span(4242 + (i & 1) as u32, (i & 1) as u16, base + i * 37, base + i * 37 + 45 + (i & 7)).expect("span");
        }
        c.finish().expect("finish");
        best = best.min(t0.elapsed().as_secs_f64() * 1e9 / n as f64);
    }
    let _ = std::fs::remove_file(&path);
    println!("| --chrome writer | ns per span (best of 5) | spans per second |");
    println!("|---|---|---|");
    println!("| complete event (`ph: X`) | {best:.1} | {:.1} M |", 1e3 / best);
}
