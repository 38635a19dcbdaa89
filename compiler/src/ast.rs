//! The abstract syntax tree produced by pass 1. Every node carries a [`Span`].
//!
//! The tree keeps what the user wrote (script arguments stay `$1`/`@1`,
//! probe points stay unresolved); pass 2 gives it meaning.

use crate::span::Span;

/// A name: inline up to 24 bytes, so most identifiers cost no allocation.
pub type Name = compact_str::CompactString;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: Name,
    pub span: Span,
}

/// One parsed file (a script or a tapset).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Script {
    pub items: Vec<Item>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Global(GlobalDecl),
    Probe(Box<Probe>),
    Alias(Box<ProbeAlias>),
    Function(Box<Function>),
}

/// `global a, b = 0, c[1000]`
#[derive(Clone, Debug, PartialEq)]
pub struct GlobalDecl {
    pub vars: Vec<GlobalVar>,
    /// `private global …` (or `private NAME`): seen only in its file.
    pub private: bool,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GlobalVar {
    pub name: Ident,
    /// `name%`: an array that, when full, makes room by dropping its
    /// oldest element (SystemTap's wrapping arrays).
    pub wrap: bool,
    /// `[N]`: an array with this capacity.
    pub size: Option<Box<Expr>>,
    /// `= literal`
    pub init: Option<Box<Expr>>,
    pub span: Span,
}

/// `probe POINT [, POINT ...] { body }`
#[derive(Clone, Debug, PartialEq)]
pub struct Probe {
    pub points: Vec<ProbePoint>,
    pub body: Block,
    pub span: Span,
}

/// `probe NAME = POINT, ... { prologue }` or `probe NAME += POINT, ... { epilogue }`
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeAlias {
    pub name: ProbePoint,
    pub epilogue: bool,
    pub points: Vec<ProbePoint>,
    pub body: Block,
    pub span: Span,
}

/// `process("a.out").function("f*").return?` with an optional `if (cond)`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbePoint {
    pub components: Vec<Component>,
    /// `?`: no error when nothing matches.
    pub optional: bool,
    /// `!`: optional, and once it matches, the later points are not tried.
    pub sufficient: bool,
    pub condition: Option<Box<Expr>>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Component {
    pub name: Ident,
    /// The literal in parentheses: a number, a string, `$N` or `@N`.
    pub arg: Option<Box<Expr>>,
    pub span: Span,
}

impl ProbePoint {
    /// The point's name without arguments: `process.function.return`.
    pub fn shape(&self) -> String {
        let names: Vec<&str> = self.components.iter().map(|c| c.name.name.as_str()).collect();
        names.join(".")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    Long,
    String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TypeAnn {
    pub ty: Type,
    pub span: Span,
}

/// `function NAME[:type](a[:type], ...) { body }`
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: Ident,
    pub ret: Option<TypeAnn>,
    pub params: Vec<Param>,
    pub body: Block,
    /// `private function …`: callable only in its file.
    pub private: bool,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub ty: Option<TypeAnn>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    Block(Block),
    Expr(Expr),
    /// `;`
    Empty,
    If(Box<If>),
    While(Box<While>),
    For(Box<For>),
    Foreach(Box<Foreach>),
    Break,
    Continue,
    Next,
    Return(Option<Expr>),
    Delete(Expr),
    Try(Box<Try>),
    /// A statement the parser could not read; already reported.
    Error,
}

// Large statements are boxed: the parser moves every node through its
// stack several times, so small common nodes make it fast.

#[derive(Clone, Debug, PartialEq)]
pub struct If {
    pub cond: Expr,
    pub then: Stmt,
    pub els: Option<Stmt>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct While {
    pub cond: Expr,
    pub body: Stmt,
}

#[derive(Clone, Debug, PartialEq)]
pub struct For {
    pub init: Option<Expr>,
    pub cond: Option<Expr>,
    pub step: Option<Expr>,
    pub body: Stmt,
}

/// `try { body } catch [(var)] { handler }`
#[derive(Clone, Debug, PartialEq)]
pub struct Try {
    pub body: Block,
    pub var: Option<Ident>,
    pub handler: Block,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortDir {
    Asc,
    Desc,
}

/// A `+` or `-` sort mark in a `foreach` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sort {
    pub dir: SortDir,
    pub span: Span,
}

/// `foreach ([v =] KEYS in ARRAY[+|-] [limit N]) body`
#[derive(Clone, Debug, PartialEq)]
pub struct Foreach {
    /// `v =`: the value is bound to this variable too.
    pub value: Option<Ident>,
    pub keys: Vec<ForeachKey>,
    /// The keys were written in brackets: `[k1, k2]`.
    pub bracketed: bool,
    /// The array iterated over (for a histogram: its statistic's name,
    /// as written inside `hist`).
    pub array: Ident,
    /// `foreach (k in a[1, *])`: only the elements whose keys equal the
    /// given ones (`*`, None: any); empty without brackets.
    pub slice: Vec<Option<Expr>>,
    /// `foreach (b in @hist_log(s))`: the buckets of a histogram.
    pub hist: Option<Expr>,
    /// `a+` / `a-` (or `v+ = ...`): sort by value.
    pub value_sort: Option<Sort>,
    /// `a @count+`, `a @sum-`, ...: an array of statistics sorted by that
    /// aggregate of each element.
    pub value_agg: Option<Ident>,
    /// The sort mark was written on the value variable (`v- = [k] in a`).
    pub value_mark: Option<Sort>,
    pub limit: Option<Expr>,
    pub body: Stmt,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ForeachKey {
    pub name: Ident,
    pub sort: Option<Sort>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Plus,
    Not,
    BitNot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Mul,
    Div,
    Mod,
    Add,
    Sub,
    Concat,
    Shl,
    Shr,
    UShr,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    BitAnd,
    BitXor,
    BitOr,
    And,
    Or,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssignOp {
    Assign,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Shl,
    Shr,
    BitAnd,
    BitOr,
    BitXor,
    Concat,
    /// `s <<< v`: add a value to a statistic.
    Aggregate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncDec {
    Inc,
    Dec,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Int(i64),
    /// A byte string (escapes may produce any byte).
    Str(Vec<u8>),
    Var(Name),
    /// `$name`
    TargetVar(Name),
    /// A path into a target variable's value: `$p->field`, `$s.field`,
    /// `$a[i]`, `@cast(p, "struct foo")->field`, and `$p$`/`$p$$`
    /// (pretty-printed).
    TargetPath(Box<TargetPath>),
    /// `$N` (as a number) or `@N` (as a string).
    ScriptArg {
        index: u32,
        as_string: bool,
    },
    /// `$#` or `@#`.
    ScriptArgCount {
        as_string: bool,
    },
    /// `arr[k1, k2]`
    Index(Box<Index>),
    /// `name(args)`
    Call(Box<Call>),
    /// `@entry(e)`, `@count(s)`, `@hist_linear(s, lo, hi, step)`, ...
    /// (the name is without the `@`).
    AtOp(Box<Call>),
    Unary {
        op: UnOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Assign {
        op: AssignOp,
        target: Box<Expr>,
        value: Box<Expr>,
    },
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        els: Box<Expr>,
    },
    IncDec {
        op: IncDec,
        prefix: bool,
        target: Box<Expr>,
    },
    /// `[k1, k2] in arr`
    In(Box<Index>),
    /// An expression the parser could not read; already reported.
    Error,
}

/// `base->a.b[i]$`.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetPath {
    /// A `TargetVar`, or an `AtOp` (`@cast`, `@var`).
    pub base: Expr,
    pub steps: Vec<PathStep>,
    /// 0, or 1 for a trailing `$` and 2 for `$$`: the value as a string.
    pub pretty: u8,
    /// `&path`: the address of what it names (in memory) instead.
    pub address: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PathStep {
    /// `->name` or `.name` (pointers are followed either way, as in SystemTap).
    Member(Ident),
    /// `[i]`
    Index(Expr),
}

/// `arr[k1, k2]`, or the keys and array of `[k1, k2] in arr`.
#[derive(Clone, Debug, PartialEq)]
pub struct Index {
    pub array: Ident,
    pub keys: Vec<Expr>,
}

/// `name(args)` or `@name(args)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub name: Ident,
    pub args: Vec<Expr>,
}

impl Expr {
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr { kind, span }
    }
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Concat => ".",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::UShr => ">>>",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::BitAnd => "&",
            BinOp::BitXor => "^",
            BinOp::BitOr => "|",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    /// Binding strength, higher binds tighter. Mirrors the grammar's tiers.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 3,
            BinOp::And => 4,
            BinOp::BitOr => 5,
            BinOp::BitXor => 6,
            BinOp::BitAnd => 7,
            // 8 is `in`.
            BinOp::Eq | BinOp::Ne => 9,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 10,
            BinOp::Shl | BinOp::Shr | BinOp::UShr => 11,
            BinOp::Concat => 12,
            BinOp::Add | BinOp::Sub => 13,
            BinOp::Mul | BinOp::Div | BinOp::Mod => 14,
        }
    }
}

impl AssignOp {
    pub fn symbol(self) -> &'static str {
        match self {
            AssignOp::Assign => "=",
            AssignOp::Add => "+=",
            AssignOp::Sub => "-=",
            AssignOp::Mul => "*=",
            AssignOp::Div => "/=",
            AssignOp::Mod => "%=",
            AssignOp::Shl => "<<=",
            AssignOp::Shr => ">>=",
            AssignOp::BitAnd => "&=",
            AssignOp::BitOr => "|=",
            AssignOp::BitXor => "^=",
            AssignOp::Concat => ".=",
            AssignOp::Aggregate => "<<<",
        }
    }
}

impl UnOp {
    pub fn symbol(self) -> &'static str {
        match self {
            UnOp::Neg => "-",
            UnOp::Plus => "+",
            UnOp::Not => "!",
            UnOp::BitNot => "~",
        }
    }
}
