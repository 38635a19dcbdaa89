//! Pass 1a: text to tokens (logos).
//!
//! The lexer never fails. A character that starts no token becomes
//! [`Tok::Error`] (so lalrpop's error recovery keeps going) and is reported
//! once; every other problem (a bad escape, an unterminated string, an
//! integer too large) is recorded in [`LexExtras`] while a usable token is
//! still produced, so the parser sees as much of the program as possible.

use logos::{FilterResult, Logos};
use std::fmt;

/// A problem found while lexing, with the byte range it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LexProblem {
    pub start: usize,
    pub end: usize,
    pub kind: LexProblemKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LexProblemKind {
    UnexpectedChar(char),
    UnterminatedString,
    UnterminatedComment,
    BadEscape(String),
    BadNumber(String),
}

#[derive(Default)]
pub struct LexExtras {
    pub problems: Vec<LexProblem>,
}

#[derive(Logos, Clone, Debug, PartialEq)]
#[logos(extras = LexExtras)]
#[logos(skip r"[ \t\r\n\f\x0B]+")]
#[logos(skip(r"#[^\n]*", allow_greedy = true))]
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
pub enum Tok<'a> {
    // Keywords.
    #[token("probe")]
    Probe,
    #[token("global")]
    Global,
    #[token("function")]
    Function,
    #[token("private")]
    Private,
    #[token("if")]
    If,
    #[token("else")]
    Else,
    #[token("for")]
    For,
    #[token("foreach")]
    Foreach,
    #[token("in")]
    In,
    #[token("limit")]
    Limit,
    #[token("while")]
    While,
    #[token("break")]
    Break,
    #[token("continue")]
    Continue,
    #[token("next")]
    Next,
    #[token("return")]
    Return,
    #[token("delete")]
    Delete,
    #[token("try")]
    Try,
    #[token("catch")]
    Catch,

    #[regex("[A-Za-z_][A-Za-z0-9_]*", |l| l.slice())]
    Ident(&'a str),
    /// `$name`: a target variable (`$arg1`, `$return`, `$buf`), with its
    /// members written without spaces (`$s.field.sub`) and a trailing `$`
    /// or `$$` (pretty-printed): `ParseCtx::target_var` splits them.
    #[regex(r"\$[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\$\$?)?", |l| &l.slice()[1..])]
    /// `$$name`, `$$provider`, `$$parms` (markers): the name keeps one `$`.
    #[regex(r"\$\$[A-Za-z_][A-Za-z0-9_]*(\$\$?)?", |l| &l.slice()[1..])]
    TargetVar(&'a str),
    /// `->name` (then `.sub` members and a trailing `$`/`$$`, as for
    /// `TargetVar`): a member of a target variable's value.
    #[regex(r"->[ \t\r\n]*[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\$\$?)?", |l| l.slice()[2..].trim_start())]
    Member(&'a str),
    /// `$N`: script argument N as an integer.
    #[regex(r"\$[0-9]+", |l| script_arg_index(l))]
    DollarArg(u32),
    /// `@N`: script argument N as a string.
    #[regex(r"@[0-9]+", |l| script_arg_index(l))]
    AtArg(u32),
    #[token("$#")]
    DollarCount,
    /// A pretty-print suffix after an index or `@var(...)`/`@cast(...)`
    /// (`$a[1]$$`, `@var("x")$`); after a name it is part of the name's token.
    #[token("$$")]
    DollarDollar,
    #[token("$")]
    Dollar,
    #[token("@#")]
    AtCount,
    /// `@name`: a built-in operator (`@entry`, `@count`), `@define`, or a macro use.
    #[regex(r"@[A-Za-z_][A-Za-z0-9_]*", |l| &l.slice()[1..])]
    AtIdent(&'a str),

    #[regex(r"[0-9][0-9A-Za-z_]*", lex_int)]
    Int(i64),
    #[token("\"", lex_string)]
    Str(Vec<u8>),

    #[token("/*", block_comment)]
    BlockComment,

    // Delimiters and punctuation.
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token(";")]
    Semi,
    #[token(",")]
    Comma,
    #[token(".")]
    Dot,
    #[token("?")]
    Question,
    #[token(":")]
    Colon,

    // Assignment.
    #[token("=")]
    Assign,
    #[token("+=")]
    AddAssign,
    #[token("-=")]
    SubAssign,
    #[token("*=")]
    MulAssign,
    #[token("/=")]
    DivAssign,
    #[token("%=")]
    ModAssign,
    #[token("<<=")]
    ShlAssign,
    #[token(">>=")]
    ShrAssign,
    #[token("&=")]
    AndAssign,
    #[token("|=")]
    OrAssign,
    #[token("^=")]
    XorAssign,
    #[token(".=")]
    ConcatAssign,
    #[token("<<<")]
    Aggregate,

    // Operators.
    #[token("++")]
    Incr,
    #[token("--")]
    Decr,
    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("%")]
    Percent,
    #[token("<<")]
    Shl,
    #[token(">>")]
    Shr,
    #[token(">>>")]
    UShr,
    #[token("&")]
    Amp,
    #[token("|")]
    Pipe,
    #[token("^")]
    Caret,
    #[token("&&")]
    AndAnd,
    #[token("||")]
    OrOr,
    #[token("!")]
    Bang,
    #[token("~")]
    Tilde,
    #[token("==")]
    EqEq,
    #[token("!=")]
    NotEq,
    #[token("<")]
    Lt,
    #[token("<=")]
    Le,
    #[token(">")]
    Gt,
    #[token(">=")]
    Ge,

    // Preprocessor.
    #[token("%(")]
    PpOpen,
    #[token("%?")]
    PpThen,
    #[token("%:")]
    PpElse,
    #[token("%)")]
    PpClose,

    /// A character that starts no token; already reported by the lexer.
    Error,
}

fn script_arg_index<'a>(l: &mut logos::Lexer<'a, Tok<'a>>) -> u32 {
    let digits = &l.slice()[1..];
    match digits.parse::<u32>() {
        Ok(n) => n,
        Err(_) => {
            let r = l.span();
            l.extras.problems.push(LexProblem {
                start: r.start,
                end: r.end,
                kind: LexProblemKind::BadNumber(format!("script argument index `{digits}` is too large")),
            });
            u32::MAX
        }
    }
}

/// Decimal, `0x` hex and `0` octal integers. As in SystemTap, any value
/// that fits in 64 bits is accepted and taken as the signed 64-bit number
/// with the same bits (so `-9223372036854775808` and `0xffffffffffffffff`
/// are both writable).
fn lex_int<'a>(l: &mut logos::Lexer<'a, Tok<'a>>) -> i64 {
    let s = l.slice();
    match parse_int(s) {
        Ok(v) => v,
        Err(msg) => {
            let r = l.span();
            l.extras.problems.push(LexProblem { start: r.start, end: r.end, kind: LexProblemKind::BadNumber(msg) });
            0
        }
    }
}

pub fn parse_int(s: &str) -> Result<i64, String> {
    let too_big = || format!("integer literal `{s}` does not fit in 64 bits");
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("invalid hexadecimal literal `{s}`"));
        }
        return u64::from_str_radix(hex, 16).map(|v| v as i64).map_err(|_| too_big());
    }
    if s.len() > 1 && s.starts_with('0') {
        let oct = &s[1..];
        if !oct.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return Err(format!("invalid octal literal `{s}` (a leading 0 means octal)"));
        }
        return u64::from_str_radix(oct, 8).map(|v| v as i64).map_err(|_| too_big());
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("invalid integer literal `{s}`"));
    }
    s.parse::<u64>().map(|v| v as i64).map_err(|_| too_big())
}

/// Called after the opening quote. Consumes up to and including the closing
/// quote; an unterminated string stops at the end of the line and is reported.
fn lex_string<'a>(l: &mut logos::Lexer<'a, Tok<'a>>) -> Vec<u8> {
    let start = l.span().start;
    let rest = l.remainder();
    let mut out = Vec::new();
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                l.bump(i + 1);
                return out;
            }
            '\n' => break,
            '\\' => {
                let Some((j, e)) = chars.next() else { break };
                let simple = match e {
                    'n' => Some('\n'),
                    't' => Some('\t'),
                    '"' => Some('"'),
                    '\\' => Some('\\'),
                    'r' => Some('\r'),
                    'a' => Some('\x07'),
                    'b' => Some('\x08'),
                    'f' => Some('\x0c'),
                    'v' => Some('\x0b'),
                    '\'' => Some('\''),
                    '?' => Some('?'),
                    _ => None,
                };
                if let Some(ch) = simple {
                    out.push(ch as u8);
                } else if e.is_digit(8) {
                    // \ooo: one to three octal digits.
                    let mut v = e.to_digit(8).unwrap_or(0);
                    for _ in 0..2 {
                        match chars.peek() {
                            Some(&(_, d)) if d.is_digit(8) => {
                                v = v * 8 + d.to_digit(8).unwrap_or(0);
                                chars.next();
                            }
                            _ => break,
                        }
                    }
                    push_byte(&mut out, (v & 0xff) as u8);
                } else if e == 'x' {
                    let mut v = 0u32;
                    let mut n = 0;
                    while n < 2 {
                        match chars.peek() {
                            Some(&(_, d)) if d.is_ascii_hexdigit() => {
                                v = v * 16 + d.to_digit(16).unwrap_or(0);
                                chars.next();
                                n += 1;
                            }
                            _ => break,
                        }
                    }
                    if n == 0 {
                        let at = start + 1 + i;
                        l.extras.problems.push(LexProblem {
                            start: at,
                            end: at + 2,
                            kind: LexProblemKind::BadEscape("\\x".into()),
                        });
                    } else {
                        push_byte(&mut out, v as u8);
                    }
                } else if e == '\n' {
                    // A backslash-newline continues the string on the next line.
                } else {
                    let at = start + 1 + i;
                    l.extras.problems.push(LexProblem {
                        start: at,
                        end: at + 1 + e.len_utf8(),
                        kind: LexProblemKind::BadEscape(format!("\\{e}")),
                    });
                    push_char(&mut out, e);
                }
                let _ = j;
            }
            c => push_char(&mut out, c),
        }
    }
    // Unterminated: take the rest of the line so the parser can go on.
    let line_len = rest.find('\n').unwrap_or(rest.len());
    l.bump(line_len);
    l.extras.problems.push(LexProblem { start, end: start + 1, kind: LexProblemKind::UnterminatedString });
    out
}

/// Strings are byte strings, as in the target: `\ooo` and `\xHH` give one
/// byte each, other characters their UTF-8 bytes.
fn push_byte(out: &mut Vec<u8>, b: u8) {
    out.push(b);
}

fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

fn block_comment<'a>(l: &mut logos::Lexer<'a, Tok<'a>>) -> FilterResult<(), ()> {
    let rest = l.remainder();
    match rest.find("*/") {
        Some(i) => {
            l.bump(i + 2);
        }
        None => {
            let start = l.span().start;
            l.bump(rest.len());
            l.extras.problems.push(LexProblem { start, end: start + 2, kind: LexProblemKind::UnterminatedComment });
        }
    }
    FilterResult::Skip
}

/// A token with its byte range, as lalrpop wants it.
pub type Spanned<'a> = (usize, Tok<'a>, usize);

/// The tokens of a file, as an iterator. An invalid character is recorded
/// as a problem and yields [`Tok::Error`]; [`Tokens::problems`] has every
/// problem once the iterator is exhausted.
pub struct Tokens<'a> {
    lexer: logos::Lexer<'a, Tok<'a>>,
}

impl<'a> Tokens<'a> {
    pub fn new(text: &'a str) -> Tokens<'a> {
        Tokens { lexer: Tok::lexer(text) }
    }

    pub fn problems(self) -> Vec<LexProblem> {
        self.lexer.extras.problems
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Spanned<'a>;

    fn next(&mut self) -> Option<Spanned<'a>> {
        loop {
            let res = self.lexer.next()?;
            let r = self.lexer.span();
            match res {
                Ok(Tok::BlockComment) => continue,
                Ok(t) => return Some((r.start, t, r.end)),
                Err(()) => {
                    let c = self.lexer.source()[r.start..].chars().next().unwrap_or('\u{fffd}');
                    self.lexer.extras.problems.push(LexProblem {
                        start: r.start,
                        end: r.start + c.len_utf8(),
                        kind: LexProblemKind::UnexpectedChar(c),
                    });
                    return Some((r.start, Tok::Error, r.end));
                }
            }
        }
    }
}

/// Lex a whole file into a vector. Never fails; problems are returned alongside.
pub fn lex(text: &str) -> (Vec<Spanned<'_>>, Vec<LexProblem>) {
    let mut it = Tokens::new(text);
    let tokens = it.by_ref().collect();
    (tokens, it.problems())
}

impl fmt::Display for Tok<'_> {
    /// How a token is named in "expected ..." and "unexpected ..." messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "identifier `{s}`"),
            Tok::TargetVar(s) => write!(f, "target variable `${s}`"),
            Tok::Member(s) => write!(f, "member `->{s}`"),
            Tok::DollarArg(n) => write!(f, "`${n}`"),
            Tok::AtArg(n) => write!(f, "`@{n}`"),
            Tok::AtIdent(s) => write!(f, "`@{s}`"),
            Tok::Int(n) => write!(f, "number `{n}`"),
            Tok::Str(_) => write!(f, "string literal"),
            Tok::Error => write!(f, "invalid character"),
            t => write!(f, "`{}`", t.text()),
        }
    }
}

impl Tok<'_> {
    /// Source text of a fixed token (keywords and punctuation).
    pub fn text(&self) -> &'static str {
        match self {
            Tok::Probe => "probe",
            Tok::Global => "global",
            Tok::Private => "private",
            Tok::Function => "function",
            Tok::If => "if",
            Tok::Else => "else",
            Tok::For => "for",
            Tok::Foreach => "foreach",
            Tok::In => "in",
            Tok::Limit => "limit",
            Tok::While => "while",
            Tok::Break => "break",
            Tok::Continue => "continue",
            Tok::Next => "next",
            Tok::Return => "return",
            Tok::Delete => "delete",
            Tok::Try => "try",
            Tok::Catch => "catch",
            Tok::DollarCount => "$#",
            Tok::DollarDollar => "$$",
            Tok::Dollar => "$",
            Tok::AtCount => "@#",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::Semi => ";",
            Tok::Comma => ",",
            Tok::Dot => ".",
            Tok::Question => "?",
            Tok::Colon => ":",
            Tok::Assign => "=",
            Tok::AddAssign => "+=",
            Tok::SubAssign => "-=",
            Tok::MulAssign => "*=",
            Tok::DivAssign => "/=",
            Tok::ModAssign => "%=",
            Tok::ShlAssign => "<<=",
            Tok::ShrAssign => ">>=",
            Tok::AndAssign => "&=",
            Tok::OrAssign => "|=",
            Tok::XorAssign => "^=",
            Tok::ConcatAssign => ".=",
            Tok::Aggregate => "<<<",
            Tok::Incr => "++",
            Tok::Decr => "--",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Percent => "%",
            Tok::Shl => "<<",
            Tok::Shr => ">>",
            Tok::UShr => ">>>",
            Tok::Amp => "&",
            Tok::Pipe => "|",
            Tok::Caret => "^",
            Tok::AndAnd => "&&",
            Tok::OrOr => "||",
            Tok::Bang => "!",
            Tok::Tilde => "~",
            Tok::EqEq => "==",
            Tok::NotEq => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::PpOpen => "%(",
            Tok::PpThen => "%?",
            Tok::PpElse => "%:",
            Tok::PpClose => "%)",
            Tok::BlockComment => "/*",
            Tok::Ident(_)
            | Tok::TargetVar(_)
            | Tok::Member(_)
            | Tok::DollarArg(_)
            | Tok::AtArg(_)
            | Tok::AtIdent(_)
            | Tok::Int(_)
            | Tok::Str(_)
            | Tok::Error => "",
        }
    }
}
