//! aarch64: where the 4-byte `B` may be written inside a function
//! (statement probes, SDT markers), decided from the file before anything
//! runs.
//!
//! Every instruction is one aligned 4-byte word and the `B` is one word:
//! a patch at A displaces exactly the instruction at A, written whole, so
//! control can never arrive strictly inside the displaced bytes (the
//! question that decides x86_64's sites). What decides here:
//!
//! * whether that one instruction can run at the trampoline instead. The
//!   runtime relocates it (`runtime/src/arch/aarch64/patch.rs`, whose
//!   relocation is the truth; this module repeats only its refusals that
//!   do not depend on where the trampoline is):
//!   refused are exclusive loads and stores (`ldxr`, `ldaxr`, `stxr`,
//!   `stlxr`, … — the exclusive monitor does not survive the branches to
//!   and from the trampoline) and any PC-relative instruction it does not
//!   re-encode; and, beyond the one instruction, any site inside an
//!   exclusive sequence (after a load-exclusive, before its
//!   store-exclusive: the probe run there would clear the monitor on every
//!   try of the loop);
//! * landing pads: `bti c`, `bti j`, `bti jc`, `paciasp`, `pacibsp` must
//!   stay where indirect branches find them (in BTI-guarded code a `B`
//!   there faults), so a site on one is moved to the next instruction, as
//!   the runtime does for function entries. The probe then runs with the
//!   registers as after the pad (a `bti` changes none; `paciasp` has
//!   signed x30). Nothing else may arrive at that next instruction, or the
//!   probe would run for control that never passed the site.
//!
//! So this module still collects, for the whole module, every address
//! control can arrive at other than by falling through (targets of direct
//! branches and calls; the return points of calls and `svc`s; code
//! addresses stored as data — 8-byte words of the non-executable sections
//! and the dynamic relocations' addends; code addresses computed by `adr`
//! and `adrp` + `add`; exception landing pads from each FDE's LSDA call-site
//! table), and the register branches (`br`) whose targets it cannot know
//! (gcc's aarch64 jump tables hold scaled offsets from an `adr` anchor).
//! They decide the moved site above and the lead below.
//!
//! x86_64's other shapes collapse: a `B` always fits one instruction, so
//! `need` is 4 (whole instructions covering more are planned the same way,
//! though nothing asks for them: no hops, [`super::hop`]), and no short
//! jump to the padding exists ([`Sites::plan_pad`] always refuses). The lead
//! ([`Sites::plan_lead`]) is the one instruction before the site, for a site
//! whose own instruction cannot move (a load-exclusive opening a sequence,
//! reached only by falling through); a `bl` before it makes the lead a call
//! probed at its return, as on x86_64.
//!
//! Pass 2 asks through `Module::plan_site` (statements, markers). Pass 5
//! takes the planned patch as is: the `B` goes at its file offset (or
//! `lead` bytes before it), over whole instructions.

use std::collections::BTreeMap;

use super::{decode, pc_offset, word_at};
use goblin::elf::section_header::{SHF_ALLOC, SHF_EXECINSTR, SHT_PROGBITS};
use goblin::elf::Elf;
use yaxpeax_arm::armv8::a64::{Instruction, Opcode, Operand};

pub use crate::arch::Patch;

/// The length of the `B` and of every instruction.
const B_LEN: u64 = 4;

/// The landing pads a function or a jump-table target starts with: `bti
/// c`, `bti j`, `bti jc`, `paciasp`, `pacibsp` (the runtime's set).
const LANDING_PADS: [u32; 5] = [0xd503_245f, 0xd503_249f, 0xd503_24df, 0xd503_233f, 0xd503_237f];

/// `nop`, and `udf #0` (zero bytes): padding between functions.
const NOP: u32 = 0xd503_201f;
const UDF0: u32 = 0;

/// How far back a site is checked for an open exclusive sequence (the
/// architecture guarantees forward progress only within 128 bytes).
const EXCLUSIVE_WINDOW: u64 = 32;

/// How control can arrive at an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// A branch or call at this address.
    Branch(u64),
    /// Returning from the call (or `svc`) at this address.
    Return(u64),
    /// A code address stored as data at this address (a table).
    Data(u64),
    /// A code address computed by the `adr` (or `adrp` + `add`) at this
    /// address: a label, a jump table's anchor, a function pointer.
    Address(u64),
    /// An exception landing pad.
    LandingPad,
}

/// What one module's code says about patch sites.
#[derive(Clone, Debug, Default)]
pub struct Sites {
    /// Executable ranges: link address, size, file offset.
    exec: Vec<(u64, u64, u64)>,
    /// Every address control may arrive at other than by falling through,
    /// with one way it does.
    arrivals: BTreeMap<u64, Arrival>,
    /// Register branches (`br`, `braa`…), sorted: their targets are not
    /// known.
    indirect: Vec<u64>,
    /// Function ranges from `.eh_frame` (start, end), sorted.
    pub fdes: Vec<(u64, u64)>,
}

impl Sites {
    pub fn build(elf: &Elf<'_>, bytes: &[u8]) -> Result<Sites, String> {
        let mut s = Sites::default();
        for sh in &elf.section_headers {
            let alloc = sh.sh_flags & u64::from(SHF_ALLOC) != 0;
            if alloc && sh.sh_flags & u64::from(SHF_EXECINSTR) != 0 && sh.sh_type == SHT_PROGBITS && sh.sh_size > 0 {
                s.exec.push((sh.sh_addr, sh.sh_size, sh.sh_offset));
            }
        }
        for (addr, size, off) in s.exec.clone() {
            let Some(code) = bytes.get(off as usize..off.saturating_add(size) as usize) else { continue };
            s.scan(addr, code);
        }
        // Code addresses stored as data.
        for (v, at) in super::super::code_addresses_in_data(elf, bytes, |v| s.in_exec(v)) {
            arrive(&mut s.arrivals, v, Arrival::Data(at));
        }
        for r in elf.dynrelas.iter().chain(elf.dynrels.iter()) {
            let value = match r.r_type {
                // R_AARCH64_RELATIVE, R_AARCH64_IRELATIVE: the addend.
                1027 | 1032 => r.r_addend.unwrap_or(0) as u64,
                // R_AARCH64_ABS64, R_AARCH64_GLOB_DAT: the symbol plus the
                // addend.
                257 | 1025 => {
                    elf.dynsyms.get(r.r_sym).map_or(0, |sym| sym.st_value).wrapping_add(r.r_addend.unwrap_or(0) as u64)
                }
                _ => continue,
            };
            if s.in_exec(value) {
                arrive(&mut s.arrivals, value, Arrival::Data(r.r_offset));
            }
        }
        s.eh_frame(elf, bytes)?;
        Ok(s)
    }

    /// The arrivals and register branches of the code at `addr`.
    fn scan(&mut self, addr: u64, code: &[u8]) {
        // Pages `adrp` put in registers, for the `add` that completes them.
        let mut pages = [None::<u64>; 32];
        let skew = ((4 - addr % 4) % 4) as usize;
        for k in (skew..code.len()).step_by(4) {
            let at = addr + k as u64;
            let Some(ins) = word_at(code, k).and_then(decode) else { continue };
            let target = pc_offset(&ins).map(|d| at.wrapping_add(d as u64));
            match ins.opcode {
                Opcode::B
                | Opcode::BL
                | Opcode::Bcc(_)
                | Opcode::BCcc(_)
                | Opcode::CBZ
                | Opcode::CBNZ
                | Opcode::TBZ
                | Opcode::TBNZ => {
                    if let Some(t) = target {
                        arrive(&mut self.arrivals, t, Arrival::Branch(at));
                    }
                }
                Opcode::BR | Opcode::BRAA | Opcode::BRAAZ | Opcode::BRAB | Opcode::BRABZ => self.indirect.push(at),
                Opcode::ADR => {
                    if let Some(t) = target.filter(|&t| self.in_exec(t)) {
                        arrive(&mut self.arrivals, t, Arrival::Address(at));
                    }
                }
                Opcode::ADD => {
                    if let (Some(n), Operand::Immediate(lo)) = (gpr(&ins.operands[1]), ins.operands[2]) {
                        let t = pages[n as usize].map(|p| p + u64::from(lo)).filter(|&t| self.in_exec(t));
                        if let Some(t) = t {
                            arrive(&mut self.arrivals, t, Arrival::Address(at));
                        }
                    }
                }
                _ => {}
            }
            if matches!(
                ins.opcode,
                Opcode::BL
                    | Opcode::BLR
                    | Opcode::BLRAA
                    | Opcode::BLRAAZ
                    | Opcode::BLRAB
                    | Opcode::BLRABZ
                    | Opcode::SVC
            ) {
                self.arrivals.entry(at + B_LEN).or_insert(Arrival::Return(at));
            }
            if let Some(r) = gpr(&ins.operands[0]) {
                pages[r as usize] = match (ins.opcode, pc_offset(&ins)) {
                    (Opcode::ADRP, Some(d)) => Some((at & !0xfff).wrapping_add(d as u64)),
                    _ => None,
                };
            }
        }
        self.indirect.sort_unstable();
    }

    fn in_exec(&self, a: u64) -> bool {
        self.exec.iter().any(|&(s, n, _)| a >= s && a < s + n)
    }

    /// The instruction word at link address `a`, from the file's `bytes`.
    fn word(&self, bytes: &[u8], a: u64) -> Option<u32> {
        let &(s, _, off) = self.exec.iter().find(|&&(s, n, _)| a >= s && a + B_LEN <= s + n)?;
        word_at(bytes, (a - s + off) as usize)
    }

    /// Function ranges and landing pads from `.eh_frame`.
    fn eh_frame(&mut self, elf: &Elf<'_>, bytes: &[u8]) -> Result<(), String> {
        let (fdes, pads) = super::super::fdes_and_landing_pads(elf, bytes);
        self.fdes.extend(fdes);
        self.fdes.sort_unstable();
        for pad in pads {
            self.arrivals.insert(pad, Arrival::LandingPad);
        }
        Ok(())
    }

    /// Instruction starts in the unwind ranges that overlap `from..to`
    /// (hot and cold parts alike), each with its range's end.
    pub fn instruction_starts(&self, bytes: &[u8], from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for &(start, end) in self.fdes.iter().filter(|&&(s, e)| s < to && e > from) {
            // The first word of the range at or after `from`.
            let mut a = if from > start { start + (from - start).div_ceil(B_LEN) * B_LEN } else { start };
            while a < end.min(to) {
                if self.word(bytes, a).and_then(decode).is_none() {
                    break;
                }
                out.push((a, end));
                a += B_LEN;
            }
        }
        out
    }

    /// The range (start, end) of the function holding `addr`: its FDE, or
    /// `symbol` (start, size) when there is none.
    pub fn function_range(&self, addr: u64, symbol: Option<(u64, u64)>) -> Option<(u64, u64)> {
        let i = self.fdes.partition_point(|&(s, _)| s <= addr);
        let fde = i.checked_sub(1).map(|i| self.fdes[i]).filter(|&(_, e)| addr < e);
        fde.or_else(|| symbol.map(|(s, n)| (s, s + n)).filter(|&(s, e)| addr >= s && addr < e))
    }

    /// Plan a patch at `addr` in the function `range` (start, end), from
    /// the file's `bytes`; or say why it is not safe. A landing pad at
    /// `addr` moves the `B` to the next instruction.
    pub fn plan(&self, bytes: &[u8], addr: u64, range: (u64, u64)) -> Result<Patch, String> {
        let mut site = addr;
        if self.word(bytes, addr).is_some_and(|w| LANDING_PADS.contains(&w)) {
            site = addr + B_LEN;
            if let Some(&how) = self.arrivals.get(&site) {
                return Err(format!(
                    "{addr:#x} is a landing pad, which indirect branches must find there, so the B would go on the \
                     next instruction, but {}, so the probe would run for control that never passed {addr:#x}",
                    why(site, how)
                ));
            }
        }
        self.plan_len(bytes, site, range, B_LEN, true).or_else(|e| {
            self.plan_lead(bytes, addr, range)
                .map_err(|lead| format!("{e}; nor can the instruction before it take the B ({lead})"))
        })
    }

    /// x86_64's trap where no jump fits: never better here, where a `brk`
    /// takes the one instruction a `B` takes (`-D TRAP_PROBES` puts one
    /// where the `B` was planned, in pass 5).
    pub fn plan_trap(&self, _bytes: &[u8], _addr: u64, _range: (u64, u64)) -> Result<Patch, String> {
        Err("a brk takes the same one instruction a B would".into())
    }

    /// x86_64's short jump to the padding after a function: never needed
    /// (nor possible) here, where the `B` at the site is one instruction and
    /// reaches ±128 MiB.
    pub fn plan_pad(&self, _bytes: &[u8], _addr: u64, _range: (u64, u64)) -> Result<Patch, String> {
        Err("aarch64 has no short jump to the padding: the 4-byte B at the site is the only one".into())
    }

    /// The `B` on the instruction right before `addr`, when `addr`'s own
    /// cannot move (a load-exclusive opening a sequence). The trampoline
    /// runs that instruction (relocated), then the probe with the registers
    /// as at `addr`, then branches to `addr`. So control must reach `addr`
    /// only by falling through it: nothing may arrive at `addr` (nor is it
    /// a landing pad, where indirect branches arrive), the function has no
    /// register branch (a jump table's targets are not known), and the
    /// instruction is no `b`, `ret` or register branch, no `blr` or `svc`
    /// (which would return into the trampoline), nor part of an exclusive
    /// sequence.
    ///
    /// When it is a `bl` (`bl f; ldaxr ...`), that call is the lead and
    /// `addr` is reached by its return: it becomes a call of a trampoline
    /// that probes that one call's return the way a return probe does, and
    /// the probe runs there with the registers as at `addr`.
    pub fn plan_lead(&self, bytes: &[u8], addr: u64, range: (u64, u64)) -> Result<Patch, String> {
        let Some(&(s, _, off)) = self.exec.iter().find(|&&(s, n, _)| addr >= s && addr < s + n) else {
            return Err(format!("{addr:#x} is not in an executable section"));
        };
        if !addr.is_multiple_of(B_LEN) {
            return Err(format!("{addr:#x} is not 4-byte aligned"));
        }
        if range.0 >= addr || range.0 < s || addr - B_LEN < range.0 {
            return Err("it is the function's first instruction".into());
        }
        let from = addr - B_LEN;
        if self.word(bytes, addr).is_some_and(|w| LANDING_PADS.contains(&w)) {
            return Err(format!(
                "{addr:#x} is a landing pad, where indirect branches arrive, and control must reach the site only \
                 through the instruction before it"
            ));
        }
        if self.word(bytes, addr).is_none_or(|w| decode(w).is_none() && !super::vector_extension(w)) {
            return Err(format!("the word at {addr:#x} is not an instruction"));
        }
        let word = self.word(bytes, from).ok_or("the instruction before it cannot be read")?;
        let ins = decode(word).ok_or_else(|| format!("the word at {from:#x} is not an instruction"))?;
        if !falls_through(&ins) {
            return Err(format!("the instruction at {from:#x} (`{ins}`) does not fall through to it"));
        }
        let call = ins.opcode == Opcode::BL;
        if matches!(
            ins.opcode,
            Opcode::BLR | Opcode::BLRAA | Opcode::BLRAAZ | Opcode::BLRAB | Opcode::BLRABZ | Opcode::SVC
        ) {
            return Err(format!(
                "the {} at {from:#x} would return into the trampoline (only a `bl` right before it can be probed at \
                 its return)",
                if ins.opcode == Opcode::SVC { "system call" } else { "call" }
            ));
        }
        if let Some(why) = unrelocatable(word, from).or_else(|| self.open_exclusive(bytes, from, range)) {
            return Err(why);
        }
        if let Some(&b) = self.indirect.iter().find(|&&b| b >= range.0 && b < range.1) {
            return Err(format!(
                "the function branches through a register at {b:#x} (a jump table or a computed goto), to targets \
                 not known here, and control must reach the site only through the instruction before it"
            ));
        }
        if let Some(&how) = self.arrivals.get(&addr) {
            if !(call && how == Arrival::Return(from)) {
                return Err(format!(
                    "{}, and control must reach the site only through the instruction before it",
                    why(addr, how)
                ));
            }
        }
        Ok(Patch { file_offset: addr - s + off, displaced: 0, lead: B_LEN as u32, call, pad: 0, trap: false })
    }

    /// [`Sites::plan`] for `need` bytes of whole instructions (4, the `B`;
    /// more for x86_64's hosts of hops, which aarch64 has none of), with
    /// padding after the function (`nop`s, `udf #0`s up to the next 16-byte
    /// boundary) or without.
    pub fn plan_len(
        &self,
        bytes: &[u8],
        addr: u64,
        range: (u64, u64),
        need: u64,
        padding: bool,
    ) -> Result<Patch, String> {
        let Some(&(s, n, off)) = self.exec.iter().find(|&&(s, n, _)| addr >= s && addr < s + n) else {
            return Err(format!("{addr:#x} is not in an executable section"));
        };
        if !addr.is_multiple_of(B_LEN) {
            return Err(format!("{addr:#x} is not 4-byte aligned: no instruction starts there"));
        }
        let file_offset = addr - s + off;
        let end = range.1.min(s + n);
        // Past the function's end, padding up to the next 16-byte boundary
        // may be displaced too: nothing runs it.
        let padded_end = if padding { end.next_multiple_of(16).min(s + n) } else { end };
        let short = || {
            format!(
                "the function ends {} byte(s) after it and too little padding follows, so the {need}-byte B does not \
                 fit",
                end.saturating_sub(addr)
            )
        };
        let mut len = 0u64;
        while len < need.max(B_LEN) {
            let at = addr + len;
            if at + B_LEN > padded_end {
                return Err(short());
            }
            let word = self.word(bytes, at).ok_or_else(short)?;
            if at >= end {
                if word != NOP && word != UDF0 {
                    return Err(short());
                }
            } else if let Some(why) = unrelocatable(word, at).or_else(|| self.open_exclusive(bytes, at, range)) {
                return Err(why);
            }
            len += B_LEN;
        }
        // Only instruction starts (aligned words) count: a code address in
        // data that is not one is no code address.
        if let Some((&to, &how)) = self.arrivals.range(addr + 1..addr + len).find(|(&to, _)| to.is_multiple_of(B_LEN)) {
            return Err(format!("the B would replace {len} bytes of instructions and {}, inside them", why(to, how)));
        }
        Ok(Patch { file_offset, displaced: len as u32, lead: 0, call: false, pad: 0, trap: false })
    }

    /// Why a probe cannot go at `at`: it is inside an exclusive sequence
    /// (read backwards from `at` within its function, a load-exclusive
    /// comes before any store-exclusive, `clrex`, or instruction control
    /// does not fall through); None when it is not.
    fn open_exclusive(&self, bytes: &[u8], at: u64, range: (u64, u64)) -> Option<String> {
        let mut a = at;
        for _ in 0..EXCLUSIVE_WINDOW {
            if a < range.0 + B_LEN {
                return None;
            }
            a -= B_LEN;
            let ins = self.word(bytes, a).and_then(decode)?;
            match exclusive(ins.opcode) {
                Some(Exclusive::Load) => {
                    return Some(format!(
                        "{at:#x} is inside the exclusive sequence the `{ins}` at {a:#x} opens: the B to the \
                         trampoline and the probe there would clear the exclusive monitor, so its store-exclusive \
                         could fail on every try"
                    ))
                }
                Some(Exclusive::Store) => return None,
                None if ins.opcode == Opcode::CLREX || !falls_through(&ins) => return None,
                None => {}
            }
        }
        None
    }
}

/// Why the instruction `word` at `at` cannot run at the trampoline instead
/// (the runtime's `relocate` refuses it), or None.
fn unrelocatable(word: u32, at: u64) -> Option<String> {
    let Some(ins) = decode(word) else {
        if super::vector_extension(word) {
            return None;
        }
        return Some(format!("the word at {at:#x} ({word:#010x}) is not an instruction"));
    };
    if exclusive(ins.opcode).is_some() {
        return Some(format!(
            "`{ins}` at {at:#x} is an exclusive load or store: the exclusive monitor does not survive the branches \
             to and from the trampoline"
        ));
    }
    let relocated = matches!(
        ins.opcode,
        Opcode::ADR
            | Opcode::ADRP
            | Opcode::LDR
            | Opcode::LDRSW
            | Opcode::PRFM
            | Opcode::B
            | Opcode::BL
            | Opcode::Bcc(_)
            | Opcode::BCcc(_)
            | Opcode::CBZ
            | Opcode::CBNZ
            | Opcode::TBZ
            | Opcode::TBNZ
    );
    if pc_offset(&ins).is_some() && !relocated {
        return Some(format!("`{ins}` at {at:#x} is PC-relative and is not relocated"));
    }
    None
}

enum Exclusive {
    Load,
    Store,
}

fn exclusive(op: Opcode) -> Option<Exclusive> {
    use Opcode::*;
    match op {
        LDXR | LDXRB | LDXRH | LDXP | LDAXR | LDAXRB | LDAXRH | LDAXP => Some(Exclusive::Load),
        STXR | STXRB | STXRH | STXP | STLXR | STLXRB | STLXRH | STLXP => Some(Exclusive::Store),
        _ => None,
    }
}

/// Whether control may go on to the next instruction after `i` (a
/// conditional branch may; `b`, `ret`, register branches and traps do not).
fn falls_through(i: &Instruction) -> bool {
    !matches!(
        i.opcode,
        Opcode::B
            | Opcode::BR
            | Opcode::BRAA
            | Opcode::BRAAZ
            | Opcode::BRAB
            | Opcode::BRABZ
            | Opcode::RET
            | Opcode::RETAA
            | Opcode::RETAB
            | Opcode::ERET
            | Opcode::ERETAA
            | Opcode::ERETAB
            | Opcode::UDF
            | Opcode::BRK
            | Opcode::HLT
    )
}

/// A general register operand's number.
fn gpr(o: &Operand) -> Option<u16> {
    match *o {
        Operand::Register(_, r) | Operand::RegisterOrSP(_, r) => Some(r),
        _ => None,
    }
}

/// How control arrives at `to`, in words.
fn why(to: u64, how: Arrival) -> String {
    match how {
        Arrival::Branch(b) => format!("a branch at {b:#x} jumps to {to:#x}"),
        Arrival::Return(c) => format!("the call at {c:#x} returns to {to:#x}"),
        Arrival::Data(at) => format!("a table (or pointer) at {at:#x} holds {to:#x}"),
        Arrival::Address(at) => format!("the instruction at {at:#x} takes the address {to:#x}"),
        Arrival::LandingPad => format!("an exception landing pad is at {to:#x}"),
    }
}

/// Record that control can arrive at `to`: one way per address, a branch,
/// a table or a landing pad rather than a call's return (a site reached by
/// its call's return and by nothing else may take the `B` on that call:
/// `plan_lead`), else the first found.
fn arrive(map: &mut BTreeMap<u64, Arrival>, to: u64, how: Arrival) {
    match map.entry(to) {
        std::collections::btree_map::Entry::Vacant(v) => {
            v.insert(how);
        }
        std::collections::btree_map::Entry::Occupied(mut o) => {
            if matches!(o.get(), Arrival::Return(_)) && !matches!(how, Arrival::Return(_)) {
                o.insert(how);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module of one executable section at 0x1000 holding `words`.
    fn module(words: &[u32]) -> (Sites, Vec<u8>) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut s = Sites { exec: vec![(0x1000, bytes.len() as u64, 0)], ..Default::default() };
        s.scan(0x1000, &bytes);
        (s, bytes)
    }

    /// `f`, an atomic increment as gcc writes it without LSE, then `g`, a
    /// function with a landing pad, a call and a frame (assembled with
    /// aarch64-linux-gnu-as).
    const CODE: [u32; 20] = [
        0xaa0003e3, // 1000 f: mov x3, x0
        0x885ffc01, // 1004 0: ldaxr w1, [x0]
        0x11000421, // 1008 add w1, w1, #1
        0x8802fc01, // 100c stlxr w2, w1, [x0]
        0x35ffffa2, // 1010 cbnz w2, 0b
        0xd65f03c0, // 1014 ret
        0xd503245f, // 1018 g: bti c
        0xa9bf7bfd, // 101c stp x29, x30, [sp, #-16]!
        0x910003fd, // 1020 mov x29, sp
        0x97fffff7, // 1024 bl f
        0xa8c17bfd, // 1028 ldp x29, x30, [sp], #16
        0xd65f03c0, // 102c ret
        0x10ffff41, // 1030 adr x1, g
        0x90000002, // 1034 adrp x2, 0x1000
        0x91010042, // 1038 add x2, x2, #0x40
        0xd63f0020, // 103c blr x1
        0xd4000001, // 1040 svc #0
        0xd61f0040, // 1044 br x2
        0x54fffe81, // 1048 b.ne g
        0xd503201f, // 104c nop
    ];

    #[test]
    fn arrivals_of_the_code() {
        let (s, _) = module(&CODE);
        let a = |to: u64| s.arrivals.get(&to).copied();
        // Branches, and a branch rather than a return where both arrive.
        assert_eq!(a(0x1004), Some(Arrival::Branch(0x1010)));
        assert_eq!(a(0x1000), Some(Arrival::Branch(0x1024)));
        // Returns of bl, blr, svc.
        assert_eq!(a(0x1028), Some(Arrival::Return(0x1024)));
        assert_eq!(a(0x1044), Some(Arrival::Return(0x1040)));
        // adr g (also a branch's target), and adrp + add: 0x1040 (also
        // the blr's return).
        assert_eq!(a(0x1018), Some(Arrival::Address(0x1030)));
        assert_eq!(a(0x1040), Some(Arrival::Address(0x1038)));
        assert_eq!(s.indirect, [0x1044]);
        let (s, _) = module(&[0x90000002, 0x91003042, 0xd503201f, 0xd503201f]);
        assert_eq!(s.arrivals.get(&0x100c), Some(&Arrival::Address(0x1004)));
    }

    #[test]
    fn one_instruction_is_displaced() {
        let (s, bytes) = module(&CODE);
        let g = (0x1018, 0x1030);
        assert_eq!(
            s.plan(&bytes, 0x1020, g),
            Ok(Patch { file_offset: 0x20, displaced: 4, lead: 0, call: false, pad: 0, trap: false })
        );
        // The site itself may be a target: the bl's return point, a ret.
        assert_eq!(s.plan(&bytes, 0x1028, g).map(|p| p.file_offset), Ok(0x28));
        assert_eq!(s.plan(&bytes, 0x102c, g).map(|p| p.displaced), Ok(4));
        // A bl is relocated (x30 set to its return first, by the runtime).
        assert_eq!(s.plan(&bytes, 0x1024, g).map(|p| p.displaced), Ok(4));
        // Not an instruction start.
        assert!(s.plan(&bytes, 0x1022, g).unwrap_err().contains("4-byte aligned"));
        // Past the end of the function: padding (nop) completes nothing
        // needed, but a site must be in it.
        let e = s.plan_len(&bytes, 0x1030, (0x1018, 0x1030), 4, false).unwrap_err();
        assert!(e.contains("does not fit"), "{e}");
        assert!(s.plan_pad(&bytes, 0x1020, g).is_err());
    }

    /// `bti c` at g: the B goes on the next instruction.
    #[test]
    fn a_landing_pad_stays() {
        let (mut s, bytes) = module(&CODE);
        let g = (0x1018, 0x1030);
        assert_eq!(
            s.plan(&bytes, 0x1018, g),
            Ok(Patch { file_offset: 0x1c, displaced: 4, lead: 0, call: false, pad: 0, trap: false })
        );
        s.arrivals.insert(0x101c, Arrival::Branch(0x1048));
        let e = s.plan(&bytes, 0x1018, g).unwrap_err();
        assert!(e.contains("landing pad") && e.contains("a branch at 0x1048 jumps to 0x101c"), "{e}");
    }

    #[test]
    fn exclusive_sequences_are_refused() {
        let (s, bytes) = module(&CODE);
        let f = (0x1000, 0x1018);
        // The ldaxr itself: not relocated; the instruction before it cannot
        // take it either, the loop branches back to it.
        let e = s.plan(&bytes, 0x1004, f).unwrap_err();
        assert!(e.contains("exclusive load or store") && e.contains("a branch at 0x1010 jumps to 0x1004"), "{e}");
        // Inside the sequence: the add, and the stlxr.
        let e = s.plan(&bytes, 0x1008, f).unwrap_err();
        assert!(e.contains("inside the exclusive sequence") && e.contains("0x1004"), "{e}");
        assert!(s.plan(&bytes, 0x100c, f).unwrap_err().contains("exclusive load or store"));
        // After the store-exclusive: fine.
        assert_eq!(s.plan(&bytes, 0x1010, f).map(|p| p.file_offset), Ok(0x10));
        assert_eq!(s.plan(&bytes, 0x1000, f).map(|p| p.file_offset), Ok(0));
    }

    /// A load-exclusive reached only by falling through: the B goes on the
    /// instruction before it (a `bl`: probed at its return).
    #[test]
    fn a_site_that_cannot_move_takes_the_b_on_the_instruction_before_it() {
        let words = [
            0xd503201f, // 1000 nop
            0xaa0003e3, // 1004 mov x3, x0
            0x885ffc01, // 1008 ldaxr w1, [x0]
            0x8802fc01, // 100c stlxr w2, w1, [x0]
            0xd65f03c0, // 1010 ret
        ];
        let (s, bytes) = module(&words);
        let p = s.plan(&bytes, 0x1008, (0x1000, 0x1014)).unwrap();
        assert_eq!(p, Patch { file_offset: 8, displaced: 0, lead: 4, call: false, pad: 0, trap: false });
        // bl before it: the call is the lead.
        let mut w = words;
        w[1] = 0x97ffffff; // bl 0x1000
        let (s, bytes) = module(&w);
        let p = s.plan(&bytes, 0x1008, (0x1000, 0x1014)).unwrap();
        assert_eq!(p, Patch { file_offset: 8, displaced: 0, lead: 4, call: true, pad: 0, trap: false });
        // blr before it, a register branch in the function, a b.
        w[1] = 0xd63f0020; // blr x1
        let (s, bytes) = module(&w);
        assert!(s.plan(&bytes, 0x1008, (0x1000, 0x1014)).unwrap_err().contains("would return into the trampoline"));
        w[1] = 0xaa0003e3;
        w[4] = 0xd61f0040; // br x2
        let (s, bytes) = module(&w);
        assert!(s.plan(&bytes, 0x1008, (0x1000, 0x1014)).unwrap_err().contains("branches through a register"));
        w[4] = 0xd65f03c0;
        w[1] = 0x14000010; // b
        let (s, bytes) = module(&w);
        assert!(s.plan(&bytes, 0x1008, (0x1000, 0x1014)).unwrap_err().contains("does not fall through"));
        // The function's first instruction has none before it.
        assert!(s.plan_lead(&bytes, 0x1000, (0x1000, 0x1014)).unwrap_err().contains("first instruction"));
    }

    #[test]
    fn undecodable_words_are_refused() {
        let (s, bytes) = module(&[0xd503201f, 0xffffffff, 0xd65f03c0]);
        let e = s.plan(&bytes, 0x1004, (0x1000, 0x100c)).unwrap_err();
        assert!(e.contains("is not an instruction"), "{e}");
        // An SVE instruction (cntd x0), which the decoder does not know, is
        // copied as it is: a site.
        let (s, bytes) = module(&[0xd503201f, 0x04e0e3e0, 0xd65f03c0]);
        assert!(s.plan(&bytes, 0x1004, (0x1000, 0x100c)).is_ok());
    }

    #[test]
    fn instruction_starts_in_unwind_ranges() {
        let (mut s, bytes) = module(&CODE);
        s.fdes = vec![(0x1000, 0x1018), (0x1018, 0x1030)];
        let starts = s.instruction_starts(&bytes, 0x1010, 0x1020);
        assert_eq!(starts, [(0x1010, 0x1018), (0x1014, 0x1018), (0x1018, 0x1030), (0x101c, 0x1030)]);
        assert_eq!(s.function_range(0x1020, None), Some((0x1018, 0x1030)));
        assert_eq!(s.function_range(0x1040, Some((0x1030, 0x20))), Some((0x1030, 0x1050)));
    }

    /// A real program's statement sites, when the cross compiler is here
    /// (`gcc-aarch64-linux-gnu`): a marker (a `nop`) and a function's
    /// landing pad.
    #[test]
    fn a_real_program() {
        let dir = std::env::temp_dir().join(format!("telco-a64-sites-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let (src, exe) = (dir.join("p.c"), dir.join("p"));
        let c = "int n; __attribute__((noinline)) int work(int x) { for (int i = 0; i < x; i++) \
                 { __asm__ volatile(\"nop\"); n += i; } return n; }\n\
                 int main(int c, char **v) { (void)v; return work(c) * 3 + n; }\n";
        if std::fs::write(&src, c).is_err() {
            eprintln!("skipped: cannot write {}", src.display());
            return;
        }
        let built = std::process::Command::new("aarch64-linux-gnu-gcc")
            .args(["-O2", "-mbranch-protection=standard", "-o"])
            .arg(&exe)
            .arg(&src)
            .status();
        if !built.is_ok_and(|s| s.success()) {
            eprintln!("skipped: aarch64-linux-gnu-gcc is not installed (or failed): no real aarch64 program to read");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        let bytes = std::fs::read(&exe).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let elf = Elf::parse(&bytes).unwrap();
        assert_eq!(elf.header.e_machine, goblin::elf::header::EM_AARCH64);
        let s = Sites::build(&elf, &bytes).unwrap();
        let work = elf.syms.iter().find(|y| elf.strtab.get_at(y.st_name) == Some("work")).unwrap();
        let range = s.function_range(work.st_value, Some((work.st_value, work.st_size))).unwrap();
        assert_eq!(range.0, work.st_value);
        // Its entry is a landing pad: the B goes after it.
        let p = s.plan(&bytes, range.0, range).unwrap();
        assert_eq!(p.displaced, 4);
        let at = |a: u64| s.exec.iter().find(|&&(x, n, _)| a >= x && a < x + n).map(|&(x, _, o)| a - x + o).unwrap();
        assert_eq!(p.file_offset, at(range.0) + 4);
        // Every instruction of it is a site (no exclusives here).
        for (a, _) in s.instruction_starts(&bytes, range.0, range.1) {
            let p = s.plan(&bytes, a, range);
            assert!(p.is_ok(), "{a:#x}: {p:?}");
        }
        // Its CFI (`main` signs x30: `.cfi_negate_ra_state`, which gimli
        // reads with `CFI_VENDOR` only): every FDE starts with a fresh
        // call's frame, and `main`'s rows after its `stp x29, x30, [sp,
        // #-N]!` have the compact rule's shape.
        use gimli::UnwindSection;
        let (eh, bases) = crate::image::eh_frame(&elf, &bytes, super::super::CFI_VENDOR).unwrap();
        let main = elf.syms.iter().find(|y| elf.strtab.get_at(y.st_name) == Some("main")).unwrap();
        let mut ctx = gimli::UnwindContext::new();
        let fde = eh.fde_for_address(&bases, main.st_value, gimli::EhFrame::cie_from_offset).unwrap();
        let mut rows = fde.rows(&eh, &bases, &mut ctx).unwrap();
        let mut rules = Vec::new();
        while let Some(row) = rows.next_row().unwrap() {
            rules.push(super::super::compact_unwind_rule(
                row.cfa(),
                &row.register(super::super::DWARF_FP).unwrap_or(gimli::RegisterRule::SameValue),
                &row.register(super::super::DWARF_RA).unwrap_or(gimli::RegisterRule::SameValue),
            ));
            if row.start_address() == fde.initial_address() {
                assert!(matches!(row.cfa(), gimli::CfaRule::RegisterAndOffset { register, offset }
                    if super::super::fresh_call_frame(*register, *offset)));
            }
        }
        use telco_abi::region::{unwind_rule, UNW_CFA_SP, UNW_NONE};
        assert_eq!(rules.first(), Some(&UNW_NONE), "{rules:?}");
        assert!(rules.contains(&unwind_rule(UNW_CFA_SP, 16, Some(-16)).unwrap()), "{rules:?}");
    }
}
