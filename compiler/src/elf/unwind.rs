//! Unwind and exception tables of an ELF file (`.eh_frame`, LSDAs), read
//! with gimli: the functions FDEs describe, and exception landing pads.

use goblin::elf::section_header::SHT_NOBITS;
use goblin::elf::Elf;

/// The functions of a file's `.eh_frame`: each FDE whose frame at its
/// first instruction is a fresh call's (`arch::native::fresh_call_frame`:
/// the return address just pushed), as (start, size). A compiler's cold part
/// of a function (`foo.cold`, jumped to with the frame already built) is
/// not one.
pub fn fde_functions(elf: &Elf<'_>, bytes: &[u8]) -> Vec<(u64, u64)> {
    let Some((eh, bases)) = eh_frame(elf, bytes) else { return Vec::new() };
    let mut ctx = gimli::UnwindContext::new();
    let mut out = Vec::new();
    each_fde(&eh, &bases, |fde| {
        let start = fde.initial_address();
        let Ok(row) = fde.unwind_info_for_address(&eh, &bases, &mut ctx, start) else { return };
        let fresh = matches!(row.cfa(), gimli::CfaRule::RegisterAndOffset { register, offset }
            if crate::arch::native::fresh_call_frame(*register, *offset));
        if fresh {
            out.push((start, fde.len()));
        }
    });
    out.sort_unstable();
    out.dedup_by_key(|f| f.0);
    out
}

/// Every FDE of `.eh_frame` that covers any bytes (one that does not
/// parse is skipped).
fn each_fde<'a>(
    eh: &EhFrame<'a>,
    bases: &gimli::BaseAddresses,
    mut f: impl FnMut(&gimli::FrameDescriptionEntry<gimli::EndianSlice<'a, gimli::LittleEndian>>),
) {
    use gimli::UnwindSection;
    let mut entries = eh.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else { continue };
        if fde.len() > 0 {
            f(&fde);
        }
    }
}

/// Section `name` of the file: its address and bytes (None for one that
/// has no bytes in the file).
pub(crate) fn section<'a>(elf: &Elf<'_>, bytes: &'a [u8], name: &str) -> Option<(u64, &'a [u8])> {
    let sh = elf.section_headers.iter().find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(name))?;
    if sh.sh_type == SHT_NOBITS {
        return None;
    }
    let data = bytes.get(sh.sh_offset as usize..sh.sh_offset.saturating_add(sh.sh_size) as usize)?;
    Some((sh.sh_addr, data))
}

pub(crate) type EhFrame<'a> = gimli::EhFrame<gimli::EndianSlice<'a, gimli::LittleEndian>>;

/// The file's `.eh_frame`, with the base addresses its pointers need.
pub(crate) fn eh_frame<'a>(elf: &Elf<'_>, bytes: &'a [u8]) -> Option<(EhFrame<'a>, gimli::BaseAddresses)> {
    let (eh_addr, eh_data) = section(elf, bytes, ".eh_frame")?;
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(eh_addr);
    if let Some((text, _)) = section(elf, bytes, ".text") {
        bases = bases.set_text(text);
    }
    if let Some((got, _)) = section(elf, bytes, ".got") {
        bases = bases.set_got(got);
    }
    let mut eh = gimli::EhFrame::new(eh_data, gimli::LittleEndian);
    // aarch64's CFI (`negate_ra_state` after each `paciasp`) needs its vendor.
    eh.set_vendor(crate::arch::native::CFI_VENDOR);
    Some((eh, bases))
}

/// The landing pads of an LSDA (`.gcc_except_table`) whose function starts
/// at `func`.
pub(crate) fn landing_pads(lsda: &[u8], func: u64) -> Vec<u64> {
    let mut r = Reader { b: lsda, at: 0 };
    let mut pads = Vec::new();
    let Some(lp_enc) = r.u8() else { return pads };
    let lp_start = if lp_enc == 0xff { func } else { r.encoded(lp_enc).unwrap_or(func) };
    let Some(tt_enc) = r.u8() else { return pads };
    if tt_enc != 0xff && r.uleb().is_none() {
        return pads;
    }
    let Some(cs_enc) = r.u8() else { return pads };
    let Some(cs_len) = r.uleb() else { return pads };
    let end = r.at.saturating_add(cs_len as usize).min(lsda.len());
    while r.at < end {
        let (Some(_start), Some(_len), Some(lp), Some(_action)) =
            (r.encoded(cs_enc), r.encoded(cs_enc), r.encoded(cs_enc), r.uleb())
        else {
            break;
        };
        if lp != 0 {
            pads.push(lp_start.wrapping_add(lp));
        }
    }
    pads
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }
    fn fixed(&mut self, n: usize) -> Option<u64> {
        let s = self.b.get(self.at..self.at + n)?;
        self.at += n;
        Some(s.iter().rev().fold(0u64, |v, &b| v << 8 | u64::from(b)))
    }
    fn uleb(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    /// A value in a DW_EH_PE encoding (the value format; call-site tables
    /// use no application).
    fn encoded(&mut self, enc: u8) -> Option<u64> {
        match enc & 0x0f {
            0x01 => self.uleb(),
            0x02 => self.fixed(2),
            0x03 => self.fixed(4),
            0x04 => self.fixed(8),
            0x0b => self.fixed(4).map(|v| v as u32 as i32 as i64 as u64),
            0x0c => self.fixed(8),
            0x00 => self.fixed(8),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsda_call_sites_give_landing_pads() {
        // lpstart omitted, no type table, call sites uleb128: two sites,
        // the second with a landing pad at +0x40.
        let lsda = [0xff, 0xff, 0x01, 8, 0x00, 0x10, 0x00, 0x00, 0x10, 0x08, 0x40, 0x01];
        assert_eq!(landing_pads(&lsda, 0x1000), [0x1040]);
    }
}

/// The file's `.eh_frame` as `ubacktrace()`'s rows: (link-time address,
/// compact rule) by address, each rule holding up to the next row; a gap
/// after a function's last row is `UNW_NONE`.
pub fn unwind_rows(elf: &Elf<'_>, bytes: &[u8]) -> Vec<(u64, u32)> {
    use telco_abi::region::UNW_NONE;
    let Some((eh, bases)) = eh_frame(elf, bytes) else { return Vec::new() };
    let mut ctx = gimli::UnwindContext::new();
    // Per FDE: its range and rows.
    let mut fdes: Vec<(u64, u64, Vec<(u64, u32)>)> = Vec::new();
    each_fde(&eh, &bases, |fde| {
        let Ok(mut table) = fde.rows(&eh, &bases, &mut ctx) else { return };
        let mut rows = Vec::new();
        while let Ok(Some(row)) = table.next_row() {
            let rule = crate::arch::native::compact_unwind_rule(
                row.cfa(),
                // No rule: the register keeps its value.
                &row.register(crate::arch::native::DWARF_FP).unwrap_or(gimli::RegisterRule::SameValue),
                &row.register(crate::arch::native::DWARF_RA).unwrap_or(gimli::RegisterRule::SameValue),
            );
            rows.push((row.start_address(), rule));
        }
        fdes.push((fde.initial_address(), fde.initial_address().saturating_add(fde.len()), rows));
    });
    fdes.sort_unstable_by_key(|f| f.0);
    let mut out: Vec<(u64, u32)> = Vec::new();
    for (i, (_, end, rows)) in fdes.iter().enumerate() {
        for &(a, r) in rows {
            if out.last().is_some_and(|l| l.0 >= a) {
                continue; // overlapping FDEs: the first wins
            }
            if out.last().map(|l| l.1) != Some(r) {
                out.push((a, r));
            }
        }
        let next = fdes.get(i + 1).map_or(u64::MAX, |f| f.0);
        if next > *end && out.last().is_some_and(|l| l.0 < *end) {
            out.push((*end, UNW_NONE));
        }
    }
    out
}

/// The CFA rule at `addr` (`.eh_frame`): a DWARF register and an offset;
/// None where no FDE covers `addr` or the rule is an expression.
pub fn cfa_at(elf: &Elf<'_>, bytes: &[u8], addr: u64) -> Option<(u16, i64)> {
    use gimli::UnwindSection;
    let (eh, bases) = eh_frame(elf, bytes)?;
    let mut ctx = gimli::UnwindContext::new();
    let fde = eh.fde_for_address(&bases, addr, gimli::EhFrame::cie_from_offset).ok()?;
    let row = fde.unwind_info_for_address(&eh, &bases, &mut ctx, addr).ok()?;
    match row.cfa() {
        gimli::CfaRule::RegisterAndOffset { register, offset } => Some((register.0, *offset)),
        _ => None,
    }
}

/// Where each function keeps its return address at its call sites, as an
/// offset from its entry's stack pointer, by the address its FDE starts
/// at: the first rule of the FDE that saves the return-address column
/// (`DW_CFA_offset`), from a fresh call's frame. x86_64: 0 (the pushed
/// return address); aarch64: where the prologue stores x30, which gcc puts
/// at the bottom of a large frame (`stp x29, x30, [sp, #-256]!`: -248).
/// A function whose rows never save the column (a leaf keeps x30) has
/// none; so has an offset that is not a multiple of 8 within 1 MiB of the
/// entry (the file is the target's word).
pub fn return_addresses_saved(elf: &Elf<'_>, bytes: &[u8]) -> std::collections::HashMap<u64, i64> {
    let mut out = std::collections::HashMap::new();
    let Some((eh, bases)) = eh_frame(elf, bytes) else { return out };
    let mut ctx = gimli::UnwindContext::new();
    each_fde(&eh, &bases, |fde| {
        let Ok(mut table) = fde.rows(&eh, &bases, &mut ctx) else { return };
        let mut entry_cfa = None;
        while let Ok(Some(row)) = table.next_row() {
            let cfa = match row.cfa() {
                gimli::CfaRule::RegisterAndOffset { register, offset } => Some((*register, *offset)),
                _ => None,
            };
            let Some((register, offset)) = *entry_cfa.get_or_insert(cfa) else { return };
            if !crate::arch::native::fresh_call_frame(register, offset) {
                return;
            }
            if let Some(gimli::RegisterRule::Offset(n)) = row.register(crate::arch::native::DWARF_RA) {
                if let Some(at) = offset.checked_add(n).filter(|at| at % 8 == 0 && at.abs() < 1 << 20) {
                    out.entry(fde.initial_address()).or_insert(at);
                }
                return;
            }
        }
    });
    out
}
