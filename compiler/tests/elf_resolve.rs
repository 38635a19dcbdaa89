//! Probe-point resolution against real ELF files (`telco_compiler::elf`).
//!
//! The programs are built at test time from the repository's `tests/programs/`
//! (shared with the end-to-end tests) with gcc and
//! g++; without them these tests fail and say why (they never pass silently).
//! Addresses are checked against `nm`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use telco_compiler::elf::{
    find_module, find_on_path, load_closure, resolve_library, ElfError, Function, Machine, Module, ModuleKind,
    SkipReason,
};

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs")
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("elf-resolve").join(test);
    let _ = fs::remove_dir_all(&dir);
    if let Err(e) = fs::create_dir_all(&dir) {
        panic!("cannot create scratch directory {}: {e}", dir.display());
    }
    dir
}

/// Runs a build tool; a missing tool or a failed build fails the test with the reason.
fn run(tool: &str, args: &[&str]) {
    let out = match Command::new(tool).args(args).output() {
        Ok(out) => out,
        Err(e) => panic!(
            "cannot run `{tool}` ({e}): this test builds its test programs at test time and \
             cannot run without {tool}; install it (gcc, g++ and binutils)"
        ),
    };
    assert!(out.status.success(), "`{tool} {}` failed:\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

fn path_str(p: &Path) -> &str {
    match p.to_str() {
        Some(s) => s,
        None => panic!("non-UTF-8 scratch path {}", p.display()),
    }
}

fn load(p: &Path) -> Module {
    match Module::load(p) {
        Ok(m) => m,
        Err(e) => panic!("loading {}: {e}", p.display()),
    }
}

/// The C test program, built with `extra` flags into `dir/name`. Built with
/// `-fcf-protection` so that every function starts with `endbr64` on x86_64,
/// which lets the tests check `file_offset` against the file's bytes.
fn build_prog(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let src = sources().join("elf-prog.c");
    let mut args = vec!["-O1", "-fno-inline", "-o", path_str(&out), path_str(&src)];
    if cfg!(target_arch = "x86_64") {
        args.push("-fcf-protection=full");
    }
    args.extend_from_slice(extra);
    run("gcc", &args);
    out
}

fn names_of(fs: &[&Function]) -> Vec<String> {
    let mut v: Vec<String> = fs.iter().map(|f| f.names[0].clone()).collect();
    v.sort();
    v
}

fn the_function<'m>(m: &'m Module, name: &str) -> &'m Function {
    let (found, _) = m.match_functions(name);
    assert_eq!(found.len(), 1, "expected exactly one function matching {name} in {}, got {found:?}", m.path.display());
    found[0]
}

/// `nm -S` (or `nm -D -S`) output: name → (address, size if shown, type letter).
/// Versioned dynamic names (`memcpy@@GLIBC_2.14`) are keyed without the version.
fn nm(path: &Path, dynamic: bool) -> HashMap<String, Vec<(u64, Option<u64>, char)>> {
    let mut args = vec!["-S", "--defined-only"];
    if dynamic {
        args.push("-D");
    }
    args.push(path_str(path));
    let out = match Command::new("nm").args(&args).output() {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!("nm {} failed: {}", path.display(), String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("cannot run nm ({e}): this test compares addresses with nm; install binutils"),
    };
    let mut map: HashMap<String, Vec<(u64, Option<u64>, char)>> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (addr, size, kind, name) = match fields.as_slice() {
            [a, s, k, n] => (*a, Some(*s), *k, *n),
            [a, k, n] => (*a, None, *k, *n),
            _ => continue,
        };
        let (Ok(addr), Some(kind)) = (u64::from_str_radix(addr, 16), kind.chars().next()) else { continue };
        let size = size.and_then(|s| u64::from_str_radix(s, 16).ok());
        let name = name.split('@').next().unwrap_or(name).to_string();
        map.entry(name).or_default().push((addr, size, kind));
    }
    map
}

/// Every function name we report is a text symbol at that address in `nm`,
/// and every sized text symbol in `nm` is one of our functions.
fn check_against_nm(m: &Module, dynamic: bool) {
    let symbols = nm(&m.path, dynamic);
    for f in &m.functions {
        // A stripped file's functions without a symbol (`.eh_frame`):
        // named after their file offset, at an address no symbol has.
        if m.stripped && f.names.len() == 1 && f.names[0] == format!("sub_{:x}", f.file_offset) {
            assert!(
                !symbols
                    .values()
                    .flatten()
                    .any(|&(addr, _, k)| addr == f.addr && matches!(k, 'T' | 't' | 'W' | 'w' | 'i')),
                "{} at {:#x} has a symbol in {}",
                f.names[0],
                f.addr,
                m.path.display()
            );
            continue;
        }
        for name in &f.names {
            let base = name.split('@').next().unwrap_or(name);
            let entries = symbols.get(base).map(Vec::as_slice).unwrap_or(&[]);
            assert!(
                entries.iter().any(|&(addr, _, _)| addr == f.addr),
                "{base} at {:#x} in {}: nm says {entries:x?}",
                f.addr,
                m.path.display()
            );
        }
    }
    for (name, entries) in &symbols {
        for &(addr, size, kind) in entries {
            if matches!(kind, 'T' | 't' | 'W' | 'w' | 'i') && size.is_some_and(|s| s > 0) {
                let f = m.functions.iter().find(|f| f.addr == addr);
                assert!(
                    f.is_some_and(|f| f.names.iter().any(|n| n.split('@').next() == Some(name.as_str()))),
                    "nm has {kind} {name} at {addr:#x} in {}, we have {f:?}",
                    m.path.display()
                );
            }
        }
    }
}

/// On x86_64, each function built with `-fcf-protection` starts with `endbr64`.
fn check_file_offsets(m: &Module, names: &[&str]) {
    if !cfg!(target_arch = "x86_64") {
        println!("note: file offsets are checked through endbr64 on x86_64 only; this host is not x86_64");
        return;
    }
    let bytes = match fs::read(&m.path) {
        Ok(b) => b,
        Err(e) => panic!("reading {}: {e}", m.path.display()),
    };
    for name in names {
        let f = the_function(m, name);
        let at = f.file_offset as usize;
        assert_eq!(
            bytes.get(at..at + 4),
            Some(&[0xf3, 0x0f, 0x1e, 0xfa][..]),
            "{name}: no endbr64 at file offset {at:#x}"
        );
    }
}

#[test]
fn c_program_functions_aliases_and_skipped_symbols() {
    let dir = scratch("c-program");
    let prog = build_prog(&dir, "prog", &[]);
    let m = load(&prog);

    assert_eq!(m.kind, ModuleKind::PositionIndependent, "gcc builds PIEs by default here");
    if cfg!(target_arch = "x86_64") {
        assert_eq!(m.machine, Machine::X86_64);
    }
    assert!(!m.stripped);
    assert_eq!(m.path, fs::canonicalize(&prog).ok().unwrap_or_default());
    assert!(m.needed.iter().any(|n| n == "libc.so.6"), "needed: {:?}", m.needed);
    assert!(m.functions.windows(2).all(|w| w[0].addr < w[1].addr), "functions sorted by distinct address");
    check_against_nm(&m, false);
    check_file_offsets(&m, &["work", "weak_fn", "__compute_generic", "main"]);

    // The alias and its target are one function, both names kept, the plain one first.
    let work = the_function(&m, "work");
    assert_eq!(work.names, vec!["work".to_string(), "work_alias".to_string()]);
    assert_eq!(work.demangled(), &[None, None]);
    assert!(work.global && !work.ifunc && work.size > 0);
    assert_eq!(the_function(&m, "work_alias").addr, work.addr);
    let (both, _) = m.match_functions("work*");
    assert_eq!(both.len(), 1, "an alias matched twice: {both:?}");

    assert!(!the_function(&m, "helper_static").global, "a static function is local");
    assert!(the_function(&m, "weak_fn").global, "a weak function counts as global");

    // Globs: `?`, classes, no match.
    assert_eq!(names_of(&m.match_functions("w?rk").0), vec!["work"]);
    assert_eq!(names_of(&m.match_functions("[hw]e*").0), vec!["helper_static", "weak_fn"]);
    assert!(m.match_functions("no_such_function*").0.is_empty());

    // Symbols matched by name that cannot be probed come back as skipped.
    let (f, skipped) = m.match_functions("zero_label");
    assert!(f.is_empty());
    assert_eq!(
        skipped.iter().map(|s| (s.name.as_str(), s.reason)).collect::<Vec<_>>(),
        vec![("zero_label", SkipReason::ZeroSize)]
    );
    let (f, skipped) = m.match_functions("counter");
    assert!(f.is_empty());
    assert_eq!(skipped.iter().map(|s| s.reason).collect::<Vec<_>>(), vec![SkipReason::NotAFunction]);
    let (f, skipped) = m.match_functions("printf");
    assert!(f.is_empty());
    assert_eq!(skipped.iter().map(|s| s.reason).collect::<Vec<_>>(), vec![SkipReason::Undefined]);

    // The ifunc is flagged, and its implementations are found by name.
    let compute = the_function(&m, "compute");
    assert!(compute.ifunc);
    assert!(!the_function(&m, "__compute_generic").ifunc);
    assert_eq!(names_of(&m.ifunc_candidates(compute)), vec!["__compute_avx2", "__compute_generic"]);
    assert!(m.ifunc_candidates(work).is_empty());

    // function_at: start, middle, last byte, one past the end.
    assert_eq!(m.function_at(work.addr).map(|f| f.addr), Some(work.addr));
    assert_eq!(m.function_at(work.addr + work.size / 2).map(|f| f.addr), Some(work.addr));
    assert_eq!(m.function_at(work.addr + work.size - 1).map(|f| f.addr), Some(work.addr));
    assert_ne!(m.function_at(work.addr + work.size).map(|f| f.addr), Some(work.addr));
    assert!(m.function_at(0).is_none());
    assert!(m.function_at(u64::MAX).is_none());
}

#[test]
fn non_pie_executable() {
    let dir = scratch("non-pie");
    let prog = build_prog(&dir, "prog", &["-no-pie", "-fno-pie"]);
    let m = load(&prog);
    assert_eq!(m.kind, ModuleKind::Executable);
    check_against_nm(&m, false);
    check_file_offsets(&m, &["work", "main"]);
}

#[test]
fn stripped_program_uses_dynsym() {
    let dir = scratch("stripped");
    let prog = build_prog(&dir, "prog", &["-rdynamic"]);
    let stripped = dir.join("prog.stripped");
    run("strip", &["-o", path_str(&stripped), path_str(&prog)]);
    let full = load(&prog);
    let m = load(&stripped);

    assert!(m.stripped);
    assert!(!full.stripped);
    check_against_nm(&m, true);
    // Exported functions are still there, at the same addresses; statics are gone.
    for name in ["work", "weak_fn", "main", "__compute_generic"] {
        assert_eq!(the_function(&m, name).addr, the_function(&full, name).addr, "{name}");
    }
    assert_eq!(the_function(&m, "work").names, vec!["work".to_string(), "work_alias".to_string()]);
    assert!(the_function(&m, "compute").ifunc);
    assert!(m.match_functions("helper_static").0.is_empty());
    // ... but its code is still a function, from its unwind entry.
    let helper = the_function(&full, "helper_static");
    let unnamed = m.functions.iter().find(|f| f.addr == helper.addr).expect("an FDE function for helper_static");
    assert_eq!(unnamed.names, vec![format!("sub_{:x}", helper.file_offset)]);
    assert_eq!(unnamed.size, helper.size);
    check_file_offsets(&m, &["work", "weak_fn"]);
}

#[test]
fn cpp_program_matches_demangled_names() {
    let dir = scratch("cpp");
    let prog = dir.join("widget");
    let src = sources().join("widget.cc");
    run("g++", &["-O1", "-fno-inline", "-o", path_str(&prog), path_str(&src)]);
    let m = load(&prog);
    check_against_nm(&m, false);

    let demangled = |fs: &[&Function]| {
        let mut v: Vec<String> = fs.iter().filter_map(|f| f.demangled()[0].clone()).collect();
        v.sort();
        v
    };
    let (draw, _) = m.match_functions("ns::Widget::draw*");
    assert_eq!(
        demangled(&draw),
        vec!["ns::Widget::draw(double) const", "ns::Widget::draw(int)", "ns::Widget::draw(int, int)"]
    );
    // Without a wildcard: the name without its parameter list matches every overload.
    assert_eq!(m.match_functions("ns::Widget::draw").0.len(), 3);
    // The full demangled name picks one overload.
    assert_eq!(demangled(&m.match_functions("ns::Widget::draw(int)").0), vec!["ns::Widget::draw(int)"]);
    // The mangled name works too.
    let by_mangled = the_function(&m, "_ZN2ns6Widget4drawEi");
    assert_eq!(by_mangled.demangled()[0].as_deref(), Some("ns::Widget::draw(int)"));
    // `_ZNK...` is the const overload.
    assert_eq!(m.match_functions("_ZN*2ns6Widget4draw*").0.len(), 3);

    // Templates: the return type and parameters are not in the way.
    let (maxv, _) = m.match_functions("ns::maxv*");
    assert_eq!(demangled(&maxv), vec!["double ns::maxv<double>(double, double)", "int ns::maxv<int>(int, int)"]);
    assert_eq!(m.match_functions("ns::maxv<int>").0.len(), 1);

    // Everything in the namespace, and nothing outside it.
    let (all, _) = m.match_functions("ns::*");
    let all = demangled(&all);
    for expected in ["ns::free_function()", "ns::Widget::draw(int)", "int ns::maxv<int>(int, int)"] {
        assert!(all.iter().any(|d| d == expected), "ns::* lacks {expected}: {all:?}");
    }
    assert!(all.iter().all(|d| d.contains("ns::")), "ns::* matched outside ns: {all:?}");
    assert!(!all.iter().any(|d| d == "main"));

    // A static data member is matched by its demangled name and skipped.
    let (f, skipped) = m.match_functions("ns::Widget::count");
    assert!(f.is_empty());
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!((skipped[0].name.as_str(), skipped[0].reason), ("_ZN2ns6Widget5countE", SkipReason::NotAFunction));
}

#[test]
fn shared_library_through_runpath_and_rpath() {
    let dir = scratch("shared");
    let lib = dir.join("libwork.so.1");
    run(
        "gcc",
        &[
            "-shared",
            "-fPIC",
            "-O1",
            "-Wl,-soname,libwork.so.1",
            "-o",
            path_str(&lib),
            path_str(&sources().join("libwork.c")),
        ],
    );
    for (name, dtags) in [("app-runpath", "-Wl,--enable-new-dtags"), ("app-rpath", "-Wl,--disable-new-dtags")] {
        let exe = dir.join(name);
        run(
            "gcc",
            &[
                "-O1",
                "-o",
                path_str(&exe),
                path_str(&sources().join("app.c")),
                path_str(&lib),
                "-Wl,-rpath,$ORIGIN",
                dtags,
            ],
        );
        // The dynamic loader agrees that the library is found (through $ORIGIN: the
        // current directory is not the scratch directory).
        let status = Command::new(&exe).status().map(|s| s.success());
        assert!(matches!(status, Ok(true)), "{name} does not run: {status:?}");

        let main = load(&exe);
        if dtags.contains("enable") {
            assert_eq!((main.runpath.clone(), main.rpath.clone()), (vec!["$ORIGIN".to_string()], vec![]));
        } else {
            assert_eq!((main.runpath.clone(), main.rpath.clone()), (vec![], vec!["$ORIGIN".to_string()]));
        }
        assert_eq!(main.needed.first().map(String::as_str), Some("libwork.so.1"));
        let canonical_lib = fs::canonicalize(&lib).ok();
        assert_eq!(resolve_library("libwork.so.1", &main).and_then(|p| fs::canonicalize(p).ok()), canonical_lib);

        let closure = match load_closure(&exe) {
            Ok(c) => c,
            Err(e) => panic!("load_closure({}): {e}", exe.display()),
        };
        let paths: Vec<&Path> = closure.iter().map(|m| m.path.as_path()).collect();
        assert_eq!(closure[0].path, main.path, "the executable comes first");
        assert_eq!(closure[1].soname.as_deref(), Some("libwork.so.1"), "breadth first, in DT_NEEDED order: {paths:?}");
        assert!(closure.iter().any(|m| m.soname.as_deref() == Some("libc.so.6")), "{paths:?}");
        let mut unique = paths.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), paths.len(), "a module loaded twice: {paths:?}");

        let work_lib = &closure[1];
        assert_eq!(work_lib.kind, ModuleKind::PositionIndependent);
        check_against_nm(work_lib, false);
        assert!(the_function(work_lib, "lib_work").global);
        assert_eq!(work_lib.match_functions("lib_calls").1.first().map(|s| s.reason), Some(SkipReason::NotAFunction));
        // In the executable, lib_work is an import.
        assert_eq!(main.match_functions("lib_work").1.first().map(|s| s.reason), Some(SkipReason::Undefined));

        // find_module: by soname, by file name, unversioned, by path.
        for query in ["libwork.so.1", "libwork.so"] {
            match find_module(query, &closure) {
                Ok(p) => assert_eq!(Some(p), canonical_lib, "{query}"),
                Err(e) => panic!("find_module({query}): {e}"),
            }
        }
        match find_module(path_str(&lib), &closure) {
            Ok(p) => assert_eq!(Some(p), canonical_lib),
            Err(e) => panic!("find_module by path: {e}"),
        }
        match find_module(name, &closure) {
            Ok(p) => assert_eq!(p, main.path, "the executable by file name"),
            Err(e) => panic!("find_module({name}): {e}"),
        }
    }
}

#[test]
fn versioned_symbols_match_without_their_version() {
    let dir = scratch("versioned");
    let lib = dir.join("libversioned.so");
    let map = format!("-Wl,--version-script={}", path_str(&sources().join("libversioned.map")));
    run("gcc", &["-shared", "-fPIC", "-O1", &map, "-o", path_str(&lib), path_str(&sources().join("libversioned.c"))]);
    let m = load(&lib);
    check_against_nm(&m, false);

    // The plain name is the default version (what programs link against);
    // the old one (`greet@VER_1`, named with its version in .dynsym too)
    // only by its versioned name: a glob's `*` does not reach into it.
    let (greet, _) = m.match_functions("greet");
    assert_eq!(greet.len(), 1, "{greet:?}");
    assert_eq!(greet[0].names, vec!["greet".to_string(), "greet@@VER_2".to_string(), "greet_v2".to_string()]);
    assert!(greet[0].global && greet[0].demangled().iter().all(Option::is_none));
    assert_eq!(m.match_functions("gree?").0.len(), 1);
    let (old, _) = m.match_functions("greet@VER_1");
    assert_eq!(old.len(), 1, "{old:?}");
    assert_eq!(old[0].names, vec!["greet@VER_1".to_string(), "greet_v1".to_string()]);
    assert_eq!(m.matched_name("greet@VER_1", old[0]).0, "greet@VER_1");
    // The raw versioned names pick one each.
    assert_eq!(m.match_functions("greet@@VER_2").0.len(), 1);
    assert_eq!(m.match_functions("greet@@*").0.first().map(|f| f.addr), Some(greet[0].addr));
    assert_eq!(m.match_functions("greet@*").0.len(), 2);
}

#[test]
fn libc_from_the_closure_of_sh() {
    let closure = match load_closure(Path::new("/bin/sh")) {
        Ok(c) => c,
        Err(e) => panic!("load_closure(/bin/sh): {e}"),
    };
    let libc_path = match find_module("libc.so.6", &closure) {
        Ok(p) => p,
        Err(e) => panic!("find_module(libc.so.6): {e}"),
    };
    let libc = match closure.iter().find(|m| m.path == libc_path) {
        Some(m) => m,
        None => panic!("find_module returned {} which is not in the closure", libc_path.display()),
    };
    assert_eq!(libc.soname.as_deref(), Some("libc.so.6"));
    // With nothing loaded, the cache finds the same file.
    match find_module("libc.so.6", &[]) {
        Ok(p) => assert_eq!(p, libc_path),
        Err(e) => panic!("find_module(libc.so.6, []): {e}"),
    }
    check_against_nm(libc, libc.stripped);

    let malloc = the_function(libc, "malloc");
    assert!(malloc.global && !malloc.ifunc);
    assert_eq!(libc.function_at(malloc.addr + 1).map(|f| f.addr), Some(malloc.addr));

    let (mem, _) = libc.match_functions("mem*");
    let mem_names: Vec<&str> = mem.iter().flat_map(|f| f.names.iter().map(String::as_str)).collect();
    for expected in ["memcpy", "memset", "memmove", "memchr", "memcmp"] {
        assert!(
            mem_names.iter().any(|n| n.split('@').next() == Some(expected)),
            "mem* lacks {expected}: {mem_names:?}"
        );
    }
    assert!(mem.iter().all(|f| f.names.iter().any(|n| n.starts_with("mem"))));

    let ifuncs: Vec<&Function> =
        ["memcpy", "strlen"].iter().flat_map(|n| libc.match_functions(n).0).filter(|f| f.ifunc).collect();
    assert!(!ifuncs.is_empty(), "neither memcpy nor strlen is an ifunc in {}", libc.path.display());
    let candidates: Vec<&Function> = ifuncs.iter().flat_map(|f| libc.ifunc_candidates(f)).collect();
    if libc.stripped {
        // glibc's implementations (__memcpy_avx_unaligned_erms, ...) are local
        // symbols, only in .symtab; the ifunc case with candidates is covered by
        // c_program_functions_aliases_and_skipped_symbols.
        println!(
            "note: {} has no .symtab here, so its ifunc implementations cannot be listed \
             (found {} candidates through .dynsym)",
            libc.path.display(),
            candidates.len()
        );
    } else {
        assert!(
            !candidates.is_empty(),
            "no implementations found for {:?}",
            ifuncs.iter().map(|f| &f.names).collect::<Vec<_>>()
        );
    }
    assert!(candidates.iter().all(|c| !c.ifunc));
}

#[test]
fn closure_of_ls_is_breadth_first_without_duplicates() {
    let closure = match load_closure(Path::new("/bin/ls")) {
        Ok(c) => c,
        Err(e) => panic!("load_closure(/bin/ls): {e}"),
    };
    let ls = &closure[0];
    // Breadth first: ls's own DT_NEEDED come next, in order.
    let next: Vec<Option<&str>> = closure[1..=ls.needed.len()].iter().map(|m| m.soname.as_deref()).collect();
    let expected: Vec<Option<&str>> = ls.needed.iter().map(|n| Some(n.as_str())).collect();
    assert_eq!(next, expected);
    let mut paths: Vec<&Path> = closure.iter().map(|m| m.path.as_path()).collect();
    paths.sort();
    paths.dedup();
    assert_eq!(paths.len(), closure.len(), "a module loaded twice");
    // Every DT_NEEDED of every module is in the closure.
    for m in &closure {
        for n in &m.needed {
            assert!(
                closure.iter().any(|o| o.soname.as_deref() == Some(n.as_str())),
                "{n} needed by {} missing",
                m.path.display()
            );
        }
    }
}

#[test]
fn finding_programs_and_modules() {
    let sh = find_on_path("sh");
    assert!(sh.as_ref().is_some_and(|p| p.is_file()), "sh not on PATH: {sh:?}");
    assert_eq!(find_on_path("/bin/sh"), Some(PathBuf::from("/bin/sh")));
    assert_eq!(find_on_path("telco-stap-no-such-program-here"), None);
    assert_eq!(find_on_path(""), None);

    match find_module("sh", &[]) {
        Ok(p) => assert_eq!(Some(p), sh.and_then(|p| fs::canonicalize(p).ok())),
        Err(e) => panic!("find_module(sh): {e}"),
    }
    for missing in ["libtelco-no-such-library.so.9", "telco-no-such-program", "/no/such/path"] {
        match find_module(missing, &[]) {
            Err(e @ ElfError::ModuleNotFound { .. }) => {
                assert!(e.to_string().contains(missing), "message does not name {missing}: {e}")
            }
            other => panic!("find_module({missing}): expected ModuleNotFound, got {other:?}"),
        }
    }
    // libm is not needed by sh: found through the cache or the default directories.
    match find_module("libm.so.6", &[]) {
        Ok(p) => assert!(load(&p).soname.as_deref() == Some("libm.so.6")),
        Err(e) => panic!("find_module(libm.so.6): {e}"),
    }
}

#[test]
fn malformed_files_are_errors_not_panics() {
    let dir = scratch("malformed");
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        if let Err(e) = fs::write(&p, bytes) {
            panic!("writing {}: {e}", p.display());
        }
        p
    };

    let empty = write("empty", b"");
    assert!(matches!(Module::load(&empty), Err(ElfError::NotElf { .. })));
    let text = write("text", b"not an ELF file\n");
    match Module::load(&text) {
        Err(e @ ElfError::NotElf { .. }) => assert!(e.to_string().contains(path_str(&text)), "{e}"),
        other => panic!("expected NotElf, got {other:?}"),
    }
    // A script (a pyenv shim, say) names its interpreter and what to do.
    let shim = write("shim", b"#!/usr/bin/env bash\nexec pyenv exec python3 \"$@\"\n");
    match Module::load(&shim) {
        Err(e @ ElfError::Script { .. }) => {
            let e = e.to_string();
            assert!(e.contains(path_str(&shim)) && e.contains("a script run by `bash`") && e.contains("pyenv"), "{e}")
        }
        other => panic!("expected Script, got {other:?}"),
    }
    let py = write("tool.py", b"#!/usr/bin/python3.11 -u\nprint(1)\n");
    match Module::load(&py) {
        Err(e @ ElfError::Script { .. }) => {
            assert!(e.to_string().contains("probe process(\"/usr/bin/python3.11\")"), "{e}")
        }
        other => panic!("expected Script, got {other:?}"),
    }
    let missing = dir.join("missing");
    match Module::load(&missing) {
        Err(e @ ElfError::Io { .. }) => assert!(e.to_string().contains(path_str(&missing)), "{e}"),
        other => panic!("expected Io, got {other:?}"),
    }
    // Directories, devices and FIFOs are refused before reading: /dev/zero
    // would be read until memory runs out, a FIFO would block forever.
    for special in [dir.as_path(), std::path::Path::new("/dev/zero")] {
        match Module::load(special) {
            Err(e @ ElfError::Malformed { .. }) => assert!(e.to_string().contains("not a regular file"), "{e}"),
            other => panic!("expected 'not a regular file' for {}, got {other:?}", special.display()),
        }
    }

    // A relocatable object is ELF but not something a process maps.
    let object = dir.join("prog.o");
    run("gcc", &["-c", "-o", path_str(&object), path_str(&sources().join("elf-prog.c"))]);
    assert!(matches!(Module::load(&object), Err(ElfError::Unsupported { .. })));

    let prog = build_prog(&dir, "prog", &[]);
    let good = match fs::read(&prog) {
        Ok(b) => b,
        Err(e) => panic!("reading {}: {e}", prog.display()),
    };
    assert!(Module::load(&prog).is_ok());

    // Truncated anywhere: an error (the section headers are at the end), never a panic.
    let mut cuts: Vec<usize> =
        vec![1, 4, 5, 16, 52, 63, 64, 65, 100, 500, good.len() / 2, good.len() - 64, good.len() - 1];
    cuts.extend((0..good.len()).step_by(997));
    for cut in cuts {
        let p = write("truncated", &good[..cut]);
        match Module::load(&p) {
            Err(e) => assert!(e.to_string().contains(path_str(&p)), "the message names the file: {e}"),
            Ok(m) => {
                panic!("truncated to {cut} of {} bytes and still loaded: {} functions", good.len(), m.functions.len())
            }
        }
    }

    // Corrupted headers and tables: any result but a panic. A fixed
    // pseudo-random sequence keeps failures reproducible.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let header_and_tables: Vec<usize> =
        (0..good.len().min(4096)).chain(good.len().saturating_sub(4096)..good.len()).collect();
    let (mut ok, mut err) = (0, 0);
    for _ in 0..400 {
        let mut bytes = good.clone();
        for _ in 0..1 + next() % 8 {
            let at = header_and_tables[(next() % header_and_tables.len() as u64) as usize];
            bytes[at] = next() as u8;
        }
        let p = write("corrupted", &bytes);
        match Module::load(&p) {
            Ok(m) => {
                // Whatever loaded must be usable without panicking.
                ok += 1;
                let _ = m.match_functions("*");
                let _ = m.match_functions("ns::*");
                for f in &m.functions {
                    let _ = m.ifunc_candidates(f);
                    let _ = m.function_at(f.addr);
                }
            }
            Err(_) => err += 1,
        }
    }
    println!("corrupted files: {ok} loaded, {err} rejected");
}
