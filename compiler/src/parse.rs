//! Pass 1 driver: lex, preprocess, check delimiters, parse, validate.
//!
//! [`parse`] never fails and never panics: it returns whatever AST it could
//! build together with every diagnostic found.

use crate::ast::*;
use crate::diag::{Code, Diagnostic};
use crate::lexer::{self, LexProblemKind, Tok};
use crate::preprocess::{self, PpConfig};
use crate::span::{FileId, SourceMap, Span};
use crate::validate;
use lalrpop_util::{lalrpop_mod, ErrorRecovery, ParseError};

lalrpop_mod!(
    #[allow(clippy::all, unused_parens, unused_imports, dead_code)]
    grammar
);

/// State the grammar's actions need: the file being parsed and the
/// diagnostics they report.
pub struct ParseCtx {
    pub file: FileId,
    pub diags: Vec<Diagnostic>,
    eof: usize,
}

impl ParseCtx {
    pub(crate) fn span(&self, l: usize, r: usize) -> Span {
        Span::new(self.file, l, r)
    }

    pub(crate) fn recovered(&mut self, e: ErrorRecovery<usize, Tok<'_>, ()>) {
        if let Some(d) = self.syntax_error(e.error) {
            self.diags.push(d);
        }
    }

    pub(crate) fn type_name(&mut self, name: &str, l: usize, r: usize) -> Option<TypeAnn> {
        let ty = match name {
            "long" => Type::Long,
            "string" => Type::String,
            _ => {
                let mut d = Diagnostic::error(Code::UnknownType, self.span(l, r), format!("unknown type `{name}`"))
                    .with_label("expected `long` or `string`");
                if matches!(name, "int" | "i64" | "integer" | "number" | "u64" | "unsigned") {
                    d = d.with_help("every integer is a signed 64-bit `long`");
                } else if matches!(name, "str" | "char" | "String") {
                    d = d.with_help("write `string`");
                }
                self.diags.push(d);
                return None;
            }
        };
        Some(TypeAnn { ty, span: self.span(l, r) })
    }

    pub(crate) fn unary(&self, op: UnOp, e: Expr, l: usize, r: usize) -> Expr {
        Expr::new(ExprKind::Unary { op, operand: Box::new(e) }, self.span(l, r))
    }

    /// Turn a lalrpop error into a diagnostic, or None if it was caused by
    /// something already reported (an invalid character).
    fn syntax_error(&self, e: ParseError<usize, Tok<'_>, ()>) -> Option<Diagnostic> {
        match e {
            ParseError::UnrecognizedToken { token: (l, tok, r), expected } => {
                if tok == Tok::Error {
                    return None;
                }
                let mut d =
                    Diagnostic::error(Code::UnexpectedToken, self.span(l, r), format!("unexpected {tok}"))
                        .with_label(describe_expected(&expected));
                if let Some(h) = hint_for(&tok, &expected) {
                    d = d.with_help(h);
                }
                Some(d)
            }
            ParseError::UnrecognizedEof { location, expected } => Some(
                Diagnostic::error(Code::UnexpectedEof, self.span(location, location), "unexpected end of file")
                    .with_label(describe_expected(&expected)),
            ),
            ParseError::ExtraToken { token: (l, tok, r) } => {
                Some(Diagnostic::error(Code::UnexpectedToken, self.span(l, r), format!("unexpected {tok}")))
            }
            ParseError::InvalidToken { location } => Some(Diagnostic::error(
                Code::UnexpectedChar,
                self.span(location, location + 1),
                "invalid token",
            )),
            ParseError::User { .. } => None,
        }
    }
}

/// Join adjacent string literals (`"a" "b"` is `"ab"`).
pub(crate) fn concat_strings(parts: Vec<Vec<u8>>) -> Vec<u8> {
    if parts.len() == 1 {
        return parts.into_iter().next().unwrap_or_default();
    }
    parts.concat()
}

/// What pass 1 needs besides the text.
#[derive(Clone, Debug, Default)]
pub struct ParseConfig {
    pub pp: PpConfig,
}

/// Parse one file of the source map.
pub fn parse(sources: &SourceMap, file: FileId, cfg: &ParseConfig) -> (Script, Vec<Diagnostic>) {
    let text = sources.get(file).text.as_str();
    let eof = text.len();
    let (tokens, problems) = lexer::lex(text);
    let mut diags: Vec<Diagnostic> = problems.iter().map(|p| lex_diagnostic(file, p)).collect();

    let (tokens, pp_diags) = preprocess::preprocess(file, tokens, &cfg.pp, eof);
    diags.extend(pp_diags);

    // Invalid characters are reported above; the parser goes on without them.
    let mut tokens: Vec<_> = tokens.into_iter().filter(|t| t.1 != Tok::Error).collect();
    let (delim, unclosed) = check_delimiters(file, &tokens, eof);
    let delimiter_trouble = !delim.is_empty();
    diags.extend(delim);
    // Close what is still open at the end of the file (reported above), so
    // the parser finishes and the rest of the file is still checked.
    tokens.extend(unclosed.into_iter().map(|t| (eof, t, eof)));

    let mut ctx = ParseCtx { file, diags: Vec::new(), eof };
    let stream = tokens.into_iter().map(Ok::<_, ()>);
    let result = grammar::ScriptParser::new().parse(&mut ctx, stream);
    let script = match result {
        Ok(s) => s,
        Err(e) => {
            if let Some(d) = ctx.syntax_error(e) {
                ctx.diags.push(d);
            }
            Script::default()
        }
    };
    let mut parse_diags = ctx.diags;
    if delimiter_trouble {
        // An unclosed block makes the parser fail at the end of the file; the
        // delimiter diagnostic already says so, and better.
        parse_diags.retain(|d| d.code != Code::UnexpectedEof && d.span.start as usize != ctx.eof);
    }
    diags.extend(parse_diags);
    validate::validate(&script, &mut diags);
    diags.sort_by_key(|d| (d.span.file, d.span.start));
    dedup_same_place(&mut diags);
    (script, diags)
}

/// Two errors at one place are one problem seen twice; keep the first.
fn dedup_same_place(diags: &mut Vec<Diagnostic>) {
    let mut seen = std::collections::HashSet::new();
    diags.retain(|d| seen.insert((d.span.file, d.span.start, d.severity)));
}

/// Convenience for tests and tools: parse `text` as a file named `name`.
pub fn parse_str(name: &str, text: &str) -> (SourceMap, Script, Vec<Diagnostic>) {
    let mut sm = SourceMap::new();
    let id = sm.add(name, text);
    let (script, diags) = parse(&sm, id, &ParseConfig::default());
    (sm, script, diags)
}

fn lex_diagnostic(file: FileId, p: &lexer::LexProblem) -> Diagnostic {
    let span = Span::new(file, p.start, p.end);
    match &p.kind {
        LexProblemKind::UnexpectedChar(c) => {
            let mut d = Diagnostic::error(Code::UnexpectedChar, span, format!("unexpected character `{}`", c.escape_debug()))
                .with_label("no token starts with this character");
            if *c == '\'' {
                d = d.with_help("strings are written in double quotes: \"...\"");
            } else if *c == '$' || *c == '@' {
                d = d.with_help("`$` and `@` start target variables (`$name`), script arguments (`$1`, `@1`) or operators (`@count`)");
            }
            d
        }
        LexProblemKind::UnterminatedString => Diagnostic::error(Code::UnterminatedString, span, "unterminated string literal")
            .with_label("this string has no closing `\"` on its line"),
        LexProblemKind::UnterminatedComment => Diagnostic::error(Code::UnterminatedComment, span, "unterminated block comment")
            .with_label("this `/*` has no matching `*/`"),
        LexProblemKind::BadEscape(e) => Diagnostic::error(Code::BadEscape, span, format!("unknown escape sequence `{e}`"))
            .with_label("not a valid escape")
            .with_help("valid escapes are \\n \\t \\\" \\\\ \\r \\a \\b \\f \\v \\ooo (octal) and \\xHH (hex)"),
        LexProblemKind::BadNumber(m) => Diagnostic::error(Code::BadNumber, span, m.clone()).with_label("here"),
    }
}

/// Check `{}`, `()` and `[]` balance on the token stream the parser will see.
/// The parser would notice too, but only as "unexpected end of file"; this
/// names the delimiter that is still open and where it was opened.
/// Also returns the closing tokens that would close everything still open
/// at the end, innermost first.
fn check_delimiters(
    file: FileId,
    tokens: &[lexer::Spanned<'_>],
    eof: usize,
) -> (Vec<Diagnostic>, Vec<Tok<'static>>) {
    let mut stack: Vec<(char, usize, usize)> = Vec::new();
    let mut diags = Vec::new();
    let sp = |l: usize, r: usize| Span::new(file, l, r);
    for (l, t, r) in tokens {
        let (l, r) = (*l, *r);
        match t {
            Tok::LBrace => stack.push(('{', l, r)),
            Tok::LParen => stack.push(('(', l, r)),
            Tok::LBracket => stack.push(('[', l, r)),
            Tok::RBrace | Tok::RParen | Tok::RBracket => {
                let close = match t {
                    Tok::RBrace => '}',
                    Tok::RParen => ')',
                    _ => ']',
                };
                let open = match close {
                    '}' => '{',
                    ')' => '(',
                    _ => '[',
                };
                match stack.last() {
                    Some(&(o, _, _)) if o == open => {
                        stack.pop();
                    }
                    Some(&(o, ol, or)) => {
                        // A missing closer is likelier than an extra one when
                        // this closer matches something further out.
                        let found_outer = stack.iter().rev().skip(1).any(|&(x, _, _)| x == open);
                        let d = Diagnostic::error(
                            Code::UnbalancedDelimiter,
                            sp(l, r),
                            format!("mismatched closing delimiter `{close}`"),
                        )
                        .with_label(format!("expected `{}` to close the {} opened here", closer(o), what(o)))
                        .with_secondary(sp(ol, or), format!("{} opened here", what(o)));
                        diags.push(d);
                        if found_outer {
                            while let Some(&(x, _, _)) = stack.last() {
                                stack.pop();
                                if x == open {
                                    break;
                                }
                            }
                        }
                    }
                    None => diags.push(
                        Diagnostic::error(Code::UnbalancedDelimiter, sp(l, r), format!("unexpected closing `{close}`"))
                            .with_label(format!("no `{open}` is open here")),
                    ),
                }
            }
            _ => {}
        }
    }
    for &(o, ol, or) in stack.iter().rev().take(1) {
        diags.push(
            Diagnostic::error(Code::UnbalancedDelimiter, sp(eof, eof), format!("this `{o}` is never closed"))
                .with_label(format!("expected `{}` to close the {} opened here", closer(o), what(o)))
                .with_secondary(sp(ol, or), format!("{} opened here", what(o))),
        );
    }
    let closers = stack
        .iter()
        .rev()
        .map(|&(o, _, _)| match o {
            '{' => Tok::RBrace,
            '(' => Tok::RParen,
            _ => Tok::RBracket,
        })
        .collect();
    (diags, closers)
}

fn closer(open: char) -> char {
    match open {
        '{' => '}',
        '(' => ')',
        _ => ']',
    }
}

fn what(open: char) -> &'static str {
    match open {
        '{' => "block",
        '(' => "parenthesis",
        _ => "bracket",
    }
}

const EXPR_STARTS: &[&str] = &[
    "Name", "Int", "Str", "TargetVar", "DollarArg", "AtArg", "\"$#\"", "\"@#\"", "AtIdent", "\"(\"", "\"[\"", "\"-\"",
    "\"+\"", "\"!\"", "\"~\"", "\"++\"", "\"--\"",
];
const STMT_KEYWORDS: &[&str] =
    &["\"if\"", "\"while\"", "\"for\"", "\"foreach\"", "\"break\"", "\"continue\"", "\"next\"", "\"return\"", "\"delete\"", "\"try\"", "\"{\""];
const BINARY_OPS: &[&str] = &[
    "\"*\"", "\"/\"", "\"%\"", "\".\"", "\"<<\"", "\">>\"", "\">>>\"", "\"<\"", "\"<=\"", "\">\"", "\">=\"", "\"==\"",
    "\"!=\"", "\"&\"", "\"^\"", "\"|\"", "\"&&\"", "\"||\"", "\"?\"", "\"in\"", "\"=\"", "\"+=\"", "\"-=\"", "\"*=\"",
    "\"/=\"", "\"%=\"", "\"<<=\"", "\">>=\"", "\"&=\"", "\"|=\"", "\"^=\"", "\".=\"", "\"<<<\"",
];

/// Make lalrpop's list of expected terminals readable: collapse the many
/// tokens that can start an expression or continue one into a phrase.
fn describe_expected(expected: &[String]) -> String {
    let has = |s: &str| expected.iter().any(|e| e == s);
    let mut parts: Vec<String> = Vec::new();
    let statement = has("\"if\"") && has("\"while\"");
    let expression = has("Int") && has("Name");
    let operator = has("\"==\"") && has("\"*\"");
    if statement {
        parts.push("a statement".into());
    } else if expression {
        parts.push("an expression".into());
    }
    if operator {
        parts.push("an operator".into());
    }
    for e in expected {
        let e = e.as_str();
        if (statement && (STMT_KEYWORDS.contains(&e) || EXPR_STARTS.contains(&e) || e == "\";\""))
            || (expression && EXPR_STARTS.contains(&e))
            || (operator && BINARY_OPS.contains(&e))
        {
            continue;
        }
        // `+`/`-`/`++`/`--` also continue expressions; don't list them after "an operator".
        if operator && matches!(e, "\"+\"" | "\"-\"" | "\"++\"" | "\"--\"" | "\"[\"" | "\"(\"") {
            continue;
        }
        parts.push(match e {
            "Name" => "an identifier".to_string(),
            "Int" => "a number".to_string(),
            "Str" => "a string".to_string(),
            "TargetVar" => "a target variable".to_string(),
            "DollarArg" => "`$N`".to_string(),
            "AtArg" => "`@N`".to_string(),
            "AtIdent" => "an `@` operator".to_string(),
            q => format!("`{}`", q.trim_matches('"')),
        });
    }
    parts.dedup();
    match parts.len() {
        0 => "not expected here".to_string(),
        1 => format!("expected {}", parts[0]),
        n if n > 8 => format!("expected {}, or one of {} other tokens", parts[..4].join(", "), n - 4),
        n => format!("expected {} or {}", parts[..n - 1].join(", "), parts[n - 1]),
    }
}

/// A targeted hint for common mistakes.
fn hint_for(tok: &Tok<'_>, expected: &[String]) -> Option<String> {
    let has = |s: &str| expected.iter().any(|e| e == s);
    match tok {
        Tok::Else => Some("`else` must follow the statement of an `if`; a bare `return` there needs a `;`".into()),
        Tok::Ident(n) if has("\"{\"") && matches!(*n, "then" | "do") => {
            Some(format!("there is no `{n}` keyword; write the body in braces"))
        }
        Tok::Ident(n) if has("\";\"") || has("\"}\"") => {
            if matches!(*n, "var" | "let" | "local" | "int" | "long" | "string") {
                Some("locals need no declaration: assign to them (`x = 1`)".into())
            } else {
                None
            }
        }
        Tok::Semi if has("\")\"") => Some("a `;` cannot appear inside parentheses".into()),
        _ => None,
    }
}
