//! Go's function table (`.gopclntab`): every Go function's name and
//! bounds, kept in stripped binaries too (Go's runtime needs it for its
//! tracebacks). The format is the one `runtime/symtab.go` documents for Go
//! 1.18 and later (`pcHeader`, magic 0xfffffff0; 0xfffffff1 from 1.20):
//!
//! * the header: magic (u32), two zero bytes, the instruction size
//!   quantum and the pointer size (u8 each), then pointer-sized words:
//!   `nfunc`, `nfiles`, `textStart`, and the offsets from the header of
//!   `funcnametab`, `cutab`, `filetab`, `pctab` and the function table;
//! * the function table: `nfunc + 1` pairs of u32 (the entry as an
//!   offset from `textStart`, the `_func` as an offset from the table),
//!   the last one's entry the end of the text;
//! * a `_func` starts with its entry offset (u32) and its name's offset in
//!   `funcnametab` (i32), a NUL-terminated string.
//!
//! The file is input: every offset is checked against the section, and a
//! table that does not hold together gives no names at all. Older tables
//! (Go 1.17 and before) are not read.

/// A Go function: its name, entry (link-time address) and size.
pub struct GoFunction {
    pub name: String,
    pub addr: u64,
    pub size: u64,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn word_at(b: &[u8], at: usize, size: usize) -> Option<u64> {
    match size {
        8 => Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?)),
        4 => u32_at(b, at).map(u64::from),
        _ => None,
    }
}

/// The functions of the table `tab` (the section's bytes, little-endian).
/// `text_start`: the link-time address of the text when the header's own
/// word is not it (a position-independent binary, where a relocation
/// fills it at load time; None: the header's word).
pub fn functions(tab: &[u8], text_start: Option<u64>) -> Vec<GoFunction> {
    parse(tab, text_start).unwrap_or_default()
}

fn parse(tab: &[u8], text_start: Option<u64>) -> Option<Vec<GoFunction>> {
    let magic = u32_at(tab, 0)?;
    if !matches!(magic, 0xffff_fff0 | 0xffff_fff1) || tab.get(4..6)? != [0, 0] {
        return None;
    }
    let ptr = usize::from(*tab.get(7)?);
    if ptr != 8 && ptr != 4 {
        return None;
    }
    let word = |i: usize| word_at(tab, 8 + i * ptr, ptr);
    let nfunc = usize::try_from(word(0)?).ok()?;
    let text = match text_start {
        Some(t) => t,
        None => word(2)?,
    };
    let names = usize::try_from(word(3)?).ok()?;
    let ftab = usize::try_from(word(7)?).ok()?;
    // Each function takes 8 bytes of the table at least: a count the
    // section cannot hold is a broken table.
    if nfunc == 0 || nfunc > tab.len() / 8 {
        return None;
    }
    let mut out = Vec::with_capacity(nfunc);
    for i in 0..nfunc {
        let at = ftab.checked_add(i * 8)?;
        let (entry, funcoff) = (u32_at(tab, at)?, u32_at(tab, at + 4)?);
        let next = u32_at(tab, at + 8)?;
        let f = ftab.checked_add(usize::try_from(funcoff).ok()?)?;
        // The _func names its own entry: a mismatch is a broken table.
        if u32_at(tab, f)? != entry || next < entry {
            return None;
        }
        let name_off = u32_at(tab, f + 4)? as i32;
        let start = names.checked_add(usize::try_from(name_off).ok()?)?;
        let raw = tab.get(start..)?;
        let end = raw.iter().take(4096).position(|&c| c == 0)?;
        let name = String::from_utf8_lossy(&raw[..end]).into_owned();
        if name.is_empty() {
            continue;
        }
        out.push(GoFunction { name, addr: text.checked_add(u64::from(entry))?, size: u64::from(next - entry) });
    }
    Some(out)
}

/// The Go version a binary was built with (`go1.19.8`), from its
/// `.go.buildinfo` section (`debug/buildinfo` in Go's source): a 16-byte
/// header (`"\xff Go buildinf:"`, the pointer size, flags) and, since Go
/// 1.18 (flag 2), the version as a string with a varint length at byte
/// 32. Older layouts (pointers to Go strings) give None.
pub fn build_version(info: &[u8]) -> Option<String> {
    if info.get(..14)? != b"\xff Go buildinf:" || info.get(15)? & 2 == 0 {
        return None;
    }
    let mut len = 0usize;
    let mut at = 32;
    for shift in (0..35).step_by(7) {
        let b = *info.get(at)?;
        at += 1;
        len |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            let v = info.get(at..at.checked_add(len)?)?;
            let v = std::str::from_utf8(v).ok()?;
            return (v.starts_with("go") && len <= 64).then(|| v.to_string());
        }
    }
    None
}

/// Where the fields a Go probe's trampoline reads are in `g` and `m` for
/// Go `version`: read off runtime/runtime2.go of each release from 1.18
/// (the first with Go's register ABI on both architectures and the
/// version in `.go.buildinfo`) to 1.23 (whose `g.syscallbp` moves `goid`).
/// Err: a version whose layout telco-stap does not know.
pub fn layout(version: &str) -> Result<telco_abi::artifact::GoLayout, String> {
    let minor = version
        .strip_prefix("go1.")
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|m| m.parse::<u32>().ok());
    let goid = match minor {
        Some(18..=22) => 0x98,
        Some(23) => 0xa0,
        _ => {
            return Err(format!(
                "it was built with {version}, whose runtime's layout telco-stap does not know (Go 1.18 to 1.23)"
            ))
        }
    };
    Ok(telco_abi::artifact::GoLayout {
        g_m: 0x30,
        g_sched_sp: 0x38,
        g_goid: goid,
        m_g0: 0,
        m_procid: 0x48,
        m_gsignal: 0x50,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of two functions, built as Go 1.18's linker lays it out.
    fn table(text: u64) -> Vec<u8> {
        let mut t = Vec::new();
        t.extend(0xffff_fff0u32.to_le_bytes());
        t.extend([0, 0, 1, 8]);
        let header = 8 + 8 * 8;
        let names_at = header as u64;
        let names = b"main.main\0main.(*T).work\0";
        let ftab_at = names_at + names.len() as u64;
        for w in [2u64, 0, text, names_at, 0, 0, 0, ftab_at] {
            t.extend(w.to_le_bytes());
        }
        t.extend(names);
        // Two entries and the end; the _funcs right after.
        let funcs: u32 = 3 * 8;
        for (entry, funcoff) in [(0u32, funcs), (0x40, funcs + 8), (0x90, 0)] {
            t.extend(entry.to_le_bytes());
            t.extend(funcoff.to_le_bytes());
        }
        for (entry, name) in [(0u32, 0i32), (0x40, 10)] {
            t.extend(entry.to_le_bytes());
            t.extend(name.to_le_bytes());
        }
        t
    }

    #[test]
    fn names_and_bounds_are_read() {
        let f = functions(&table(0x40_1000), None);
        let got: Vec<(&str, u64, u64)> = f.iter().map(|f| (f.name.as_str(), f.addr, f.size)).collect();
        assert_eq!(got, [("main.main", 0x40_1000, 0x40), ("main.(*T).work", 0x40_1040, 0x50)]);
        // A position-independent binary's text, given apart.
        assert_eq!(functions(&table(0), Some(0x1000))[1].addr, 0x1040);
    }

    #[test]
    fn the_version_and_its_layout_are_read() {
        let mut info = b"\xff Go buildinf:\x08\x02".to_vec();
        info.resize(32, 0);
        info.push(9);
        info.extend(b"go1.19.8x");
        info.push(0);
        assert_eq!(build_version(&info).as_deref(), Some("go1.19.8x"));
        // Cut anywhere: nothing, never a panic.
        for cut in 0..info.len() - 1 {
            assert_eq!(build_version(&info[..cut]), None, "cut at {cut}");
        }
        // Before 1.18: pointers, not read.
        info[15] = 0;
        assert_eq!(build_version(&info), None);
        assert_eq!(layout("go1.19.8").unwrap().g_goid, 0x98);
        assert_eq!(layout("go1.23rc1").unwrap().g_goid, 0xa0);
        for v in ["go1.17.3", "go1.24.0", "go2", "devel"] {
            assert!(layout(v).unwrap_err().contains(v), "{v}");
        }
    }

    #[test]
    fn a_broken_table_gives_nothing() {
        let good = table(0x1000);
        for cut in [0, 7, 40, 80, good.len() - 3] {
            assert!(functions(&good[..cut], None).is_empty(), "cut at {cut}");
        }
        let mut bad = good.clone();
        bad[0] = 0xfb; // Go 1.2's magic: not read
        assert!(functions(&bad, None).is_empty());
        let mut bad = good.clone();
        bad[8] = 0xff; // nfunc past the section
        assert!(functions(&bad, None).is_empty());
        // Every byte flipped in turn: no panic.
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0xa5;
            let _ = functions(&b, None);
        }
    }
}
