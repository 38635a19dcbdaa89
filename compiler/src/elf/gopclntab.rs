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

/// The header's fields the readers use, checked.
struct Header {
    quantum: u64,
    nfunc: usize,
    text: u64,
    names: usize,
    pctab: usize,
    ftab: usize,
}

fn header(tab: &[u8], text_start: Option<u64>) -> Option<Header> {
    let magic = u32_at(tab, 0)?;
    if !matches!(magic, 0xffff_fff0 | 0xffff_fff1) || tab.get(4..6)? != [0, 0] {
        return None;
    }
    let quantum = u64::from(*tab.get(6)?).max(1);
    let ptr = usize::from(*tab.get(7)?);
    if ptr != 8 && ptr != 4 {
        return None;
    }
    let word = |i: usize| usize::try_from(word_at(tab, 8 + i * ptr, ptr)?).ok();
    let nfunc = word(0)?;
    // Each function takes 8 bytes of the table at least: a count the
    // section cannot hold is a broken table.
    if nfunc == 0 || nfunc > tab.len() / 8 {
        return None;
    }
    let text = match text_start {
        Some(t) => t,
        None => word_at(tab, 8 + 2 * ptr, ptr)?,
    };
    Some(Header { quantum, nfunc, text, names: word(3)?, pctab: word(6)?, ftab: word(7)? })
}

/// Function `i` of the table: its entry and end (offsets from the text)
/// and where its `_func` is, which names its own entry (a mismatch is a
/// broken table).
fn function(tab: &[u8], h: &Header, i: usize) -> Option<(u32, u32, usize)> {
    let at = h.ftab.checked_add(i * 8)?;
    let (entry, funcoff, next) = (u32_at(tab, at)?, u32_at(tab, at + 4)?, u32_at(tab, at + 8)?);
    let f = h.ftab.checked_add(usize::try_from(funcoff).ok()?)?;
    (u32_at(tab, f)? == entry && next >= entry).then_some((entry, next, f))
}

fn parse(tab: &[u8], text_start: Option<u64>) -> Option<Vec<GoFunction>> {
    let h = header(tab, text_start)?;
    let mut out = Vec::with_capacity(h.nfunc);
    for i in 0..h.nfunc {
        let (entry, next, f) = function(tab, &h, i)?;
        let name_off = u32_at(tab, f + 4)? as i32;
        let start = h.names.checked_add(usize::try_from(name_off).ok()?)?;
        let raw = tab.get(start..)?;
        let end = raw.iter().take(4096).position(|&c| c == 0)?;
        let name = String::from_utf8_lossy(&raw[..end]).into_owned();
        if name.is_empty() {
            continue;
        }
        out.push(GoFunction { name, addr: h.text.checked_add(u64::from(entry))?, size: u64::from(next - entry) });
    }
    Some(out)
}

/// Where a Go function keeps its caller's frame: its entry and end, and
/// at each pc where it changes, the bytes the function has taken below
/// its entry stack pointer (Go's `pcsp` table: the return address is that
/// far above the stack pointer on x86_64; on aarch64 the return address
/// and the frame pointer are saved at and below the stack pointer once
/// it is not 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFrame {
    pub entry: u64,
    pub end: u64,
    pub sp: Vec<(u64, u32)>,
}

/// The frames of every function of the table `tab` (as `functions`).
pub fn frames(tab: &[u8], text_start: Option<u64>) -> Vec<GoFrame> {
    parse_frames(tab, text_start).unwrap_or_default()
}

fn uvarint(b: &[u8], at: &mut usize) -> Option<u32> {
    let mut v = 0u32;
    for shift in (0..35).step_by(7) {
        let c = *b.get(*at)?;
        *at += 1;
        v |= u32::from(c & 0x7f).checked_shl(shift)?;
        if c & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn parse_frames(tab: &[u8], text_start: Option<u64>) -> Option<Vec<GoFrame>> {
    let h = header(tab, text_start)?;
    let mut out = Vec::with_capacity(h.nfunc);
    for i in 0..h.nfunc {
        let (entry, next, f) = function(tab, &h, i)?;
        let (start, end) = (h.text.checked_add(u64::from(entry))?, h.text.checked_add(u64::from(next))?);
        let Some(pcsp) = u32_at(tab, f + 16).and_then(|o| h.pctab.checked_add(usize::try_from(o).ok()?)) else {
            continue;
        };
        // A function whose table does not hold together has no frame here
        // (an unwinder goes on by frame pointers there).
        if let Some(sp) = pcsp_rows(tab, pcsp, start, end, h.quantum) {
            out.push(GoFrame { entry: start, end, sp });
        }
    }
    Some(out)
}

/// The pcvalue table at `p` (runtime/symtab.go's `step`) of the function
/// `start..end`: a zig-zag value delta and a pc delta (in quanta), from -1
/// at the entry; a zero value delta after the first pair ends it.
fn pcsp_rows(tab: &[u8], mut p: usize, start: u64, end: u64, quantum: u64) -> Option<Vec<(u64, u32)>> {
    let (mut pc, mut val) = (start, -1i64);
    let mut sp: Vec<(u64, u32)> = Vec::new();
    loop {
        let d = uvarint(tab, &mut p)?;
        if d == 0 && pc != start {
            return Some(sp);
        }
        val += if d & 1 != 0 { -i64::from(d >> 1) - 1 } else { i64::from(d >> 1) };
        let step = u64::from(uvarint(tab, &mut p)?) * quantum;
        // A frame is at most Go's 1 GB stack; the table stays in the
        // function.
        let bytes = u32::try_from(val).ok().filter(|&v| v < 1 << 30)?;
        if pc >= end || step == 0 || sp.len() > 1 << 16 {
            return None;
        }
        if sp.last().is_none_or(|&(_, v)| v != bytes) {
            sp.push((pc, bytes));
        }
        pc = pc.checked_add(step)?;
    }
}

/// `frames` as a `.debug_frame` section (DWARF CFI, absolute addresses),
/// for unwinders that read CFI: Go binaries carry none that they can read
/// (stripped ones nothing, others a compressed `.debug_frame`). On x86_64
/// the frame is the stack pointer plus the pushed bytes plus the return
/// address, whose slot is just below it, and the frame pointer is saved
/// below that once a frame is made; on aarch64 the return address is in
/// x30 until a frame is made, then at the stack pointer. (Go saves the
/// frame pointer below the stack pointer there, which a sample's copy of
/// the stack does not hold: no rule for it, so the unwinder keeps x29.)
pub fn debug_frame(frames: &[GoFrame], aarch64: bool) -> Vec<u8> {
    const ADVANCE_LOC4: u8 = 0x04;
    const DEF_CFA: u8 = 0x0c;
    const DEF_CFA_OFFSET: u8 = 0x0e;
    const OFFSET: u8 = 0x80;
    const RESTORE: u8 = 0xc0;
    fn uleb(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            out.push(if v == 0 { b } else { b | 0x80 });
            if v == 0 {
                break;
            }
        }
    }
    // Padded with DW_CFA_nop to 8 bytes, the length word first.
    fn entry(out: &mut Vec<u8>, body: &[u8]) {
        let len = (body.len() + 4).next_multiple_of(8) - 4;
        out.extend((len as u32).to_le_bytes());
        out.extend(body);
        out.resize(out.len() + len - body.len(), 0);
    }
    let (sp, ra, fp) = if aarch64 { (31u8, 30u8, 29u8) } else { (7, 16, 6) };
    let mut out = Vec::new();
    // The CIE: version 1, no augmentation, code alignment 1, data
    // alignment -8, the return address register; at the entry the frame
    // is the stack pointer (+ the pushed return address on x86_64).
    let mut cie = vec![0xff, 0xff, 0xff, 0xff, 1, 0, 1, 0x78, ra, DEF_CFA, sp];
    if aarch64 {
        cie.push(0);
    } else {
        cie.extend([8, OFFSET | ra, 1]);
    }
    entry(&mut out, &cie);
    for f in frames {
        let mut body = Vec::with_capacity(24 + 6 * f.sp.len());
        body.extend(0u32.to_le_bytes());
        body.extend(f.entry.to_le_bytes());
        body.extend((f.end - f.entry).to_le_bytes());
        let mut at = f.entry;
        for &(pc, bytes) in &f.sp {
            if pc > at {
                body.push(ADVANCE_LOC4);
                body.extend(((pc - at) as u32).to_le_bytes());
                at = pc;
            }
            let b = u64::from(bytes);
            body.push(DEF_CFA_OFFSET);
            uleb(&mut body, if aarch64 { b } else { b + 8 });
            if bytes == 0 {
                body.push(RESTORE | if aarch64 { ra } else { fp });
            } else if aarch64 {
                body.push(OFFSET | ra);
                uleb(&mut body, b / 8);
            } else {
                body.push(OFFSET | fp);
                uleb(&mut body, 2);
            }
        }
        entry(&mut out, &body);
    }
    out
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
    Ok(telco_abi::artifact::GoLayout::go1_18(goid))
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

    /// The CFI made from Go's frames reads back, with gimli, as the rules
    /// the frames say: x86_64's return address just above the frame,
    /// aarch64's in x30 until the frame is made.
    #[test]
    fn go_frames_as_cfi() {
        use gimli::{BaseAddresses, CfaRule, DebugFrame, LittleEndian, RegisterRule, UnwindContext, UnwindSection};
        let frames = [
            GoFrame { entry: 0x40_1000, end: 0x40_1040, sp: vec![(0x40_1000, 0), (0x40_1008, 0x28), (0x40_1030, 0)] },
            GoFrame { entry: 0x40_1040, end: 0x40_1050, sp: vec![(0x40_1040, 0)] },
        ];
        for aarch64 in [false, true] {
            let cfi = debug_frame(&frames, aarch64);
            let mut df = DebugFrame::new(&cfi, LittleEndian);
            df.set_address_size(8);
            let mut ctx = UnwindContext::new();
            let row = |pc: u64, ctx: &mut UnwindContext<usize>| {
                let r = df
                    .unwind_info_for_address(&BaseAddresses::default(), ctx, pc, DebugFrame::cie_from_offset)
                    .unwrap_or_else(|e| panic!("{pc:#x}: {e}"));
                let CfaRule::RegisterAndOffset { register, offset } = *r.cfa() else { panic!("{pc:#x}") };
                let ra = r.register(gimli::Register(if aarch64 { 30 } else { 16 }));
                (register.0, offset, ra)
            };
            let sp = if aarch64 { 31 } else { 7 };
            let extra = if aarch64 { 0 } else { 8 };
            let (r, off, _) = row(0x40_1004, &mut ctx);
            assert_eq!((r, off), (sp, extra), "{aarch64}");
            let (r, off, rule) = row(0x40_1010, &mut ctx);
            assert_eq!((r, off), (sp, 0x28 + extra), "{aarch64}");
            let want = Some(if aarch64 { RegisterRule::Offset(-0x28) } else { RegisterRule::Offset(-8) });
            assert_eq!(rule, want, "{aarch64}");
            let (_, off, _) = row(0x40_1034, &mut ctx);
            assert_eq!(off, extra, "{aarch64}");
            let (_, off, _) = row(0x40_1044, &mut ctx);
            assert_eq!(off, extra, "{aarch64}");
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
