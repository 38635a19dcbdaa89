//! Libraries loaded later in the symbol table: names and unwind rows for
//! `usymname()` and `ubacktrace()` in function probes.
//!
//! Pass 2 puts into the symbol table (`telco_abi::region::SymTable`) the
//! modules the target maps when it reads them. A library the program loads
//! afterwards with `dlopen` (a plugin, an interpreter's extension module)
//! would have no names and no CFI rows in the target, so a backtrace
//! through it fell back to frame pointers. The table has `late_cap` more
//! module slots and the region an area for their data
//! (`Artifact::symtab_late`); the dynamic loader's `r_brk` is hooked and
//! the loading thread waits (`Header::dl_wait`, as for probes in libraries
//! not loaded yet; the tracer is woken at once, `os::sys::Watch`), so no
//! backtrace through the new library runs before its symbols are there.
//! At the session's poll the tracer reads the target's maps, asks a [`SymbolSource`] (the driver's ELF
//! reader: the runtime parses no ELF symbols or CFI itself) for each new
//! library's symbols (the file opened through its mapping, never by the
//! path the target shows: `os::modfile`), writes them into the area and raises `late_used`
//! (Release), after the slot's bias and `mapped`. A library unloaded is
//! marked unmapped; loaded again, its slot takes the new bias. When slots
//! or bytes run out, the libraries left out are named in a warning.
//!
//! The tracer only writes here: it never reads back what the target could
//! have overwritten (its own count and offsets are kept in [`LateSymbols`]).

use crate::os::modfile::Image;
use crate::os::proc::Mapping;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use telco_abi::artifact::Artifact;
use telco_abi::region::{SymEntry, SymTable, SymTableModule, SYM_ENTRY_SIZE, SYM_MODULE_SIZE, UNWIND_ROW_SIZE};

/// A module's symbols as the symbol table takes them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModuleSymbols {
    /// One function's link-time address and file offset: with the maps,
    /// where the module is loaded.
    pub anchor_addr: u64,
    pub anchor_offset: u64,
    /// (link-time address, size, name), by address.
    pub functions: Vec<(u64, u64, String)>,
    /// Unwind rows (link-time address, compact rule), by address.
    pub unwind: Vec<(u64, u32)>,
}

/// Reads a module's symbols from its file (opened by the runtime as the
/// target maps it, mapped read-only: `os::modfile`); `path` is the name
/// the target shows for it, for display only. None when the file has no
/// functions or is not an ELF file.
///
/// The runtime parses no ELF itself: every symbol it looks up comes from
/// the source the driver gives the session (`session::Options::symbols`).
pub trait SymbolSource {
    fn symbols(&self, path: &Path, file: &Image) -> Option<ModuleSymbols>;
    /// The functions named `names` (a symbol's `@VERSION` left out): file
    /// offset, size and index in `names` of each, from the symbol table
    /// and the dynamic symbols.
    fn functions_named(&self, path: &Path, file: &Image, names: &[&str]) -> Vec<(u64, u64, usize)>;
    /// The function holding the byte at `file_offset`, as `name+0xOFF`.
    fn function_at(&self, path: &Path, file: &Image, file_offset: u64) -> Option<String>;
    /// The load segments, sections and build id of the ELF image `bytes`
    /// (a file, or a module read from a process's memory), or None if it
    /// is not one.
    fn layout(&self, bytes: &[u8]) -> Option<ElfLayout>;
}

/// What the profiler's unwinder needs of an ELF image
/// ([`SymbolSource::layout`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElfLayout {
    /// (p_vaddr, p_offset, p_filesz) of each `PT_LOAD`.
    pub loads: Vec<(u64, u64, u64)>,
    /// (name, address, size, file offset; None: no bytes in the file).
    pub sections: Vec<(String, u64, u64, Option<u64>)>,
    /// The GNU build id (empty without one).
    pub build_id: Vec<u8>,
    /// CFI for a module that has none an unwinder can read: a Go binary's
    /// frames, as a `.debug_frame` section made from its `.gopclntab`.
    pub debug_frame: Option<Vec<u8>>,
}

/// The driver's source as the runtime's tests have it: the compiler's
/// ELF reader (a dev-dependency), as `src/query.rs` uses it.
#[cfg(test)]
pub(crate) struct TestSymbols;

#[cfg(test)]
impl SymbolSource for TestSymbols {
    fn symbols(&self, _: &Path, _: &Image) -> Option<ModuleSymbols> {
        None
    }

    fn functions_named(&self, _: &Path, file: &Image, names: &[&str]) -> Vec<(u64, u64, usize)> {
        telco_compiler::image::functions_named(&file[..], names)
    }

    fn function_at(&self, _: &Path, file: &Image, off: u64) -> Option<String> {
        telco_compiler::image::function_at(&file[..], off)
    }

    fn layout(&self, bytes: &[u8]) -> Option<ElfLayout> {
        let l = telco_compiler::image::layout(bytes)?;
        let debug_frame = telco_compiler::elf::go_debug_frame(bytes);
        Some(ElfLayout { loads: l.loads, sections: l.sections, build_id: l.build_id, debug_frame })
    }
}

struct Slot {
    /// The file's device and inode, as maps give them.
    file: (u64, u64),
    anchor_addr: u64,
    anchor_offset: u64,
    /// The bias last written (None: written unmapped).
    bias: Option<u64>,
}

/// What the tracer has written into the late slots and area.
#[derive(Default)]
pub struct LateSymbols {
    source: Option<std::rc::Rc<dyn SymbolSource>>,
    slots: Vec<Slot>,
    /// Bytes of the area used.
    used: u64,
    /// Libraries (device, inode) looked at and not added: no symbols, or
    /// no room.
    passed: HashSet<(u64, u64)>,
    /// Libraries left out for want of room, for the warning.
    pub no_room: Vec<PathBuf>,
}

/// The executable, file-backed modules of `maps` (each file once, in
/// address order).
fn file_modules(maps: &[Mapping]) -> Vec<&Mapping> {
    let mut seen = HashSet::new();
    maps.iter().filter(|m| m.executable && m.is_file() && seen.insert((m.dev, m.inode))).collect()
}

/// The run-time address of the byte at `file_offset` of the file
/// (device, inode) `file`.
fn mapped_at(maps: &[Mapping], file: (u64, u64), file_offset: u64) -> Option<u64> {
    maps.iter()
        .filter(|m| (m.dev, m.inode) == file)
        .find(|m| file_offset >= m.offset && file_offset < m.offset + (m.end - m.start))
        .map(|m| m.start + (file_offset - m.offset))
}

impl LateSymbols {
    /// Whether the artifact has late slots (the session then hooks the
    /// loader's `r_brk` to hear of new libraries).
    pub fn wanted(a: &Artifact) -> bool {
        a.symtab_off != 0 && a.symtab_late.1 > 0 && late_cap(a) > 0
    }

    pub fn set_source(&mut self, source: std::rc::Rc<dyn SymbolSource>) {
        self.source = Some(source);
    }

    /// Whether new libraries are still added (a source was set, and the
    /// program has not exec'd since).
    pub fn active(&self) -> bool {
        self.source.is_some()
    }

    /// The program exec'd: its libraries are not the table's any more.
    pub fn stop(&mut self) {
        self.source = None;
    }

    /// Bring the late slots up to date with the target's maps: new
    /// libraries added, unloaded ones marked unmapped, reloaded ones moved.
    ///
    /// # Safety
    /// `base` is the live region of `a` (its full `region_size` mapped).
    pub unsafe fn publish(&mut self, base: *mut u8, a: &Artifact, maps: &[Mapping]) {
        let Some(source) = self.source.as_deref() else { return };
        if !Self::wanted(a) {
            return;
        }
        let cap = late_cap(a);
        let (area, area_size) = a.symtab_late;
        let fixed = a.symtab_modules.len();
        let tab = base.add(a.symtab_off as usize);
        let slot_at = |i: usize| tab.add(core::mem::size_of::<SymTable>() + (fixed + i) * SYM_MODULE_SIZE);
        // Slots already written: where their module is now.
        for (i, s) in self.slots.iter_mut().enumerate() {
            let bias = mapped_at(maps, s.file, s.anchor_offset).map(|at| at.wrapping_sub(s.anchor_addr));
            if bias != s.bias {
                set_mapped(slot_at(i), bias);
                s.bias = bias;
            }
        }
        for m in file_modules(maps) {
            let (path, file) = (m.path.as_path(), (m.dev, m.inode));
            if self.passed.contains(&file) || self.slots.iter().any(|s| s.file == file) {
                continue;
            }
            // Looked at once: pass 2's module (by any name), or added now,
            // or without symbols.
            self.passed.insert(file);
            if a.symtab_modules.iter().any(|sm| crate::os::proc::same_file(&sm.path, path)) {
                continue;
            }
            let Some(image) = crate::os::modfile::mapped(m) else { continue };
            let Some(syms) = source.symbols(path, &image) else { continue };
            let Some(bias) = mapped_at(maps, file, syms.anchor_offset).map(|at| at.wrapping_sub(syms.anchor_addr))
            else {
                continue;
            };
            let names: u64 =
                syms.functions.iter().map(|f| f.2.len() as u64 + 1).sum::<u64>() + path.as_os_str().len() as u64 + 1;
            let need = (syms.functions.len() * SYM_ENTRY_SIZE + syms.unwind.len() * UNWIND_ROW_SIZE) as u64 + names;
            let start = self.used.next_multiple_of(8);
            if self.slots.len() >= cap || start + need > area_size {
                self.no_room.push(path.to_path_buf());
                continue;
            }
            self.used = start + need;
            // Table-relative offsets (the table and the area are both in the
            // region, the area after the table).
            let rel = |off: u64| (area + off - a.symtab_off) as u32;
            let data = base.add(area as usize);
            let mut at = start;
            let entries = at;
            let mut name_at =
                start + (syms.functions.len() * SYM_ENTRY_SIZE + syms.unwind.len() * UNWIND_ROW_SIZE) as u64;
            let mut put_name = |s: &str| {
                let o = name_at;
                std::ptr::copy_nonoverlapping(s.as_ptr(), data.add(o as usize), s.len());
                *data.add(o as usize + s.len()) = 0;
                name_at += s.len() as u64 + 1;
                rel(o)
            };
            for (addr, size, name) in &syms.functions {
                let e = SymEntry { addr: *addr, size: (*size).min(u64::from(u32::MAX)) as u32, name: put_name(name) };
                std::ptr::write_unaligned(data.add(at as usize).cast::<SymEntry>(), e);
                at += SYM_ENTRY_SIZE as u64;
            }
            let rows = at;
            for &(addr, rule) in &syms.unwind {
                let r = telco_abi::region::UnwindRow { addr, rule, _pad: 0 };
                std::ptr::write_unaligned(data.add(at as usize).cast::<telco_abi::region::UnwindRow>(), r);
                at += UNWIND_ROW_SIZE as u64;
            }
            let path_name = put_name(&path.to_string_lossy());
            let md = slot_at(self.slots.len());
            let m = SymTableModule {
                bias: 0,
                entries: rel(entries),
                count: syms.functions.len() as u32,
                path: path_name,
                mapped: 0,
                unwind: rel(rows),
                unwind_count: syms.unwind.len() as u32,
            };
            std::ptr::write_unaligned(md.cast::<SymTableModule>(), m);
            set_mapped(md, Some(bias));
            self.slots.push(Slot {
                file,
                anchor_addr: syms.anchor_addr,
                anchor_offset: syms.anchor_offset,
                bias: Some(bias),
            });
            // Release: a handler that sees the count sees the slot and its
            // data.
            AtomicU32::from_ptr(tab.add(core::mem::offset_of!(SymTable, late_used)).cast())
                .store(self.slots.len() as u32, Ordering::Release);
        }
    }
}

/// The artifact's late slots (its word: the region's copy is the target's).
fn late_cap(a: &Artifact) -> usize {
    a.init_u32(a.symtab_off + core::mem::offset_of!(SymTable, late_cap) as u64).unwrap_or(0) as usize
}

/// A slot's bias, then `mapped` (Release), or unmapped.
///
/// # Safety
/// `md` is a module slot of the live region.
unsafe fn set_mapped(md: *mut u8, bias: Option<u64>) {
    let mapped = AtomicU32::from_ptr(md.add(core::mem::offset_of!(SymTableModule, mapped)).cast());
    mapped.store(0, Ordering::Release);
    if let Some(b) = bias {
        AtomicU64::from_ptr(md.add(core::mem::offset_of!(SymTableModule, bias)).cast()).store(b, Ordering::Relaxed);
        // Release: a handler that sees `mapped` sees the bias.
        mapped.store(1, Ordering::Release);
    }
}
