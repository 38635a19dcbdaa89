//! Our own code in the target, as an unwinder needs it: a sample (or a
//! signal) can land in a trampoline, in the relocated first instructions
//! of a probed function, in a compiled handler or in the runtime library,
//! none of which has CFI. Pass 5 registers each piece it writes here
//! ([`OwnCode::add`]); the profiler steps out of them with
//! [`OwnCode::step`] before framehop goes on in the program's own code.
//!
//! Each piece has rows ([`crate::arch::native::frames::rows`]): at every
//! instruction, where `E` is, the stack pointer of the frame the piece
//! serves:
//!
//! * a **handler or runtime function** (called): its caller, with the
//!   return address at `E - 8`;
//! * a **return trampoline** (returned into): the caller of the probed
//!   function, its return address at `E - 8` too (the address the probed
//!   function returned to, in its entry trampoline, until the return
//!   trampoline writes the original back there; the shadow stack names
//!   it);
//! * an **entry trampoline**: the probed site itself, with rsp = `E` (the
//!   function has not started; for a statement or marker, the instruction
//!   the patch replaced);
//! * **relocated instructions**: no rows; they are the probed function's
//!   own, at their original addresses (the function's CFI applies).
//!
//! The samples in pieces other than relocated instructions get one frame
//! of their own, `[telco-stap]`: the time the probes take, under the
//! probed function.

use std::sync::{Arc, RwLock};

pub use crate::frames::{Cfa, Fp, Ra, Row};

/// What a piece of our code is.
#[derive(Clone, Debug)]
pub enum Kind {
    /// Compiled handlers and the runtime library (the blob), called.
    Called,
    /// A return trampoline.
    Return,
    /// An entry trampoline of the probed site at `site`.
    Entry { site: u64 },
    /// Where the tracer's own calls into the target return (a code
    /// region's traps): the stack's root for code it called.
    Root,
    /// Relocated instructions: (copy, original) address of each, in order,
    /// the jump back last (its original: the instruction after them); and
    /// where a call they end with is under way (`patch::CopyMap::calling`,
    /// with the call's return address).
    Relocated { map: Vec<(u64, u64)>, calling: Option<(u64, u64, u64)> },
}

#[derive(Clone, Debug)]
struct Piece {
    start: u64,
    end: u64,
    kind: Kind,
    rows: Arc<[Row]>,
}

/// Every piece of code a session wrote into its processes.
#[derive(Default, Debug)]
pub struct OwnCode {
    /// Per process, by start address (pieces do not overlap).
    pieces: std::collections::HashMap<u32, Vec<Piece>>,
}

/// Shared between pass 5, which adds pieces as it hooks libraries, and the
/// profiler.
pub type Shared = Arc<RwLock<OwnCode>>;

/// Where an unwinder goes on from a frame in our code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// At an instruction about to run (an entry trampoline's site; the
    /// original of a relocated instruction), with this stack pointer and
    /// frame pointer, and the link register where the machine has one and
    /// it is known (what a function's entry returns through).
    At { pc: u64, sp: u64, fp: u64, lr: Option<u64> },
    /// At a return address (`pc`), the caller's frame.
    Return { pc: u64, sp: u64, fp: u64 },
    /// At the return address the thread's shadow stack holds for its
    /// innermost probed call, with this stack pointer: the word was below
    /// the stack pointer when the sample was taken (not in its copy of the
    /// stack), or overwritten.
    Shadow { sp: u64, fp: u64 },
    /// The root: code the tracer called (`inject`), returning to a trap.
    Root,
}

/// A frame in our code, as the unwinder meets it.
#[derive(Clone, Copy, Debug)]
pub struct Here<'a> {
    /// The pc, or a return address.
    pub pc: u64,
    pub is_return: bool,
    pub sp: u64,
    pub fp: u64,
    /// The sample's registers, when this is its first frame.
    pub regs: Option<&'a [u64]>,
}

impl OwnCode {
    /// Register `[start, end)` of process `pid` as a piece of `kind` with
    /// `rows` (empty for relocated instructions).
    pub fn add(&mut self, pid: u32, start: u64, end: u64, kind: Kind, rows: Arc<[Row]>) {
        let list = self.pieces.entry(pid).or_default();
        let at = list.partition_point(|p| p.start < start);
        list.insert(at, Piece { start, end, kind, rows });
    }

    /// Process `pid` runs another program now (it exec'd): what was
    /// written into the old one is gone.
    pub fn forget(&mut self, pid: u32) {
        self.pieces.remove(&pid);
    }

    /// Whether `pc` of process `pid` is in our code: relocated
    /// instructions (`Some(false)`) or anything else of ours
    /// (`Some(true)`).
    pub fn holds(&self, pid: u32, pc: u64) -> Option<bool> {
        self.find(pid, pc).map(|p| !matches!(p.kind, Kind::Relocated { .. }))
    }

    /// The piece holding `pc`: the process's own; a process with none (a
    /// forked child, running its parent's copy until it execs) looks among
    /// every process's.
    fn find(&self, pid: u32, pc: u64) -> Option<&Piece> {
        fn within(list: &[Piece], pc: u64) -> Option<&Piece> {
            let i = list.partition_point(|p| p.start <= pc);
            list.get(i.checked_sub(1)?).filter(|p| pc < p.end)
        }
        match self.pieces.get(&pid) {
            Some(own) => within(own, pc),
            None => self.pieces.values().find_map(|l| within(l, pc)),
        }
    }

    /// Step out of the frame `h` (in our code of process `pid`), reading
    /// the stack with `read`: where the unwinder goes on, or None where it
    /// cannot (the rows do not know; the stack was not copied that far).
    pub fn step(&self, pid: u32, h: &Here<'_>, read: &mut dyn FnMut(u64) -> Option<u64>) -> Option<Next> {
        let p = self.find(pid, h.pc)?;
        if let Kind::Relocated { map, calling } = &p.kind {
            if let Some((lo, hi, back)) = calling {
                if (*lo..*hi).contains(&h.pc) && !h.is_return {
                    return Some(Next::Return { pc: *back, sp: h.sp.wrapping_add(8), fp: h.fp });
                }
            }
            // The original of this copy's instruction: the last that starts
            // at or before it (one the copy widened is still one).
            let i = map.partition_point(|m| m.0 <= h.pc);
            let orig = map.get(i.checked_sub(1)?)?.1;
            let (sp, fp) = (h.sp, h.fp);
            let lr = link(h);
            return Some(if h.is_return {
                Next::Return { pc: orig, sp, fp }
            } else {
                Next::At { pc: orig, sp, fp, lr }
            });
        }
        if let Kind::Root = p.kind {
            return Some(Next::Root);
        }
        let off = u32::try_from(h.pc - p.start).ok()?;
        let i = p.rows.partition_point(|r| r.off <= off);
        let row = p.rows.get(i.checked_sub(1)?)?;
        let e = match row.cfa {
            Cfa::Unknown => return None,
            Cfa::Sp(k) | Cfa::Returned(k) => h.sp.wrapping_add(k as u64),
            Cfa::Reg(r, k) => h.regs?.get(r)?.wrapping_add(k as u64),
            Cfa::Deref(a, k) => read(h.sp.wrapping_add(a as u64))?.wrapping_add(k as u64),
            Cfa::Fp(k) => h.fp.wrapping_add(k as u64),
        };
        let fp = match row.fp {
            Fp::Same => h.fp,
            Fp::At(k) => read(e.wrapping_add(k as u64))?,
        };
        // Unwinding goes up the stack. An entry trampoline that dropped
        // the return address to call the function (rsp = E + 8) and a
        // return trampoline just entered (its return address at E - 8)
        // have it below the stack pointer, in the shadow stack.
        match p.kind {
            Kind::Entry { .. } if e < h.sp => {
                return (e + 8 == h.sp && !h.is_return).then_some(Next::Shadow { sp: h.sp, fp })
            }
            Kind::Return if e < h.sp + 8 => return (e >= h.sp && !h.is_return).then_some(Next::Shadow { sp: e, fp }),
            _ if e < h.sp => return None,
            _ => {}
        }
        if let Cfa::Returned(_) = row.cfa {
            // The shadow stack knows where: the trampoline's address stands
            // for that return address.
            return (!h.is_return || e > h.sp).then_some(Next::Return { pc: h.pc, sp: e, fp });
        }
        // The return address (the caller's: an entry trampoline's for the
        // function about to start).
        let ra = match row.ra {
            Ra::At(k) => read(e.wrapping_add(k as u64)),
            Ra::Lr => link(h),
            Ra::Shadow => Some(p.start),
            Ra::Unknown => None,
        };
        match p.kind {
            Kind::Entry { site } => Some(Next::At { pc: site, sp: e, fp, lr: ra }),
            _ => Some(Next::Return { pc: crate::arch::native::strip_return(ra?), sp: e, fp }),
        }
    }
}

/// The link register of the sample's first frame, where the machine has
/// one.
fn link(h: &Here<'_>) -> Option<u64> {
    let r = crate::arch::native::frames::LINK_REGISTER?;
    h.regs?.get(r).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(list: &[(u32, Cfa, Fp)]) -> Arc<[Row]> {
        list.iter().map(|&(off, cfa, fp)| Row { off, cfa, fp, ra: Ra::At(-8) }).collect()
    }

    #[test]
    fn steps_out_of_each_kind_of_piece() {
        let mut own = OwnCode::default();
        own.add(7, 0x1000, 0x1100, Kind::Called, rows(&[(0, Cfa::Sp(8), Fp::Same), (1, Cfa::Sp(16), Fp::At(-16))]));
        own.add(
            7,
            0x2000,
            0x2040,
            Kind::Entry { site: 0x5000 },
            rows(&[(0, Cfa::Sp(0), Fp::Same), (4, Cfa::Sp(0x80), Fp::Same)]),
        );
        own.add(
            7,
            0x2040,
            0x2050,
            Kind::Relocated { map: vec![(0x2040, 0x5000), (0x2041, 0x5001), (0x2046, 0x5005)], calling: None },
            rows(&[]),
        );
        let stack: std::collections::HashMap<u64, u64> = [(0x7fe8, 0x4444), (0x7ff0, 0x2010)].into_iter().collect();
        let mut read = |a: u64| stack.get(&a).copied();
        // In a handler, after its push rbp: the caller is the trampoline,
        // its frame pointer the one saved.
        let h = Here { pc: 0x1004, is_return: false, sp: 0x7fe8, fp: 1, regs: None };
        assert_eq!(own.step(7, &h, &mut read), Some(Next::Return { pc: 0x2010, sp: 0x7ff8, fp: 0x4444 }));
        // In the trampoline, 0x80 below the site.
        let h = Here { pc: 0x2010, is_return: true, sp: 0x7ff8, fp: 0x4444, regs: None };
        assert_eq!(own.step(7, &h, &mut read), Some(Next::At { pc: 0x5000, sp: 0x8078, fp: 0x4444, lr: None }));
        // In the relocated copy: the original instruction.
        let h = Here { pc: 0x2041, is_return: false, sp: 0x8000, fp: 9, regs: None };
        assert_eq!(own.holds(7, 0x2041), Some(false));
        assert_eq!(own.step(7, &h, &mut read), Some(Next::At { pc: 0x5001, sp: 0x8000, fp: 9, lr: None }));
        // Its jump back stands for the instruction after the copied ones.
        let h = Here { pc: 0x2048, is_return: false, sp: 0x8000, fp: 9, regs: None };
        assert_eq!(own.step(7, &h, &mut read), Some(Next::At { pc: 0x5005, sp: 0x8000, fp: 9, lr: None }));
        // A forked child (pid 8) runs the same copy.
        assert_eq!(own.holds(8, 0x1004), Some(true));
        assert_eq!(own.holds(7, 0x3000), None);
        // Once it has code of its own (it exec'd), only that.
        own.add(8, 0x9000, 0x9100, Kind::Called, rows(&[]));
        assert_eq!(own.holds(8, 0x1004), None);
        own.forget(7);
        assert_eq!(own.holds(7, 0x1004), None);
    }

    #[test]
    fn unwinding_never_goes_down_the_stack() {
        let mut own = OwnCode::default();
        own.add(1, 0x1000, 0x1100, Kind::Called, rows(&[(0, Cfa::Sp(-8), Fp::Same)]));
        let h = Here { pc: 0x1000, is_return: false, sp: 0x8000, fp: 0, regs: None };
        assert_eq!(own.step(1, &h, &mut |_| Some(0x1000)), None);
    }
}
