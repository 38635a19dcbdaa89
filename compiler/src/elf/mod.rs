//! ELF files for pass 2: the function symbols of executables and shared
//! libraries, and where the dynamic loader would find those libraries.
//!
//! **Invariant:** this module reads files only; it never looks at a live
//! process (INTERNALS.md, invariant 4). Every ELF file is user input: a malformed
//! one is an [`ElfError`], never a panic.
//!
//! **Boundary:** pass 2 calls [`Module::load`], [`load_closure`] and
//! [`find_module`] to turn `process("NAME").function("GLOB")` into concrete
//! modules and link-time addresses; what a probe point *means* is decided
//! there, not here.
//!
//! Layout: `load` builds a [`Module`] from the bytes of a file (goblin parses,
//! under `catch_unwind`; we group symbols at one address into one function,
//! probed once, from `.symtab` and `.dynsym`, so stripped files work; a
//! script given as a module is an error naming its interpreter),
//! `demangle` turns C++ and Rust symbol names into readable ones (lazily:
//! only names whose mangled form can match a pattern), `search` mirrors the
//! dynamic loader's library search, `ldcache` reads `/etc/ld.so.cache`.
//! `.cold` parts of functions are not functions (they are jumped to, not
//! called: [`SkipReason::ColdPart`]).
//!
//! Also here: [`sdt`] reads SDT markers and their argument specs (the
//! operand syntax is the architecture's: `arch::native::sdt`); [`unwind`]
//! reads `.eh_frame` (through `image`, which holds the file's bytes:
//! [`Image`]); DWARF line tables for `.statement("func@file.c:LINE")` are
//! `dwarf::lines`'s. In a stripped file every FDE that starts a
//! fresh frame and that no symbol covers becomes a function
//! `sub_<file offset>` (`load::add_unnamed_functions`), globbed, listed,
//! probed and named in backtraces like any other. The architecture's
//! decoding answers three questions about a module, each read lazily from
//! one cached copy of its bytes: [`Module::no_return_address`] (may a
//! return probe take over this function's return address?
//! `arch::native::entry`), [`Module::plan_site`] (where may a jump go
//! inside a function? `arch::native::sites`) and [`Module::short_hop`] (a
//! function too short for the jump: `arch::native::hop`).

mod demangle;

pub mod gopclntab;
mod ldcache;
mod load;
pub mod sdt;
mod search;

use crate::arch::native::{entry, sites};
use crate::dwarf::lines;
pub mod unwind;

use std::path::{Path, PathBuf};

pub use crate::arch::Machine;
pub use crate::image::Image;
pub use search::{find_module, find_on_path, load_closure, resolve_library};

/// A loaded ELF module (executable or shared library) and its function symbols.
///
/// Built only by [`Module::load`] (and [`load_closure`]): a few private fields
/// remember what the library search needs (ELF class, byte order, `DF_1_NODEFLIB`).
#[derive(Debug, Clone)]
pub struct Module {
    /// Canonical path of the file read.
    pub path: PathBuf,
    /// `DT_SONAME`.
    pub soname: Option<String>,
    /// `ET_EXEC` or `ET_DYN` (a PIE or a shared library).
    pub kind: ModuleKind,
    pub machine: Machine,
    /// `DT_NEEDED`, in order.
    pub needed: Vec<String>,
    /// `DT_RUNPATH` entries as written (split at `:`; `$ORIGIN` not yet expanded).
    pub runpath: Vec<String>,
    /// `DT_RPATH` entries as written.
    pub rpath: Vec<String>,
    /// One per distinct address, sorted by address.
    pub functions: Vec<Function>,
    /// Symbols that are not probeable functions, with the reason, so that a
    /// probe point matching one can say why it found nothing there.
    pub skipped: Vec<Skipped>,
    /// True if there was no `.symtab` (only `.dynsym` was used).
    pub stripped: bool,
    /// `e_entry`: the link address where the kernel starts the program (0
    /// for most libraries).
    pub entry: u64,
    /// The module holds V8's embedded builtins (`v8_Default_embedded_blob_code_`:
    /// node, Chromium, Electron): its `Builtins_*` functions are V8 code.
    pub v8_builtins: bool,
    /// SDT markers (`.note.stapsdt`).
    pub markers: Vec<sdt::Marker>,
    /// `PT_LOAD` segments: link address, bytes in the file, file offset.
    pub file_offsets: Vec<(u64, u64, u64)>,
    /// The file's bytes, read again on first need by the patch-site,
    /// line and hop analyses (once for all of them); given from the start
    /// by [`Module::from_image`].
    bytes: std::sync::OnceLock<Result<Image, String>>,
    /// Where patches inside functions are safe (`sites`), computed on
    /// first need.
    sites: std::sync::OnceLock<Result<sites::Sites, String>>,
    /// Where each function saves its return address (`return_address_saved`).
    ra_saved: std::sync::OnceLock<std::collections::HashMap<u64, i64>>,
    /// DWARF line rows, read on first need.
    lines: std::sync::OnceLock<Result<Vec<lines::Row>, String>>,
    /// DWARF variables and types (`crate::dwarf`), read on first need:
    /// None when the module has no debugging information.
    debug: std::sync::OnceLock<Result<Option<std::sync::Arc<crate::dwarf::Debug>>, String>>,
    /// Hops planned for short functions (by address), and the slots
    /// taken in each host.
    hops: std::sync::Arc<std::sync::Mutex<crate::arch::Hops>>,
    /// The file, opened again on first need by `no_return_address`.
    reopened: std::sync::OnceLock<Option<std::sync::Arc<std::fs::File>>>,
    class64: bool,
    little_endian: bool,
    nodeflib: bool,
    /// The entries of the Go functions its `.gopclntab` lists (sorted):
    /// (`Module::go_function`, `Module::go_entry`).
    go_entries: Vec<u64>,
    /// The Go version it was built with (`.go.buildinfo`), when it says.
    go_version: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleKind {
    /// `ET_EXEC`: addresses are absolute.
    Executable,
    /// `ET_DYN`: a PIE or a shared library; addresses are relative to the load base.
    PositionIndependent,
}

/// A function: every symbol name at one address (aliases at one address are probed once).
///
/// Built only by [`Module::load`]: a private field keeps the demangled names
/// without their parameter lists, for matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Raw (mangled) symbol names at this address, the best first: global over
    /// weak over local, unversioned over `name@VERSION`, fewer leading underscores first.
    pub names: Vec<String>,
    /// Demangled names, computed on first need (see [`Function::demangled`]):
    /// demangling is most of the cost of loading a C++ or Rust module.
    lazy: std::sync::OnceLock<Demangled>,
    /// Link-time virtual address (`st_value`), as `nm` shows it: relative to the
    /// load base for PIEs and shared libraries.
    pub addr: u64,
    /// `st_size` (always > 0; the largest if aliases disagree).
    pub size: u64,
    /// File offset of the function's first byte (through the containing `PT_LOAD`).
    pub file_offset: u64,
    /// `STT_GNU_IFUNC`: `addr` is the resolver, not the implementation.
    pub ifunc: bool,
    /// Some name is `STB_GLOBAL`, `STB_WEAK` or `STB_GNU_UNIQUE`.
    pub global: bool,
}

/// The demangled forms of a function's names, parallel to `names`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Demangled {
    /// C++ (`cpp_demangle`, as `c++filt` prints it) or Rust (`rustc-demangle`,
    /// without the hash); `None` for a C name.
    full: Vec<Option<String>>,
    /// The C++ demangling without parameter list and return type
    /// (`ns::Widget::draw`), only where it differs from `full`.
    short: Vec<Option<String>>,
}

impl Function {
    pub(crate) fn new(
        names: Vec<String>,
        addr: u64,
        size: u64,
        file_offset: u64,
        ifunc: bool,
        global: bool,
    ) -> Function {
        Function { names, lazy: std::sync::OnceLock::new(), addr, size, file_offset, ifunc, global }
    }

    fn demangled_forms(&self) -> &Demangled {
        self.lazy.get_or_init(|| {
            let mut d = Demangled { full: vec![None; self.names.len()], short: vec![None; self.names.len()] };
            for (i, n) in self.names.iter().enumerate() {
                if demangle::looks_mangled(n) {
                    let (full, short) = demangle::demangle_safely(n);
                    d.full[i] = full;
                    d.short[i] = short;
                }
            }
            d
        })
    }

    /// Parallel to `names`: the C++ or Rust demangling, `None` for a C name.
    pub fn demangled(&self) -> &[Option<String>] {
        &self.demangled_forms().full
    }

    /// Whether any name is mangled at all (without demangling it).
    fn any_mangled(&self) -> bool {
        self.names.iter().any(|n| demangle::looks_mangled(n))
    }

    /// The best name: demangled if there is one, else the raw symbol name.
    pub fn display_name(&self) -> &str {
        match (self.demangled().first(), self.names.first()) {
            (Some(Some(d)), _) => d,
            (_, Some(n)) => n,
            _ => "",
        }
    }

    /// Where it is, as the architecture's analyses see it.
    pub(crate) fn range(&self) -> crate::arch::FunctionRange {
        crate::arch::FunctionRange { addr: self.addr, size: self.size, ifunc: self.ifunc }
    }

    /// True if `addr` lies inside this function.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.addr && addr - self.addr < self.size
    }
}

/// A symbol whose name may be matched but that cannot be probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub name: String,
    pub reason: SkipReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// A function symbol with `st_size == 0` (an assembler label, a hand-written stub).
    ZeroSize,
    /// Data, TLS, an untyped label, or a function symbol with no bytes in the file
    /// (absolute, or in a section that occupies no file space).
    NotAFunction,
    /// Imported: defined in another module.
    Undefined,
    /// A `.cold` part split off a function by the compiler: entered by a jump
    /// from its function, never called, so it has no entry or return.
    ColdPart,
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SkipReason::ZeroSize => "a function symbol of size zero",
            SkipReason::NotAFunction => "not a function",
            SkipReason::Undefined => "undefined here (imported from another module)",
            SkipReason::ColdPart => "a cold part of a function (entered by a jump, not a call)",
        })
    }
}

/// Why an ELF file could not be used. Every message names the file and what was being done.
#[derive(thiserror::Error, Debug)]
pub enum ElfError {
    #[error("cannot read ELF file {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} is not an ELF file (no \\x7fELF magic at its start)", path.display())]
    NotElf { path: PathBuf },
    #[error("{} is a script run by `{interpreter}`, not an ELF file: probe the program it runs{}", path.display(), shim_hint(interpreter))]
    Script { path: PathBuf, interpreter: String },
    #[error("{} is a malformed ELF file: {what}", path.display())]
    Malformed { path: PathBuf, what: String },
    #[error("{} cannot be probed: {what}", path.display())]
    Unsupported { path: PathBuf, what: String },
    #[error("cannot find library {name} needed by {}: not found by the dynamic loader's search (RPATH, LD_LIBRARY_PATH, RUNPATH, /etc/ld.so.cache, default directories)", needed_by.display())]
    LibraryNotFound { name: String, needed_by: PathBuf },
    #[error("cannot find module \"{name}\": {what}")]
    ModuleNotFound { name: String, what: String },
}

/// What to probe instead of a script: its interpreter, or, for a shim
/// (pyenv, rbenv, asdf, nodenv: a shell script choosing a version), the
/// program it would choose.
fn shim_hint(interpreter: &str) -> String {
    let shell = ["sh", "bash", "dash", "zsh", "ksh"].iter().any(|s| interpreter.rsplit('/').next() == Some(s));
    if shell {
        " (a shell script such as a pyenv or rbenv shim chooses the real program: probe that one, e.g. the \
         path `pyenv which python3` or `readlink -f` prints)"
            .to_string()
    } else {
        format!(" (for the interpreter's own functions, probe process(\"{interpreter}\"))")
    }
}

/// A Go binary without `.eh_frame` (one without cgo): its functions'
/// frames as a `.debug_frame` section made from its `.gopclntab`
/// (`gopclntab::debug_frame`), for the profiler's unwinder; None for any
/// other ELF image.
pub fn go_debug_frame(bytes: &[u8]) -> Option<Vec<u8>> {
    let elf = goblin::elf::Elf::parse(bytes).ok()?;
    if elf.section_headers.iter().any(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(".eh_frame")) {
        return None;
    }
    let (tab, text) = load::go_table(&elf, bytes)?;
    let frames = gopclntab::frames(tab, text);
    let aarch64 = elf.header.e_machine == goblin::elf::header::EM_AARCH64;
    (!frames.is_empty()).then(|| gopclntab::debug_frame(&frames, aarch64))
}

impl Module {
    /// Whether the function at link-time address `addr` is a Go function
    /// (listed in the module's `.gopclntab`).
    pub fn go_function(&self, addr: u64) -> bool {
        self.go_entries.binary_search(&addr).is_ok()
    }

    /// How a probe at the entry of Go function `f` is placed (its
    /// trampoline runs the function's stack-bound check first, then its
    /// handlers on the thread's scheduler stack: runtime/src/arch's
    /// trampolines); Err: why it cannot be, safely.
    /// With `ret`, its returns too (`GoSite::rets`: each epilogue takes
    /// a jump to the return probe's trampoline).
    pub fn go_entry(&self, f: &Function, ret: bool) -> Result<telco_abi::artifact::GoSite, String> {
        let version =
            self.go_version.as_deref().ok_or("its Go version is unknown (no .go.buildinfo of Go 1.18 or later)")?;
        let layout = gopclntab::layout(version)?;
        // A vfork'd child runs these on its parent's memory and thread
        // structures (its handler would take its parent's slot).
        let name = f.display_name();
        if name.starts_with("syscall.forkAndExecInChild") || name == "syscall.rawVforkSyscall" {
            return Err("it runs in a vfork'd child, which shares the parent's memory and Go thread".into());
        }
        let bytes = self.bytes()?;
        let at = usize::try_from(f.file_offset).map_err(|e| e.to_string())?;
        let code = bytes.get(at..(at + 32).min(at + f.size as usize)).unwrap_or_default();
        let check = crate::arch::native::entry::go_stack_check(code)?;
        // Nothing arrives inside the check's bytes (morestack's way back
        // is to its first).
        let sites = self.sites()?;
        let patch = sites.plan_len(&bytes, f.addr, (f.addr, f.addr + f.size), u64::from(check), false)?;
        if patch.displaced != u32::from(check) {
            return Err(format!("its stack check is {check} bytes but the jump would displace {}", patch.displaced));
        }
        let mut rets = Vec::new();
        if ret {
            let all = bytes.get(at..at + f.size as usize).ok_or("its code is not in the file")?;
            for (site, len) in crate::arch::native::entry::go_epilogues(all, f.addr)? {
                // Nothing arrives inside an epilogue but at its start.
                let p = sites.plan_len(&bytes, site, (f.addr, f.addr + f.size), u64::from(len), false)?;
                if p.displaced != u32::from(len) {
                    return Err(format!(
                        "its epilogue at {site:#x} is {len} bytes but the jump would displace {}",
                        p.displaced
                    ));
                }
                rets.push(telco_abi::artifact::GoReturn { offset: (site - f.addr) as u32, len });
            }
        }
        Ok(telco_abi::artifact::GoSite { check, layout, rets })
    }

    /// Read and parse the ELF file at `path`.
    pub fn load(path: &Path) -> Result<Module, ElfError> {
        load::load(path)
    }

    /// An ELF image already in memory (the vDSO, read from a process),
    /// named `name`: for naming addresses (nothing re-reads it from a
    /// file, so no patch-site analysis or DWARF).
    pub fn from_bytes(name: &Path, bytes: &[u8]) -> Result<Module, ElfError> {
        load::parse(name, bytes)
    }

    /// The ELF file whose bytes are `image`, named `name` (the path a
    /// running process shows for it: never opened, every later read is of
    /// `image`).
    pub fn from_image(name: &Path, image: Image) -> Result<Module, ElfError> {
        let mut m = load::parse(name, &image)?;
        m.bytes = std::sync::OnceLock::from(Ok(image));
        Ok(m)
    }

    /// The bytes given by [`Module::from_image`], if these were.
    fn given(&self) -> Option<&Image> {
        self.bytes.get().and_then(|b| b.as_ref().ok()).filter(|b| matches!(b, Image::Given(_)))
    }

    /// The functions a separate debug file names (its code has no bytes
    /// there): for naming addresses, as profiles do; nothing to patch
    /// (every file offset is 0).
    pub fn load_names(path: &Path) -> Result<Module, ElfError> {
        load::load_names(path)
    }

    /// Why `f` cannot take a return probe, if it cannot: it is the entry
    /// point, or its first instructions use the return address as data
    /// ([`entry::return_address_use`]). Reads the function's first bytes
    /// from the file; a file that cannot be read again says nothing here.
    pub fn no_return_address(&self, f: &Function) -> Option<entry::NoReturnAddress> {
        use std::os::unix::fs::FileExt;
        if self.v8_builtins && f.names.iter().any(|n| n.starts_with("Builtins_")) {
            return Some(entry::NoReturnAddress::V8Builtin);
        }
        let program = self.kind == ModuleKind::Executable || self.needed_by_kernel();
        if program && self.entry != 0 && f.addr == self.entry {
            return Some(entry::NoReturnAddress::ElfEntry);
        }
        if self.machine != crate::arch::native::MACHINE {
            return None;
        }
        // A tail jump at the start (`_setjmp` to `__sigsetjmp`, or to a
        // point inside it as on aarch64): the code it reaches, a few hops
        // at most, with the same return address.
        let (mut addr, mut len, mut offset) = (f.addr, f.size, f.file_offset);
        for _ in 0..4 {
            let mut code = vec![0u8; len.min(128) as usize];
            let n = match self.given() {
                Some(b) => {
                    let from = b.get(usize::try_from(offset).ok()?..).unwrap_or_default();
                    let n = from.len().min(code.len());
                    code[..n].copy_from_slice(&from[..n]);
                    n
                }
                None => {
                    let file = self
                        .reopened
                        .get_or_init(|| crate::image::open_regular(&self.path).ok().map(std::sync::Arc::new));
                    file.as_ref()?.read_at(&mut code, offset).ok()?
                }
            };
            code.truncate(n);
            if let Some(why) = entry::return_address_use(&code, addr) {
                return Some(why);
            }
            let to = entry::tail_jump(&code, addr)?;
            let g = self.function_at(to).filter(|g| to >= g.addr && to < g.addr + g.size.max(1))?;
            (addr, len, offset) = (to, g.addr + g.size.max(1) - to, g.file_offset + (to - g.addr));
        }
        None
    }

    /// Where a 5-byte jump may go at `addr` (a statement or a marker):
    /// the patch, and the name of the function that holds it (its symbol,
    /// or `sub_<offset>` from its FDE in a stripped file); or why not.
    pub fn plan_site(&self, addr: u64) -> Result<(sites::Patch, Option<String>), String> {
        let (bytes, sites) = (self.bytes()?, self.sites()?);
        if self.machine != crate::arch::native::MACHINE {
            return Err(format!("statement and marker probes need a {:?} module", crate::arch::native::MACHINE));
        }
        let symbol = self.function_at(addr).filter(|f| f.size > 0);
        if let Some(f) = symbol.filter(|f| self.go_function(f.addr) && addr < f.addr + f.size) {
            return Err(format!(
                "{addr:#x} is inside the Go function `{}`, and only Go functions' entries are probed (a probe \
                 inside one would run on the goroutine's stack, which Go grows and moves)",
                f.display_name()
            ));
        }
        let Some(range) = sites.function_range(addr, symbol.map(|f| (f.addr, f.size))) else {
            return Err(format!("{addr:#x} is inside no function (no symbol or unwind entry covers it)"));
        };
        let name = match symbol {
            Some(f) => Some(f.display_name().to_string()),
            None => Some(format!("sub_{:x}", self.file_offset_of(range.0).unwrap_or(range.0))),
        };
        // No jump fits: a trap, where one does.
        let patch =
            sites.plan(&bytes, addr, range).or_else(|why| sites.plan_trap(&bytes, addr, range).map_err(|_| why))?;
        Ok((patch, name))
    }

    /// Whether a one-byte trap fits at the entry of `f` (after its landing
    /// pad), where pass 2 found no jump nor hop: nothing arrives inside the
    /// first instruction. Its Err says why not.
    pub fn entry_trap(&self, f: &Function) -> Result<(), String> {
        let (bytes, sites) = (self.bytes()?, self.sites()?);
        sites.plan_trap(&bytes, f.addr, (f.addr, f.addr + f.size.max(1))).map(|_| ())
    }

    /// The module's DWARF (its own or a separate debug file's), read on
    /// first need; None when there is none.
    pub fn debug(&self) -> Result<Option<std::sync::Arc<crate::dwarf::Debug>>, String> {
        self.debug
            .get_or_init(|| {
                let bytes = self.bytes()?;
                self.with_elf(|elf, _| crate::dwarf::Debug::load(&self.path, elf, &bytes))
                    .map(|d| d.map(std::sync::Arc::new))
            })
            .clone()
    }

    /// The names of the functions a stripped module's own symbols do not
    /// name (`sub_…`, found from `.eh_frame`), from its separate debug file
    /// when one is installed (found by build id): (address, name).
    pub fn debug_names(&self) -> Vec<(u64, String)> {
        if !self.functions.iter().any(|f| f.names.first().is_some_and(|n| n.starts_with("sub_"))) {
            return Vec::new();
        }
        let Ok(Some(id)) = self.with_elf(|elf, bytes| Ok(crate::dwarf::file_build_id(elf, bytes))) else {
            return Vec::new();
        };
        let Some(debug) = crate::dwarf::debug_file_by_build_id(&id).and_then(|p| Module::load_names(&p).ok()) else {
            return Vec::new();
        };
        self.functions
            .iter()
            .filter(|f| f.names.first().is_some_and(|n| n.starts_with("sub_")))
            .filter_map(|f| {
                // The debug file's function holding it (an FDE may start
                // inside a function: clone3's child part).
                let d = debug.function_at(f.addr)?;
                Some((f.addr, d.display_name().to_string()))
            })
            .collect()
    }

    /// `ubacktrace()`'s unwind rows of this module (`unwind::unwind_rows`).
    pub fn unwind_rows(&self) -> Vec<(u64, u32)> {
        self.with_elf(|elf, bytes| Ok(unwind::unwind_rows(elf, bytes))).unwrap_or_default()
    }

    /// The canonical frame address at `addr` (from `.eh_frame`): a DWARF
    /// register and an offset.
    pub fn cfa_at(&self, addr: u64) -> Option<(u16, i64)> {
        self.with_elf(|elf, bytes| Ok(unwind::cfa_at(elf, bytes, addr))).ok().flatten()
    }

    /// The link-time address of the symbol `name` (a global or a file's
    /// static, data or code, `.symtab` then `.dynsym`), for the symbolic
    /// operands of SDT marker arguments (`4@counter(%rip)`).
    pub fn symbol_address(&self, name: &str) -> Option<u64> {
        self.with_elf(|elf, _| {
            let find = |syms: &goblin::elf::Symtab<'_>, strs: &goblin::strtab::Strtab<'_>| {
                syms.iter()
                    .find(|s| {
                        s.st_shndx != 0
                            && s.st_type() != goblin::elf::sym::STT_FILE
                            && strs.get_at(s.st_name) == Some(name)
                    })
                    .map(|s| s.st_value)
            };
            Ok(find(&elf.syms, &elf.strtab).or_else(|| find(&elf.dynsyms, &elf.dynstrtab)))
        })
        .ok()
        .flatten()
    }

    /// The file's bytes (read once, or given).
    pub(crate) fn bytes(&self) -> Result<Image, String> {
        self.bytes
            .get_or_init(|| load::read(&self.path).map(|b| Image::Read(b.into())).map_err(|e| e.to_string()))
            .clone()
    }

    /// The ELF file, parsed again from [`Module::bytes`], for `f`.
    fn with_elf<T>(&self, f: impl FnOnce(&goblin::elf::Elf<'_>, &[u8]) -> Result<T, String>) -> Result<T, String> {
        let bytes = self.bytes()?;
        let elf = goblin::elf::Elf::parse(&bytes).map_err(|e| format!("{}: {e}", self.path.display()))?;
        f(&elf, &bytes)
    }

    /// The module's patch-site analysis (computed once).
    pub(crate) fn sites(&self) -> Result<&sites::Sites, String> {
        self.sites.get_or_init(|| self.with_elf(sites::Sites::build)).as_ref().map_err(Clone::clone)
    }

    /// The DWARF line rows of source file `file`; Err when the module has
    /// no line tables or none mentions the file.
    fn rows_of_file(&self, file: &str) -> Result<Vec<&lines::Row>, String> {
        let rows = self
            .lines
            .get_or_init(|| match self.debug()? {
                Some(d) => lines::rows(&d),
                None => Ok(Vec::new()),
            })
            .as_ref()
            .map_err(Clone::clone)?;
        if rows.is_empty() {
            return Err(format!("{} has no DWARF line tables (build it with -g)", self.path.display()));
        }
        let in_file: Vec<&lines::Row> = rows.iter().filter(|r| lines::file_matches(&r.file, file)).collect();
        if in_file.is_empty() {
            return Err(format!("no line table of {} mentions a file `{file}`", self.path.display()));
        }
        Ok(in_file)
    }

    /// The addresses of source line `line` of `file` (`func@file:LINE`),
    /// one per function whose name matches the glob `func`: the first
    /// instruction of the line in that function (SystemTap's choice), with
    /// the function's name. `nearest`: a line without code moves to the
    /// next line that has some.
    pub fn line_addresses(
        &self,
        func: &str,
        file: &str,
        line: u64,
        nearest: bool,
    ) -> Result<(u64, Vec<(u64, String)>), String> {
        let in_file = self.rows_of_file(file)?;
        let mut with_code: Vec<u64> = in_file.iter().map(|r| r.line).collect();
        with_code.sort_unstable();
        with_code.dedup();
        let line = if with_code.contains(&line) {
            line
        } else if let Some(&next) = with_code.iter().find(|&&l| l > line).filter(|_| nearest) {
            next
        } else {
            let before = with_code.iter().rev().find(|&&l| l < line);
            let after = with_code.iter().find(|&&l| l > line);
            let near: Vec<String> = before.into_iter().chain(after).map(|l| l.to_string()).collect();
            return Err(format!(
                "line {line} of `{file}` has no code{} (add `.nearest` to take the next line that has)",
                if near.is_empty() { String::new() } else { format!("; lines near it that have: {}", near.join(", ")) }
            ));
        };
        let found = self.line_sites(func, &in_file, |l| l == line).into_iter().map(|(_, a, n)| (a, n)).collect();
        Ok((line, found))
    }

    /// The lines of `file` from `lo` to `hi` that have code
    /// (`func@file:LO-HI`, `func@file:*`), each at its first instruction
    /// in each function whose name matches the glob `func`: (line,
    /// address, function), by line then address.
    pub fn line_range_addresses(
        &self,
        func: &str,
        file: &str,
        lo: u64,
        hi: u64,
    ) -> Result<Vec<(u64, u64, String)>, String> {
        let in_file = self.rows_of_file(file)?;
        Ok(self.line_sites(func, &in_file, |l| l >= lo && l <= hi))
    }

    /// Of `rows`, the lines `want` takes, each at its first instruction in
    /// each function whose name matches `func`: (line, address, function).
    fn line_sites(&self, func: &str, rows: &[&lines::Row], want: impl Fn(u64) -> bool) -> Vec<(u64, u64, String)> {
        let fdes = self.sites.get().and_then(|s| s.as_ref().ok()).map(|s| s.fdes.clone()).unwrap_or_default();
        let mut by_site: std::collections::BTreeMap<(u64, u64), (u64, String)> = Default::default();
        for r in rows.iter().filter(|r| want(r.line)) {
            let (start, name) = match self.function_at(r.addr).filter(|f| f.size > 0 && r.addr < f.addr + f.size) {
                Some(f) => (f.addr, f.display_name().to_string()),
                None => match fdes.iter().find(|&&(s, e)| r.addr >= s && r.addr < e) {
                    Some(&(s, _)) => (s, format!("sub_{:x}", self.file_offset_of(s).unwrap_or(s))),
                    None => continue,
                },
            };
            if !crate::glob::glob_match(func, &name) {
                continue;
            }
            let e = by_site.entry((r.line, start)).or_insert((r.addr, name));
            e.0 = e.0.min(r.addr);
        }
        let mut out: Vec<(u64, u64, String)> = by_site.into_iter().map(|((l, _), (a, n))| (l, a, n)).collect();
        out.sort_by_key(|x| (x.0, x.1));
        out
    }

    /// For a function shorter than the 5-byte jump (after its `endbr64`)
    /// with nothing after it the jump could cover: a 2-byte hop through a
    /// nearby function (`telco_abi::artifact::Hop`), or None (`arch::native::hop`).
    /// Err when a 5-byte jump there would cover a place control arrives
    /// at and no hop could be planned: the function cannot be hooked.
    pub fn short_hop(&self, f: &Function) -> Result<Option<telco_abi::artifact::Hop>, String> {
        crate::arch::native::hop::short_hop(self, f.range())
    }

    /// Where the function keeps its return address at its call sites, from
    /// its entry's stack pointer (`.eh_frame`, read once per module:
    /// `unwind::return_addresses_saved`). Only where a function is entered
    /// with its return address in a register (aarch64's x30): x86_64's is
    /// where the call pushed it, the return probe's own slot.
    pub fn return_address_saved(&self, f: &Function) -> Option<i32> {
        if !crate::arch::native::CALL_CONV.return_address_in_register {
            return None;
        }
        let saved = self.ra_saved.get_or_init(|| {
            self.with_elf(|elf, bytes| Ok(unwind::return_addresses_saved(elf, bytes))).unwrap_or_default()
        });
        saved.get(&f.addr).and_then(|&at| i32::try_from(at).ok())
    }

    /// The file offset of link address `addr` (`PT_LOAD` segments).
    pub fn file_offset_of(&self, addr: u64) -> Option<u64> {
        self.file_offsets.iter().find(|&&(v, n, _)| addr >= v && addr < v + n).map(|&(v, _, o)| addr - v + o)
    }

    /// A PIE executable (as opposed to a shared library): the kernel
    /// starts it at its entry point too. A shared library's `e_entry` is
    /// usually 0 or a function called normally, except in the few that are
    /// also programs (`libc.so.6` prints its version when run).
    fn needed_by_kernel(&self) -> bool {
        self.kind == ModuleKind::PositionIndependent && self.soname.is_none()
    }

    /// Functions matching a SystemTap glob (`*`, `?`, `[...]`), tried against the
    /// mangled name (with and without an `@VERSION` suffix), the full demangled
    /// name, and the demangled name without its parameter list and return type
    /// (so `ns::Class::method*` matches `ns::Class::method(int)` and `ns::*`
    /// matches everything in `ns`). Each function at most once, in address
    /// order. Also returns the skipped symbols whose names match, for notes.
    pub fn match_functions(&self, glob: &str) -> (Vec<&Function>, Vec<&Skipped>) {
        let m = Matcher::new(glob);
        let functions = self.functions.iter().filter(|f| function_matches(&m, f)).collect();
        let skipped = self.skipped.iter().filter(|s| skipped_matches(&m, &s.name)).collect();
        (functions, skipped)
    }

    /// The name of `f` that `glob` matched, with its demangling: a point
    /// is shown by the name the user's pattern matched (`memalign`), not by
    /// whichever alias at that address the symbol table lists first
    /// (`__libc_memalign`). The first name when none matches by itself.
    pub fn matched_name(&self, glob: &str, f: &Function) -> (String, Option<String>) {
        let m = Matcher::new(glob);
        let plain = f.names.iter().position(|n| m.matches_symbol(n));
        let i = plain
            .or_else(|| {
                let d = f.demangled_forms();
                (0..f.names.len()).find(|&i| {
                    d.full.get(i).cloned().flatten().is_some_and(|x| m.matches(&x))
                        || d.short.get(i).cloned().flatten().is_some_and(|x| m.matches(&x))
                })
            })
            .unwrap_or(0);
        (f.names.get(i).cloned().unwrap_or_default(), f.demangled().get(i).cloned().flatten())
    }

    /// For an ifunc: the functions of this module whose names look like its
    /// implementations (`__memcpy_avx_unaligned_erms` and `__memcpy_sse2_unaligned`
    /// for `memcpy`), for an error message that suggests probing one of them.
    /// Empty for a stripped module whose implementations are local symbols.
    pub fn ifunc_candidates(&self, f: &Function) -> Vec<&Function> {
        let mut bases: Vec<&str> = f.names.iter().map(|n| trim_underscores(strip_version(n))).collect();
        bases.sort_unstable();
        bases.dedup();
        self.functions
            .iter()
            .filter(|g| !g.ifunc && g.addr != f.addr)
            .filter(|g| {
                g.names.iter().any(|n| {
                    let n = trim_underscores(strip_version(n));
                    bases.iter().any(|b| looks_like_implementation(n, b))
                })
            })
            .collect()
    }

    /// The function containing a link-time address, if any. Where symbols
    /// overlap, the one starting closest below `addr` wins.
    pub fn function_at(&self, addr: u64) -> Option<&Function> {
        let end = self.functions.partition_point(|f| f.addr <= addr);
        self.functions[..end].iter().rev().find(|f| f.contains(addr))
    }

    /// The ELF class, byte order and machine, to reject libraries the loader would reject.
    fn ident(&self) -> search::Ident {
        search::Ident { class64: self.class64, little_endian: self.little_endian, machine: self.machine.e_machine() }
    }
}

/// What the architecture's analyses read of a module (hops: `arch::native::hop`).
impl crate::arch::ModuleCode for Module {
    fn machine(&self) -> Machine {
        self.machine
    }

    fn file_len(&self) -> Option<u64> {
        match self.given() {
            Some(b) => Some(b.len() as u64),
            None => std::fs::metadata(&self.path).ok().map(|m| m.len()),
        }
    }

    fn bytes(&self) -> Result<Image, String> {
        Module::bytes(self)
    }

    fn sites(&self) -> Result<&sites::Sites, String> {
        Module::sites(self)
    }

    fn file_offset_of(&self, addr: u64) -> Option<u64> {
        Module::file_offset_of(self, addr)
    }

    fn functions(&self) -> impl Iterator<Item = crate::arch::FunctionRange> + '_ {
        self.functions.iter().map(Function::range)
    }

    fn function_at(&self, addr: u64) -> Option<crate::arch::FunctionRange> {
        Module::function_at(self, addr).map(Function::range)
    }

    fn hops(&self) -> &std::sync::Mutex<crate::arch::Hops> {
        &self.hops
    }
}

/// `memcpy@@GLIBC_2.14` → `memcpy`. A leading `@` is kept (it is not a version).
fn strip_version(name: &str) -> &str {
    match name.find('@') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    }
}

fn trim_underscores(name: &str) -> &str {
    name.trim_start_matches('_')
}

/// `memcpy_avx_unaligned_erms` implements `memcpy`; `memcpy_chk_avx` implements
/// `memcpy_chk`, not `memcpy`.
fn looks_like_implementation(name: &str, base: &str) -> bool {
    match name.strip_prefix(base).and_then(|rest| rest.strip_prefix('_')) {
        Some(rest) => !rest.is_empty() && (base.ends_with("_chk") || !rest.starts_with("chk")),
        None => false,
    }
}

fn function_matches(m: &Matcher, f: &Function) -> bool {
    if f.names.iter().any(|n| m.matches_symbol(n)) {
        return true;
    }
    // Demangle only names that could match: identifiers appear literally in
    // mangled names, so the pattern's first identifier must occur in one.
    if !f.any_mangled() || !f.names.iter().any(|n| m.identifier_may_occur_in(n)) {
        return false;
    }
    let d = f.demangled_forms();
    d.full.iter().flatten().any(|x| m.matches(x)) || d.short.iter().flatten().any(|s| m.matches(s))
}

fn skipped_matches(m: &Matcher, name: &str) -> bool {
    let base = strip_version(name);
    if m.matches(name) || m.matches(base) {
        return true;
    }
    // Skipped names are not demangled at load time (there are many in a C++
    // library and they only feed notes), so demangle here, and only names
    // that could match: a C++ pattern `ns::...` needs `ns` in the mangled name.
    if !m.is_qualified() || !base.starts_with("_Z") || !m.first_component_may_occur_in(base) {
        return false;
    }
    // Special names (`_ZTV` vtables, `_ZTI` typeinfo, `_ZGV` guard variables,
    // ...) demangle to English (`vtable for ns::X`), which a pattern starting
    // with a name cannot match; they are most of a C++ library's data symbols.
    if (base.starts_with("_ZT") || base.starts_with("_ZG")) && !m.prefix.contains(' ') {
        return false;
    }
    let (full, short) = demangle::demangle(base);
    full.iter().chain(short.iter()).any(|d| m.matches(d))
}

/// A glob compiled once per query: the literal prefix before the first
/// metacharacter rejects most names without running the glob matcher.
struct Matcher<'a> {
    pattern: &'a str,
    /// The pattern names a symbol version (`memcpy@GLIBC_2.2.5`).
    versioned: bool,
    prefix: &'a str,
    literal: bool,
    all: bool,
}

impl<'a> Matcher<'a> {
    fn new(pattern: &'a str) -> Matcher<'a> {
        let meta = pattern.find(['*', '?', '[']);
        Matcher {
            pattern,
            versioned: pattern.contains('@'),
            prefix: &pattern[..meta.unwrap_or(pattern.len())],
            literal: meta.is_none(),
            all: !pattern.is_empty() && pattern.bytes().all(|b| b == b'*'),
        }
    }

    /// Whether a symbol name matches: without an `@` in the pattern, the
    /// name without its default version (`printf@@GLIBC_2.2.5` as
    /// `printf`), never a non-default version (`memcpy@GLIBC_2.2.5`, a
    /// compatibility copy): a glob's `*` does not reach into the version.
    /// With one, the whole name.
    fn matches_symbol(&self, name: &str) -> bool {
        if self.versioned {
            return self.matches(name);
        }
        // This runs for every function and point: a literal pattern is
        // the name, or the name with its default version.
        if self.literal {
            return name.starts_with(self.pattern)
                && (name.len() == self.pattern.len() || name[self.pattern.len()..].starts_with("@@"))
                && !self.pattern.is_empty();
        }
        match name.find('@') {
            None | Some(0) => self.matches(name),
            Some(i) if name[i..].starts_with("@@") => self.matches(&name[..i]),
            Some(_) => false,
        }
    }

    fn matches(&self, text: &str) -> bool {
        if self.all {
            true
        } else if self.literal {
            text == self.pattern
        } else {
            text.starts_with(self.prefix) && crate::glob::glob_match(self.pattern, text)
        }
    }

    /// Whether a mangled name can demangle to a match: it must contain the
    /// first identifier of the pattern's literal prefix (`std` is exempt: it
    /// is abbreviated in mangled names). A pattern that starts with a
    /// wildcard has no such identifier, and every name must be demangled.
    fn identifier_may_occur_in(&self, mangled: &str) -> bool {
        let first = self.prefix.split("::").next().unwrap_or("");
        let ident: &str = first.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or("");
        ident.is_empty() || ident == "std" || mangled.contains(ident)
    }

    /// A C++-style pattern (`ns::Class::method*`).
    fn is_qualified(&self) -> bool {
        self.pattern.contains("::")
    }

    /// Whether a mangled name can demangle to something starting with this
    /// pattern's first `::` component. Mangled names contain each identifier
    /// literally at its first use (later uses are back-references), except the
    /// `std` abbreviations (`St`, `Ss`, ...), so those are not filtered. A
    /// pattern starting with a wildcard (`*::x`) would demangle every name in
    /// a C++ library on every query, so it gets no notes.
    fn first_component_may_occur_in(&self, mangled: &str) -> bool {
        let first = self.prefix.split("::").next().unwrap_or("");
        !first.is_empty() && (first == "std" || mangled.contains(first))
    }
}
