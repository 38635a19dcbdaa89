//! Demangling of C++ (Itanium ABI) and Rust symbol names.
//!
//! Only names that look mangled are demangled: C names go through untouched,
//! which keeps loading a C library cheap.

use std::panic;
use std::thread;

use cpp_demangle::{DemangleOptions, Symbol};

/// True for names [`demangle`] may turn into something: C++ (`_Z`) and Rust (`_R`, `_ZN...E`).
pub(super) fn looks_mangled(name: &str) -> bool {
    name.starts_with("_Z") || name.starts_with("_R")
}

/// [`demangle`] for many names, in order. cpp_demangle takes about 5 µs per
/// name (parsing dominates), so a C++ library with thousands of functions
/// would spend tens of milliseconds here on one thread; the work is split
/// over the available cores when there is enough of it.
pub(super) fn demangle_all(names: &[&str]) -> Vec<(Option<String>, Option<String>)> {
    const MIN_PER_THREAD: usize = 256;
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(8).min(names.len() / MIN_PER_THREAD).max(1);
    if threads == 1 {
        return demangle_chunk(names);
    }
    let chunk = names.len().div_ceil(threads);
    thread::scope(|scope| {
        let spawned: Vec<_> = names
            .chunks(chunk)
            .map(|c| (c, thread::Builder::new().name("demangle".into()).spawn_scoped(scope, || demangle_chunk(c))))
            .collect();
        let mut out = Vec::with_capacity(names.len());
        for (c, handle) in spawned {
            // A thread that could not be created: do its share here.
            match handle.map_err(|_| ()).and_then(|h| h.join().map_err(|_| ())) {
                Ok(results) => out.extend(results),
                Err(()) => out.extend(demangle_chunk(c)),
            }
        }
        out
    })
}

/// A demangler bug must not take the tracer down: names in a chunk that
/// panics are left mangled.
fn demangle_chunk(names: &[&str]) -> Vec<(Option<String>, Option<String>)> {
    panic::catch_unwind(|| names.iter().map(|n| demangle(n)).collect())
        .unwrap_or_else(|_| vec![(None, None); names.len()])
}

/// `(full, short)` for a raw symbol name (an `@VERSION` suffix is ignored).
///
/// `full` is what `c++filt` prints (`int ns::maxv<int>(int, int)`), or the
/// Rust path without its hash. `short` is the C++ name without parameter list
/// and return type (`ns::maxv<int>`), present only where it differs from `full`.
/// Both are `None` for names that are not mangled or do not demangle.
pub(super) fn demangle(name: &str) -> (Option<String>, Option<String>) {
    let name = super::strip_version(name);
    if name.starts_with("_R") || is_legacy_rust(name) {
        // `{:#}` leaves out the hash (`::h0123456789abcdef`).
        return (rustc_demangle::try_demangle(name).ok().map(|d| format!("{d:#}")), None);
    }
    if !name.starts_with("_Z") {
        return (None, None);
    }
    let Ok(symbol) = Symbol::new(name.as_bytes()) else {
        return (None, None);
    };
    let full = symbol.demangle().ok();
    let short = symbol
        .demangle_with_options(&DemangleOptions::new().no_params().no_return_type())
        .ok()
        .filter(|s| Some(s) != full.as_ref());
    (full, short)
}

/// Legacy Rust mangling is valid Itanium C++ mangling too; what tells them
/// apart is the last path component, a hash `17h` + 16 hex digits. A
/// compiler-added suffix (`.llvm.1234`) may follow the closing `E`.
fn is_legacy_rust(name: &str) -> bool {
    if !name.starts_with("_ZN") {
        return false;
    }
    let b = name.as_bytes();
    let end = b.iter().position(|&c| c == b'.').unwrap_or(b.len());
    let b = &b[..end];
    b.len() >= 3 + 20
        && b[b.len() - 1] == b'E'
        && &b[b.len() - 20..b.len() - 17] == b"17h"
        && b[b.len() - 17..b.len() - 1].iter().all(u8::is_ascii_hexdigit)
}
