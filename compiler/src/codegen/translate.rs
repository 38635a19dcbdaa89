//! Pass 3: the typed program to Cranelift IR, one function per probe body
//! and per script function (plus an entry handler for return probes that
//! use `@entry`).
//!
//! Conventions of the generated code:
//! * every function takes the region base and the context pointer first
//!   (`Ctx` in telco-abi); script functions then their parameters (a string
//!   is a pointer to a NUL-terminated buffer), then, when they return a
//!   string, a pointer to the caller's result buffer; all return an i64;
//! * a long is an i64 value, a string a pointer to a MAXSTRINGLEN buffer: a
//!   local's stack slot, a temporary stack slot per string-producing
//!   expression, or a constant in the region;
//! * a runtime error stores its code and location in the context and
//!   branches to the innermost `catch`, or to the function's exit; callers
//!   check the context after every call that can fail. A probe handler's
//!   exit reports a pending error (`rt_report`);
//! * no absolute addresses: data is reached from the region base, code by
//!   `call rel32` to functions linked in pass 4.

use super::layout::{HistKey, Layout, Slot};
use super::rt::Rt;
use crate::ast::{AssignOp, BinOp, IncDec, SortDir, UnOp};
use crate::diag::{Code, Diagnostic};
use crate::elaborate::builtins::Builtin;
use crate::program::*;
use crate::span::{SourceMap, Span};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    self, types, AbiParam, AtomicRmwOp, Block, FuncRef, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind,
    UserExternalName, UserFuncName, Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use std::collections::HashMap;
use telco_abi::format::{self as fmt, Piece};
use telco_abi::region::{self as abi, CTX_SIZE};

const I64: ir::Type = types::I64;
/// Namespaces of external names: script functions, runtime functions.
pub const NS_FUNC: u32 = 0;
pub const NS_RT: u32 = 1;

/// What pass 3 produces.
pub struct Translated {
    pub functions: Vec<TFunc>,
    pub layout: Layout,
    pub locations: Vec<telco_abi::artifact::Location>,
    pub formats: Vec<(u64, Vec<bool>)>,
    /// Per probe body: its handler's function index, and the entry handler's
    /// with the bytes it saves.
    pub probes: Vec<(usize, Option<(usize, u32)>)>,
    /// Globals printed at the end (written, never read).
    pub display: Vec<u32>,
}

pub struct TFunc {
    pub name: String,
    pub func: ir::Function,
    /// The function reads context fields a lean trampoline leaves unset
    /// (the saved registers, `addr`, the tid cache, …), or passes the
    /// context on. False: it reads only `probe`, `slot` and `entry`, and
    /// sets up what else it uses itself.
    pub full_ctx: bool,
}

fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// Shared state of the translation.
pub struct Shared<'a> {
    program: &'a Program,
    sources: &'a SourceMap,
    pub layout: Layout,
    locations: Vec<telco_abi::artifact::Location>,
    loc_map: HashMap<Span, u32>,
    formats: Vec<(u64, Vec<bool>)>,
    format_map: HashMap<Vec<u8>, u32>,
    pub diags: Vec<Diagnostic>,
    call_conv: CallConv,
    frontend: cranelift_codegen::isa::TargetFrontendConfig,
}

impl Shared<'_> {
    /// The region offset of the symbol table of the probed modules
    /// (`telco_abi::region::SymTable`), built on first use: every function
    /// symbol of every module a probe point is in, by address.
    fn symtab(&mut self) -> u64 {
        use telco_abi::region::{SymEntry, SymTable, SymTableModule, SYM_ENTRY_SIZE, SYM_MODULE_SIZE};
        if self.layout.symtab_off != 0 {
            return self.layout.symtab_off;
        }
        let mut paths: Vec<&std::path::Path> = Vec::new();
        for p in &self.program.probes {
            for pt in &p.points {
                if let Point::Function(f) = pt {
                    if !paths.contains(&f.module.as_path()) {
                        paths.push(&f.module);
                    }
                }
            }
        }
        let mut mods = Vec::new();
        for path in paths {
            // Pass 2 read it already; a module that cannot be read now
            // simply has no names.
            let Ok(m) = crate::elf::Module::load(path) else { continue };
            let mut fs: Vec<(u64, u64, String)> =
                m.functions.iter().map(|f| (f.addr, f.size, f.display_name().to_string())).collect();
            let Some(anchor) = m.functions.first() else { continue };
            fs.sort_by_key(|f| f.0);
            let module = telco_abi::artifact::SymModule {
                path: path.to_path_buf(),
                anchor_addr: anchor.addr,
                anchor_offset: anchor.file_offset,
            };
            mods.push((module, fs));
        }
        let head = core::mem::size_of::<SymTable>();
        let n_entries: usize = mods.iter().map(|m| m.1.len()).sum();
        // A relocation per probed function (the trampolines' copies).
        let relocs_cap: usize = self
            .program
            .probes
            .iter()
            .flat_map(|p| p.points.iter())
            .filter(|pt| matches!(pt, Point::Function(_)))
            .count();
        let relocs = head + mods.len() * SYM_MODULE_SIZE + n_entries * SYM_ENTRY_SIZE;
        let mut blob = vec![0u8; relocs + relocs_cap * telco_abi::region::SYM_RELOC_SIZE];
        blob[..4].copy_from_slice(&(mods.len() as u32).to_le_bytes());
        let field = |f: usize| f..f + 4;
        blob[field(core::mem::offset_of!(SymTable, relocs))].copy_from_slice(&(relocs as u32).to_le_bytes());
        blob[field(core::mem::offset_of!(SymTable, relocs_cap))].copy_from_slice(&(relocs_cap as u32).to_le_bytes());
        let mut names: HashMap<String, u32> = HashMap::new();
        let mut strings: Vec<u8> = Vec::new();
        let base = blob.len();
        let mut name_of = |s: &str| -> u32 {
            *names.entry(s.to_string()).or_insert_with(|| {
                let o = (base + strings.len()) as u32;
                strings.extend_from_slice(s.as_bytes());
                strings.push(0);
                o
            })
        };
        let mut at = head + mods.len() * SYM_MODULE_SIZE;
        for (i, (m, fs)) in mods.iter().enumerate() {
            let md = head + i * SYM_MODULE_SIZE;
            let put32 = |b: &mut Vec<u8>, o: usize, v: u32| b[o..o + 4].copy_from_slice(&v.to_le_bytes());
            put32(&mut blob, md + core::mem::offset_of!(SymTableModule, entries), at as u32);
            put32(&mut blob, md + core::mem::offset_of!(SymTableModule, count), fs.len() as u32);
            let path = name_of(&m.path.to_string_lossy());
            put32(&mut blob, md + core::mem::offset_of!(SymTableModule, path), path);
            for (addr, size, name) in fs {
                blob[at..at + 8].copy_from_slice(&addr.to_le_bytes());
                put32(&mut blob, at + core::mem::offset_of!(SymEntry, size), (*size).min(u64::from(u32::MAX)) as u32);
                let n = name_of(name);
                put32(&mut blob, at + core::mem::offset_of!(SymEntry, name), n);
                at += SYM_ENTRY_SIZE;
            }
        }
        blob.extend_from_slice(&strings);
        self.layout.symtab_off = self.layout.constant_aligned(&blob);
        self.layout.symtab_modules = mods.into_iter().map(|m| m.0).collect();
        self.layout.symtab_off
    }
}

pub fn translate(
    program: &Program,
    sources: &SourceMap,
    layout: Layout,
    isa: &dyn cranelift_codegen::isa::TargetIsa,
) -> Result<Translated, Vec<Diagnostic>> {
    let call_conv = isa.default_call_conv();
    let mut sh = Shared {
        program,
        sources,
        layout,
        locations: Vec::new(),
        loc_map: HashMap::new(),
        formats: Vec::new(),
        format_map: HashMap::new(),
        diags: Vec::new(),
        call_conv,
        frontend: isa.frontend_config(),
    };
    let mut fctx = FunctionBuilderContext::new();
    let mut functions = Vec::new();
    for (i, f) in program.functions.iter().enumerate() {
        let (func, _) = sh.gen_function(&mut fctx, Body::Function(i as u32, f));
        functions.push(TFunc { name: format!("function {}", f.name), func, full_ctx: true });
    }
    let mut probes = Vec::new();
    // Probes whose bodies are the same (one `probe a, b, c { ... }` over
    // many points, a wildcard) share one compiled handler: the handler
    // reads which probe it serves from its context.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, p) in program.probes.iter().enumerate() {
        let in_tracer =
            p.points.iter().all(|pt| matches!(pt, Point::Begin { .. } | Point::End { .. } | Point::Error { .. }));
        let key = format!("{:?}|{:?}|{:?}|{}", p.locals, p.body, p.condition, in_tracer);
        if let Some(&j) = seen.get(&key) {
            probes.push(probes[j]);
            continue;
        }
        seen.insert(key, i);
        let idx = functions.len();
        let (func, full_ctx) = sh.gen_function(&mut fctx, Body::Probe(i as u32, p));
        functions.push(TFunc { name: format!("probe {} ({})", i, p.written), func, full_ctx });
        let entries = collect_entries(p);
        let entry = if entries.is_empty() {
            None
        } else {
            let idx = functions.len();
            let (func, size, full_ctx) = sh.gen_entry_handler(&mut fctx, i as u32, p, &entries);
            functions.push(TFunc { name: format!("probe {} entry", i), func, full_ctx });
            Some((idx, size))
        };
        probes.push((idx, entry));
    }
    if sh.diags.iter().any(|d| d.severity == crate::diag::Severity::Error) {
        return Err(sh.diags);
    }
    Ok(Translated {
        functions,
        layout: sh.layout,
        locations: sh.locations,
        formats: sh.formats,
        probes,
        display: Vec::new(),
    })
}

enum Body<'p> {
    Function(u32, &'p Function),
    Probe(u32, &'p Probe),
}

#[derive(Clone, Copy)]
enum LocalStore {
    Long(Variable),
    Str(ir::StackSlot),
}

/// Bytes a probe's `@entry(...)` values take in its save area.
pub fn entry_save_size(p: &Probe, cap: u32) -> u32 {
    collect_entries(p).iter().map(|e| if e.ty == Ty::String { cap } else { 8 }).sum()
}

/// The `@entry(...)` expressions of a probe, in order of appearance.
fn collect_entries(p: &Probe) -> Vec<&Expr> {
    let mut out = Vec::new();
    for s in &p.body {
        visit_stmt(s, &mut |e| {
            if let ExprKind::Entry(inner) = &e.kind {
                out.push(&**inner);
                false
            } else {
                true
            }
        });
    }
    out
}

/// Calls `f` on every expression, outermost first; `f` returns whether to
/// descend into the expression's children.
pub fn visit_stmt<'e>(s: &'e Stmt, f: &mut dyn FnMut(&'e Expr) -> bool) {
    match &s.kind {
        StmtKind::Expr(e) => visit_expr(e, f),
        StmtKind::Block(b) => b.iter().for_each(|s| visit_stmt(s, f)),
        StmtKind::If { cond, then, els } => {
            visit_expr(cond, f);
            visit_stmt(then, f);
            if let Some(e) = els {
                visit_stmt(e, f);
            }
        }
        StmtKind::While { cond, body } => {
            visit_expr(cond, f);
            visit_stmt(body, f);
        }
        StmtKind::For { init, cond, step, body } => {
            for e in [init, cond, step].into_iter().flatten() {
                visit_expr(e, f);
            }
            visit_stmt(body, f);
        }
        StmtKind::Foreach { limit, body, .. } => {
            if let Some(l) = limit {
                visit_expr(l, f);
            }
            visit_stmt(body, f);
        }
        StmtKind::Return(Some(e)) => visit_expr(e, f),
        StmtKind::DeleteElement { keys, .. } => keys.iter().for_each(|k| visit_expr(k, f)),
        StmtKind::Try { body, handler, .. } => {
            body.iter().for_each(|s| visit_stmt(s, f));
            handler.iter().for_each(|s| visit_stmt(s, f));
        }
        _ => {}
    }
}

pub fn visit_expr<'e>(e: &'e Expr, f: &mut dyn FnMut(&'e Expr) -> bool) {
    if !f(e) {
        return;
    }
    match &e.kind {
        ExprKind::Index { keys, .. } | ExprKind::In { keys, .. } => keys.iter().for_each(|k| visit_expr(k, f)),
        ExprKind::Call { args, .. } | ExprKind::Builtin { args, .. } => args.iter().for_each(|a| visit_expr(a, f)),
        ExprKind::Unary { operand, .. } => visit_expr(operand, f),
        ExprKind::Binary { lhs, rhs, .. } => {
            visit_expr(lhs, f);
            visit_expr(rhs, f);
        }
        ExprKind::Assign { target, value, .. } => {
            visit_expr(target, f);
            visit_expr(value, f);
        }
        ExprKind::IncDec { target, .. } => visit_expr(target, f),
        ExprKind::Ternary { cond, then, els } => {
            visit_expr(cond, f);
            visit_expr(then, f);
            visit_expr(els, f);
        }
        ExprKind::Entry(x) => visit_expr(x, f),
        ExprKind::Aggregate { stat, .. } | ExprKind::HistLog { stat } | ExprKind::HistLinear { stat, .. } => {
            visit_expr(stat, f)
        }
        _ => {}
    }
}

/// Calls `f` on each expression directly in `s` (and its nested
/// statements); `f` descends itself, with [`children_mut`].
pub fn stmt_exprs_mut(s: &mut Stmt, f: &mut dyn FnMut(&mut Expr)) {
    match &mut s.kind {
        StmtKind::Expr(e) | StmtKind::Return(Some(e)) => f(e),
        StmtKind::Block(b) => b.iter_mut().for_each(|s| stmt_exprs_mut(s, f)),
        StmtKind::If { cond, then, els } => {
            f(cond);
            stmt_exprs_mut(then, f);
            if let Some(e) = els {
                stmt_exprs_mut(e, f);
            }
        }
        StmtKind::While { cond, body } => {
            f(cond);
            stmt_exprs_mut(body, f);
        }
        StmtKind::For { init, cond, step, body } => {
            for e in [init, cond, step].into_iter().flatten() {
                f(e);
            }
            stmt_exprs_mut(body, f);
        }
        StmtKind::Foreach { limit, body, .. } => {
            if let Some(l) = limit {
                f(l);
            }
            stmt_exprs_mut(body, f);
        }
        StmtKind::DeleteElement { keys, .. } => keys.iter_mut().for_each(f),
        StmtKind::Try { body, handler, .. } => {
            body.iter_mut().chain(handler.iter_mut()).for_each(|s| stmt_exprs_mut(s, f));
        }
        _ => {}
    }
}

/// Calls `f` on each direct operand of `e`.
pub fn children_mut(e: &mut Expr, f: &mut dyn FnMut(&mut Expr)) {
    match &mut e.kind {
        ExprKind::Index { keys, .. } | ExprKind::In { keys, .. } => keys.iter_mut().for_each(f),
        ExprKind::Call { args, .. } | ExprKind::Builtin { args, .. } => args.iter_mut().for_each(f),
        ExprKind::Unary { operand: x, .. }
        | ExprKind::IncDec { target: x, .. }
        | ExprKind::Entry(x)
        | ExprKind::Aggregate { stat: x, .. }
        | ExprKind::HistLog { stat: x }
        | ExprKind::HistLinear { stat: x, .. } => f(x),
        ExprKind::Binary { lhs: a, rhs: b, .. } | ExprKind::Assign { target: a, value: b, .. } => {
            f(a);
            f(b);
        }
        ExprKind::Ternary { cond, then, els } => {
            f(cond);
            f(then);
            f(els);
        }
        _ => {}
    }
}

/// The histograms each statistic global needs, from its `@hist_*` uses.
pub fn collect_hists(program: &Program) -> HashMap<u32, Vec<HistKey>> {
    let mut out: HashMap<u32, Vec<HistKey>> = HashMap::new();
    let mut add = |e: &Expr| {
        let (stat, key) = match &e.kind {
            ExprKind::HistLog { stat } => (stat, HistKey::Log),
            ExprKind::HistLinear { stat, lo, hi, step } => (stat, HistKey::Linear { lo: *lo, hi: *hi, step: *step }),
            _ => return true,
        };
        let g = match &stat.kind {
            ExprKind::Global(g) | ExprKind::Index { array: g, .. } => g.0,
            _ => return true,
        };
        let v = out.entry(g).or_default();
        if !v.contains(&key) {
            v.push(key);
        }
        true
    };
    let bodies = program.functions.iter().map(|f| &f.body).chain(program.probes.iter().map(|p| &p.body));
    for body in bodies {
        for s in body {
            visit_stmt(s, &mut add);
        }
    }
    out
}

impl<'a> Shared<'a> {
    fn loc(&mut self, span: Span) -> u32 {
        if let Some(&l) = self.loc_map.get(&span) {
            return l;
        }
        let file = self.sources.get(span.file);
        let (line, col) = file.line_col(span.start as usize);
        self.locations.push(telco_abi::artifact::Location {
            file: file.name.clone(),
            line: line as u32,
            col: col as u32,
        });
        let id = (self.locations.len() - 1) as u32;
        self.loc_map.insert(span, id);
        id
    }

    /// A format's id; its encoding goes to the constants.
    fn format(&mut self, pieces: &[Piece]) -> (u32, u64) {
        let enc = fmt::encode(pieces);
        if let Some(&id) = self.format_map.get(&enc) {
            return (id, self.formats[id as usize].0);
        }
        let off = self.layout.constant(&enc);
        let id = self.formats.len() as u32;
        self.formats.push((off, fmt::argument_kinds(pieces)));
        self.format_map.insert(enc, id);
        (id, off)
    }

    fn signature(&self, params: usize, ret: bool) -> ir::Signature {
        let mut sig = ir::Signature::new(self.call_conv);
        for _ in 0..params {
            sig.params.push(AbiParam::new(I64));
        }
        if ret {
            sig.returns.push(AbiParam::new(I64));
        }
        sig
    }

    fn func_signature(&self, f: &Function) -> ir::Signature {
        let extra = usize::from(f.ret == Ty::String);
        self.signature(2 + f.params as usize + extra, true)
    }

    /// The function, and whether it needs a full context (`TFunc::full_ctx`).
    fn gen_function(&mut self, fctx: &mut FunctionBuilderContext, body: Body) -> (ir::Function, bool) {
        let (sig, name) = match &body {
            Body::Function(i, f) => (self.func_signature(f), UserFuncName::user(NS_FUNC, *i)),
            Body::Probe(i, _) => (self.signature(2, false), UserFuncName::user(2, *i)),
        };
        let mut func = ir::Function::with_name_signature(name, sig);
        let full_ctx;
        {
            let b = FunctionBuilder::new(&mut func, fctx);
            let mut g = Gen::new(self, b, &body);
            g.body(&body);
            full_ctx = g.ctx_escapes;
            let fc = g.sh.frontend;
            g.b.finalize(fc);
        }
        (func, full_ctx)
    }

    fn gen_entry_handler(
        &mut self,
        fctx: &mut FunctionBuilderContext,
        i: u32,
        p: &Probe,
        entries: &[&Expr],
    ) -> (ir::Function, u32, bool) {
        let mut func = ir::Function::with_name_signature(UserFuncName::user(3, i), self.signature(2, false));
        let mut size = 0;
        let full_ctx;
        {
            let b = FunctionBuilder::new(&mut func, fctx);
            let body = Body::Probe(i, p);
            let mut g = Gen::new(self, b, &body);
            g.at_entry = true;
            g.prologue(&body);
            let base = g.load(g.ctx, abi_off_entry());
            let cap = i64::from(g.cap);
            for e in entries {
                let v = g.expr(e);
                match e.ty {
                    Ty::String => {
                        let dst = g.b.ins().iadd_imm_s(base, i64::from(size));
                        let c = cap_v(&mut g, cap);
                        g.rt(Rt::Strcpy, &[dst, v, c]);
                        size += g.cap;
                    }
                    _ => {
                        g.b.ins().store(flags(), v, base, size as i32);
                        size += 8;
                    }
                }
            }
            let exit = g.exit;
            g.b.ins().jump(exit, &[]);
            g.epilogue(&body);
            full_ctx = g.ctx_escapes;
            let fc = g.sh.frontend;
            g.b.finalize(fc);
        }
        (func, size, full_ctx)
    }
}

fn cap_v(g: &mut Gen, cap: i64) -> Value {
    g.b.ins().iconst(I64, cap)
}

fn abi_off_entry() -> i32 {
    core::mem::offset_of!(abi::Ctx, entry) as i32
}

struct Gen<'s, 'a, 'b> {
    sh: &'s mut Shared<'a>,
    b: FunctionBuilder<'b>,
    region: Value,
    ctx: Value,
    cap: u32,
    locals: Vec<LocalStore>,
    loops: Vec<(Block, Block)>,
    error_target: Block,
    exit: Block,
    ret_var: Variable,
    ret_buf: Option<Value>,
    params: Vec<Value>,
    rt_refs: HashMap<Rt, FuncRef>,
    fn_refs: HashMap<u32, FuncRef>,
    /// Index of the next `@entry` value in the return handler's save area.
    entry_next: u32,
    entry_sizes: Vec<u32>,
    is_probe: bool,
    interruptible: bool,
    /// Translating an entry handler: `@entry(x)` (also the implicit one
    /// around `$argN` in return probes) is simply `x` here.
    at_entry: bool,
    /// A probe handler's setup block (after the enabled check), filled
    /// last with only what the body turned out to use, and where the body
    /// starts.
    setup: Option<(Block, Block)>,
    /// The body cannot reach MAXACTION (no loops, no calls, fewer
    /// statements than the limit): it is not charged per statement.
    static_actions: bool,
    uses_actions: bool,
    may_error: bool,
    calls_functions: bool,
    /// See `TFunc::full_ctx`.
    ctx_escapes: bool,
}

/// An upper bound of the actions a probe body charges, when it has no
/// loops and calls no script function (None otherwise).
fn static_action_bound(p: &Probe) -> Option<u64> {
    /// Whether what `visit` walks calls a script function.
    fn calls<'e>(visit: impl FnOnce(&mut dyn FnMut(&'e Expr) -> bool)) -> bool {
        let mut calls = false;
        visit(&mut |e| {
            calls |= matches!(e.kind, ExprKind::Call { .. });
            !calls
        });
        calls
    }
    fn stmt(s: &Stmt) -> Option<u64> {
        if calls(|f| visit_stmt(s, f)) {
            return None;
        }
        Some(match &s.kind {
            StmtKind::While { .. } | StmtKind::For { .. } | StmtKind::Foreach { .. } => return None,
            StmtKind::Block(b) => b.iter().map(stmt).sum::<Option<u64>>()?,
            StmtKind::If { then, els, .. } => 1 + stmt(then)? + els.as_deref().map_or(Some(0), stmt)?,
            StmtKind::Try { body, handler, .. } => {
                2 + body.iter().map(stmt).sum::<Option<u64>>()? + handler.iter().map(stmt).sum::<Option<u64>>()?
            }
            _ => 1,
        })
    }
    if p.condition.as_ref().is_some_and(|c| calls(|f| visit_expr(c, f))) {
        return None;
    }
    p.body.iter().map(stmt).sum()
}

impl<'s, 'a, 'b> Gen<'s, 'a, 'b> {
    fn new(sh: &'s mut Shared<'a>, mut b: FunctionBuilder<'b>, body: &Body) -> Self {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let params: Vec<Value> = b.block_params(entry).to_vec();
        let exit = b.create_block();
        let ret_var = b.declare_var(I64);
        let zero = b.ins().iconst(I64, 0);
        b.def_var(ret_var, zero);
        let cap = sh.layout.limits.maxstringlen;
        let (is_probe, interruptible, ret_buf) = match body {
            Body::Probe(_, p) => (
                true,
                p.points.iter().all(|pt| matches!(pt, Point::Begin { .. } | Point::End { .. } | Point::Error { .. })),
                None,
            ),
            Body::Function(_, f) => (false, false, (f.ret == Ty::String).then(|| params[params.len() - 1])),
        };
        let entry_sizes = match body {
            Body::Probe(_, p) => collect_entries(p).iter().map(|e| if e.ty == Ty::String { cap } else { 8 }).collect(),
            _ => Vec::new(),
        };
        let static_actions = match body {
            Body::Probe(_, p) => {
                let limit =
                    if interruptible { sh.layout.limits.maxaction_interruptible } else { sh.layout.limits.maxaction };
                static_action_bound(p).is_some_and(|n| (n as i64) < limit)
            }
            Body::Function(..) => false,
        };
        Gen {
            region: params[0],
            ctx: params[1],
            sh,
            b,
            cap,
            locals: Vec::new(),
            loops: Vec::new(),
            error_target: exit,
            exit,
            ret_var,
            ret_buf,
            params,
            rt_refs: HashMap::new(),
            fn_refs: HashMap::new(),
            entry_next: 0,
            entry_sizes,
            is_probe,
            interruptible,
            at_entry: false,
            setup: None,
            static_actions,
            uses_actions: false,
            may_error: false,
            calls_functions: false,
            ctx_escapes: false,
        }
    }

    // ---- small helpers ----

    fn iconst(&mut self, v: i64) -> Value {
        self.b.ins().iconst(I64, v)
    }

    fn load(&mut self, base: Value, off: i32) -> Value {
        self.b.ins().load(I64, flags(), base, off)
    }

    fn load32(&mut self, base: Value, off: i32) -> Value {
        let v = self.b.ins().load(types::I32, flags(), base, off);
        self.b.ins().uextend(I64, v)
    }

    fn store32(&mut self, v: i64, base: Value, off: i32) {
        let c = self.b.ins().iconst(types::I32, v);
        self.b.ins().store(flags(), c, base, off);
    }

    fn region_addr(&mut self, off: u64) -> Value {
        self.b.ins().iadd_imm_s(self.region, off as i64)
    }

    /// The low bits of `v` as a C integer of type `ty`, back to a long:
    /// sign-extended (`signed`) or zero-extended.
    fn low_bits(&mut self, v: Value, ty: types::Type, signed: bool) -> Value {
        let low = self.b.ins().ireduce(ty, v);
        if signed {
            self.b.ins().sextend(types::I64, low)
        } else {
            self.b.ins().uextend(types::I64, low)
        }
    }

    fn bool_to_long(&mut self, c: Value) -> Value {
        self.b.ins().uextend(I64, c)
    }

    fn temp(&mut self) -> Value {
        let ss = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, self.cap, 3));
        let p = self.b.ins().stack_addr(I64, ss, 0);
        let z = self.b.ins().iconst(types::I8, 0);
        self.b.ins().store(flags(), z, p, 0);
        p
    }

    fn buffer(&mut self, bytes: u32) -> Value {
        let ss = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes.max(8), 3));
        self.b.ins().stack_addr(I64, ss, 0)
    }

    fn rt_ref(&mut self, f: Rt) -> FuncRef {
        if let Some(&r) = self.rt_refs.get(&f) {
            return r;
        }
        let (n, ret) = f.signature();
        let sig = self.sh.signature(n, ret);
        let sref = self.b.import_signature(sig);
        let name = self.b.func.declare_imported_user_function(UserExternalName::new(NS_RT, f as u32));
        let r = self.b.import_function(ir::ExtFuncData {
            name: ir::ExternalName::user(name),
            signature: sref,
            colocated: true,
            patchable: false,
        });
        self.rt_refs.insert(f, r);
        r
    }

    /// Call a runtime function; its result (0 when it has none).
    fn rt(&mut self, f: Rt, args: &[Value]) -> Value {
        if args.contains(&self.ctx) {
            // It may read any context field, and report an error there.
            self.ctx_escapes = true;
            self.may_error = true;
        }
        let r = self.rt_ref(f);
        let call = self.b.ins().call(r, args);
        match self.b.inst_results(call).first() {
            Some(&v) => v,
            None => self.b.ins().iconst(I64, 0),
        }
    }

    fn cap_val(&mut self) -> Value {
        self.iconst(i64::from(self.cap))
    }

    /// Continue in a new block after an unconditional jump (any code the
    /// source has after a `break` is unreachable but must still be built).
    fn fresh_block(&mut self) {
        let b = self.b.create_block();
        self.b.switch_to_block(b);
        self.b.seal_block(b);
    }

    fn set_error(&mut self, code: u32, span: Span) {
        self.may_error = true;
        let loc = self.sh.loc(span);
        self.store32(i64::from(code), self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
        self.store32(i64::from(loc), self.ctx, core::mem::offset_of!(abi::Ctx, error_loc) as i32);
    }

    /// If `cond` (an i8 truth value) holds: raise `code` at `span`.
    fn raise_if(&mut self, cond: Value, code: u32, span: Span) {
        let err = self.b.create_block();
        let cont = self.b.create_block();
        self.b.set_cold_block(err);
        self.b.ins().brif(cond, err, &[], cont, &[]);
        self.b.switch_to_block(err);
        self.b.seal_block(err);
        self.set_error(code, span);
        let target = if code == abi::ERR_MAXACTION { self.exit } else { self.error_target };
        self.b.ins().jump(target, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
    }

    /// After a call that can fail: leave if the context holds an error.
    fn check_error(&mut self) {
        self.may_error = true;
        let e = self.b.ins().load(types::I32, flags(), self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
        let cont = self.b.create_block();
        let target = self.error_target;
        self.b.ins().brif(e, target, &[], cont, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
    }

    /// One action of the MAXACTION budget.
    fn charge(&mut self, span: Span) {
        if self.static_actions {
            return;
        }
        self.uses_actions = true;
        let off = core::mem::offset_of!(abi::Ctx, actions) as i32;
        let a = self.load(self.ctx, off);
        let a = self.b.ins().iadd_imm_s(a, -1);
        self.b.ins().store(flags(), a, self.ctx, off);
        let c = self.b.ins().icmp_imm_s(IntCC::SignedLessThanOrEqual, a, 0);
        self.raise_if(c, abi::ERR_MAXACTION, span);
    }

    // ---- function structure ----

    fn prologue(&mut self, body: &Body) {
        let (locals, span) = match body {
            Body::Function(_, f) => (&f.locals, f.span),
            Body::Probe(_, p) => (&p.locals, p.span),
        };
        if self.is_probe {
            // A disabled session runs no handler.
            let en =
                self.b.ins().load(types::I32, flags(), self.region, core::mem::offset_of!(abi::Header, enabled) as i32);
            let run = self.b.create_block();
            let leave = self.b.create_block();
            self.b.ins().brif(en, run, &[], leave, &[]);
            self.b.switch_to_block(leave);
            self.b.seal_block(leave);
            self.b.ins().return_(&[]);
            self.b.switch_to_block(run);
            self.b.seal_block(run);
            // `run` stays empty until the body is built (`finish_setup`).
            let start = self.b.create_block();
            self.setup = Some((run, start));
            self.b.switch_to_block(start);
        } else {
            // MAXNESTING: checked on entry to every script function.
            let off = core::mem::offset_of!(abi::Ctx, nesting) as i32;
            let n = self.load32(self.ctx, off);
            let max = i64::from(self.sh.layout.limits.maxnesting);
            let too_deep = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, n, max);
            let err = self.b.create_block();
            let ok = self.b.create_block();
            self.b.set_cold_block(err);
            self.b.ins().brif(too_deep, err, &[], ok, &[]);
            self.b.switch_to_block(err);
            self.b.seal_block(err);
            self.set_error(abi::ERR_NESTING, span);
            let z = self.iconst(0);
            self.b.ins().return_(&[z]);
            self.b.switch_to_block(ok);
            self.b.seal_block(ok);
            let n1 = self.b.ins().iadd_imm_s(n, 1);
            let n1 = self.b.ins().ireduce(types::I32, n1);
            self.b.ins().store(flags(), n1, self.ctx, off);
        }
        for (i, l) in locals.iter().enumerate() {
            let store = match l.ty {
                Ty::String => {
                    let ss =
                        self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, self.cap, 3));
                    let p = self.b.ins().stack_addr(I64, ss, 0);
                    if let (Body::Function(_, f), true) = (body, (i as u32) < self.param_count(body)) {
                        let _ = f;
                        let src = self.params[2 + i];
                        let cap = self.cap_val();
                        self.rt(Rt::Strcpy, &[p, src, cap]);
                    } else {
                        let z = self.b.ins().iconst(types::I8, 0);
                        self.b.ins().store(flags(), z, p, 0);
                    }
                    LocalStore::Str(ss)
                }
                _ => {
                    let v = self.b.declare_var(I64);
                    let init = if (i as u32) < self.param_count(body) { self.params[2 + i] } else { self.iconst(0) };
                    self.b.def_var(v, init);
                    LocalStore::Long(v)
                }
            };
            self.locals.push(store);
        }
    }

    fn param_count(&self, body: &Body) -> u32 {
        match body {
            Body::Function(_, f) => f.params,
            Body::Probe(..) => 0,
        }
    }

    /// Fill a probe handler's setup block: the context fields the body
    /// uses (MAXACTION budget, pending error, nesting), no more.
    fn finish_setup(&mut self) {
        let Some((run, start)) = self.setup.take() else { return };
        self.b.switch_to_block(run);
        if self.uses_actions {
            let limit = if self.interruptible {
                self.sh.layout.limits.maxaction_interruptible
            } else {
                self.sh.layout.limits.maxaction
            };
            let l = self.iconst(limit);
            self.b.ins().store(flags(), l, self.ctx, core::mem::offset_of!(abi::Ctx, actions) as i32);
        }
        if self.may_error {
            self.store32(0, self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
        }
        if self.calls_functions {
            self.store32(0, self.ctx, core::mem::offset_of!(abi::Ctx, nesting) as i32);
        }
        self.b.ins().jump(start, &[]);
        self.b.seal_block(start);
    }

    fn epilogue(&mut self, body: &Body) {
        let exit = self.exit;
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        match body {
            Body::Probe(..) if !self.may_error => {
                self.b.ins().return_(&[]);
                self.finish_setup();
            }
            Body::Probe(..) => {
                let e = self.b.ins().load(types::I32, flags(), self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
                let report = self.b.create_block();
                let done = self.b.create_block();
                self.b.set_cold_block(report);
                self.b.ins().brif(e, report, &[], done, &[]);
                self.b.switch_to_block(report);
                self.b.seal_block(report);
                self.rt(Rt::Report, &[self.region, self.ctx]);
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
                self.b.seal_block(done);
                self.b.ins().return_(&[]);
                self.finish_setup();
            }
            Body::Function(..) => {
                let off = core::mem::offset_of!(abi::Ctx, nesting) as i32;
                let n = self.b.ins().load(types::I32, flags(), self.ctx, off);
                let n = self.b.ins().iadd_imm_s(n, -1);
                self.b.ins().store(flags(), n, self.ctx, off);
                let r = self.b.use_var(self.ret_var);
                self.b.ins().return_(&[r]);
            }
        }
    }

    fn body(&mut self, body: &Body) {
        self.prologue(body);
        match body {
            Body::Probe(_, p) => {
                if let Some(c) = &p.condition {
                    let v = self.expr(c);
                    let run = self.b.create_block();
                    let exit = self.exit;
                    self.b.ins().brif(v, run, &[], exit, &[]);
                    self.b.switch_to_block(run);
                    self.b.seal_block(run);
                }
                for s in &p.body {
                    self.stmt(s);
                }
            }
            Body::Function(_, f) => {
                for s in &f.body {
                    self.stmt(s);
                }
            }
        }
        let exit = self.exit;
        self.b.ins().jump(exit, &[]);
        self.epilogue(body);
    }

    // ---- statements ----

    fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Expr(e) => {
                self.charge(s.span);
                if !self.shard_update(e) {
                    self.expr(e);
                }
            }
            StmtKind::Block(b) => {
                for s in b {
                    self.stmt(s);
                }
            }
            StmtKind::If { cond, then, els } => {
                self.charge(s.span);
                let c = self.expr(cond);
                let tb = self.b.create_block();
                let eb = self.b.create_block();
                let done = self.b.create_block();
                self.b.ins().brif(c, tb, &[], eb, &[]);
                self.b.switch_to_block(tb);
                self.b.seal_block(tb);
                self.stmt(then);
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(eb);
                self.b.seal_block(eb);
                if let Some(e) = els {
                    self.stmt(e);
                }
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
                self.b.seal_block(done);
            }
            StmtKind::While { cond, body } => self.gen_loop(None, Some(cond), None, body, s.span),
            StmtKind::For { init, cond, step, body } => {
                self.gen_loop(init.as_ref(), cond.as_ref(), step.as_ref(), body, s.span)
            }
            StmtKind::Foreach { array, keys, value, sort, limit, body } => {
                self.gen_foreach(*array, keys, *value, *sort, limit.as_ref(), body, s.span)
            }
            StmtKind::Break | StmtKind::Continue => {
                self.charge(s.span);
                if let Some(&(brk, cont)) = self.loops.last() {
                    let t = if matches!(s.kind, StmtKind::Break) { brk } else { cont };
                    self.b.ins().jump(t, &[]);
                    self.fresh_block();
                }
            }
            StmtKind::Next => {
                self.charge(s.span);
                let exit = self.exit;
                self.b.ins().jump(exit, &[]);
                self.fresh_block();
            }
            StmtKind::Return(e) => {
                self.charge(s.span);
                if let Some(e) = e {
                    let v = self.expr(e);
                    if e.ty == Ty::String {
                        if let Some(buf) = self.ret_buf {
                            let cap = self.cap_val();
                            self.rt(Rt::Strcpy, &[buf, v, cap]);
                        }
                    } else if e.ty == Ty::Long {
                        self.b.def_var(self.ret_var, v);
                    }
                }
                let exit = self.exit;
                self.b.ins().jump(exit, &[]);
                self.fresh_block();
            }
            StmtKind::DeleteLocal(l) => {
                self.charge(s.span);
                match self.locals[l.0 as usize] {
                    LocalStore::Long(v) => {
                        let z = self.iconst(0);
                        self.b.def_var(v, z);
                    }
                    LocalStore::Str(ss) => {
                        let p = self.b.ins().stack_addr(I64, ss, 0);
                        let z = self.b.ins().iconst(types::I8, 0);
                        self.b.ins().store(flags(), z, p, 0);
                    }
                }
            }
            StmtKind::DeleteGlobal(g) => {
                self.charge(s.span);
                match self.sh.layout.globals[g.0 as usize].clone() {
                    Slot::Long { off } if self.sh.layout.shards.contains_key(&g.0) => {
                        let k = self.sh.layout.shards[&g.0];
                        let o = self.iconst(off as i64);
                        let kv = self.iconst(i64::from(k));
                        let z = self.iconst(0);
                        self.rt(Rt::ShardSet, &[self.region, o, kv, z]);
                    }
                    Slot::Long { off } => {
                        let z = self.iconst(0);
                        self.b.ins().store(flags(), z, self.region, off as i32);
                    }
                    Slot::Str { off } => {
                        let p = self.region_addr(off);
                        let e = self.region_addr(self.sh.layout.zero_off);
                        let cap = self.cap_val();
                        self.rt(Rt::GstrStore, &[p, e, cap]);
                    }
                    Slot::Stat { off, desc, .. } => {
                        let p = self.region_addr(off);
                        let d = self.region_addr(desc);
                        match self.sh.layout.stat_shards.get(&g.0).copied() {
                            Some(col) => {
                                let shards = self.iconst((self.sh.layout.stat_shards_off + u64::from(col)) as i64);
                                let row = self.iconst(i64::from(self.sh.layout.stat_row));
                                self.rt(Rt::StatClearAll, &[self.region, p, shards, row, d]);
                            }
                            None => {
                                self.rt(Rt::StatClear, &[p, d]);
                            }
                        }
                    }
                    Slot::Table(t) => {
                        let p = self.region_addr(t.off);
                        self.rt(Rt::MapClear, &[p]);
                    }
                }
            }
            StmtKind::DeleteElement { array, keys } => {
                self.charge(s.span);
                let (tab, kb) = self.keys(*array, keys);
                self.rt(Rt::MapDelete, &[tab, kb]);
            }
            StmtKind::Try { body, var, handler } => {
                self.may_error = true;
                let catch = self.b.create_block();
                let done = self.b.create_block();
                let outer = std::mem::replace(&mut self.error_target, catch);
                for s in body {
                    self.stmt(s);
                }
                self.error_target = outer;
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(catch);
                self.b.seal_block(catch);
                // MAXACTION cannot be caught.
                let e = self.load32(self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
                let fatal = self.b.ins().icmp_imm_s(IntCC::Equal, e, i64::from(abi::ERR_MAXACTION));
                let handle = self.b.create_block();
                let exit = self.exit;
                self.b.ins().brif(fatal, exit, &[], handle, &[]);
                self.b.switch_to_block(handle);
                self.b.seal_block(handle);
                if let Some(v) = var {
                    if let LocalStore::Str(ss) = self.locals[v.0 as usize] {
                        let p = self.b.ins().stack_addr(I64, ss, 0);
                        let cap = self.cap_val();
                        self.rt(Rt::ErrorMessage, &[p, self.ctx, cap]);
                    }
                }
                self.store32(0, self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
                self.charge(s.span);
                for s in handler {
                    self.stmt(s);
                }
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
                self.b.seal_block(done);
            }
        }
    }

    fn gen_loop(&mut self, init: Option<&Expr>, cond: Option<&Expr>, step: Option<&Expr>, body: &Stmt, span: Span) {
        if let Some(i) = init {
            self.charge(span);
            self.expr(i);
        }
        let head = self.b.create_block();
        let body_b = self.b.create_block();
        let step_b = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        // SystemTap charges an iteration to the loop body's statement.
        self.charge(body.span);
        match cond {
            Some(c) => {
                let v = self.expr(c);
                self.b.ins().brif(v, body_b, &[], done, &[]);
            }
            None => {
                self.b.ins().jump(body_b, &[]);
            }
        }
        self.b.switch_to_block(body_b);
        self.b.seal_block(body_b);
        self.loops.push((done, step_b));
        self.stmt(body);
        self.loops.pop();
        self.b.ins().jump(step_b, &[]);
        self.b.switch_to_block(step_b);
        self.b.seal_block(step_b);
        if let Some(s) = step {
            self.expr(s);
        }
        self.b.ins().jump(head, &[]);
        self.b.seal_block(head);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
    }

    #[allow(clippy::too_many_arguments)]
    fn gen_foreach(
        &mut self,
        array: GlobalId,
        keys: &[LocalId],
        value: Option<LocalId>,
        sort: Option<(SortBy, SortDir)>,
        limit: Option<&Expr>,
        body: &Stmt,
        span: Span,
    ) {
        self.charge(span);
        let Slot::Table(t) = self.sh.layout.globals[array.0 as usize].clone() else {
            return;
        };
        let lim = match limit {
            Some(e) => {
                let v = self.expr(e);
                let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
                let z = self.iconst(0);
                self.b.ins().select(neg, z, v)
            }
            None => self.iconst(-1),
        };
        let (col, desc) = match sort {
            None => (-2, 0),
            Some((SortBy::Key(i), d)) => (i as i64, i64::from(d == SortDir::Desc)),
            Some((SortBy::Value, d)) => (-1, i64::from(d == SortDir::Desc)),
        };
        let tab = self.region_addr(t.off);
        let buf = self.buffer(t.capacity.saturating_mul(4));
        let colv = self.iconst(col);
        let descv = self.iconst(desc);
        let n = self.rt(Rt::MapCollect, &[tab, buf, colv, descv, lim]);
        let idx = self.b.declare_var(I64);
        let z = self.iconst(0);
        self.b.def_var(idx, z);
        let head = self.b.create_block();
        let body_b = self.b.create_block();
        let step_b = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        let i = self.b.use_var(idx);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, i, n);
        let fetch = self.b.create_block();
        self.b.ins().brif(more, fetch, &[], done, &[]);
        self.b.switch_to_block(fetch);
        self.b.seal_block(fetch);
        self.charge(span);
        let i4 = self.b.ins().ishl_imm_u(i, 2);
        let p = self.b.ins().iadd(buf, i4);
        let si = self.b.ins().load(types::I32, flags(), p, 0);
        let si = self.b.ins().uextend(I64, si);
        let slot = self.rt(Rt::MapSlot, &[tab, si]);
        self.b.ins().brif(slot, body_b, &[], step_b, &[]);
        self.b.switch_to_block(body_b);
        self.b.seal_block(body_b);
        for (k, l) in keys.iter().enumerate() {
            let off = t.key_off[k] as i64;
            match self.locals[l.0 as usize] {
                LocalStore::Long(v) => {
                    let x = self.load(slot, off as i32);
                    self.b.def_var(v, x);
                }
                LocalStore::Str(ss) => {
                    let dst = self.b.ins().stack_addr(I64, ss, 0);
                    let src = self.b.ins().iadd_imm_s(slot, off);
                    let cap = self.cap_val();
                    self.rt(Rt::Strcpy, &[dst, src, cap]);
                }
            }
        }
        if let Some(v) = value {
            let vp = self.b.ins().iadd_imm_s(slot, i64::from(t.value_off));
            match self.locals[v.0 as usize] {
                LocalStore::Long(var) => {
                    let x = self.load(vp, 0);
                    self.b.def_var(var, x);
                }
                LocalStore::Str(ss) => {
                    let dst = self.b.ins().stack_addr(I64, ss, 0);
                    let cap = self.cap_val();
                    self.rt(Rt::GstrLoad, &[dst, vp, cap]);
                }
            }
        }
        self.loops.push((done, step_b));
        self.stmt(body);
        self.loops.pop();
        self.b.ins().jump(step_b, &[]);
        self.b.switch_to_block(step_b);
        self.b.seal_block(step_b);
        let i = self.b.use_var(idx);
        let i1 = self.b.ins().iadd_imm_s(i, 1);
        self.b.def_var(idx, i1);
        self.b.ins().jump(head, &[]);
        self.b.seal_block(head);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
    }

    /// A statement-level `g++`, `g--`, `g += e`, `g -= e` on a sharded
    /// counter: a plain add into this thread's row of the shards (in a
    /// target thread), or an atomic add to the counter's word (in the
    /// tracer, where the context has no slot). Returns false when `e` is
    /// not such an update.
    fn shard_update(&mut self, e: &Expr) -> bool {
        let (g, value, negate) = match &e.kind {
            ExprKind::IncDec { op, target, .. } => match target.kind {
                ExprKind::Global(g) => (g, None, *op == IncDec::Dec),
                _ => return false,
            },
            ExprKind::Assign { op: op @ (AssignOp::Add | AssignOp::Sub), target, value } => match target.kind {
                ExprKind::Global(g) => (g, Some(&**value), *op == AssignOp::Sub),
                _ => return false,
            },
            _ => return false,
        };
        let Some(k) = self.sh.layout.shards.get(&g.0).copied() else { return false };
        let Slot::Long { off } = self.sh.layout.globals[g.0 as usize].clone() else { return false };
        let mut d = match value {
            Some(v) => self.expr(v),
            None => self.iconst(1),
        };
        if negate {
            d = self.b.ins().ineg(d);
        }
        let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
        let in_thread = self.b.create_block();
        let in_tracer = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().brif(slot, in_thread, &[], in_tracer, &[]);
        self.b.switch_to_block(in_thread);
        self.b.seal_block(in_thread);
        let row = self.slot_row(slot);
        let row_bytes = 8 * self.sh.layout.shards.len() as i64;
        let row_off = self.b.ins().imul_imm_s(row, row_bytes);
        let base = self.region_addr(self.sh.layout.shards_off + 8 * u64::from(k));
        let addr = self.b.ins().iadd(base, row_off);
        let old = self.load(addr, 0);
        let new = self.b.ins().iadd(old, d);
        self.b.ins().store(flags(), new, addr, 0);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(in_tracer);
        self.b.seal_block(in_tracer);
        let p = self.region_addr(off);
        self.b.ins().atomic_rmw(I64, flags(), AtomicRmwOp::Add, p, d);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
        true
    }

    /// A thread slot's index: (slot - threads) / sizeof(ThreadSlot).
    /// `rt_stat_add_local` inline, for a thread's own copy at `p` of a
    /// statistic whose histograms are all logarithmic: plain adds, the
    /// extremes by select, each bucket from a count of leading zeros.
    fn stat_add_inline(&mut self, p: Value, v: Value, hists: &[HistKey]) {
        use abi::Stat;
        let add = |t: &mut Self, field: usize, by: Value| {
            let old = t.b.ins().load(I64, flags(), p, field as i32);
            let new = t.b.ins().iadd(old, by);
            t.b.ins().store(flags(), new, p, field as i32);
        };
        let n = self.b.ins().load(I64, flags(), p, core::mem::offset_of!(Stat, count) as i32);
        let n1 = self.b.ins().iadd_imm_s(n, 1);
        self.b.ins().store(flags(), n1, p, core::mem::offset_of!(Stat, count) as i32);
        add(self, core::mem::offset_of!(Stat, sum), v);
        let sq = self.b.ins().imul(v, v);
        add(self, core::mem::offset_of!(Stat, sumsq), sq);
        let first = self.b.ins().icmp_imm_s(IntCC::Equal, n, 0);
        for (field, cc) in [
            (core::mem::offset_of!(Stat, min), IntCC::SignedLessThan),
            (core::mem::offset_of!(Stat, max), IntCC::SignedGreaterThan),
        ] {
            let old = self.b.ins().load(I64, flags(), p, field as i32);
            let better = self.b.ins().icmp(cc, v, old);
            let take = self.b.ins().bor(first, better);
            let new = self.b.ins().select(take, v, old);
            self.b.ins().store(flags(), new, p, field as i32);
        }
        let desc = super::layout::stat_desc(hists);
        for h in desc.hists.iter().take(desc.nhists as usize) {
            // log_bucket (rt.c): B0 + 64 - clz(|v|), mirrored below B0 for
            // negative v (0 -> B0; i64::MIN -> 0).
            let a = self.b.ins().iabs(v);
            let z = self.b.ins().clz(a);
            let top = self.iconst(i64::from(abi::HIST_LOG_BUCKET0) + 64);
            let up = self.b.ins().isub(top, z);
            let nb = self.iconst(i64::from(abi::HIST_LOG_BUCKETS));
            let down = self.b.ins().isub(nb, up);
            let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
            let b = self.b.ins().select(neg, down, up);
            let off = self.b.ins().ishl_imm_u(b, 3);
            let at = self.b.ins().iadd(p, off);
            let c = self.b.ins().load(I64, flags(), at, h.offset as i32);
            let c1 = self.b.ins().iadd_imm_s(c, 1);
            self.b.ins().store(flags(), c1, at, h.offset as i32);
        }
    }

    fn slot_row(&mut self, slot: Value) -> Value {
        let index = self.b.ins().load(types::I32, flags(), slot, core::mem::offset_of!(abi::ThreadSlot, index) as i32);
        self.b.ins().uextend(types::I64, index)
    }

    /// Evaluate an array's keys into a key buffer: (table address, buffer).
    fn keys(&mut self, array: GlobalId, keys: &[Expr]) -> (Value, Value) {
        let vals: Vec<Value> = keys.iter().map(|k| self.expr(k)).collect();
        let buf = self.buffer(8 * vals.len() as u32);
        for (i, v) in vals.into_iter().enumerate() {
            self.b.ins().store(flags(), v, buf, 8 * i as i32);
        }
        let off = match &self.sh.layout.globals[array.0 as usize] {
            Slot::Table(t) => t.off,
            _ => 0,
        };
        (self.region_addr(off), buf)
    }

    /// The value address of an array element, created when absent (an
    /// overflow raises the error).
    fn element_for_write(&mut self, array: GlobalId, keys: &[Expr], span: Span) -> Value {
        let (tab, kb) = self.keys(array, keys);
        let one = self.iconst(1);
        let p = self.rt(Rt::MapFind, &[tab, kb, one]);
        let full = self.b.ins().icmp_imm_s(IntCC::Equal, p, 1);
        // SystemTap names the limit that was hit.
        let declared = match &self.sh.program.globals[array.0 as usize].kind {
            GlobalKind::Array { capacity: Some(c), .. } => Some(*c),
            _ => None,
        };
        let msg = match declared {
            Some(c) => format!("Array overflow, check size limit ({c})"),
            None => "Array overflow, check MAXMAPENTRIES".to_string(),
        };
        let err = self.b.create_block();
        let cont = self.b.create_block();
        self.b.set_cold_block(err);
        self.b.ins().brif(full, err, &[], cont, &[]);
        self.b.switch_to_block(err);
        self.b.seal_block(err);
        let off = self.sh.layout.string(msg.as_bytes());
        let m = self.region_addr(off);
        let loc = self.sh.loc(span);
        let l = self.iconst(i64::from(loc));
        let cap = self.cap_val();
        self.rt(Rt::UserError, &[self.ctx, m, l, cap]);
        let target = self.error_target;
        self.b.ins().jump(target, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
        p
    }

    /// The value address of an array element for reading, or 0.
    fn element_for_read(&mut self, array: GlobalId, keys: &[Expr]) -> Value {
        let (tab, kb) = self.keys(array, keys);
        let zero = self.iconst(0);
        self.rt(Rt::MapFind, &[tab, kb, zero])
    }

    // ---- expressions ----

    fn expr(&mut self, e: &Expr) -> Value {
        match &e.kind {
            ExprKind::Long(n) => self.iconst(*n),
            ExprKind::String(s) => {
                let off = self.sh.layout.string(s);
                self.region_addr(off)
            }
            ExprKind::Local(l) => match self.locals[l.0 as usize] {
                LocalStore::Long(v) => self.b.use_var(v),
                LocalStore::Str(ss) => self.b.ins().stack_addr(I64, ss, 0),
            },
            ExprKind::Global(g) => match self.sh.layout.globals[g.0 as usize].clone() {
                Slot::Long { off } => match self.sh.layout.shards.get(&g.0).copied() {
                    Some(k) => {
                        let o = self.iconst(off as i64);
                        let kv = self.iconst(i64::from(k));
                        self.rt(Rt::ShardSum, &[self.region, o, kv])
                    }
                    None => self.load(self.region, off as i32),
                },
                Slot::Str { off } => {
                    let t = self.temp();
                    let p = self.region_addr(off);
                    let cap = self.cap_val();
                    self.rt(Rt::GstrLoad, &[t, p, cap]);
                    t
                }
                Slot::Stat { off, desc, hists } => match self.sh.layout.stat_shards.get(&g.0).copied() {
                    Some(col) => {
                        // Merge the per-thread copies into a temporary.
                        let size = super::layout::stat_desc(&hists).size;
                        let tmp = self.buffer(size);
                        let base = self.region_addr(off);
                        let shards = self.iconst((self.sh.layout.stat_shards_off + u64::from(col)) as i64);
                        let row = self.iconst(i64::from(self.sh.layout.stat_row));
                        let d = self.region_addr(desc);
                        self.rt(Rt::StatMerge, &[self.region, tmp, base, shards, row, d]);
                        tmp
                    }
                    None => self.region_addr(off),
                },
                Slot::Table(t) => self.region_addr(t.off),
            },
            ExprKind::Index { array, keys } => {
                let p = self.element_for_read(*array, keys);
                match e.ty {
                    Ty::Stat => p,
                    Ty::String => {
                        let zero = self.region_addr(self.sh.layout.zero_off);
                        let absent = self.b.ins().icmp_imm_s(IntCC::Equal, p, 0);
                        let p = self.b.ins().select(absent, zero, p);
                        let t = self.temp();
                        let cap = self.cap_val();
                        self.rt(Rt::GstrLoad, &[t, p, cap]);
                        t
                    }
                    _ => {
                        let zero = self.region_addr(self.sh.layout.zero_off);
                        let absent = self.b.ins().icmp_imm_s(IntCC::Equal, p, 0);
                        let p = self.b.ins().select(absent, zero, p);
                        self.load(p, 0)
                    }
                }
            }
            ExprKind::Target(t) => {
                let n = match t {
                    Target::Arg(n) => i64::from(*n),
                    Target::Return => 0,
                };
                if n == 0 {
                    let idx = self.iconst(0);
                    self.rt(Rt::Register, &[self.ctx, idx])
                } else {
                    let nv = self.iconst(n);
                    self.rt(Rt::Arg, &[self.region, self.ctx, nv])
                }
            }
            ExprKind::Call { func, args } => self.call(*func, args, e.ty),
            ExprKind::Builtin { func, args } => self.builtin(*func, args, e),
            ExprKind::Unary { op, operand } => {
                let v = self.expr(operand);
                match op {
                    UnOp::Neg => self.b.ins().ineg(v),
                    UnOp::Plus => v,
                    UnOp::Not => {
                        let c = self.b.ins().icmp_imm_s(IntCC::Equal, v, 0);
                        self.bool_to_long(c)
                    }
                    UnOp::BitNot => self.b.ins().bnot(v),
                }
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, e.span),
            ExprKind::Assign { op, target, value } => self.assign(*op, target, value, e.span),
            ExprKind::IncDec { op, prefix, target } => {
                let one = Expr { kind: ExprKind::Long(1), ty: Ty::Long, span: e.span };
                let aop = if *op == IncDec::Inc { AssignOp::Add } else { AssignOp::Sub };
                let new = self.assign(aop, target, &one, e.span);
                if *prefix {
                    new
                } else if *op == IncDec::Inc {
                    self.b.ins().iadd_imm_s(new, -1)
                } else {
                    self.b.ins().iadd_imm_s(new, 1)
                }
            }
            ExprKind::Ternary { cond, then, els } => {
                let c = self.expr(cond);
                let tb = self.b.create_block();
                let eb = self.b.create_block();
                let done = self.b.create_block();
                self.b.append_block_param(done, I64);
                // A string result is copied into one temporary both arms share.
                let shared = (e.ty == Ty::String).then(|| self.temp());
                self.b.ins().brif(c, tb, &[], eb, &[]);
                self.b.switch_to_block(tb);
                self.b.seal_block(tb);
                for (arm, block) in [(then, tb), (els, eb)] {
                    if block == eb {
                        self.b.switch_to_block(eb);
                        self.b.seal_block(eb);
                    }
                    let mut v = self.expr(arm);
                    if let Some(t) = shared {
                        let cap = self.cap_val();
                        self.rt(Rt::Strcpy, &[t, v, cap]);
                        v = t;
                    }
                    self.b.ins().jump(done, &[v.into()]);
                }
                self.b.switch_to_block(done);
                self.b.seal_block(done);
                self.b.block_params(done)[0]
            }
            ExprKind::In { array, keys } => {
                let p = self.element_for_read(*array, keys);
                let c = self.b.ins().icmp_imm_s(IntCC::NotEqual, p, 0);
                self.bool_to_long(c)
            }
            ExprKind::Entry(inner) if self.at_entry => self.expr(inner),
            ExprKind::Entry(inner) => {
                // In the return handler: the value the entry handler saved.
                let k = self.entry_next as usize;
                self.entry_next += 1;
                let off: u32 = self.entry_sizes.iter().take(k).sum();
                let base = self.load(self.ctx, abi_off_entry());
                let none = self.b.ins().icmp_imm_s(IntCC::Equal, base, 0);
                let zero = self.region_addr(self.sh.layout.zero_off);
                let p = self.b.ins().iadd_imm_s(base, i64::from(off));
                let p = self.b.ins().select(none, zero, p);
                if inner.ty == Ty::String {
                    let t = self.temp();
                    let cap = self.cap_val();
                    self.rt(Rt::Strcpy, &[t, p, cap]);
                    t
                } else {
                    self.load(p, 0)
                }
            }
            ExprKind::Aggregate { op, stat } => {
                let p = self.expr(stat);
                let opn = match op {
                    AggOp::Count => 0,
                    AggOp::Sum => 1,
                    AggOp::Min => 2,
                    AggOp::Max => 3,
                    AggOp::Avg => 4,
                    AggOp::Variance => 5,
                };
                let opv = self.iconst(opn);
                let loc = self.sh.loc(e.span);
                let locv = self.iconst(i64::from(loc));
                let v = self.rt(Rt::StatGet, &[self.ctx, p, opv, locv]);
                if opn >= 2 {
                    self.check_error();
                }
                v
            }
            ExprKind::HistLog { .. } | ExprKind::HistLinear { .. } => {
                // Only printable; `print` handles it. Anywhere else it has no value.
                self.iconst(0)
            }
        }
    }

    fn call(&mut self, func: FuncId, args: &[Expr], ty: Ty) -> Value {
        let f = &self.sh.program.functions[func.0 as usize];
        let returns_string = f.ret == Ty::String;
        self.calls_functions = true;
        self.ctx_escapes = true;
        self.may_error = true;
        let mut vals = vec![self.region, self.ctx];
        for a in args {
            let v = self.expr(a);
            vals.push(v);
        }
        let buf = if returns_string {
            let t = self.temp();
            vals.push(t);
            Some(t)
        } else {
            None
        };
        let r = match self.fn_refs.get(&func.0) {
            Some(&r) => r,
            None => {
                let sig = self.sh.func_signature(f);
                let sref = self.b.import_signature(sig);
                let name = self.b.func.declare_imported_user_function(UserExternalName::new(NS_FUNC, func.0));
                let r = self.b.import_function(ir::ExtFuncData {
                    name: ir::ExternalName::user(name),
                    signature: sref,
                    colocated: true,
                    patchable: false,
                });
                self.fn_refs.insert(func.0, r);
                r
            }
        };
        let call = self.b.ins().call(r, &vals);
        let result = self.b.inst_results(call)[0];
        self.check_error();
        match (ty, buf) {
            (Ty::String, Some(t)) => t,
            _ => result,
        }
    }

    fn divide(&mut self, op: BinOp, l: Value, r: Value, span: Span) -> Value {
        let zero = self.b.ins().icmp_imm_s(IntCC::Equal, r, 0);
        self.raise_if(zero, abi::ERR_DIV0, span);
        // MIN / -1 = MIN and MIN % -1 = 0, as SystemTap; idiv would trap.
        let m1 = self.b.ins().icmp_imm_s(IntCC::Equal, r, -1);
        let one = self.iconst(1);
        let d = self.b.ins().select(m1, one, r);
        if op == BinOp::Div {
            let q = self.b.ins().sdiv(l, d);
            let neg = self.b.ins().ineg(l);
            self.b.ins().select(m1, neg, q)
        } else {
            let q = self.b.ins().srem(l, d);
            let z = self.iconst(0);
            self.b.ins().select(m1, z, q)
        }
    }

    fn arith(&mut self, op: BinOp, l: Value, r: Value, span: Span) -> Value {
        match op {
            BinOp::Add => self.b.ins().iadd(l, r),
            BinOp::Sub => self.b.ins().isub(l, r),
            BinOp::Mul => self.b.ins().imul(l, r),
            BinOp::Div | BinOp::Mod => self.divide(op, l, r, span),
            BinOp::Shl => self.b.ins().ishl(l, r),
            BinOp::Shr => self.b.ins().sshr(l, r),
            BinOp::UShr => self.b.ins().ushr(l, r),
            BinOp::BitAnd => self.b.ins().band(l, r),
            BinOp::BitOr => self.b.ins().bor(l, r),
            BinOp::BitXor => self.b.ins().bxor(l, r),
            _ => l,
        }
    }

    fn binary(&mut self, op: BinOp, lhs: &Expr, rhs: &Expr, span: Span) -> Value {
        match op {
            BinOp::And | BinOp::Or => {
                let l = self.expr(lhs);
                let rb = self.b.create_block();
                let done = self.b.create_block();
                self.b.append_block_param(done, I64);
                let lc = self.b.ins().icmp_imm_s(IntCC::NotEqual, l, 0);
                let lv = self.bool_to_long(lc);
                if op == BinOp::And {
                    self.b.ins().brif(lc, rb, &[], done, &[lv.into()]);
                } else {
                    self.b.ins().brif(lc, done, &[lv.into()], rb, &[]);
                }
                self.b.switch_to_block(rb);
                self.b.seal_block(rb);
                let r = self.expr(rhs);
                let rc = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
                let rv = self.bool_to_long(rc);
                self.b.ins().jump(done, &[rv.into()]);
                self.b.switch_to_block(done);
                self.b.seal_block(done);
                self.b.block_params(done)[0]
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => {
                let l = self.expr(lhs);
                let r = self.expr(rhs);
                let cc = match op {
                    BinOp::Lt => IntCC::SignedLessThan,
                    BinOp::Le => IntCC::SignedLessThanOrEqual,
                    BinOp::Gt => IntCC::SignedGreaterThan,
                    BinOp::Ge => IntCC::SignedGreaterThanOrEqual,
                    BinOp::Eq => IntCC::Equal,
                    _ => IntCC::NotEqual,
                };
                let c = if lhs.ty == Ty::String {
                    let d = self.rt(Rt::Strcmp, &[l, r]);
                    self.b.ins().icmp_imm_s(cc, d, 0)
                } else {
                    self.b.ins().icmp(cc, l, r)
                };
                self.bool_to_long(c)
            }
            BinOp::Concat => {
                let l = self.expr(lhs);
                let r = self.expr(rhs);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Concat, &[t, l, r, cap]);
                t
            }
            _ => {
                let l = self.expr(lhs);
                let r = self.expr(rhs);
                self.arith(op, l, r, span)
            }
        }
    }

    /// `target op= value`; returns the new value.
    fn assign(&mut self, op: AssignOp, target: &Expr, value: &Expr, span: Span) -> Value {
        let bop = match op {
            AssignOp::Assign | AssignOp::Aggregate => None,
            AssignOp::Add => Some(BinOp::Add),
            AssignOp::Sub => Some(BinOp::Sub),
            AssignOp::Mul => Some(BinOp::Mul),
            AssignOp::Div => Some(BinOp::Div),
            AssignOp::Mod => Some(BinOp::Mod),
            AssignOp::Shl => Some(BinOp::Shl),
            AssignOp::Shr => Some(BinOp::Shr),
            AssignOp::BitAnd => Some(BinOp::BitAnd),
            AssignOp::BitOr => Some(BinOp::BitOr),
            AssignOp::BitXor => Some(BinOp::BitXor),
            AssignOp::Concat => Some(BinOp::Concat),
        };
        if op == AssignOp::Aggregate {
            let v = self.expr(value);
            let (p, desc) = match &target.kind {
                ExprKind::Global(g) => match self.sh.layout.globals[g.0 as usize].clone() {
                    Slot::Stat { off, desc, hists } => match self.sh.layout.stat_shards.get(&g.0).copied() {
                        Some(col) => {
                            // This thread's own copy (in a target thread), or
                            // the shared one (in the tracer).
                            let d = self.region_addr(desc);
                            let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
                            let own = self.b.create_block();
                            let shared = self.b.create_block();
                            let done = self.b.create_block();
                            self.b.ins().brif(slot, own, &[], shared, &[]);
                            self.b.switch_to_block(own);
                            self.b.seal_block(own);
                            let row = self.slot_row(slot);
                            let row_off = self.b.ins().imul_imm_s(row, i64::from(self.sh.layout.stat_row));
                            let base = self.region_addr(self.sh.layout.stat_shards_off + u64::from(col));
                            let p = self.b.ins().iadd(base, row_off);
                            if hists.iter().all(|h| matches!(h, HistKey::Log)) {
                                self.stat_add_inline(p, v, &hists);
                            } else {
                                self.rt(Rt::StatAddLocal, &[p, v, d]);
                            }
                            self.b.ins().jump(done, &[]);
                            self.b.switch_to_block(shared);
                            self.b.seal_block(shared);
                            let p = self.region_addr(off);
                            self.rt(Rt::StatAdd, &[p, v, d]);
                            self.b.ins().jump(done, &[]);
                            self.b.switch_to_block(done);
                            self.b.seal_block(done);
                            return v;
                        }
                        None => (self.region_addr(off), desc),
                    },
                    _ => return v,
                },
                ExprKind::Index { array, keys } => {
                    let desc = match &self.sh.layout.globals[array.0 as usize] {
                        Slot::Table(t) => t.desc,
                        _ => 0,
                    };
                    (self.element_for_write(*array, keys, span), desc)
                }
                _ => return v,
            };
            let d = self.region_addr(desc);
            self.rt(Rt::StatAdd, &[p, v, d]);
            return v;
        }
        let v = self.expr(value);
        if target.ty == Ty::String {
            return self.assign_string(bop.is_some(), target, v, span);
        }
        // Division by zero is checked before any store.
        if let Some(BinOp::Div | BinOp::Mod) = bop {
            let zero = self.b.ins().icmp_imm_s(IntCC::Equal, v, 0);
            self.raise_if(zero, abi::ERR_DIV0, span);
        }
        match &target.kind {
            ExprKind::Local(l) => {
                let LocalStore::Long(var) = self.locals[l.0 as usize] else { return v };
                let new = match bop {
                    Some(op) => {
                        let old = self.b.use_var(var);
                        self.arith(op, old, v, span)
                    }
                    None => v,
                };
                self.b.def_var(var, new);
                new
            }
            ExprKind::Global(g) => {
                let Slot::Long { off } = self.sh.layout.globals[g.0 as usize].clone() else { return v };
                if let Some(k) = self.sh.layout.shards.get(&g.0).copied() {
                    // Tracer-side code only (the analysis keeps target code
                    // to plain adds): the sum, the operator, then set.
                    let new = match bop {
                        Some(op) => {
                            let o = self.iconst(off as i64);
                            let kv = self.iconst(i64::from(k));
                            let old = self.rt(Rt::ShardSum, &[self.region, o, kv]);
                            self.arith(op, old, v, span)
                        }
                        None => v,
                    };
                    let o = self.iconst(off as i64);
                    let kv = self.iconst(i64::from(k));
                    self.rt(Rt::ShardSet, &[self.region, o, kv, new]);
                    return new;
                }
                let p = self.region_addr(off);
                self.update_long(p, bop, v, span)
            }
            ExprKind::Index { array, keys } => {
                let p = self.element_for_write(*array, keys, span);
                self.update_long(p, bop, v, span)
            }
            // Guru mode (pass 2 checked -g): the saved register the
            // trampoline restores, so the function (or its caller, for
            // `$return`) sees the new value.
            ExprKind::Target(t) => {
                self.ctx_escapes = true;
                let n = match t {
                    Target::Arg(n) => i64::from(*n),
                    Target::Return => 0,
                };
                let new = match bop {
                    Some(op) => {
                        let old = self.expr(target);
                        self.arith(op, old, v, span)
                    }
                    None => v,
                };
                let nv = self.iconst(n);
                self.rt(Rt::SetArg, &[self.ctx, nv, new]);
                new
            }
            _ => v,
        }
    }

    /// Store to a shared long: atomic for every operator, so concurrent
    /// `n++` from many threads never loses a count.
    fn update_long(&mut self, p: Value, op: Option<BinOp>, v: Value, span: Span) -> Value {
        let rmw = match op {
            None => {
                self.b.ins().atomic_store(flags(), v, p);
                return v;
            }
            Some(BinOp::Add) => Some(AtomicRmwOp::Add),
            Some(BinOp::Sub) => Some(AtomicRmwOp::Sub),
            Some(BinOp::BitAnd) => Some(AtomicRmwOp::And),
            Some(BinOp::BitOr) => Some(AtomicRmwOp::Or),
            Some(BinOp::BitXor) => Some(AtomicRmwOp::Xor),
            _ => None,
        };
        let op = op.unwrap_or(BinOp::Add);
        if let Some(r) = rmw {
            let old = self.b.ins().atomic_rmw(I64, flags(), r, p, v);
            return self.arith(op, old, v, span);
        }
        // Other operators: a compare-and-swap loop.
        let head = self.b.create_block();
        let done = self.b.create_block();
        self.b.append_block_param(done, I64);
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        let old = self.b.ins().atomic_load(I64, flags(), p);
        let new = self.arith(op, old, v, span);
        let seen = self.b.ins().atomic_cas(flags(), p, old, new);
        let ok = self.b.ins().icmp(IntCC::Equal, seen, old);
        self.b.ins().brif(ok, done, &[new.into()], head, &[]);
        self.b.seal_block(head);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
        self.b.block_params(done)[0]
    }

    fn assign_string(&mut self, concat: bool, target: &Expr, v: Value, span: Span) -> Value {
        let cap = self.cap_val();
        match &target.kind {
            ExprKind::Local(l) => {
                let LocalStore::Str(ss) = self.locals[l.0 as usize] else { return v };
                let p = self.b.ins().stack_addr(I64, ss, 0);
                if concat {
                    self.rt(Rt::Concat, &[p, p, v, cap]);
                } else {
                    self.rt(Rt::Strcpy, &[p, v, cap]);
                }
                p
            }
            ExprKind::Global(_) | ExprKind::Index { .. } => {
                let p = match &target.kind {
                    ExprKind::Global(g) => match self.sh.layout.globals[g.0 as usize].clone() {
                        Slot::Str { off } => self.region_addr(off),
                        _ => return v,
                    },
                    ExprKind::Index { array, keys } => self.element_for_write(*array, keys, span),
                    _ => return v,
                };
                let t = self.temp();
                if concat {
                    self.rt(Rt::GstrLoad, &[t, p, cap]);
                    self.rt(Rt::Concat, &[t, t, v, cap]);
                } else {
                    self.rt(Rt::Strcpy, &[t, v, cap]);
                }
                self.rt(Rt::GstrStore, &[p, t, cap]);
                t
            }
            _ => v,
        }
    }

    // ---- built-in functions ----

    fn args(&mut self, args: &[Expr]) -> Vec<Value> {
        args.iter().map(|a| self.expr(a)).collect()
    }

    /// An argument array on the stack.
    fn arg_array(&mut self, vals: &[Value]) -> Value {
        let buf = self.buffer(8 * vals.len() as u32);
        for (i, v) in vals.iter().enumerate() {
            self.b.ins().store(flags(), *v, buf, 8 * i as i32);
        }
        buf
    }

    fn printf(&mut self, pieces: &[Piece], vals: &[Value]) {
        let (id, _) = self.sh.format(pieces);
        let kinds: Vec<u8> = fmt::argument_kinds(pieces).into_iter().map(u8::from).collect();
        let kinds_off = self.sh.layout.constant(&kinds);
        let arr = self.arg_array(vals);
        let idv = self.iconst(i64::from(id));
        let kp = self.region_addr(kinds_off);
        let n = self.iconst(vals.len() as i64);
        self.rt(Rt::Printf, &[self.region, self.ctx, idv, kp, arr, n]);
    }

    /// Format into a new string temporary, inside the handler.
    fn sprintf(&mut self, pieces: &[Piece], vals: &[Value]) -> Value {
        let t = self.temp();
        let (_, off) = self.sh.format(pieces);
        let arr = self.arg_array(vals);
        let fp = self.region_addr(off);
        let cap = self.cap_val();
        let n = self.iconst(vals.len() as i64);
        self.rt(Rt::Format, &[t, cap, fp, arr, n]);
        t
    }

    fn format_pieces(&mut self, fmt_expr: &Expr) -> Option<Vec<Piece>> {
        let ExprKind::String(s) = &fmt_expr.kind else {
            self.sh.diags.push(
                Diagnostic::error(Code::BadFormat, fmt_expr.span, "the format must be a string literal")
                    .with_label("not a literal"),
            );
            return None;
        };
        match crate::format::parse(s) {
            Ok(segs) => Some(segs.iter().map(piece_of).collect()),
            Err(err) => {
                self.sh.diags.push(Diagnostic::error(Code::BadFormat, fmt_expr.span, err.message));
                None
            }
        }
    }

    /// `print`/`println` arguments as a format: `%d` or `%s` each, no separator.
    fn print_pieces(args: &[Expr], newline: bool) -> Vec<Piece> {
        let mut p: Vec<Piece> = args
            .iter()
            .map(|a| Piece::Conv {
                kind: if a.ty == Ty::String { fmt::CONV_STRING } else { fmt::CONV_SIGNED },
                flags: 0,
                width: fmt::COUNT_NONE,
                precision: fmt::COUNT_NONE,
            })
            .collect();
        if newline {
            p.push(Piece::Text(b"\n".to_vec()));
        }
        p
    }

    fn hist_print(&mut self, h: &Expr, at: Span) {
        let (stat, key) = match &h.kind {
            ExprKind::HistLog { stat } => (stat, HistKey::Log),
            ExprKind::HistLinear { stat, lo, hi, step } => (stat, HistKey::Linear { lo: *lo, hi: *hi, step: *step }),
            _ => return,
        };
        let (desc, hists) = match &stat.kind {
            ExprKind::Global(g) | ExprKind::Index { array: g, .. } => match &self.sh.layout.globals[g.0 as usize] {
                Slot::Stat { desc, hists, .. } => (*desc, hists.clone()),
                Slot::Table(t) => (t.desc, t.hists.clone()),
                _ => return,
            },
            _ => return,
        };
        let Some(which) = hists.iter().position(|k| *k == key) else { return };
        if which >= abi::MAX_HISTS {
            self.sh.diags.push(Diagnostic::error(
                Code::Unsupported,
                h.span,
                format!("a statistic can collect at most {} different histograms", abi::MAX_HISTS),
            ));
            return;
        }
        let p = self.expr(stat);
        let d = self.region_addr(desc);
        let w = self.iconst(which as i64);
        let loc = self.sh.loc(at);
        let l = self.iconst(i64::from(loc));
        self.rt(Rt::HistPrint, &[self.region, self.ctx, p, d, w, l]);
        self.check_error();
    }

    fn builtin(&mut self, f: Builtin, args: &[Expr], e: &Expr) -> Value {
        let span = e.span;
        let zero = self.iconst(0);
        match f {
            Builtin::Printf => {
                if let Some(pieces) = self.format_pieces(&args[0]) {
                    let vals = self.args(&args[1..]);
                    self.printf(&pieces, &vals);
                }
                zero
            }
            Builtin::Sprintf => match self.format_pieces(&args[0]) {
                Some(pieces) => {
                    let vals = self.args(&args[1..]);
                    self.sprintf(&pieces, &vals)
                }
                None => self.temp(),
            },
            Builtin::Print | Builtin::Println => {
                let newline = f == Builtin::Println;
                if args.len() == 1 && matches!(args[0].kind, ExprKind::HistLog { .. } | ExprKind::HistLinear { .. }) {
                    self.hist_print(&args[0], span);
                    if newline {
                        self.printf(&[Piece::Text(b"\n".to_vec())], &[]);
                    }
                    return zero;
                }
                let pieces = Self::print_pieces(args, newline);
                let vals = self.args(args);
                self.printf(&pieces, &vals);
                zero
            }
            Builtin::Sprint | Builtin::Sprintln => {
                let pieces = Self::print_pieces(args, f == Builtin::Sprintln);
                let vals = self.args(args);
                self.sprintf(&pieces, &vals)
            }
            // The process the region serves: the same in every thread.
            Builtin::Pid => {
                // A target thread's own process (its slot: a forked child's
                // differs from the region's), else the region's process.
                let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
                let own = self.b.ins().iadd_imm_u(slot, core::mem::offset_of!(abi::ThreadSlot, pid) as i64);
                let shared = self.b.ins().iadd_imm_u(self.region, core::mem::offset_of!(abi::Header, pid) as i64);
                let at = self.b.ins().select(slot, own, shared);
                self.load32(at, 0)
            }
            Builtin::Tid => self.rt(Rt::Tid, &[self.ctx]),
            // The region's process's, or (a process it forked or exec'd
            // to) the kernel's.
            Builtin::Ppid => self.rt(Rt::Ppid, &[self.region, self.ctx]),
            // The process of -c or -p (0 without one), as SystemTap's.
            Builtin::Target => self.load(self.region, core::mem::offset_of!(abi::Header, target) as i32),
            Builtin::Uid => self.rt(Rt::Uid, &[self.region, self.ctx]),
            Builtin::Cpu => self.rt(Rt::Cpu, &[]),
            Builtin::Execname => {
                let t = self.temp();
                let cap = self.cap_val();
                // The thread's slot (0 in the tracer), not the context: a
                // lean trampoline fills the slot.
                let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
                self.rt(Rt::Execname, &[self.region, slot, t, cap]);
                t
            }
            Builtin::Pp | Builtin::Ppfunc | Builtin::Probefunc => {
                // The probe table: per probe entry, its pp() and function strings.
                let probe = self.load32(self.ctx, core::mem::offset_of!(abi::Ctx, probe) as i32);
                let row = self.b.ins().ishl_imm_u(probe, 4);
                let tab = self.region_addr(self.sh.layout.probes_off);
                let rowp = self.b.ins().iadd(tab, row);
                let field = if f == Builtin::Pp { 0 } else { 8 };
                let off = self.load(rowp, field);
                self.b.ins().iadd(self.region, off)
            }
            Builtin::Uaddr => {
                self.ctx_escapes = true;
                self.load(self.ctx, core::mem::offset_of!(abi::Ctx, addr) as i32)
            }
            Builtin::Register => {
                let idx = match &args[0].kind {
                    ExprKind::String(s) => telco_abi::region::register_index(&String::from_utf8_lossy(s)),
                    _ => None,
                };
                match idx {
                    Some(i) => {
                        let iv = self.iconst(i64::from(i));
                        self.rt(Rt::Register, &[self.ctx, iv])
                    }
                    None => {
                        self.sh.diags.push(
                            Diagnostic::error(Code::BadValue, args[0].span, "unknown register name")
                                .with_help("x86_64 registers: rax rbx rcx rdx rsi rdi rbp rsp r8-r15 rip rflags"),
                        );
                        zero
                    }
                }
            }
            Builtin::IntArg
            | Builtin::UintArg
            | Builtin::LongArg
            | Builtin::UlongArg
            | Builtin::LonglongArg
            | Builtin::UlonglongArg
            | Builtin::S32Arg
            | Builtin::U32Arg
            | Builtin::S64Arg
            | Builtin::U64Arg
            | Builtin::PointerArg => {
                self.ctx_escapes = true;
                let n = self.expr(&args[0]);
                let v = self.rt(Rt::Arg, &[self.region, self.ctx, n]);
                match f {
                    Builtin::IntArg | Builtin::S32Arg => self.low_bits(v, types::I32, true),
                    Builtin::UintArg | Builtin::U32Arg => self.low_bits(v, types::I32, false),
                    _ => v,
                }
            }
            Builtin::Returnval => {
                self.ctx_escapes = true;
                let idx = self.iconst(0);
                self.rt(Rt::Register, &[self.ctx, idx])
            }
            Builtin::Int32 | Builtin::Uint32 | Builtin::Short | Builtin::Ushort => {
                let v = self.expr(&args[0]);
                match f {
                    Builtin::Int32 => self.low_bits(v, types::I32, true),
                    Builtin::Uint32 => self.low_bits(v, types::I32, false),
                    Builtin::Short => self.low_bits(v, types::I16, true),
                    _ => self.low_bits(v, types::I16, false),
                }
            }
            Builtin::GettimeofdayNs | Builtin::GettimeofdayUs | Builtin::GettimeofdayMs | Builtin::GettimeofdayS => {
                let ns = self.rt(Rt::NowNs, &[self.region]);
                let div = match f {
                    Builtin::GettimeofdayNs => 1,
                    Builtin::GettimeofdayUs => 1_000,
                    Builtin::GettimeofdayMs => 1_000_000,
                    _ => 1_000_000_000,
                };
                if div == 1 {
                    ns
                } else {
                    let d = self.iconst(div);
                    self.b.ins().sdiv(ns, d)
                }
            }
            Builtin::UserString | Builtin::UserStringN => {
                let vals = self.args(args);
                let t = self.temp();
                let (n, err) = if f == Builtin::UserString {
                    (self.iconst(-1), vals.get(1).copied())
                } else {
                    (vals[1], vals.get(2).copied())
                };
                let err = err.unwrap_or(zero);
                let loc = self.sh.loc(span);
                let l = self.iconst(i64::from(loc));
                let cap = self.cap_val();
                self.rt(Rt::UserString, &[self.region, self.ctx, t, vals[0], n, err, l, cap]);
                self.check_error();
                t
            }
            Builtin::UserChar
            | Builtin::UserShort
            | Builtin::UserInt
            | Builtin::UserLong
            | Builtin::UserInt8
            | Builtin::UserInt16
            | Builtin::UserInt32
            | Builtin::UserInt64
            | Builtin::UserUint8
            | Builtin::UserUint16
            | Builtin::UserUint32
            | Builtin::UserUint64 => {
                let (size, signed) = match f {
                    Builtin::UserChar | Builtin::UserInt8 => (1, 1),
                    Builtin::UserShort | Builtin::UserInt16 => (2, 1),
                    Builtin::UserInt | Builtin::UserInt32 => (4, 1),
                    Builtin::UserUint8 => (1, 0),
                    Builtin::UserUint16 => (2, 0),
                    Builtin::UserUint32 => (4, 0),
                    _ => (8, 1),
                };
                let a = self.expr(&args[0]);
                let s = self.iconst(size);
                let sg = self.iconst(signed);
                self.rt(Rt::UserInt, &[self.region, a, s, sg])
            }
            Builtin::Ubacktrace => {
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Ubacktrace, &[self.region, self.ctx, t, cap]);
                t
            }
            Builtin::PrintUbacktrace => {
                // One printf per frame, as SystemTap prints them: address,
                // symbol+offset/size, module (each within MAXSTRINGLEN).
                let off = self.sh.symtab();
                let tab = self.region_addr(off);
                let s = Piece::Conv {
                    kind: fmt::CONV_STRING,
                    flags: 0,
                    width: fmt::COUNT_NONE,
                    precision: fmt::COUNT_NONE,
                };
                let pieces = [s.clone(), s.clone(), s, Piece::Text(b"\n".to_vec())];
                let (id, _) = self.sh.format(&pieces);
                let kinds: Vec<u8> = fmt::argument_kinds(&pieces).into_iter().map(u8::from).collect();
                let kinds_off = self.sh.layout.constant(&kinds);
                let idv = self.iconst(i64::from(id));
                let kp = self.region_addr(kinds_off);
                self.rt(Rt::PrintUbacktrace, &[self.region, self.ctx, tab, idv, kp]);
                zero
            }
            Builtin::Usymname => {
                // The function's name from the probed modules' symbols, or
                // the address in hex (as SystemTap for unknown addresses).
                let a = self.expr(&args[0]);
                let off = self.sh.symtab();
                let tab = self.region_addr(off);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Usymname, &[tab, a, t, cap]);
                t
            }
            Builtin::Strlen => {
                let s = self.expr(&args[0]);
                self.rt(Rt::Strlen, &[s])
            }
            Builtin::Substr => {
                let v = self.args(args);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Substr, &[t, v[0], v[1], v[2], cap]);
                t
            }
            Builtin::Isinstr => {
                let v = self.args(args);
                let p = self.rt(Rt::Strpos, &[v[0], v[1]]);
                let c = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, p, 0);
                self.bool_to_long(c)
            }
            Builtin::Strpos => {
                let v = self.args(args);
                self.rt(Rt::Strpos, &[v[0], v[1]])
            }
            Builtin::StrReplace => {
                let v = self.args(args);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::StrReplace, &[t, v[0], v[1], v[2], cap]);
                t
            }
            Builtin::Strtol => {
                let v = self.args(args);
                self.rt(Rt::Strtol, &[v[0], v[1]])
            }
            Builtin::Tokenize => {
                let v = self.args(args);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Tokenize, &[t, v[0], v[1], self.ctx, cap]);
                t
            }
            Builtin::TextStr => {
                let s = self.expr(&args[0]);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::TextStr, &[t, s, cap]);
                t
            }
            Builtin::Exit => {
                self.rt(Rt::Exit, &[self.region, self.ctx]);
                zero
            }
            Builtin::Error => {
                let m = self.expr(&args[0]);
                let loc = self.sh.loc(span);
                let l = self.iconst(i64::from(loc));
                let cap = self.cap_val();
                self.rt(Rt::UserError, &[self.ctx, m, l, cap]);
                let target = self.error_target;
                self.b.ins().jump(target, &[]);
                self.fresh_block();
                zero
            }
            Builtin::Warn => {
                let m = self.expr(&args[0]);
                self.rt(Rt::Warn, &[self.region, self.ctx, m]);
                zero
            }
            Builtin::Assert => {
                let c = self.expr(&args[0]);
                let fail = self.b.create_block();
                let ok = self.b.create_block();
                self.b.ins().brif(c, ok, &[], fail, &[]);
                self.b.switch_to_block(fail);
                self.b.seal_block(fail);
                let m = match args.get(1) {
                    Some(a) => self.expr(a),
                    None => {
                        let off = self.sh.layout.string(b"Assertion failed");
                        self.region_addr(off)
                    }
                };
                let loc = self.sh.loc(span);
                let l = self.iconst(i64::from(loc));
                let cap = self.cap_val();
                self.rt(Rt::UserError, &[self.ctx, m, l, cap]);
                let target = self.error_target;
                self.b.ins().jump(target, &[]);
                self.b.switch_to_block(ok);
                self.b.seal_block(ok);
                zero
            }
            Builtin::ThreadIndent => {
                let d = self.expr(&args[0]);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::ThreadIndent, &[self.region, self.ctx, t, d, cap]);
                t
            }
            Builtin::TraceInstant => {
                let m = self.expr(&args[0]);
                self.rt(Rt::Instant, &[self.region, self.ctx, m]);
                zero
            }
            Builtin::TraceCounter => {
                let v = self.args(args);
                self.rt(Rt::Counter, &[self.region, self.ctx, v[0], v[1]]);
                zero
            }
            Builtin::TraceSpan => {
                // Reads only the context fields a lean trampoline sets.
                let v = self.args(args);
                let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
                let probe = self.load32(self.ctx, core::mem::offset_of!(abi::Ctx, probe) as i32);
                self.rt(Rt::Span, &[self.region, slot, probe, v[0]]);
                zero
            }
            Builtin::TraceTicks => self.rt(Rt::Ticks, &[]),
            Builtin::TicksNs => {
                // ticks × Header::tsc_mult >> TSC_SHIFT, in 128 bits.
                let d = self.args(args)[0];
                let mult = self.load(self.region, core::mem::offset_of!(abi::Header, tsc_mult) as i32);
                let lo = self.b.ins().imul(d, mult);
                let hi = self.b.ins().smulhi(d, mult);
                let lo = self.b.ins().ushr_imm_u(lo, i64::from(abi::TSC_SHIFT));
                let hi = self.b.ins().ishl_imm_u(hi, i64::from(64 - abi::TSC_SHIFT));
                self.b.ins().bor(hi, lo)
            }
        }
    }
}

fn piece_of(s: &crate::format::Segment) -> Piece {
    use crate::format::{ConvKind, Count, Segment};
    match s {
        Segment::Text(t) => Piece::Text(t.clone()),
        Segment::Conversion(c) => {
            let count = |n: Count| match n {
                Count::None => fmt::COUNT_NONE,
                Count::Fixed(v) => v as i32,
                Count::FromArg => fmt::COUNT_ARG,
            };
            let mut flags = 0;
            for (on, f) in [
                (c.left, fmt::FLAG_LEFT),
                (c.plus, fmt::FLAG_PLUS),
                (c.space, fmt::FLAG_SPACE),
                (c.zero, fmt::FLAG_ZERO),
                (c.alt, fmt::FLAG_ALT),
            ] {
                if on {
                    flags |= f;
                }
            }
            Piece::Conv {
                kind: match c.kind {
                    ConvKind::Signed => fmt::CONV_SIGNED,
                    ConvKind::Unsigned => fmt::CONV_UNSIGNED,
                    ConvKind::HexLower => fmt::CONV_HEX,
                    ConvKind::HexUpper => fmt::CONV_HEX_UPPER,
                    ConvKind::Octal => fmt::CONV_OCTAL,
                    ConvKind::Char => fmt::CONV_CHAR,
                    ConvKind::Pointer => fmt::CONV_POINTER,
                    ConvKind::String => fmt::CONV_STRING,
                },
                flags,
                width: count(c.width),
                precision: count(c.precision),
            }
        }
    }
}

/// Keep `CTX_SIZE` referenced: the context buffers follow it.
pub const fn ctx_size(cap: u32) -> u32 {
    CTX_SIZE as u32 + 2 * cap
}
