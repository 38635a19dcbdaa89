//! The cost of compiled handlers, called directly in a loop the way a
//! trampoline calls them (no trampoline, no patched jump: those come with
//! pass 5 in targets). Shows what the handler itself adds per hit.
//!
//!     cargo bench -p telco-runtime --bench handler
//!
//! Prints a markdown table: ns per call, best of 5 runs of 10 M calls.

use std::time::Instant;

fn compile(text: &str) -> telco_abi::artifact::Artifact {
    telco_compiler::codegen::compile_text("bench.tp", text).unwrap_or_else(|e| panic!("{e}"))
}

const CALLS: u64 = 10_000_000;

fn main() {
    let cases = [
        ("counter: `n++` on a global", "global n probe timer.s(1) { n++ } probe end { println(n) }"),
        ("array: `a[5]++`", "global a probe timer.s(1) { a[5]++ } probe end { println(a[5]) }"),
        ("statistic: `s <<< 123`", "global s probe timer.s(1) { s <<< 123 } probe end { println(@count(s)) }"),
        (
            "log histogram: `s <<< 123` with `@hist_log`",
            "global s probe timer.s(1) { s <<< 123 } probe end { print(@hist_log(s)) }",
        ),
    ];
    println!("| handler body | ns per call (best of 5) |");
    println!("|---|---|");
    for (name, text) in cases {
        let a = compile(text);
        let local = telco_runtime::session::Local::new(&a).expect("region");
        let (f, base) = local.handler(0);
        let mut ctx = vec![0u64; (a.ctx_size as usize).div_ceil(8)];
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..CALLS {
                f(base, std::hint::black_box(ctx.as_mut_ptr().cast()));
            }
            best = best.min(t.elapsed().as_secs_f64() * 1e9 / CALLS as f64);
        }
        println!("| {name} | {best:.2} |");
    }
}
