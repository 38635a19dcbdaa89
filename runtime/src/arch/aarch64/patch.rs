//! aarch64 probe placement and relocation of the displaced instruction.
//!
//! A function probe on aarch64 is one `B` (4 bytes, ±128 MiB) written over
//! the function's first instruction, after a landing pad (`bti c`, `bti j`,
//! `bti jc`, or `paciasp`/`pacibsp`, which are landing pads too), so the
//! indirect calls of BTI-guarded code still land on one. The `B` reaches a
//! trampoline placed near the module, or a veneer ([`veneer`]) that reaches
//! it from anywhere. The one instruction the `B` displaces is re-encoded to
//! run at the trampoline ([`relocate_word`]), followed by a branch back.
//!
//! **Invariant:** everything here is a pure function of words and
//! addresses: no I/O, no `unsafe`, no `#[cfg]`. It is compiled and tested on
//! every host (x86_64 included): the property test below runs each
//! relocated sequence and the original instruction in a model of the
//! instructions involved and compares the results.
//!
//! **Boundary:** a [`Refusal`] is the only way these functions fail, in
//! words for the user (`cannot probe foo: <refusal>`).
//!
//! Decoding is yaxpeax-arm's (which instruction a word is, and whether it
//! has a PC-relative operand); the fields re-encoded are read from the word
//! itself. What is relocated:
//!
//! * `adr`, `adrp`: re-encoded if the target is in reach from the copy,
//!   else the address is loaded from a literal;
//! * `ldr`/`ldrsw`/`prfm` (literal), general and SIMD registers: re-encoded
//!   in reach, else the address is loaded from a literal into the
//!   destination (into `x16` for SIMD destinations) and loaded through; an
//!   out-of-reach `prfm` (a hint) becomes a `nop`;
//! * `b`, `bl`, `b.cond`, `bc.cond`, `cbz`/`cbnz`, `tbz`/`tbnz`: the
//!   condition kept with a local target, the branch to the original target
//!   direct in reach, else through `x16`; `bl` sets `x30` to the original
//!   return address first, so no return address points into a trampoline;
//! * everything without a PC-relative operand: copied as it is.
//!
//! `x16`/`x17` (IP0/IP1) are the only registers a relocation may clobber,
//! and only where the caller says they are free (`scratch`): at a function
//! entry, where the platform ABI lets a linker veneer clobber them. Refused:
//! exclusive loads and stores (the monitor does not survive the branches to
//! and from the trampoline, so a `ldxr`/`stxr` loop could spin forever), and
//! any other PC-relative instruction.

use yaxpeax_arch::{Decoder, U8Reader};
use yaxpeax_arm::armv8::a64::{InstDecoder, Instruction, Opcode, Operand};

pub use crate::arch::contract::{CopyMap, Hook, Retarget};

/// Length of the `B` written at the patch site, and of every instruction.
pub const B_LEN: usize = 4;

/// `nop`.
pub const NOP: u32 = 0xd503_201f;
/// `br x16`.
const BR_X16: u32 = 0xd61f_0200;
/// `ret x16`: a veneer's branch. An indirect branch (`br`) into a page
/// guarded by BTI must land on a landing pad, which the instruction after a
/// displaced one is not; a return is never checked.
const RET_X16: u32 = 0xd65f_0200;
/// The scratch register (IP0).
const X16: u32 = 16;

/// The landing pads a function may start with: `bti c`, `bti j`, `bti jc`,
/// `paciasp`, `pacibsp`.
const LANDING_PADS: [u32; 5] = [0xd503_245f, 0xd503_249f, 0xd503_24df, PACIASP, PACIBSP];

/// `paciasp`, `pacibsp`: landing pads that sign x30 (hints: no-ops on a
/// core without pointer authentication; the trampolines sign with them).
pub(super) const PACIASP: u32 = 0xd503_233f;
pub(super) const PACIBSP: u32 = 0xd503_237f;

/// Why a probe cannot be placed, or an instruction not relocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the function's symbol has size 0, so where it ends is unknown")]
    UnknownSize,
    #[error("only {have} of the function's {size} bytes could be read")]
    Truncated { have: usize, size: u64 },
    #[error("the function has {size} bytes: no room for a 4-byte branch after its {pad}-byte landing pad")]
    ShortFunction { size: u64, pad: u64 },
    #[error("undecodable instruction {word:#010x} at +{offset:#x}")]
    Undecodable { offset: u64, word: u32 },
    #[error(
        "a branch at +{from:#x} jumps back to +{to:#x}, the probe's site: every iteration of that loop \
         would re-enter the probe"
    )]
    LoopToEntry { from: u64, to: u64 },
    #[error(
        "`{text}` at {at:#x} is an exclusive load or store: the exclusive monitor does not survive the \
         branches to and from the trampoline"
    )]
    Exclusive { at: u64, text: String },
    #[error("`{text}` at {at:#x} reaches {target:#x}, out of reach from {to:#x}, and no scratch register is free")]
    NoScratch { at: u64, text: String, target: u64, to: u64 },
    #[error("`{text}` at {at:#x} is PC-relative and is not relocated")]
    PcRelative { at: u64, text: String },
}

/// The length of the patch jump (a `B`) written at a patch site.
pub const JUMP_LEN: usize = B_LEN;

/// The longest landing pad (`bti c`, `paciasp`): one instruction.
pub const LANDING_PAD_LEN: usize = 4;

/// The length of the landing pad `code` starts with, 0 for none.
pub fn landing_pad_len(code: &[u8]) -> usize {
    match word_at(code, 0) {
        Some(w) if LANDING_PADS.contains(&w) => B_LEN,
        _ => 0,
    }
}

fn word_at(code: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(code.get(at..at + 4)?.try_into().ok()?))
}

/// Decode one word.
pub(super) fn decode(word: u32) -> Option<Instruction> {
    let bytes = word.to_le_bytes();
    let mut reader = U8Reader::new(&bytes);
    InstDecoder::default().decode(&mut reader).ok()
}

/// Whether `word` is in the SVE or SME encoding groups (bits 28:25 are
/// 0010, or 0000 with bit 31 set), which the decoder does not know but
/// which hold no branch and no PC-relative operand: such an instruction
/// runs the same anywhere, and is copied as it is.
fn vector_extension(word: u32) -> bool {
    let op0 = (word >> 25) & 0xf;
    op0 == 0b0010 || (op0 == 0 && word >> 31 == 1)
}

pub(super) fn pc_offset(i: &Instruction) -> Option<i64> {
    i.operands.iter().find_map(|o| match o {
        Operand::PCOffset(d) => Some(*d),
        _ => None,
    })
}

/// Where the probe of the function at `entry` (its `size` bytes in `code`)
/// goes, or why it cannot.
pub fn plan(code: &[u8], entry: u64, size: u64) -> Result<Hook, Refusal> {
    if size == 0 {
        return Err(Refusal::UnknownSize);
    }
    if (code.len() as u64) < size {
        return Err(Refusal::Truncated { have: code.len(), size });
    }
    let pad = landing_pad_len(code) as u64;
    if size < pad + B_LEN as u64 {
        return Err(Refusal::ShortFunction { size, pad });
    }
    let displaced = word_at(code, pad as usize).ok_or(Refusal::Truncated { have: code.len(), size })?;
    // The displaced instruction must relocate (near: a code region is in
    // a `B`'s reach, and the copy at its real address is checked again
    // when it is made).
    relocate_word(displaced, entry + pad, entry.wrapping_add(1 << 20), false)?;
    // A loop back to the site would run the probe on every iteration.
    let site = entry + pad;
    for off in (0..size & !3).step_by(B_LEN) {
        let Some(w) = word_at(code, off as usize) else { break };
        let Some(i) = decode(w) else {
            if vector_extension(w) {
                continue;
            }
            return Err(Refusal::Undecodable { offset: off, word: w });
        };
        if matches!(i.opcode, Opcode::BL | Opcode::ADR | Opcode::ADRP | Opcode::LDR | Opcode::LDRSW | Opcode::PRFM) {
            continue;
        }
        if let Some(d) = pc_offset(&i) {
            let target = (entry + off).wrapping_add(d as u64);
            if (entry..=site).contains(&target) && off != pad {
                return Err(Refusal::LoopToEntry { from: off, to: target - entry });
            }
        }
    }
    Ok(Hook { patch_at: site, displaced: B_LEN })
}

/// `bytes`, a Go function's return as pass 2 found it
/// (`artifact::GoReturn`, in the live process): Ok (nothing for its
/// trampoline to run first) when it is still the `ret` the branch
/// replaces.
pub fn go_epilogue(bytes: &[u8]) -> Result<Vec<u8>, String> {
    (bytes == 0xd65f_03c0u32.to_le_bytes())
        .then(Vec::new)
        .ok_or_else(|| "it is not the `ret` pass 2 found there".into())
}

/// `check`, the bytes of a Go function's stack-bound check as pass 2
/// found it (`artifact::GoSite::check`, in the live process): Ok when they
/// still start with `ldr x16, [x28, #16]` (`g.stackguard0`) and end with
/// its `b.ls` to `morestack`, with no branch between but a `b.lo` (the
/// trampoline runs them, its own branches going to their relocated
/// copies).
pub fn go_check(check: &[u8]) -> Result<(), String> {
    let not = || "its entry is not the Go stack check pass 2 found there".to_string();
    let w: Vec<u32> = check.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let b_cond = |w: u32, cond: u32| w & 0xff00_001f == 0x5400_0000 | cond;
    // Branches of every kind (b, bl, b.cond, cbz, tbz, br, ret...).
    let branch = |w: u32| {
        w & 0x7c00_0000 == 0x1400_0000
            || w & 0xfe00_0000 == 0xd600_0000
            || w & 0xfe00_0000 == 0x5400_0000
            || w & 0x7e00_0000 == 0x3400_0000
            || w & 0x7e00_0000 == 0x3600_0000
    };
    let [first, inner @ .., last] = w.as_slice() else { return Err(not()) };
    let inner_ok = inner.iter().all(|&x| !branch(x) || b_cond(x, 3));
    if check.len() % 4 != 0 || *first != 0xf940_0b90 || !b_cond(*last, 9) || !inner_ok {
        return Err(not());
    }
    Ok(())
}

/// How the landing pad `pad` (the word before a function's patch site)
/// signs x30: `telco_abi::region::SAVED_PACIA` for `paciasp`,
/// `SAVED_PACIB` for `pacibsp`, 0 for anything else.
pub fn signs_return(pad: u32) -> i32 {
    match pad {
        PACIASP => telco_abi::region::SAVED_PACIA,
        PACIBSP => telco_abi::region::SAVED_PACIB,
        _ => 0,
    }
}

/// `B` (or `BL`, `link`) from `at` to `target`, when in reach (±128 MiB).
pub fn branch(at: u64, target: u64, link: bool) -> Option<u32> {
    let d = (target as i64).wrapping_sub(at as i64);
    if d & 3 != 0 || !(-(1 << 27)..(1 << 27)).contains(&d) {
        return None;
    }
    Some(if link { 0x9400_0000 } else { 0x1400_0000 } | ((d >> 2) as u32 & 0x03ff_ffff))
}

/// A branch to `target` from anywhere: `ldr x16, #8; ret x16; .quad
/// target` (x16 is clobbered: a veneer goes where the platform ABI allows
/// that; `ret`, not `br`, so that it may land anywhere in BTI-guarded code).
pub fn veneer(target: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0..4].copy_from_slice(&ldr_literal(0x5800_0000, X16, 8).to_le_bytes());
    out[4..8].copy_from_slice(&RET_X16.to_le_bytes());
    out[8..16].copy_from_slice(&target.to_le_bytes());
    out
}

/// A literal load (`base`: the opcode bits of its form) of register `rt`
/// from `disp` bytes ahead (a multiple of 4 within ±1 MiB).
fn ldr_literal(base: u32, rt: u32, disp: i64) -> u32 {
    base | ((((disp >> 2) as u32) & 0x7ffff) << 5) | rt
}

fn fits(d: i64, bits: u32, scale: u32) -> bool {
    let lim = 1i64 << (bits + scale - 1);
    d & ((1 << scale) - 1) == 0 && (-lim..lim).contains(&d)
}

/// The instruction `word`, at `from` in the original code, re-encoded to run
/// at `to`: when the returned code falls through its end, execution goes on
/// as after the original instruction (the caller appends the branch back to
/// `from + 4`). `scratch`: x16 and x17 are free here (a function entry).
pub fn relocate_word(word: u32, from: u64, to: u64, scratch: bool) -> Result<Vec<u8>, Refusal> {
    let mut out = Code::default();
    let Some(i) = decode(word) else {
        if vector_extension(word) {
            out.word(word);
            return Ok(out.bytes);
        }
        return Err(Refusal::Undecodable { offset: 0, word });
    };
    let text = || i.to_string();
    match i.opcode {
        Opcode::LDXR
        | Opcode::LDXRB
        | Opcode::LDXRH
        | Opcode::LDXP
        | Opcode::LDAXR
        | Opcode::LDAXRB
        | Opcode::LDAXRH
        | Opcode::LDAXP
        | Opcode::STXR
        | Opcode::STXRB
        | Opcode::STXRH
        | Opcode::STXP
        | Opcode::STLXR
        | Opcode::STLXRB
        | Opcode::STLXRH
        | Opcode::STLXP => return Err(Refusal::Exclusive { at: from, text: text() }),
        _ => {}
    }
    let Some(d) = pc_offset(&i) else {
        out.word(word);
        return Ok(out.bytes);
    };
    let rt = word & 0x1f;
    match i.opcode {
        Opcode::ADR | Opcode::ADRP => {
            let page = i.opcode == Opcode::ADRP;
            let target = if page { (from & !0xfff).wrapping_add(d as u64) } else { from.wrapping_add(d as u64) };
            let rel = if page {
                ((target & !0xfff) as i64).wrapping_sub((to & !0xfff) as i64)
            } else {
                (target as i64).wrapping_sub(to as i64)
            };
            let scaled = if page { rel >> 12 } else { rel };
            if fits(rel, 21, if page { 12 } else { 0 }) {
                let imm = scaled as u32 & 0x1f_ffff;
                out.word((word & 0x9f00_001f) | ((imm & 3) << 29) | ((imm >> 2) << 5));
            } else {
                // ldr xd, #8; b #12; .quad target
                out.word(ldr_literal(0x5800_0000, rt, 8));
                out.word(0x1400_0003);
                out.quad(target);
            }
        }
        Opcode::LDR | Opcode::LDRSW | Opcode::PRFM => {
            let target = from.wrapping_add(d as u64);
            let rel = (target as i64).wrapping_sub(to as i64);
            if fits(rel, 19, 2) {
                out.word(ldr_literal(word & 0xff00_0000, rt, rel));
                return Ok(out.bytes);
            }
            // opc (bits 31:30) and V (bit 26) say which load it is.
            let (opc, simd) = (word >> 30, word >> 26 & 1 == 1);
            let through = match (simd, opc) {
                (false, 0) => 0xb940_0000, // ldr wt, [xn]
                (false, 1) => 0xf940_0000, // ldr xt, [xn]
                (false, 2) => 0xb980_0000, // ldrsw xt, [xn]
                (false, _) => {
                    // prfm: a hint; out of reach, none.
                    out.word(NOP);
                    return Ok(out.bytes);
                }
                (true, 0) => 0xbd40_0000, // ldr st, [xn]
                (true, 1) => 0xfd40_0000, // ldr dt, [xn]
                (true, 2) => 0x3dc0_0000, // ldr qt, [xn]
                (true, _) => return Err(Refusal::PcRelative { at: from, text: text() }),
            };
            if !simd && rt == 31 {
                // A load into the zero register: nothing to keep.
                out.word(NOP);
                return Ok(out.bytes);
            }
            let base = if simd {
                if !scratch {
                    return Err(Refusal::NoScratch { at: from, text: text(), target, to });
                }
                X16
            } else {
                rt
            };
            // ldr xbase, #12; ldr rt, [xbase]; b #12; .quad target
            out.word(ldr_literal(0x5800_0000, base, 12));
            out.word(through | (base << 5) | rt);
            out.word(0x1400_0003);
            out.quad(target);
        }
        Opcode::B | Opcode::BL => {
            let target = from.wrapping_add(d as u64);
            if i.opcode == Opcode::BL {
                // x30 = the original return address.
                out.word(ldr_literal(0x5800_0000, 30, 8));
                out.word(0x1400_0003);
                out.quad(from.wrapping_add(4));
            }
            let at = to.wrapping_add(out.bytes.len() as u64);
            out.jump(at, target, scratch, || Refusal::NoScratch { at: from, text: text(), target, to })?;
        }
        Opcode::Bcc(_) | Opcode::BCcc(_) | Opcode::CBZ | Opcode::CBNZ | Opcode::TBZ | Opcode::TBNZ => {
            let target = from.wrapping_add(d as u64);
            // The same test, to the next word but one: [cond -> +8; b over;
            // jump to target; over:].
            let local = match i.opcode {
                Opcode::TBZ | Opcode::TBNZ => (word & !(0x3fff << 5)) | (2 << 5),
                _ => (word & !(0x7ffff << 5)) | (2 << 5),
            };
            let mut jump = Code::default();
            jump.jump(to.wrapping_add(8), target, scratch, || Refusal::NoScratch {
                at: from,
                text: text(),
                target,
                to,
            })?;
            out.word(local);
            out.word(0x1400_0001 + jump.bytes.len() as u32 / 4);
            out.bytes.extend_from_slice(&jump.bytes);
        }
        _ => return Err(Refusal::PcRelative { at: from, text: text() }),
    }
    Ok(out.bytes)
}

/// The word at `at` of `code`, for the facade below (a shorter slice is
/// an undecodable zero word).
fn word0(code: &[u8]) -> u32 {
    word_at(code, 0).unwrap_or(0)
}

/// A trap (`brk`) where no branch fits: one word, as a `B` is, so it fits
/// exactly where [`plan`] does (used where a trap is asked for:
/// `-D TRAP_PROBES`).
pub fn plan_trap(code: &[u8], entry: u64, size: u64) -> Result<Hook, Refusal> {
    plan(code, entry, size)
}

/// Whether a refusal of [`plan_loop`] is one a trap may do better than:
/// never here (a `brk` takes the room a `B` takes).
pub fn trap_may_fit(_why: &Refusal) -> bool {
    false
}

/// A function that loops back to its patch site: refused here (x86_64
/// retargets such loops; on aarch64 that is still to do), with the
/// signature x86_64's has.
pub fn plan_loop(code: &[u8], entry: u64, size: u64) -> Result<(Hook, Vec<Retarget>), Refusal> {
    let refusal = match plan(code, entry, size) {
        Err(r @ Refusal::LoopToEntry { .. }) => r,
        other => return other.map(|h| (h, Vec::new())),
    };
    let pad = landing_pad_len(code) as u64;
    let (site, second) = (entry + pad, entry + pad + B_LEN as u64);
    if size < pad + 2 * B_LEN as u64 {
        return Err(refusal);
    }
    let word = |off: u64| word_at(code, off as usize).ok_or(Refusal::Truncated { have: code.len(), size });
    // The second word is displaced too: it must relocate, and nothing may
    // arrive there but by falling through (no call among the two returns
    // there either).
    let w0 = decode(word(pad)?);
    if w0.as_ref().is_some_and(|i| {
        matches!(
            i.opcode,
            Opcode::BL | Opcode::BLR | Opcode::BLRAA | Opcode::BLRAAZ | Opcode::BLRAB | Opcode::BLRABZ | Opcode::SVC
        )
    }) {
        return Err(refusal);
    }
    relocate_word(word(pad + B_LEN as u64)?, second, entry.wrapping_add(1 << 20), false)?;
    let mut retargets = Vec::new();
    for off in (0..size & !3).step_by(B_LEN) {
        let w = word(off)?;
        let Some(i) = decode(w) else { continue };
        let Some(d) = pc_offset(&i) else { continue };
        let at = entry + off;
        let target = at.wrapping_add(d as u64);
        if target == second && !matches!(i.opcode, Opcode::LDR | Opcode::LDRSW | Opcode::PRFM) {
            return Err(refusal);
        }
        let branch = matches!(
            i.opcode,
            Opcode::B | Opcode::Bcc(_) | Opcode::BCcc(_) | Opcode::CBZ | Opcode::CBNZ | Opcode::TBZ | Opcode::TBNZ
        );
        if !branch || !(entry..=site).contains(&target) {
            continue;
        }
        // A loop inside the two displaced words, or one back to a landing
        // pad before the site: not handled.
        if target != site || at == site || at == second {
            return Err(refusal);
        }
        let patched = retarget(w, at, second).ok_or_else(|| refusal.clone())?;
        retargets.push(Retarget { at, original: w.to_le_bytes().to_vec(), patched: patched.to_le_bytes().to_vec() });
    }
    Ok((Hook { patch_at: site, displaced: 2 * B_LEN }, retargets))
}

/// Branch `word` at `at` with its target changed to `to` (the same form:
/// `b`, `b.cond`, `cbz`/`cbnz`, `tbz`/`tbnz`), or None out of its reach.
fn retarget(word: u32, at: u64, to: u64) -> Option<u32> {
    let d = (to as i64).wrapping_sub(at as i64);
    let (shift, bits) = match word >> 24 {
        0x14..=0x17 => (0, 26),               // b
        0x54 => (5, 19),                      // b.cond, bc.cond
        0x34 | 0x35 | 0xb4 | 0xb5 => (5, 19), // cbz, cbnz
        0x36 | 0x37 | 0xb6 | 0xb7 => (5, 14), // tbz, tbnz
        _ => return None,
    };
    if !fits(d, bits, 2) {
        return None;
    }
    let mask = ((1u32 << bits) - 1) << shift;
    Some((word & !mask) | ((((d >> 2) as u32) << shift) & mask))
}

/// The displaced instruction (`original`, `len` = 4 bytes at `from`)
/// relocated to run at `to`, then the branch back to `from + len`. No
/// scratch register is assumed free (statements and markers use this
/// too), so a far target is refused rather than reached through x16;
/// code regions are placed within a `B`'s reach of their module
/// ([`REACH`]).
pub fn relocate(original: &[u8], from: u64, len: usize, to: u64) -> Result<Vec<u8>, Refusal> {
    relocate_with_map(original, from, len, to).map(|(b, _)| b)
}

/// [`relocate`], with where each instruction of the copy came from.
pub fn relocate_with_map(original: &[u8], from: u64, len: usize, to: u64) -> Result<(Vec<u8>, CopyMap), Refusal> {
    relocate_in(original, from, len, to, false)
}

/// [`relocate_with_map`] at a function's entry, where x16 and x17 are free
/// (the platform ABI lets a linker veneer clobber them between a call and
/// its callee): a trampoline farther than a `B` from the function (reached
/// through a [`veneer`]) jumps back through x16, unless the displaced
/// instruction may write x16 itself (then refused).
pub fn relocate_at_entry(original: &[u8], from: u64, len: usize, to: u64) -> Result<(Vec<u8>, CopyMap), Refusal> {
    relocate_in(original, from, len, to, true)
}

fn relocate_in(original: &[u8], from: u64, len: usize, to: u64, scratch: bool) -> Result<(Vec<u8>, CopyMap), Refusal> {
    let mut out = Code::default();
    let mut map = CopyMap::default();
    let mut writes_x16 = false;
    for i in 0..len / B_LEN {
        let at = from + (i * B_LEN) as u64;
        let w = word_at(original, i * B_LEN).unwrap_or(0);
        let here = to + out.bytes.len() as u64;
        let code = relocate_word(w, at, here, scratch)?;
        map.map.push((here, at));
        out.bytes.extend_from_slice(&code);
        writes_x16 |= may_write_x16(w);
    }
    let back = from + len as u64;
    let here = to + out.bytes.len() as u64;
    map.map.push((here, back));
    let text = || decode(word0(original)).map_or_else(String::new, |i| i.to_string());
    out.jump(here, back, scratch && !writes_x16, || Refusal::NoScratch {
        at: from,
        text: text(),
        target: back,
        to: here,
    })?;
    Ok((out.bytes, map))
}

/// Whether instruction `w` may write x16: a destination field (Rd/Rt, bits
/// 0-4, or a pair's Rt2, bits 10-14) names it. Over-cautious (a field that
/// is a source counts too), which only refuses more.
fn may_write_x16(w: u32) -> bool {
    w & 0x1f == X16 || (w >> 10) & 0x1f == X16
}

/// A branch from anywhere to `target` for a patch site whose trampoline
/// is beyond a `B`'s reach: written within reach of the site, which
/// branches to it (x16 is free at a function's entry).
pub fn far_jump(target: u64) -> Option<Vec<u8>> {
    Some(veneer(target).to_vec())
}

/// Where the copy at `to` has the instruction at `pc` of the original:
/// the first instruction's copy when `pc` is `from` (the only one).
pub fn relocated_pc(original: &[u8], from: u64, len: usize, to: u64, pc: u64) -> Option<u64> {
    let (_, map) = relocate_with_map(original, from, len, to).ok()?;
    map.map.into_iter().find(|&(_, o)| o == pc).map(|(c, _)| c)
}

/// How far a code region may be from the code that branches to it: a
/// `B`'s reach, less room for the region itself.
pub const REACH: u64 = (1 << 27) - (16 << 20);

/// The patch jump: a `B` from `at` to `target`, or None out of reach.
pub fn jump(at: u64, target: u64) -> Option<[u8; JUMP_LEN]> {
    branch(at, target, false).map(u32::to_le_bytes)
}

/// The length of [`jump_anywhere`]'s code.
pub const JUMP_ANYWHERE_LEN: usize = 16;

/// A branch anywhere from a place where x16 is free ([`veneer`]).
pub fn jump_anywhere(target: u64) -> [u8; JUMP_ANYWHERE_LEN] {
    veneer(target)
}

/// The shortest jump from `at` to `target`: a `B` (aarch64 has none
/// shorter), or None out of reach.
pub fn short_jump(at: u64, target: u64) -> Option<Vec<u8>> {
    branch(at, target, false).map(|w| w.to_le_bytes().to_vec())
}

/// A direct call's length (`BL`).
pub const DIRECT_CALL_LEN: usize = B_LEN;

/// A direct call (`BL`) from `at` to `target`, or None out of reach.
pub fn direct_call(at: u64, target: u64) -> Option<[u8; DIRECT_CALL_LEN]> {
    branch(at, target, true).map(u32::to_le_bytes)
}

/// Where the direct call `bytes` (a `BL` at `at`) goes, or None if they
/// are not one.
pub fn direct_call_target(bytes: &[u8], at: u64) -> Option<u64> {
    let w = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
    if w & 0xfc00_0000 != 0x9400_0000 {
        return None;
    }
    let imm = ((w & 0x03ff_ffff) << 6) as i32 >> 4;
    Some(at.wrapping_add(imm as i64 as u64))
}

/// A signal handler's entry that passes `region` as a fourth argument
/// (x3) to `handler` (`rt_crash`): `ldr x3, #16; ldr x16, #20; br x16;
/// nop`, then the two addresses.
pub fn signal_stub(region: u64, handler: u64) -> Vec<u8> {
    let mut c = Code::default();
    c.word(ldr_literal(0x5800_0000, 3, 16));
    c.word(ldr_literal(0x5800_0000, X16, 20));
    c.word(BR_X16);
    c.word(NOP);
    c.quad(region);
    c.quad(handler);
    c.bytes
}

/// The `sa_restorer` of a handler installed with the raw `rt_sigaction`:
/// `mov x8, #139 (rt_sigreturn); svc #0`.
pub const SIGRETURN: [u8; 8] = [0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4];

/// Code being written.
#[derive(Default)]
struct Code {
    bytes: Vec<u8>,
}

impl Code {
    fn word(&mut self, w: u32) {
        self.bytes.extend_from_slice(&w.to_le_bytes());
    }

    fn quad(&mut self, q: u64) {
        self.bytes.extend_from_slice(&q.to_le_bytes());
    }

    /// An unconditional jump, placed at `at`, to `target`: a `B` in reach,
    /// else through x16 (which must be free).
    fn jump(&mut self, at: u64, target: u64, scratch: bool, refusal: impl FnOnce() -> Refusal) -> Result<(), Refusal> {
        if let Some(b) = branch(at, target, false) {
            self.word(b);
        } else if scratch {
            self.bytes.extend_from_slice(&veneer(target));
        } else {
            return Err(refusal());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn direct_calls_decode_to_where_they_go() {
        for (at, to) in [(0x40_0000u64, 0x40_1000u64), (0x40_1000, 0x40_0000), (0x1000, 0x1000)] {
            let call = direct_call(at, to).expect("in reach");
            assert_eq!(direct_call_target(&call, at), Some(to));
        }
        // A `B` is not a call.
        let b = jump(0x1000, 0x2000).expect("in reach");
        assert_eq!(direct_call_target(&b, 0x1000), None);
        assert_eq!(short_jump(0x1000, 0x2000).map(|j| j.len()), Some(B_LEN));
    }

    /// The machine state the instructions involved read and write.
    #[derive(Clone, Debug, PartialEq)]
    struct State {
        x: [u64; 31],
        v: [u128; 32],
        nzcv: u8,
    }

    /// Memory: every address holds a value made from it.
    fn load(addr: u64, bytes: u32) -> u128 {
        let a = addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555;
        let v = u128::from(a) | (u128::from(a.rotate_left(17)) << 64);
        if bytes >= 16 {
            v
        } else {
            v & ((1u128 << (bytes * 8)) - 1)
        }
    }

    fn sext(v: u64, bits: u32) -> i64 {
        ((v << (64 - bits)) as i64) >> (64 - bits)
    }

    fn cond(c: u32, nzcv: u8) -> bool {
        let (n, z, cf, v) = (nzcv & 8 != 0, nzcv & 4 != 0, nzcv & 2 != 0, nzcv & 1 != 0);
        let r = match c >> 1 {
            0 => z,
            1 => cf,
            2 => n,
            3 => v,
            4 => cf && !z,
            5 => n == v,
            6 => n == v && !z,
            _ => true,
        };
        if c & 1 == 1 && c != 15 {
            !r
        } else {
            r
        }
    }

    fn reg(s: &State, r: u32) -> u64 {
        if r == 31 {
            0
        } else {
            s.x[r as usize]
        }
    }

    fn set(s: &mut State, r: u32, v: u64) {
        if r != 31 {
            s.x[r as usize] = v;
        }
    }

    /// Run the word at `pc` (fetched from `code` at `base`): the next pc.
    /// Only the forms this module emits or relocates; others panic.
    fn step(s: &mut State, w: u32, pc: u64, fetch: &dyn Fn(u64) -> u64) -> u64 {
        let rt = w & 0x1f;
        let imm19 = || sext(u64::from(w >> 5 & 0x7ffff), 19) << 2;
        if w & 0x7c00_0000 == 0x1400_0000 {
            // b / bl
            let d = sext(u64::from(w & 0x3ff_ffff), 26) << 2;
            if w >> 31 == 1 {
                s.x[30] = pc + 4;
            }
            return pc.wrapping_add(d as u64);
        }
        if w & 0x1f00_0000 == 0x1000_0000 {
            // adr / adrp
            let imm = sext(u64::from((w >> 29 & 3) | ((w >> 5 & 0x7ffff) << 2)), 21);
            let v =
                if w >> 31 == 1 { (pc & !0xfff).wrapping_add((imm << 12) as u64) } else { pc.wrapping_add(imm as u64) };
            set(s, rt, v);
            return pc + 4;
        }
        if w & 0x3b00_0000 == 0x1800_0000 {
            // ldr (literal)
            let addr = pc.wrapping_add(imm19() as u64);
            let (opc, simd) = (w >> 30, w >> 26 & 1 == 1);
            match (simd, opc) {
                (false, 0) => set(s, rt, fetch_or_load(fetch, addr, 4) as u64),
                (false, 1) => set(s, rt, fetch_or_load(fetch, addr, 8) as u64),
                (false, 2) => set(s, rt, sext(fetch_or_load(fetch, addr, 4) as u64, 32) as u64),
                (false, _) => {} // prfm
                (true, 0) => s.v[rt as usize] = load(addr, 4),
                (true, 1) => s.v[rt as usize] = load(addr, 8),
                (true, _) => s.v[rt as usize] = load(addr, 16),
            }
            return pc + 4;
        }
        let rn = w >> 5 & 0x1f;
        let base = || if rn == 31 { panic!("sp base") } else { s.x[rn as usize] };
        match w & 0xffc0_0000 {
            0xb940_0000 => {
                let a = base();
                set(s, rt, load(a, 4) as u64);
                return pc + 4;
            }
            0xf940_0000 => {
                let a = base();
                set(s, rt, load(a, 8) as u64);
                return pc + 4;
            }
            0xb980_0000 => {
                let a = base();
                set(s, rt, sext(load(a, 4) as u64, 32) as u64);
                return pc + 4;
            }
            0xbd40_0000 => {
                let a = base();
                s.v[rt as usize] = load(a, 4);
                return pc + 4;
            }
            0xfd40_0000 => {
                let a = base();
                s.v[rt as usize] = load(a, 8);
                return pc + 4;
            }
            0x3dc0_0000 => {
                let a = base();
                s.v[rt as usize] = load(a, 16);
                return pc + 4;
            }
            _ => {}
        }
        if w == BR_X16 || w == RET_X16 {
            return s.x[16];
        }
        if w == NOP {
            return pc + 4;
        }
        if w & 0xff00_0010 == 0x5400_0000 || w & 0xff00_0010 == 0x5400_0010 {
            // b.cond / bc.cond
            return if cond(w & 0xf, s.nzcv) { pc.wrapping_add(imm19() as u64) } else { pc + 4 };
        }
        if w & 0x7e00_0000 == 0x3400_0000 {
            // cbz / cbnz
            let v = if w >> 31 == 1 { reg(s, rt) } else { reg(s, rt) & 0xffff_ffff };
            let taken = (v == 0) != (w >> 24 & 1 == 1);
            return if taken { pc.wrapping_add(imm19() as u64) } else { pc + 4 };
        }
        if w & 0x7e00_0000 == 0x3600_0000 {
            // tbz / tbnz
            let bit = (w >> 19 & 0x1f) | ((w >> 31) << 5);
            let set_ = reg(s, rt) >> bit & 1 == 1;
            let taken = set_ == (w >> 24 & 1 == 1);
            let d = sext(u64::from(w >> 5 & 0x3fff), 14) << 2;
            return if taken { pc.wrapping_add(d as u64) } else { pc + 4 };
        }
        panic!("the model does not run {w:#010x}");
    }

    /// A literal inside the relocated code is fetched from it; anything
    /// else is memory.
    fn fetch_or_load(fetch: &dyn Fn(u64) -> u64, addr: u64, bytes: u32) -> u128 {
        let v = fetch(addr);
        if v != u64::MAX {
            let v = u128::from(v);
            if bytes >= 8 {
                v
            } else {
                v & ((1u128 << (bytes * 8)) - 1)
            }
        } else {
            load(addr, bytes)
        }
    }

    /// Run `code` placed at `to` until the pc leaves it: (state, where it
    /// went; `to + len` meaning "fell through").
    fn run(s: &mut State, code: &[u8], to: u64) -> u64 {
        let fetch = |a: u64| -> u64 {
            let off = a.wrapping_sub(to);
            // Literals need not be 8-aligned (Linux leaves alignment
            // checks off for normal memory).
            if off + 8 <= code.len() as u64 {
                u64::from_le_bytes(code[off as usize..off as usize + 8].try_into().unwrap())
            } else {
                u64::MAX
            }
        };
        let mut pc = to;
        for _ in 0..16 {
            let off = pc.wrapping_sub(to);
            if off >= code.len() as u64 {
                return pc;
            }
            let w = u32::from_le_bytes(code[off as usize..off as usize + 4].try_into().unwrap());
            pc = step(s, w, pc, &fetch);
        }
        panic!("the relocated code did not leave itself");
    }

    /// The PC-relative forms (and a plain instruction), with random fields.
    fn instruction() -> impl Strategy<Value = u32> {
        let r = 0u32..31;
        prop_oneof![
            (r.clone(), any::<u32>()).prop_map(|(rd, imm)| 0x1000_0000 | (imm & 0x60ff_ffe0) | rd), // adr
            (r.clone(), any::<u32>()).prop_map(|(rd, imm)| 0x9000_0000 | (imm & 0x60ff_ffe0) | rd), // adrp
            (0u32..3, r.clone(), any::<u32>())
                .prop_map(|(opc, rt, imm)| 0x1800_0000 | (opc << 30) | (imm & 0x00ff_ffe0) | rt),
            (0u32..3, r.clone(), any::<u32>())
                .prop_map(|(opc, rt, imm)| 0x1c00_0000 | (opc << 30) | (imm & 0x00ff_ffe0) | rt),
            (r.clone(), any::<u32>()).prop_map(|(rt, imm)| 0xd800_0000 | (imm & 0x00ff_ffe0) | rt), // prfm
            any::<u32>().prop_map(|imm| 0x1400_0000 | (imm & 0x03ff_ffff)),                         // b
            any::<u32>().prop_map(|imm| 0x9400_0000 | (imm & 0x03ff_ffff)),                         // bl
            (0u32..15, any::<u32>()).prop_map(|(c, imm)| 0x5400_0000 | (imm & 0x00ff_ffe0) | c),    // b.cond
            (0u32..4, r.clone(), any::<u32>()).prop_map(|(k, rt, imm)| 0x3400_0000
                | ((k & 1) << 31)
                | ((k >> 1) << 24)
                | (imm & 0x00ff_ffe0)
                | rt),
            (0u32..4, r.clone(), any::<u32>()).prop_map(|(k, rt, imm)| 0x3600_0000
                | ((k & 1) << 31)
                | ((k >> 1) << 24)
                | (imm & 0x00ff_ffe0)
                | rt),
        ]
    }

    fn state() -> impl Strategy<Value = State> {
        (proptest::array::uniform31(any::<u64>()), any::<u8>()).prop_map(|(x, n)| {
            let mut x = x;
            // Bit tests see both values often.
            x[3] = 0;
            State { x, v: [0; 32], nzcv: n & 0xf }
        })
    }

    /// `code`, the copy at `to` of `word` from `from`, run on the model from
    /// `s0`: it goes where the original goes (with `falls_off`, falling off
    /// its end stands for `from + 4`: the caller appends the jump back),
    /// with every register as the original leaves them but x16 and x17
    /// (scratch at an entry).
    fn runs_as_the_original(
        word: u32,
        from: u64,
        to: u64,
        code: &[u8],
        s0: &State,
        falls_off: bool,
    ) -> Result<(), TestCaseError> {
        let mut want = s0.clone();
        let next = step(&mut want, word, from, &|_| u64::MAX);
        let mut got = s0.clone();
        let went = run(&mut got, code, to);
        let went = if falls_off && went == to + code.len() as u64 { from + 4 } else { went };
        prop_assert_eq!(went, next, "{:#010x} from {:#x} at {:#x}: {:02x?}", word, from, to, code);
        got.x[16] = want.x[16];
        got.x[17] = want.x[17];
        prop_assert_eq!(got, want, "{:#010x} from {:#x} at {:#x}", word, from, to);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn relocated_code_does_what_the_original_did(
            word in instruction(),
            from in (0x1000u64..1 << 47).prop_map(|a| a & !3),
            near in any::<bool>(),
            delta in -(1i64 << 19)..(1i64 << 19),
            far in (0x1000u64..1 << 47).prop_map(|a| a & !3),
            s0 in state(),
        ) {
            let to = if near { (from as i64 + (delta & !3)).max(0x1000) as u64 } else { far };
            let code = match relocate_word(word, from, to, true) {
                Ok(c) => c,
                Err(e) => return Err(TestCaseError::fail(format!("{word:#010x}: {e}"))),
            };
            runs_as_the_original(word, from, to, &code, &s0, true)?;
        }

        /// A function's entry relocated anywhere (a trampoline reached
        /// through a veneer): the copy ends where the original would go
        /// next, the jump back included, with only x16 and x17 changed;
        /// refused only where the instruction may write x16 itself.
        #[test]
        fn relocated_at_entry_goes_back_from_anywhere(
            word in instruction(),
            from in (0x1000u64..1 << 47).prop_map(|a| a & !3),
            to in (0x1000u64..1 << 47).prop_map(|a| a & !3),
            s0 in state(),
        ) {
            let code = match relocate_at_entry(&word.to_le_bytes(), from, 4, to) {
                Ok((c, _)) => c,
                Err(e) => {
                    prop_assert!(may_write_x16(word), "{word:#010x}: {e}");
                    return Ok(());
                }
            };
            runs_as_the_original(word, from, to, &code, &s0, false)?;
        }

        #[test]
        fn without_scratch_nothing_is_clobbered(
            word in instruction(),
            from in (0x1000u64..1 << 47).prop_map(|a| a & !3),
            to in (0x1000u64..1 << 47).prop_map(|a| a & !3),
            s0 in state(),
        ) {
            // Refused, or exactly the original's effect with x16/x17 intact.
            if let Ok(code) = relocate_word(word, from, to, false) {
                let mut want = s0.clone();
                let next = step(&mut want, word, from, &|_| u64::MAX);
                let mut got = s0.clone();
                let went = run(&mut got, &code, to);
                let went = if went == to + code.len() as u64 { from + 4 } else { went };
                prop_assert_eq!(went, next);
                prop_assert_eq!(got, want);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20000))]
        /// Any word at all (the fuzz target's stand-in here): relocated or
        /// refused, never a panic; a copy is a whole number of words.
        #[test]
        fn any_word_relocates_or_is_refused(
            word in any::<u32>(),
            from in any::<u64>().prop_map(|a| a & !3),
            to in any::<u64>().prop_map(|a| a & !3),
            scratch in any::<bool>(),
        ) {
            if let Ok(code) = relocate_word(word, from, to, scratch) {
                prop_assert!(!code.is_empty() && code.len() % 4 == 0);
            }
        }

        #[test]
        fn any_function_plans_or_is_refused(code in proptest::collection::vec(any::<u8>(), 0..64), entry in any::<u64>()) {
            let _ = plan(&code, entry & !3, code.len() as u64);
        }
    }

    #[test]
    fn plain_instructions_are_copied() {
        for w in [0xd503_201f, 0x8b02_0020, 0xf940_0421, 0xa9bf_7bfd, 0x9100_03fd, 0xd65f_03c0, 0xd400_0001] {
            assert_eq!(relocate_word(w, 0x1000, 0x9000_0000, false).unwrap(), w.to_le_bytes());
        }
    }

    #[test]
    fn vector_extensions_are_copied() {
        // cntd x0 (SVE), which the decoder does not know: copied, and a
        // function holding one plans; an unallocated word does not.
        let cntd = 0x04e0_e3e0u32;
        assert!(decode(cntd).is_none());
        assert_eq!(relocate_word(cntd, 0x1000, 0x9000, false).unwrap(), cntd.to_le_bytes());
        let mut f = Vec::new();
        for w in [0xa9bf_7bfdu32, cntd, 0xa8c1_7bfd, 0xd65f_03c0] {
            f.extend_from_slice(&w.to_le_bytes());
        }
        assert!(plan(&f, 0x1000, 16).is_ok());
        assert!(relocate_word(0x0600_0000, 0x1000, 0x9000, false).is_err());
    }

    #[test]
    fn loops_to_the_entry_are_retargeted_past_the_probe() {
        // add x1, x1, #1; sub x0, x0, #1; cbnz x0, entry; mov x0, x1; ret
        let words = [0x9100_0421u32, 0xd100_0400, 0xb5ff_ffc0, 0xaa01_03e0, 0xd65f_03c0];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert!(matches!(plan(&code, 0x1000, 20), Err(Refusal::LoopToEntry { from: 8, to: 0 })));
        let (hook, r) = plan_loop(&code, 0x1000, 20).unwrap();
        assert_eq!(hook, Hook { patch_at: 0x1000, displaced: 8 });
        // cbnz x0, entry + 4
        assert_eq!(
            r,
            vec![Retarget {
                at: 0x1008,
                original: words[2].to_le_bytes().to_vec(),
                patched: 0xb5ff_ffe0u32.to_le_bytes().to_vec()
            }]
        );
        // A loop inside the two words (sub; cbnz entry): refused.
        let words = [0xd100_0400u32, 0xb5ff_ffe0, 0xd65f_03c0];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert!(plan_loop(&code, 0x1000, 12).is_err());
        // A branch to the second word from elsewhere: refused.
        let words = [0x9100_0421u32, 0xd100_0400, 0xb5ff_ffe0, 0xb5ff_ffa0, 0xd65f_03c0];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert!(plan_loop(&code, 0x1000, 20).is_err());
        // A loop back to the landing pad before the site: refused.
        let words = [0xd503_245fu32, 0x9100_0421, 0xd100_0400, 0xb5ff_ffa0, 0xd65f_03c0];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert!(matches!(plan(&code, 0x1000, 20), Err(Refusal::LoopToEntry { from: 12, to: 0 })));
        assert!(plan_loop(&code, 0x1000, 20).is_err());
        // Every branch form keeps its opcode, and a target out of reach is None.
        assert_eq!(retarget(0x5400_0001, 0x1000, 0x1008), Some(0x5400_0041));
        assert_eq!(retarget(0x3600_0000, 0x1000, 0x1004), Some(0x3600_0020));
        assert_eq!(retarget(0x3600_0000, 0x1000, 0x1000 + (1 << 16)), None);
    }

    #[test]
    fn exclusives_are_refused() {
        // ldxr x0, [x1]; stxr w2, x0, [x1]; ldaxr w3, [x4]
        for w in [0xc85f_7c20, 0xc802_7c20, 0x885f_fc83] {
            assert!(matches!(relocate_word(w, 0x1000, 0x2000, true), Err(Refusal::Exclusive { .. })), "{w:#x}");
        }
    }

    #[test]
    fn in_reach_forms_stay_one_instruction() {
        // adrp x0, +0x5000 pages from 0x400000, copied 16 MiB away.
        let w = 0x9000_0000 | (5 & 3) << 29 | (5 >> 2) << 5;
        assert_eq!(relocate_word(w, 0x40_0000, 0x140_0000, false).unwrap().len(), 4);
        // ldr x1, #0x100 copied 4 KiB away.
        let w = 0x5800_0000 | (0x40 << 5) | 1;
        assert_eq!(relocate_word(w, 0x40_0000, 0x40_1000, false).unwrap().len(), 4);
    }

    #[test]
    fn a_function_starts_after_its_landing_pad() {
        // bti c; paciasp; stp x29, x30, [sp, #-16]!; ...; ret
        let words = [0xd503_245f, 0xd503_233f, 0xa9bf_7bfd, 0x9100_03fd, 0xa8c1_7bfd, 0xd50323bf, 0xd65f_03c0];
        let code: Vec<u8> = words.iter().flat_map(|w: &u32| w.to_le_bytes()).collect();
        let h = plan(&code, 0x1000, code.len() as u64).unwrap();
        assert_eq!(h, Hook { patch_at: 0x1004, displaced: 4 });
        // paciasp first: the pad itself.
        let h = plan(&code[4..], 0x1004, code.len() as u64 - 4).unwrap();
        assert_eq!(h.patch_at, 0x1008);
        // No pad: the first instruction.
        assert_eq!(plan(&code[8..], 0x1008, code.len() as u64 - 8).unwrap().patch_at, 0x1008);
    }

    #[test]
    fn loops_back_to_the_site_and_short_functions_are_refused() {
        // loop: subs x0, x0, #1; b.ne loop; ret
        let words: [u32; 3] = [0xf100_0400, 0x54ff_ffe1, 0xd65f_03c0];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(plan(&code, 0x1000, 12), Err(Refusal::LoopToEntry { from: 4, to: 0 }));
        assert_eq!(plan(&0xd503_245fu32.to_le_bytes(), 0x1000, 4), Err(Refusal::ShortFunction { size: 4, pad: 4 }));
        assert_eq!(plan(&[], 0x1000, 0), Err(Refusal::UnknownSize));
    }

    #[test]
    fn the_facade_relocates_and_branches_back() {
        // add x0, x1, x2 at 0x1000, copied to 0x2000: the word, then b 0x1004.
        let w = 0x8b02_0020u32;
        let (b, map) = relocate_with_map(&w.to_le_bytes(), 0x1000, 4, 0x2000).unwrap();
        assert_eq!(&b[..4], &w.to_le_bytes());
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), branch(0x2004, 0x1004, false).unwrap());
        assert_eq!(map.map, vec![(0x2000, 0x1000), (0x2004, 0x1004)]);
        assert_eq!(relocated_pc(&w.to_le_bytes(), 0x1000, 4, 0x2000, 0x1000), Some(0x2000));
        // Out of a B's reach, without a scratch register: refused.
        assert!(relocate_with_map(&w.to_le_bytes(), 0x1000, 4, 0x1000 + (1 << 30)).is_err());
        // At a function's entry: back through x16 (a veneer), unless the
        // instruction writes x16 (mov x16, x1).
        let far = 0x1000 + (1 << 30);
        let (b, _) = relocate_at_entry(&w.to_le_bytes(), 0x1000, 4, far).unwrap();
        assert_eq!(&b[4..], &veneer(0x1004));
        assert!(relocate_at_entry(&0xaa01_03f0u32.to_le_bytes(), 0x1000, 4, far).is_err());
        assert_eq!(u32::from_le_bytes(SIGRETURN[..4].try_into().unwrap()), 0xd280_1168);
    }

    #[test]
    fn the_signal_stub_loads_its_two_addresses() {
        let b = signal_stub(0x1111, 0x2222);
        let mut s = State { x: [0; 31], v: [0; 32], nzcv: 0 };
        // The model runs up to the branch: x16 = handler, x3 = region.
        assert_eq!(run(&mut s, &b, 0x5000), 0x2222);
        assert_eq!(s.x[3], 0x1111);
    }

    #[test]
    fn branches_and_veneers_reach() {
        assert_eq!(branch(0x1000, 0x1000 + (1 << 27) - 4, false), Some(0x15ff_ffff));
        assert_eq!(branch(0x1000, 0x1000 + (1 << 27), false), None);
        assert_eq!(branch(0x1000_0000, 0x1000_0000 - (1 << 27), true), Some(0x9600_0000));
        let v = veneer(0xdead_beef_0000);
        let mut s = State { x: [0; 31], v: [0; 32], nzcv: 0 };
        assert_eq!(run(&mut s, &v, 0x5000), 0xdead_beef_0000);
    }
}
