//! The shared region under concurrent writers: the same compiled handler
//! called from many threads at once (as trampolines in a multi-threaded
//! target will) must lose no count, insert no key twice and keep
//! statistics exact. Runs the real compiled code in this process.

use telco_compiler::elaborate::{self, NoProcesses, TargetSpec};
use telco_compiler::{parse, ParseConfig, SourceMap};

fn compile(text: &str) -> telco_abi::artifact::Artifact {
    let pcfg = ParseConfig::default();
    let mut sources = SourceMap::new();
    let id = sources.add("concurrency.tp", text);
    let (script, diags) = parse(&sources, id, &pcfg);
    assert!(diags.is_empty(), "{diags:?}");
    let cfg = elaborate::Config {
        parse: &pcfg,
        tapsets: elaborate::tapsets::builtin(),
        target: TargetSpec::default(),
        query: &NoProcesses,
        args: &[],
        guru: false,
    };
    let mut ds = Vec::new();
    let program = elaborate::elaborate(&mut sources, id, &script, &cfg, &mut ds).expect("elaborates");
    assert!(ds.iter().all(|d| d.severity != telco_compiler::Severity::Error), "{ds:?}");
    let t = telco_compiler::codegen::translate(&program, &sources, Default::default()).expect("translates");
    telco_compiler::codegen::codegen(t, &program).expect("links")
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
    let local = telco_runtime::local::Local::new(&a).expect("region and code");
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
