//! How a function is entered, read from its first instructions (aarch64):
//! whether the value in x30 (the link register) when it starts is a return
//! address it only saves and returns through.
//!
//! A return probe takes that value over (x30 is set to a trampoline's
//! address at the entry, and the function returns there), which is only
//! right when the function was entered by a `bl`/`blr` and treats x30 as
//! its way back: it may save it in its frame (`stp x29, x30, [sp, #-N]!`,
//! `str x30, [sp, ...]`), sign and authenticate it (`paciasp`, `autiasp`),
//! restore it and `ret`. Anything else that reads x30 while it holds the
//! return address uses it as data: `__builtin_return_address` (`mov x0,
//! x30`), `setjmp` (`eor x4, x30, x3`: its pointer-mangled copy goes into
//! the `jmp_buf`), `getcontext` (`str x30, [x0, ...]`: a store anywhere but
//! the stack), a load of the frame's saved copy. The ELF entry point
//! (`_start`) zeroes x30 before saving anything, and so discards it; a
//! `vfork` (clone with `CLONE_VFORK`) returns twice through the same x30,
//! the child first, in the parent's memory. Such functions are found here
//! so that pass 2 can refuse their return probes (their entry probes are
//! harmless).
//!
//! The instructions are read in order, up to the first branch, call or
//! return, following the stack pointer (and x29, once set from it) to know
//! where the frame keeps its copy of x30; where sp is set in a way it
//! cannot follow, the reading stops.

use super::{decode, pc_offset, word_at};
use yaxpeax_arm::armv8::a64::{Instruction, Opcode, Operand, SizeCode};

/// Instructions read from a function's start before giving up: the frame
/// is built (or x30 used) within the first few.
const WINDOW: usize = 24;

/// The link register, the frame pointer, and register 31 (sp where an
/// operand allows it).
const LR: u16 = 30;
const FP: u16 = 29;
const SP: u16 = 31;

/// `clone`'s system call number (asm-generic, aarch64's table) and the
/// flag that makes it a `vfork`.
const SYS_CLONE: u64 = 220;
const CLONE_VFORK: u64 = 0x4000;

/// Why a function cannot take a return probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoReturnAddress {
    /// The ELF entry point: entered by the kernel with no return address.
    ElfEntry,
    /// Its instruction at this offset overwrites x30 before saving it: the
    /// return address is discarded (the x86_64 name: it pops it).
    Pops(u64),
    /// Its instruction at this offset reads the return address (x30, or
    /// the frame's copy of it) as data.
    Uses(u64),
    /// Code of V8's embedded builtins (node, Chromium): V8 walks their
    /// frames by return address.
    V8Builtin,
    /// Its system call at this offset is a `vfork`: the child returns
    /// through x30 first, in its parent's memory, then the parent does.
    Vfork(u64),
}

impl std::fmt::Display for NoReturnAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoReturnAddress::ElfEntry => {
                f.write_str("it is the program's ELF entry point, entered by the kernel without a return address")
            }
            NoReturnAddress::Pops(at) => write!(
                f,
                "its instruction at +{at:#x} overwrites its return address (x30) before saving it (it does not \
                 return by `ret` to its caller)"
            ),
            NoReturnAddress::Uses(at) => {
                write!(f, "its instruction at +{at:#x} uses its return address (x30) as data")
            }
            NoReturnAddress::V8Builtin => f.write_str(
                "it is one of V8's embedded builtins, whose frames V8 walks by their return addresses \
                 (which a return probe takes over)",
            ),
            NoReturnAddress::Vfork(at) => write!(
                f,
                "its system call at +{at:#x} is a vfork: the child returns through the same return address \
                 as its parent, in the parent's memory"
            ),
        }
    }
}

/// Whether `code`, the first bytes of a function at link address `addr`,
/// uses the return address in x30 other than by saving it in its frame and
/// returning through it. Reads instructions in order until the first
/// branch, call or return, or until the stack pointer is set in a way it
/// cannot follow; `None` when nothing seen uses it.
pub fn return_address_use(code: &[u8], addr: u64) -> Option<NoReturnAddress> {
    match analyze(code, addr) {
        Seen::Uses(why) => Some(why),
        _ => None,
    }
}

/// Where a function that starts with a tail jump goes, x30 and the stack
/// as the caller left them (`_setjmp`: `mov x1, #0; b __sigsetjmp+4`, past
/// its landing pad): the code there reads the same return address.
pub fn tail_jump(code: &[u8], addr: u64) -> Option<u64> {
    match analyze(code, addr) {
        Seen::TailJump(to) => Some(to),
        _ => None,
    }
}

enum Seen {
    Uses(NoReturnAddress),
    TailJump(u64),
    Nothing,
}

/// What is known at an instruction, from the entry on.
struct State {
    /// sp minus its value at the entry.
    sp: i64,
    /// x29 minus the entry's sp, once set from sp.
    fp: Option<i64>,
    /// x30 still holds the return address.
    live: bool,
    /// Where the frame saved x30 (minus the entry's sp).
    saved: Option<i64>,
    /// Constants in x0 and x8 (a system call's first argument and number).
    x0: Option<u64>,
    x8: Option<u64>,
}

fn analyze(code: &[u8], addr: u64) -> Seen {
    use Seen::Nothing;
    let mut st = State { sp: 0, fp: None, live: true, saved: None, x0: None, x8: None };
    for k in 0..WINDOW {
        let at = 4 * k as u64;
        let Some(ins) = word_at(code, 4 * k).and_then(decode) else { return Nothing };
        let uses = |st: &State| if st.live { Seen::Uses(NoReturnAddress::Uses(at)) } else { Nothing };
        match ins.opcode {
            // Hints (`nop`, `bti`) and the instructions that sign,
            // authenticate or strip x30 in place.
            Opcode::HINT
            | Opcode::PACIASP
            | Opcode::PACIBSP
            | Opcode::PACIAZ
            | Opcode::PACIBZ
            | Opcode::AUTIASP
            | Opcode::AUTIBSP
            | Opcode::AUTIAZ
            | Opcode::AUTIBZ
            | Opcode::XPACLRI => continue,
            Opcode::PACIA | Opcode::PACIB | Opcode::AUTIA | Opcode::AUTIB | Opcode::XPACI
                if gpr(&ins.operands[0]) == Some(LR) =>
            {
                continue
            }
            // Returning through x30 (or another register): the end.
            Opcode::RET | Opcode::RETAA | Opcode::RETAB => return Nothing,
            Opcode::BR | Opcode::BRAA | Opcode::BRAB | Opcode::BRAAZ | Opcode::BRABZ => return Nothing,
            Opcode::B => {
                return match pc_offset(&ins) {
                    Some(d) if st.live && st.sp == 0 => Seen::TailJump((addr + at).wrapping_add(d as u64)),
                    _ => Nothing,
                };
            }
            Opcode::BL
            | Opcode::BLR
            | Opcode::BLRAA
            | Opcode::BLRAAZ
            | Opcode::BLRAB
            | Opcode::BLRABZ
            | Opcode::Bcc(_)
            | Opcode::BCcc(_)
            | Opcode::CBZ
            | Opcode::CBNZ
            | Opcode::TBZ
            | Opcode::TBNZ
            | Opcode::ERET
            | Opcode::ERETAA
            | Opcode::ERETAB
            | Opcode::BRK
            | Opcode::HLT
            | Opcode::UDF
            | Opcode::HVC
            | Opcode::SMC => {
                // `blr x30`, `cbz x30, ...`: reading it on the way out.
                return if reads_lr(&ins) { uses(&st) } else { Nothing };
            }
            Opcode::SVC => {
                if st.x8 == Some(SYS_CLONE) && st.x0.is_some_and(|flags| flags & CLONE_VFORK != 0) {
                    return Seen::Uses(NoReturnAddress::Vfork(at));
                }
                st.x0 = None;
                continue;
            }
            _ => {}
        }
        let step = if let Some(m) = ins.operands.iter().position(is_memory) {
            memory(&mut st, &ins, m)
        } else {
            compute(&mut st, &ins)
        };
        match step {
            Step::Next => {}
            Step::Stop => return Nothing,
            Step::Uses => return uses(&st),
            Step::Overwrites => return Seen::Uses(NoReturnAddress::Pops(at)),
        }
    }
    Nothing
}

enum Step {
    Next,
    /// sp is set in a way not followed.
    Stop,
    /// x30 is read as data (if it still holds the return address).
    Uses,
    /// x30 is overwritten before the return address was saved.
    Overwrites,
}

/// A general register's number (31: sp or the zero register, by operand
/// kind).
fn gpr(o: &Operand) -> Option<u16> {
    match *o {
        Operand::Register(_, r) | Operand::RegisterOrSP(_, r) => Some(r),
        _ => None,
    }
}

fn is_memory(o: &Operand) -> bool {
    matches!(
        o,
        Operand::RegPreIndex(..) | Operand::RegPostIndex(..) | Operand::RegRegOffset(..) | Operand::RegPostIndexReg(..)
    )
}

/// Whether any operand names x30 (as a value, an address part or a
/// shifted register) other than as the destination `op0` of an
/// instruction that only writes it.
fn reads_lr(i: &Instruction) -> bool {
    i.operands.iter().enumerate().any(|(n, o)| match *o {
        Operand::Register(_, r) | Operand::RegisterOrSP(_, r) => r == LR && (n > 0 || reads_op0(i.opcode)),
        Operand::RegisterPair(_, r) => r == LR || r + 1 == LR,
        Operand::RegShift(_, _, _, r) => r == LR,
        Operand::RegRegOffset(b, x, ..) | Operand::RegPostIndexReg(b, x) => b == LR || x == LR,
        Operand::RegPreIndex(b, ..) | Operand::RegPostIndex(b, _) => b == LR,
        _ => false,
    })
}

/// Instructions whose first operand is read (as well as, or instead of,
/// written).
fn reads_op0(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::MOVK
            | Opcode::BFM
            | Opcode::CCMP
            | Opcode::CCMN
            | Opcode::BR
            | Opcode::BLR
            | Opcode::CBZ
            | Opcode::CBNZ
            | Opcode::TBZ
            | Opcode::TBNZ
            | Opcode::PACIA
            | Opcode::PACIB
            | Opcode::AUTIA
            | Opcode::AUTIB
    )
}

/// A register-to-register instruction: x30, sp, x29 and the constants.
fn compute(st: &mut State, i: &Instruction) -> Step {
    if reads_lr(i) && st.live {
        return Step::Uses;
    }
    let dest = match i.operands[0] {
        // Register 31 as a plain register is the zero register.
        Operand::Register(_, r) if r != SP => r,
        Operand::RegisterOrSP(_, r) => r,
        _ => return Step::Next,
    };
    // A conditional compare's first operand is only read.
    if matches!(i.opcode, Opcode::CCMP | Opcode::CCMN) {
        return Step::Next;
    }
    // An immediate `add`/`sub` operand (`#imm` or `#imm, lsl #12`).
    let imm = match (i.opcode, i.operands[2]) {
        (Opcode::ADD | Opcode::SUB, Operand::Immediate(v)) => Some(i64::from(v)),
        (Opcode::ADD | Opcode::SUB, Operand::ImmShift(v, s)) => Some(i64::from(v) << s),
        _ => None,
    }
    .map(|v| if i.opcode == Opcode::SUB { -v } else { v });
    let from = match i.operands[1] {
        Operand::RegisterOrSP(SizeCode::X, r) => Some(r),
        _ => None,
    };
    match dest {
        LR => {
            if st.live && st.saved.is_none() {
                return Step::Overwrites;
            }
            st.live = false;
        }
        SP => match (from, imm) {
            (Some(SP), Some(v)) => st.sp += v,
            (Some(FP), Some(v)) => match st.fp {
                Some(f) => st.sp = f + v,
                None => return Step::Stop,
            },
            _ => return Step::Stop,
        },
        FP => {
            st.fp = match (from, imm) {
                (Some(SP), Some(v)) => Some(st.sp + v),
                _ => None,
            }
        }
        0 => st.x0 = constant(i, st.x0),
        8 => st.x8 = constant(i, st.x8),
        _ => {}
    }
    Step::Next
}

/// The value a `mov`-like instruction leaves in its destination (which
/// held `old`): `movz`, `movn`, `movk`, `orr` from the zero register.
fn constant(i: &Instruction, old: Option<u64>) -> Option<u64> {
    match (i.opcode, i.operands[1], i.operands[2]) {
        (Opcode::MOVZ, Operand::ImmShift(v, s), _) => Some(u64::from(v) << s),
        (Opcode::MOVN, Operand::ImmShift(v, s), _) => Some(!(u64::from(v) << s)),
        (Opcode::MOVK, Operand::ImmShift(v, s), _) => old.map(|o| (o & !(0xffff << s)) | (u64::from(v) << s)),
        (Opcode::ORR, Operand::Register(_, SP), Operand::Imm64(v)) => Some(v),
        _ => None,
    }
}

/// A load or store (operand `m` is its address): saves of x30 on the
/// stack, loads of the saved copy, and sp moved by write-back.
fn memory(st: &mut State, i: &Instruction, m: usize) -> Step {
    let (base, off, post, writeback) = match i.operands[m] {
        Operand::RegPreIndex(b, off, wb) => (b, i64::from(off), false, wb),
        Operand::RegPostIndex(b, off) => (b, i64::from(off), true, true),
        Operand::RegRegOffset(b, x, ..) => {
            if x == LR && st.live {
                return Step::Uses;
            }
            (b, 0, false, false)
        }
        Operand::RegPostIndexReg(b, _) if b == SP => return Step::Stop,
        Operand::RegPostIndexReg(b, x) => {
            if x == LR && st.live {
                return Step::Uses;
            }
            (b, 0, true, false)
        }
        _ => return Step::Next,
    };
    if base == LR && st.live {
        return Step::Uses;
    }
    // The address accessed, from the entry's sp, where it is known.
    let at = match base {
        SP => Some(st.sp + if post { 0 } else { off }),
        FP => st.fp.map(|f| f + if post { 0 } else { off }),
        _ => None,
    };
    let regs: Vec<(usize, SizeCode, u16)> = i.operands[..m]
        .iter()
        .enumerate()
        .filter_map(|(n, o)| match *o {
            Operand::Register(size, r) => Some((n, size, r)),
            _ => None,
        })
        .collect();
    let step = match kind(i.opcode) {
        Access::Store => {
            // Its registers (all before the address) are stored, one word
            // after another.
            let mut step = Step::Next;
            for (k, &(_, size, r)) in regs.iter().enumerate() {
                if r != LR || !st.live {
                    continue;
                }
                match (base, size) {
                    (SP, SizeCode::X) => st.saved = at.map(|a| a + 8 * k as i64),
                    _ => step = Step::Uses,
                }
            }
            step
        }
        Access::Load => {
            let mut step = Step::Next;
            for (k, &(_, size, r)) in regs.iter().enumerate() {
                let width = if size == SizeCode::X { 8 } else { 4 };
                let word = at.map(|a| a + width * k as i64);
                let of_slot = matches!((word, st.saved), (Some(w), Some(s)) if w < s + 8 && s < w + width);
                match r {
                    LR if st.live && st.saved.is_none() => return Step::Overwrites,
                    LR => st.live = of_slot && size == SizeCode::X && word == st.saved,
                    _ if of_slot => step = Step::Uses,
                    FP => st.fp = None,
                    0 => st.x0 = None,
                    8 => st.x8 = None,
                    _ => {}
                }
            }
            step
        }
        // Exclusive stores write a status register first; atomics read and
        // write. x30 in either is data.
        Access::Other => {
            if regs.iter().any(|&(_, _, r)| r == LR) && st.live {
                return Step::Uses;
            }
            for &(_, _, r) in &regs {
                match r {
                    LR => st.live = false,
                    FP => st.fp = None,
                    0 => st.x0 = None,
                    8 => st.x8 = None,
                    _ => {}
                }
            }
            Step::Next
        }
    };
    if !matches!(step, Step::Next) {
        return step;
    }
    if writeback {
        match base {
            SP => st.sp += off,
            FP => st.fp = st.fp.map(|f| f + off),
            _ => {}
        }
    }
    Step::Next
}

enum Access {
    Store,
    Load,
    Other,
}

/// Which way a memory instruction moves its registers.
fn kind(op: Opcode) -> Access {
    use Opcode::*;
    match op {
        STR | STRB | STRH | STRW | STUR | STURB | STURH | STP | STNP | STTR | STTRB | STTRH | STLR | STLLR | STLRB
        | STLLRB | STLRH | STLLRH | STLUR | STLURB | STLURH => Access::Store,
        LDR | LDRB | LDRH | LDRSB | LDRSH | LDRSW | LDUR | LDURB | LDURH | LDURSB | LDURSH | LDURSW | LDP | LDPSW
        | LDNP | LDTR | LDTRB | LDTRH | LDTRSB | LDTRSH | LDTRSW | LDAR | LDARB | LDARH | LDLAR | LDLARB | LDLARH
        | LDAPR | LDAPRB | LDAPRH | LDAPUR | LDAPURB | LDAPURH | LDAPURSB | LDAPURSH | LDAPURSW | LDXR | LDXRB
        | LDXRH | LDXP | LDAXR | LDAXRB | LDAXRH | LDAXP | LDRAA | LDRAB => Access::Load,
        _ => Access::Other,
    }
}

/// The length of Go's stack-bound check at the entry of a Go function
/// (`code`, its first bytes), compiled for Go's register ABI with `g` in
/// x28 (cmd/internal/obj/arm64/obj7.go, `stacksplit`), in its three
/// shapes, each starting with `ldr x16, [x28, #16]` (`g.stackguard0`):
///
/// * a small frame: `cmp sp, x16; b.ls morestack`;
/// * a large one: `sub x17, sp, #N; cmp x17, x16; b.ls morestack`;
/// * a huge one: `mov x27, #N` (and `movk`s); `subs x17, sp, x27;
///   b.lo morestack; cmp x17, x16; b.ls morestack`.
///
/// Its trampoline runs these first and runs the probe only when the check
/// passes, so a call whose stack grows (`morestack` starts the function
/// again) fires once; and the check proves that x28 is `g` there. Err: why
/// the function has no such check (Go's assembly, a leaf too small to
/// check its stack).
pub fn go_stack_check(code: &[u8]) -> Result<u8, String> {
    let none = "its entry is not Go's stack-bound check on x28 (`ldr x16, [x28, #16]; cmp sp, x16; b.ls`): an \
                assembly function, or a leaf too small for Go to check its stack";
    let words: Vec<u32> = code.chunks_exact(4).take(8).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
    go_check_words(&words).map(|n| (4 * n) as u8).ok_or_else(|| none.to_string())
}

/// The number of words of Go's stack-bound check at the start of `w`.
fn go_check_words(w: &[u32]) -> Option<usize> {
    const LDR_GUARD: u32 = 0xf940_0b90; // ldr x16, [x28, #16]
    const CMP_SP: u32 = 0xeb30_63ff; // cmp sp, x16
    const CMP_X17: u32 = 0xeb10_023f; // cmp x17, x16
    const SUBS_X17: u32 = 0xeb3b_63f1; // subs x17, sp, x27
    let b_cond = |w: u32, cond: u32| w & 0xff00_001f == 0x5400_0000 | cond;
    let (ls, lo) = (9, 3);
    if *w.first()? != LDR_GUARD {
        return None;
    }
    let mut i = 1;
    match *w.get(1)? {
        CMP_SP => i += 1,
        // sub x17, sp, #N (N shifted by 12 or not)
        x if x & 0xff80_03ff == 0xd100_03f1 => {
            (*w.get(2)? == CMP_X17).then_some(())?;
            i += 2;
        }
        // movz x27, #N, then movk x27s
        x if x & 0xff80_001f == 0xd280_001b => {
            i += 1;
            while w.get(i).is_some_and(|&x| x & 0xff80_001f == 0xf280_001b) {
                i += 1;
            }
            (*w.get(i)? == SUBS_X17 && b_cond(*w.get(i + 1)?, lo) && *w.get(i + 2)? == CMP_X17).then_some(())?;
            i += 3;
        }
        _ => return None,
    }
    b_cond(*w.get(i)?, ls).then_some(i + 1)
}

/// The returns of a Go function (its `code`, at link-time `addr`), each
/// as (its `ret`, 4): Go's epilogue (cmd/internal/obj/arm64/obj7.go) pops
/// the frame before every `ret` (`ldp x29, x30, [sp, #-8]; add sp, sp,
/// #N` or `ldur x29, [sp, #-8]; ldr x30, [sp], #N`), so at the `ret` the
/// stack pointer is where it was at the entry and x30 the return
/// address: the `ret` itself becomes a branch to the return probe's
/// trampoline. Err: why its returns cannot be probed (a `ret` not right
/// after a pop of the frame, a return through another register, a tail
/// jump out of the function).
pub fn go_epilogues(code: &[u8], addr: u64) -> Result<Vec<(u64, u8)>, String> {
    const RET: u32 = 0xd65f_03c0;
    let end = addr + code.len() as u64;
    let words: Vec<u32> = code.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let mut out = Vec::new();
    // `add sp, sp, #imm` (either shift), or `ldr x30, [sp], #imm`.
    let pops = |p: u32| p & 0xff80_03ff == 0x9100_03ff || p & 0xffe0_0fff == 0xf840_07fe;
    for (i, &w) in words.iter().enumerate() {
        let at = addr + 4 * i as u64;
        if w == RET {
            if !(i > 0 && pops(words[i - 1])) {
                return Err(format!(
                    "its return at {at:#x} is not after Go's epilogue (the frame popped into sp): a function \
                     without a frame"
                ));
            }
            out.push((at, 4));
        } else if w & 0xffff_fc1f == 0xd65f_0000 {
            return Err(format!("it returns through another register than x30 at {at:#x}"));
        } else if w & 0xfc00_0000 == 0x1400_0000 {
            // `b`: a tail jump when it leaves the function.
            let off = (((w & 0x03ff_ffff) << 6) as i32 >> 4) as i64;
            let to = at.wrapping_add_signed(off);
            if to < addr || to >= end {
                return Err(format!("it leaves by a tail jump at {at:#x} (to {to:#x}), not a return"));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// glibc 2.36's aarch64 `_start` (Scrt1.o): `nop; mov x29, #0; mov
    /// x30, #0; ...`.
    #[test]
    fn start_discards_x30() {
        let c = code(&[0xd503201f, 0xd280001d, 0xd280001e, 0xaa0003e5, 0xf94003e1]);
        assert_eq!(return_address_use(&c, 0x1000), Some(NoReturnAddress::Pops(8)));
    }

    /// glibc's `__sigsetjmp` (libc.so.6, aarch64): its mangled return
    /// address goes into the `jmp_buf` (`eor x4, x30, x3` at +0x24); and
    /// `getcontext` stores x30 into the context (`str x30, [x0, #424]`).
    #[test]
    fn setjmp_and_getcontext_read_x30() {
        let sigsetjmp = code(&[
            0xd503201f, // nop
            0xa9005013, // stp x19, x20, [x0]
            0xa9015815, // stp x21, x22, [x0, #16]
            0xa9026017, // stp x23, x24, [x0, #32]
            0xa9036819, // stp x25, x26, [x0, #48]
            0xa904701b, // stp x27, x28, [x0, #64]
            0xb0000b22, // adrp x2, ...
            0xf9471842, // ldr x2, [x2, #3632]
            0xf9400043, // ldr x3, [x2]
            0xca0303c4, // eor x4, x30, x3
            0xa905101d, // stp x29, x4, [x0, #80]
        ]);
        assert_eq!(return_address_use(&sigsetjmp, 0x3a4c0), Some(NoReturnAddress::Uses(0x24)));
        let getcontext = code(&[
            0xd503201f, // nop
            0xf9005c1f, // str xzr, [x0, #184]
            0xa914cc12, // stp x18, x19, [x0, #328]
            0xa915d414, // stp x20, x21, [x0, #344]
            0xa916dc16, // stp x22, x23, [x0, #360]
            0xa917e418, // stp x24, x25, [x0, #376]
            0xa918ec1a, // stp x26, x27, [x0, #392]
            0xa919f41c, // stp x28, x29, [x0, #408]
            0xf900d41e, // str x30, [x0, #424]
        ]);
        assert_eq!(return_address_use(&getcontext, 0), Some(NoReturnAddress::Uses(0x20)));
        // `stp x29, x30, [x0, #80]`: the pair into a buffer.
        assert_eq!(return_address_use(&code(&[0xa905781d]), 0), Some(NoReturnAddress::Uses(0)));
    }

    /// `_setjmp`: `nop; mov x1, #0; b __sigsetjmp+4`, at 0x3a480.
    #[test]
    fn a_tail_jump_is_followed_by_the_caller() {
        let c = code(&[0xd503201f, 0xd2800001, 0x1400000f]);
        assert!(return_address_use(&c, 0x3a480).is_none());
        assert_eq!(tail_jump(&c, 0x3a480), Some(0x3a4c4));
        // gcc's `return h(a + 1)`: bti c; add x0, x0, #1; b h.
        assert_eq!(tail_jump(&code(&[0xd503245f, 0x91000400, 0x14000010]), 0x80), Some(0xc8));
        // stp x29, x30, [sp, #-16]!; b: not the caller's stack.
        assert_eq!(tail_jump(&code(&[0xa9bf7bfd, 0x14000010]), 0), None);
    }

    /// glibc's `__vfork`: `mov x0, #0x4111; mov x1, sp; mov x8, #220; svc
    /// #0; ...; ret`; `clone`'s own wrapper is not one.
    #[test]
    fn vfork_is_refused() {
        let vfork =
            code(&[0xd503201f, 0xd2882220, 0x910003e1, 0xd2801b88, 0xd4000001, 0xb13ffc1f, 0x54000042, 0xd65f03c0]);
        assert_eq!(return_address_use(&vfork, 0), Some(NoReturnAddress::Vfork(0x10)));
        // fork-like: flags without CLONE_VFORK (mov x0, #0x11).
        let fork = code(&[0xd2800220, 0xd2801b88, 0xd4000001, 0xd65f03c0]);
        assert_eq!(return_address_use(&fork, 0), None);
        let clone =
            code(&[0xd503201f, 0xaa0003ea, 0xaa0203eb, 0xaa0303ec, 0x928002a0, 0xb40001aa, 0x927cec21, 0xb4000161]);
        assert_eq!(return_address_use(&clone, 0), None);
    }

    /// gcc -O2 -mbranch-protection=standard: `__builtin_return_address(0)`
    /// is `xpaclri; mov x0, x30`, or a copy kept across a call.
    #[test]
    fn builtin_return_address_uses_x30() {
        let ra =
            code(&[0xd503233f, 0xa9bf7bfd, 0xd50320ff, 0xaa1e03e0, 0x910003fd, 0xa8c17bfd, 0xd50323bf, 0xd65f03c0]);
        assert_eq!(return_address_use(&ra, 0), Some(NoReturnAddress::Uses(0xc)));
        let ra_frame = code(&[0xd503233f, 0xa9be7bfd, 0x910003fd, 0xf9000bf3, 0xaa1e03f3, 0x94000000]);
        assert_eq!(return_address_use(&ra_frame, 0), Some(NoReturnAddress::Uses(0x10)));
        // The frame's saved copy: stp x29, x30, [sp, #-16]!; mov x29, sp;
        // ldr x0, [x29, #8] (and the same through sp).
        let c = code(&[0xa9bf7bfd, 0x910003fd, 0xf94007a0]);
        assert_eq!(return_address_use(&c, 0), Some(NoReturnAddress::Uses(8)));
        let c = code(&[0xa9bf7bfd, 0xf94007e0]);
        assert_eq!(return_address_use(&c, 0), Some(NoReturnAddress::Uses(4)));
    }

    #[test]
    fn ordinary_prologues_are_fine() {
        // gcc's `normal`: paciasp; stp x29, x30, [sp, #-48]!; mov x29, sp;
        // stp x19, x20, [sp, #16]; mov x19, x0; str x21, [sp, #32];
        // mov x21, x1; bl g.
        let c = code(&[0xd503233f, 0xa9bd7bfd, 0x910003fd, 0xa90153f3, 0xaa0003f3, 0xf90013f5, 0xaa0103f5, 0x94000000]);
        assert_eq!(return_address_use(&c, 0), None);
        // A leaf: bti c; add x0, x0, x0, lsl #1; add x0, x0, #1; ret.
        assert_eq!(return_address_use(&code(&[0xd503245f, 0x8b000400, 0x91000400, 0xd65f03c0]), 0), None);
        // Saved, restored, returned: stp; ldp x29, x30, [sp], #16; autiasp; ret.
        let c = code(&[0xd503233f, 0xa9bf7bfd, 0xa8c17bfd, 0xd50323bf, 0xd65f03c0]);
        assert_eq!(return_address_use(&c, 0), None);
        // str x30, [sp, #-16]!; ldr x0, [sp, #16] (a stack argument); ret.
        let c = code(&[0xf81f0ffe, 0xf9400be0, 0xd65f03c0]);
        assert_eq!(return_address_use(&c, 0), None);
        // sub sp, sp, #0x20; stp x29, x30, [sp, #16]; ... ldr x0, [sp, #16] reads x29's copy.
        let c = code(&[0xd10083ff, 0xa9017bfd, 0xf9400be0, 0xd65f03c0]);
        assert_eq!(return_address_use(&c, 0), None);
        // ... but ldr x0, [sp, #24] is the return address.
        let c = code(&[0xd10083ff, 0xa9017bfd, 0xf9400fe0, 0xd65f03c0]);
        assert_eq!(return_address_use(&c, 0), Some(NoReturnAddress::Uses(8)));
        // After saving, x30 is a scratch register.
        let c = code(&[0xa9bf7bfd, 0xaa0903fe, 0xaa1e03e9, 0xd65f03c0]);
        assert_eq!(return_address_use(&c, 0), None);
        // Nothing decodable.
        assert_eq!(return_address_use(&[], 0), None);
        assert_eq!(return_address_use(&[0x1f, 0x20], 0), None);
    }

    #[test]
    fn other_uses() {
        // mov x9, x30 at the entry.
        assert_eq!(return_address_use(&code(&[0xaa1e03e9]), 0), Some(NoReturnAddress::Uses(0)));
        // cmp x30, #0; blr x30; br x30 (a return by another name).
        assert_eq!(return_address_use(&code(&[0xf10003df]), 0), Some(NoReturnAddress::Uses(0)));
        assert_eq!(return_address_use(&code(&[0xd63f03c0]), 0), Some(NoReturnAddress::Uses(0)));
        assert_eq!(return_address_use(&code(&[0xd61f03c0]), 0), None);
        // ldp x29, x30, [sp], #16 before saving: the caller's words.
        assert_eq!(return_address_use(&code(&[0xa8c17bfd]), 0), Some(NoReturnAddress::Pops(0)));
        // movk x30, #1 reads it too.
        assert_eq!(return_address_use(&code(&[0xf280003e]), 0), Some(NoReturnAddress::Uses(0)));
        // sub sp, sp, x16: the stack is no longer followed.
        assert_eq!(return_address_use(&code(&[0xcb3063ff, 0xf9400fe0]), 0), None);
        // stur x30, [x29, #-8] (x29 not from sp): data.
        assert_eq!(return_address_use(&code(&[0xf81f83be]), 0), Some(NoReturnAddress::Uses(0)));
    }

    #[test]
    fn go_epilogues_are_the_returns_after_a_pop() {
        // ldp x29,x30,[sp,#-8]; add sp,sp,#0x130; ret; ldur x29,[sp,#-8]; ldr x30,[sp],#64; ret
        let two = code(&[0xa97f_fbfd, 0x9104_c3ff, 0xd65f_03c0, 0xf85f_83fd, 0xf844_07fe, 0xd65f_03c0]);
        assert_eq!(go_epilogues(&two, 0x1000), Ok(vec![(0x1008, 4), (0x1014, 4)]));
        // A return without a pop before it: refused.
        assert!(go_epilogues(&code(&[0xd503_201f, 0xd65f_03c0]), 0x1000).unwrap_err().contains("not after"));
        // A tail jump out (b +0x1000): refused.
        assert!(go_epilogues(&code(&[0x1400_0400]), 0x1000).unwrap_err().contains("tail jump"));
    }

    #[test]
    fn go_stack_checks_in_their_three_shapes() {
        let bytes = |w: &[u32]| w.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        // main.step, main.rec and main.main of a Go 1.19 program.
        assert_eq!(go_stack_check(&bytes(&[0xf940_0b90, 0xeb30_63ff, 0x5400_0189, 0xf81e_0ffe])), Ok(12));
        assert_eq!(go_stack_check(&bytes(&[0xf940_0b90, 0xd102_c3f1, 0xeb10_023f, 0x5400_0529, 0xd104_c3f4])), Ok(16));
        let huge = [0xf940_0b90, 0xd285_bc1b, 0xeb3b_63f1, 0x5400_3763, 0xeb10_023f, 0x5400_3729, 0xd285_cc1b];
        assert_eq!(go_stack_check(&bytes(&huge)), Ok(24));
        // A leaf (add x0, x0, #1; ret), a check cut short, a check on
        // another register, the wrong condition.
        for w in [
            &[0x9100_0400, 0xd65f_03c0][..],
            &[0xf940_0b90, 0xeb30_63ff],
            &[0xf940_0b80, 0xeb30_63ff, 0x5400_0189],
            &[0xf940_0b90, 0xeb30_63ff, 0x5400_0181],
        ] {
            assert!(go_stack_check(&bytes(w)).unwrap_err().contains("stack-bound check"), "{w:x?}");
        }
    }
}
