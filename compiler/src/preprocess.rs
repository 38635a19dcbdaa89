//! Pass 1b: the token-level preprocessor, as SystemTap's.
//!
//! * Conditionals `%( COND %? TOKENS [%: TOKENS] %)`: only the chosen branch
//!   reaches the grammar, so the other one may hold code for another
//!   architecture or runtime and need not parse.
//! * Macros `@define NAME[(a, b)] %( BODY %)` and their uses `@NAME[(x, y)]`;
//!   parameters are written `@a` inside the body.
//!
//! Expanded tokens keep the spans where they were written (in the macro
//! body), so diagnostics point at real text.

use crate::diag::{Code, Diagnostic};
use crate::lexer::{Spanned, Tok};
use crate::span::{FileId, Span};
use std::collections::HashMap;

/// The facts a conditional can test.
#[derive(Clone, Debug)]
pub struct PpConfig {
    pub arch: String,
    /// The running kernel's version (`uname -r`, e.g. "6.1.0-18-amd64").
    pub kernel_vr: String,
    /// `runtime`: telco-stap runs probes in user space, like SystemTap's
    /// dyninst runtime, so scripts that branch on it take the user-space path.
    pub runtime: String,
    pub systemtap_v: String,
    pub guru_mode: bool,
    /// Number of script arguments, for `$#` / `@#`.
    pub script_args: Vec<String>,
    /// Macro libraries (`.stpm` files, as SystemTap's tapset directory
    /// has them): their `@define`s are visible to every script and
    /// tapset. (name, text).
    pub library: Vec<(String, &'static str)>,
}

impl PpConfig {
    /// `%p` as SystemTap printed it before 1.3 (`--compatible` below 1.3):
    /// the field width defaults to 18 and the digits fill it.
    pub fn legacy_pointer_format(&self) -> bool {
        compare_versions(&self.systemtap_v, "1.3") == std::cmp::Ordering::Less
    }
}

impl Default for PpConfig {
    fn default() -> PpConfig {
        PpConfig {
            arch: std::env::consts::ARCH.to_string(),
            kernel_vr: kernel_release().unwrap_or_else(|| "0.0.0".into()),
            runtime: "dyninst".into(),
            systemtap_v: "5.0".into(),
            guru_mode: false,
            script_args: Vec::new(),
            library: crate::library::builtin_macro_libraries(),
        }
    }
}

fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string())
}

/// Macro expansion depth that is treated as unbounded recursion.
const MAX_EXPANSION_DEPTH: usize = 64;

struct Macro<'a> {
    params: Vec<&'a str>,
    body: Vec<Spanned<'a>>,
    /// From a macro library (`.stpm`): its tokens are in another file, so
    /// an expansion puts them at the use.
    library: bool,
}

struct Pp<'a, 'c> {
    file: FileId,
    cfg: &'c PpConfig,
    macros: HashMap<&'a str, Macro<'a>>,
    /// Reading a macro library: what it defines is `Macro::library`.
    in_library: bool,
    diags: Vec<Diagnostic>,
    /// End of the input, for errors at end of file.
    eof: usize,
}

/// Whether `text` may use the preprocessor at all; when it cannot, its tokens
/// can go straight from the lexer to the parser.
pub fn needed(text: &str) -> bool {
    ["%(", "%?", "%:", "%)", "@define"].iter().any(|p| text.contains(p))
}

/// The names the macro libraries of `cfg` define (`@define NAME`).
fn library_names(cfg: &PpConfig) -> impl Iterator<Item = &str> {
    cfg.library.iter().flat_map(|(_, text)| {
        text.split("@define").skip(1).filter_map(|rest| {
            let rest = rest.trim_start();
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
    })
}

/// Whether `text` may use a macro of `cfg`'s macro libraries.
pub fn uses_library(text: &str, cfg: &PpConfig) -> bool {
    text.contains('@')
        && library_names(cfg).any(|n| {
            text.match_indices('@').any(|(i, _)| {
                let rest = &text[i + 1..];
                rest.starts_with(n) && !rest[n.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        })
}

/// Run the preprocessor over a file's tokens.
pub fn preprocess<'a>(
    file: FileId,
    tokens: Vec<Spanned<'a>>,
    cfg: &PpConfig,
    eof: usize,
) -> (Vec<Spanned<'a>>, Vec<Diagnostic>) {
    // Fast path: most scripts use neither conditionals nor macros.
    let library: std::collections::HashSet<&str> = library_names(cfg).collect();
    if !tokens.iter().any(|(_, t, _)| {
        matches!(t, Tok::PpOpen | Tok::PpThen | Tok::PpElse | Tok::PpClose | Tok::AtIdent("define"))
            || matches!(t, Tok::AtIdent(n) if library.contains(n))
    }) {
        return (tokens, Vec::new());
    }
    let mut pp = Pp { file, cfg, macros: HashMap::new(), in_library: true, diags: Vec::new(), eof };
    // The macro libraries first: their definitions (and conditionals
    // around them) only; what else they hold is not the script's.
    for (name, text) in &cfg.library {
        let text: &'a str = text;
        let (toks, problems) = crate::lexer::lex(text);
        let before = pp.diags.len();
        pp.run(&toks, &mut Vec::new(), 0);
        // Their positions are in another file: said by name.
        let first = problems.first().map(|p| format!("{:?} at byte {}", p.kind, p.start));
        let found: Vec<String> = pp.diags.drain(before..).map(|d| d.message).chain(first).collect();
        if let Some(m) = found.first() {
            pp.diags.push(Diagnostic::error(
                Code::Preprocessor,
                Span::new(file, 0, 0),
                format!("macro library `{name}`: {m}"),
            ));
        }
    }
    pp.in_library = false;
    let mut out = Vec::with_capacity(tokens.len());
    pp.run(&tokens, &mut out, 0);
    (out, pp.diags)
}

impl<'a> Pp<'a, '_> {
    fn span(&self, l: usize, r: usize) -> Span {
        Span::new(self.file, l, r)
    }

    fn error(&mut self, code: Code, l: usize, r: usize, msg: impl Into<String>) -> &mut Diagnostic {
        self.diags.push(Diagnostic::error(code, self.span(l, r), msg));
        self.diags.last_mut().expect("just pushed")
    }

    /// Process `toks`, appending the result to `out`.
    fn run(&mut self, toks: &[Spanned<'a>], out: &mut Vec<Spanned<'a>>, depth: usize) {
        let mut i = 0;
        while i < toks.len() {
            let (l, ref t, r) = toks[i];
            match t {
                Tok::PpOpen => {
                    i = self.conditional(toks, i, out, depth);
                }
                Tok::PpThen | Tok::PpElse | Tok::PpClose => {
                    self.error(
                        Code::Preprocessor,
                        l,
                        r,
                        format!("`{}` outside a preprocessor conditional", t.text()),
                    )
                    .label = "no `%(` is open here".into();
                    i += 1;
                }
                Tok::AtIdent("define") => {
                    i = self.define(toks, i);
                }
                Tok::AtIdent(name) if self.macros.contains_key(name) => {
                    i = self.expand(toks, i, out, depth);
                }
                _ => {
                    out.push(toks[i].clone());
                    i += 1;
                }
            }
        }
    }

    /// Find the `%)` matching the `%(` at `open`, and the top-level `%?`
    /// and `%:` between them. Returns (then, else, close) indices.
    fn conditional_parts(&self, toks: &[Spanned<'a>], open: usize) -> (Option<usize>, Option<usize>, Option<usize>) {
        let mut depth = 0usize;
        let (mut then, mut els) = (None, None);
        for (j, (_, t, _)) in toks.iter().enumerate().skip(open + 1) {
            match t {
                Tok::PpOpen => depth += 1,
                Tok::PpClose if depth == 0 => return (then, els, Some(j)),
                Tok::PpClose => depth -= 1,
                Tok::PpThen if depth == 0 && then.is_none() => then = Some(j),
                Tok::PpElse if depth == 0 && els.is_none() => els = Some(j),
                _ => {}
            }
        }
        (then, els, None)
    }

    fn conditional(&mut self, toks: &[Spanned<'a>], open: usize, out: &mut Vec<Spanned<'a>>, depth: usize) -> usize {
        let (ol, _, or) = toks[open];
        let (then, els, close) = self.conditional_parts(toks, open);
        let Some(close) = close else {
            let (eof, open_span) = (self.eof, self.span(ol, or));
            self.error(Code::Preprocessor, eof, eof, "preprocessor conditional is never closed")
                .with_secondary_mut(open_span, "`%(` opened here")
                .label = "expected `%)`".into();
            return toks.len();
        };
        let Some(then) = then else {
            let (cl, _, cr) = toks[close];
            let open_span = self.span(ol, or);
            self.error(Code::Preprocessor, cl, cr, "preprocessor conditional without `%?`")
                .with_secondary_mut(open_span, "conditional opened here")
                .label = "expected `%? ...` before this".into();
            return close + 1;
        };
        if let Some(e) = els {
            if e < then {
                let (el, _, er) = toks[e];
                self.error(Code::Preprocessor, el, er, "`%:` before `%?` in a preprocessor conditional");
                return close + 1;
            }
        }
        let cond = &toks[open + 1..then];
        let take_then = match eval_condition(cond, self.cfg) {
            Ok(v) => v,
            Err((msg, at)) => {
                // No token to blame: the condition ended early, at the `%?`.
                let (l, r) = at.map(|k| (cond[k].0, cond[k].2)).unwrap_or((toks[then].0, toks[then].2));
                let d = self.error(Code::Preprocessor, l, r, format!("invalid preprocessor condition: {msg}"));
                d.label = if at.is_some() { "here" } else { "the condition stops here" }.into();
                d.help = Some("conditions compare `arch`, `kernel_v`, `kernel_vr`, `runtime`, `systemtap_v`, `systemtap_privilege`, `guru_mode`, `CONFIG_*`, `$#` or `@#` with a literal, joined by `&&` and `||`".into());
                false
            }
        };
        let branch = if take_then {
            &toks[then + 1..els.unwrap_or(close)]
        } else if let Some(e) = els {
            &toks[e + 1..close]
        } else {
            &toks[0..0]
        };
        self.run(branch, out, depth);
        close + 1
    }

    /// `@define NAME[(params)] %( body %)`; returns the index after it.
    fn define(&mut self, toks: &[Spanned<'a>], at: usize) -> usize {
        let (dl, _, dr) = toks[at];
        let mut i = at + 1;
        let name = match toks.get(i) {
            Some((_, Tok::Ident(n), _)) => *n,
            Some((l, _, r)) => {
                let (l, r) = (*l, *r);
                self.error(Code::Preprocessor, l, r, "expected a macro name after `@define`").label =
                    "not a name".into();
                return self.skip_define_body(toks, i);
            }
            None => {
                let eof = self.eof;
                self.error(Code::Preprocessor, dl, dr.max(eof).min(dr), "`@define` without a name");
                return toks.len();
            }
        };
        i += 1;
        let mut params = Vec::new();
        if matches!(toks.get(i), Some((_, Tok::LParen, _))) {
            i += 1;
            loop {
                match toks.get(i) {
                    Some((_, Tok::Ident(p), _)) => {
                        params.push(*p);
                        i += 1;
                    }
                    Some((_, Tok::RParen, _)) if params.is_empty() => {}
                    Some((l, _, r)) => {
                        let (l, r) = (*l, *r);
                        self.error(Code::Preprocessor, l, r, "expected a macro parameter name").label = "here".into();
                        return self.skip_define_body(toks, i);
                    }
                    None => return toks.len(),
                }
                match toks.get(i) {
                    Some((_, Tok::Comma, _)) => i += 1,
                    Some((_, Tok::RParen, _)) => {
                        i += 1;
                        break;
                    }
                    Some((l, _, r)) => {
                        let (l, r) = (*l, *r);
                        self.error(Code::Preprocessor, l, r, "expected `,` or `)` in macro parameters").label =
                            "here".into();
                        return self.skip_define_body(toks, i);
                    }
                    None => return toks.len(),
                }
            }
        }
        let Some((_, Tok::PpOpen, _)) = toks.get(i) else {
            let (l, r) = toks.get(i).map(|t| (t.0, t.2)).unwrap_or((self.eof, self.eof));
            self.error(Code::Preprocessor, l, r, format!("expected `%(` to start the body of macro `@{name}`")).label =
                "expected `%(`".into();
            return i;
        };
        let (_, _, close) = self.conditional_parts(toks, i);
        let Some(close) = close else {
            let eof = self.eof;
            let (ol, _, or) = toks[i];
            let open_span = self.span(ol, or);
            self.error(Code::Preprocessor, eof, eof, format!("body of macro `@{name}` is never closed"))
                .with_secondary_mut(open_span, "`%(` opened here")
                .label = "expected `%)`".into();
            return toks.len();
        };
        let body = toks[i + 1..close].to_vec();
        let library = self.in_library;
        // A script's own macro may stand in for a library's.
        if self.macros.insert(name, Macro { params, body, library }).is_some_and(|m| !m.library || library) {
            self.error(Code::Preprocessor, dl, toks[at + 1].2, format!("macro `@{name}` is defined twice")).label =
                "redefined here".into();
        }
        close + 1
    }

    fn skip_define_body(&self, toks: &[Spanned<'a>], from: usize) -> usize {
        match toks[from..].iter().position(|(_, t, _)| matches!(t, Tok::PpOpen)) {
            Some(k) => match self.conditional_parts(toks, from + k).2 {
                Some(c) => c + 1,
                None => toks.len(),
            },
            None => toks.len(),
        }
    }

    /// Expand the macro use at `at`; returns the index after it.
    fn expand(&mut self, toks: &[Spanned<'a>], at: usize, out: &mut Vec<Spanned<'a>>, depth: usize) -> usize {
        let (ul, ref ut, ur) = toks[at];
        let Tok::AtIdent(name) = *ut else { return at + 1 };
        if depth >= MAX_EXPANSION_DEPTH {
            self.error(Code::MacroExpansion, ul, ur, format!("macro `@{name}` expands too deeply (recursive?)"))
                .label = format!("expansion stopped after {MAX_EXPANSION_DEPTH} levels");
            return toks.len();
        }
        let nparams = self.macros[name].params.len();
        let mut i = at + 1;
        let mut args: Vec<Vec<Spanned<'a>>> = Vec::new();
        if matches!(toks.get(i), Some((_, Tok::LParen, _))) && nparams > 0 {
            // Split the arguments at top-level commas.
            let mut level = 0usize;
            let mut cur = Vec::new();
            i += 1;
            loop {
                let Some(t) = toks.get(i) else {
                    let (eof, use_span) = (self.eof, self.span(ul, ur));
                    self.error(
                        Code::MacroExpansion,
                        eof,
                        eof,
                        format!("arguments of macro `@{name}` are never closed"),
                    )
                    .with_secondary_mut(use_span, "macro used here")
                    .label = "expected `)`".into();
                    return toks.len();
                };
                match t.1 {
                    Tok::LParen | Tok::LBracket | Tok::LBrace => level += 1,
                    Tok::RParen if level == 0 => {
                        args.push(std::mem::take(&mut cur));
                        i += 1;
                        break;
                    }
                    Tok::RParen | Tok::RBracket | Tok::RBrace => level = level.saturating_sub(1),
                    Tok::Comma if level == 0 => {
                        args.push(std::mem::take(&mut cur));
                        i += 1;
                        continue;
                    }
                    _ => {}
                }
                cur.push(t.clone());
                i += 1;
            }
        }
        if args.len() != nparams {
            let r = toks.get(i.saturating_sub(1)).map(|t| t.2).unwrap_or(ur);
            self.error(
                Code::MacroExpansion,
                ul,
                r,
                format!(
                    "macro `@{name}` takes {nparams} argument{} but {} {} given",
                    if nparams == 1 { "" } else { "s" },
                    args.len(),
                    if args.len() == 1 { "was" } else { "were" }
                ),
            )
            .label = "in this use".into();
            // Stand in for the expansion so the code around it still parses.
            out.push((ul, Tok::Int(0), r));
            return i;
        }
        let mac = &self.macros[name];
        let mut substituted = Vec::with_capacity(mac.body.len());
        for t in &mac.body {
            if let Tok::AtIdent(p) = t.1 {
                if let Some(k) = mac.params.iter().position(|q| *q == p) {
                    substituted.extend(args[k].iter().cloned());
                    continue;
                }
            }
            if mac.library {
                // Written in the library: shown at the use.
                substituted.push((ul, t.1.clone(), ur));
            } else {
                substituted.push(t.clone());
            }
        }
        self.run(&substituted, out, depth + 1);
        i
    }
}

trait DiagExt {
    fn with_secondary_mut(&mut self, span: Span, msg: &str) -> &mut Self;
}

impl DiagExt for Diagnostic {
    fn with_secondary_mut(&mut self, span: Span, msg: &str) -> &mut Self {
        self.secondary.push(crate::diag::Label { span, message: msg.into() });
        self
    }
}

// ------------------------------------------------------------ conditions

#[derive(Debug, PartialEq)]
enum Val {
    Int(i64),
    Str(String),
    /// A version string compared component by component.
    Version(String),
}

type CondResult<T> = Result<T, (String, Option<usize>)>;

/// Evaluate a conditional's tokens. Errors carry the index of the offending token.
fn eval_condition(toks: &[Spanned<'_>], cfg: &PpConfig) -> CondResult<bool> {
    let mut p = CondParser { toks, pos: 0, cfg };
    let v = p.or()?;
    if p.pos < toks.len() {
        return Err((format!("unexpected {}", toks[p.pos].1), Some(p.pos)));
    }
    Ok(v)
}

struct CondParser<'t, 'a, 'c> {
    toks: &'t [Spanned<'a>],
    pos: usize,
    cfg: &'c PpConfig,
}

impl CondParser<'_, '_, '_> {
    fn peek(&self) -> Option<Tok<'static>> {
        // Only punctuation is ever tested, so a cheap owned copy will do.
        self.toks.get(self.pos).map(|t| match t.1 {
            Tok::OrOr => Tok::OrOr,
            Tok::AndAnd => Tok::AndAnd,
            Tok::Bang => Tok::Bang,
            Tok::LParen => Tok::LParen,
            Tok::RParen => Tok::RParen,
            Tok::EqEq => Tok::EqEq,
            Tok::NotEq => Tok::NotEq,
            Tok::Lt => Tok::Lt,
            Tok::Le => Tok::Le,
            Tok::Gt => Tok::Gt,
            Tok::Ge => Tok::Ge,
            _ => Tok::Error,
        })
    }

    fn or(&mut self) -> CondResult<bool> {
        let mut v = self.and()?;
        while matches!(self.peek(), Some(Tok::OrOr)) {
            self.pos += 1;
            let w = self.and()?;
            v = v || w;
        }
        Ok(v)
    }

    fn and(&mut self) -> CondResult<bool> {
        let mut v = self.atom()?;
        while matches!(self.peek(), Some(Tok::AndAnd)) {
            self.pos += 1;
            let w = self.atom()?;
            v = v && w;
        }
        Ok(v)
    }

    fn atom(&mut self) -> CondResult<bool> {
        match self.peek() {
            Some(Tok::Bang) => {
                self.pos += 1;
                Ok(!self.atom()?)
            }
            Some(Tok::LParen) => {
                self.pos += 1;
                let v = self.or()?;
                if !matches!(self.peek(), Some(Tok::RParen)) {
                    return Err(("expected `)`".into(), self.toks.get(self.pos).map(|_| self.pos)));
                }
                self.pos += 1;
                Ok(v)
            }
            _ => self.comparison(),
        }
    }

    fn comparison(&mut self) -> CondResult<bool> {
        let lhs = self.operand()?;
        let op = match self.peek() {
            Some(t @ (Tok::EqEq | Tok::NotEq | Tok::Lt | Tok::Le | Tok::Gt | Tok::Ge)) => t,
            // A lone operand is true when it is non-zero / non-empty (`guru_mode`).
            _ => {
                return Ok(match lhs {
                    Val::Int(n) => n != 0,
                    Val::Str(s) | Val::Version(s) => !s.is_empty(),
                })
            }
        };
        self.pos += 1;
        let at = self.pos;
        let rhs = self.operand()?;
        let ord = match (&lhs, &rhs) {
            (Val::Int(a), Val::Int(b)) => a.cmp(b),
            (Val::Version(a), Val::Str(b) | Val::Version(b)) | (Val::Str(a), Val::Version(b)) => compare_versions(a, b),
            (Val::Str(a), Val::Str(b)) => {
                // `==` and `!=` on strings are glob matches, as in SystemTap (`arch == "i?86"`).
                if matches!(op, Tok::EqEq | Tok::NotEq) {
                    let m = crate::glob::glob_match(b, a);
                    return Ok(if op == Tok::EqEq { m } else { !m });
                }
                a.cmp(b)
            }
            _ => return Err(("comparing a number with a string".into(), Some(at))),
        };
        use std::cmp::Ordering::*;
        Ok(match op {
            Tok::EqEq => ord == Equal,
            Tok::NotEq => ord != Equal,
            Tok::Lt => ord == Less,
            Tok::Le => ord != Greater,
            Tok::Gt => ord == Greater,
            _ => ord != Less,
        })
    }

    fn operand(&mut self) -> CondResult<Val> {
        let at = self.pos;
        let Some(t) = self.toks.get(at) else {
            let msg = match at.checked_sub(1).and_then(|k| self.toks.get(k)) {
                Some((_, op, _)) if !op.text().is_empty() => format!("expected a value after `{}`", op.text()),
                _ => "expected a condition, like `arch == \"x86_64\"`".into(),
            };
            return Err((msg, None));
        };
        self.pos += 1;
        let nargs = self.cfg.script_args.len() as i64;
        Ok(match &t.1 {
            Tok::Int(n) => Val::Int(*n),
            Tok::Minus => match self.toks.get(self.pos) {
                Some((_, Tok::Int(n), _)) => {
                    self.pos += 1;
                    Val::Int(n.wrapping_neg())
                }
                _ => return Err(("expected a number after `-`".into(), Some(at))),
            },
            Tok::Str(s) => Val::Str(String::from_utf8_lossy(s).into_owned()),
            Tok::DollarCount | Tok::AtCount => Val::Int(nargs),
            Tok::DollarArg(n) | Tok::AtArg(n) => {
                let Some(a) = self.cfg.script_args.get((*n as usize).wrapping_sub(1)) else {
                    return Err((format!("script argument {n} is not given"), Some(at)));
                };
                match (&t.1, a.parse::<i64>()) {
                    (Tok::DollarArg(_), Ok(v)) => Val::Int(v),
                    (Tok::DollarArg(_), Err(_)) => {
                        return Err((format!("script argument ${n} (`{a}`) is not a number"), Some(at)))
                    }
                    _ => Val::Str(a.clone()),
                }
            }
            Tok::Ident("arch") => Val::Str(self.cfg.arch.clone()),
            Tok::Ident("kernel_v") => {
                Val::Version(self.cfg.kernel_vr.split(['-', '+']).next().unwrap_or("").to_string())
            }
            Tok::Ident("kernel_vr") => Val::Version(self.cfg.kernel_vr.clone()),
            Tok::Ident("runtime") => Val::Str(self.cfg.runtime.clone()),
            Tok::Ident("systemtap_v") => Val::Version(self.cfg.systemtap_v.clone()),
            Tok::Ident("systemtap_privilege") => Val::Str("stapdev".into()),
            Tok::Ident("guru_mode") => Val::Int(self.cfg.guru_mode as i64),
            // No kernel configuration applies to a user-space tracer.
            Tok::Ident(s) if s.starts_with("CONFIG_") => Val::Str(String::new()),
            other => return Err((format!("unexpected {other}"), Some(at))),
        })
    }
}

/// Compare dotted versions numerically where both components are numbers.
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |s: &str| -> Vec<String> { s.split(['.', '-', '+']).map(str::to_string).collect() };
    let (va, vb) = (split(a), split(b));
    for k in 0..va.len().max(vb.len()) {
        let (x, y) = (va.get(k).map(String::as_str).unwrap_or("0"), vb.get(k).map(String::as_str).unwrap_or("0"));
        let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(m), Ok(n)) => m.cmp(&n),
            _ => x.cmp(y),
        };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    std::cmp::Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        use crate::glob::glob_match;
        assert!(glob_match("i?86", "i686"));
        assert!(glob_match("x86_*", "x86_64"));
        assert!(!glob_match("arm*", "x86_64"));
        assert!(glob_match("mem[cs]*", "memcpy"));
        assert!(glob_match("mem[!a]*", "memset"));
        assert!(!glob_match("mem[!s]et", "memset"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
    }

    #[test]
    fn versions() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_versions("6.1.0", "5.10"), Greater);
        assert_eq!(compare_versions("5.10", "5.9"), Greater);
        assert_eq!(compare_versions("5.0", "5"), Equal);
    }
}
