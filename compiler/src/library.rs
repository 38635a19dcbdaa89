//! The tapset library as files: the built-in tapsets (`.tp`) and macro
//! libraries (`.stpm`) that travel inside the binary (`build.rs` embeds
//! `tapsets/`), and those below each `-I` directory.
//!
//! Pass 1's preprocessor reads the macro libraries and pass 2 the tapsets
//! (`elaborate::tapsets` chooses the ones a script uses); both read them
//! from here, so neither pass depends on the other for them.

use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/tapsets.rs"));

/// A tapset's name for messages and its text.
pub struct TapsetSource {
    pub name: String,
    pub text: String,
}

/// The built-in tapsets, named `<tapset>/FILE.tp` in messages.
pub fn builtin() -> Vec<TapsetSource> {
    BUILTIN_TAPSETS
        .iter()
        .map(|(name, text)| TapsetSource { name: format!("<tapset>/{name}"), text: (*text).to_string() })
        .collect()
}

/// The macro libraries (`.stpm`, `@define`s every script sees, as in
/// SystemTap's tapset directory): the built-in ones, then every `.stpm`
/// file below each `-I` directory.
pub fn macro_libraries(dirs: &[PathBuf]) -> Result<Vec<(String, &'static str)>, String> {
    let mut out = builtin_macro_libraries();
    for d in dirs {
        let mut files = Vec::new();
        collect_ext(d, "stpm", &mut files)
            .map_err(|e| format!("cannot read tapset directory `{}`: {e}", d.display()))?;
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read tapset `{}`: {e}", f.display()))?;
            // Read once per run and kept to its end, as the built-in ones.
            out.push((f.display().to_string(), Box::leak(text.into_boxed_str())));
        }
    }
    Ok(out)
}

/// The built-in macro libraries (`tapsets/*.stpm`), named
/// `<tapset>/FILE.stpm` in messages.
pub fn builtin_macro_libraries() -> Vec<(String, &'static str)> {
    BUILTIN_MACRO_LIBRARIES.iter().map(|(name, text)| (format!("<tapset>/{name}"), *text)).collect()
}

/// Every `.tp` file below each directory, in a stable order.
pub fn from_dirs(dirs: &[PathBuf]) -> Result<Vec<TapsetSource>, String> {
    let mut out = Vec::new();
    for d in dirs {
        let mut files = Vec::new();
        collect(d, &mut files).map_err(|e| format!("cannot read tapset directory `{}`: {e}", d.display()))?;
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read tapset `{}`: {e}", f.display()))?;
            out.push(TapsetSource { name: f.display().to_string(), text });
        }
    }
    Ok(out)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    collect_ext(dir, "tp", out)
}

fn collect_ext(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            collect_ext(&p, ext, out)?;
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
    Ok(())
}
