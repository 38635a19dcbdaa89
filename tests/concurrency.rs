//! The shared region under concurrent writers: the same compiled handler
//! called from many threads at once (as trampolines in a multi-threaded
//! target will) must lose no count, insert no key twice and keep
//! statistics exact. Runs the real compiled code in this process.

fn compile(text: &str) -> telco_abi::artifact::Artifact {
    telco_compiler::codegen::compile_text("concurrency.tp", text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn eight_threads_lose_nothing() {
    let a = compile(
        r#"
global n, per, s, m, x
probe timer.ms(1000) { n++; per[tid()] += 1; s <<< 2; m[n % 100] = 1; x += 3 }
probe end {
    t = 0; foreach (k in per) t += per[k]
    c = 0; foreach (k in m) c++
    printf("%d %d %d %d %d %d %d\n", n, @count(s), @sum(s), t, c, x, @min(s))
}
"#,
    );
    let local = telco_runtime::session::Local::new(&a).expect("region and code");
    const THREADS: usize = 8;
    const CALLS: usize = 50_000;
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..CALLS {
                    local.call_probe(0);
                }
            });
        }
    });
    local.call_probe(1);
    let n = THREADS * CALLS;
    assert_eq!(local.drain_text().expect("drain"), format!("{n} {n} {} {n} 100 {} 2\n", 2 * n, 3 * n));
}
