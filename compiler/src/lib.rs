//! telco-stap's compiler: passes 1 to 4. It never touches a live process
//! (INTERNALS.md, invariant 4): its output is data for `telco-runtime`.
//!
//! Pass 1 (this crate today): [`parse::parse`] turns script text into an
//! [`ast::Script`] and diagnostics; [`print::print_script`] prints it back.

pub mod arch;
pub mod ast;
pub mod codegen;
pub mod diag;
pub mod elaborate;
pub mod elf;
pub mod format;
pub mod glob;
pub mod lexer;
pub mod parse;
pub mod preprocess;
pub mod print;
pub mod program;
pub mod span;
pub mod suggest;
pub mod validate;

pub use diag::{Code, Diagnostic, Diagnostics, Severity};
pub use parse::{parse, parse_str, ParseConfig};
pub use span::{FileId, SourceMap, Span};
