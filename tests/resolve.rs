//! Probe points resolved against real ELF files, through the real binary:
//! programs built here with gcc/g++ (normal, stripped, C++, a program with a
//! shared library found through RUNPATH), the C library, and a running
//! process found by pid. Addresses are checked against `nm`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

mod common;

fn telco(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_telco-stap")).args(args).output().expect("run telco-stap")
}

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stderr:\n{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn run(cmd: &mut Command) {
    let o = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (is the toolchain installed?)"));
    assert!(o.status.success(), "{cmd:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
}

/// Build the test programs once per test binary.
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("resolve-programs");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
        let s = |f: &str| src.join(f);
        common::compile(&[&s("resolve.c")], &dir.join("resolve"), &["-O1"]);
        common::compile(&[&s("resolve.c")], &dir.join("resolve-stripped"), &["-O1", "-rdynamic"]);
        run(Command::new("strip").arg(dir.join("resolve-stripped")));
        common::compile(&[&s("widget.cc")], &dir.join("widget"), &["-O1"]);
        common::compile(&[&s("libwork.c")], &dir.join("libwork.so"), &["-O1", "-shared", "-fPIC"]);
        let libdir = format!("-L{}", dir.display());
        common::compile(
            &[&s("app.c")],
            &dir.join("app"),
            &["-O1", &libdir, "-lwork", "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags"],
        );
        dir
    })
}

fn prog(name: &str) -> String {
    programs().join(name).display().to_string()
}

/// `nm` addresses of defined text symbols.
fn nm(path: &str) -> Vec<(String, u64)> {
    let o = Command::new("nm").arg(path).output().expect("run nm");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (a, t, n) = (it.next()?, it.next()?, it.next()?);
            matches!(t, "T" | "t" | "W" | "i")
                .then(|| (n.to_string(), u64::from_str_radix(a, 16).ok()))
                .and_then(|(n, a)| Some((n, a?)))
        })
        .collect()
}

#[test]
fn functions_of_a_program_by_glob_with_nm_addresses() {
    let p = prog("resolve");
    let out = ok(&telco(&["-l", &format!("process(\"{p}\").function(\"*\")")]));
    for f in ["work", "compute_sum", "local_helper", "main"] {
        assert!(out.contains(&format!(".function(\"{f}\")")), "{f} missing:\n{out}");
    }
    // `work` and `work_alias` share an address: probed once.
    assert!(out.contains("function(\"work\")") ^ out.contains("function(\"work_alias\")"), "{out}");
    let resolved =
        ok(&telco(&["--last-pass", "2", "-e", &format!("probe process(\"{p}\").function(\"compute_sum\") {{}}")]));
    let addr = nm(&p).into_iter().find(|(n, _)| n == "compute_sum").map(|(_, a)| a).expect("nm has compute_sum");
    assert!(resolved.contains(&format!("addr {addr:#x} ")), "nm says {addr:#x}:\n{resolved}");
}

#[test]
fn the_target_of_dash_c_is_the_default_process() {
    let p = prog("resolve");
    let out = ok(&telco(&["-c", &p, "-l", "process.function(\"work\").return"]));
    assert!(out.trim_end().ends_with(".function(\"work\").return"), "{out}");
    let o = telco(&["-l", "process.function(\"work\")"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs a target"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_stripped_binary_still_resolves_through_dynsym() {
    let p = prog("resolve-stripped");
    let out = ok(&telco(&["-l", &format!("process(\"{p}\").function(\"compute_*\")")]));
    assert!(out.contains(".function(\"compute_sum\")"), "{out}");
    let o = telco(&["-l", &format!("process(\"{p}\").function(\"local_helper\")")]);
    assert_eq!(o.status.code(), Some(1), "a static function is gone once stripped");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no function matches `local_helper`") && err.contains("stripped"), "{err}");
}

#[test]
fn cxx_functions_match_by_demangled_and_mangled_names() {
    let p = prog("widget");
    let out = ok(&telco(&["-l", &format!("process(\"{p}\").function(\"ns::Widget::draw*\")")]));
    assert!(out.contains("ns::Widget::draw(int)"), "{out}");
    assert!(out.contains("ns::Widget::draw(int, int)"), "{out}");
    let out = ok(&telco(&["-l", &format!("process(\"{p}\").function(\"ns::twice*\")")]));
    assert_eq!(out.lines().count(), 2, "two instantiations:\n{out}");
    let out = ok(&telco(&["-l", &format!("process(\"{p}\").function(\"_ZN2ns6Widget4drawEi\")")]));
    assert!(out.contains("ns::Widget::draw(int)"), "{out}");
}

#[test]
fn a_needed_library_is_found_through_runpath() {
    let app = prog("app");
    let out = ok(&telco(&["-c", &app, "-l", "process(\"libwork.so\").function(\"lib_*\")"]));
    assert!(out.contains("libwork.so\").function(\"lib_work\")"), "{out}");
    assert!(out.contains("libwork.so\").function(\"lib_other\")"), "{out}");
    // The C library comes from the same closure.
    let out = ok(&telco(&["-c", &app, "-l", "process(\"libc.so.6\").function(\"malloc\")"]));
    assert!(out.contains("libc.so.6\").function(\"malloc\")"), "{out}");
}

#[test]
fn libc_ifuncs_are_refused_with_candidates() {
    let o = telco(&["-l", "process(\"libc.so.6\").function(\"memcpy\")"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is an ifunc"), "{err}");
    // With a symbol table the help names implementations (`__memcpy_avx_...`);
    // a stripped libc has none to name, and the help says so.
    assert!(err.contains("probe an implementation instead") || err.contains("it is stripped"), "{err}");
}

#[test]
fn a_running_process_is_resolved_through_its_maps() {
    let mut child = Command::new(prog("resolve"))
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the target");
    // Ready when it says so: no sleeps.
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line, "ready\n");
    let pid = child.id().to_string();
    let out = telco(&["-p", &pid, "-l", "process(\"libc.so.6\").function(\"free\")"]);
    let out2 = telco(&["-p", &pid, "-l", "process.function(\"compute_sum\")"]);
    drop(child.stdin.take().map(|mut s| s.write_all(b"")));
    let status = child.wait().expect("wait");
    assert!(status.success());
    assert!(ok(&out).contains("libc.so.6\").function(\"free\")"));
    assert!(ok(&out2).contains("resolve\").function(\"compute_sum\")"));
}
