//! Unwind rows for our own code in the target (trampolines, the compiled
//! handlers, the runtime library), read off its machine code: where the
//! stack pointer of the frame it serves is, at every instruction. The
//! profiler's unwinder ([`crate::owncode`]) steps out of a sample taken
//! there with them; none of this code has CFI of its own.
//!
//! A piece of code is analysed from its entry, with the stack pointer
//! then at a known offset from `E`, the stack pointer of the frame to
//! resume (a function's caller after its `ret`; a trampoline's probed
//! site). Every path through it is followed (branches, not a linear
//! sweep, so that code after a `ret` gets the state of the branch that
//! reaches it) while the stack pointer moves by pushes, pops, `sub`/`add`/
//! `lea` on rsp, and through copies in rbx or rbp (`mov rbx, rsp; and rsp,
//! -16` aligns the stack of a full trampoline, whose two pushes of rbx
//! then keep `E` findable from rsp alone: handlers change rbx). Anything
//! else that writes rsp makes the rest unknown: the unwinder stops there
//! and says so (the stack is counted as not unwound to its root), rather
//! than guess.

use crate::frames::{Cfa, Fp, Ra, Row};

/// No link register: a call pushes the return address.
pub const LINK_REGISTER: Option<usize> = None;
/// A called function's stack pointer at its entry against `E`: its return
/// address pushed.
pub const CALLED_ENTRY: i64 = -8;

/// A return trampoline's rows: as any code's, from its entry.
pub fn return_rows(code: &[u8], at: u64) -> Vec<Row> {
    rows(code, at, 0, None)
}
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};
use std::collections::BTreeMap;
use telco_abi::arch::x86_64 as r;

/// The stack pointer against `E`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sp {
    /// rsp = E + v.
    At(i64),
    /// rsp = A + d for an aligned A no one knows; `slot` (s, k): the word
    /// at A + s holds E + k.
    Aligned {
        d: i64,
        slot: Option<(i64, i64)>,
    },
    /// A call into this same piece returned (the trampoline called the
    /// probed function): the frame to resume is its caller, at rsp + k,
    /// and the return address is the one the shadow stack recorded.
    Returned(i64),
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    sp: Sp,
    /// rbx, rbp as E + k (copies of the stack pointer).
    rbx: Option<i64>,
    rbp: Option<i64>,
    /// Where the frame's own rbp is: still in rbp, or saved at E + k.
    fp: Fp,
}

impl State {
    fn row(&self, off: u32) -> Row {
        let cfa = match self.sp {
            Sp::At(v) => Cfa::Sp(-v),
            Sp::Aligned { d, slot: Some((s, k)) } => Cfa::Deref(s - d, -k),
            Sp::Aligned { .. } | Sp::Unknown => match (self.rbp, self.rbx) {
                (Some(k), _) => Cfa::Fp(-k),
                (None, Some(k)) if matches!(self.sp, Sp::Aligned { .. }) => Cfa::Reg(r::RBX, -k),
                _ => Cfa::Unknown,
            },
            Sp::Returned(k) => Cfa::Returned(k),
        };
        Row { off, cfa, fp: self.fp, ra: Ra::At(-8) }
    }
}

/// The rows of the code at `at` (`code`, decoded whole: our code has no
/// data between instructions), entered at its start with rsp = E +
/// `entry` (0 for a trampoline, -8 for a called function). A call into
/// `intra` (the piece itself, and what follows it: a trampoline calling
/// its relocated instructions) returns with the probed call done. One row
/// per instruction, by offset; instructions no path reaches get
/// [`Cfa::Unknown`].
pub fn rows(code: &[u8], at: u64, entry: i64, intra: Option<std::ops::Range<u64>>) -> Vec<Row> {
    let mut list: Vec<Instruction> = Vec::new();
    let mut index: BTreeMap<u64, usize> = BTreeMap::new();
    for ins in Decoder::with_ip(64, code, at, DecoderOptions::NONE) {
        if ins.is_invalid() {
            break;
        }
        index.insert(ins.ip(), list.len());
        list.push(ins);
    }
    let mut info = iced_x86::InstructionInfoFactory::new();
    let mut states: Vec<Option<State>> = vec![None; list.len()];
    let start = State { sp: Sp::At(entry), rbx: None, rbp: None, fp: Fp::Same };
    let mut todo = vec![(0usize, start)];
    while let Some((i, s)) = todo.pop() {
        if i >= list.len() || states[i].is_some() {
            continue;
        }
        states[i] = Some(s);
        let ins = &list[i];
        let next = step(ins, s, &intra, &mut info);
        let fallthrough = i + 1;
        let target = || index.get(&ins.near_branch_target()).copied();
        match ins.flow_control() {
            FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall => todo.push((fallthrough, next)),
            FlowControl::ConditionalBranch => {
                todo.push((fallthrough, next));
                if let Some(t) = target() {
                    todo.push((t, next));
                }
            }
            FlowControl::UnconditionalBranch => {
                if let Some(t) = target() {
                    todo.push((t, next));
                }
            }
            // ret, jmp through a register (a tail call), int3, ud2.
            _ => {}
        }
    }
    list.iter()
        .zip(&states)
        .map(|(ins, s)| {
            let off = (ins.ip() - at) as u32;
            match s {
                Some(s) => s.row(off),
                None => Row { off, cfa: Cfa::Unknown, fp: Fp::Same, ra: Ra::At(-8) },
            }
        })
        .collect()
}

/// The state after `ins` (on the path that goes on).
fn step(
    ins: &Instruction,
    mut s: State,
    intra: &Option<std::ops::Range<u64>>,
    info: &mut iced_x86::InstructionInfoFactory,
) -> State {
    let op0 =
        if ins.op_count() > 0 && ins.op0_kind() == OpKind::Register { ins.op0_register() } else { Register::None };
    let op1 =
        if ins.op_count() > 1 && ins.op1_kind() == OpKind::Register { ins.op1_register() } else { Register::None };
    let imm = || (ins.op_count() > 1 && is_immediate(ins.op1_kind())).then(|| ins.immediate(1) as i64);
    let moved = |sp: Sp, by: i64| match sp {
        Sp::At(v) => Sp::At(v + by),
        Sp::Aligned { d, slot } => Sp::Aligned { d: d + by, slot },
        Sp::Returned(k) => Sp::Returned(k - by),
        Sp::Unknown => Sp::Unknown,
    };
    match ins.mnemonic() {
        Mnemonic::Call => {
            let t = ins.near_branch_target();
            if intra.as_ref().is_some_and(|r| (r.start..=r.end).contains(&t)) {
                // The probed function, called from its trampoline: when it
                // returns, rsp is its caller's again.
                s.sp = if matches!(s.sp, Sp::At(_)) { Sp::Returned(0) } else { Sp::Unknown };
            }
            // Callees keep rsp, rbx and rbp (System V).
            return s;
        }
        Mnemonic::Push | Mnemonic::Pushfq => {
            s.sp = moved(s.sp, -8);
            if op0 == Register::RBP && s.fp == Fp::Same {
                if let Sp::At(v) = s.sp {
                    s.fp = Fp::At(v);
                }
            }
            if op0 == Register::RBX {
                if let (Sp::Aligned { d, .. }, Some(k)) = (s.sp, s.rbx) {
                    s.sp = Sp::Aligned { d, slot: Some((d, k)) };
                }
            }
            return s;
        }
        Mnemonic::Pop | Mnemonic::Popfq => {
            if op0 == Register::RBP {
                if let (Sp::At(v), Fp::At(at)) = (s.sp, s.fp) {
                    if v == at {
                        s.fp = Fp::Same;
                    }
                }
                s.rbp = None;
            }
            if op0 == Register::RBX {
                s.rbx = None;
            }
            if op0 == Register::RSP {
                s.sp = Sp::Unknown;
                return s;
            }
            s.sp = moved(s.sp, 8);
            return s;
        }
        Mnemonic::Leave => {
            // mov rsp, rbp; pop rbp
            s.sp = match s.rbp {
                Some(k) => Sp::At(k + 8),
                None => Sp::Unknown,
            };
            if let (Some(k), Fp::At(at)) = (s.rbp, s.fp) {
                if k == at {
                    s.fp = Fp::Same;
                }
            }
            s.rbp = None;
            return s;
        }
        _ => {}
    }
    if op0 == Register::RSP {
        s.sp = match (ins.mnemonic(), imm(), op1) {
            (Mnemonic::Sub, Some(n), _) => moved(s.sp, -n),
            (Mnemonic::Add, Some(n), _) => moved(s.sp, n),
            (Mnemonic::And, Some(_), _) => match s.sp {
                Sp::At(_) | Sp::Aligned { .. } => Sp::Aligned { d: 0, slot: None },
                _ => Sp::Unknown,
            },
            (Mnemonic::Mov, _, Register::RBX) => s.rbx.map_or(Sp::Unknown, Sp::At),
            (Mnemonic::Mov, _, Register::RBP) => s.rbp.map_or(Sp::Unknown, Sp::At),
            (Mnemonic::Lea, _, _) if ins.memory_index() == Register::None => {
                let disp = ins.memory_displacement64() as i64;
                match ins.memory_base() {
                    Register::RSP => moved(s.sp, disp),
                    Register::RBX => s.rbx.map_or(Sp::Unknown, |k| Sp::At(k + disp)),
                    Register::RBP => s.rbp.map_or(Sp::Unknown, |k| Sp::At(k + disp)),
                    _ => Sp::Unknown,
                }
            }
            _ => Sp::Unknown,
        };
        return s;
    }
    // Copies of rsp, and other writes to rbx and rbp.
    let sp_now = match s.sp {
        Sp::At(v) => Some(v),
        _ => None,
    };
    let copy = ins.mnemonic() == Mnemonic::Mov && op1 == Register::RSP;
    for (reg, value) in [(Register::RBX, &mut s.rbx), (Register::RBP, &mut s.rbp)] {
        if writes(info, ins, reg) {
            *value = if copy && op0 == reg { sp_now } else { None };
        }
    }
    s
}

fn is_immediate(k: OpKind) -> bool {
    matches!(
        k,
        OpKind::Immediate8
            | OpKind::Immediate8to16
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate16
            | OpKind::Immediate32
            | OpKind::Immediate32to64
            | OpKind::Immediate64
    )
}

/// Whether `ins` writes (any part of) `reg`.
fn writes(f: &mut iced_x86::InstructionInfoFactory, ins: &Instruction, reg: Register) -> bool {
    use iced_x86::OpAccess;
    f.info(ins).used_registers().iter().any(|u| {
        u.register().full_register() == reg
            && !matches!(u.access(), OpAccess::Read | OpAccess::CondRead | OpAccess::NoMemAccess)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::code_asm::*;

    fn asm(f: impl FnOnce(&mut CodeAssembler)) -> Vec<u8> {
        let mut a = CodeAssembler::new(64).unwrap();
        f(&mut a);
        a.assemble(0x1000).unwrap()
    }

    fn cfa_at(rows: &[Row], n: usize) -> Cfa {
        rows[n].cfa
    }

    #[test]
    fn a_function_frame_is_followed_through_pushes_and_rbp() {
        let code = asm(|a| {
            a.push(rbp).unwrap();
            a.mov(rbp, rsp).unwrap();
            a.sub(rsp, 0x20).unwrap();
            a.mov(rbx, 5u64).unwrap();
            a.mov(rsp, rbp).unwrap();
            a.pop(rbp).unwrap();
            a.ret().unwrap();
        });
        let rows = rows(&code, 0x1000, -8, Some(0x1000..0x1000 + code.len() as u64));
        assert_eq!(cfa_at(&rows, 0), Cfa::Sp(8));
        assert_eq!(cfa_at(&rows, 1), Cfa::Sp(16));
        assert_eq!(rows[1].fp, Fp::At(-16));
        assert_eq!(cfa_at(&rows, 3), Cfa::Sp(48));
        assert_eq!(cfa_at(&rows, 5), Cfa::Sp(16));
        assert_eq!(cfa_at(&rows, 6), Cfa::Sp(8));
        assert_eq!(rows[6].fp, Fp::Same);
    }

    #[test]
    fn code_after_a_ret_has_the_state_of_its_branch() {
        // test; je out; push rbx; pop rbx; ret; out: ret
        let code = asm(|a| {
            let mut out = a.create_label();
            a.test(rdi, rdi).unwrap();
            a.je(out).unwrap();
            a.push(rbx).unwrap();
            a.pop(rbx).unwrap();
            a.ret().unwrap();
            a.set_label(&mut out).unwrap();
            a.ret().unwrap();
        });
        let rows = rows(&code, 0x1000, -8, Some(0x1000..0x1000 + code.len() as u64));
        assert_eq!(cfa_at(&rows, 3), Cfa::Sp(16));
        assert_eq!(cfa_at(&rows, 5), Cfa::Sp(8));
    }

    #[test]
    fn an_aligned_stack_is_found_through_the_pushed_copy() {
        let code = asm(|a| {
            a.lea(rsp, ptr(rsp - 0x100)).unwrap();
            a.mov(rbx, rsp).unwrap();
            a.and(rsp, -16).unwrap();
            a.push(rbx).unwrap();
            a.push(rbx).unwrap();
            a.call(0x9000u64).unwrap();
            a.mov(rsp, rbx).unwrap();
            a.lea(rsp, ptr(rsp + 0x100)).unwrap();
            a.jmp(0x8000u64).unwrap();
        });
        let rows = rows(&code, 0x1000, 0, Some(0x1000..0x1000 + code.len() as u64));
        assert_eq!(cfa_at(&rows, 1), Cfa::Sp(0x100));
        // After `and`: rbx holds E - 0x100 (first frame only).
        assert_eq!(cfa_at(&rows, 3), Cfa::Reg(r::RBX, 0x100));
        // After the pushes: [rsp] = E - 0x100.
        assert_eq!(cfa_at(&rows, 5), Cfa::Deref(0, 0x100));
        assert_eq!(cfa_at(&rows, 6), Cfa::Deref(0, 0x100));
        assert_eq!(cfa_at(&rows, 7), Cfa::Sp(0x100));
        assert_eq!(cfa_at(&rows, 8), Cfa::Sp(0));
    }

    #[test]
    fn a_call_into_the_piece_returns_to_the_callers_frame() {
        let code = asm(|a| {
            let mut reloc = a.create_label();
            a.lea(rsp, ptr(rsp + 8)).unwrap();
            a.call(reloc).unwrap();
            a.jmp(0x8000u64).unwrap();
            a.set_label(&mut reloc).unwrap();
            a.zero_bytes().unwrap();
        });
        let rows = rows(&code, 0x1000, 0, Some(0x1000..0x1000 + code.len() as u64));
        assert_eq!(cfa_at(&rows, 1), Cfa::Sp(-8));
        assert_eq!(cfa_at(&rows, 2), Cfa::Returned(0));
    }

    #[test]
    fn unknown_writes_to_rsp_stop_the_rows() {
        let code = asm(|a| {
            a.mov(rsp, qword_ptr(rdi)).unwrap();
            a.ret().unwrap();
        });
        let rows = rows(&code, 0x1000, -8, Some(0x1000..0x1000 + code.len() as u64));
        assert_eq!(cfa_at(&rows, 1), Cfa::Unknown);
    }
}

/// The runtime library and compiled handlers: every instruction any path
/// reaches from a function's entry has a row.
#[cfg(test)]
mod blob {
    use super::*;

    #[test]
    fn every_function_of_a_blob_has_rows() {
        let script = r#"
            global counts, total, s, d
            probe begin {
                counts["a", 1]++
                total <<< 5
                s = sprintf("%s %d %x", execname(), tid(), pid())
                if (strlen(s) > 3) printf("%s\n", substr(s, 1, 2))
                try { x = 1 / d } catch (e) { println(e) }
            }
            probe timer.profile { counts[execname(), tid()]++; total <<< uaddr(); print_ubacktrace() }
            probe end { foreach ([a, b] in counts-) println(a); print(@hist_log(total)) }
        "#;
        let a = telco_compiler::codegen::compile_text("rows.tp", script).unwrap_or_else(|e| panic!("{e}"));
        let mut unknown = Vec::new();
        for sym in &a.symbols {
            let (lo, hi) = (sym.offset as usize, (sym.offset + sym.size) as usize);
            let code = &a.code[lo..hi];
            let rows = rows(code, lo as u64, -8, None);
            let listing: Vec<Instruction> =
                Decoder::with_ip(64, code, lo as u64, DecoderOptions::NONE).into_iter().collect();
            // The last way out: what follows is padding (or constants).
            let last = listing
                .iter()
                .rposition(|i| {
                    matches!(
                        i.flow_control(),
                        FlowControl::Return | FlowControl::UnconditionalBranch | FlowControl::IndirectBranch
                    )
                })
                .unwrap_or(listing.len());
            for (r, ins) in rows.iter().zip(&listing).take(last + 1) {
                // Only a trap or padding can be out of every path's reach.
                if r.cfa == Cfa::Unknown && !matches!(ins.mnemonic(), Mnemonic::Int3 | Mnemonic::Ud2 | Mnemonic::Nop) {
                    unknown.push(format!("{} +{:#x}: {ins}", sym.name, ins.ip() - lo as u64));
                }
            }
        }
        assert!(unknown.is_empty(), "{} instructions without a row:\n{}", unknown.len(), unknown.join("\n"));
    }
}
