//! Go programs (issue: Go programs named, probed and profiled safely).
//! Built here with Debian's golang-go (Go 1.19), stripped (`-s -w`), as a
//! position-independent and as a fixed-address executable; Debian's fzf
//! (a stripped Go program). `.ci/run` installs both.
//!
//! * Names: Go functions are listed by their Go names from `.gopclntab`,
//!   which stripped binaries keep.
//! * Profiles: the CPU split between main.hot and main.cold shows under
//!   their Go names.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// tests/programs/gospin.go built into `dir` with `flags`.
fn go_build(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let src = common::repo().join("tests/programs/gospin.go");
    let out = Command::new("go")
        .arg("build")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        // Everything of the build in the test's scratch directory; no
        // network (the program has no dependencies).
        .env("GOCACHE", dir.join("gocache"))
        .env("GOPATH", dir.join("gopath"))
        .env("HOME", dir)
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-buildvcs=false")
        .output()
        .expect("run go build (Debian's golang-go: .ci/run installs it)");
    assert!(out.status.success(), "go build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

fn builds(dir: &Path) -> Vec<PathBuf> {
    vec![
        go_build(dir, "spin-pie", &["-ldflags=-s -w", "-buildmode=pie"]),
        go_build(dir, "spin-exe", &["-ldflags=-s -w"]),
    ]
}

#[test]
fn stripped_go_functions_are_listed_by_their_go_names() {
    let dir = common::scratch("go-names");
    for exe in builds(&dir) {
        let (out, err, code) =
            common::telco_run(&["-l", &format!("process(\"{}\").function(\"main.*\")", exe.display())]);
        assert_eq!(code, Some(0), "{err}");
        let names: Vec<&str> =
            out.lines().filter_map(|l| l.split(".function(\"").nth(1)?.strip_suffix("\")")).collect();
        assert_eq!(names, ["main.cold", "main.hot", "main.main"], "{}: {out}", exe.display());
    }
    // Debian's fzf: its thousands of Go functions, by name.
    let fzf = "/usr/bin/fzf";
    let (out, err, code) = common::telco_run(&["-l", &format!("process(\"{fzf}\").function(\"*\")")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().count() > 2000, "{} functions", out.lines().count());
    for name in ["main.main", "runtime.mallocgc", "runtime.goexit"] {
        assert!(out.contains(&format!(".function(\"{name}\")")), "fzf's {name} is not listed");
    }
}

#[test]
fn go_profiles_are_named_from_the_function_table() {
    let dir = common::scratch("go-profile");
    for exe in builds(&dir) {
        let folded = dir.join("p.folded");
        let (out, err, code) = common::telco_run(&[
            "-e",
            "probe timer.profile.hz(999) {}",
            "-c",
            &format!("{} 300", exe.display()),
            "--folded",
            folded.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{err}");
        assert!(out.contains("done true"), "{out}");
        let text = std::fs::read_to_string(&folded).expect("the folded file");
        let count = |leaf: &str| -> u64 {
            text.lines()
                .filter_map(|l| l.rsplit_once(' '))
                .filter(|(s, _)| s.rsplit(';').next() == Some(leaf))
                .map(|(_, n)| n.parse::<u64>().unwrap_or(0))
                .sum()
        };
        let (h, c) = (count("main.hot"), count("main.cold"));
        assert!(h + c >= 200, "{}: too few samples: {h} + {c}\n{text}", exe.display());
        let pct = 100.0 * h as f64 / (h + c) as f64;
        assert!((70.0..=80.0).contains(&pct), "{}: main.hot has {pct:.1}%, not 75 ± 5", exe.display());
    }
}

/// A probe on a Go function is refused, located and with why (a probe
/// there would run on a goroutine stack Go grows and moves), never armed:
/// the session fails before the program runs.
#[test]
fn probes_on_go_functions_are_refused_with_why() {
    let dir = common::scratch("go-refused");
    let exe = go_build(&dir, "spin", &["-ldflags=-s -w"]);
    for point in ["process.function(\"main.hot\")", "process.function(\"main.*\").return"] {
        let script = format!("probe {point} {{ }}");
        let (out, err, code) = common::telco_run(&["-e", &script, "-c", &format!("{} 1", exe.display())]);
        assert_eq!(code, Some(1), "{point}: {err}");
        assert!(!out.contains("done"), "{point}: the program ran: {out}");
        assert!(err.contains("error[E0014]: cannot probe Go function"), "{point}: {err}");
        assert!(err.contains("<input>:1:"), "{point}: {err}");
        assert!(!err.contains("no function matches"), "{point}: {err}");
    }
}
