//! Symbols and types: AST bodies to the typed program.
//!
//! One walker does both. It runs over the whole program repeatedly, each
//! time learning types from what it sees (`x = 1` makes `x` a long,
//! `printf("%s", y)` makes `y` a string, `f(x)` passes types between a call
//! and the function's parameters), until nothing changes. A last run reports
//! every error — conflicts name both uses — and builds the typed program.
//! Anything still without a type is an error at its first use.

use crate::ast::{self, AssignOp, BinOp, ExprKind as A, IncDec, StmtKind as S, UnOp};
use crate::diag::{Code, Diagnostic};
use crate::program::builtins::{self, Builtin};
use crate::program::*;
use crate::span::Span;
use std::collections::HashMap;

#[cfg(test)]
#[path = "lower_tests.rs"]
pub(super) mod tests;

/// What kind of probe a body belongs to: it decides which context
/// (`$argN`, `$return`, `@entry`) makes sense.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// begin/end/error/timer/process events: no target function.
    Session,
    FunctionEntry,
    FunctionReturn,
    Function,
    /// An SDT marker: its arguments by its specs.
    Mark,
    /// `process.end`: as a session probe, with `$status`.
    ProcessEnd,
    /// A probe condition: globals only.
    Condition,
    /// `timer.profile`: in the tracer, with a sampled thread's registers
    /// and stack (`uaddr()`, `register()`, `ubacktrace()`), no DWARF.
    Sample,
    /// `process.blocked`: a sample taken where a thread blocked, with the
    /// wait's `$duration` and `$syscall`.
    Blocked,
}

impl BodyKind {
    /// A thread stopped at a function's entry or return: its arguments
    /// (`$argN`) and the function's DWARF scope are there.
    pub fn at_function(self) -> bool {
        match self {
            BodyKind::FunctionEntry | BodyKind::FunctionReturn | BodyKind::Function => true,
            BodyKind::Session
            | BodyKind::Mark
            | BodyKind::ProcessEnd
            | BodyKind::Condition
            | BodyKind::Sample
            | BodyKind::Blocked => false,
        }
    }

    /// A target thread's registers and probe address are there
    /// (`register()`, `uaddr()`, `returnval()`, `*_arg()`): not in session
    /// bodies (begin, end, error, timers, process and thread events),
    /// `process.end` or conditions.
    pub fn has_registers(self) -> bool {
        match self {
            BodyKind::Session | BodyKind::Condition | BodyKind::ProcessEnd => false,
            BodyKind::FunctionEntry
            | BodyKind::FunctionReturn
            | BodyKind::Function
            | BodyKind::Mark
            | BodyKind::Sample
            | BodyKind::Blocked => true,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Slot {
    ty: Option<Ty>,
    /// Where the type was decided, for conflict messages.
    decided: Option<Span>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Unknown,
    Scalar,
    Array,
}

struct GlobalState {
    name: String,
    span: Span,
    capacity: Option<u64>,
    wrap: bool,
    init: Option<Const>,
    shape: Shape,
    shape_decided: Option<Span>,
    keys: Vec<Slot>,
    value: Slot,
    first_use: Option<Span>,
}

#[derive(Default)]
pub struct Locals {
    index: HashMap<ast::Name, LocalId>,
    slots: Vec<(String, Slot, Span)>,
}

struct FuncState<'a> {
    ast: &'a ast::Function,
    params: usize,
    locals: Locals,
    ret: Slot,
}

/// A body to lower: a function, or an expanded probe (alias prologues, the
/// user's body, epilogues — one scope).
pub struct ProbeBody<'a> {
    pub blocks: Vec<&'a ast::Block>,
    pub condition: Option<ast::Expr>,
    pub kind: BodyKind,
    pub locals: Locals,
    /// The marker of a `.mark` probe (one body per marker: `$argN` reads
    /// where that marker's specs say).
    pub mark: Option<crate::program::MarkPoint>,
    /// The function or statement site of a body that reads target
    /// variables by name (one body per site: each has its own locations).
    pub site: Option<std::rc::Rc<super::dwarf_vars::Site>>,
}

pub struct Lowerer<'a> {
    globals: Vec<GlobalState>,
    global_index: HashMap<ast::Name, GlobalId>,
    functions: Vec<FuncState<'a>>,
    func_index: HashMap<ast::Name, FuncId>,
    args: &'a [String],
    guru: bool,
    /// `--skip-badvars`: a context variable that cannot be found or read
    /// here is 0, with a warning, instead of an error.
    pub skip_badvars: bool,
    // The walk's state.
    reporting: bool,
    changed: bool,
    diags: Vec<Diagnostic>,
    locals: Locals,
    kind: BodyKind,
    mark: Option<crate::program::MarkPoint>,
    site: Option<std::rc::Rc<super::dwarf_vars::Site>>,
    /// In script functions: the modules their `@var(..., "module")` and
    /// `@cast(..., "module")` name (`elaborate::function_sites`).
    pub fn_sites: HashMap<String, std::rc::Rc<super::dwarf_vars::Site>>,
    in_function: Option<FuncId>,
    /// Slots already reported as untyped (one error per variable).
    untyped_reported: Vec<String>,
    /// Locals of probe bodies given a type, and where: a probe's `n` left
    /// untyped while another probe's `n` has a value is a missing
    /// `global n`.
    typed_locals: Vec<(String, Span)>,
    /// Every function defined, compiled or elided, for "did you mean".
    all_functions: Vec<String>,
    /// The user's script: its globals are not seen by tapset functions,
    /// whose names are their own (a tapset's local `s` is never a
    /// script's `global s`).
    pub script_file: Option<crate::span::FileId>,
    /// `-G NAME=VALUE`: initial values given on the command line.
    pub set_globals: &'a [(String, String)],
}

type Typed = (Expr, Option<Ty>);

/// Whether computing a target place runs side effects (assignments,
/// `++`, function calls): it must then be computed once.
fn place_has_effects(place: &super::dwarf_vars::Place) -> bool {
    use super::dwarf_vars::Place;
    let exprs: Vec<&Expr> = match place {
        Place::Mem(e) | Place::Value(e) => vec![e],
        Place::Reg(_) => Vec::new(),
        Place::Pieces(ps) => ps
            .iter()
            .filter_map(|(_, p)| p.as_ref())
            .filter_map(|p| match p {
                Place::Mem(e) | Place::Value(e) => Some(e),
                _ => None,
            })
            .collect(),
    };
    let mut effects = false;
    for e in exprs {
        crate::program::visit::visit_expr(e, &mut |x| {
            effects |= matches!(x.kind, ExprKind::Assign { .. } | ExprKind::IncDec { .. } | ExprKind::Call { .. });
            !effects
        });
    }
    effects
}

/// A lowered probe handler: its body, its condition and its locals.
pub type LoweredProbe = (Vec<Stmt>, Option<Expr>, Vec<Local>);

/// Inference is monotonic (a slot only goes from unknown to known, locals
/// are only added), so rounds stop by themselves; this bound only guards
/// against a bug.
const MAX_ROUNDS: usize = 100_000;

impl<'a> Lowerer<'a> {
    pub fn new(args: &'a [String], guru: bool) -> Lowerer<'a> {
        Lowerer {
            globals: Vec::new(),
            global_index: HashMap::new(),
            functions: Vec::new(),
            func_index: HashMap::new(),
            args,
            guru,
            skip_badvars: false,
            reporting: false,
            changed: false,
            diags: Vec::new(),
            locals: Locals::default(),
            kind: BodyKind::Session,
            mark: None,
            site: None,
            fn_sites: HashMap::new(),
            in_function: None,
            untyped_reported: Vec::new(),
            typed_locals: Vec::new(),
            all_functions: Vec::new(),
            script_file: None,
            set_globals: &[],
        }
    }

    /// The bodies of the functions declared (compiled).
    pub fn function_blocks(&self) -> Vec<&'a ast::Block> {
        self.functions.iter().map(|f| &f.ast.body).collect()
    }

    /// A function exists (even if it is not compiled): suggest it.
    pub fn know_function(&mut self, name: &str) {
        self.all_functions.push(name.to_string());
    }

    /// Whether a global `name` was declared.
    pub fn has_global(&self, name: &str) -> bool {
        self.global_index.contains_key(name)
    }

    pub fn declare_global(&mut self, v: &ast::GlobalVar, diags: &mut Vec<Diagnostic>) {
        let size_span = v.size.as_deref().map_or(v.name.span, |e| e.span);
        let init_span = v.init.as_deref().map_or(v.name.span, |e| e.span);
        let capacity = match v.size.as_deref().map(|e| &e.kind) {
            Some(A::Int(n)) if *n > 0 => Some(*n as u64),
            Some(A::ScriptArg { index, as_string: false }) => match self.script_arg_long(*index, size_span) {
                Ok(n) if n > 0 => Some(n as u64),
                Ok(_) => {
                    diags.push(Diagnostic::error(Code::BadValue, size_span, "array size must be positive"));
                    None
                }
                Err(d) => {
                    diags.push(d);
                    None
                }
            },
            _ => None,
        };
        let init = match v.init.as_deref().map(|e| &e.kind) {
            None => None,
            Some(A::Int(n)) => Some(Const::Long(*n)),
            Some(A::ScriptArgCount { as_string: false }) => Some(Const::Long(self.args.len() as i64)),
            Some(A::ScriptArgCount { as_string: true }) => {
                Some(Const::String(self.args.len().to_string().into_bytes()))
            }
            Some(A::Str(s)) => Some(Const::String(s.clone())),
            Some(A::ScriptArg { index, as_string: false }) => match self.script_arg_long(*index, init_span) {
                Ok(n) => Some(Const::Long(n)),
                Err(d) => {
                    diags.push(d);
                    None
                }
            },
            Some(A::ScriptArg { index, as_string: true }) => match self.script_arg(*index, init_span) {
                Ok(s) => Some(Const::String(s.as_bytes().to_vec())),
                Err(d) => {
                    diags.push(d);
                    None
                }
            },
            Some(_) => None,
        };
        // `-G NAME=VALUE` (the last given): a number is a long, anything
        // else a string, unless the declaration's own value says which.
        let given = self.set_globals.iter().rev().find(|(n, _)| n == v.name.name.as_str()).map(|(_, x)| x.clone());
        let init = match given {
            Some(x) => {
                let number = crate::lexer::parse_int(x.trim()).ok();
                match (&init, number) {
                    (Some(Const::String(_)), _) | (None, None) => Some(Const::String(x.into_bytes())),
                    (_, Some(n)) => Some(Const::Long(n)),
                    (Some(Const::Long(_)), None) => {
                        diags.push(Diagnostic::error(
                            Code::TypeMismatch,
                            init_span,
                            format!("-G {}={x}: `{}` is a number, and `{x}` is not one", v.name.name, v.name.name),
                        ));
                        init
                    }
                }
            }
            None => init,
        };
        // `= $1` is a long and `= @1` a string even when the argument is
        // missing (already reported): no "cannot tell the type" on top.
        let value = match (&init, v.init.as_deref().map(|e| &e.kind)) {
            (Some(Const::Long(_)), _) | (None, Some(A::ScriptArg { as_string: false, .. })) => {
                Slot { ty: Some(Ty::Long), decided: Some(v.span) }
            }
            (Some(Const::String(_)), _) | (None, Some(A::ScriptArg { as_string: true, .. })) => {
                Slot { ty: Some(Ty::String), decided: Some(v.span) }
            }
            _ => Slot::default(),
        };
        let (shape, shape_decided) = if capacity.is_some() || v.wrap {
            (Shape::Array, Some(v.span))
        } else if init.is_some() {
            (Shape::Scalar, Some(v.span))
        } else {
            (Shape::Unknown, None)
        };
        let id = GlobalId(self.globals.len() as u32);
        self.global_index.insert(v.name.name.clone(), id);
        self.globals.push(GlobalState {
            name: v.name.name.to_string(),
            span: v.name.span,
            capacity,
            wrap: v.wrap,
            init,
            shape,
            shape_decided,
            keys: Vec::new(),
            value,
            first_use: None,
        });
    }

    pub fn declare_function(&mut self, f: &'a ast::Function, diags: &mut Vec<Diagnostic>) {
        let id = FuncId(self.functions.len() as u32);
        self.func_index.insert(f.name.name.clone(), id);
        let mut locals = Locals::default();
        for p in &f.params {
            if let Some(&LocalId(k)) = locals.index.get(p.name.name.as_str()) {
                diags.push(
                    Diagnostic::error(
                        Code::DuplicateDefinition,
                        p.name.span,
                        format!("parameter `{}` appears twice in `{}`", p.name.name, f.name.name),
                    )
                    .with_label("second parameter with this name")
                    .with_secondary(locals.slots[k as usize].2, "first one"),
                );
                continue;
            }
            let ty = p.ty.as_ref().map(|t| ast_type(t.ty));
            let slot = Slot { ty, decided: p.ty.as_ref().map(|t| t.span) };
            locals.index.insert(p.name.name.clone(), LocalId(locals.slots.len() as u32));
            locals.slots.push((p.name.name.to_string(), slot, p.name.span));
        }
        let ret = Slot { ty: f.ret.as_ref().map(|t| ast_type(t.ty)), decided: f.ret.as_ref().map(|t| t.span) };
        self.functions.push(FuncState { ast: f, params: f.params.len(), locals, ret });
    }

    /// Infer types over everything, then lower it all. `probes` keep their
    /// locals between rounds.
    pub fn run(
        mut self,
        probes: &mut [ProbeBody<'a>],
    ) -> (Vec<Global>, Vec<Function>, Vec<LoweredProbe>, Vec<Diagnostic>) {
        for _ in 0..MAX_ROUNDS {
            self.changed = false;
            self.round(probes);
            if !self.changed {
                break;
            }
        }
        // Functions that never return a value return nothing. One that
        // returns values whose type nothing decides (`return r(n - 1)` only)
        // is an error; it is taken as long so its uses report nothing more.
        for i in 0..self.functions.len() {
            let f = &self.functions[i];
            if f.ret.ty.is_some() {
                continue;
            }
            if super::walk::returns_value(&f.ast.body) {
                let (name, span) = (f.ast.name.name.to_string(), f.ast.name.span);
                self.diags.push(
                    Diagnostic::error(
                        Code::TypeUnknown,
                        span,
                        format!("cannot tell the type of the result of `{name}`"),
                    )
                    .with_label("every `return` here returns something whose type is unknown")
                    .with_help(format!("annotate it: `function {name}:long(...)` or `:string`")),
                );
                self.functions[i].ret.ty = Some(Ty::Long);
            } else {
                self.functions[i].ret.ty = Some(Ty::Void);
            }
        }
        self.reporting = true;
        let (funcs, bodies) = self.round(probes);
        self.check_globals();
        let globals = self
            .globals
            .iter()
            .map(|g| Global {
                name: g.name.clone(),
                kind: match g.shape {
                    Shape::Array => GlobalKind::Array {
                        keys: g.keys.iter().map(|k| k.ty.unwrap_or(Ty::Long)).collect(),
                        value: g.value.ty.unwrap_or(Ty::Long),
                        capacity: g.capacity,
                        wrap: g.wrap,
                    },
                    _ => GlobalKind::Scalar(g.value.ty.unwrap_or(Ty::Long)),
                },
                init: g.init.clone(),
                span: g.span,
            })
            .collect();
        (globals, funcs, bodies, self.diags)
    }

    fn round(&mut self, probes: &mut [ProbeBody<'a>]) -> (Vec<Function>, Vec<LoweredProbe>) {
        let mut funcs = Vec::new();
        for i in 0..self.functions.len() {
            let ast = self.functions[i].ast;
            self.locals = std::mem::take(&mut self.functions[i].locals);
            self.kind = BodyKind::Session;
            self.in_function = Some(FuncId(i as u32));
            let body = self.block(&ast.body);
            let locals = self.finish_locals();
            self.functions[i].locals = std::mem::take(&mut self.locals);
            let f = &self.functions[i];
            funcs.push(Function {
                name: ast.name.name.to_string(),
                params: f.params as u32,
                locals,
                ret: f.ret.ty.unwrap_or(Ty::Void),
                body,
                span: ast.span,
            });
        }
        self.in_function = None;
        let mut bodies = Vec::new();
        for p in probes.iter_mut() {
            let written = p.condition.clone();
            let condition = written.as_ref().map(|c| {
                self.locals = Locals::default();
                self.kind = BodyKind::Condition;
                let (e, t) = self.expr(c, Some(Ty::Long));
                self.check_type(t, Ty::Long, c.span, "a probe condition");
                e
            });
            self.locals = std::mem::take(&mut p.locals);
            self.kind = p.kind;
            self.mark = p.mark.clone();
            self.site = p.site.clone();
            let mut body = Vec::new();
            for b in &p.blocks {
                body.extend(self.block(b));
            }
            self.mark = None;
            self.site = None;
            let locals = self.finish_locals();
            p.locals = std::mem::take(&mut self.locals);
            bodies.push((body, condition, locals));
        }
        (funcs, bodies)
    }

    fn finish_locals(&mut self) -> Vec<Local> {
        let mut out = Vec::with_capacity(self.locals.slots.len());
        for (name, slot, span) in &self.locals.slots {
            out.push(Local { name: name.clone(), ty: slot.ty.unwrap_or(Ty::Long), span: *span });
        }
        out
    }

    // ------------------------------------------------------------ reporting

    fn error(&mut self, d: Diagnostic) {
        if self.reporting {
            self.diags.push(d);
        }
    }

    /// Unify a slot with a type learnt at `span`.
    fn unify(&mut self, slot: SlotRef, ty: Ty, span: Span) {
        // A probe's local, by its name as written.
        let probe_local = match slot {
            SlotRef::Local(id) if self.in_function.is_none() => Some(self.locals.slots[id.0 as usize].0.clone()),
            _ => None,
        };
        let (name, s) = self.slot_mut(slot);
        let name = name.to_string();
        match s.ty {
            None => {
                s.ty = Some(ty);
                s.decided = Some(span);
                self.changed = true;
                if let Some(local) = probe_local.filter(|l| !self.typed_locals.iter().any(|(n, _)| n == l)) {
                    self.typed_locals.push((local, span));
                }
            }
            Some(t) if t == ty => {}
            Some(t) => {
                let decided = s.decided;
                let mut d = Diagnostic::error(
                    Code::TypeMismatch,
                    span,
                    format!("type mismatch for {name}: {} here, but {} before", ty.name(), t.name()),
                )
                .with_label(format!("used as a {}", ty.name()));
                if let Some(at) = decided {
                    d = d.with_secondary(at, format!("{} because of this", t.name()));
                }
                self.error(d);
            }
        }
    }

    fn slot_mut(&mut self, s: SlotRef) -> (String, &mut Slot) {
        match s {
            SlotRef::Local(id) => {
                let e = &mut self.locals.slots[id.0 as usize];
                (format!("`{}`", e.0), &mut e.1)
            }
            SlotRef::GlobalValue(id) => {
                let g = &mut self.globals[id.0 as usize];
                let what = if g.shape == Shape::Array {
                    format!("the values of `{}`", g.name)
                } else {
                    format!("`{}`", g.name)
                };
                (what, &mut g.value)
            }
            SlotRef::GlobalKey(id, k) => {
                let g = &mut self.globals[id.0 as usize];
                (format!("key {} of `{}`", k + 1, g.name), &mut g.keys[k])
            }
            SlotRef::Param(f, k) => {
                // The function being walked has its locals in `self.locals`.
                let walking = Some(f) == self.in_function;
                let fs = &mut self.functions[f.0 as usize];
                let locals = if walking { &mut self.locals } else { &mut fs.locals };
                let name = format!("parameter `{}` of `{}`", locals.slots[k].0, fs.ast.name.name);
                (name, &mut locals.slots[k].1)
            }
            SlotRef::Return(f) => {
                let fs = &mut self.functions[f.0 as usize];
                (format!("the result of `{}`", fs.ast.name.name), &mut fs.ret)
            }
        }
    }

    fn slot_ty(&mut self, s: SlotRef) -> Option<Ty> {
        self.slot_mut(s).1.ty
    }

    /// Report a wrong type: `what` is what needs `want`.
    fn check_type(&mut self, got: Option<Ty>, want: Ty, span: Span, what: &str) {
        if let Some(t) = got {
            if t != want {
                self.error(
                    Diagnostic::error(
                        Code::TypeMismatch,
                        span,
                        format!("{what} must be a {}, not a {}", want.name(), t.name()),
                    )
                    .with_label(format!("this is a {}", t.name())),
                );
            }
        }
    }

    fn untyped(&mut self, name: &str, span: Span) {
        if self.reporting && !self.untyped_reported.iter().any(|n| n == name) {
            self.untyped_reported.push(name.to_string());
            let d = Diagnostic::error(Code::TypeUnknown, span, format!("cannot tell the type of `{name}`"))
                .with_label("first used here; nothing in the program gives it a value");
            // Another probe's local of that name has one: SystemTap's
            // variables are the probe's own unless declared global.
            let elsewhere = self.typed_locals.iter().find(|(n, at)| n == name && *at != span).map(|(_, at)| *at);
            let d = match elsewhere {
                Some(at) => d
                    .with_secondary(at, format!("this `{name}` is another probe's own variable"))
                    .with_help(format!("to share one variable between probes, declare it: `global {name}`")),
                None => d.with_help("assign it a number or a string somewhere, or annotate it (`name:long`)"),
            };
            self.diags.push(d);
        }
    }

    fn check_globals(&mut self) {
        for i in 0..self.globals.len() {
            let g = &self.globals[i];
            if g.first_use.is_none() {
                continue;
            }
            let unknown = g.value.ty.is_none() || g.keys.iter().any(|k| k.ty.is_none());
            if unknown {
                let (name, at) = (g.name.clone(), g.first_use.unwrap_or(g.span));
                self.untyped(&name, at);
            }
        }
    }

    // ------------------------------------------------------------ script arguments

    fn script_arg(&self, index: u32, span: Span) -> Result<&'a str, Diagnostic> {
        let n = self.args.len();
        match (index as usize).checked_sub(1).and_then(|i| self.args.get(i)) {
            Some(a) => Ok(a.as_str()),
            None => Err(Diagnostic::error(
                Code::ScriptArgument,
                span,
                format!("script argument {index} is not given ({n} argument{} given)", if n == 1 { "" } else { "s" }),
            )
            .with_label("refers to a missing argument")
            .with_help("script arguments follow the script: `telco-stap script.tp ARG1 ARG2`")),
        }
    }

    fn script_arg_long(&self, index: u32, span: Span) -> Result<i64, Diagnostic> {
        let s = self.script_arg(index, span)?;
        crate::lexer::parse_int(s.trim()).or_else(|_| s.trim().parse::<i64>()).map_err(|_| {
            Diagnostic::error(Code::ScriptArgument, span, format!("script argument ${index} is `{s}`, not a number"))
                .with_label("used as a number here")
                .with_help(format!("use `@{index}` for the argument as a string"))
        })
    }

    // ------------------------------------------------------------ statements

    fn block(&mut self, b: &ast::Block) -> Vec<Stmt> {
        b.stmts.iter().filter_map(|s| self.stmt(s)).collect()
    }

    fn boxed(&mut self, s: &ast::Stmt) -> Box<Stmt> {
        Box::new(self.stmt(s).unwrap_or(Stmt { kind: StmtKind::Block(Vec::new()), span: s.span }))
    }

    /// `@defined(...)` or `!@defined(...)` as a condition: its value,
    /// known at compile time.
    fn defined_const(&mut self, e: &ast::Expr) -> Option<bool> {
        match &e.kind {
            A::AtOp(c) if c.name.name.as_str() == "defined" => Some(self.is_defined(c.args.first(), e.span)),
            A::Unary { op: ast::UnOp::Not, operand } => self.defined_const(operand).map(|b| !b),
            _ => None,
        }
    }

    /// `@defined(arg)`: whether the target variable (or path) can be read
    /// here.
    fn is_defined(&mut self, arg: Option<&ast::Expr>, span: Span) -> bool {
        match arg.map(|a| &a.kind) {
            Some(A::TargetVar(n)) => {
                let n = n.as_str();
                let arg = n.strip_prefix("arg").and_then(|d| d.parse::<u32>().ok());
                match self.debug_site() {
                    _ if arg.is_some() => {
                        self.kind.at_function()
                            || self.mark.as_ref().is_some_and(|m| arg.is_some_and(|a| a as usize <= m.args.len()))
                    }
                    _ if n == "return" => self.kind == BodyKind::FunctionReturn,
                    Some(site) => site.defined(n),
                    None => false,
                }
            }
            Some(A::TargetPath(p)) => {
                let before = self.diags.len();
                let ok = self.path_value(p, span).is_some();
                self.diags.truncate(before);
                ok
            }
            _ => {
                self.error(
                    Diagnostic::error(Code::TypeMismatch, span, "`@defined` takes a target variable")
                        .with_label("not a `$name`"),
                );
                false
            }
        }
    }

    fn cond(&mut self, e: &ast::Expr) -> Expr {
        let (x, t) = self.expr(e, Some(Ty::Long));
        self.check_type(t, Ty::Long, e.span, "a condition");
        x
    }

    fn stmt(&mut self, s: &ast::Stmt) -> Option<Stmt> {
        let span = s.span;
        let kind = match &s.kind {
            S::Empty | S::Error => return None,
            S::Block(b) => StmtKind::Block(self.block(b)),
            S::Expr(e) => {
                let (x, _) = self.expr(e, None);
                StmtKind::Expr(x)
            }
            S::If(i) => {
                // `if (@defined($x)) ... else ...`: only the branch taken is
                // lowered (the other may name what does not exist here).
                if let Some(known) = self.defined_const(&i.cond) {
                    let cond = Expr { kind: ExprKind::Long(i64::from(known)), ty: Ty::Long, span: i.cond.span };
                    let empty = |s: &ast::Stmt| Box::new(Stmt { kind: StmtKind::Block(Vec::new()), span: s.span });
                    let (then, els) = if known {
                        (self.boxed(&i.then), None)
                    } else {
                        (empty(&i.then), i.els.as_ref().map(|e| self.boxed(e)))
                    };
                    return Some(Stmt { kind: StmtKind::If { cond, then, els }, span });
                }
                let cond = self.cond(&i.cond);
                let then = self.boxed(&i.then);
                let els = i.els.as_ref().map(|e| self.boxed(e));
                StmtKind::If { cond, then, els }
            }
            S::While(w) => {
                let cond = self.cond(&w.cond);
                StmtKind::While { cond, body: self.boxed(&w.body) }
            }
            S::For(f) => {
                let init = f.init.as_ref().map(|e| self.expr(e, None).0);
                let cond = f.cond.as_ref().map(|e| self.cond(e));
                let step = f.step.as_ref().map(|e| self.expr(e, None).0);
                StmtKind::For { init, cond, step, body: self.boxed(&f.body) }
            }
            S::Foreach(f) => return self.foreach(f, span),
            S::Break => StmtKind::Break,
            S::Continue => StmtKind::Continue,
            S::Next => StmtKind::Next,
            S::Return(v) => {
                let Some(fid) = self.in_function else { return None };
                match v {
                    None => StmtKind::Return(None),
                    Some(e) => {
                        let want = self.slot_ty(SlotRef::Return(fid));
                        let (x, t) = self.expr(e, want.filter(|t| *t != Ty::Void));
                        match t {
                            Some(Ty::Long | Ty::String) => {
                                self.unify(SlotRef::Return(fid), t.unwrap_or(Ty::Long), e.span)
                            }
                            Some(other) => {
                                self.error(
                                    Diagnostic::error(
                                        Code::TypeMismatch,
                                        e.span,
                                        format!("a function cannot return a {}", other.name()),
                                    )
                                    .with_label("functions return a long or a string"),
                                );
                                // Reported; take the result as long so it is not also "untyped".
                                self.unify(SlotRef::Return(fid), Ty::Long, e.span);
                            }
                            None => {}
                        }
                        StmtKind::Return(Some(x))
                    }
                }
            }
            S::Delete(e) => return self.delete(e, span),
            S::Try(t) => {
                let body = self.block(&t.body);
                let var = t.var.as_ref().map(|v| {
                    self.not_a_global(v, "a `catch` variable");
                    let id = self.local(&v.name, v.span);
                    self.unify(SlotRef::Local(id), Ty::String, v.span);
                    id
                });
                let handler = self.block(&t.handler);
                StmtKind::Try { body, var, handler }
            }
        };
        Some(Stmt { kind, span })
    }

    /// `foreach (b in @hist_log(s) limit N)`: the buckets' indices, as
    /// SystemTap iterates them (0 to the number of buckets, less than N),
    /// lowered to a `for` loop; the value variable gets the bucket's count.
    fn foreach_hist(&mut self, f: &ast::Foreach, h: &ast::Expr, span: Span) -> Option<Stmt> {
        let c = match &h.kind {
            A::AtOp(c) if matches!(c.name.name.as_str(), "hist_log" | "hist_linear") => c,
            _ => {
                self.error(
                    Diagnostic::error(Code::TypeMismatch, h.span, "`foreach` goes over an array or a histogram")
                        .with_label("not `@hist_log(s)` or `@hist_linear(s, LO, HI, STEP)`"),
                );
                return None;
            }
        };
        let (hist, _) = self.at_op(c, h.span);
        let buckets = match &hist.kind {
            ExprKind::HistLinear { lo, hi, step, .. } => crate::program::linear_buckets(*lo, *hi, *step),
            _ => telco_abi::region::HIST_LOG_BUCKETS,
        };
        let key = f.keys.first()?;
        self.not_a_global(&key.name, "a `foreach` variable");
        let long = |kind| Expr { kind, ty: Ty::Long, span };
        let b = self.local(&key.name.name, key.name.span);
        self.unify(SlotRef::Local(b), Ty::Long, key.name.span);
        let mut out = Vec::new();
        let mut cond = long(ExprKind::Binary {
            op: ast::BinOp::Lt,
            lhs: Box::new(long(ExprKind::Local(b))),
            rhs: Box::new(long(ExprKind::Long(i64::from(buckets)))),
        });
        if let Some(l) = &f.limit {
            // Evaluated once, before the loop.
            let (x, t) = self.expr(l, Some(Ty::Long));
            self.check_type(t, Ty::Long, l.span, "a `limit`");
            let lim = self.local(&format!("#limit@{span:?}"), l.span);
            self.unify(SlotRef::Local(lim), Ty::Long, l.span);
            out.push(Stmt {
                kind: StmtKind::Expr(long(ExprKind::Assign {
                    op: ast::AssignOp::Assign,
                    target: Box::new(long(ExprKind::Local(lim))),
                    value: Box::new(x),
                })),
                span,
            });
            let within = long(ExprKind::Binary {
                op: ast::BinOp::Lt,
                lhs: Box::new(long(ExprKind::Local(b))),
                rhs: Box::new(long(ExprKind::Local(lim))),
            });
            cond = long(ExprKind::Binary { op: ast::BinOp::And, lhs: Box::new(cond), rhs: Box::new(within) });
        }
        let mut body = Vec::new();
        if let Some(v) = &f.value {
            self.not_a_global(v, "a `foreach` variable");
            let id = self.local(&v.name, v.span);
            self.unify(SlotRef::Local(id), Ty::Long, v.span);
            let count = ExprKind::HistBucket { hist: Box::new(hist), index: Box::new(long(ExprKind::Local(b))) };
            body.push(Stmt {
                kind: StmtKind::Expr(long(ExprKind::Assign {
                    op: ast::AssignOp::Assign,
                    target: Box::new(long(ExprKind::Local(id))),
                    value: Box::new(long(count)),
                })),
                span,
            });
        }
        body.push(*self.boxed(&f.body));
        out.push(Stmt {
            kind: StmtKind::For {
                init: Some(long(ExprKind::Assign {
                    op: ast::AssignOp::Assign,
                    target: Box::new(long(ExprKind::Local(b))),
                    value: Box::new(long(ExprKind::Long(0))),
                })),
                cond: Some(cond),
                step: Some(long(ExprKind::IncDec {
                    op: ast::IncDec::Inc,
                    prefix: true,
                    target: Box::new(long(ExprKind::Local(b))),
                })),
                body: Box::new(Stmt { kind: StmtKind::Block(body), span }),
            },
            span,
        });
        Some(Stmt { kind: StmtKind::Block(out), span })
    }

    fn foreach(&mut self, f: &ast::Foreach, span: Span) -> Option<Stmt> {
        if let Some(h) = &f.hist {
            return self.foreach_hist(f, h, span);
        }
        let array = self.array(&f.array, f.keys.len())?;
        let mut keys = Vec::new();
        for v in f.keys.iter().map(|k| &k.name).chain(f.value.as_ref()) {
            self.not_a_global(v, "a `foreach` variable");
        }
        for (i, k) in f.keys.iter().enumerate() {
            let id = self.local(&k.name.name, k.name.span);
            self.link(SlotRef::Local(id), SlotRef::GlobalKey(array, i), k.name.span);
            keys.push(id);
        }
        let value = f.value.as_ref().map(|v| {
            let id = self.local(&v.name, v.span);
            self.link(SlotRef::Local(id), SlotRef::GlobalValue(array), v.span);
            id
        });
        if value.is_some() && self.globals[array.0 as usize].value.ty == Some(Ty::Stat) {
            self.error(
                Diagnostic::error(
                    Code::TypeMismatch,
                    span,
                    "`foreach` cannot bind the value of an array of statistics",
                )
                .with_label("read it with `@count(arr[k])` and friends instead"),
            );
        }
        let sort = f
            .keys
            .iter()
            .enumerate()
            .find_map(|(i, k)| k.sort.map(|s| (SortBy::Key(i), s.dir)))
            .or(f.value_sort.map(|s| (SortBy::Value, s.dir)));
        // `a @sum-`: by an aggregate, for an array of statistics.
        let sort = match (&f.value_agg, sort) {
            (None, sort) => sort,
            (Some(agg), sort) => {
                let op = match agg.name.as_str() {
                    "count" => Some(AggOp::Count),
                    "sum" => Some(AggOp::Sum),
                    "min" => Some(AggOp::Min),
                    "max" => Some(AggOp::Max),
                    "avg" => Some(AggOp::Avg),
                    _ => None,
                };
                let is_stat = self.globals[array.0 as usize].value.ty == Some(Ty::Stat);
                match (op, sort) {
                    (None, _) => {
                        self.error(
                            Diagnostic::error(
                                Code::BadValue,
                                agg.span,
                                format!("`@{}` cannot order a `foreach`", agg.name),
                            )
                            .with_label("use @count, @sum, @min, @max or @avg"),
                        );
                        sort
                    }
                    (Some(_), _) if !is_stat => {
                        self.error(
                            Diagnostic::error(
                                Code::TypeMismatch,
                                agg.span,
                                format!("`@{}` orders an array of statistics; this one holds values", agg.name),
                            )
                            .with_label("not an array of statistics"),
                        );
                        sort
                    }
                    (Some(op), Some((SortBy::Value, dir))) if f.value_mark.is_none() => {
                        Some((SortBy::Aggregate(op), dir))
                    }
                    (Some(_), _) => {
                        self.error(
                            Diagnostic::error(
                                Code::BadValue,
                                agg.span,
                                format!("`@{}` needs `+` or `-` after it, and no other sort", agg.name),
                            )
                            .with_label(format!(
                                "write `{} @{}+` or `{} @{}-`",
                                f.array.name, agg.name, f.array.name, agg.name
                            )),
                        );
                        sort
                    }
                }
            }
        };
        let limit = f.limit.as_ref().map(|l| {
            let (x, t) = self.expr(l, Some(Ty::Long));
            self.check_type(t, Ty::Long, l.span, "a `limit`");
            x
        });
        // `a[k, *]`: after the limit, as SystemTap evaluates them.
        let mut slice = Vec::with_capacity(f.slice.len());
        for (i, k) in f.slice.iter().enumerate() {
            slice.push(k.as_ref().map(|e| self.keys_at(array, i, e)));
        }
        let body = self.boxed(&f.body);
        Some(Stmt { kind: StmtKind::Foreach { array, keys, value, sort, limit, slice, body }, span })
    }

    fn delete(&mut self, e: &ast::Expr, span: Span) -> Option<Stmt> {
        let kind = match &e.kind {
            A::Var(name) => {
                if let Some(&id) = self.locals.index.get(name) {
                    StmtKind::DeleteLocal(id)
                } else if let Some(g) = self.global_named(name) {
                    self.touch_global(g, e.span);
                    StmtKind::DeleteGlobal(g)
                } else {
                    let id = self.local(name, e.span);
                    StmtKind::DeleteLocal(id)
                }
            }
            A::Index(ix) => {
                let array = self.array(&ix.array, ix.keys.len())?;
                let keys = self.keys(array, &ix.keys);
                StmtKind::DeleteElement { array, keys }
            }
            _ => return None,
        };
        Some(Stmt { kind, span })
    }

    /// Loop and `catch` variables are locals: one named like a global would
    /// silently hide it.
    fn not_a_global(&mut self, v: &ast::Ident, what: &str) {
        if self.global_named(v.name.as_str()).is_some() && !self.locals.index.contains_key(v.name.as_str()) {
            self.error(
                Diagnostic::error(Code::DuplicateDefinition, v.span, format!("`{}` is a global", v.name))
                    .with_label(format!("{what} is a local and would hide the global"))
                    .with_help("choose another name"),
            );
        }
    }

    /// Make two slots agree in whichever direction is known.
    fn link(&mut self, a: SlotRef, b: SlotRef, span: Span) {
        match (self.slot_ty(a), self.slot_ty(b)) {
            (Some(t), _) => self.unify(b, t, span),
            (None, Some(t)) => self.unify(a, t, span),
            (None, None) => {}
        }
    }

    // ------------------------------------------------------------ names

    /// The local `name` in the current body, created on first sight.
    fn local(&mut self, name: &str, span: Span) -> LocalId {
        if let Some(&id) = self.locals.index.get(name) {
            return id;
        }
        let id = LocalId(self.locals.slots.len() as u32);
        self.locals.index.insert(name.into(), id);
        self.locals.slots.push((name.to_string(), Slot::default(), span));
        id
    }

    fn touch_global(&mut self, g: GlobalId, span: Span) {
        let gs = &mut self.globals[g.0 as usize];
        if gs.first_use.is_none() {
            gs.first_use = Some(span);
        }
    }

    fn set_shape(&mut self, g: GlobalId, shape: Shape, arity: usize, span: Span) -> bool {
        let gs = &mut self.globals[g.0 as usize];
        if gs.first_use.is_none() {
            gs.first_use = Some(span);
        }
        match (gs.shape, shape) {
            (Shape::Unknown, _) => {
                gs.shape = shape;
                gs.shape_decided = Some(span);
                if shape == Shape::Array {
                    gs.keys = vec![Slot::default(); arity];
                }
                self.changed = true;
                true
            }
            (a, b) if a == b => {
                if shape == Shape::Array && gs.keys.is_empty() {
                    gs.keys = vec![Slot::default(); arity];
                    self.changed = true;
                }
                if shape == Shape::Array && gs.keys.len() != arity {
                    let (name, n, at) = (gs.name.clone(), gs.keys.len(), gs.shape_decided);
                    let mut d = Diagnostic::error(
                        Code::ArrayMisuse,
                        span,
                        format!("`{name}` has {n} key{} but is used with {arity} here", if n == 1 { "" } else { "s" }),
                    )
                    .with_label(format!("{arity} key{}", if arity == 1 { "" } else { "s" }));
                    if let Some(at) = at {
                        d = d.with_secondary(at, format!("{n} key{} here", if n == 1 { "" } else { "s" }));
                    }
                    self.error(d);
                    return false;
                }
                true
            }
            (a, _) => {
                let (name, at) = (gs.name.clone(), gs.shape_decided);
                let (was, now) = if a == Shape::Array { ("an array", "a scalar") } else { ("a scalar", "an array") };
                let mut d =
                    Diagnostic::error(Code::ArrayMisuse, span, format!("`{name}` is {was} but is used as {now} here"))
                        .with_label(format!("used as {now}"));
                if let Some(at) = at {
                    d = d.with_secondary(at, format!("{was} because of this"));
                }
                self.error(d);
                false
            }
        }
    }

    /// A global array named `name`, used with `arity` keys.
    fn array(&mut self, name: &ast::Ident, arity: usize) -> Option<GlobalId> {
        let Some(g) = self.global_named(&name.name) else {
            let mut d = Diagnostic::error(Code::Undefined, name.span, format!("`{}` is not a global array", name.name))
                .with_label("arrays must be declared");
            d = d.with_help(format!("declare it at the top of the script: `global {}`", name.name));
            if let Some(s) = crate::suggest::closest(&name.name, self.global_index.keys().map(|k| k.as_str())) {
                d = d.with_help(format!("did you mean the global `{s}`? (or declare `global {}`)", name.name));
            }
            self.error(d);
            return None;
        };
        self.set_shape(g, Shape::Array, arity, name.span).then_some(g)
    }

    fn keys(&mut self, array: GlobalId, keys: &[ast::Expr]) -> Vec<Expr> {
        keys.iter().enumerate().map(|(i, k)| self.keys_at(array, i, k)).collect()
    }

    /// Key `i` of `array`, typed with it.
    fn keys_at(&mut self, array: GlobalId, i: usize, k: &ast::Expr) -> Expr {
        let want = self.globals[array.0 as usize].keys.get(i).and_then(|s| s.ty);
        let (x, t) = self.expr(k, want);
        match t {
            Some(Ty::Long | Ty::String) if i < self.globals[array.0 as usize].keys.len() => {
                self.unify(SlotRef::GlobalKey(array, i), t.unwrap_or(Ty::Long), k.span)
            }
            Some(other @ (Ty::Stat | Ty::Hist | Ty::Void)) => self.error(
                Diagnostic::error(Code::TypeMismatch, k.span, format!("an array key cannot be a {}", other.name()))
                    .with_label("keys are longs or strings"),
            ),
            _ => {}
        }
        x
    }

    // ------------------------------------------------------------ expressions

    fn expr(&mut self, e: &ast::Expr, want: Option<Ty>) -> Typed {
        let span = e.span;
        let mk = |kind: ExprKind, ty: Option<Ty>| (Expr { kind, ty: ty.unwrap_or(Ty::Long), span }, ty);
        match &e.kind {
            A::Int(n) => mk(ExprKind::Long(*n), Some(Ty::Long)),
            A::Str(s) => mk(ExprKind::String(s.clone()), Some(Ty::String)),
            A::Error => mk(ExprKind::Long(0), None),
            A::ScriptArg { index, as_string } => {
                let r = if *as_string {
                    self.script_arg(*index, span).map(|s| (ExprKind::String(s.as_bytes().to_vec()), Ty::String))
                } else {
                    self.script_arg_long(*index, span).map(|n| (ExprKind::Long(n), Ty::Long))
                };
                match r {
                    Ok((k, t)) => mk(k, Some(t)),
                    Err(d) => {
                        self.error(d);
                        mk(ExprKind::Long(0), if *as_string { Some(Ty::String) } else { Some(Ty::Long) })
                    }
                }
            }
            A::ScriptArgCount { .. } => mk(ExprKind::Long(self.args.len() as i64), Some(Ty::Long)),
            A::Var(name) => self.var(name, span, want),
            A::TargetVar(name) => self.target_var(name, span),
            A::TargetPath(p) => self.target_path(p, span),
            A::Index(ix) => {
                let Some(array) = self.array(&ix.array, ix.keys.len()) else { return mk(ExprKind::Long(0), None) };
                let keys = self.keys(array, &ix.keys);
                let mut ty = self.globals[array.0 as usize].value.ty;
                if ty.is_none() {
                    if let Some(w @ (Ty::Long | Ty::String | Ty::Stat)) = want {
                        self.unify(SlotRef::GlobalValue(array), w, span);
                        ty = Some(w);
                    }
                }
                if ty == Some(Ty::Stat) && !matches!(want, Some(Ty::Stat)) {
                    self.stat_read_error(&ix.array.name, span);
                    ty = Some(Ty::Long);
                }
                mk(ExprKind::Index { array, keys }, ty)
            }
            A::In(ix) => {
                let Some(array) = self.array(&ix.array, ix.keys.len()) else {
                    return mk(ExprKind::Long(0), Some(Ty::Long));
                };
                let keys = self.keys(array, &ix.keys);
                mk(ExprKind::In { array, keys }, Some(Ty::Long))
            }
            A::Call(c) => self.call(c, span, want),
            A::AtOp(c) => self.at_op(c, span),
            A::Unary { op, operand } => {
                let (x, t) = self.expr(operand, Some(Ty::Long));
                let what = match op {
                    UnOp::Not => "the operand of `!`",
                    UnOp::BitNot => "the operand of `~`",
                    UnOp::Neg | UnOp::Plus => "the operand of a sign",
                };
                self.check_type(t, Ty::Long, operand.span, what);
                mk(ExprKind::Unary { op: *op, operand: Box::new(x) }, Some(Ty::Long))
            }
            A::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, span),
            A::Assign { op, target, value } => self.assign(*op, target, value, span),
            A::IncDec { op, target, .. } if self.is_debug_target(target) => {
                // `$p->refs++`: a guru write of the value plus or minus one.
                let one = ast::Expr::new(A::Int(1), target.span);
                let aop = if *op == IncDec::Inc { AssignOp::Add } else { AssignOp::Sub };
                self.debug_assign(aop, target, &one, span)
            }
            A::IncDec { op, prefix, target } => {
                if self.stat_written(target) {
                    return mk(ExprKind::Long(0), Some(Ty::Long));
                }
                let (t, ty) = self.lvalue(target, Some(Ty::Long));
                self.check_type(
                    ty,
                    Ty::Long,
                    target.span,
                    if *op == IncDec::Inc { "what `++` changes" } else { "what `--` changes" },
                );
                mk(ExprKind::IncDec { op: *op, prefix: *prefix, target: Box::new(t) }, Some(Ty::Long))
            }
            A::Ternary { cond, then, els } if self.defined_const(cond).is_some() => {
                // `@defined($x) ? $x : 0`: only the branch taken.
                let known = self.defined_const(cond).unwrap_or(false);
                self.expr(if known { then } else { els }, want)
            }
            A::Ternary { cond, then, els } => {
                let c = self.cond(cond);
                let errors = self.diags.len();
                let (a, ta) = self.expr(then, want);
                let (b, tb) = self.expr(els, want.or(ta));
                let clean = self.diags.len() == errors;
                let (a, ta) = if ta.is_none() && tb.is_some() && clean { self.expr(then, tb) } else { (a, ta) };
                let ty = match (ta, tb) {
                    (Some(x), Some(y)) if x != y => {
                        self.error(
                            Diagnostic::error(
                                Code::TypeMismatch,
                                span,
                                format!("the branches of `?:` differ: {} and {}", x.name(), y.name()),
                            )
                            .with_label("both branches must have one type"),
                        );
                        Some(x)
                    }
                    (x, y) => x.or(y),
                };
                mk(ExprKind::Ternary { cond: Box::new(c), then: Box::new(a), els: Box::new(b) }, ty)
            }
        }
    }

    /// The slot an lvalue stores into, if it is a variable or an array element.
    fn slot_of(&self, e: &ast::Expr) -> Option<SlotRef> {
        match &e.kind {
            A::Var(n) => self
                .locals
                .index
                .get(n)
                .map(|&id| SlotRef::Local(id))
                .or_else(|| self.global_named(n).map(SlotRef::GlobalValue)),
            A::Index(ix) => self.global_named(&ix.array.name).map(SlotRef::GlobalValue),
            _ => None,
        }
    }

    /// The global `name` means here: none of the user's script's in a
    /// tapset function (its names are its own).
    fn global_named(&self, name: &str) -> Option<GlobalId> {
        let g = *self.global_index.get(name)?;
        let tapset_function = self
            .in_function
            .and_then(|f| self.functions.get(f.0 as usize))
            .is_some_and(|f| Some(f.ast.name.span.file) != self.script_file);
        let script_global = Some(self.globals[g.0 as usize].span.file) == self.script_file;
        (!(tapset_function && script_global)).then_some(g)
    }

    fn stat_read_error(&mut self, name: &str, span: Span) {
        self.error(
            Diagnostic::error(Code::TypeMismatch, span, format!("`{name}` is a statistic and has no single value"))
                .with_label("read here as a value")
                .with_help("read it with @count, @sum, @min, @max, @avg, @hist_log or @hist_linear"),
        );
    }

    fn var(&mut self, name: &str, span: Span, want: Option<Ty>) -> Typed {
        if self.kind == BodyKind::Condition && self.global_named(name).is_none() {
            self.error(
                Diagnostic::error(Code::Undefined, span, format!("`{name}` is not a global"))
                    .with_label("probe conditions may use only globals"),
            );
            return (Expr { kind: ExprKind::Long(0), ty: Ty::Long, span }, Some(Ty::Long));
        }
        let slot = if let Some(&id) = self.locals.index.get(name) {
            SlotRef::Local(id)
        } else if let Some(g) = self.global_named(name) {
            if !self.set_shape(g, Shape::Scalar, 0, span) {
                return (Expr { kind: ExprKind::Global(g), ty: Ty::Long, span }, None);
            }
            SlotRef::GlobalValue(g)
        } else {
            SlotRef::Local(self.local(name, span))
        };
        let mut ty = self.slot_ty(slot);
        if ty.is_none() {
            if let Some(w @ (Ty::Long | Ty::String | Ty::Stat)) = want {
                self.unify(slot, w, span);
                ty = Some(w);
            } else if self.reporting {
                self.untyped(name, span);
            }
        }
        if ty == Some(Ty::Stat) && want != Some(Ty::Stat) {
            // Reported once here; carry on as a long so the uses around it
            // do not report the same mistake again.
            self.stat_read_error(name, span);
            ty = Some(Ty::Long);
        }
        let kind = match slot {
            SlotRef::Local(id) => ExprKind::Local(id),
            SlotRef::GlobalValue(g) => ExprKind::Global(g),
            _ => ExprKind::Long(0),
        };
        (Expr { kind, ty: ty.unwrap_or(Ty::Long), span }, ty)
    }

    fn target_var(&mut self, name: &str, span: Span) -> Typed {
        let mk = |kind| (Expr { kind, ty: Ty::Long, span }, Some(Ty::Long));
        // After an error the type is unknown (None): what uses it is not
        // reported again.
        let bad = |this: &mut Self, d: Diagnostic| {
            this.error(d);
            (Expr { kind: ExprKind::Long(0), ty: Ty::Long, span }, None)
        };
        // `--skip-badvars`: 0 where the variable cannot be found or read.
        let skipped = |this: &mut Self, d: Diagnostic| {
            let mut w = Diagnostic::warning(d.code, span, format!("{} (0 instead: --skip-badvars)", d.message));
            w.label = d.label.clone();
            this.error(w);
            (Expr { kind: ExprKind::Long(0), ty: Ty::Long, span }, Some(Ty::Long))
        };
        let arg = name.strip_prefix("arg").and_then(|n| n.parse::<u32>().ok());
        if let Some(m) = self.mark.clone().filter(|_| self.in_function.is_none()) {
            let string = |v: &str| {
                (Expr { kind: ExprKind::String(v.as_bytes().to_vec()), ty: Ty::String, span }, Some(Ty::String))
            };
            match (name, arg) {
                ("$name", _) => return string(&m.name),
                ("$provider", _) => return string(&m.provider),
                ("$parms", _) => {
                    let fmt: Vec<String> = (1..=m.args.len()).map(|i| format!("arg{i}=0x%x")).collect();
                    let mut args =
                        vec![Expr { kind: ExprKind::String(fmt.join(" ").into_bytes()), ty: Ty::String, span }];
                    args.extend(m.args.iter().map(|a| mark_arg(a, &m, span)));
                    let kind = ExprKind::Builtin { func: builtins::Builtin::Sprintf, args };
                    return (Expr { kind, ty: Ty::String, span }, Some(Ty::String));
                }
                (_, Some(n)) if n >= 1 && n as usize <= m.args.len() => {
                    return (mark_arg(&m.args[n as usize - 1], &m, span), Some(Ty::Long));
                }
                (_, Some(n)) if n >= 1 => {
                    return bad(
                        self,
                        Diagnostic::error(
                            Code::Context,
                            span,
                            format!("marker `{}` has {} argument(s), not {n}", m.name, m.args.len()),
                        )
                        .with_label("no such argument")
                        .with_help(format!("its arguments: `{}`", m.args_text)),
                    );
                }
                _ => {}
            }
        }
        if name == "status" && self.kind == BodyKind::ProcessEnd && self.in_function.is_none() {
            // What the process gave `_exit` (its low 8 bits are the exit
            // code); -1 where an exec ended the program.
            let arg = Expr { kind: ExprKind::Target(Target::Arg(1)), ty: Ty::Long, span };
            let kind = ExprKind::Builtin { func: builtins::Builtin::Int32, args: vec![arg] };
            return mk(kind);
        }
        if matches!(name, "duration" | "syscall") && self.kind == BodyKind::Blocked && self.in_function.is_none() {
            // The wait's length in ns, and what it waited in, from the
            // sample the tracer wrote.
            let (func, ty) = match name {
                "duration" => (builtins::Builtin::WaitNs, Ty::Long),
                _ => (builtins::Builtin::WaitName, Ty::String),
            };
            return (Expr { kind: ExprKind::Builtin { func, args: Vec::new() }, ty, span }, Some(ty));
        }
        if matches!(name, "duration" | "syscall") && self.kind == BodyKind::Blocked {
            return bad(
                self,
                Diagnostic::error(Code::Context, span, format!("`${name}` in a function"))
                    .with_label("a function has no wait of its own")
                    .with_help(format!("read `${name}` in the `process.blocked` probe and pass it as an argument")),
            );
        }
        if name == "status" {
            return bad(
                self,
                Diagnostic::error(Code::Context, span, "`$status` outside a `process.end` probe")
                    .with_label("only a process that ends has an exit status"),
            );
        }
        if self.kind == BodyKind::Mark && self.mark.is_none() && (arg.is_some() || name.starts_with('$')) {
            // The marker did not resolve (reported there): no follow-on error.
            let ty = if name.starts_with('$') && name != "$arg" { Ty::String } else { Ty::Long };
            let kind = if ty == Ty::String { ExprKind::String(Vec::new()) } else { ExprKind::Long(0) };
            return (Expr { kind, ty, span }, None);
        }
        if let Some(site) = self.debug_site() {
            let special = arg.is_some() || name == "return";
            if !special {
                let r = match name.strip_prefix('$') {
                    Some("return") if self.kind == BodyKind::FunctionReturn => site.return_string(0, span),
                    Some(which @ ("parms" | "locals" | "vars")) => site.vars_string(which, 0, span),
                    Some(_) => {
                        Err(Diagnostic::error(Code::Context, span, format!("unknown context variable `${name}`"))
                            .with_label(
                                "function and statement probes have `$$parms`, `$$locals`, `$$vars` and `$$return`",
                            ))
                    }
                    None => site.var(name, span).and_then(|v| site.read(&v, span)),
                };
                return match r {
                    Ok(e) => {
                        let t = e.ty;
                        (e, Some(t))
                    }
                    Err(d) if self.skip_badvars && !name.starts_with('$') => skipped(self, d),
                    Err(d) => bad(self, d),
                };
            }
        }
        if name.starts_with('$') {
            return bad(
                self,
                Diagnostic::error(Code::Context, span, format!("`${name}` outside a marker probe"))
                    .with_label("only `.mark(...)` probes have a marker name, provider and parameters"),
            );
        }
        let in_function_probe = self.kind.at_function();
        if self.in_function.is_some() && (arg.is_some() || name == "return") {
            // Misplaced, but certainly a long: keep the type, no follow-on errors.
            self.error(
                Diagnostic::error(Code::Context, span, format!("`${name}` inside a function"))
                    .with_label("target variables exist only in probe handlers")
                    .with_help(format!("pass `${name}` to the function as an argument")),
            );
            return mk(ExprKind::Long(0));
        }
        match (name, arg) {
            (_, Some(0)) => bad(
                self,
                Diagnostic::error(Code::Context, span, "`$arg0` does not exist")
                    .with_label("arguments are numbered from `$arg1`"),
            ),
            (_, Some(n)) if in_function_probe => {
                let t = ExprKind::Target(Target::Arg(n));
                if self.kind == BodyKind::FunctionReturn {
                    // In a return probe, arguments are the values at entry.
                    return mk(ExprKind::Entry(Box::new(Expr { kind: t, ty: Ty::Long, span })));
                }
                mk(t)
            }
            ("return", _) if self.kind == BodyKind::FunctionReturn => {
                // Typed from the function's DWARF where the body has a site
                // (an `int` returning -1 is -1, not 4294967295).
                let typed = self.debug_site().and_then(|s| s.return_value(span).and_then(|v| s.read(&v, span)).ok());
                match typed {
                    Some(e) => (e, Some(Ty::Long)),
                    None => mk(ExprKind::Target(Target::Return)),
                }
            }
            ("return", _) => bad(
                self,
                Diagnostic::error(Code::Context, span, "`$return` outside a return probe")
                    .with_label("only `.return` probes see the return value")
                    .with_help("probe `...function(\"name\").return` to read `$return`"),
            ),
            (_, Some(_)) => bad(
                self,
                Diagnostic::error(Code::Context, span, format!("`${name}` outside a function probe"))
                    .with_label("there is no function call here to read arguments from"),
            ),
            _ if self.skip_badvars => skipped(
                self,
                Diagnostic::error(Code::Unsupported, span, format!("target variable `${name}` is not available")),
            ),
            _ if self.kind == BodyKind::Blocked => bad(
                self,
                Diagnostic::error(Code::Unsupported, span, format!("target variable `${name}` is not available"))
                    .with_label("a `process.blocked` probe has `$duration` (ns) and `$syscall`, no variables by name")
                    .with_help("use `$duration`, `$syscall`, `uaddr()` or `ubacktrace()`"),
            ),
            _ if self.kind == BodyKind::Sample => bad(
                self,
                Diagnostic::error(Code::Unsupported, span, format!("target variable `${name}` is not available"))
                    .with_label("a `timer.profile` sample stops a thread anywhere: it has no variables by name")
                    .with_help("use `uaddr()`, `register(\"rsp\")` or `ubacktrace()`"),
            ),
            _ if self.kind == BodyKind::Session => bad(
                self,
                Diagnostic::error(Code::Unsupported, span, format!("target variable `${name}` is not available"))
                    .with_label("begin, end, error and timer probes run in the tracer, in no target function")
                    .with_help("read it in a `process(...).function(...)` or `.statement(...)` probe"),
            ),
            _ => bad(
                self,
                Diagnostic::error(Code::Unsupported, span, format!("target variable `${name}` is not available"))
                    .with_label("telco-stap reads no debug information")
                    .with_help({
                        use telco_abi::arch::native as regs;
                        format!(
                            "use `$arg1`, `$arg2`, ... (arguments by position), `$return`, or `register(\"{}\")`",
                            regs::REGISTERS[regs::ARG_REGS[0]].name
                        )
                    }),
            ),
        }
    }

    /// The debug-information site of the body being lowered (none inside
    /// script functions, which run for any probe).
    fn debug_site(&self) -> Option<std::rc::Rc<super::dwarf_vars::Site>> {
        self.site.clone().filter(|_| self.in_function.is_none())
    }

    /// A string literal argument of `@var`/`@cast`.
    fn literal_arg(&mut self, e: Option<&ast::Expr>, what: &str, span: Span) -> Option<String> {
        match e.map(|e| &e.kind) {
            Some(A::Str(s)) => Some(String::from_utf8_lossy(s).into_owned()),
            // `@N`: the script's argument (a literal once given).
            Some(A::ScriptArg { index, as_string: true })
                if (*index as usize).checked_sub(1).is_some_and(|i| i < self.args.len()) =>
            {
                Some(self.args[*index as usize - 1].clone())
            }
            _ => {
                self.error(
                    Diagnostic::error(
                        Code::TypeMismatch,
                        e.map_or(span, |e| e.span),
                        format!("{what} must be a string literal"),
                    )
                    .with_label("not a literal"),
                );
                None
            }
        }
    }

    /// Where a target path starts: `$name`, `$return`, `@var(...)`,
    /// `@cast(...)`. Errors are reported; None then.
    fn path_base(&mut self, site: &super::dwarf_vars::Site, base: &ast::Expr) -> Option<super::dwarf_vars::Val> {
        let span = base.span;
        let r = match &base.kind {
            A::TargetVar(n) if n.as_str() == "return" => {
                if self.kind != BodyKind::FunctionReturn {
                    Err(Diagnostic::error(Code::Context, span, "`$return` outside a return probe")
                        .with_label("only `.return` probes see the return value"))
                } else {
                    site.return_value(span)
                }
            }
            A::TargetVar(n) => site.var(n, span),
            A::AtOp(c) if c.name.name.as_str() == "var" => {
                let spec = self.literal_arg(c.args.first(), "the name in `@var`", span)?;
                let module = self.module_arg(site, c.args.get(1), span)?;
                site.at_var(&spec, module.as_deref(), span)
            }
            A::AtOp(c) if c.name.name.as_str() == "cast" => {
                let (addr, t) = self.expr(&c.args[0], Some(Ty::Long));
                self.check_type(t, Ty::Long, c.args[0].span, "the address in `@cast`");
                let ty = self.literal_arg(c.args.get(1), "the type in `@cast`", span)?;
                let module = self.module_arg(site, c.args.get(2), span)?;
                site.cast(addr, &ty, module.as_deref(), span)
            }
            _ => Err(Diagnostic::error(Code::TypeMismatch, span, "`->` and `[...]` apply to target variables only")
                .with_label("not a target variable, `@var` or `@cast`")),
        };
        match r {
            Ok(v) => Some(v),
            Err(d) => {
                self.error(d);
                None
            }
        }
    }

    /// `@var`'s and `@cast`'s module argument: None for the probe's own
    /// module (left out, or named), else the name (a literal) whose
    /// debugging information the site loaded (`elaborate::debug_site`).
    /// The outer None: an error, reported.
    fn module_arg(
        &mut self,
        site: &super::dwarf_vars::Site,
        arg: Option<&ast::Expr>,
        span: Span,
    ) -> Option<Option<String>> {
        let Some(a) = arg else { return Some(None) };
        let m = self.literal_arg(Some(a), "the module", span)?;
        let path = site.module.to_string_lossy();
        let base = site.module.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        if m == path || m == base || std::fs::canonicalize(&m).ok().as_deref() == Some(site.module.as_path()) {
            return Some(None);
        }
        Some(Some(m))
    }

    /// The value a target path names, before it is read.
    fn path_value(
        &mut self,
        p: &ast::TargetPath,
        span: Span,
    ) -> Option<(std::rc::Rc<super::dwarf_vars::Site>, super::dwarf_vars::Val)> {
        // In a script function: `@var`'s or `@cast`'s module, named.
        let named = match &p.base.kind {
            A::AtOp(c) if self.in_function.is_some() => {
                let at = match c.name.name.as_str() {
                    "var" => 1,
                    "cast" => 2,
                    _ => usize::MAX,
                };
                match c.args.get(at).map(|a| &a.kind) {
                    Some(A::Str(s)) => self.fn_sites.get(String::from_utf8_lossy(s).as_ref()).cloned(),
                    Some(A::ScriptArg { index, as_string: true }) => (*index as usize)
                        .checked_sub(1)
                        .and_then(|i| self.args.get(i))
                        .and_then(|n| self.fn_sites.get(n))
                        .cloned(),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some(site) = self.debug_site().or(named) else {
            let in_fn =
                self.in_function.is_some() && matches!(&p.base.kind, A::AtOp(c) if c.name.name.as_str() == "var");
            self.error(if in_fn {
                Diagnostic::error(Code::Context, span, "`@var` in a function needs its module")
                    .with_label("a function is no probe: which module's variable?")
                    .with_help(r#"name it: `@var("name", "/path/to/module")` (the probes that call the function must be in that module)"#)
            } else {
                Diagnostic::error(Code::Context, span, "target variables by name need a function or statement probe")
                    .with_label("no probed function here to read debugging information for")
                    .with_help(r#"use them in `process("P").function("F")` or `.statement(...)` probes"#)
            });
            return None;
        };
        let mut v = self.path_base(&site, &p.base)?;
        for step in &p.steps {
            let r = match step {
                ast::PathStep::Member(id) => site.member(v, id),
                ast::PathStep::Index(e) => {
                    let (x, t) = self.expr(e, Some(Ty::Long));
                    self.check_type(t, Ty::Long, e.span, "an index");
                    site.index(v, x, e.span)
                }
            };
            v = match r {
                Ok(v) => v,
                Err(d) => {
                    self.error(d);
                    return None;
                }
            };
        }
        Some((site, v))
    }

    fn target_path(&mut self, p: &ast::TargetPath, span: Span) -> Typed {
        let fail = |ty| (Expr { kind: ExprKind::Long(0), ty, span }, None);
        // `@hist_log(s)[i]`: a bucket's count.
        if let (A::AtOp(c), [ast::PathStep::Index(i)], 0) = (&p.base.kind, &p.steps[..], p.pretty) {
            if matches!(c.name.name.as_str(), "hist_log" | "hist_linear") {
                let (hist, _) = self.at_op(c, p.base.span);
                let (index, t) = self.expr(i, Some(Ty::Long));
                self.check_type(t, Ty::Long, i.span, "a histogram's bucket index");
                let kind = ExprKind::HistBucket { hist: Box::new(hist), index: Box::new(index) };
                return (Expr { kind, ty: Ty::Long, span }, Some(Ty::Long));
            }
        }
        let want = if p.pretty > 0 { Ty::String } else { Ty::Long };
        // `$$parms$`, `$$vars$$`, `$$return$`.
        if let (A::TargetVar(n), true) = (&p.base.kind, p.steps.is_empty()) {
            if let Some(which) = n.strip_prefix('$') {
                if let Some(m) = self.mark.clone().filter(|_| self.in_function.is_none() && which == "parms") {
                    // A marker's arguments have no types to pretty-print.
                    let _ = m;
                    return self.target_var(n, span);
                }
                let Some(site) = self.debug_site() else { return self.target_var(n, span) };
                let r = match which {
                    "return" => site.return_string(p.pretty, span),
                    "parms" | "locals" | "vars" => site.vars_string(which, p.pretty, span),
                    _ => return self.target_var(n, span),
                };
                return match r {
                    Ok(e) => (e, Some(Ty::String)),
                    Err(d) => {
                        self.error(d);
                        fail(Ty::String)
                    }
                };
            }
        }
        let reported = self.diags.len();
        let r = match self.path_value(p, span) {
            Some((site, v)) if p.address => site.address(&v, span).map_err(|d| self.error(d)),
            Some((site, v)) => {
                let r = if p.pretty > 0 { site.pretty(&v, p.pretty > 1, span) } else { site.read(&v, span) };
                r.map_err(|d| self.error(d))
            }
            None => Err(()),
        };
        match r {
            Ok(e) => (e, Some(want)),
            // `--skip-badvars`: a number read is 0, and what went wrong a
            // warning.
            Err(()) if self.skip_badvars && p.pretty == 0 => {
                for d in &mut self.diags[reported..] {
                    d.severity = crate::diag::Severity::Warning;
                    d.message.push_str(" (0 instead: --skip-badvars)");
                }
                (Expr { kind: ExprKind::Long(0), ty: Ty::Long, span }, Some(Ty::Long))
            }
            Err(()) => fail(want),
        }
    }

    /// Whether an assignment's target is a target variable found by
    /// debugging information (written through `dwarf_vars`).
    fn is_debug_target(&self, e: &ast::Expr) -> bool {
        match &e.kind {
            A::TargetPath(p) => p.pretty == 0 && !p.address,
            A::AtOp(c) => c.name.name.as_str() == "var",
            A::TargetVar(n) => {
                let n = n.as_str();
                let arg = n.strip_prefix("arg").is_some_and(|d| d.parse::<u32>().is_ok());
                self.debug_site().is_some() && !arg && n != "return" && !n.starts_with('$')
            }
            _ => false,
        }
    }

    /// Guru mode: `$x = v`, `$p->f += v`, `@var("g") = v`.
    fn debug_assign(&mut self, op: AssignOp, target: &ast::Expr, value: &ast::Expr, span: Span) -> Typed {
        let fail = (Expr { kind: ExprKind::Long(0), ty: Ty::Long, span }, None);
        if let A::TargetPath(p) = &target.kind {
            if let A::AtOp(c) = &p.base.kind {
                if matches!(c.name.name.as_str(), "hist_log" | "hist_linear") {
                    self.error(
                        Diagnostic::error(Code::TypeMismatch, target.span, "cannot assign to histogram buckets")
                            .with_label("a histogram is read-only: its counts come from `<<<`"),
                    );
                    return fail;
                }
            }
        }
        if !self.guru {
            self.error(
                Diagnostic::error(
                    Code::Context,
                    target.span,
                    format!("writing `{}` needs guru mode", crate::print::print_expr(target)),
                )
                .with_label("changes the target's state")
                .with_help("run with -g to allow probes to write target registers and memory"),
            );
        }
        let path = match &target.kind {
            A::TargetPath(p) => (**p).clone(),
            _ => ast::TargetPath { base: target.clone(), steps: Vec::new(), pretty: 0, address: false },
        };
        let (v, tv) = self.expr(value, Some(Ty::Long));
        self.check_type(tv, Ty::Long, value.span, "a value written to the target");
        let Some((site, place)) = self.path_value(&path, target.span) else { return fail };
        if op != AssignOp::Assign && place_has_effects(&place.place) {
            // Read and written, the place would be computed twice.
            self.error(
                Diagnostic::error(
                    Code::Context,
                    target.span,
                    format!("`{}` changes the index it is written at", op.symbol()),
                )
                .with_label("this target's address has side effects (an assignment, `++`, a call)")
                .with_help("compute the index into a variable first"),
            );
            return fail;
        }
        let value = match op {
            AssignOp::Assign => Ok(v),
            AssignOp::Concat | AssignOp::Aggregate => Err(Diagnostic::error(
                Code::TypeMismatch,
                span,
                format!("`{}` does not apply to a target variable", op.symbol()),
            )),
            _ => site.read(&place, target.span).map(|old| {
                let bop = match op {
                    AssignOp::Add => BinOp::Add,
                    AssignOp::Sub => BinOp::Sub,
                    AssignOp::Mul => BinOp::Mul,
                    AssignOp::Div => BinOp::Div,
                    AssignOp::Mod => BinOp::Mod,
                    AssignOp::Shl => BinOp::Shl,
                    AssignOp::Shr => BinOp::Shr,
                    AssignOp::BitAnd => BinOp::BitAnd,
                    AssignOp::BitOr => BinOp::BitOr,
                    _ => BinOp::BitXor,
                };
                Expr { kind: ExprKind::Binary { op: bop, lhs: Box::new(old), rhs: Box::new(v) }, ty: Ty::Long, span }
            }),
        };
        match value.and_then(|v| site.write(&place, v, span)) {
            Ok(e) => {
                let t = e.ty;
                (e, Some(t))
            }
            Err(d) => {
                self.error(d);
                fail
            }
        }
    }

    fn binary(&mut self, op: BinOp, lhs: &ast::Expr, rhs: &ast::Expr, span: Span) -> Typed {
        let mk = |kind, ty: Ty| (Expr { kind, ty, span }, Some(ty));
        match op {
            BinOp::Concat => {
                let (a, ta) = self.expr(lhs, Some(Ty::String));
                let (b, tb) = self.expr(rhs, Some(Ty::String));
                self.check_type(ta, Ty::String, lhs.span, "an operand of `.`");
                self.check_type(tb, Ty::String, rhs.span, "an operand of `.`");
                mk(ExprKind::Binary { op, lhs: Box::new(a), rhs: Box::new(b) }, Ty::String)
            }
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                // Both sides have one type, long or string; learn it from either.
                let errors = self.diags.len();
                let (a, ta) = self.expr(lhs, None);
                let (b, tb) = self.expr(rhs, ta);
                let clean = self.diags.len() == errors;
                let (a, ta) = if ta.is_none() && tb.is_some() && clean { self.expr(lhs, tb) } else { (a, ta) };
                match (ta, tb) {
                    (Some(x), Some(y)) if x != y => self.error(
                        Diagnostic::error(
                            Code::TypeMismatch,
                            span,
                            format!("cannot compare a {} with a {}", x.name(), y.name()),
                        )
                        .with_label("both sides must be longs, or both strings"),
                    ),
                    (Some(t @ (Ty::Stat | Ty::Hist | Ty::Void)), _)
                    | (_, Some(t @ (Ty::Stat | Ty::Hist | Ty::Void))) => self.error(
                        Diagnostic::error(Code::TypeMismatch, span, format!("cannot compare a {}", t.name()))
                            .with_label("only longs and strings compare"),
                    ),
                    _ => {}
                }
                mk(ExprKind::Binary { op, lhs: Box::new(a), rhs: Box::new(b) }, Ty::Long)
            }
            _ => {
                let (a, ta) = self.expr(lhs, Some(Ty::Long));
                let (b, tb) = self.expr(rhs, Some(Ty::Long));
                let what = format!("an operand of `{}`", op.symbol());
                self.check_type(ta, Ty::Long, lhs.span, &what);
                self.check_type(tb, Ty::Long, rhs.span, &what);
                mk(ExprKind::Binary { op, lhs: Box::new(a), rhs: Box::new(b) }, Ty::Long)
            }
        }
    }

    /// An assignable expression; `want` is the type the assignment gives it.
    fn lvalue(&mut self, e: &ast::Expr, want: Option<Ty>) -> Typed {
        match &e.kind {
            A::TargetVar(name) => {
                if !self.guru {
                    self.error(
                        Diagnostic::error(Code::Context, e.span, format!("writing `${name}` needs guru mode"))
                            .with_label("changes the target's state")
                            .with_help("run with -g to allow probes to write target registers and memory"),
                    );
                }
                // `$return` is written as the register (its typed reading
                // is an expression, not a place).
                let t =
                    if name.as_str() == "return" && self.kind == BodyKind::FunctionReturn && self.in_function.is_none()
                    {
                        (Expr { kind: ExprKind::Target(Target::Return), ty: Ty::Long, span: e.span }, Some(Ty::Long))
                    } else {
                        self.target_var(name, e.span)
                    };
                if matches!(t.0.kind, ExprKind::Entry(_)) {
                    self.error(
                        Diagnostic::error(Code::Context, e.span, format!("writing `${name}` in a return probe"))
                            .with_label("the function has used its arguments already")
                            .with_help("write it in an entry probe (`.function(\"F\")`), or write `$return`"),
                    );
                }
                t
            }
            A::Var(_) | A::Index(_) => self.expr(e, want),
            _ => {
                let (x, t) = self.expr(e, want);
                (x, t)
            }
        }
    }

    /// A statistic written like a variable (`s = 3`, `s++`): one error.
    fn stat_written(&mut self, target: &ast::Expr) -> bool {
        let Some(slot) = self.slot_of(target) else { return false };
        if self.slot_ty(slot) != Some(Ty::Stat) {
            return false;
        }
        self.error(
            Diagnostic::error(Code::TypeMismatch, target.span, "a statistic cannot be assigned or changed")
                .with_label("this is a statistic")
                .with_help("add values to it with `<<<`; `delete` empties it"),
        );
        true
    }

    fn assign(&mut self, op: AssignOp, target: &ast::Expr, value: &ast::Expr, span: Span) -> Typed {
        let mk = |kind, ty: Option<Ty>| (Expr { kind, ty: ty.unwrap_or(Ty::Long), span }, ty);
        if self.is_debug_target(target) {
            return self.debug_assign(op, target, value, span);
        }
        if op != AssignOp::Aggregate && self.stat_written(target) {
            let (v, _) = self.expr(value, None);
            return mk(ExprKind::Assign { op, target: Box::new(v.clone()), value: Box::new(v) }, Some(Ty::Long));
        }
        match op {
            AssignOp::Aggregate => {
                // Statistics live in globals: `s <<< v` or `arr[k] <<< v`.
                let is_global = match &target.kind {
                    A::Var(n) => self.global_named(n).is_some() && !self.locals.index.contains_key(n),
                    A::Index(_) => true,
                    _ => false,
                };
                if !is_global {
                    self.error(
                        Diagnostic::error(Code::TypeMismatch, target.span, "statistics must be globals")
                            .with_label("not a global")
                            .with_help("declare it with `global` at the top of the script"),
                    );
                }
                let (t, tt) = self.expr(target, Some(Ty::Stat));
                self.check_type(tt, Ty::Stat, target.span, "the left side of `<<<`");
                let (v, tv) = self.expr(value, Some(Ty::Long));
                self.check_type(tv, Ty::Long, value.span, "a value added to a statistic");
                mk(ExprKind::Assign { op, target: Box::new(t), value: Box::new(v) }, Some(Ty::Long))
            }
            AssignOp::Assign => {
                // Learn in both directions: from the value, else from the target.
                let errors = self.diags.len();
                let (v, tv) = self.expr(value, None);
                let no_value = matches!(tv, Some(Ty::Void | Ty::Stat | Ty::Hist));
                if self.reporting && (no_value || (tv.is_none() && self.diags.len() > errors)) {
                    // The value was already reported; its target's type is unknowable.
                    if let A::Var(n) = &target.kind {
                        self.untyped_reported.push(n.to_string());
                    }
                }
                let (t, tt) = self.lvalue(target, tv.filter(|t| matches!(t, Ty::Long | Ty::String)));
                let clean = self.diags.len() == errors;
                let (v, tv) = if tv.is_none() && tt.is_some() && clean { self.expr(value, tt) } else { (v, tv) };
                match (tt, tv) {
                    (_, Some(t @ (Ty::Stat | Ty::Hist | Ty::Void))) => self.error(
                        Diagnostic::error(Code::TypeMismatch, value.span, format!("a {} cannot be assigned", t.name()))
                            .with_label("has no value to store"),
                    ),
                    (Some(a), Some(b)) if a != b => {
                        if let Some(slot) = self.slot_of(target) {
                            // Names both uses: where the variable got its type, and here.
                            self.unify(slot, b, value.span);
                        } else {
                            self.error(
                                Diagnostic::error(
                                    Code::TypeMismatch,
                                    span,
                                    format!("cannot assign a {} to a {}", b.name(), a.name()),
                                )
                                .with_label(format!("the value is a {}", b.name()))
                                .with_secondary(target.span, format!("this is a {}", a.name())),
                            );
                        }
                    }
                    _ => {}
                }
                let ty = tt.or(tv);
                mk(ExprKind::Assign { op, target: Box::new(t), value: Box::new(v) }, ty)
            }
            AssignOp::Concat => {
                let (t, tt) = self.lvalue(target, Some(Ty::String));
                let (v, tv) = self.expr(value, Some(Ty::String));
                self.check_type(tt, Ty::String, target.span, "the left side of `.=`");
                self.check_type(tv, Ty::String, value.span, "the right side of `.=`");
                mk(ExprKind::Assign { op, target: Box::new(t), value: Box::new(v) }, Some(Ty::String))
            }
            _ => {
                let (t, tt) = self.lvalue(target, Some(Ty::Long));
                let (v, tv) = self.expr(value, Some(Ty::Long));
                let what = format!("an operand of `{}`", op.symbol());
                self.check_type(tt, Ty::Long, target.span, &what);
                self.check_type(tv, Ty::Long, value.span, &what);
                mk(ExprKind::Assign { op, target: Box::new(t), value: Box::new(v) }, Some(Ty::Long))
            }
        }
    }

    fn call(&mut self, c: &ast::Call, span: Span, want: Option<Ty>) -> Typed {
        let name = c.name.name.as_str();
        if let Some(&fid) = self.func_index.get(name) {
            let params = self.functions[fid.0 as usize].params;
            if c.args.len() != params {
                let def = self.functions[fid.0 as usize].ast.name.span;
                self.error(
                    Diagnostic::error(
                        Code::Arity,
                        span,
                        format!(
                            "function `{name}` takes {params} argument{} but {} {} given",
                            if params == 1 { "" } else { "s" },
                            c.args.len(),
                            if c.args.len() == 1 { "was" } else { "were" }
                        ),
                    )
                    .with_label("in this call")
                    .with_secondary(def, "defined here"),
                );
            }
            let mut args = Vec::with_capacity(c.args.len());
            for (i, a) in c.args.iter().enumerate() {
                if i >= params {
                    args.push(self.expr(a, None).0);
                    continue;
                }
                let slot = SlotRef::Param(fid, i);
                let want = self.slot_ty(slot);
                let (x, t) = self.expr(a, want);
                match t {
                    Some(t @ (Ty::Long | Ty::String)) => self.unify(slot, t, a.span),
                    Some(t) => self.error(
                        Diagnostic::error(
                            Code::TypeMismatch,
                            a.span,
                            format!("cannot pass a {} to a function", t.name()),
                        )
                        .with_label("arguments are longs or strings"),
                    ),
                    None => {}
                }
                args.push(x);
            }
            let ret = SlotRef::Return(fid);
            let mut ty = self.slot_ty(ret);
            // A function without `return EXPR` returns nothing where its
            // result is not used; where it is, as in SystemTap, the use
            // types it and it gives 0 or "" (`0 * f()` of a function that
            // only raises an error).
            let gives_value = super::walk::returns_value(&self.functions[fid.0 as usize].ast.body)
                || self.functions[fid.0 as usize].ast.ret.is_some();
            if !gives_value && !matches!(want, Some(Ty::Long | Ty::String)) && ty.is_none() {
                ty = Some(Ty::Void);
            }
            if ty.is_none() {
                if let Some(w @ (Ty::Long | Ty::String)) = want {
                    self.unify(ret, w, span);
                    ty = Some(w);
                }
            }
            if ty == Some(Ty::Void) && want.is_some() {
                self.error(
                    Diagnostic::error(Code::TypeMismatch, span, format!("function `{name}` returns no value"))
                        .with_label("its result is used here"),
                );
            }
            return (Expr { kind: ExprKind::Call { func: fid, args }, ty: ty.unwrap_or(Ty::Long), span }, ty);
        }
        let Some(sig) = builtins::lookup(name) else {
            let mut d = Diagnostic::error(Code::Undefined, c.name.span, format!("unknown function `{name}`"))
                .with_label("not a built-in, a script function or a tapset function");
            let candidates: Vec<&str> = self
                .all_functions
                .iter()
                .map(String::as_str)
                .chain(builtins::BUILTINS.iter().map(|s| s.name))
                .collect();
            if let Some(s) = crate::suggest::closest(name, candidates.iter().copied()) {
                d = d.with_help(format!("did you mean `{s}`?"));
            }
            self.error(d);
            // Still walk the arguments: they may define locals and types.
            for a in &c.args {
                self.expr(a, None);
            }
            return (Expr { kind: ExprKind::Long(0), ty: Ty::Long, span }, None);
        };
        self.builtin(sig, c, span)
    }

    fn builtin(&mut self, sig: &'static builtins::Signature, c: &ast::Call, span: Span) -> Typed {
        let n = c.args.len();
        if sig.builtin.user_write().is_some() && !self.guru {
            self.error(
                Diagnostic::error(Code::Context, span, format!("`{}` needs guru mode", sig.name))
                    .with_label("writes the target's memory")
                    .with_help("run with -g to allow probes to write target registers and memory"),
            );
        }
        // Registers and the probe address exist only where a target thread
        // hit a probe (or in functions, which such probes may call).
        if (matches!(sig.builtin, Builtin::Register | Builtin::Uaddr | Builtin::Returnval)
            || sig.name.ends_with("_arg"))
            && !self.kind.has_registers()
            && self.in_function.is_none()
        {
            self.error(
                Diagnostic::error(Code::Context, span, format!("`{}` outside a probe in the target", sig.name))
                    .with_label("begin, end, error and timer probes run in the tracer: there are no target registers")
                    .with_help("use it in a `process(...)` probe"),
            );
        }
        // A sample interrupts a thread anywhere: its registers are there,
        // but no function's arguments or return value.
        if (matches!(sig.builtin, Builtin::Returnval) || sig.name.ends_with("_arg"))
            && matches!(self.kind, BodyKind::Sample | BodyKind::Blocked)
            && self.in_function.is_none()
        {
            self.error(
                Diagnostic::error(Code::Context, span, format!("`{}` in a `timer.profile` probe", sig.name))
                    .with_label("a sample stops a thread anywhere, not at a function's entry or return")
                    .with_help("use `uaddr()`, `register(\"rsp\")` or `ubacktrace()`"),
            );
        }
        let (lo, hi) = (sig.args.len(), sig.args.len() + sig.optional.len());
        if n < lo || (!sig.varargs && n > hi) {
            let want = if sig.varargs {
                format!("at least {lo}")
            } else if lo == hi {
                format!("{lo}")
            } else {
                format!("{lo} or {hi}")
            };
            self.error(
                Diagnostic::error(
                    Code::Arity,
                    span,
                    format!(
                        "`{}` takes {want} argument{} but {n} {} given",
                        sig.name,
                        if hi == 1 && lo == 1 { "" } else { "s" },
                        if n == 1 { "was" } else { "were" }
                    ),
                )
                .with_label("in this call"),
            );
        }
        let mut args = Vec::with_capacity(n);
        let fixed: Vec<Ty> = sig.args.iter().chain(sig.optional.iter()).copied().collect();
        // printf/sprintf: the format decides the types of the rest.
        let mut formatted: Option<Vec<bool>> = None;
        if matches!(sig.builtin, Builtin::Printf | Builtin::Sprintf) {
            if let Some(f) = c.args.first() {
                match &f.kind {
                    A::Str(s) => match crate::format::parse(s) {
                        Ok(segs) => formatted = Some(crate::format::argument_kinds(&segs)),
                        Err(fe) => self.error(
                            Diagnostic::error(
                                Code::BadFormat,
                                f.span,
                                format!("invalid format string: {}", fe.message),
                            )
                            .with_label(format!("at byte {} of the format", fe.offset)),
                        ),
                    },
                    _ => self.error(
                        Diagnostic::error(
                            Code::BadFormat,
                            f.span,
                            format!("the format of `{}` must be a string literal", sig.name),
                        )
                        .with_label("not a literal")
                        .with_help(
                            "formats are checked and compiled ahead of time; use `%s` to print a computed string",
                        ),
                    ),
                }
            }
            if let Some(kinds) = &formatted {
                if kinds.len() != n.saturating_sub(1) {
                    self.error(
                        Diagnostic::error(
                            Code::BadFormat,
                            span,
                            format!(
                                "the format wants {} argument{} but {} {} given",
                                kinds.len(),
                                if kinds.len() == 1 { "" } else { "s" },
                                n.saturating_sub(1),
                                if n.saturating_sub(1) == 1 { "is" } else { "are" }
                            ),
                        )
                        .with_label("in this call"),
                    );
                }
            }
        }
        if matches!(sig.builtin, Builtin::Printd | Builtin::Printdln) {
            if let Some(d) = c.args.first().filter(|d| !matches!(d.kind, A::Str(_))) {
                self.error(
                    Diagnostic::error(
                        Code::BadFormat,
                        d.span,
                        format!("the delimiter of `{}` must be a string literal", sig.name),
                    )
                    .with_label("not a literal"),
                );
            }
        }
        let bad_format = matches!(sig.builtin, Builtin::Printf | Builtin::Sprintf)
            && !matches!(c.args.first().map(|a| &a.kind), Some(A::Str(_)));
        for (i, a) in c.args.iter().enumerate() {
            if i == 0 && bad_format {
                // Already reported: the format must be a literal.
                args.push(self.expr(a, None).0);
                continue;
            }
            let want = if let Some(t) = fixed.get(i) {
                Some(*t)
            } else if let Some(kinds) = &formatted {
                kinds.get(i - 1).map(|s| if *s { Ty::String } else { Ty::Long })
            } else {
                None
            };
            let (x, t) = self.expr(a, want);
            match (want, t) {
                (Some(w), Some(t)) if w != t => {
                    let what = if fixed.get(i).is_some() {
                        format!("argument {} of `{}`", i + 1, sig.name)
                    } else {
                        format!("the argument for conversion {} of the format", i)
                    };
                    self.check_type(Some(t), w, a.span, &what);
                }
                (None, Some(Ty::Hist))
                    if c.args.len() == 1
                        && matches!(
                            sig.builtin,
                            Builtin::Print | Builtin::Println | Builtin::Sprint | Builtin::Sprintln
                        ) => {}
                (None, Some(t @ (Ty::Hist | Ty::Stat | Ty::Void))) => self.error(
                    Diagnostic::error(Code::TypeMismatch, a.span, format!("a {} cannot be printed here", t.name()))
                        .with_label("not a long or a string")
                        .with_help("print a histogram on its own: `print(@hist_log(s))` or `sprint(@hist_log(s))`"),
                ),
                _ => {}
            }
            args.push(x);
        }
        let ty = sig.ret;
        (Expr { kind: ExprKind::Builtin { func: sig.builtin, args }, ty, span }, Some(ty))
    }

    fn at_op(&mut self, c: &ast::Call, span: Span) -> Typed {
        let name = c.name.name.as_str();
        let zero = |ty| (Expr { kind: ExprKind::Long(0), ty, span }, Some(ty));
        match name {
            "defined" => {
                // `@defined($name)`: 1 where the variable can be read here.
                let known = self.is_defined(c.args.first(), span);
                (Expr { kind: ExprKind::Long(i64::from(known)), ty: Ty::Long, span }, Some(Ty::Long))
            }
            "var" | "cast" => {
                let path = ast::TargetPath {
                    base: ast::Expr::new(A::AtOp(Box::new(c.clone())), span),
                    steps: Vec::new(),
                    pretty: 0,
                    address: false,
                };
                self.target_path(&path, span)
            }
            "entry" => {
                let Some(arg) = c.args.first() else { return zero(Ty::Long) };
                if self.kind != BodyKind::FunctionReturn {
                    self.error(
                        Diagnostic::error(Code::Context, span, "`@entry` outside a return probe")
                            .with_label("there is no function entry to evaluate this at")
                            .with_help("use `@entry(...)` in a `.return` probe"),
                    );
                }
                let (x, t) = self.expr(arg, None);
                (Expr { kind: ExprKind::Entry(Box::new(x)), ty: t.unwrap_or(Ty::Long), span }, t)
            }
            "count" | "sum" | "min" | "max" | "avg" | "variance" => {
                let op = match name {
                    "count" => AggOp::Count,
                    "sum" => AggOp::Sum,
                    "min" => AggOp::Min,
                    "max" => AggOp::Max,
                    "avg" => AggOp::Avg,
                    _ => AggOp::Variance,
                };
                let Some(arg) = c.args.first() else { return zero(Ty::Long) };
                let mut shift = 0u8;
                if let Some(e) = c.args.get(1) {
                    // SystemTap's bit shift: the running state keeps
                    // values shifted left by it (more precision).
                    match self.constant(e) {
                        Some(n) if (0..=62).contains(&n) => shift = n as u8,
                        Some(n) => self.error(
                            Diagnostic::error(Code::BadValue, e.span, format!("bit shift ({n}) out of range <0..62>"))
                                .with_label("the bit shift of `@variance`"),
                        ),
                        None => self.error(
                            Diagnostic::error(Code::BadValue, e.span, "the bit shift of `@variance` must be a number")
                                .with_label("not a constant"),
                        ),
                    }
                }
                let stat = self.stat_operand(arg);
                (
                    Expr { kind: ExprKind::Aggregate { op, stat: Box::new(stat), shift }, ty: Ty::Long, span },
                    Some(Ty::Long),
                )
            }
            "hist_log" => {
                let Some(arg) = c.args.first() else { return zero(Ty::Hist) };
                let stat = self.stat_operand(arg);
                (Expr { kind: ExprKind::HistLog { stat: Box::new(stat) }, ty: Ty::Hist, span }, Some(Ty::Hist))
            }
            "hist_linear" => {
                let [arg, lo, hi, step] = &c.args[..] else { return zero(Ty::Hist) };
                let stat = self.stat_operand(arg);
                let mut consts = [0i64; 3];
                for (k, e) in [lo, hi, step].into_iter().enumerate() {
                    match self.constant(e) {
                        Some(v) => consts[k] = v,
                        None => self.error(
                            Diagnostic::error(
                                Code::BadValue,
                                e.span,
                                "`@hist_linear` bounds must be numbers known ahead of time",
                            )
                            .with_label("not a constant"),
                        ),
                    }
                }
                let [lo_v, hi_v, step_v] = consts;
                let buckets = (i128::from(hi_v) - i128::from(lo_v)) / i128::from(step_v.max(1));
                // SystemTap's buckets: (hi - lo) / step, plus the underflow
                // and overflow ones; lo == hi is one bucket.
                if step_v <= 0 || hi_v < lo_v {
                    self.error(
                        Diagnostic::error(Code::BadValue, span, "`@hist_linear` needs lo <= hi and a positive step")
                            .with_label(format!("lo {lo_v}, hi {hi_v}, step {step_v}")),
                    );
                } else if buckets > 10_000 {
                    self.error(
                        Diagnostic::error(Code::BadValue, span, "`@hist_linear` would have more than 10000 buckets")
                            .with_label(format!("{buckets} buckets")),
                    );
                }
                (
                    Expr {
                        kind: ExprKind::HistLinear { stat: Box::new(stat), lo: lo_v, hi: hi_v, step: step_v },
                        ty: Ty::Hist,
                        span,
                    },
                    Some(Ty::Hist),
                )
            }
            // Unknown operators were reported by pass 1.
            _ => zero(Ty::Long),
        }
    }

    /// The operand of `@count` and friends: a global statistic or an element
    /// of an array of statistics.
    fn stat_operand(&mut self, e: &ast::Expr) -> Expr {
        let is_stat_place = match &e.kind {
            A::Var(n) => self.global_named(n.as_str()).is_some() && !self.locals.index.contains_key(n.as_str()),
            A::Index(_) => true,
            _ => false,
        };
        match &e.kind {
            _ if is_stat_place => {
                let (x, t) = self.expr(e, Some(Ty::Stat));
                if let Some(t) = t.filter(|t| *t != Ty::Stat) {
                    self.error(
                        Diagnostic::error(
                            Code::TypeMismatch,
                            e.span,
                            format!("not a statistic: this is a {}", t.name()),
                        )
                        .with_label("statistics are fed with `<<<`")
                        .with_help("aggregate operators (@count, @sum, ..., @hist_log) read statistics only"),
                    );
                }
                x
            }
            _ => {
                self.error(
                    Diagnostic::error(Code::TypeMismatch, e.span, "not a statistic")
                        .with_label("expected a global fed with `<<<`, or an element of such an array"),
                );
                self.expr(e, None).0
            }
        }
    }

    /// A compile-time integer: a literal, a negated one, or `$N`.
    fn constant(&self, e: &ast::Expr) -> Option<i64> {
        match &e.kind {
            A::Int(n) => Some(*n),
            A::Unary { op: UnOp::Neg, operand } => self.constant(operand).map(i64::wrapping_neg),
            A::ScriptArg { index, as_string: false } => self.script_arg_long(*index, e.span).ok(),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum SlotRef {
    Local(LocalId),
    GlobalValue(GlobalId),
    GlobalKey(GlobalId, usize),
    Param(FuncId, usize),
    Return(FuncId),
}

fn ast_type(t: ast::Type) -> Ty {
    match t {
        ast::Type::Long => Ty::Long,
        ast::Type::String => Ty::String,
    }
}

/// The value of an SDT marker argument: its register, constant or memory
/// word, of its size and signedness.
fn mark_arg(a: &crate::arch::MarkArg, m: &crate::program::MarkPoint, span: Span) -> Expr {
    use crate::arch::ArgLoc;
    use builtins::Builtin as B;
    let long = |kind| Expr { kind, ty: Ty::Long, span };
    let num = |v: i64| long(ExprKind::Long(v));
    let call = |func, args: Vec<Expr>| long(ExprKind::Builtin { func, args });
    let bin = |op, l: Expr, r: Expr| long(ExprKind::Binary { op, lhs: Box::new(l), rhs: Box::new(r) });
    let reg = |i: u32| {
        let name = telco_abi::arch::native::REGISTERS.get(i as usize).map_or("", |r| r.name);
        call(B::Register, vec![Expr { kind: ExprKind::String(name.as_bytes().to_vec()), ty: Ty::String, span }])
    };
    // A value of `size` bytes, sign- or zero-extended.
    let extend = |v: Expr| super::dwarf_vars::extend(v, u64::from(a.size), a.signed);
    match &a.loc {
        ArgLoc::Const(v) => extend(num(*v)),
        ArgLoc::Reg { index, shift } => {
            let r = reg(*index);
            extend(if *shift > 0 { bin(BinOp::UShr, r, num(i64::from(*shift))) } else { r })
        }
        ArgLoc::Mem { .. } | ArgLoc::Link(_) | ArgLoc::Symbol { .. } => {
            let addr = match &a.loc {
                ArgLoc::Mem { base, index, disp } => {
                    let mut addr = num(*disp);
                    if let Some(b) = base {
                        addr = bin(BinOp::Add, reg(*b), addr);
                    }
                    if let Some((i, scale)) = index {
                        addr = bin(BinOp::Add, addr, bin(BinOp::Mul, reg(*i), num(i64::from(*scale))));
                    }
                    addr
                }
                // A symbol of the marker's module: its link-time address,
                // moved by the load bias (the pc at the marker less the
                // marker's link-time address).
                ArgLoc::Link(at) if m.pie => {
                    let pc = reg(telco_abi::arch::native::PC as u32);
                    bin(BinOp::Add, pc, num((*at).wrapping_sub(m.addr) as i64))
                }
                ArgLoc::Link(at) => num(*at as i64),
                // Resolved in pass 2 before any body is lowered.
                _ => num(0),
            };
            let func = match (a.size, a.signed) {
                (1, true) => B::UserInt8,
                (1, false) => B::UserUint8,
                (2, true) => B::UserInt16,
                (2, false) => B::UserUint16,
                (4, true) => B::UserInt32,
                (4, false) => B::UserUint32,
                _ => B::UserInt64,
            };
            call(func, vec![addr])
        }
    }
}
