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
pub struct ParseCtx<'t> {
    pub file: FileId,
    pub diags: Vec<Diagnostic>,
    text: &'t str,
}

impl ParseCtx<'_> {
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

    /// `@name` with no parentheses.
    pub(crate) fn bare_at_ident(&mut self, name: &str, l: usize, r: usize) -> Expr {
        let span = self.span(l, r);
        let known = validate::AT_OPERATORS.iter().any(|(n, _, _)| *n == name);
        let d = if known {
            Diagnostic::error(Code::UnknownOperator, span, format!("`@{name}` needs its arguments in parentheses"))
                .with_label(format!("write `@{name}(...)`"))
        } else {
            let mut d = Diagnostic::error(Code::UnknownOperator, span, format!("unknown operator `@{name}`"))
                .with_label("no such `@` operator or macro");
            if let Some(s) = crate::suggest::closest(name, validate::AT_OPERATORS.iter().map(|(n, _, _)| *n)) {
                d = d.with_help(format!("did you mean `@{s}`?"));
            } else {
                d = d.with_help(format!("macros are defined with `@define {name} %( ... %)` before their use"));
            }
            d
        };
        self.diags.push(d);
        Expr::new(ExprKind::Error, span)
    }

    /// A `TargetVar` token: `name`, `s.a.b`, `p$`, `$parms$$`.
    pub(crate) fn target_var(&self, text: &str, l: usize, r: usize) -> Expr {
        let span = self.span(l, r);
        let (text, pretty) = split_pretty(text);
        let mut parts = text.split('.');
        let name = parts.next().unwrap_or_default();
        let base_r = l + 1 + name.len();
        let base = Expr::new(ExprKind::TargetVar(crate::ast::Name::new(name)), self.span(l, base_r));
        let steps = self.members(parts, base_r);
        if steps.is_empty() && pretty == 0 {
            return base;
        }
        Expr::new(ExprKind::TargetPath(Box::new(crate::ast::TargetPath { base, steps, pretty, address: false })), span)
    }

    /// `base->a.b$` (a `Member` token after a target expression).
    pub(crate) fn member(&self, base: Expr, text: &str, l: usize, r: usize) -> Expr {
        let span = self.span(l, r);
        let (text, pretty) = split_pretty(text);
        // The names start where the token's text does, after `->` and blanks.
        let start = r - text.len() - if pretty == 0 { 0 } else { pretty as usize };
        let steps = self.members(text.split('.'), start.saturating_sub(1));
        self.extend_path(base, steps, pretty, span)
    }

    /// `&path`: the address of a target variable's member or element.
    pub(crate) fn address_of(&self, e: Expr, l: usize, r: usize) -> Expr {
        let span = self.span(l, r);
        match e.kind {
            ExprKind::TargetPath(mut p) if p.pretty == 0 => {
                p.address = true;
                Expr::new(ExprKind::TargetPath(p), span)
            }
            _ => Expr::new(
                ExprKind::TargetPath(Box::new(crate::ast::TargetPath {
                    base: e,
                    steps: Vec::new(),
                    pretty: 0,
                    address: true,
                })),
                span,
            ),
        }
    }

    /// `base$` or `base$$` after an index or `@var(...)`: pretty-printed.
    pub(crate) fn pretty(&self, base: Expr, pretty: u8, l: usize, r: usize) -> Expr {
        self.extend_path(base, Vec::new(), pretty, self.span(l, r))
    }

    /// `base[index]`.
    pub(crate) fn target_index(&self, base: Expr, index: Expr, l: usize, r: usize) -> Expr {
        self.extend_path(base, vec![crate::ast::PathStep::Index(index)], 0, self.span(l, r))
    }

    fn extend_path(&self, base: Expr, steps: Vec<crate::ast::PathStep>, pretty: u8, span: Span) -> Expr {
        match base.kind {
            ExprKind::TargetPath(mut p) if p.pretty == 0 => {
                p.steps.extend(steps);
                p.pretty = pretty;
                Expr::new(ExprKind::TargetPath(p), span)
            }
            _ => Expr::new(
                ExprKind::TargetPath(Box::new(crate::ast::TargetPath { base, steps, pretty, address: false })),
                span,
            ),
        }
    }

    /// Member names separated by dots, the first starting after byte `at`
    /// (which holds the `.` or the end of `->`).
    fn members<'n>(&self, names: impl Iterator<Item = &'n str>, mut at: usize) -> Vec<crate::ast::PathStep> {
        let mut steps = Vec::new();
        for n in names {
            let span = self.span(at + 1, at + 1 + n.len());
            steps.push(crate::ast::PathStep::Member(crate::ast::Ident { name: crate::ast::Name::new(n), span }));
            at += 1 + n.len();
        }
        steps
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
                let mut d = Diagnostic::error(Code::UnexpectedToken, self.span(l, r), format!("unexpected {tok}"))
                    .with_label(describe_expected(&expected));
                if let Some(h) = hint_for(&tok, &expected, &self.text[..l.min(self.text.len())]) {
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
            ParseError::InvalidToken { location } => {
                Some(Diagnostic::error(Code::UnexpectedChar, self.span(location, location + 1), "invalid token"))
            }
            ParseError::User { .. } => None,
        }
    }
}

/// Attach `op rhs` to a tree built from a flat operator list. `depth` is
/// how many of the list's own nodes lie on the tree's right spine; the new
/// operator goes below those that bind looser than it (all operators are
/// left-associative), never into an operand such as a parenthesised
/// expression. Returns the tree and its new depth.
pub(crate) fn attach((tree, depth): (Expr, u32), op: BinOp, rhs: Expr) -> (Expr, u32) {
    attach_at(tree, depth, op, rhs)
}

fn attach_at(mut node: Expr, depth: u32, op: BinOp, rhs: Expr) -> (Expr, u32) {
    if depth > 0 {
        if let ExprKind::Binary { op: top, rhs: inner, .. } = &mut node.kind {
            if top.precedence() < op.precedence() {
                // Binds tighter than this node: goes into its right operand.
                let placeholder = Expr::new(ExprKind::Error, rhs.span);
                let taken = std::mem::replace(inner.as_mut(), placeholder);
                node.span.end = rhs.span.end;
                let (sub, d) = attach_at(taken, depth - 1, op, rhs);
                if let ExprKind::Binary { rhs: inner, .. } = &mut node.kind {
                    **inner = sub;
                }
                return (node, d + 1);
            }
        }
    }
    let span = node.span.to(rhs.span);
    (Expr::new(ExprKind::Binary { op, lhs: Box::new(node), rhs: Box::new(rhs) }, span), 1)
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
    let mut ctx = ParseCtx { file, diags: Vec::new(), text };
    let mut diags = Vec::new();
    let parser = grammar::ScriptParser::new();

    // Tokens stream from the lexer into the parser, unless the text uses
    // the preprocessor, which needs them all first.
    let (result, delim) = if preprocess::needed(text) || preprocess::uses_library(text, &cfg.pp) {
        let (tokens, problems) = lexer::lex(text);
        diags.extend(problems.iter().map(|p| lex_diagnostic(file, p)));
        let (tokens, pp_diags) = preprocess::preprocess(file, tokens, &cfg.pp, eof);
        diags.extend(pp_diags);
        let mut stream = Delimiters::new(file, text, tokens.into_iter());
        let result = parser.parse(&mut ctx, &mut stream);
        (result, stream.into_report())
    } else {
        let mut stream = Delimiters::new(file, text, lexer::Tokens::new(text));
        let result = parser.parse(&mut ctx, &mut stream);
        let report = stream.into_report();
        diags.extend(report.lex_problems.iter().map(|p| lex_diagnostic(file, p)));
        (result, report)
    };
    let script = match result {
        Ok(s) => s,
        Err(e) => {
            if let Some(d) = ctx.syntax_error(e) {
                ctx.diags.push(d);
            }
            Script::default()
        }
    };
    diags.extend(suppress_cascades(ctx.diags, delim, eof));
    validate::validate(&script, text, &mut diags);
    diags.sort_by_key(|d| (d.span.file, d.span.start));
    dedup_same_place(&mut diags);
    (script, diags)
}

/// Keep one error per problem. Error recovery restarts at the next
/// statement, so one mistake inside parentheses or brackets can produce
/// more errors in the same group, and a missing `)` also unbalances the
/// delimiters. So:
/// * a syntax error in the same `(...)`/`[...]` group as an earlier syntax
///   error is dropped, and so is one at the `}` closing a block that holds
///   the earlier error (recovery may have left the block already);
/// * a delimiter mismatch is dropped when a syntax error lies between the
///   opener and the closer (the parser has said what is wrong there), and
///   a syntax error at the very closer gives way to the delimiter's message,
///   which names the opener;
/// * an unclosed delimiter at the end of the file replaces the parser's
///   "unexpected end of file".
fn suppress_cascades(mut parse_diags: Vec<Diagnostic>, delim: DelimReport, eof: usize) -> Vec<Diagnostic> {
    parse_diags.sort_by_key(|d| d.span.start);
    let is_syntax = |d: &Diagnostic| matches!(d.code, Code::UnexpectedToken | Code::UnexpectedEof);
    let groups = &delim.groups;
    let same_group = |a: u32, d: &Diagnostic| {
        let b = d.span.start;
        // At a block's `}`, an error that expects top-level items means
        // recovery already left the block: the `}` is not the mistake.
        let left_block = d.label.contains("`probe`");
        groups.iter().any(|&(s, e)| s <= a && a <= e && s <= b && b <= e)
            || (left_block && delim.blocks.iter().any(|&(s, e)| b == e && s <= a && a <= e))
    };
    let mut kept: Vec<Diagnostic> = Vec::with_capacity(parse_diags.len());
    let mut last_syntax: Option<u32> = None;
    let at_closer = |pos: u32| delim.diags.iter().any(|(dd, (_, c))| *c != u32::MAX && dd.span.start == pos);
    for mut d in parse_diags {
        if d.label == "expected `)`" && d.secondary.is_empty() {
            let open = groups
                .iter()
                .filter(|&&(s, e)| s < d.span.start && d.span.start <= e)
                .max_by_key(|&&(s, _)| s)
                .map(|&(s, _)| s);
            if let Some(s) = open {
                let file = d.span.file;
                d = d.with_secondary(Span { file, start: s, end: s + 1 }, "to close this `(`");
            }
        }
        if is_syntax(&d) && at_closer(d.span.start) {
            last_syntax = Some(d.span.start);
            continue;
        }
        if is_syntax(&d) {
            if delim.unclosed_at_eof && (d.code == Code::UnexpectedEof || d.span.start as usize == eof) {
                continue;
            }
            if let Some(prev) = last_syntax {
                if same_group(prev, &d) {
                    continue;
                }
            }
            last_syntax = Some(d.span.start);
        }
        kept.push(d);
    }
    for (d, (open, close)) in delim.diags {
        let explained = close != u32::MAX
            && kept.iter().any(|k| is_syntax(k) && open <= k.span.start && k.span.start < d.span.start);
        if !explained {
            kept.push(d);
        }
    }
    kept
}

/// What the token stream found, besides the tokens.
struct DelimReport {
    /// Delimiter diagnostics with the region (opener, closer) they concern;
    /// the closer is `u32::MAX` for "never closed".
    diags: Vec<(Diagnostic, (u32, u32))>,
    /// Byte ranges of every `(...)` and `[...]` group, closers included.
    groups: Vec<(u32, u32)>,
    /// Byte ranges of every `{...}` block, closers included.
    blocks: Vec<(u32, u32)>,
    unclosed_at_eof: bool,
    lex_problems: Vec<lexer::LexProblem>,
}

/// The token stream the parser reads. It drops invalid characters (the
/// lexer reported them), checks that `{}`, `()` and `[]` balance, and at the
/// end of the file closes whatever is still open, so the parser finishes and
/// the rest of the file is still checked. The parser would notice unbalanced
/// delimiters too, but only as "unexpected end of file"; this names the
/// delimiter and where it was opened.
struct Delimiters<'a, I> {
    inner: I,
    text: &'a str,
    /// A token read ahead while joining a probe point glob.
    peeked: Option<lexer::Spanned<'a>>,
    /// Inside a probe header (`probe ... {`), and its parenthesis depth.
    header: bool,
    header_depth: u32,
    file: FileId,
    eof: usize,
    stack: Vec<(Tok<'static>, usize, usize)>,
    diags: Vec<(Diagnostic, (u32, u32))>,
    groups: Vec<(u32, u32)>,
    blocks: Vec<(u32, u32)>,
    /// Closers still to emit at the end, innermost last.
    closing: Option<Vec<Tok<'static>>>,
}

trait LexProblems {
    fn lex_problems(self) -> Vec<lexer::LexProblem>;
}

impl LexProblems for lexer::Tokens<'_> {
    fn lex_problems(self) -> Vec<lexer::LexProblem> {
        self.problems()
    }
}

impl<'a> LexProblems for std::vec::IntoIter<lexer::Spanned<'a>> {
    /// Preprocessed tokens: the lexer's problems were taken before.
    fn lex_problems(self) -> Vec<lexer::LexProblem> {
        Vec::new()
    }
}

impl<I: LexProblems> Delimiters<'_, I> {
    fn into_report(self) -> DelimReport {
        DelimReport {
            unclosed_at_eof: self.diags.iter().any(|(_, (_, c))| *c == u32::MAX),
            diags: self.diags,
            groups: self.groups,
            blocks: self.blocks,
            lex_problems: self.inner.lex_problems(),
        }
    }
}

impl<'a, I> Delimiters<'a, I> {
    fn new(file: FileId, text: &'a str, inner: I) -> Delimiters<'a, I> {
        let eof = text.len();
        Delimiters {
            inner,
            text,
            peeked: None,
            header: false,
            header_depth: 0,
            file,
            eof,
            stack: Vec::new(),
            diags: Vec::new(),
            groups: Vec::new(),
            blocks: Vec::new(),
            closing: None,
        }
    }

    /// Pop the top opener, recording its group.
    fn pop_to(&mut self, close_at: usize) {
        if let Some((o, ol, _)) = self.stack.pop() {
            if o == Tok::LBrace {
                self.blocks.push((ol as u32, close_at as u32));
            } else {
                self.groups.push((ol as u32, close_at as u32));
            }
        }
    }

    fn sp(&self, l: usize, r: usize) -> Span {
        Span::new(self.file, l, r)
    }

    fn close(&mut self, close: Tok<'static>, l: usize, r: usize) {
        let open = opener(&close);
        match self.stack.last() {
            Some((o, _, _)) if *o == open => self.pop_to(l),
            Some(&(ref o, ol, or)) => {
                let o = o.clone();
                let matches_outer = self.stack.iter().rev().skip(1).any(|(x, _, _)| *x == open);
                if !matches_outer {
                    // Nothing open that this closes: an extra closer.
                    let d = Diagnostic::error(
                        Code::UnbalancedDelimiter,
                        self.sp(l, r),
                        format!("unexpected closing `{}`", close.text()),
                    )
                    .with_label(format!("no `{}` is open here", open.text()))
                    .with_secondary(self.sp(ol, or), format!("the innermost open {} starts here", what(&o)));
                    self.diags.push((d, (l as u32, r as u32)));
                    return;
                }
                // A missing closer is likelier than an extra one when this
                // closer matches something further out: unwind to it.
                let d = Diagnostic::error(
                    Code::UnbalancedDelimiter,
                    self.sp(l, r),
                    format!("mismatched closing delimiter `{}`", close.text()),
                )
                .with_label(format!("expected `{}` to close the {} opened here", closer(&o).text(), what(&o)))
                .with_secondary(self.sp(ol, or), format!("{} opened here", what(&o)));
                self.diags.push((d, (ol as u32, r as u32)));
                while let Some((x, _, _)) = self.stack.last() {
                    let done = *x == open;
                    self.pop_to(l);
                    if done {
                        break;
                    }
                }
            }
            None => {
                let d = Diagnostic::error(
                    Code::UnbalancedDelimiter,
                    self.sp(l, r),
                    format!("unexpected closing `{}`", close.text()),
                )
                .with_label(format!("no `{}` is open here", open.text()));
                self.diags.push((d, (l as u32, r as u32)));
            }
        }
    }

    fn finish(&mut self) -> Vec<Tok<'static>> {
        if let Some(&(ref o, ol, or)) = self.stack.last() {
            let o = o.clone();
            let eof = self.eof;
            let d = Diagnostic::error(
                Code::UnbalancedDelimiter,
                self.sp(eof, eof),
                format!("this `{}` is never closed", o.text()),
            )
            .with_label(format!("expected `{}` to close the {} opened here", closer(&o).text(), what(&o)))
            .with_secondary(self.sp(ol, or), format!("{} opened here", what(&o)));
            self.diags.push((d, (ol as u32, u32::MAX)));
        }
        let mut closers = Vec::with_capacity(self.stack.len());
        while let Some((o, _, _)) = self.stack.last() {
            closers.push(closer(o));
            self.pop_to(self.eof);
        }
        closers.reverse();
        closers
    }
}

impl<'a, I: Iterator<Item = lexer::Spanned<'a>>> Delimiters<'a, I> {
    fn pull(&mut self) -> Option<lexer::Spanned<'a>> {
        self.peeked.take().or_else(|| self.inner.next())
    }

    /// In a probe header, a glob written without spaces (`read*`, `*_r`,
    /// `a*b`) is one name: join touching names and `*`s into one token.
    fn join_glob(&mut self, l: usize, mut r: usize) -> lexer::Spanned<'a> {
        loop {
            match self.pull() {
                Some((nl, Tok::Ident(_) | Tok::Star, nr)) if nl == r => r = nr,
                other => {
                    self.peeked = other;
                    break;
                }
            }
        }
        (l, Tok::Ident(&self.text[l..r]), r)
    }
}

impl<'a, I: Iterator<Item = lexer::Spanned<'a>>> Iterator for Delimiters<'a, I> {
    type Item = Result<lexer::Spanned<'a>, ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(closing) = &mut self.closing {
            return closing.pop().map(|t| Ok((self.eof, t, self.eof)));
        }
        loop {
            let Some((l, t, r)) = self.pull() else {
                let closing = self.finish();
                self.closing = Some(closing);
                return self.next();
            };
            // Probe headers: `probe` up to the `{` of the body, outside parentheses.
            match t {
                Tok::Probe => {
                    self.header = true;
                    self.header_depth = 0;
                }
                Tok::LParen if self.header => self.header_depth += 1,
                Tok::RParen if self.header => self.header_depth = self.header_depth.saturating_sub(1),
                Tok::LBrace if self.header && self.header_depth == 0 => self.header = false,
                Tok::Ident(_) | Tok::Star if self.header && self.header_depth == 0 => {
                    // Only text from the source can be joined: macro
                    // expansions keep their spans elsewhere, so check the text.
                    if self.text.get(l..r).is_some() {
                        return Some(Ok(self.join_glob(l, r)));
                    }
                }
                _ => {}
            }
            match t {
                Tok::Error => continue,
                Tok::LBrace => self.stack.push((Tok::LBrace, l, r)),
                Tok::LParen => self.stack.push((Tok::LParen, l, r)),
                Tok::LBracket => self.stack.push((Tok::LBracket, l, r)),
                Tok::RBrace => self.close(Tok::RBrace, l, r),
                Tok::RParen => self.close(Tok::RParen, l, r),
                Tok::RBracket => self.close(Tok::RBracket, l, r),
                _ => {}
            }
            return Some(Ok((l, t, r)));
        }
    }
}

fn opener(close: &Tok<'_>) -> Tok<'static> {
    match close {
        Tok::RBrace => Tok::LBrace,
        Tok::RParen => Tok::LParen,
        _ => Tok::LBracket,
    }
}

fn closer(open: &Tok<'_>) -> Tok<'static> {
    match open {
        Tok::LBrace => Tok::RBrace,
        Tok::LParen => Tok::RParen,
        _ => Tok::RBracket,
    }
}

fn what(open: &Tok<'_>) -> &'static str {
    match open {
        Tok::LBrace => "block",
        Tok::LParen => "parenthesis",
        _ => "bracket",
    }
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
            let mut d =
                Diagnostic::error(Code::UnexpectedChar, span, format!("unexpected character `{}`", c.escape_debug()))
                    .with_label("no token starts with this character");
            if *c == '\'' {
                d = d.with_help("strings are written in double quotes: \"...\"");
            } else if *c == '$' || *c == '@' {
                d = d.with_help("`$` and `@` start target variables (`$name`), script arguments (`$1`, `@1`) or operators (`@count`)");
            }
            d
        }
        LexProblemKind::UnterminatedString => {
            Diagnostic::error(Code::UnterminatedString, span, "unterminated string literal")
                .with_label("this string has no closing `\"` on its line")
        }
        LexProblemKind::UnterminatedComment => {
            Diagnostic::error(Code::UnterminatedComment, span, "unterminated block comment")
                .with_label("this `/*` has no matching `*/`")
        }
        LexProblemKind::BadEscape(e) if e == "\\x" => {
            Diagnostic::error(Code::BadEscape, span, "`\\x` escape without hex digits")
                .with_label("expected one or two hex digits after `\\x`")
                .with_help("write a byte as `\\xHH`, e.g. `\\x1b`")
        }
        LexProblemKind::BadEscape(e) => {
            Diagnostic::error(Code::BadEscape, span, format!("unknown escape sequence `{e}`"))
                .with_label("not a valid escape")
                .with_help("valid escapes are \\n \\t \\\" \\\\ \\r \\a \\b \\f \\v \\ooo (octal) and \\xHH (hex)")
        }
        LexProblemKind::BadNumber(m) => Diagnostic::error(Code::BadNumber, span, m.clone()).with_label("here"),
    }
}

/// A trailing `$` (1) or `$$` (2) split off a target variable's text.
fn split_pretty(text: &str) -> (&str, u8) {
    if let Some(t) = text.strip_suffix("$$") {
        (t, 2)
    } else if let Some(t) = text.strip_suffix('$') {
        (t, 1)
    } else {
        (text, 0)
    }
}

const EXPR_STARTS: &[&str] = &[
    "Name",
    "Int",
    "Str",
    "TargetVar",
    "DollarArg",
    "AtArg",
    "\"$#\"",
    "\"@#\"",
    "AtIdent",
    "\"(\"",
    "\"[\"",
    "\"-\"",
    "\"+\"",
    "\"!\"",
    "\"&\"",
    "\"~\"",
    "\"++\"",
    "\"--\"",
];
const STMT_KEYWORDS: &[&str] = &[
    "\"if\"",
    "\"while\"",
    "\"for\"",
    "\"foreach\"",
    "\"break\"",
    "\"continue\"",
    "\"next\"",
    "\"return\"",
    "\"delete\"",
    "\"try\"",
    "\"{\"",
];
const BINARY_OPS: &[&str] = &[
    "\"*\"", "\"/\"", "\"%\"", "\".\"", "\"<<\"", "\">>\"", "\">>>\"", "\"<\"", "\"<=\"", "\">\"", "\">=\"", "\"==\"",
    "\"!=\"", "\"&\"", "\"^\"", "\"|\"", "\"&&\"", "\"||\"", "\"?\"", "\"in\"", "\"=\"", "\"+=\"", "\"-=\"", "\"*=\"",
    "\"/=\"", "\"%=\"", "\"<<=\"", "\">>=\"", "\"&=\"", "\"|=\"", "\"^=\"", "\".=\"", "\"<<<\"",
];

/// Make lalrpop's list of expected terminals readable: collapse the many
/// tokens that can start an expression or continue one into a phrase.
fn describe_expected(expected: &[String]) -> String {
    let has = |s: &str| expected.iter().any(|e| e == s);
    if has("\"*\"") && has("\"function\"") && has("Name") && !has("Int") {
        return "expected a probe point, like `begin` or `process(\"prog\").function(\"main\")`".into();
    }
    let mut parts: Vec<String> = Vec::new();
    let statement = has("\"if\"") && has("\"while\"");
    let expression = has("Int") && has("Name");
    let operator = (has("\"==\"") && has("\"*\"")) || (has("\"?\"") && has("\"=\"") && has("\"&&\""));
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

/// Does `before` end with `in NAME` (a finished `in` test)?
fn follows_in_test(before: &str) -> bool {
    let t = before.trim_end();
    let name_start = t
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    name_start < t.len() && t[..name_start].trim_end().ends_with(" in")
}

fn recent_foreach(before: &str) -> bool {
    before.rfind("foreach").is_some_and(|i| !before[i..].contains(')'))
}

fn is_binary_operator(t: &Tok<'_>) -> bool {
    matches!(
        t,
        Tok::EqEq
            | Tok::NotEq
            | Tok::Lt
            | Tok::Le
            | Tok::Gt
            | Tok::Ge
            | Tok::Shl
            | Tok::Shr
            | Tok::UShr
            | Tok::Dot
            | Tok::Plus
            | Tok::Minus
            | Tok::Star
            | Tok::Slash
            | Tok::Percent
            | Tok::In
    )
}

/// A targeted hint for common mistakes.
fn hint_for(tok: &Tok<'_>, expected: &[String], before: &str) -> Option<String> {
    let has = |s: &str| expected.iter().any(|e| e == s);
    match tok {
        Tok::Else if before.trim_end().ends_with("return") => {
            Some("a bare `return` takes the next expression as its value; write `return;` before `else`".into())
        }
        Tok::Else => Some("`else` must follow the statement of an `if`".into()),
        Tok::Dollar | Tok::DollarDollar => Some(
            "`$` and `@` start target variables (`$name`) and script arguments (`$1`, `@1`); a `$` or `$$` after a \
             target variable, an index or `@var(...)` pretty-prints it"
                .into(),
        ),
        Tok::Global if has("\"}\"") => Some(
            "globals are declared at the top level of the script, outside probes and functions; locals need no declaration"
                .into(),
        ),
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
        Tok::RParen if before.trim_end().ends_with(',') => Some("remove the trailing `,`".into()),
        Tok::Comma if has("\"in\"") && recent_foreach(before) => {
            Some("several keys go in brackets: `foreach ([k1, k2] in array)`".into())
        }
        t if follows_in_test(before) && is_binary_operator(t) => Some(format!(
            "an `in` test can only be an operand of `&`, `^`, `|`, `&&` or `||`; \
             parenthesize it to use `{}` on its result: `(k in arr) {} ...`",
            t.text(),
            t.text()
        )),
        Tok::LParen | Tok::LBracket | Tok::Str(_) if has("\"}\"") && has("\"==\"") => Some(
            "after a statement without `;`, the next one cannot start with `(`, `[` or a string: \
             end the previous statement with `;`"
                .into(),
        ),
        _ => None,
    }
}
