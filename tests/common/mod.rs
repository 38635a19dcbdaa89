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
