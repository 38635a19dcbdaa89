use std::fmt::Write;
use std::path::Path;

fn main() {
    // Generates src/grammar.rs into OUT_DIR from src/grammar.lalrpop. Once a
    // build script names any file to watch, cargo watches only those: name
    // the grammar too.
    println!("cargo:rerun-if-changed=src/grammar.lalrpop");
    if let Err(e) = lalrpop::process_src() {
        eprintln!("lalrpop failed: {e}");
        std::process::exit(1);
    }
    embed_tapsets();
}

/// The built-in tapsets (`../tapsets/*.tp`) travel inside the binary, so an
/// installed telco-stap needs no files beside it.
fn embed_tapsets() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&manifest).join("../tapsets");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "tp")).collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut out =
        String::from("/// Built-in tapsets: (file name, text).\npub const BUILTIN_TAPSETS: &[(&str, &str)] = &[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("tapset.tp");
        let abs = f.canonicalize().unwrap_or_else(|_| f.clone());
        let _ = writeln!(out, "    ({name:?}, include_str!({:?})),", abs.display().to_string());
    }
    out.push_str("];\n");
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    if let Err(e) = std::fs::write(Path::new(&out_dir).join("tapsets.rs"), out) {
        eprintln!("cannot write the tapset table: {e}");
        std::process::exit(1);
    }
}
