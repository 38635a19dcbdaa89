//! Folding a trust domain's region into the session's (`runtime/src/
//! merge.rs`): two regions of one compiled script, one the session's and
//! one a domain's seeded from it, each updated by the real compiled code;
//! after the fold, the session's end probe sees what one region that took
//! every update would hold.

use telco_abi::artifact::{Artifact, Merge};
use telco_runtime::merge::{fold, seed, Mem};
use telco_runtime::session::Local;

fn compile(text: &str) -> Artifact {
    telco_compiler::codegen::compile_text("merge.tp", text).unwrap_or_else(|e| panic!("{e}"))
}

/// Say how targets change each global (these timer probes stand for the
/// target's: pass 3 sees only tracer-side code in them).
fn merges(a: &mut Artifact, kinds: &[(&str, Merge)]) {
    for (name, m) in kinds {
        let g = a.globals.iter_mut().find(|g| g.name == *name).unwrap_or_else(|| panic!("no global {name}"));
        g.merge = *m;
    }
}

fn mem(l: &Local<'_>, a: &Artifact) -> Mem {
    // SAFETY: the region is mapped for the Local's life, region_size bytes.
    unsafe { Mem::new(l.region().base(), a.region_size as usize) }
}

const SCRIPT: &str = r#"
global n, a, s, st, name, kept, del, v
probe begin { name = "begin"; kept = 7; del["gone"] = 1; del["stays"] = 2; v = 100 }
probe timer.ms(1000) { n += 1; a["m", 1] += 1; a["both", 2] += 10; s <<< 1; st["k"] <<< 4 }
probe timer.ms(1001) { n += 2; a["d", 3] += 1; a["both", 2] += 20; s <<< 9; st["k"] <<< 6; st["j"] <<< 1 }
probe timer.ms(1002) { name = "domain"; delete del["gone"]; del["new"] = 3 }
probe end {
    printf("n=%d s=%d/%d/%d/%d name=%s kept=%d v=%d\n", n, @count(s), @min(s), @max(s), @sum(s), name, kept, v)
    foreach ([k, i] in a+) printf("a[%s,%d]=%d\n", k, i, a[k, i])
    foreach (k in st+) printf("st[%s]=%d/%d/%d\n", k, @count(st[k]), @min(st[k]), @max(st[k]))
    foreach (k in del+) printf("del[%s]=%d\n", k, del[k])
}
"#;

#[test]
fn a_domain_folds_into_the_session_as_one_region_would_hold_it() {
    let mut a = compile(SCRIPT);
    merges(
        &mut a,
        &[
            ("n", Merge::Add),
            ("a", Merge::Add),
            ("s", Merge::Add),
            ("st", Merge::Add),
            ("name", Merge::Assign),
            ("del", Merge::Assign),
            ("kept", Merge::Untouched),
            ("v", Merge::Untouched),
        ],
    );
    let main = Local::new(&a).expect("region");
    let dom = Local::new(&a).expect("region");
    main.call_probe(0);
    let snap = seed(&mem(&main, &a), &mem(&dom, &a), &a);
    for _ in 0..3 {
        main.call_probe(1);
    }
    for _ in 0..5 {
        dom.call_probe(2);
    }
    dom.call_probe(3);
    let (warnings, errors) = fold(&mem(&main, &a), &mem(&dom, &a), &snap, &a, "user 33");
    assert_eq!((warnings, errors), (vec![], vec![]));
    main.call_probe(4);
    assert_eq!(
        main.drain_text().expect("drain"),
        "n=13 s=8/1/9/48 name=domain kept=7 v=100\n\
         a[m,1]=3\na[d,3]=5\na[both,2]=130\n\
         st[j]=5/1/1\nst[k]=8/4/6\n\
         del[stays]=2\ndel[new]=3\n"
    );
}

#[test]
fn a_scalar_assigned_on_both_sides_keeps_the_domains_and_says_so() {
    let mut a = compile(SCRIPT);
    merges(&mut a, &[("name", Merge::Assign)]);
    let main = Local::new(&a).expect("region");
    let dom = Local::new(&a).expect("region");
    main.call_probe(0);
    let snap = seed(&mem(&main, &a), &mem(&dom, &a), &a);
    dom.call_probe(3);
    // The session's own change meanwhile.
    main.call_probe(0);
    let m = mem(&main, &a);
    let name = a.globals.iter().find(|g| g.name == "name").expect("name").offset as usize;
    m.put(name + 8, b"other\0");
    let (warnings, _) = fold(&m, &mem(&dom, &a), &snap, &a, "user 33");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("global name was assigned both"), "{warnings:?}");
}

#[test]
fn a_forged_statistic_is_refused_and_the_sessions_stays_whole() {
    let mut a = compile(SCRIPT);
    merges(&mut a, &[("s", Merge::Add), ("n", Merge::Add)]);
    let main = Local::new(&a).expect("region");
    let dom = Local::new(&a).expect("region");
    let snap = seed(&mem(&main, &a), &mem(&dom, &a), &a);
    main.call_probe(1);
    dom.call_probe(2);
    let d = mem(&dom, &a);
    let s = a.globals.iter().find(|g| g.name == "s").expect("s").offset as usize;
    d.set_i64(s, -5);
    let (_, errors) = fold(&mem(&main, &a), &d, &snap, &a, "user 33");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("corrupted statistic s"), "{errors:?}");
    main.call_probe(4);
    let out = main.drain_text().expect("drain");
    assert!(out.starts_with("n=3 s=1/1/1/1 "), "{out}");
}

#[test]
fn an_array_that_overflows_says_so() {
    let mut a = compile(
        r#"
global a[2]
probe timer.ms(1000) { a[1]++; a[2]++ }
probe timer.ms(1001) { a[1]++; a[3]++ }
probe end { foreach (k in a+) printf("%d=%d\n", k, a[k]) }
"#,
    );
    merges(&mut a, &[("a", Merge::Add)]);
    let main = Local::new(&a).expect("region");
    let dom = Local::new(&a).expect("region");
    let snap = seed(&mem(&main, &a), &mem(&dom, &a), &a);
    main.call_probe(0);
    dom.call_probe(1);
    let (_, errors) = fold(&mem(&main, &a), &mem(&dom, &a), &snap, &a, "user 33");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("Array overflow, check MAXMAPENTRIES: 1 element(s) of a"), "{errors:?}");
    main.call_probe(2);
    assert_eq!(main.drain_text().expect("drain"), "2=1\n1=2\n");
}
