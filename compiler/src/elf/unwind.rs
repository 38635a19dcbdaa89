//! Unwind tables of an ELF file (`.eh_frame`, read with gimli through
//! `image::eh_frame`) in the architecture's terms: the functions FDEs
//! describe, `ubacktrace()`'s rows, the CFA at an address, and where
//! functions save their return address.

use crate::image::{eh_frame, EhFrame};
use goblin::elf::Elf;

/// The functions of a file's `.eh_frame`: each FDE whose frame at its
/// first instruction is a fresh call's (`arch::native::fresh_call_frame`:
/// the return address just pushed), as (start, size). A compiler's cold part
/// of a function (`foo.cold`, jumped to with the frame already built) is
/// not one.
pub fn fde_functions(elf: &Elf<'_>, bytes: &[u8]) -> Vec<(u64, u64)> {
    let Some((eh, bases)) = eh_frame(elf, bytes, crate::arch::native::CFI_VENDOR) else { return Vec::new() };
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

/// The file's `.eh_frame` as `ubacktrace()`'s rows: (link-time address,
/// compact rule) by address, each rule holding up to the next row; a gap
/// after a function's last row is `UNW_NONE`.
pub fn unwind_rows(elf: &Elf<'_>, bytes: &[u8]) -> Vec<(u64, u32)> {
    use telco_abi::region::UNW_NONE;
    let Some((eh, bases)) = eh_frame(elf, bytes, crate::arch::native::CFI_VENDOR) else { return Vec::new() };
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
    let (eh, bases) = eh_frame(elf, bytes, crate::arch::native::CFI_VENDOR)?;
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
    let Some((eh, bases)) = eh_frame(elf, bytes, crate::arch::native::CFI_VENDOR) else { return out };
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
