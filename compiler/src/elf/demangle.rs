//! Demangling of C++ (Itanium ABI) and Rust symbol names.
//!
//! Only names that look mangled are demangled: C names go through untouched,
//! which keeps loading a C library cheap.

use std::panic;

use cpp_demangle::{DemangleOptions, Symbol};

/// True for names [`demangle`] may turn into something: C++ (`_Z`) and Rust (`_R`, `_ZN...E`).
pub(super) fn looks_mangled(name: &str) -> bool {
    name.starts_with("_Z") || name.starts_with("_R")
}

/// [`demangle`], but a demangler bug must not take the tracer down: a name
/// whose demangling panics is left mangled. Names are demangled one at a
/// time, on first need (about 5 µs each for C++).
pub(super) fn demangle_safely(name: &str) -> (Option<String>, Option<String>) {
    panic::catch_unwind(|| demangle(name)).unwrap_or((None, None))
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
