//! DWARF location expressions, evaluated symbolically: the DWARF stack
//! machine runs at compile time over symbols ([`Sym`]: registers, the CFA,
//! link-time addresses, constants, the entry value of a register), and
//! what is left on the stack says where the variable is ([`Location`]).
//! Pass 2 turns the symbols into expressions over the probe's saved
//! registers (`elaborate::dwarf_vars`).

use gimli::{Operation, Reader};

use super::R;

/// A value the probe computes at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sym {
    Const(i64),
    /// A link-time address (`DW_OP_addr`): the module's load bias is added.
    Link(u64),
    /// A register's value (DWARF numbering).
    Reg(u16),
    /// The canonical frame address at the probe's address.
    Cfa,
    /// The value a register had when the function was entered
    /// (`DW_OP_entry_value`).
    Entry(u16),
    Bin(Op, Box<Sym>, Box<Sym>),
    /// `size` bytes read at an address.
    Deref(Box<Sym>, u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Shra,
}

/// Where a variable is, at one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// In a register (DWARF numbering).
    Register(u16),
    /// In memory at this address.
    Memory(Sym),
    /// Not stored anywhere: this is its value (`DW_OP_stack_value`,
    /// `DW_AT_const_value`).
    Value(Sym),
    /// Split in pieces: (size in bytes, where).
    Pieces(Vec<(u64, Location)>),
    /// Optimised out at this address.
    Unavailable,
    /// Somewhere this tracer cannot compute (why).
    Unsupported(String),
}

fn add(a: Sym, b: Sym) -> Sym {
    match (a, b) {
        (Sym::Const(x), Sym::Const(y)) => Sym::Const(x.wrapping_add(y)),
        (a, Sym::Const(0)) => a,
        (a, b) => Sym::Bin(Op::Add, Box::new(a), Box::new(b)),
    }
}

/// The location `expr` describes. `frame_base` is the function's
/// `DW_AT_frame_base` (for `DW_OP_fbreg`).
/// Expressions are the target's: at most this many operations, and no
/// value built of more than this many nodes (`DW_OP_dup` doubles one).
const MAX_OPS: usize = 256;
const MAX_NODES: usize = 256;

fn nodes(s: &Sym) -> usize {
    match s {
        Sym::Bin(_, a, b) => 1 + nodes(a) + nodes(b),
        Sym::Deref(a, _) => 1 + nodes(a),
        _ => 1,
    }
}

pub fn evaluate(
    expr: &gimli::Expression<R>,
    encoding: gimli::Encoding,
    frame_base: Option<&Location>,
    address: &dyn Fn(gimli::DebugAddrIndex<usize>) -> Option<u64>,
) -> Location {
    let mut stack: Vec<Sym> = Vec::new();
    let mut pieces: Vec<(u64, Location)> = Vec::new();
    let mut result: Option<Location> = None;
    let unsupported = |what: &str| Location::Unsupported(what.to_string());
    let mut ops = expr.clone().operations(encoding);
    for count in 0.. {
        let op = match ops.next() {
            Ok(Some(op)) => op,
            Ok(None) => break,
            Err(e) => return Location::Unsupported(format!("malformed location expression ({e})")),
        };
        if count >= MAX_OPS || stack.last().is_some_and(|s| nodes(s) > MAX_NODES) {
            return unsupported("a location expression too large to evaluate");
        }
        macro_rules! pop {
            () => {
                match stack.pop() {
                    Some(v) => v,
                    None => return unsupported("a location expression that pops an empty stack"),
                }
            };
        }
        match op {
            Operation::Register { register } => result = Some(Location::Register(register.0)),
            Operation::RegisterOffset { register, offset, .. } => {
                stack.push(add(Sym::Reg(register.0), Sym::Const(offset)))
            }
            Operation::FrameOffset { offset } => {
                let base = match frame_base {
                    Some(Location::Register(r)) => Sym::Reg(*r),
                    Some(Location::Memory(s)) => s.clone(),
                    _ => return unsupported("a frame-based location without a usable frame base"),
                };
                stack.push(add(base, Sym::Const(offset)));
            }
            Operation::CallFrameCFA => stack.push(Sym::Cfa),
            Operation::Address { address } => stack.push(Sym::Link(address)),
            Operation::AddressIndex { index } => match address(index) {
                Some(a) => stack.push(Sym::Link(a)),
                None => return unsupported("an address index outside .debug_addr"),
            },
            Operation::ConstantIndex { index } => match address(index) {
                Some(a) => stack.push(Sym::Const(a as i64)),
                None => return unsupported("a constant index outside .debug_addr"),
            },
            Operation::UnsignedConstant { value } => stack.push(Sym::Const(value as i64)),
            Operation::SignedConstant { value } => stack.push(Sym::Const(value)),
            Operation::PlusConstant { value } => {
                let a = pop!();
                stack.push(add(a, Sym::Const(value as i64)));
            }
            Operation::Plus
            | Operation::Minus
            | Operation::Mul
            | Operation::And
            | Operation::Or
            | Operation::Xor
            | Operation::Shl
            | Operation::Shr
            | Operation::Shra => {
                let b = pop!();
                let a = pop!();
                let o = match op {
                    Operation::Plus => {
                        stack.push(add(a, b));
                        continue;
                    }
                    Operation::Minus => Op::Sub,
                    Operation::Mul => Op::Mul,
                    Operation::And => Op::And,
                    Operation::Or => Op::Or,
                    Operation::Xor => Op::Xor,
                    Operation::Shl => Op::Shl,
                    Operation::Shr => Op::Shr,
                    _ => Op::Shra,
                };
                stack.push(Sym::Bin(o, Box::new(a), Box::new(b)));
            }
            Operation::Neg => {
                let a = pop!();
                stack.push(Sym::Bin(Op::Sub, Box::new(Sym::Const(0)), Box::new(a)));
            }
            Operation::Not => {
                let a = pop!();
                stack.push(Sym::Bin(Op::Xor, Box::new(a), Box::new(Sym::Const(-1))));
            }
            Operation::Deref { size, space: false, .. } => {
                let a = pop!();
                stack.push(Sym::Deref(Box::new(a), size));
            }
            Operation::Drop => {
                pop!();
            }
            Operation::Pick { index } => {
                let Some(v) = stack.len().checked_sub(1 + index as usize).map(|i| stack[i].clone()) else {
                    return unsupported("a location expression that picks past its stack");
                };
                if nodes(&v) > MAX_NODES / 2 {
                    return unsupported("a location expression too large to evaluate");
                }
                stack.push(v);
            }
            Operation::Swap => {
                let b = pop!();
                let a = pop!();
                stack.push(b);
                stack.push(a);
            }
            Operation::StackValue => {
                let v = pop!();
                result = Some(Location::Value(v));
            }
            Operation::ImplicitValue { data } => {
                let bytes = data.to_slice().map(|s| s.to_vec()).unwrap_or_default();
                if bytes.len() > 8 {
                    return unsupported("an implicit value wider than 8 bytes");
                }
                let mut b = [0u8; 8];
                b[..bytes.len()].copy_from_slice(&bytes);
                result = Some(Location::Value(Sym::Const(i64::from_le_bytes(b))));
            }
            Operation::EntryValue { expression } => {
                let mut inner = gimli::Expression(expression).operations(encoding);
                match (inner.next(), inner.next()) {
                    (Ok(Some(Operation::Register { register })), Ok(None)) => stack.push(Sym::Entry(register.0)),
                    _ => return unsupported("an entry value other than a register's"),
                }
            }
            Operation::Piece { size_in_bits, bit_offset } => {
                if bit_offset.is_some_and(|b| b != 0) || size_in_bits % 8 != 0 {
                    return unsupported("a piece that is not whole bytes");
                }
                let loc = match (result.take(), stack.pop()) {
                    (Some(l), _) => l,
                    (None, Some(s)) => Location::Memory(s),
                    (None, None) => Location::Unavailable,
                };
                pieces.push((size_in_bits / 8, loc));
                stack.clear();
            }
            Operation::Nop => {}
            Operation::ImplicitPointer { .. } => return unsupported("a pointer optimised into an implicit pointer"),
            Operation::TLS => return unsupported("a thread-local variable"),
            _ => return unsupported("a location expression operation this tracer does not evaluate"),
        }
    }
    if !pieces.is_empty() {
        if pieces.len() == 1 {
            return pieces.pop().map(|p| p.1).unwrap_or(Location::Unavailable);
        }
        return Location::Pieces(pieces);
    }
    match (result, stack.pop()) {
        (Some(l), _) => l,
        (None, Some(s)) => Location::Memory(s),
        // An empty expression: optimised out.
        (None, None) => Location::Unavailable,
    }
}
