//! Arbitrary bytes in the shared region (the target can write any, at any
//! time) never crash, hang or blow up the tracer's readers: the event
//! consumer, the damage checks, the globals display, and a whole session
//! whose `end` probe runs against the damaged region (in the sandbox).
//! A bounded property test: each case populates the region by running the
//! real compiled probe, then overwrites bytes in the header, the ring, the
//! region's initialised parts (tables, statistics, constants) or anywhere.

use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use telco_abi::artifact::Artifact;

const SCRIPT: &str = r#"
global n, m, s, text, shown_m, shown_s
probe timer.ms(1000) {
    n++; m[n % 7] += n; s <<< n; text = sprintf("%d", n); shown_m[n] = n; shown_s <<< n
    printf("n %d %s\n", n, text)
    if (n % 3 == 0) print(@hist_log(s))
    warn(sprint(n))
}
probe end { foreach (k in m-) printf("%d %d\n", k, m[k]); printf("%d %d %d\n", @count(s), @min(s), @max(s)) }
"#;

fn artifact() -> &'static Artifact {
    static A: std::sync::OnceLock<Artifact> = std::sync::OnceLock::new();
    A.get_or_init(|| telco_compiler::codegen::compile_text("untrusted.tp", SCRIPT).unwrap_or_else(|e| panic!("{e}")))
}

/// Output collected in memory.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where a patch lands: (zone, offset within it, byte).
fn patch_at(a: &Artifact, zone: u8, at: u32) -> usize {
    let size = a.region_size as usize;
    let off = match zone {
        0 => at as usize % telco_abi::region::HEADER_SIZE,
        1 => a.ring_off as usize + at as usize % (192 + 8192),
        2 => {
            let (o, b) = &a.init[at as usize % a.init.len()];
            *o as usize + (at as usize >> 8) % b.len().max(1)
        }
        _ => at as usize,
    };
    off % size
}

/// Legitimate traffic is never taken for the target's doing: printf
/// records of 40 bytes wrap the 1 MiB ring leaving 16 bytes, which the
/// producer fills with a padding record shorter than an event header.
#[test]
fn a_ring_that_wraps_is_not_corrupt() {
    let a = telco_compiler::codegen::compile_text(
        "wrap.tp",
        "global n probe timer.s(1) { n++; printf(\"%d %s\\n\", n, \"abc\") }",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.ring_size, 1 << 20);
    let local = telco_runtime::session::Local::new(&a).expect("region and code");
    let mut lines = 0;
    for _ in 0..70 {
        for _ in 0..1000 {
            local.call_probe(0);
        }
        let text = local.drain_text().expect("drain");
        assert!(!text.contains("ERROR"), "{text}");
        lines += text.lines().count();
    }
    assert_eq!(lines, 70_000);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_region_bytes_never_crash_the_tracer(
        calls in 1usize..40,
        patches in prop::collection::vec((0u8..4, any::<u32>(), any::<u8>()), 1..300),
    ) {
        let a = artifact();
        let local = telco_runtime::session::Local::new(a).expect("region and code");
        for _ in 0..calls {
            local.call_probe(0);
        }
        let base = local.region().base();
        for &(zone, at, byte) in &patches {
            // SAFETY: an offset inside the region (patch_at takes it modulo
            // the region's size); nothing else runs on it now.
            unsafe { *base.add(patch_at(a, zone, at)) = byte };
        }
        let _ = local.drain_text();
        let _ = local.region().damage(a);
        // SAFETY: the whole region, mapped for the Local's life.
        let bytes = unsafe { std::slice::from_raw_parts(base, a.region_size as usize) };
        let _ = telco_runtime::render::display_globals(bytes, a);
        // A whole session on it: the end probe runs in the sandbox.
        let sink = Sink::default();
        let cfg = telco_runtime::session::Config {
            timeout: Some(std::time::Duration::from_millis(1)),
            output: Box::new(sink.clone()),
            messages: Box::new(sink.clone()),
            traces: None,
            flight: None,
            suppress_warnings: false,
            profile: None,
            off_cpu: false,
        };
        prop_assert!(local.run(cfg).is_ok());
    }
}
