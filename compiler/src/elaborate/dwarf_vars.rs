//! Target variables by name (`$name`, `$p->field`, `$a[i]`, `$$parms`,
//! `@var`, `@cast`): what `crate::dwarf` says about a probe's site, turned
//! into expressions the rest of the compiler already has (saved registers,
//! fault-checked memory reads and guru-mode writes, arithmetic), so no
//! later pass knows about DWARF.
//!
//! How a variable is located: `Debug::scope` finds the function around
//! the probe's address and the variable's location there (a register, an
//! address computed from registers, the CFA and link-time addresses, or a
//! value). An address is a [`Place::Mem`]; `->` follows pointers and adds
//! member offsets to it; reading it is `user_<type>_error` of the right
//! width and signedness. The CFA is the rule `.eh_frame` gives at the
//! probe's address (a register plus an offset); a link-time address in a
//! PIE or library gets the load bias, computed as the saved program
//! counter minus the site's link-time address.
//!
//! At a function's first instruction (an entry probe, and the entry
//! values a return probe keeps), a parameter whose DWARF location is its
//! stack slot for the whole function (-O0 code, where the prologue has not
//! stored it yet) is read where the System V ABI passes it instead
//! (`abi_class`): integer-class eightbytes in the argument registers in
//! order (a small struct in one or two: [`Place::Pieces`]), larger
//! structs on the stack above the return address (AAPCS64: by reference,
//! `arch::CallConv`), objects passed by
//! invisible reference (DW_CC_pass_by_reference, or a location that loads
//! the object's address from the frame, as gcc writes it) through the
//! address in their register; floating-point parameters take vector
//! registers and are not read; a function the compiler gave its own
//! convention (DW_CC_nocall) is refused. A return probe reads parameters
//! as they were at entry, as SystemTap does. `$return` is rax, rax:rdx
//! for a two-eightbyte struct, or the memory rax points to for one
//! returned in memory.
//!
//! The DWARF is the target's: expressions, types and members are walked
//! with bounds (operations, nodes, depth, a budget of aggregates), and
//! pretty-printing keeps its format and arguments in step whatever fails
//! (a part that cannot be read prints `?`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::ast::{BinOp, Ident};
use crate::diag::{Code, Diagnostic};
use crate::dwarf::types::{self, Encoding, Type};
use crate::dwarf::{Debug, Location, Scope, Sym, TypeRef, Var, VarKind};
use crate::program::builtins::Builtin as B;
use crate::program::{Expr, ExprKind, Target, Ty};
use crate::span::Span;

#[cfg(test)]
#[path = "dwarf_vars_tests.rs"]
mod tests;

/// What a probe body with target variables by name sees: its site.
#[derive(Debug)]
pub struct Site {
    pub module: PathBuf,
    /// The module's DWARF, or why there is none.
    pub debug: Result<Arc<Debug>, String>,
    /// The function around the site, or why none was found.
    pub scope: Result<Scope, String>,
    /// The site's link-time address.
    pub pc: u64,
    /// The site is the function's first instruction.
    pub at_entry: bool,
    /// A return probe (parameters are read as they were at entry).
    pub ret: bool,
    /// Addresses are relative to a load base (PIE, shared library).
    pub pie: bool,
    /// The CFA rule at `pc`: a DWARF register and an offset.
    pub cfa: Option<(u16, i64)>,
    /// Other modules' debugging information, by the name the script gives
    /// them in `@cast` and `@var` (or why there is none).
    pub others: std::collections::HashMap<String, Result<Arc<Debug>, String>>,
    /// A module named in a script function's `@var(..., "module")`, not a
    /// probe's site: its load bias comes at run time from the probe that
    /// called the function (`Builtin::ModuleBias` with this index).
    pub bias_from: Option<u32>,
}

/// Where a value is.
#[derive(Clone, Debug)]
pub enum Place {
    /// In a saved register (register-file index).
    Reg(u32),
    /// In memory at this address.
    Mem(Expr),
    /// Computed: this is the value.
    Value(Expr),
    /// A small aggregate split over registers and memory (`DW_OP_piece`,
    /// or two argument registers): (size in bytes, where; None where the
    /// piece is optimised out). Only its members can be read.
    Pieces(Vec<(u64, Option<Place>)>),
}

/// A typed value somewhere: what `$name`, `->field` and `[i]` produce.
#[derive(Clone, Debug)]
pub struct Val {
    /// The debugging information its type is in (the probe's module's,
    /// or another's for `@cast(..., "module")`).
    pub debug: Arc<Debug>,
    pub place: Place,
    pub ty: Option<TypeRef>,
    /// A bitfield: (bit shift within the storage unit, width).
    pub bits: Option<(u64, u64)>,
    /// Read as it was at function entry (a parameter in a return probe).
    pub at_entry: bool,
    /// How the user wrote it, for messages.
    pub text: String,
}

type Res<T> = Result<T, Diagnostic>;

/// At most this many parts in one pretty-printed value (`$v$$`).
const PRETTY_BUDGET: u32 = 96;

fn long(kind: ExprKind, span: Span) -> Expr {
    Expr { kind, ty: Ty::Long, span }
}
fn num(v: i64, span: Span) -> Expr {
    long(ExprKind::Long(v), span)
}
fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    let span = a.span;
    long(ExprKind::Binary { op, lhs: Box::new(a), rhs: Box::new(b) }, span)
}
fn call(func: B, args: Vec<Expr>, ty: Ty, span: Span) -> Expr {
    Expr { kind: ExprKind::Builtin { func, args }, ty, span }
}
fn string(s: &str, span: Span) -> Expr {
    Expr { kind: ExprKind::String(s.as_bytes().to_vec()), ty: Ty::String, span }
}
fn add(a: Expr, off: i64) -> Expr {
    if off == 0 {
        return a;
    }
    match a.kind {
        ExprKind::Long(x) => num(x.wrapping_add(off), a.span),
        _ => {
            let span = a.span;
            bin(BinOp::Add, a, num(off, span))
        }
    }
}
fn register(i: u32, span: Span) -> Expr {
    long(ExprKind::Target(Target::Register(i)), span)
}

/// The address of a stack argument `off` bytes above the entry's stack
/// pointer.
fn at_stack_expr(off: u64, span: Span) -> Expr {
    add(register(telco_abi::arch::native::SP as u32, span), off as i64)
}

/// `v` as `size` bytes, sign- or zero-extended; a size of 0 (a damaged
/// DWARF enum's) leaves it whole. Also how a marker's argument of that
/// size is read (`lower::mark_arg`).
pub(super) fn extend(v: Expr, size: u64, signed: bool) -> Expr {
    let span = v.span;
    match (size, signed) {
        (0 | 8.., _) => v,
        (4, true) => call(B::Int32, vec![v], Ty::Long, span),
        (4, false) => call(B::Uint32, vec![v], Ty::Long, span),
        (2, true) => call(B::Short, vec![v], Ty::Long, span),
        (2, false) => call(B::Ushort, vec![v], Ty::Long, span),
        (_, false) => bin(BinOp::BitAnd, v, num((1i64 << (8 * size)) - 1, span)),
        (_, true) => {
            let sh = 64 - 8 * size as i64;
            bin(BinOp::Shr, bin(BinOp::Shl, v, num(sh, span)), num(sh, span))
        }
    }
}

fn not_accessible(name: &str, span: Span, why: &str) -> Diagnostic {
    Diagnostic::error(Code::Context, span, format!("target variable `${name}` is not accessible at this address"))
        .with_label(why.to_string())
}

/// How a scalar is read: size in bytes and signedness; None for what is
/// not a scalar.
fn scalar(t: &Type) -> Option<(u64, bool)> {
    match t {
        Type::Base { size, encoding, .. } if *encoding != Encoding::Float && (1..=8).contains(size) => {
            Some((*size, matches!(encoding, Encoding::Signed | Encoding::SignedChar)))
        }
        Type::Enum { size, signed, .. } => Some((*size, *signed)),
        Type::Pointer { .. } => Some((8, false)),
        _ => None,
    }
}

fn read_fn(size: u64, signed: bool) -> B {
    match (size, signed) {
        (1, true) => B::UserInt8Error,
        (1, false) => B::UserUint8Error,
        (2, true) => B::UserInt16Error,
        (2, false) => B::UserUint16Error,
        (4, true) => B::UserInt32Error,
        (4, false) => B::UserUint32Error,
        _ => B::UserInt64Error,
    }
}

fn write_fn(size: u64) -> B {
    match size {
        1 => B::SetUserInt8,
        2 => B::SetUserInt16,
        4 => B::SetUserInt32,
        _ => B::SetUserInt64,
    }
}

/// How the System V ABI passes a parameter: in `n` integer registers, in
/// `n` eightbytes of stack memory, by an invisible reference (a pointer in
/// one integer register), in one vector register (a float or double:
/// counted, not read), not at all (an empty C++ class), or some other way
/// (mixed aggregates, long double, vectors) that probes do not follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AbiClass {
    Integer(u64),
    Memory(u64),
    Reference,
    Sse,
    Nothing,
    Other,
}

fn abi_class(d: &Debug, t: &Type, rust: bool, depth: u32) -> AbiClass {
    if depth > 8 {
        return AbiClass::Other;
    }
    match t {
        Type::Base { encoding: Encoding::Float, size: 4 | 8, .. } if depth == 0 => AbiClass::Sse,
        Type::Base { encoding: Encoding::Float, .. } => AbiClass::Other,
        t if scalar(t).is_some() => AbiClass::Integer(1),
        Type::Aggregate { by_reference: true, .. } => AbiClass::Reference,
        Type::Aggregate { members, .. } if depth == 0 && members.is_empty() => AbiClass::Nothing,
        // AAPCS64 passes a homogeneous float aggregate in vector registers,
        // which are not read, whatever its size.
        Type::Aggregate { .. }
            if crate::arch::native::CALL_CONV.homogeneous_float_in_vectors && has_float(d, t, depth) =>
        {
            AbiClass::Other
        }
        // Rust passes what is larger than two registers by pointer, as
        // AAPCS64 does for every language.
        Type::Aggregate { size, .. } if *size > 16 && (rust || crate::arch::native::CALL_CONV.large_by_reference) => {
            AbiClass::Reference
        }
        Type::Aggregate { size, .. } if *size > 16 => AbiClass::Memory(size.div_ceil(8)),
        Type::Aggregate { size, members, .. } => {
            // Small: in registers if every member is of the integer class.
            for m in members {
                let (_, mt) = types::resolve(d, m.ty);
                match (&*mt, abi_class(d, &mt, rust, depth + 1)) {
                    (Type::Array { of, .. }, _) => {
                        let (_, e) = types::resolve(d, *of);
                        if !matches!(abi_class(d, &e, rust, depth + 1), AbiClass::Integer(_)) {
                            return AbiClass::Other;
                        }
                    }
                    (_, AbiClass::Integer(_)) => {}
                    _ => return AbiClass::Other,
                }
            }
            AbiClass::Integer(size.div_ceil(8).max(1))
        }
        _ => AbiClass::Other,
    }
}

/// Whether aggregate `t` holds a floating-point member anywhere (members,
/// array elements), a few levels deep: AAPCS64 may pass it in vector
/// registers (a homogeneous aggregate), so where it is is not claimed.
fn has_float(d: &Debug, t: &Type, depth: u32) -> bool {
    if depth > 8 {
        return true;
    }
    match t {
        Type::Base { encoding: Encoding::Float, .. } => true,
        Type::Aggregate { members, .. } => members.iter().any(|m| has_float(d, &types::resolve(d, m.ty).1, depth + 1)),
        Type::Array { of, .. } => has_float(d, &types::resolve(d, *of).1, depth + 1),
        _ => false,
    }
}

/// The storage unit a bitfield is read from, in bytes (`types` keeps
/// shift + width within 64).
fn bit_storage(shift: u64, width: u64) -> u64 {
    match shift.saturating_add(width) {
        0..=8 => 1,
        9..=16 => 2,
        17..=32 => 4,
        _ => 8,
    }
}

impl Site {
    pub fn debug(&self, span: Span) -> Res<&Arc<Debug>> {
        match &self.debug {
            Ok(d) => Ok(d),
            Err(why) => {
                Err(Diagnostic::error(Code::Unsupported, span, "no debugging information for target variables")
                    .with_label(why.clone())
                    .with_help(
                        "build the program with -g, or install its debug file (found by build-id under /usr/lib/debug)",
                    ))
            }
        }
    }

    /// The debugging information `@cast`/`@var` name: the probe's module's
    /// (None), or another module's.
    fn debug_of(&self, module: Option<&str>, span: Span) -> Res<Arc<Debug>> {
        let Some(m) = module else { return self.debug(span).cloned() };
        match self.others.get(m) {
            Some(Ok(d)) => Ok(d.clone()),
            Some(Err(why)) => {
                Err(Diagnostic::error(Code::Unsupported, span, format!("no debugging information for module `{m}`"))
                    .with_label(why.clone()))
            }
            None => Err(Diagnostic::error(Code::Unsupported, span, format!("module `{m}` was not loaded"))
                .with_label("name modules with string literals")),
        }
    }

    fn scope(&self, span: Span) -> Res<&Scope> {
        self.debug(span)?;
        self.scope.as_ref().map_err(|why| {
            Diagnostic::error(Code::Context, span, "no function's debugging information covers this probe")
                .with_label(why.clone())
        })
    }

    /// The module's load bias: the saved program counter less the site's
    /// link-time address (0 for a fixed-address executable).
    fn bias(&self, span: Span) -> Expr {
        if !self.pie {
            return num(0, span);
        }
        if let Some(i) = self.bias_from {
            return call(B::ModuleBias, vec![num(i64::from(i), span)], Ty::Long, span);
        }
        let pc = register(telco_abi::arch::native::PC as u32, span);
        let pc = if self.ret { long(ExprKind::Entry(Box::new(pc)), span) } else { pc };
        add(pc, (self.pc as i64).wrapping_neg())
    }

    /// The value DWARF register `r` had when the function was entered
    /// (`DW_OP_entry_value`), as SystemTap finds it: from the function's
    /// call sites. The return address (at the CFA less 8) says which call
    /// this is; that site's value for the register (a constant or an
    /// address the DWARF gives) is the value. A call from elsewhere is the
    /// runtime error that says so.
    fn entry_from_callers(&self, r: u16, name: &str, span: Span) -> Res<Expr> {
        use crate::dwarf::expr::Location;
        let unknown = "only its value at the function's entry is known (entry value), and no call of the function \
                       in the debugging information gives it";
        let (Ok(debug), Ok(scope)) = (&self.debug, &self.scope) else {
            return Err(not_accessible(name, span, unknown));
        };
        let mut arms: Vec<(u64, Expr)> = Vec::new();
        for site in debug.call_sites(&scope.function) {
            let Some((_, loc)) = site.params.iter().find(|(reg, _)| *reg == r) else { continue };
            // DW_AT_call_value computes the value itself.
            let v = match loc {
                Location::Memory(Sym::Const(c)) | Location::Value(Sym::Const(c)) => num(*c, span),
                Location::Memory(Sym::Link(a)) | Location::Value(Sym::Link(a)) => add(self.bias(span), *a as i64),
                _ => continue,
            };
            arms.push((site.return_pc, v));
        }
        if arms.is_empty() || self.cfa.is_none() {
            return Err(not_accessible(name, span, unknown));
        }
        let ra_at = add(self.sym(&Sym::Cfa, name, span)?, -8);
        let ra = call(B::UserInt64Error, vec![ra_at], Ty::Long, span);
        let msg = format!(
            "`${name}`: this call of `{}` is not one whose argument the debugging information gives",
            scope.function
        );
        let mut value = call(B::ErrorValue, vec![string(&msg, span)], Ty::Long, span);
        for (ret, v) in arms.into_iter().rev() {
            let here = bin(BinOp::Eq, ra.clone(), add(self.bias(span), ret as i64));
            value = long(ExprKind::Ternary { cond: Box::new(here), then: Box::new(v), els: Box::new(value) }, span);
        }
        Ok(value)
    }

    fn sym(&self, s: &Sym, name: &str, span: Span) -> Res<Expr> {
        Ok(match s {
            Sym::Const(c) => num(*c, span),
            Sym::Link(a) => add(self.bias(span), *a as i64),
            Sym::Reg(r) => match crate::arch::native::dwarf_register(*r) {
                Some(i) => register(i, span),
                None => {
                    let why = format!("its location uses {}", crate::arch::native::dwarf_register_name(*r));
                    return Err(not_accessible(name, span, &why));
                }
            },
            Sym::Cfa => match self.cfa.and_then(|(r, off)| Some((crate::arch::native::dwarf_register(r)?, off))) {
                Some((i, off)) => add(register(i, span), off),
                None => return Err(not_accessible(name, span, "no call frame information at this address")),
            },
            Sym::Entry(r) if self.at_entry => self.sym(&Sym::Reg(*r), name, span)?,
            Sym::Entry(r) => self.entry_from_callers(*r, name, span)?,
            Sym::Bin(op, a, b) => {
                use crate::dwarf::expr::Op;
                let op = match op {
                    Op::Add => BinOp::Add,
                    Op::Sub => BinOp::Sub,
                    Op::Mul => BinOp::Mul,
                    Op::And => BinOp::BitAnd,
                    Op::Or => BinOp::BitOr,
                    Op::Xor => BinOp::BitXor,
                    Op::Shl => BinOp::Shl,
                    Op::Shr => BinOp::UShr,
                    Op::Shra => BinOp::Shr,
                };
                bin(op, self.sym(a, name, span)?, self.sym(b, name, span)?)
            }
            Sym::Deref(a, size) => {
                let a = self.sym(a, name, span)?;
                call(read_fn(u64::from(*size), false), vec![a], Ty::Long, span)
            }
        })
    }

    fn place(&self, loc: &Location, name: &str, span: Span) -> Res<Place> {
        Ok(match loc {
            Location::Register(r) => match crate::arch::native::dwarf_register(*r) {
                Some(i) => Place::Reg(i),
                None => {
                    let why = format!("it is in {}", crate::arch::native::dwarf_register_name(*r));
                    return Err(not_accessible(name, span, &why));
                }
            },
            Location::Memory(s) => Place::Mem(self.sym(s, name, span)?),
            Location::Value(s) => Place::Value(self.sym(s, name, span)?),
            Location::Pieces(ps) => {
                let mut out = Vec::new();
                for (size, loc) in ps {
                    out.push((*size, self.place(loc, name, span).ok()));
                }
                Place::Pieces(out)
            }
            Location::Unavailable => return Err(not_accessible(name, span, "optimised out here")),
            Location::Unsupported(why) => return Err(not_accessible(name, span, why)),
        })
    }

    /// Where the System V ABI passes parameter `var` at the function's
    /// first instruction: integer-class parameters in the argument
    /// registers, in order, then on the stack.
    fn abi_param(&self, d: &Debug, scope: &Scope, var: &Var, span: Span) -> Res<Place> {
        use telco_abi::arch::native::{ARG_REGS, SP};
        if scope.nocall {
            return Err(not_accessible(
                &var.name,
                span,
                "the compiler gave this function its own calling convention (DW_CC_nocall), so where its parameters arrive is not known at entry",
            ));
        }
        // A large aggregate returned in memory takes the first register
        // (System V; AAPCS64 passes its address in x8).
        let conv = crate::arch::native::CALL_CONV;
        let (_, ret) = types::resolve(d, scope.ret);
        let in_memory = matches!(abi_class(d, &ret, scope.rust, 0), AbiClass::Memory(_) | AbiClass::Reference);
        let mut n = usize::from(in_memory && conv.result_address_returned);
        // Where the stack arguments start (above the return address on
        // x86_64, at the stack pointer on aarch64), and vector registers
        // taken (eight: xmm0-7, v0-v7).
        let mut stack = telco_abi::arch::native::STACK_ARGS_AT;
        let mut sse = 0;
        let at_stack = |off: u64| Place::Mem(add(register(SP as u32, span), off as i64));
        for p in scope.params() {
            let (_, t) = types::resolve(d, p.ty);
            // A location that loads the object's address from the frame
            // (`DW_OP_fbreg N; DW_OP_deref`) is an invisible reference,
            // whether or not the type says so (gcc does not).
            let indirect = matches!(&p.loc, Location::Memory(Sym::Deref(a, 8)) if mentions_frame(a));
            let class = if indirect { AbiClass::Reference } else { abi_class(d, &t, scope.rust, 0) };
            let here = !var.name.is_empty() && p.name == var.name;
            match class {
                AbiClass::Nothing => {
                    if here {
                        return Err(not_accessible(&var.name, span, "an empty class is not passed"));
                    }
                }
                AbiClass::Sse if sse < 8 => {
                    if here {
                        return Err(not_accessible(&var.name, span, "floating-point values are not read"));
                    }
                    sse += 1;
                }
                AbiClass::Sse => {
                    if here {
                        return Err(not_accessible(&var.name, span, "floating-point values are not read"));
                    }
                    stack = stack.saturating_add(8);
                }
                AbiClass::Reference if n < ARG_REGS.len() => {
                    if here {
                        return Ok(Place::Mem(register(ARG_REGS[n] as u32, span)));
                    }
                    n += 1;
                }
                AbiClass::Reference => {
                    if here {
                        return Ok(Place::Mem(call(
                            read_fn(8, false),
                            vec![at_stack_expr(stack, span)],
                            Ty::Long,
                            span,
                        )));
                    }
                    stack = stack.saturating_add(8);
                }
                AbiClass::Integer(words) if n + words as usize <= ARG_REGS.len() => {
                    if here {
                        let regs: Vec<Place> =
                            (0..words as usize).map(|k| Place::Reg(ARG_REGS[n + k] as u32)).collect();
                        return Ok(match regs.len() {
                            1 => regs.into_iter().next().unwrap_or(Place::Reg(ARG_REGS[n] as u32)),
                            _ => Place::Pieces(regs.into_iter().map(|r| (8, Some(r))).collect()),
                        });
                    }
                    n += words as usize;
                }
                AbiClass::Integer(words) | AbiClass::Memory(words) => {
                    if here {
                        return Ok(at_stack(stack));
                    }
                    stack = stack.saturating_add(words.saturating_mul(8));
                    if words > 1 && conv.spill_closes_registers {
                        n = ARG_REGS.len();
                    }
                }
                AbiClass::Other => {
                    return Err(not_accessible(
                        &var.name,
                        span,
                        if here {
                            "at the function's entry, a parameter of this kind (long double, vector, mixed struct) is not located"
                        } else {
                            "an earlier parameter is a long double, a vector or a struct mixing floating point and integers; where this one is passed is not known at entry"
                        },
                    ))
                }
            }
        }
        Err(not_accessible(&var.name, span, "not a parameter"))
    }

    fn from_var(&self, d: &Arc<Debug>, scope: Option<&Scope>, var: &Var, span: Span) -> Res<Val> {
        let name = &var.name;
        if self.ret && var.kind == VarKind::Local {
            return Err(not_accessible(name, span, "a return probe sees parameters (as at entry), not locals"));
        }
        let frame_slot = matches!(&var.loc, Location::Memory(s) if mentions_frame(s));
        // A struct the ABI passes by reference (AAPCS64: over 16 bytes),
        // whose location is where the prologue copies its address (gcc
        // -O0: a callee-saved register): at entry, the argument register.
        let by_reference = crate::arch::native::CALL_CONV.large_by_reference
            && matches!(&*types::resolve(d, var.ty).1, Type::Aggregate { size, .. } if *size > 16);
        let place = match scope {
            Some(s)
                if var.kind == VarKind::Param && self.at_entry && var.whole_scope && (frame_slot || by_reference) =>
            {
                self.abi_param(d, s, var, span)?
            }
            _ => self.place(&var.loc, name, span)?,
        };
        Ok(Val {
            debug: d.clone(),
            place,
            ty: var.ty,
            bits: None,
            at_entry: self.ret && var.kind == VarKind::Param,
            text: format!("${name}"),
        })
    }

    /// `$name`: a parameter, a local or a global.
    pub fn var(&self, name: &str, span: Span) -> Res<Val> {
        let d = self.debug(span)?;
        let scope = self.scope.as_ref().ok();
        if let Some(v) = scope.and_then(|s| s.var(name)) {
            return self.from_var(d, scope, v, span);
        }
        if let Some(v) = d.global(name, scope, None) {
            return self.from_var(d, None, &v, span);
        }
        let mut err = Diagnostic::error(Code::Undefined, span, format!("unable to find target variable `${name}`"))
            .with_label(match scope {
                Some(s) => format!("not a parameter, local or global visible in `{}`", s.function),
                None => "not a global of the module".to_string(),
            });
        if let Some(s) = scope {
            let names: Vec<String> = s.vars.iter().map(|v| v.name.clone()).collect();
            if let Some(c) = crate::suggest::closest(name, names.iter().map(String::as_str)) {
                err = err.with_help(format!("did you mean `${c}`?"));
            } else if !names.is_empty() {
                err = err.with_help(format!(
                    "visible here: {}",
                    names.iter().map(|n| format!("${n}")).collect::<Vec<_>>().join(" ")
                ));
            }
        }
        Err(err)
    }

    /// Whether `$name` exists here (`@defined`).
    pub fn defined(&self, name: &str) -> bool {
        let Ok(d) = &self.debug else { return false };
        let scope = self.scope.as_ref().ok();
        match scope.and_then(|s| s.var(name)) {
            Some(v) => self.from_var(d, scope, v, Span::default()).is_ok(),
            None => d.global(name, scope, None).is_some(),
        }
    }

    /// `$return`, typed from the function's DWARF.
    /// (System V: integers and small integer structs in rax and rdx, a
    /// large or non-trivial struct in memory whose address is in rax;
    /// AAPCS64: x0 and x1, and a struct in memory is not found.)
    pub fn return_value(&self, span: Span) -> Res<Val> {
        let s = self.scope(span)?;
        let d = self.debug(span)?;
        let rax = telco_abi::arch::native::RETURN_REG as u32;
        let (_, t) = types::resolve(d, s.ret);
        let returned = crate::arch::native::CALL_CONV.result_address_returned;
        let refused = |why: &str| Err(not_accessible("return", span, why));
        let in_memory =
            "the function returns it in memory at an address the caller passed (x8), which it need not keep";
        let place = match abi_class(d, &t, s.rust, 0) {
            AbiClass::Integer(1) | AbiClass::Nothing => Place::Reg(rax),
            AbiClass::Integer(2) => {
                let rdx = telco_abi::arch::native::RETURN_REG2 as u32;
                Place::Pieces(vec![(8, Some(Place::Reg(rax))), (8, Some(Place::Reg(rdx)))])
            }
            AbiClass::Memory(_) | AbiClass::Reference if returned => Place::Mem(register(rax, span)),
            AbiClass::Memory(_) | AbiClass::Reference => return refused(in_memory),
            _ if matches!(&*t, Type::Void) => Place::Reg(rax),
            _ => return refused("the function returns it in vector registers (floating point)"),
        };
        Ok(Val { debug: d.clone(), place, ty: s.ret, bits: None, at_entry: false, text: "$return".into() })
    }

    /// `@var("name@file.c")` (a global of that source file) or `@var("name")`;
    /// `module`: a global of another module.
    pub fn at_var(&self, spec: &str, module: Option<&str>, span: Span) -> Res<Val> {
        let d = &self.debug_of(module, span)?;
        let (name, file) = match spec.split_once('@') {
            Some((n, f)) => (n, Some(f)),
            None => (spec, None),
        };
        let scope = self.scope.as_ref().ok().filter(|_| module.is_none());
        if file.is_none() {
            if let Some(v) = scope.and_then(|s| s.var(name)) {
                return self.from_var(d, scope, v, span);
            }
        }
        // In a script function (no site), a name several files define: the
        // one of the calling probe's file, chosen at run time by its
        // address (the first where no file's code holds it).
        if self.bias_from.is_some() && file.is_none() && module.is_none() {
            let found = d.globals_with_units(name);
            if found.len() > 1 {
                if let Some(v) = self.by_caller(d, &found, span)? {
                    return Ok(v);
                }
            }
        }
        match d.global(name, scope, file) {
            // Its address is relative to where that module is loaded,
            // which the probe's registers do not tell.
            Some(v)
                if module.is_some()
                    && matches!(&v.loc, Location::Memory(s) | Location::Value(s) if mentions_link(s)) =>
            {
                Err(Diagnostic::error(Code::Unsupported, span, format!("`@var(\"{spec}\", ...)` of another module"))
                    .with_label("a global of another module: its load address is not known in this probe")
                    .with_help("probe a function of that module, where `@var(\"name\")` reads its globals"))
            }
            Some(v) => self.from_var(d, None, &v, span),
            None => Err(Diagnostic::error(Code::Undefined, span, format!("unable to find global `{spec}`"))
                .with_label(format!("no global variable by that name in {}", d.path.display()))),
        }
    }

    /// Of a script function's global candidates (each with its file's code
    /// ranges), the one whose code holds the calling probe's address: an
    /// address chosen at run time. None when they are not all in memory.
    fn by_caller(&self, d: &Arc<Debug>, found: &[(Var, Vec<(u64, u64)>)], span: Span) -> Res<Option<Val>> {
        let mut addrs = Vec::new();
        for (v, ranges) in found {
            match self.place(&v.loc, &v.name, span)? {
                Place::Mem(a) => addrs.push((a, ranges)),
                _ => return Ok(None),
            }
        }
        let link = || call(B::ProbeLink, Vec::new(), Ty::Long, span);
        let (mut chosen, _) = addrs[0].clone();
        for (a, ranges) in addrs.into_iter().rev() {
            let cond = ranges
                .iter()
                .map(|&(lo, hi)| {
                    bin(
                        BinOp::And,
                        bin(BinOp::Ge, link(), num(lo as i64, span)),
                        bin(BinOp::Lt, link(), num(hi as i64, span)),
                    )
                })
                .reduce(|x, y| bin(BinOp::Or, x, y));
            if let Some(cond) = cond {
                chosen =
                    long(ExprKind::Ternary { cond: Box::new(cond), then: Box::new(a), els: Box::new(chosen) }, span);
            }
        }
        let v = &found[0].0;
        Ok(Some(Val {
            debug: d.clone(),
            place: Place::Mem(chosen),
            ty: v.ty,
            bits: None,
            at_entry: false,
            text: format!("${}", v.name),
        }))
    }

    /// `@cast(addr, "struct foo"[, "module"])`: the object of that type at
    /// `addr`.
    pub fn cast(&self, addr: Expr, type_name: &str, module: Option<&str>, span: Span) -> Res<Val> {
        let d = self.debug_of(module, span)?;
        let t = d.type_named(type_name).ok_or_else(|| {
            Diagnostic::error(Code::Undefined, span, format!("type `{type_name}` not found"))
                .with_label(format!("no type by that name in the debugging information of {}", d.path.display()))
        })?;
        let text = format!("@cast(..., \"{type_name}\")");
        Ok(Val { debug: d, place: Place::Mem(addr), ty: Some(t), bits: None, at_entry: false, text })
    }

    /// The value of a pointer, followed: the object it points to.
    fn deref(&self, d: &Debug, v: &Val, span: Span) -> Res<Val> {
        let (_, t) = types::resolve(d, v.ty);
        let Type::Pointer { to, .. } = &*t else {
            return Err(Diagnostic::error(Code::TypeMismatch, span, format!("`{}` is not a pointer", v.text)));
        };
        let addr = self.read_raw(d, v, span)?;
        Ok(Val {
            debug: v.debug.clone(),
            place: Place::Mem(addr),
            ty: *to,
            bits: None,
            at_entry: v.at_entry,
            text: v.text.clone(),
        })
    }

    /// `->field` (and `.field`): pointers are followed, then the member's
    /// offset added (members of anonymous structs and unions included).
    pub fn member(&self, v: Val, field: &Ident) -> Res<Val> {
        let debug = v.debug.clone();
        let d: &Debug = &debug;
        let mut v = v;
        let (_, t) = types::resolve(d, v.ty);
        if matches!(&*t, Type::Pointer { .. }) {
            v = self.deref(d, &v, field.span)?;
        }
        let (_, t) = types::resolve(d, v.ty);
        let Type::Aggregate { .. } = &*t else {
            return Err(Diagnostic::error(
                Code::TypeMismatch,
                field.span,
                format!("`{}` has no member `{}`", v.text, field.name),
            )
            .with_label(format!("it is a `{}`, not a struct, union or class", types::name(d, v.ty))));
        };
        let Some((off, m)) = find_member(d, &t, &field.name, 0) else {
            let names = member_names(&t);
            let mut e = Diagnostic::error(
                Code::Undefined,
                field.span,
                format!("`{}` has no member `{}`", types::name(d, v.ty), field.name),
            )
            .with_label("no such member");
            if let Some(c) = crate::suggest::closest(&field.name, names.iter().map(String::as_str)) {
                e = e.with_help(format!("did you mean `{c}`?"));
            } else if !names.is_empty() {
                e = e.with_help(format!("its members: {}", names.join(", ")));
            }
            return Err(e);
        };
        let member_size = types::size_of(d, m.ty).unwrap_or(8);
        let place = match v.place {
            Place::Mem(a) => Place::Mem(add(a, off as i64)),
            // A small struct in one register is one piece.
            Place::Reg(r) => piece_at(vec![(8, Some(Place::Reg(r)))], off, member_size).ok_or_else(|| {
                not_accessible(&v.text, field.span, "the member lies outside the register holding the value")
            })?,
            Place::Value(e) => piece_at(vec![(8, Some(Place::Value(e)))], off, member_size)
                .ok_or_else(|| not_accessible(&v.text, field.span, "the member lies outside the value's 8 bytes"))?,
            Place::Pieces(ps) => piece_at(ps, off, member_size).ok_or_else(|| {
                not_accessible(
                    &format!("{}->{}", v.text.trim_start_matches('$'), field.name),
                    field.span,
                    "this member's piece of the value is optimised out here",
                )
            })?,
        };
        Ok(Val {
            debug,
            place,
            ty: m.ty,
            bits: m.bits,
            at_entry: v.at_entry,
            text: format!("{}->{}", v.text, field.name),
        })
    }

    /// `[i]` on an array or a pointer.
    pub fn index(&self, v: Val, i: Expr, span: Span) -> Res<Val> {
        let debug = v.debug.clone();
        let d: &Debug = &debug;
        if v.at_entry && !matches!(i.kind, ExprKind::Long(_)) {
            // The whole path is read when the function is entered, where
            // the probe's own variables and `$return` have no values yet.
            return Err(Diagnostic::error(
                Code::Context,
                span,
                format!("`{}` indexed by a computed value in a return probe", v.text),
            )
            .with_label("a parameter's elements are read as they were at entry")
            .with_help("index it with a constant, or read it in an entry probe"));
        }
        let (_, t) = types::resolve(d, v.ty);
        let (base, elem) = match &*t {
            Type::Array { of, .. } => match v.place {
                Place::Mem(a) => (a, *of),
                _ => return Err(Diagnostic::error(Code::Unsupported, span, format!("`{}` is not in memory", v.text))),
            },
            Type::Pointer { to, .. } => (self.read_raw(d, &v, span)?, *to),
            _ => {
                return Err(Diagnostic::error(Code::TypeMismatch, span, format!("`{}` cannot be indexed", v.text))
                    .with_label(format!("it is a `{}`, not an array or a pointer", types::name(d, v.ty))))
            }
        };
        let size = types::size_of(d, elem).filter(|s| *s > 0).ok_or_else(|| {
            Diagnostic::error(Code::Unsupported, span, format!("the elements of `{}` have no known size", v.text))
        })?;
        let off = bin(BinOp::Mul, i, num(size as i64, span));
        let text = format!("{}[...]", v.text);
        Ok(Val {
            debug,
            place: Place::Mem(bin(BinOp::Add, base, off)),
            ty: elem,
            bits: None,
            at_entry: v.at_entry,
            text,
        })
    }

    /// The raw scalar bits of a value (a pointer's address, an integer).
    fn read_raw(&self, d: &Debug, v: &Val, span: Span) -> Res<Expr> {
        let (_, t) = types::resolve(d, v.ty);
        let Some((size, signed)) = scalar(&t) else {
            return Err(self.not_scalar(d, v, span));
        };
        // The raw bits: a bitfield's storage unit, or the value's.
        let place = match &v.place {
            Place::Pieces(ps) => match piece_at(ps.clone(), 0, size) {
                Some(p) => p,
                None => {
                    return Err(not_accessible(
                        v.text.trim_start_matches('$'),
                        span,
                        "its pieces are optimised out here",
                    ))
                }
            },
            p => p.clone(),
        };
        let raw = match (place, v.bits) {
            (Place::Mem(a), Some((shift, width))) => {
                call(read_fn(bit_storage(shift, width), false), vec![a], Ty::Long, span)
            }
            (Place::Mem(a), None) => call(read_fn(size, signed), vec![a], Ty::Long, span),
            (Place::Reg(r), _) => register(r, span),
            (Place::Value(e), _) => e,
            (Place::Pieces(_), _) => {
                return Err(not_accessible(v.text.trim_start_matches('$'), span, "split in nested pieces"))
            }
        };
        let e = match v.bits {
            Some((shift, width)) => {
                let up = bin(BinOp::Shl, raw, num(64i64.saturating_sub((shift + width) as i64), span));
                bin(if signed { BinOp::Shr } else { BinOp::UShr }, up, num(64 - width as i64, span))
            }
            None => extend(raw, size, signed),
        };
        Ok(if v.at_entry { long(ExprKind::Entry(Box::new(e)), span) } else { e })
    }

    fn not_scalar(&self, d: &Debug, v: &Val, span: Span) -> Diagnostic {
        let tn = types::name(d, v.ty);
        let (_, t) = types::resolve(d, v.ty);
        let help = match &*t {
            Type::Aggregate { .. } => format!("read a member (`{}->NAME`), or print it with `{}$`", v.text, v.text),
            Type::Base { encoding: Encoding::Float, .. } => "floating-point values are not supported".to_string(),
            _ => format!("print it with `{}$`", v.text),
        };
        Diagnostic::error(Code::TypeMismatch, span, format!("`{}` is a `{tn}`, not a number", v.text))
            .with_label("only integers, enums and pointers are values")
            .with_help(help)
    }

    /// `&path`: the address of what the path names, where it is in
    /// memory (a register or a computed value has none).
    pub fn address(&self, v: &Val, span: Span) -> Res<Expr> {
        if v.bits.is_some() {
            return Err(Diagnostic::error(
                Code::TypeMismatch,
                span,
                format!("`&{}`: a bit-field has no address", v.text),
            )
            .with_label("a bit-field"));
        }
        match &v.place {
            Place::Mem(a) => Ok(if v.at_entry { long(ExprKind::Entry(Box::new(a.clone())), span) } else { a.clone() }),
            _ => Err(Diagnostic::error(
                Code::TypeMismatch,
                span,
                format!(
                    "`&{}`: it is not in memory here (a register or a computed value), so it has no address",
                    v.text
                ),
            )
            .with_label("no address")),
        }
    }

    /// The value as a long: integers, enums, pointers; an array is its
    /// address (`user_string($buf)` reads a char array).
    pub fn read(&self, v: &Val, span: Span) -> Res<Expr> {
        let d: &Debug = &v.debug;
        let (_, t) = types::resolve(d, v.ty);
        if let Type::Pointer { reference: true, .. } = &*t {
            // A C++ reference reads as what it refers to (one level: a
            // reference to a reference is the target's nonsense).
            let inner = self.deref(d, v, span)?;
            let (_, it) = types::resolve(d, inner.ty);
            if let (Type::Array { .. }, Place::Mem(a)) = (&*it, &inner.place) {
                return Ok(a.clone());
            }
            return self.read_raw(d, &inner, span);
        }
        if let (Type::Array { .. }, Place::Mem(a)) = (&*t, &v.place) {
            return Ok(if v.at_entry { long(ExprKind::Entry(Box::new(a.clone())), span) } else { a.clone() });
        }
        self.read_raw(d, v, span)
    }

    /// Guru mode: `v = value`. A register's saved copy (the trampoline
    /// loads it back), or the target's memory (a bitfield read, changed and
    /// written back).
    pub fn write(&self, v: &Val, value: Expr, span: Span) -> Res<Expr> {
        let d: &Debug = &v.debug;
        if v.at_entry {
            return Err(Diagnostic::error(Code::Context, span, format!("writing `{}` in a return probe", v.text))
                .with_label("the function has used its parameters already")
                .with_help("write it in an entry probe (`.function(\"F\")`)"));
        }
        let (_, t) = types::resolve(d, v.ty);
        let deref;
        let (v, t) = match &*t {
            Type::Pointer { reference: true, .. } => {
                deref = self.deref(d, v, span)?;
                let (_, it) = types::resolve(d, deref.ty);
                (&deref, it)
            }
            _ => (v, t),
        };
        let Some((size, _)) = scalar(&t) else { return Err(self.not_scalar(d, v, span)) };
        Ok(match (&v.place, v.bits) {
            (Place::Reg(r), _) => {
                let target = long(ExprKind::Target(Target::Register(*r)), span);
                long(
                    ExprKind::Assign {
                        op: crate::ast::AssignOp::Assign,
                        target: Box::new(target),
                        value: Box::new(value),
                    },
                    span,
                )
            }
            (Place::Mem(a), Some((shift, width))) => {
                let storage = bit_storage(shift, width);
                let ones = if width >= 64 { u64::MAX } else { (1u64 << width) - 1 };
                let mask = (ones << shift.min(63)) as i64;
                let old = call(read_fn(storage, false), vec![a.clone()], Ty::Long, span);
                let kept = bin(BinOp::BitAnd, old, num(!mask, span));
                let new = bin(BinOp::BitAnd, bin(BinOp::Shl, value, num(shift as i64, span)), num(mask, span));
                call(write_fn(storage), vec![a.clone(), bin(BinOp::BitOr, kept, new)], Ty::Void, span)
            }
            (Place::Mem(a), None) => call(write_fn(size), vec![a.clone(), value], Ty::Void, span),
            (Place::Value(_) | Place::Pieces(_), _) => {
                return Err(Diagnostic::error(Code::Context, span, format!("`{}` cannot be written here", v.text))
                    .with_label("the compiler computed it or split it; it is not stored in one place at this address"))
            }
        })
    }

    /// `$v$` and `$v$$`: the value as SystemTap prints it (a struct's
    /// members in `{.a=1, .b=2}`, strings quoted, nested structs expanded
    /// with `$$`).
    pub fn pretty(&self, v: &Val, deep: bool, span: Span) -> Res<Expr> {
        let d: &Debug = &v.debug;
        let mut fmt = String::new();
        let mut args = Vec::new();
        self.pretty_into(d, v, deep, true, 0, span, &mut fmt, &mut args, &mut PRETTY_BUDGET.clone());
        let mut all = vec![string(&fmt, span)];
        all.extend(args);
        Ok(call(B::PrettyText, all, Ty::String, span))
    }

    /// Appends the value's text to `fmt` and its conversions' arguments to
    /// `args`, always in step: a part that cannot be read prints `?`.
    /// `budget` bounds the parts (the DWARF may describe huge or cyclic
    /// structures).
    #[allow(clippy::too_many_arguments)]
    fn pretty_into(
        &self,
        d: &Debug,
        v: &Val,
        deep: bool,
        top: bool,
        depth: u32,
        span: Span,
        fmt: &mut String,
        args: &mut Vec<Expr>,
        budget: &mut u32,
    ) {
        if *budget == 0 {
            fmt.push_str("...");
            return;
        }
        *budget -= 1;
        let mut leaf = |fmt: &mut String, conv: &str, e: Res<Expr>| match e {
            Ok(e) => {
                fmt.push_str(conv);
                args.push(e);
            }
            Err(_) => fmt.push('?'),
        };
        let (_, t) = types::resolve(d, v.ty);
        match &*t {
            Type::Pointer { to, .. } => {
                let (_, pointee) = types::resolve(d, *to);
                match &*pointee {
                    // A string, quoted as SystemTap's `user_string_quoted`
                    // (and its `_utf16`, `_utf32`: char16_t, char32_t)
                    // quote it: escapes for what is not printable ASCII.
                    Type::Base { encoding: Encoding::SignedChar | Encoding::UnsignedChar, size, .. }
                        if matches!(size, 1 | 2 | 4) =>
                    {
                        let read = match size {
                            1 => B::UserString,
                            2 => B::UserStringUtf16,
                            _ => B::UserStringUtf32,
                        };
                        let s = self.read(v, span).map(|p| {
                            let text = call(read, vec![p, string("<unknown>", span)], Ty::String, span);
                            call(B::TextStrn, vec![text, num(0, span), num(1, span)], Ty::String, span)
                        });
                        leaf(fmt, "%s", s);
                    }
                    Type::Aggregate { .. } if top => match self.deref(d, v, span) {
                        Ok(inner) => self.pretty_into(d, &inner, deep, false, depth, span, fmt, args, budget),
                        Err(_) => fmt.push('?'),
                    },
                    _ => leaf(fmt, "%p", self.read(v, span)),
                }
            }
            Type::Aggregate { members, .. } => {
                if depth > 0 && !deep || depth > 4 {
                    fmt.push_str("{...}");
                    return;
                }
                fmt.push('{');
                let mut first = true;
                // Its own members, then its base classes' (C++), each
                // name once: a member masks a base's of the same name, as
                // SystemTap prints them.
                for name in visible_members(d, members, 0).into_iter().take(32) {
                    if !first {
                        fmt.push_str(", ");
                    }
                    first = false;
                    fmt.push_str(&format!(".{}=", name.replace('%', "%%")));
                    let ident = Ident { name: crate::ast::Name::new(&name), span };
                    match self.member(Val { ty: v.ty, ..v.clone() }, &ident) {
                        Ok(mv) => self.pretty_into(d, &mv, deep, false, depth + 1, span, fmt, args, budget),
                        Err(_) => fmt.push('?'),
                    }
                }
                fmt.push('}');
            }
            Type::Array { of, count } => {
                let (_, elem) = types::resolve(d, *of);
                if matches!(&*elem, Type::Base { encoding: Encoding::SignedChar | Encoding::UnsignedChar, size: 1, .. })
                {
                    let n = count.unwrap_or(256).min(4096) as i64;
                    let s = self.read(v, span).map(|a| {
                        let text =
                            call(B::UserStringN, vec![a, num(n, span), string("<unknown>", span)], Ty::String, span);
                        call(B::TextStrn, vec![text, num(0, span), num(1, span)], Ty::String, span)
                    });
                    leaf(fmt, "%s", s);
                    return;
                }
                fmt.push('[');
                for i in 0..count.unwrap_or(0).min(8) {
                    if i > 0 {
                        fmt.push_str(", ");
                    }
                    match self.index(v.clone(), num(i as i64, span), span) {
                        Ok(e) => self.pretty_into(d, &e, deep, false, depth + 1, span, fmt, args, budget),
                        Err(_) => fmt.push('?'),
                    }
                }
                if count.unwrap_or(0) > 8 {
                    fmt.push_str(", ...");
                }
                fmt.push(']');
            }
            // A character (char16_t and char32_t too), escaped where it is
            // not printable, as SystemTap's `'%#c'`.
            Type::Base { encoding: Encoding::SignedChar | Encoding::UnsignedChar, size, .. }
                if matches!(size, 1 | 2 | 4) =>
            {
                leaf(fmt, "'%#c'", self.read(v, span))
            }
            Type::Base { encoding: Encoding::Unsigned | Encoding::Bool | Encoding::UnsignedChar, .. } => {
                leaf(fmt, "%u", self.read(v, span))
            }
            t if scalar(t).is_some() => leaf(fmt, "%d", self.read(v, span)),
            _ => fmt.push('?'),
        }
    }

    /// `$$parms`, `$$locals`, `$$vars` (and with `$`/`$$`): `name=value`
    /// pairs, values as `%#x` (or pretty-printed); a variable not
    /// accessible here prints `name=?`.
    pub fn vars_string(&self, which: &str, pretty: u8, span: Span) -> Res<Expr> {
        let d = self.debug(span)?;
        let s = self.scope(span)?;
        let vars: Vec<&Var> = s
            .in_order()
            .into_iter()
            .filter(|v| match which {
                "parms" => v.kind == VarKind::Param,
                "locals" => v.kind == VarKind::Local,
                _ => true,
            })
            .collect();
        let mut fmt = String::new();
        let mut args = Vec::new();
        let mut budget = PRETTY_BUDGET;
        for (i, var) in vars.iter().enumerate() {
            if i > 0 {
                fmt.push(' ');
            }
            fmt.push_str(&format!("{}=", var.name.replace('%', "%%")));
            let v = match self.from_var(d, Some(s), var, span) {
                Ok(v) => v,
                Err(_) => {
                    fmt.push('?');
                    continue;
                }
            };
            if pretty > 0 {
                self.pretty_into(d, &v, pretty > 1, true, 0, span, &mut fmt, &mut args, &mut budget);
                continue;
            }
            let (_, t) = types::resolve(d, v.ty);
            match self.read(&v, span) {
                Ok(e) if scalar(&t).is_some() || matches!(&*t, Type::Array { .. }) => {
                    fmt.push_str("%#x");
                    args.push(e);
                }
                _ if matches!(&*t, Type::Aggregate { .. }) => fmt.push_str("{...}"),
                _ => fmt.push('?'),
            }
        }
        let mut all = vec![string(&fmt, span)];
        all.extend(args);
        Ok(call(B::PrettyText, all, Ty::String, span))
    }

    /// `$$return` (`return=0x2a`), and `$$return$`.
    pub fn return_string(&self, pretty: u8, span: Span) -> Res<Expr> {
        let d = self.debug(span)?;
        let v = self.return_value(span)?;
        let mut fmt = String::from("return=");
        let mut args = Vec::new();
        if pretty > 0 {
            self.pretty_into(d, &v, pretty > 1, true, 0, span, &mut fmt, &mut args, &mut PRETTY_BUDGET.clone());
        } else {
            fmt.push_str("%#x");
            args.push(self.read(&v, span)?);
        }
        let mut all = vec![string(&fmt, span)];
        all.extend(args);
        Ok(call(B::PrettyText, all, Ty::String, span))
    }

    /// What `-L` lists: `$name:type` for each parameter and local here.
    pub fn listing(&self) -> Vec<String> {
        let (Ok(d), Ok(s)) = (&self.debug, &self.scope) else { return Vec::new() };
        let mut out: Vec<String> =
            s.in_order().iter().map(|v| format!("${}:{}", v.name, types::name(d, v.ty))).collect();
        if self.ret {
            out.push(format!("$return:{}", types::name(d, s.ret)));
        }
        out
    }
}

/// The part of a value in pieces that holds bytes [off, off + size): a
/// memory piece's address plus the offset, or a register's value shifted
/// down.
fn piece_at(pieces: Vec<(u64, Option<Place>)>, off: u64, size: u64) -> Option<Place> {
    let mut start = 0u64;
    let end = off.checked_add(size)?;
    for (len, place) in pieces {
        let piece_end = start.checked_add(len)?;
        if off >= start && end <= piece_end {
            let within = (off - start) as i64;
            return match place? {
                Place::Mem(a) => Some(Place::Mem(add(a, within))),
                // The whole register: a place (writable); part of one is a
                // value (shifted down; its reader keeps its width).
                Place::Reg(r) if within == 0 && size == 8 => Some(Place::Reg(r)),
                Place::Reg(r) if within == 0 => Some(Place::Value(register(r, Span::default()))),
                Place::Reg(r) => {
                    let span = Span::default();
                    Some(Place::Value(bin(BinOp::UShr, register(r, span), num(8 * within, span))))
                }
                Place::Value(e) if within == 0 => Some(Place::Value(e)),
                Place::Value(e) => {
                    let span = e.span;
                    Some(Place::Value(bin(BinOp::UShr, e, num(8 * within, span))))
                }
                Place::Pieces(_) => None,
            };
        }
        start = piece_end;
    }
    None
}

fn mentions_link(s: &Sym) -> bool {
    match s {
        Sym::Link(_) => true,
        Sym::Bin(_, a, b) => mentions_link(a) || mentions_link(b),
        Sym::Deref(a, _) => mentions_link(a),
        _ => false,
    }
}

fn mentions_frame(s: &Sym) -> bool {
    match s {
        Sym::Cfa => true,
        Sym::Reg(r) => *r == crate::arch::native::DWARF_FP.0 || *r == crate::arch::native::DWARF_SP.0,
        Sym::Bin(_, a, b) => mentions_frame(a) || mentions_frame(b),
        Sym::Deref(a, _) => mentions_frame(a),
        _ => false,
    }
}

/// A member by name: the aggregate's own first (a derived class's member
/// hides its base's), then inside anonymous members and base classes, a
/// few levels and a bounded number of aggregates deep (the DWARF is the
/// target's, and may be cyclic or huge): (offset, member).
fn find_member(d: &Debug, t: &Type, name: &str, base: u64) -> Option<(u64, types::Member)> {
    let mut budget = 256u32;
    find_member_depth(d, t, name, base, 0, &mut budget)
}

fn find_member_depth(
    d: &Debug,
    t: &Type,
    name: &str,
    base: u64,
    depth: u32,
    budget: &mut u32,
) -> Option<(u64, types::Member)> {
    let Type::Aggregate { members, .. } = t else { return None };
    if depth > 8 || *budget == 0 {
        return None;
    }
    *budget -= 1;
    if let Some(m) = members.iter().find(|m| m.name.as_deref() == Some(name)) {
        return Some((base.checked_add(m.offset)?, m.clone()));
    }
    for m in members.iter().filter(|m| m.name.is_none()) {
        let (_, inner) = types::resolve(d, m.ty);
        if let Some(found) = find_member_depth(d, &inner, name, base.checked_add(m.offset)?, depth + 1, budget) {
            return Some(found);
        }
    }
    None
}

fn member_names(t: &Type) -> Vec<String> {
    match t {
        Type::Aggregate { members, .. } => members.iter().filter_map(|m| m.name.clone()).collect(),
        _ => Vec::new(),
    }
}

/// The names `$v$` shows of an aggregate's `members`: its named ones in
/// order (an anonymous struct's or union's in their place), then its base
/// classes', a name once (the first masks the rest), bases within bases
/// up to a depth.
fn visible_members(d: &Debug, members: &[types::Member], depth: u32) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut bases = Vec::new();
    let nested = |ty: Option<TypeRef>| -> Vec<String> {
        if ty.is_none() || depth >= 8 {
            return Vec::new();
        }
        match &*types::resolve(d, ty).1 {
            Type::Aggregate { members, .. } => visible_members(d, members, depth + 1),
            _ => Vec::new(),
        }
    };
    for m in members {
        match (&m.name, m.inherited) {
            (Some(n), _) => out.push(n.clone()),
            (None, true) => bases.push(m.ty),
            (None, false) => out.extend(nested(m.ty)),
        }
    }
    for b in bases {
        for n in nested(b) {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}
