//! Unwind rows for our own code in the target on aarch64 (x86_64's
//! `frames.rs` explains the model): at every instruction of a trampoline,
//! a compiled handler or a runtime function, where `E` (the stack pointer
//! of the frame it serves) is, where the frame's own frame pointer (x29)
//! is, and where its return address is: in x30 still (a function's entry,
//! a trampoline before it calls anything) or saved at `E + k` (where a
//! prologue's `stp x29, x30` or a trampoline's register block put it).
//!
//! The code is followed from its entry along every path (branches, not a
//! linear sweep) while the stack pointer moves by `sub`/`add` on sp (an
//! immediate, or x16/x17 holding a constant built by `movz`/`movk`, as
//! Cranelift's large frames do), by pre- and post-indexed loads and stores
//! on sp, and back from x29 (`mov x29, sp` / `add x29, sp, #k`, then
//! `mov sp, x29`). Anything else that writes sp makes the rest unknown:
//! the unwinder stops there and says so.
//!
//! A return trampoline ([`return_rows`]) is entered by the probed
//! function's `ret` with sp = `E` (the caller's); the return address it
//! goes back to is the one the thread's shadow stack holds for it
//! ([`Ra::Shadow`]: the profiler finds it by the trampoline's address, as
//! for a return address that names one) until the trampoline has it in
//! x30 and stores it, from where the rows follow it as any other.

use crate::frames::{Cfa, Fp, Ra, Row};
use std::collections::BTreeMap;

/// The register file's index of the link register (x30), which a
/// sample's first frame holds.
pub const LINK_REGISTER: Option<usize> = Some(30);
/// A called function's stack pointer at its entry against `E` (its
/// caller's: a `bl` pushes nothing).
pub const CALLED_ENTRY: i64 = 0;

const SP: u32 = 31;
const FP: u32 = 29;
const LR: u32 = 30;

/// Where the frame's return address is, as the analysis follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// In x30 (and, with `Some(k)`, also saved at E + k).
    Reg(Option<i64>),
    /// Saved at E + k only (x30 changed since: a call).
    At(i64),
    /// In the shadow stack (a return trampoline before it takes it).
    Shadow,
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    /// sp = E + v.
    sp: Option<i64>,
    /// x29 = E + k (a copy of the stack pointer).
    x29: Option<i64>,
    /// Where the frame's own x29 is.
    fp: Fp,
    link: Link,
    /// Constants in x16 and x17 (`movz`/`movk`).
    ip: [Option<u64>; 2],
}

impl State {
    fn row(&self, off: u32) -> Row {
        let cfa = match (self.sp, self.x29) {
            (Some(v), _) => Cfa::Sp(-v),
            (None, Some(k)) => Cfa::Fp(-k),
            _ => Cfa::Unknown,
        };
        let ra = match self.link {
            // A copy below the stack pointer may be gone (a signal frame
            // goes there): x30 then.
            Link::Reg(Some(k)) if self.sp.is_some_and(|v| k < v) => Ra::Lr,
            Link::Reg(Some(k)) | Link::At(k) => Ra::At(k),
            Link::Reg(None) => Ra::Lr,
            Link::Shadow => Ra::Shadow,
            Link::Unknown => Ra::Unknown,
        };
        Row { off, cfa, fp: self.fp, ra }
    }
}

/// The rows of the code at `at` (`code`: whole words; our code has no data
/// between instructions but literal pools after a branch, which no path
/// reaches), entered at its start with sp = E + `entry` and the return
/// address in x30. One row per instruction; those no path reaches get
/// [`Cfa::Unknown`]. `_intra` is x86_64's (a trampoline calling the
/// probed function): aarch64's jump back instead.
pub fn rows(code: &[u8], at: u64, entry: i64, _intra: Option<std::ops::Range<u64>>) -> Vec<Row> {
    rows_from(code, at, entry, Link::Reg(None))
}

/// A return trampoline's rows (the module's documentation).
pub fn return_rows(code: &[u8], at: u64) -> Vec<Row> {
    rows_from(code, at, 0, Link::Shadow)
}

fn rows_from(code: &[u8], at: u64, entry: i64, link: Link) -> Vec<Row> {
    let words: Vec<u32> = code.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
    let mut states: Vec<Option<State>> = vec![None; words.len()];
    let start = State { sp: Some(entry), x29: None, fp: Fp::Same, link, ip: [None; 2] };
    let mut todo = vec![(0usize, start)];
    let index: BTreeMap<u64, usize> = (0..words.len()).map(|i| (at + 4 * i as u64, i)).collect();
    while let Some((i, s)) = todo.pop() {
        if i >= words.len() || states[i].is_some() {
            continue;
        }
        states[i] = Some(s);
        let w = words[i];
        let here = at + 4 * i as u64;
        let next = step(w, s);
        match flow(w, here) {
            Flow::Next => todo.push((i + 1, next)),
            Flow::Branch(t) => {
                if let Some(&k) = index.get(&t) {
                    todo.push((k, next));
                }
            }
            Flow::Cond(t) => {
                todo.push((i + 1, next));
                if let Some(&k) = index.get(&t) {
                    todo.push((k, next));
                }
            }
            Flow::End => {}
        }
    }
    states
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let off = 4 * i as u32;
            match s {
                Some(s) => s.row(off),
                None => Row { off, cfa: Cfa::Unknown, fp: Fp::Same, ra: Ra::Unknown },
            }
        })
        .collect()
}

enum Flow {
    Next,
    Branch(u64),
    Cond(u64),
    End,
}

fn sext(v: u32, bits: u32) -> i64 {
    ((v as i64) << (64 - bits)) >> (64 - bits)
}

/// How control leaves word `w` at `here` (calls come back: `Next`).
fn flow(w: u32, here: u64) -> Flow {
    let rel = |imm: i64| here.wrapping_add((imm * 4) as u64);
    match w {
        // b
        _ if w & 0xfc00_0000 == 0x1400_0000 => Flow::Branch(rel(sext(w & 0x03ff_ffff, 26))),
        // b.cond, bc.cond
        _ if w & 0xff00_0000 == 0x5400_0000 => {
            if w & 0xf == 0xe {
                Flow::Branch(rel(sext((w >> 5) & 0x7ffff, 19)))
            } else {
                Flow::Cond(rel(sext((w >> 5) & 0x7ffff, 19)))
            }
        }
        // cbz, cbnz
        _ if w & 0x7e00_0000 == 0x3400_0000 => Flow::Cond(rel(sext((w >> 5) & 0x7ffff, 19))),
        // tbz, tbnz
        _ if w & 0x7e00_0000 == 0x3600_0000 => Flow::Cond(rel(sext((w >> 5) & 0x3fff, 14))),
        // br, ret, eret and their authenticated forms (blr is a call).
        _ if w & 0xfe1f_0000 == 0xd61f_0000 && (w >> 21) & 7 != 1 => Flow::End,
        // brk, hlt, udf
        _ if w & 0xffe0_001f == 0xd420_0000 || w & 0xffe0_001f == 0xd440_0000 || w >> 16 == 0 => Flow::End,
        _ => Flow::Next,
    }
}

/// The state after word `w` (on the path that goes on).
fn step(w: u32, mut s: State) -> State {
    let rd = w & 31;
    let rn = (w >> 5) & 31;
    // The x30 a call changes (bl, blr and authenticated forms): saved
    // copies stay.
    let call = w & 0xfc00_0000 == 0x9400_0000 || (w & 0xfe1f_0000 == 0xd61f_0000 && (w >> 21) & 7 == 1);
    if call {
        s.link = match s.link {
            Link::Reg(Some(k)) => Link::At(k),
            Link::Reg(None) => Link::Unknown,
            l => l,
        };
        s.ip = [None; 2];
        return s;
    }
    // add/sub (immediate), 64-bit.
    if matches!(w & 0xff80_0000, 0x9100_0000 | 0x9140_0000 | 0xd100_0000 | 0xd140_0000) {
        let imm = (((w >> 10) & 0xfff) as i64) << if w & (1 << 22) != 0 { 12 } else { 0 };
        let imm = if w & (1 << 30) != 0 { -imm } else { imm };
        let src = match rn {
            SP => s.sp,
            FP => s.x29,
            _ => None,
        };
        match rd {
            SP => s.sp = src.map(|v| v + imm),
            FP => s.x29 = src.map(|v| v + imm),
            16 | 17 => s.ip[(rd - 16) as usize] = None,
            _ => {}
        }
        return s;
    }
    // add/sub (extended register, uxtx #0), 64-bit: sp ± x16/x17.
    if matches!(w & 0xffe0_fc00, 0x8b20_6000 | 0xcb20_6000) {
        let rm = (w >> 16) & 31;
        let by = if (16..=17).contains(&rm) { s.ip[(rm - 16) as usize].map(|v| v as i64) } else { None };
        let by = if w & (1 << 30) != 0 { by.map(|v| -v) } else { by };
        match rd {
            SP => s.sp = if rn == SP { s.sp.zip(by).map(|(v, b)| v + b) } else { None },
            FP => s.x29 = None,
            _ => {}
        }
        return s;
    }
    // movz, movk, movn (64-bit) into x16/x17.
    if matches!(rd, 16 | 17) && matches!(w & 0xff80_0000, 0xd280_0000 | 0xf280_0000 | 0x9280_0000) {
        let hw = (w >> 21) & 3;
        let imm = u64::from((w >> 5) & 0xffff) << (16 * hw);
        let k = (rd - 16) as usize;
        s.ip[k] = match w & 0xff80_0000 {
            0xd280_0000 => Some(imm),
            0x9280_0000 => Some(!imm),
            _ => s.ip[k].map(|v| (v & !(0xffff << (16 * hw))) | imm),
        };
        return s;
    }
    // Pairs (64-bit general registers): stp/ldp, signed offset, pre- and
    // post-indexed.
    if w & 0xfe00_0000 == 0xa800_0000 {
        let mode = (w >> 23) & 3; // 1 post, 2 offset, 3 pre
        let load = w & (1 << 22) != 0;
        let imm = sext((w >> 15) & 0x7f, 7) * 8;
        let (rt, rt2) = (w & 31, (w >> 10) & 31);
        if mode == 0 {
            return clobber(s, &[rt, rt2], load);
        }
        let base = if rn == SP { s.sp } else { None };
        let addr = base.map(|b| if mode == 1 { b } else { b + imm });
        for (r, k) in [(rt, 0), (rt2, 8)] {
            s = transfer(s, r, addr.map(|a| a + k), load);
        }
        if mode != 2 && rn == SP {
            s.sp = s.sp.map(|v| v + imm);
        }
        return s;
    }
    // Single 64-bit general register: str/ldr unsigned offset, pre- and
    // post-indexed (unscaled and register offsets: no sp change, and
    // counted as a transfer only when the address is known).
    if w & 0xffc0_0000 == 0xf900_0000 || w & 0xffc0_0000 == 0xf940_0000 {
        let load = w & (1 << 22) != 0;
        let off = i64::from((w >> 10) & 0xfff) * 8;
        let addr = if rn == SP { s.sp.map(|v| v + off) } else { None };
        return transfer(s, w & 31, addr, load);
    }
    if (w & 0xffe0_0c00 == 0xf800_0c00 || w & 0xffe0_0c00 == 0xf800_0400)
        || (w & 0xffe0_0c00 == 0xf840_0c00 || w & 0xffe0_0c00 == 0xf840_0400)
    {
        let load = w & (1 << 22) != 0;
        let pre = w & 0x800 != 0;
        let imm = sext((w >> 12) & 0x1ff, 9);
        let base = if rn == SP { s.sp } else { None };
        let addr = base.map(|b| if pre { b + imm } else { b });
        s = transfer(s, w & 31, addr, load);
        if rn == SP {
            s.sp = s.sp.map(|v| v + imm);
        }
        return s;
    }
    // Anything else naming sp or x29 as its destination: unknown. (Other
    // writes of x30, x16, x17: loads of them are handled above; moves and
    // arithmetic below.)
    if writes_rd(w) {
        match rd {
            FP => s.x29 = None,
            LR => {
                s.link = match s.link {
                    Link::Reg(Some(k)) => Link::At(k),
                    Link::Reg(None) => Link::Unknown,
                    // A return trampoline takes the address it popped.
                    Link::Shadow => Link::Reg(None),
                    l => l,
                }
            }
            16 | 17 => s.ip[(rd - 16) as usize] = None,
            _ => {}
        }
        if rd == SP && writes_sp(w) {
            s.sp = None;
        }
    }
    s
}

/// A load or store of register `r` at E + `addr` (if known).
fn transfer(mut s: State, r: u32, addr: Option<i64>, load: bool) -> State {
    if load {
        match r {
            LR => {
                s.link = match (s.link, addr) {
                    // Back from where it was saved: in x30 again (and there).
                    (Link::At(k) | Link::Reg(Some(k)), Some(a)) if a == k => Link::Reg(Some(k)),
                    // Something else (a return trampoline's address from a
                    // slot): x30 holds it, the saved copy stands.
                    (Link::At(k), _) => Link::At(k),
                    _ => Link::Unknown,
                };
            }
            FP => {
                if let (Fp::At(k), Some(a)) = (s.fp, addr) {
                    if a == k {
                        s.fp = Fp::Same;
                    }
                }
                s.x29 = None;
            }
            16 | 17 => s.ip[(r - 16) as usize] = None,
            _ => {}
        }
        return s;
    }
    match (r, addr) {
        (LR, Some(a)) => {
            if let Link::Reg(None) = s.link {
                s.link = Link::Reg(Some(a));
            }
        }
        (FP, Some(a)) => {
            if s.fp == Fp::Same && s.x29.is_none() {
                s.fp = Fp::At(a);
            }
        }
        _ => {}
    }
    // A store over the saved return address (a trampoline's return slot
    // given the return trampoline's address): the register's copy only.
    if let (Some(a), Link::Reg(Some(k)) | Link::At(k)) = (addr, s.link) {
        if a == k && r != LR {
            s.link = match s.link {
                Link::Reg(_) => Link::Reg(None),
                _ => Link::Unknown,
            };
        }
    }
    s
}

/// A pair transfer with no known address (no-allocate pairs and the like).
fn clobber(mut s: State, regs: &[u32], load: bool) -> State {
    if load {
        for &r in regs {
            s = transfer(s, r, None, true);
        }
    }
    s
}

/// Whether `w` (not one of the forms above) writes its `Rd` field: data
/// processing (immediate and register) and loads; branches, stores,
/// system instructions and compares do not.
fn writes_rd(w: u32) -> bool {
    let op0 = (w >> 25) & 0xf;
    let dp_imm = op0 & 0b1110 == 0b1000;
    let dp_reg = op0 & 0b0111 == 0b0101;
    let load = op0 & 0b0101 == 0b0100 && w & (1 << 22) != 0 && w & (1 << 26) == 0;
    // Flag-setting forms with Rd = 31 are compares (the zero register).
    (dp_imm || dp_reg || load) && !(w & (1 << 29) != 0 && w & 31 == 31 && (dp_imm || dp_reg))
}

/// Whether Rd = 31 means sp for `w`: add/sub (immediate or extended
/// register) without flags, and logical immediates.
fn writes_sp(w: u32) -> bool {
    let addsub_imm = w & 0x1f00_0000 == 0x1100_0000 && w & (1 << 29) == 0;
    let addsub_ext = w & 0x1f20_0000 == 0x0b20_0000 && w & (1 << 29) == 0;
    let logical_imm = w & 0x1f80_0000 == 0x1200_0000 && (w >> 29) & 3 != 3;
    addsub_imm || addsub_ext || logical_imm
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// A gcc prologue and epilogue: `stp x29, x30, [sp, #-32]!; mov x29,
    /// sp; str x19, [sp, #16]; bl f; ldr x19, [sp, #16]; ldp x29, x30,
    /// [sp], #32; ret`.
    #[test]
    fn a_called_function_saves_its_return_address() {
        let code = le(&[0xa9be_7bfd, 0x9100_03fd, 0xf9000bf3, 0x9400_0010, 0xf9400bf3, 0xa8c2_7bfd, 0xd65f_03c0]);
        let r = rows(&code, 0x1000, CALLED_ENTRY, None);
        assert_eq!(r.len(), 7);
        // At the entry: E = sp, the return address in x30.
        assert_eq!((r[0].cfa, r[0].ra, r[0].fp), (Cfa::Sp(0), Ra::Lr, Fp::Same));
        // After the push: E = sp + 32, x30 and x29 saved at E - 24 and E - 32.
        assert_eq!((r[1].cfa, r[1].ra, r[1].fp), (Cfa::Sp(32), Ra::At(-24), Fp::At(-32)));
        // Across the call: still saved.
        assert_eq!((r[4].cfa, r[4].ra), (Cfa::Sp(32), Ra::At(-24)));
        // After the pop: back in x30 (its copy is below sp now), sp = E.
        assert_eq!((r[6].cfa, r[6].ra, r[6].fp), (Cfa::Sp(0), Ra::Lr, Fp::Same));
    }

    /// Cranelift's large frame: `stp x29, x30, [sp, #-16]!; mov x29, sp;
    /// movz x16, #0x2000; sub sp, sp, x16, uxtx; ...; mov sp, x29; ldp
    /// x29, x30, [sp], #16; ret`.
    #[test]
    fn large_frames_through_x16_and_back_through_x29() {
        let code = le(&[
            0xa9bf_7bfd,
            0x9100_03fd,
            0xd284_0010,
            0xcb30_63ff,
            0xd503_201f,
            0x9100_03bf,
            0xa8c1_7bfd,
            0xd65f_03c0,
        ]);
        let r = rows(&code, 0x1000, 0, None);
        assert_eq!(r[4].cfa, Cfa::Sp(16 + 0x2000));
        assert_eq!(r[6].cfa, Cfa::Sp(16));
        assert_eq!(r[7].cfa, Cfa::Sp(0));
    }

    /// A trampoline's shape: `sub sp, sp, #0x200; stp x29, x30, [sp,
    /// #232]; blr x16; ldp x29, x30, [sp, #232]; add sp, sp, #0x200; b
    /// back`.
    #[test]
    fn a_trampoline_keeps_the_link_register_findable_across_its_calls() {
        let code = le(&[0xd108_03ff, 0xa90e_fbfd, 0xd63f_0200, 0xa94e_fbfd, 0x9108_03ff, 0x1400_0100]);
        let r = rows(&code, 0x2000, 0, None);
        assert_eq!((r[0].cfa, r[0].ra), (Cfa::Sp(0), Ra::Lr));
        assert_eq!((r[1].cfa, r[1].ra), (Cfa::Sp(0x200), Ra::Lr));
        // Saved at sp + 240 = E - 0x200 + 240.
        assert_eq!(r[2].ra, Ra::At(240 - 0x200));
        assert_eq!(r[3].ra, Ra::At(240 - 0x200));
        assert_eq!((r[5].cfa, r[5].ra), (Cfa::Sp(0), Ra::Lr));
    }

    #[test]
    fn unknown_writes_of_sp_stop_the_rows() {
        // mov sp, x8 (add sp, x8, #0); ret
        let r = rows(&le(&[0x9100_011f, 0xd65f_03c0]), 0, 0, None);
        assert_eq!(r[1].cfa, Cfa::Unknown);
    }

    /// A return trampoline's shape: `sub sp, sp, #0x200; blr x16
    /// (rt_ret_pop); mov x30, x0; str x30, [sp, #240]; blr x16 (a
    /// handler); ldr x30, [sp, #240]; add sp, sp, #0x200; ret`.
    #[test]
    fn a_return_trampoline_has_the_shadow_stacks_address_until_it_takes_it() {
        let code = le(&[
            0xd108_03ff,
            0xd63f_0200,
            0xaa00_03fe,
            0xf900_7bfe,
            0xd63f_0200,
            0xf940_7bfe,
            0x9108_03ff,
            0xd65f_03c0,
        ]);
        let r = return_rows(&code, 0x3000);
        assert_eq!((r[0].cfa, r[0].ra), (Cfa::Sp(0), Ra::Shadow));
        assert_eq!((r[2].cfa, r[2].ra), (Cfa::Sp(0x200), Ra::Shadow));
        assert_eq!(r[3].ra, Ra::Lr);
        assert_eq!(r[4].ra, Ra::At(240 - 0x200));
        assert_eq!(r[5].ra, Ra::At(240 - 0x200));
        assert_eq!((r[7].cfa, r[7].ra), (Cfa::Sp(0), Ra::Lr));
    }
}
