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
//!
//! Probes whose bodies are the same (one probe over many points, a
//! wildcard) share one handler, which reads which probe it serves from
//! `Ctx::probe`. A handler sets up only the context fields its body uses
//! (its setup block is filled last: `finish_setup` in `frame.rs`), and
//! [`TFunc::full_ctx`] tells pass 5 whether a lean trampoline, which fills
//! only `probe`, `slot` and `entry`, will do. Every statement charges
//! MAXACTION, except in bodies that cannot reach it (no loops, no calls,
//! fewer statements than the limit).
//!
//! Files: `frame.rs` a function's frame, context and error plumbing;
//! `stmt.rs` statements; `expr.rs` expressions; `storage.rs` every access
//! to a global; `builtin.rs` built-in functions and printf.

mod builtin;
mod expr;
mod frame;
mod stmt;
mod storage;

use super::facts::{collect_entries, static_action_bound};
use super::layout::{HistKey, Layout, Storage, Table};
use super::rt::Rt;
use crate::ast::{AssignOp, BinOp, IncDec, SortDir, UnOp};
use crate::diag::{Code, Diagnostic};
use crate::program::builtins::Builtin;
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
    /// How target-side code changes each global (`facts::merge_kinds`).
    pub merges: Vec<telco_abi::artifact::Merge>,
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

/// Symbol-table slots for libraries loaded after pass 2 read the target's
/// modules (dlopen), and the bytes of the region's area for their entries,
/// rows and names: a plugin or an interpreter's extension modules fit many
/// times over; past either, a library has no names or rows in probes, and
/// the session says which.
const LATE_MODULES: usize = 64;
const LATE_SYMS_BYTES: u64 = 8 << 20;

impl Shared<'_> {
    /// The region offset of the symbol table of the probed modules
    /// (`telco_abi::region::SymTable`), built on first use from the symbols
    /// pass 2 handed over (`Program::symbols`).
    fn symtab(&mut self) -> u64 {
        use telco_abi::region::{SymEntry, SymTable, SymTableModule, SYM_ENTRY_SIZE, SYM_MODULE_SIZE};
        if self.layout.symtab_off != 0 {
            return self.layout.symtab_off;
        }
        let mods = &self.program.symbols;
        let head = core::mem::size_of::<SymTable>();
        let n_entries: usize = mods.iter().map(|m| m.functions.len()).sum();
        // A relocation per probed function (the trampolines' copies).
        let relocs_cap: usize = self
            .program
            .probes
            .iter()
            .flat_map(|p| p.points.iter())
            .filter(|pt| matches!(pt, Point::Function(_)))
            .count();
        let n_rows: usize = mods.iter().map(|m| m.unwind.len()).sum();
        // Slots for libraries the target loads later, whose symbols the
        // tracer writes into the late-symbols area.
        let late_cap = LATE_MODULES;
        let slots = mods.len() + late_cap;
        let rows_at = head + slots * SYM_MODULE_SIZE + n_entries * SYM_ENTRY_SIZE;
        let relocs = rows_at + n_rows * telco_abi::region::UNWIND_ROW_SIZE;
        let mut blob = vec![0u8; relocs + relocs_cap * telco_abi::region::SYM_RELOC_SIZE];
        blob[..4].copy_from_slice(&(mods.len() as u32).to_le_bytes());
        let field = |f: usize| f..f + 4;
        blob[field(core::mem::offset_of!(SymTable, relocs))].copy_from_slice(&(relocs as u32).to_le_bytes());
        blob[field(core::mem::offset_of!(SymTable, relocs_cap))].copy_from_slice(&(relocs_cap as u32).to_le_bytes());
        blob[field(core::mem::offset_of!(SymTable, late_cap))].copy_from_slice(&(late_cap as u32).to_le_bytes());
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
        let mut at = head + slots * SYM_MODULE_SIZE;
        let mut row_at = rows_at;
        for (i, m) in mods.iter().enumerate() {
            // The unwind rows (the table is 8-aligned: 16-byte rows after
            // 32-byte modules and 16-byte entries).
            let md = head + i * SYM_MODULE_SIZE;
            blob[md + core::mem::offset_of!(SymTableModule, unwind)..][..4]
                .copy_from_slice(&(row_at as u32).to_le_bytes());
            blob[md + core::mem::offset_of!(SymTableModule, unwind_count)..][..4]
                .copy_from_slice(&(m.unwind.len() as u32).to_le_bytes());
            for (a, r) in &m.unwind {
                blob[row_at..row_at + 8].copy_from_slice(&a.to_le_bytes());
                blob[row_at + 8..row_at + 12].copy_from_slice(&r.to_le_bytes());
                row_at += telco_abi::region::UNWIND_ROW_SIZE;
            }
            let md = head + i * SYM_MODULE_SIZE;
            let put32 = |b: &mut Vec<u8>, o: usize, v: u32| b[o..o + 4].copy_from_slice(&v.to_le_bytes());
            put32(&mut blob, md + core::mem::offset_of!(SymTableModule, entries), at as u32);
            put32(&mut blob, md + core::mem::offset_of!(SymTableModule, count), m.functions.len() as u32);
            let path = name_of(&m.module.path.to_string_lossy());
            put32(&mut blob, md + core::mem::offset_of!(SymTableModule, path), path);
            for (addr, size, name) in &m.functions {
                blob[at..at + 8].copy_from_slice(&addr.to_le_bytes());
                put32(&mut blob, at + core::mem::offset_of!(SymEntry, size), (*size).min(u64::from(u32::MAX)) as u32);
                let n = name_of(name);
                put32(&mut blob, at + core::mem::offset_of!(SymEntry, name), n);
                at += SYM_ENTRY_SIZE;
            }
        }
        blob.extend_from_slice(&strings);
        self.layout.symtab_off = self.layout.constant_aligned(&blob);
        self.layout.symtab_modules = mods.iter().map(|m| m.module.clone()).collect();
        self.layout.late_syms_size = LATE_SYMS_BYTES;
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
        let interruptible = p.points.iter().all(Point::interruptible);
        let key = format!("{:?}|{:?}|{:?}|{}", p.locals, p.body, p.condition, interruptible);
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
        merges: Vec::new(),
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

/// Keep `CTX_SIZE` referenced: the context buffers follow it.
pub const fn ctx_size(cap: u32) -> u32 {
    CTX_SIZE as u32 + 2 * cap
}
