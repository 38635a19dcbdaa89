//! Helpers shared by the data-driven corpora (parse and sem).
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `.tp` files of a directory, sorted.
pub fn tp_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "tp"))
        .collect();
    v.sort();
    v
}

/// Script arguments from a first line `# args: A B ...`.
pub fn args_of(text: &str) -> Vec<String> {
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("# args:"))
        .map(|a| a.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Compare with the expected file, or write it under `BLESS=1`. Returns a
/// failure message.
pub fn check_file(path: &Path, actual: &str) -> Option<String> {
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, actual).expect("write expected file");
        return None;
    }
    match std::fs::read_to_string(path) {
        Ok(expected) if expected == actual => None,
        Ok(expected) => Some(format!(
            "{} differs (BLESS=1 to update)\n--- expected\n{expected}\n--- actual\n{actual}",
            path.display()
        )),
        Err(_) => Some(format!("{} is missing (BLESS=1 creates it); actual:\n{actual}", path.display())),
    }
}

pub fn name_of(f: &Path) -> String {
    f.file_name().and_then(|n| n.to_str()).expect("utf-8 name").to_string()
}

/// A scratch directory for this test binary's run: `TAG` under one
/// directory per process (`telco-test-PID` in the system's temporary
/// directory), which is removed when the process exits, whatever the
/// tests' outcome: nothing is left behind.
pub fn scratch(tag: &str) -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let root = ROOT.get_or_init(|| {
        extern "C" fn remove_root() {
            let root = std::env::temp_dir().join(format!("telco-test-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(root);
        }
        extern "C" {
            fn atexit(f: extern "C" fn()) -> i32;
        }
        // SAFETY: registers a plain function without arguments, once.
        unsafe { atexit(remove_root) };
        std::env::temp_dir().join(format!("telco-test-{}", std::process::id()))
    });
    let d = root.join(tag);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Build `tests/programs/SRC` with `gcc -O2 -pthread FLAGS` into `exe`.
pub fn gcc(src: &str, exe: &Path, flags: &[&str]) {
    let st = std::process::Command::new("gcc")
        .args(["-O2", "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(exe)
        .arg(repo().join("tests/programs").join(src))
        .status()
        .expect("gcc runs");
    assert!(st.success(), "gcc failed on {src}");
}

/// Run telco-stap: (stdout, stderr, exit code).
pub fn telco_run(args: &[&str]) -> (String, String, Option<i32>) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap")).args(args).output().expect("run telco-stap");
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned(), o.status.code())
}

/// Run telco-stap in directory `dir`: (stdout, stderr, exit code).
pub fn telco_in(dir: &Path, args: &[&str]) -> (String, String, Option<i32>) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_telco-stap"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run telco-stap");
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned(), o.status.code())
}
