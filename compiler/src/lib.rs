//! telco-stap's compiler: passes 1 to 4. It never touches a live process
//! (INTERNALS.md, invariant 4): its output is data for `telco-runtime`.
//!
//! * Pass 1: [`parse::parse`] turns script text into an [`ast::Script`] and
//!   diagnostics ([`lexer`], [`preprocess`], the lalrpop grammar,
//!   [`validate`]); [`print::print_script`] prints it back.
//! * [`library`]: the tapsets and macro libraries as files, read by
//!   passes 1 (macros) and 2 (tapsets).
//! * Pass 2: [`elaborate::elaborate`] turns the tree and the tapsets it uses
//!   into a typed, resolved [`program::Program`], with probe points resolved
//!   against ELF files ([`elf`]).
//! * Passes 3 and 4: [`codegen::translate`] and [`codegen::codegen`] turn the
//!   program into a `telco_abi::artifact::Artifact`: one linked blob of
//!   machine code, its probe table and the shared region's layout.
//! * [`arch`]: what passes 2 and 4 know about the instruction set.
//! * [`image`]: an ELF file's bytes and the sections several layers read,
//!   beneath [`arch`], [`dwarf`] and [`elf`].

pub mod arch;
pub mod ast;
pub mod codegen;
pub mod diag;
pub mod dwarf;
pub mod elaborate;
pub mod elf;
pub mod format;
pub mod glob;
pub mod image;
pub mod lexer;
pub mod library;
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
