//! Short functions on x86_64: a 2-byte `jmp rel8` over a function too
//! short for the 5-byte jump, to a `jmp rel32` written in a neighbour's
//! dead bytes (`telco_abi::artifact::Hop`; the runtime's `Hooker::module`).
//!
//! A function with fewer than 5 bytes after its `endbr64` and nothing after
//! it the jump may use (packed by `-falign-functions=1`) gets a 2-byte `jmp
//! rel8` over its first instructions (whole ones covering 2 bytes, nothing
//! arriving inside) to a `jmp rel32` to its trampoline. That jump is written
//! in a nearby function, the host, right after the host's own entry jump
//! (slots at +5, +10, …), in bytes the host's displaced instructions leave
//! dead: pass 2 plans the host's longer displacement with the same arrival
//! analysis as statements (`sites`). A host that loops back to its own entry
//! is not chosen. Without a function entry in reach, any instruction whose
//! next 10 bytes nothing arrives inside hosts the hop (not within a
//! function's first 16 bytes, where an entry jump may go).
//!
//! In modules up to 32 MB the same analysis runs for every probed function:
//! where something arrives inside its first 5 bytes from elsewhere in the
//! module (a cold part, a table), the hop is `required`; if none can be
//! placed, the function is refused here. The runtime uses a hop where its
//! ordinary plan (`patch::plan`) fails or the hop is required. A host
//! without probes of its own gets a trampoline that only runs its displaced
//! instructions; a host whose jump clashes with another probe's unhooks the
//! functions hopping through it, with a warning. A 1-byte function (`ret`)
//! with no padding after it has no room even for the hop and stays refused.

use super::super::{FunctionRange, ModuleCode};

/// The bytes of `endbr64`.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// For a function shorter than the 5-byte jump (after its `endbr64`)
/// with nothing after it the jump could cover: a 2-byte hop through a
/// nearby function (`telco_abi::artifact::Hop`), or None. x86_64.
/// Err when a 5-byte jump there would cover a place control arrives
/// at and no hop could be planned: the function cannot be hooked.
pub fn short_hop(m: &impl ModuleCode, f: FunctionRange) -> Result<Option<telco_abi::artifact::Hop>, String> {
    if m.machine() != super::MACHINE || f.size == 0 {
        return Ok(None);
    }
    // At most 4 bytes of `endbr64`: 9 bytes or more always fit a jump;
    // whether control arrives inside those bytes is checked in modules
    // small enough to analyse whole for every probed function (32 MB:
    // python3.11, libc, libstdc++; not node).
    let small = || m.file_len().is_some_and(|n| n <= 32 << 20);
    if f.size >= 9 && !small() {
        return Ok(None);
    }
    let Ok(mut hops) = m.hops().lock() else { return Ok(None) };
    if let Some(h) = hops.planned.get(&f.addr) {
        return h.clone();
    }
    // A module that cannot be analysed gets no hops (the runtime's
    // own plan decides, as before hops existed).
    let (Ok(bytes), Ok(sites)) = (m.bytes(), m.sites()) else { return Ok(None) };
    let bytes: &[u8] = &bytes;
    let starts_endbr = |addr: u64, size: u64| {
        size >= 4
            && m.file_offset_of(addr).and_then(|o| bytes.get(o as usize..o as usize + 4)).is_some_and(|b| b == ENDBR64)
    };
    let skip = if starts_endbr(f.addr, f.size) { 4 } else { 0 };
    let patch_at = f.addr + skip;
    let range = (f.addr, f.addr + f.size);
    // Long enough, and nothing arrives inside the 5 bytes: the ordinary
    // jump (padding after it is the runtime's to use).
    let required = f.size - skip >= 5;
    if required && sites.plan_len(bytes, patch_at, range, 5, false).is_ok() {
        hops.planned.insert(f.addr, Ok(None));
        return Ok(None);
    }
    let own = sites.plan_len(bytes, patch_at, range, 2, false).ok();
    let mut found = None;
    if let Some(own) = own {
        // Hosts by distance: the hop (5 bytes after the host's jump)
        // within a rel8 of the end of the 2-byte jump.
        let mut hosts: Vec<FunctionRange> = m
            .functions()
            .filter(|h| h.addr != f.addr && h.size >= 10 && !h.ifunc && h.addr.abs_diff(patch_at) < 160)
            .collect();
        hosts.sort_by_key(|h| h.addr.abs_diff(patch_at));
        for h in hosts {
            let hskip = if starts_endbr(h.addr, h.size) { 4 } else { 0 };
            let at = h.addr + hskip;
            // The host's next free slot (its own jump takes the first 5).
            let slot = 5 * (1 + hops.hosts.get(&at).copied().unwrap_or(0));
            let rel = (at + u64::from(slot)) as i64 - (patch_at + 2) as i64;
            let taken = |(&o, &n): (&u64, &u32)| o != at && at < o + 5 * (u64::from(n) + 1) + 15 && o < at + 60;
            if !(-128..=127).contains(&rel) || slot > 40 || hops.hosts.iter().any(taken) {
                continue;
            }
            let need = u64::from(slot) + 5;
            let Ok(p) = sites.plan_len(bytes, at, (h.addr, h.addr + h.size), need, false) else { continue };
            // A host that loops back to its own entry would run its
            // probes on every pass (its jump is planned here, not by
            // the runtime's loop handling).
            let loops_back = m
                .file_offset_of(h.addr)
                .and_then(|o| bytes.get(o as usize..(o + h.size) as usize))
                .is_none_or(|code| {
                    let mut d = iced_x86::Decoder::with_ip(64, code, h.addr, iced_x86::DecoderOptions::NONE);
                    d.iter().any(|i| {
                        !i.is_call_near()
                            && matches!(i.op0_kind(), iced_x86::OpKind::NearBranch64)
                            && i.near_branch_target() == at
                            && i.ip() >= at + p.displaced as u64
                    })
                });
            if loops_back {
                continue;
            }
            *hops.hosts.entry(at).or_insert(0) += 1;
            found = Some(telco_abi::artifact::Hop {
                displaced: own.displaced,
                host: at,
                host_file_offset: p.file_offset,
                slot,
                host_displaced: p.displaced,
                required,
            });
            break;
        }
        // No function entry near: any instruction whose next 10 bytes
        // nothing arrives inside (a cold part, the middle of a
        // function) hosts it, with a trampoline that only runs them.
        if found.is_none() {
            let mut near = sites.instruction_starts(bytes, patch_at.saturating_sub(124), patch_at + 126);
            near.sort_by_key(|&(a, _)| a.abs_diff(patch_at));
            for (at, end) in near {
                let rel = (at + 5) as i64 - (patch_at + 2) as i64;
                let overlaps = at < range.1 && at + 10 > range.0;
                if !(-128..=127).contains(&rel) || overlaps || hops.hosts.contains_key(&at) {
                    continue;
                }
                // Nor inside another host's displaced bytes, nor where a
                // function's own entry jump may go.
                // (a host's displaced bytes end at most 15 bytes past its
                // last slot; this one's within 20 of its start).
                let taken = |(&h, &n): (&u64, &u32)| at < h + 5 * (u64::from(n) + 1) + 15 && h < at + 20;
                if hops.hosts.iter().any(taken)
                    || m.function_at(at).is_some_and(|g| at < g.addr + 16)
                    || m.functions().any(|g| g.addr > at && g.addr < at + 16)
                {
                    continue;
                }
                let Ok(p) = sites.plan_len(bytes, at, (at, end), 10, false) else { continue };
                hops.hosts.insert(at, 1);
                found = Some(telco_abi::artifact::Hop {
                    displaced: own.displaced,
                    host: at,
                    host_file_offset: p.file_offset,
                    slot: 5,
                    host_displaced: p.displaced,
                    required,
                });
                break;
            }
        }
    }
    let decided = match found {
        None if required => Err("control arrives inside its first 5 bytes from elsewhere in the module, and no \
                                 hop through a neighbour could be placed"
            .to_string()),
        hop => Ok(hop),
    };
    hops.planned.insert(f.addr, decided.clone());
    decided
}
