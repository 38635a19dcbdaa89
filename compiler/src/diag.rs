//! Diagnostics are data: severity, code, message, primary span, labels, help.
//!
//! Passes push [`Diagnostic`]s into a [`Diagnostics`] sink; the driver renders
//! them with codespan-reporting. Tests assert on the structure (code, span)
//! and a few golden files check the rendering.

use crate::span::{SourceMap, Span};
use codespan_reporting::diagnostic as cs;
use codespan_reporting::term;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Note,
    Warning,
    Error,
}

/// A stable identifier for each kind of diagnostic, printed as `error[P0003]`.
/// Tests name these, so never renumber one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// A character that cannot start any token.
    UnexpectedChar,
    /// A string literal without its closing quote.
    UnterminatedString,
    /// A `/* ... */` comment without its `*/`.
    UnterminatedComment,
    /// A backslash escape that the language does not define.
    BadEscape,
    /// An integer literal that does not fit in 64 bits, or a malformed one.
    BadNumber,
    /// The parser met a token it cannot use here.
    UnexpectedToken,
    /// The file ended inside a construct.
    UnexpectedEof,
    /// An opening delimiter that is never closed, or a closing one never opened.
    UnbalancedDelimiter,
    /// A probe point whose shape no probe family has.
    BadProbePoint,
    /// A type name other than `long` and `string`.
    UnknownType,
    /// An `@name(...)` operator that does not exist.
    UnknownOperator,
    /// `break`, `continue`, `next` or `return` where it has no meaning.
    MisplacedStatement,
    /// Preprocessor (`%( %? %: %)`, `@define`) misuse.
    Preprocessor,
    /// An `@NAME` macro use that cannot be expanded.
    MacroExpansion,
    /// Command-line script arguments misuse (`$1` with too few arguments, ...).
    ScriptArgument,
    // Pass 2.
    /// A function or global defined twice.
    DuplicateDefinition,
    /// A name that is not defined (function, array).
    Undefined,
    /// A probe point that is neither built in nor an alias.
    UnknownProbePoint,
    /// Aliases that expand into each other forever.
    AliasCycle,
    /// A module named by a probe point cannot be found or read.
    ModuleNotFound,
    /// A probe point that matches nothing.
    NoMatch,
    /// An ifunc symbol was named.
    Ifunc,
    /// A return probe on a function not entered by a call (the ELF entry
    /// point, `vfork`, `setjmp`...).
    NoReturn,
    /// Two uses give a variable different types, or an operand has the wrong type.
    TypeMismatch,
    /// Nothing gives a variable a type.
    TypeUnknown,
    /// A global used both as an array and a scalar, or with different key counts.
    ArrayMisuse,
    /// A call with the wrong number of arguments.
    Arity,
    /// Context that does not exist here (`$return` outside a return probe, ...).
    Context,
    /// A feature this tracer does not provide (debug-info target variables).
    Unsupported,
    /// A printf format that is wrong or does not match its arguments.
    BadFormat,
    /// A value out of range (timer period, histogram bounds, array size).
    BadValue,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::UnexpectedChar => "P0001",
            Code::UnterminatedString => "P0002",
            Code::UnterminatedComment => "P0003",
            Code::BadEscape => "P0004",
            Code::BadNumber => "P0005",
            Code::UnexpectedToken => "P0006",
            Code::UnexpectedEof => "P0007",
            Code::UnbalancedDelimiter => "P0008",
            Code::BadProbePoint => "P0009",
            Code::UnknownType => "P0010",
            Code::UnknownOperator => "P0011",
            Code::MisplacedStatement => "P0012",
            Code::Preprocessor => "P0013",
            Code::MacroExpansion => "P0014",
            Code::ScriptArgument => "E0001",
            Code::DuplicateDefinition => "E0002",
            Code::Undefined => "E0003",
            Code::UnknownProbePoint => "E0004",
            Code::AliasCycle => "E0005",
            Code::ModuleNotFound => "E0006",
            Code::NoMatch => "E0007",
            Code::Ifunc => "E0008",
            Code::TypeMismatch => "E0009",
            Code::TypeUnknown => "E0010",
            Code::ArrayMisuse => "E0011",
            Code::Arity => "E0012",
            Code::Context => "E0013",
            Code::Unsupported => "E0014",
            Code::BadFormat => "E0015",
            Code::BadValue => "E0016",
            Code::NoReturn => "E0017",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: Code,
    pub message: String,
    pub span: Span,
    /// The text under the primary caret.
    pub label: String,
    pub secondary: Vec<Label>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn error(code: Code, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            span,
            label: String::new(),
            secondary: Vec::new(),
            help: None,
        }
    }

    pub fn warning(code: Code, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(code, span, message) }
    }

    pub fn note(code: Code, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Note, ..Diagnostic::error(code, span, message) }
    }

    pub fn with_label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = label.into();
        self
    }

    pub fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.secondary.push(Label { span, message: message.into() });
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    fn to_codespan(&self) -> cs::Diagnostic<crate::span::FileId> {
        let severity = match self.severity {
            Severity::Note => cs::Severity::Note,
            Severity::Warning => cs::Severity::Warning,
            Severity::Error => cs::Severity::Error,
        };
        let mut labels = vec![cs::Label::primary(self.span.file, self.span.range()).with_message(&self.label)];
        labels.extend(
            self.secondary.iter().map(|l| cs::Label::secondary(l.span.file, l.span.range()).with_message(&l.message)),
        );
        let mut d =
            cs::Diagnostic::new(severity).with_code(self.code.as_str()).with_message(&self.message).with_labels(labels);
        if let Some(h) = &self.help {
            d = d.with_notes(vec![format!("help: {h}")]);
        }
        d
    }
}

/// The sink every pass reports into.
#[derive(Debug, Default)]
pub struct Diagnostics {
    list: Vec<Diagnostic>,
    /// What was said already (a macro or an alias expanded at several
    /// places reports the same problem at the same place once).
    said: std::collections::HashSet<(Severity, Span, String)>,
    /// `-w`: warnings are dropped.
    pub suppress_warnings: bool,
}

impl Diagnostics {
    pub fn new() -> Diagnostics {
        Diagnostics::default()
    }

    pub fn push(&mut self, d: Diagnostic) {
        if d.severity == Severity::Warning && self.suppress_warnings {
            return;
        }
        if !self.said.insert((d.severity, d.span, d.message.clone())) {
            return;
        }
        self.list.push(d);
    }

    pub fn has_errors(&self) -> bool {
        self.list.iter().any(|d| d.severity == Severity::Error)
    }

    pub fn error_count(&self) -> usize {
        self.list.iter().filter(|d| d.severity == Severity::Error).count()
    }

    pub fn extend(&mut self, ds: impl IntoIterator<Item = Diagnostic>) {
        for d in ds {
            self.push(d);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.list.iter()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Errors in source order (file, then offset), stable for equal positions.
    pub fn sort(&mut self) {
        self.list.sort_by_key(|d| (d.span.file, d.span.start));
    }

    /// Render every diagnostic as codespan-reporting does, to a string.
    pub fn render(&self, sources: &SourceMap, color: bool) -> String {
        let mut buf = term::termcolor::Buffer::no_color();
        if color {
            buf = term::termcolor::Buffer::ansi();
        }
        let config = term::Config::default();
        for d in &self.list {
            // Rendering into a memory buffer fails only on a span outside its
            // file, which is an internal error; fall back to a plain line then.
            if term::emit_to_write_style(&mut buf, &config, sources, &d.to_codespan()).is_err() {
                let loc = sources.location(d.span);
                buf_write(&mut buf, &format!("error[{}]: {} at {}\n", d.code.as_str(), d.message, loc));
            }
        }
        String::from_utf8_lossy(buf.as_slice()).into_owned()
    }

    /// One line per diagnostic: `file:line:col: severity[code]: message (label)`.
    /// The form the test corpora compare against.
    pub fn summary(&self, sources: &SourceMap) -> String {
        let mut out = String::new();
        for d in &self.list {
            let sev = match d.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            };
            out.push_str(&format!("{}: {}[{}]: {}", sources.location(d.span), sev, d.code.as_str(), d.message));
            if !d.label.is_empty() {
                out.push_str(&format!(" ({})", d.label));
            }
            out.push('\n');
        }
        out
    }
}

fn buf_write(buf: &mut term::termcolor::Buffer, s: &str) {
    use std::io::Write;
    let _ = buf.write_all(s.as_bytes());
}
