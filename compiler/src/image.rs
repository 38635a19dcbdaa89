//! An ELF file as bytes, what the layers above read it with: the file
//! opened safely and read whole ([`read`]), held as an [`Image`], and the
//! sections several of them need by name ([`section`]; `.eh_frame` and
//! the LSDAs of `.gcc_except_table`, read with gimli).
//!
//! It knows no module, architecture or DWARF: `arch` (patch-site
//! analysis), `dwarf` (debug sections, separate debug files) and `elf`
//! (modules, unwind rows) all build on it.
//!
//! **Invariant:** reads files only, and only regular ones, never blocking;
//! every file is user input, so a malformed one reads as `None` or an
//! error, never a panic.

use goblin::elf::section_header::SHT_NOBITS;
use goblin::elf::Elf;
use std::fs;
use std::path::Path;

/// A module file's bytes: read by pass 2 from a path, or given by the
/// caller (`elf::Module::from_image`: a file a running process maps, opened
/// as it maps it and held mapped by the runtime, whose path names another
/// file or none here).
#[derive(Clone)]
pub enum Image {
    Read(std::sync::Arc<[u8]>),
    Given(std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>),
}

impl Image {
    pub fn given(bytes: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>) -> Image {
        Image::Given(bytes)
    }
}

impl std::ops::Deref for Image {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Image::Read(b) => b,
            Image::Given(b) => (**b).as_ref(),
        }
    }
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({} bytes)", self.len())
    }
}

/// `path` opened for reading if it is a regular file. Devices and FIFOs
/// would never end (or never start), and opening a device may do
/// something (a watchdog's starts it): checked on a descriptor that opens
/// nothing (`O_PATH`: a path derived from what a target shows, a separate
/// debug file's beside its module, may be swapped between a check and an
/// open), then opened through that descriptor (`/proc/self/fd/N`: the
/// same file), without blocking. An `InvalidInput` error for any other
/// file.
pub(crate) fn open_regular(path: &Path) -> std::io::Result<fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let not_regular = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
    let handle = fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(path)?;
    let checked = handle.metadata()?;
    if !checked.is_file() {
        return Err(not_regular());
    }
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))?;
    let meta = f.metadata()?;
    if !meta.is_file() || (meta.dev(), meta.ino()) != (checked.dev(), checked.ino()) {
        return Err(not_regular());
    }
    Ok(f)
}

/// Why [`read`] could not read a file.
#[derive(Debug)]
pub(crate) enum ReadError {
    Io(std::io::Error),
    /// A device, FIFO, directory or the like ([`open_regular`]).
    NotRegular,
    /// Larger than any module this tracer reads (4 GiB): its length.
    TooLarge(u64),
}

/// The bytes of a module file ([`open_regular`]), at most 4 GiB.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    const MAX_MODULE_BYTES: u64 = 4 << 30;
    let f = open_regular(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => ReadError::NotRegular,
        _ => ReadError::Io(e),
    })?;
    let meta = f.metadata().map_err(ReadError::Io)?;
    if meta.len() > MAX_MODULE_BYTES {
        return Err(ReadError::TooLarge(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(meta.len()).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    Ok(bytes)
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

/// The file's `.eh_frame`, with the base addresses its pointers need,
/// read with `vendor`'s CFI extensions (the architecture's `CFI_VENDOR`:
/// aarch64's `negate_ra_state` after each `paciasp` needs its own).
pub(crate) fn eh_frame<'a>(
    elf: &Elf<'_>,
    bytes: &'a [u8],
    vendor: gimli::Vendor,
) -> Option<(EhFrame<'a>, gimli::BaseAddresses)> {
    let (eh_addr, eh_data) = section(elf, bytes, ".eh_frame")?;
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(eh_addr);
    if let Some((text, _)) = section(elf, bytes, ".text") {
        bases = bases.set_text(text);
    }
    if let Some((got, _)) = section(elf, bytes, ".got") {
        bases = bases.set_got(got);
    }
    let mut eh = gimli::EhFrame::new(eh_data, gimli::LittleEndian);
    eh.set_vendor(vendor);
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

/// What a reader that parses no ELF needs of an image (the profiler's
/// unwinder in the runtime): the load segments, the sections by name, the
/// GNU build id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// (p_vaddr, p_offset, p_filesz) of each `PT_LOAD`.
    pub loads: Vec<(u64, u64, u64)>,
    /// (name, address, size, file offset; None when the section has no
    /// bytes in the file: `SHT_NOBITS`).
    pub sections: Vec<(String, u64, u64, Option<u64>)>,
    /// The `NT_GNU_BUILD_ID` note's bytes (empty without one).
    pub build_id: Vec<u8>,
}

/// The [`Layout`] of the ELF image `bytes`, or None if it is not one.
pub fn layout(bytes: &[u8]) -> Option<Layout> {
    use goblin::elf::program_header::PT_LOAD;
    let elf = Elf::parse(bytes).ok()?;
    let loads = elf
        .program_headers
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .map(|p| (p.p_vaddr, p.p_offset, p.p_filesz))
        .collect();
    let sections = elf
        .section_headers
        .iter()
        .map(|sh| {
            let name = elf.shdr_strtab.get_at(sh.sh_name).unwrap_or("").to_string();
            let offset = (sh.sh_type != SHT_NOBITS).then_some(sh.sh_offset);
            (name, sh.sh_addr, sh.sh_size, offset)
        })
        .collect();
    let mut build_id = Vec::new();
    if let Some(notes) = elf.iter_note_sections(bytes, Some(".note.gnu.build-id")) {
        for n in notes.flatten() {
            if n.n_type == goblin::elf::note::NT_GNU_BUILD_ID {
                build_id = n.desc.to_vec();
            }
        }
    }
    Some(Layout { loads, sections, build_id })
}

/// Whether the ELF image `bytes` is a shared library, not a program: a
/// position-independent file that names itself (`DT_SONAME`) or has no
/// entry point (the C library has both an entry and a name).
pub fn is_library(bytes: &[u8]) -> bool {
    Elf::parse(bytes)
        .is_ok_and(|e| e.header.e_type == goblin::elf::header::ET_DYN && (e.soname.is_some() || e.header.e_entry == 0))
}

/// The function symbols named `names` in the ELF image `bytes` (the
/// dynamic symbols, then the symbol table; a name's `@VERSION` left out):
/// file offset, size and index in `names` of each, once per address. A
/// cheap look-up (no module is built): what the tracer asks at every
/// attach (`execve`, the unwinder's entry points).
pub fn functions_named(bytes: &[u8], names: &[&str]) -> Vec<(u64, u64, usize)> {
    use goblin::elf::program_header::PT_LOAD;
    let Ok(elf) = Elf::parse(bytes) else { return Vec::new() };
    let offset_of = |vaddr: u64| {
        elf.program_headers
            .iter()
            .find(|p| p.p_type == PT_LOAD && vaddr >= p.p_vaddr && vaddr - p.p_vaddr < p.p_filesz)
            .map(|p| vaddr - p.p_vaddr + p.p_offset)
    };
    let mut out: Vec<(u64, u64, usize)> = Vec::new();
    let syms = elf.dynsyms.iter().map(|s| (s, &elf.dynstrtab)).chain(elf.syms.iter().map(|s| (s, &elf.strtab)));
    for (sym, strtab) in syms {
        if sym.st_value == 0 || !sym.is_function() {
            continue;
        }
        let name = strtab.get_at(sym.st_name).unwrap_or("");
        let name = name.split('@').next().unwrap_or(name);
        let Some(index) = names.iter().position(|n| *n == name) else { continue };
        let Some(off) = offset_of(sym.st_value) else { continue };
        if !out.iter().any(|&(o, _, _)| o == off) {
            out.push((off, sym.st_size, index));
        }
    }
    out
}

/// The function symbol of the ELF image `bytes` that holds its byte at
/// `file_offset`, as `name+0xOFF` (the symbol table and the dynamic
/// symbols; where symbols overlap, the one starting closest below): what
/// the tracer names a crash's place with.
pub fn function_at(bytes: &[u8], file_offset: u64) -> Option<String> {
    use goblin::elf::program_header::PT_LOAD;
    let elf = Elf::parse(bytes).ok()?;
    let ph = elf.program_headers.iter().find(|p| {
        p.p_type == PT_LOAD && file_offset >= p.p_offset && file_offset < p.p_offset.saturating_add(p.p_filesz)
    })?;
    let vaddr = (file_offset - ph.p_offset).wrapping_add(ph.p_vaddr);
    let mut best: Option<(u64, &str)> = None;
    for (syms, strs) in [(&elf.syms, &elf.strtab), (&elf.dynsyms, &elf.dynstrtab)] {
        for s in syms.iter() {
            if !s.is_function() || s.st_value == 0 || s.st_value > vaddr {
                continue;
            }
            if vaddr >= s.st_value.saturating_add(s.st_size.max(1)) {
                continue;
            }
            let Some(name) = strs.get_at(s.st_name) else { continue };
            if best.is_none_or(|(v, _)| s.st_value > v) {
                best = Some((s.st_value, name));
            }
        }
    }
    best.map(|(v, name)| format!("{name}+{:#x}", vaddr - v))
}

#[cfg(test)]
mod named_tests {
    /// This test binary is a program; the C library, a library (though it
    /// has an entry point).
    #[test]
    fn programs_and_libraries() {
        let bytes = std::fs::read(std::env::current_exe().expect("exe")).expect("read");
        assert!(!super::is_library(&bytes));
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        if let Some(libc) = libc {
            assert!(super::is_library(&std::fs::read(libc).expect("read libc")));
        }
        assert!(!super::is_library(b"not an ELF file"));
    }

    /// This test binary's own `main`: found once, at a file offset inside
    /// the file, and the layout says where its text is.
    #[test]
    fn functions_are_found_by_name_in_this_test_binary() {
        let bytes = std::fs::read(std::env::current_exe().expect("exe")).expect("read");
        let found = super::functions_named(&bytes, &["no_such_function", "main"]);
        assert_eq!(found.len(), 1, "{found:?}");
        let (off, size, index) = found[0];
        assert_eq!(index, 1);
        assert!(off > 0 && off < bytes.len() as u64 && size > 0, "{found:?}");
        let l = super::layout(&bytes).expect("an ELF file");
        let text = l.sections.iter().find(|s| s.0 == ".text").expect(".text");
        assert!(text.3.is_some_and(|o| off >= o && off < o + text.2), "main in .text: {text:?}");
        assert!(!l.loads.is_empty() && !l.build_id.is_empty());
        assert!(super::functions_named(b"not an ELF file", &["main"]).is_empty());
    }
}
