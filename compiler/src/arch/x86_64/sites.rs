//! x86_64: where a 5-byte jump may be written inside a function (statement probes,
//! SDT markers), decided from the file before anything runs.
//!
//! A patch at A displaces the whole instructions covering `A .. A+5`.
//! Control must never arrive strictly inside the displaced bytes, or it
//! would execute the middle of the jump. So this module collects, for
//! the whole module (a function's cold part, split off by the compiler,
//! jumps back into it), every address control can arrive at other than by
//! falling through:
//!
//! * targets of direct branches and calls (decoding every executable
//!   section);
//! * the return points of calls and `syscall`s: a thread sleeping in one
//!   resumes there;
//! * code addresses stored as data: every 8-byte word of the non-executable
//!   sections, and the dynamic relocations' addends (position-independent
//!   files have zeros in the file) — computed-goto tables, absolute
//!   jump tables;
//! * entries of 32-bit relative jump tables: for every `lea reg, [rip+T]`
//!   with T in a non-executable section, the words at T while `T + word` is
//!   code (gcc's and clang's switch tables);
//! * exception landing pads, from each FDE's LSDA call-site table.
//!
//! A site is refused, with the arrival named, when one of those lands
//! strictly inside the displaced bytes; a code address found in data
//! counts only at an instruction start (text that happens to look like an
//! address does not). The displaced bytes stay inside the function's range
//! (its FDE, or its symbol) plus padding (`nop`, `int3`) up to the next
//! 16-byte boundary. This over-approximates (a stray word that looks like
//! an address only refuses a site); what it cannot see (a table reached by
//! computed arithmetic, self-modifying code) it cannot protect.
//!
//! Pass 2 asks through `Module::plan_site` (statements, markers) and the
//! hops (`hop`). Pass 5 (`Hooker::module` in runtime/src/place/module.rs) takes
//! the planned length as is, refuses a site whose jump would overlap
//! another probe's, and steps every thread out of the displaced bytes
//! before writing the jump. A marker's semaphore is raised in each process
//! where its jump is placed and lowered at detach (`raise_semaphores`).

use std::collections::BTreeMap;

use goblin::elf::section_header::{SHF_ALLOC, SHF_EXECINSTR, SHT_PROGBITS};
use goblin::elf::Elf;
use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, OpKind, Register};

pub use crate::arch::Patch;

/// How control can arrive at an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// A branch or call at this address.
    Branch(u64),
    /// Returning from the call (or `syscall`) at this address.
    Return(u64),
    /// A code address stored as data at this address (a table).
    Data(u64),
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
        let in_exec = |a: u64, exec: &[(u64, u64, u64)]| exec.iter().any(|&(s, n, _)| a >= s && a < s + n);
        let mut tables: Vec<u64> = Vec::new();
        let exec = s.exec.clone();
        for &(addr, size, off) in &exec {
            let Some(code) = bytes.get(off as usize..(off + size) as usize) else { continue };
            let mut dec = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
            let mut ins = Instruction::default();
            while dec.can_decode() {
                dec.decode_out(&mut ins);
                if ins.is_invalid() {
                    continue;
                }
                match ins.flow_control() {
                    FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch | FlowControl::Call => {
                        if let Some(t) = near_target(&ins) {
                            arrive(&mut s.arrivals, t, Arrival::Branch(ins.ip()));
                        }
                        if ins.flow_control() == FlowControl::Call {
                            s.arrivals.entry(ins.next_ip()).or_insert(Arrival::Return(ins.ip()));
                        }
                    }
                    FlowControl::IndirectCall => {
                        s.arrivals.entry(ins.next_ip()).or_insert(Arrival::Return(ins.ip()));
                    }
                    _ => {}
                }
                if matches!(ins.code(), Code::Syscall | Code::Int_imm8 | Code::Sysenter) {
                    s.arrivals.entry(ins.next_ip()).or_insert(Arrival::Return(ins.ip()));
                }
                // Table bases: `lea r, [rip+T]`, and absolute displacements
                // of memory operands (`jmp [T + r*8]`).
                for i in 0..ins.op_count() {
                    if ins.op_kind(i) == OpKind::Memory {
                        if ins.memory_base() == Register::RIP {
                            tables.push(ins.ip_rel_memory_address());
                        } else if ins.memory_base() == Register::None && ins.memory_displacement64() > 0x1000 {
                            tables.push(ins.memory_displacement64());
                        }
                    }
                }
            }
        }
        // Code addresses stored as data.
        let file_word = |a: u64| -> Option<u64> {
            let sh = elf.section_headers.iter().find(|sh| {
                sh.sh_type == SHT_PROGBITS
                    && sh.sh_flags & u64::from(SHF_ALLOC) != 0
                    && a >= sh.sh_addr
                    && a < sh.sh_addr + sh.sh_size
            })?;
            let o = (a - sh.sh_addr + sh.sh_offset) as usize;
            Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?))
        };
        for (v, at) in super::super::code_addresses_in_data(elf, bytes, |v| in_exec(v, &exec)) {
            arrive(&mut s.arrivals, v, Arrival::Data(at));
        }
        for r in elf.dynrelas.iter().chain(elf.dynrels.iter()) {
            let value = match r.r_type {
                // R_X86_64_RELATIVE, R_X86_64_IRELATIVE: the addend.
                8 | 37 => r.r_addend.unwrap_or(0) as u64,
                // R_X86_64_64: the symbol plus the addend.
                1 => {
                    elf.dynsyms.get(r.r_sym).map_or(0, |sym| sym.st_value).wrapping_add(r.r_addend.unwrap_or(0) as u64)
                }
                _ => continue,
            };
            if in_exec(value, &exec) {
                arrive(&mut s.arrivals, value, Arrival::Data(r.r_offset));
            }
        }
        // 32-bit relative tables.
        tables.sort_unstable();
        tables.dedup();
        for t in tables {
            if in_exec(t, &exec) {
                continue;
            }
            for k in 0..4096u64 {
                let Some(w) = file_word(t + 4 * k).map(|w| w as u32 as i32) else { break };
                let target = t.wrapping_add(i64::from(w) as u64);
                if !in_exec(target, &exec) {
                    break;
                }
                arrive(&mut s.arrivals, target, Arrival::Data(t + 4 * k));
            }
        }
        s.eh_frame(elf, bytes)?;
        Ok(s)
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
            let Some(&(s, _, off)) = self.exec.iter().find(|&&(s, n, _)| start >= s && end <= s + n) else { continue };
            let Some(code) = bytes.get((start - s + off) as usize..(end - s + off) as usize) else { continue };
            let mut dec = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
            let mut ins = Instruction::default();
            while dec.can_decode() {
                dec.decode_out(&mut ins);
                if ins.is_invalid() {
                    break;
                }
                if ins.ip() >= from && ins.ip() < to {
                    out.push((ins.ip(), end));
                }
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
    /// the file's `bytes`; or say why it is not safe.
    pub fn plan(&self, bytes: &[u8], addr: u64, range: (u64, u64)) -> Result<Patch, String> {
        self.plan_len(bytes, addr, range, 5, true).or_else(|e| {
            self.plan_lead(bytes, addr, range).or_else(|lead| {
                self.plan_pad(bytes, addr, range).map_err(|pad| {
                    format!("{e}; nor can the instructions before it take the jump ({lead}), nor a short jump ({pad})")
                })
            })
        })
    }

    /// A one-byte trap (`int3`) at `addr` (after an `endbr64` there) where
    /// no jump fits: it covers the first instruction, which its trampoline
    /// runs relocated, and nothing may arrive strictly inside that.
    pub fn plan_trap(&self, bytes: &[u8], addr: u64, range: (u64, u64)) -> Result<Patch, String> {
        let endbr = self
            .exec
            .iter()
            .find(|&&(s, n, _)| addr >= s && addr + 4 <= s + n)
            .and_then(|&(s, _, off)| bytes.get((addr - s + off) as usize..(addr - s + off) as usize + 4))
            .is_some_and(|b| b == [0xf3, 0x0f, 0x1e, 0xfa]);
        let site = if endbr && addr + 4 < range.1 { addr + 4 } else { addr };
        self.plan_len(bytes, site, range, 1, false).map(|p| Patch { trap: true, ..p })
    }

    /// A 2-byte `jmp rel8` at `addr` to the padding after its function
    /// (`nop`s and `int3`s up to the next 16-byte boundary, which nothing
    /// runs and no arrival names), within its reach, where a 5-byte jump
    /// to the trampoline fits: for a site with room for two bytes only
    /// before a branch target (Debian's libstdc++ `rethrow` marker).
    pub fn plan_pad(&self, bytes: &[u8], addr: u64, range: (u64, u64)) -> Result<Patch, String> {
        let short = self.plan_len(bytes, addr, range, 2, false)?;
        let Some(&(s, n, off)) = self.exec.iter().find(|&&(s, n, _)| addr >= s && addr < s + n) else {
            return Err(format!("{addr:#x} is not in an executable section"));
        };
        let end = range.1.min(s + n);
        let padded = end.next_multiple_of(16).min(s + n);
        let slot = end;
        if slot + 5 > padded {
            return Err("no padding after the function has room for a jump".into());
        }
        let code = bytes.get((slot - s + off) as usize..(padded - s + off) as usize).unwrap_or_default();
        let dead = Decoder::with_ip(64, code, slot, DecoderOptions::NONE).into_iter().all(|i| {
            matches!(i.mnemonic(), iced_x86::Mnemonic::Nop | iced_x86::Mnemonic::Int3) && i.next_ip() <= padded
        });
        let named = self.arrivals.range(slot..slot + 5).next().is_some()
            || self.fdes.iter().any(|&(a, b)| a < slot + 5 && b > slot);
        if !dead || named {
            return Err("the bytes after the function are not padding".into());
        }
        if slot - (addr + 2) > 127 {
            return Err("the padding after the function is out of a short jump's reach".into());
        }
        Ok(Patch { pad: (slot - addr) as u32, ..short })
    }

    /// A jump on the instructions right before `addr` (at least 5 bytes of
    /// them) when none fits at `addr` itself: a one-byte `ret` ending a
    /// function (`pop rbx; pop rbp; ret`), a site a branch lands just
    /// after. The trampoline runs those instructions (relocated), then the
    /// probe with the registers as at `addr`, then jumps to `addr`. So
    /// control must reach `addr` only by falling through them: nothing may
    /// arrive inside them or at `addr`, and they hold no `jmp`, `ret` or
    /// call (a callee would return into the trampoline, where an exception
    /// unwinding through it finds no frame description).
    ///
    /// When the instruction before `addr` is a `call rel32` (`call f;
    /// ret`), that call is the lead by itself, and `addr` is reached by
    /// its return: it becomes a call of a trampoline that probes that one
    /// call's return the way a return probe does (the shadow stack, whose
    /// frames exceptions and `longjmp` already handle), and the probe runs
    /// there with the registers as at `addr`. A thread inside that callee
    /// when the call is rewritten returns to `addr` as before, unprobed.
    pub fn plan_lead(&self, bytes: &[u8], addr: u64, range: (u64, u64)) -> Result<Patch, String> {
        const NEED: u64 = 5;
        let Some(&(s, _, off)) = self.exec.iter().find(|&&(s, n, _)| addr >= s && addr < s + n) else {
            return Err(format!("{addr:#x} is not in an executable section"));
        };
        if range.0 >= addr || range.0 < s {
            return Err("it is the function's first instruction".into());
        }
        let code = bytes.get((range.0 - s + off) as usize..(addr - s + off) as usize).unwrap_or_default();
        let list: Vec<Instruction> = Decoder::with_ip(64, code, range.0, DecoderOptions::NONE).into_iter().collect();
        if list.last().is_none_or(|i| i.is_invalid() || i.next_ip() != addr) {
            return Err("the instructions before it do not decode up to it".into());
        }
        let before = list[list.len() - 1];
        let call = before.code() == Code::Call_rel32_64;
        let mut first = list.len();
        while first > 0 && addr - list[first - 1].ip() < NEED {
            first -= 1;
        }
        let start = if call {
            list.len() - 1
        } else {
            first.checked_sub(1).ok_or("the function has fewer than 5 bytes before it")?
        };
        let lead = &list[start..];
        let from = lead[0].ip();
        if let Some(i) = lead.iter().find(|i| {
            matches!(
                i.flow_control(),
                FlowControl::Return
                    | FlowControl::UnconditionalBranch
                    | FlowControl::IndirectBranch
                    | FlowControl::Interrupt
            ) || i.is_invalid()
        }) {
            return Err(format!("the instruction at {:#x} does not fall through to it", i.ip()));
        }
        if let Some(i) =
            lead.iter().find(|i| !call && matches!(i.flow_control(), FlowControl::Call | FlowControl::IndirectCall))
        {
            return Err(format!(
                "the {} at {:#x} among them would return into the trampoline (only a `call rel32` right before it \
                 can be probed at its return)",
                if i.mnemonic() == iced_x86::Mnemonic::Call { "call" } else { "system call" },
                i.ip()
            ));
        }
        let last = lead[lead.len() - 1];
        let ok_at_site = |how: Arrival| matches!(how, Arrival::Return(at) if at == last.ip() && last.flow_control() == FlowControl::Call);
        let real =
            |to: u64, how: Arrival| !matches!(how, Arrival::Data(_)) || lead.iter().any(|i| i.ip() == to) || to == addr;
        if let Some((&to, &how)) =
            self.arrivals.range(from + 1..=addr).find(|(&to, &how)| real(to, how) && !(to == addr && ok_at_site(how)))
        {
            let why = match how {
                Arrival::Branch(b) => format!("a branch at {b:#x} jumps to {to:#x}"),
                Arrival::Return(c) => format!("the call at {c:#x} returns to {to:#x}"),
                Arrival::Data(at) => format!("a table (or pointer) at {at:#x} holds {to:#x}"),
                Arrival::LandingPad => format!("an exception landing pad is at {to:#x}"),
            };
            return Err(format!("{why}, and control must reach the site only through them"));
        }
        Ok(Patch { file_offset: addr - s + off, displaced: 0, lead: (addr - from) as u32, call, pad: 0, trap: false })
    }

    /// [`Sites::plan`] for a jump of `need` bytes (2 for a `jmp rel8`, 10
    /// for a host of hops), with padding after the function or without.
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
        let file_offset = addr - s + off;
        let end = range.1.min(s + n);
        // Past the function's end, padding (`nop`s, `int3`) up to the next
        // 16-byte boundary may be displaced too: nothing runs it.
        let padded_end = if padding { end.next_multiple_of(16).min(s + n) } else { end };
        let code = bytes.get(file_offset as usize..(padded_end - s + off) as usize).unwrap_or_default();
        let mut dec = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
        let mut len = 0u64;
        let mut last = Instruction::default();
        // Where the displaced instructions after the first start.
        let mut starts = Vec::new();
        while len < need {
            if len > 0 {
                starts.push(addr + len);
            }
            let short = || {
                format!(
                    "the function ends {} byte(s) after it and too little padding follows, so the {need}-byte jump \
                     does not fit",
                    end - addr
                )
            };
            if !dec.can_decode() {
                return Err(short());
            }
            dec.decode_out(&mut last);
            if last.is_invalid() {
                return Err(if addr + len >= end {
                    short()
                } else {
                    format!("the bytes at {:#x} are not an instruction", addr + len)
                });
            }
            if last.ip() >= end && !matches!(last.mnemonic(), iced_x86::Mnemonic::Nop | iced_x86::Mnemonic::Int3) {
                return Err(short());
            }
            if last.next_ip() > end && last.ip() < end {
                return Err(format!("the instruction at {:#x} runs past the function's end", last.ip()));
            }
            len += last.len() as u64;
        }
        // A code address in data that falls inside an instruction is no
        // code address (text that looks like one): only instruction starts
        // count for them.
        let real = |to: u64, how: Arrival| !matches!(how, Arrival::Data(_)) || starts.contains(&to);
        if let Some((&to, &how)) = self.arrivals.range(addr + 1..addr + len).find(|(&to, &how)| real(to, how)) {
            let why = match how {
                Arrival::Branch(from) => format!("a branch at {from:#x} jumps to {to:#x}"),
                Arrival::Return(from) => format!("the call at {from:#x} returns to {to:#x}"),
                Arrival::Data(at) => format!("a table (or pointer) at {at:#x} holds {to:#x}"),
                Arrival::LandingPad => format!("an exception landing pad is at {to:#x}"),
            };
            return Err(format!(
                "the jump would replace {len} bytes of instructions and {why}, inside them (one instruction of at \
                 least 5 bytes there could be probed)"
            ));
        }
        Ok(Patch { file_offset, displaced: len as u32, lead: 0, call: false, pad: 0, trap: false })
    }
}

/// Record that control can arrive at `to`: one way per address, a branch,
/// a table or a landing pad rather than a call's return (a site reached by
/// its call's return and by nothing else may take the jump on that call:
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

fn near_target(ins: &Instruction) -> Option<u64> {
    match ins.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => Some(ins.near_branch_target()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_refuse_a_site() {
        let mut s = Sites { exec: vec![(0x1000, 0x100, 0)], ..Default::default() };
        // nop; pop rbx; pop rbp; pop r12; ret
        let mut bytes = vec![0xccu8; 0x100];
        bytes[0x10..0x16].copy_from_slice(&[0x90, 0x5b, 0x5d, 0x41, 0x5c, 0xc3]);
        assert_eq!(
            s.plan(&bytes, 0x1010, (0x1000, 0x1100)),
            Ok(Patch { file_offset: 0x10, displaced: 5, lead: 0, call: false, pad: 0, trap: false })
        );
        s.arrivals.insert(0x1012, Arrival::Branch(0x1080));
        let e = s.plan(&bytes, 0x1010, (0x1000, 0x1100)).unwrap_err();
        assert!(e.contains("a branch at 0x1080 jumps to 0x1012"), "{e}");
        // The site itself may be a target.
        s.arrivals.clear();
        s.arrivals.insert(0x1010, Arrival::LandingPad);
        assert!(s.plan(&bytes, 0x1010, (0x1000, 0x1100)).is_ok());
        // At the end, padding (int3) completes the jump; a next function
        // right there does not.
        assert_eq!(
            s.plan(&bytes, 0x1014, (0x1000, 0x1016)),
            Ok(Patch { file_offset: 0x14, displaced: 5, lead: 0, call: false, pad: 0, trap: false })
        );
        bytes[0x16..0x20].fill(0x55);
        let e = s.plan(&bytes, 0x1014, (0x1000, 0x1016)).unwrap_err();
        assert!(e.contains("ends") && e.contains("nor can the instructions before it"), "{e}");
    }

    /// Two bytes before a branch target, padding after the function: a
    /// short jump to the padding, and the jump to the trampoline there.
    #[test]
    fn a_two_byte_site_jumps_short_to_the_padding() {
        let mut s = Sites { exec: vec![(0x1000, 0x100, 0)], fdes: vec![(0x1000, 0x1016)], ..Default::default() };
        let mut bytes = vec![0x90u8; 0x100];
        // 0x1010: nop; jmp 0x1002; 0x1013: lea rdx, [rdi+0x70] (a target)
        bytes[0x10..0x16].copy_from_slice(&[0x90, 0xeb, 0xef, 0x48, 0x8d, 0x57]);
        bytes[0x16] = 0x70;
        s.fdes = vec![(0x1000, 0x1017)];
        s.arrivals.insert(0x1013, Arrival::Branch(0x1008));
        s.arrivals.insert(0x1010, Arrival::Branch(0x1015));
        let p = s.plan(&bytes, 0x1010, (0x1000, 0x1017)).unwrap();
        assert_eq!(p, Patch { file_offset: 0x10, displaced: 3, lead: 0, call: false, pad: 7, trap: false });
        // Not padding after it: refused.
        bytes[0x17] = 0x55;
        let e = s.plan(&bytes, 0x1010, (0x1000, 0x1017)).unwrap_err();
        assert!(e.contains("not padding"), "{e}");
    }

    /// `mov edi, esi; call f; ret` ending a function: the jump goes on the
    /// call (and what precedes it up to 5 bytes), not on the `ret`.
    #[test]
    fn a_site_too_short_takes_the_jump_on_the_instructions_before_it() {
        let mut s = Sites { exec: vec![(0x1000, 0x100, 0)], ..Default::default() };
        let mut bytes = vec![0x55u8; 0x100];
        // 0x1010: mov edi, esi; 0x1012: call 0x1080; 0x1017: ret
        bytes[0x10..0x18].copy_from_slice(&[0x89, 0xf7, 0xe8, 0x69, 0x00, 0x00, 0x00, 0xc3]);
        s.arrivals.insert(0x1017, Arrival::Return(0x1012));
        s.arrivals.insert(0x1080, Arrival::Branch(0x1012));
        let p = s.plan(&bytes, 0x1017, (0x1010, 0x1018)).unwrap();
        assert_eq!(p, Patch { file_offset: 0x17, displaced: 0, lead: 5, call: true, pad: 0, trap: false });
        // Another way to the site: refused.
        s.arrivals.insert(0x1017, Arrival::Branch(0x1040));
        let e = s.plan(&bytes, 0x1017, (0x1010, 0x1018)).unwrap_err();
        assert!(e.contains("a branch at 0x1040 jumps to 0x1017"), "{e}");
        // Fewer than 5 bytes before it.
        s.arrivals.insert(0x1017, Arrival::Return(0x1012));
        assert!(s.plan(&bytes, 0x1017, (0x1014, 0x1018)).is_err());
        // `add rsp, 8; pop rbx; pop rbp; ret`: the three before the `ret`.
        bytes[0x10..0x17].copy_from_slice(&[0x48, 0x83, 0xc4, 0x08, 0x5b, 0x5d, 0xc3]);
        s.arrivals.clear();
        let p = s.plan(&bytes, 0x1016, (0x1010, 0x1017)).unwrap();
        assert_eq!(p, Patch { file_offset: 0x16, displaced: 0, lead: 6, call: false, pad: 0, trap: false });
        // A jump among them: the site is not reached through them.
        bytes[0x10..0x16].copy_from_slice(&[0x90, 0x90, 0x90, 0x90, 0xeb, 0x00]);
        let e = s.plan(&bytes, 0x1016, (0x1010, 0x1017)).unwrap_err();
        assert!(e.contains("does not fall through"), "{e}");
        // A call among them that is not the last.
        bytes[0x10..0x16].copy_from_slice(&[0xff, 0xd0, 0x90, 0x90, 0x90, 0x90]);
        let e = s.plan(&bytes, 0x1016, (0x1010, 0x1017)).unwrap_err();
        assert!(e.contains("would return into the trampoline"), "{e}");
    }
}
