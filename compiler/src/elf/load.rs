//! Building a [`Module`] from the bytes of an ELF file.

use std::collections::HashSet;
use std::fs;
use std::panic;
use std::path::Path;

use goblin::elf::dynamic::DF_1_NODEFLIB;
use goblin::elf::header::{EI_CLASS, ELFCLASS64, ET_DYN, ET_EXEC};
use goblin::elf::program_header::PT_LOAD;
use goblin::elf::section_header::{SHN_UNDEF, SHT_NOBITS, SHT_SYMTAB};
use goblin::elf::sym::{Symtab, STB_GLOBAL, STB_GNU_UNIQUE, STB_WEAK, STT_FILE, STT_FUNC, STT_GNU_IFUNC, STT_SECTION};
use goblin::elf::Elf;
use goblin::strtab::Strtab;

use super::{ElfError, Function, Machine, Module, ModuleKind, SkipReason, Skipped};
use crate::image::ReadError;

pub(super) fn load(path: &Path) -> Result<Module, ElfError> {
    let io = |source| ElfError::Io { path: path.to_path_buf(), source };
    let bytes = read(path)?;
    let canonical = fs::canonicalize(path).map_err(io)?;
    parse(&canonical, &bytes)
}

/// The bytes of a module file (`image::read`), its errors as an
/// [`ElfError`].
pub(super) fn read(path: &Path) -> Result<Vec<u8>, ElfError> {
    crate::image::read(path).map_err(|e| match e {
        ReadError::Io(source) => ElfError::Io { path: path.to_path_buf(), source },
        ReadError::NotRegular => ElfError::Malformed { path: path.to_path_buf(), what: "not a regular file".into() },
        ReadError::TooLarge(len) => ElfError::Malformed {
            path: path.to_path_buf(),
            what: format!("{len} bytes is larger than any module this tracer reads (4 GiB)"),
        },
    })
}

/// A defined function symbol, before symbols at one address are grouped.
struct Candidate<'a> {
    addr: u64,
    size: u64,
    name: &'a str,
    /// 0 global, 1 weak, 2 local: lower is a better name.
    rank: u8,
    ifunc: bool,
    shndx: usize,
}

pub(super) fn parse(path: &Path, bytes: &[u8]) -> Result<Module, ElfError> {
    parse_with(path, bytes, false)
}

/// A separate debug file's functions, whose code has no bytes there
/// (`SHT_NOBITS`): for naming addresses only, every file offset 0.
pub(super) fn load_names(path: &Path) -> Result<Module, ElfError> {
    let bytes = read(path)?;
    parse_with(path, &bytes, true)
}

fn parse_with(path: &Path, bytes: &[u8], names_only: bool) -> Result<Module, ElfError> {
    if !bytes.starts_with(b"\x7fELF") {
        if let Some(line) = bytes.strip_prefix(b"#!") {
            // `#!/usr/bin/env python3` names the program after env.
            let line = String::from_utf8_lossy(line.split(|&b| b == b'\n').next().unwrap_or_default()).into_owned();
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or_default().to_string();
            let after_env = words.find(|w| !w.starts_with('-') && !w.contains('='));
            let interpreter = match (first.rsplit('/').next(), after_env) {
                (Some("env"), Some(prog)) => prog.to_string(),
                _ => first,
            };
            return Err(ElfError::Script { path: path.to_path_buf(), interpreter });
        }
        return Err(ElfError::NotElf { path: path.to_path_buf() });
    }
    let malformed = |what: String| ElfError::Malformed { path: path.to_path_buf(), what };
    // goblin is fuzzed and checks its bounds, but a file is user input and a
    // parser bug must not take the tracer down: a panic inside the parser is
    // reported like any other malformed file.
    let elf = match panic::catch_unwind(|| Elf::parse(bytes)) {
        Ok(Ok(elf)) => elf,
        Ok(Err(e)) => return Err(malformed(format!("parsing its headers and symbol tables failed: {e}"))),
        Err(_) => return Err(malformed("the ELF parser panicked on it".to_string())),
    };

    let kind = match elf.header.e_type {
        ET_EXEC => ModuleKind::Executable,
        ET_DYN => ModuleKind::PositionIndependent,
        other => {
            return Err(ElfError::Unsupported {
                path: path.to_path_buf(),
                what: format!(
                    "it is of ELF type {} ({}), not an executable or shared library",
                    other,
                    goblin::elf::header::et_to_str(other)
                ),
            })
        }
    };
    let machine = Machine::from_e_machine(elf.header.e_machine);
    let stripped = !elf.section_headers.iter().any(|s| s.sh_type == SHT_SYMTAB);

    let mut candidates = Vec::with_capacity(elf.syms.len() + elf.dynsyms.len());
    let mut skipped = Vec::new();
    let arm = matches!(machine, Machine::Aarch64) || elf.header.e_machine == goblin::elf::header::EM_ARM;
    // .dynsym names carry their version apart (.gnu.version): a
    // non-default one (`memcpy@GLIBC_2.2.5`, a compatibility copy) is named
    // with it, as .symtab names it, so that a plain `memcpy` does not match.
    let versioned = versioned_dynamic_names(&elf);
    collect_symbols(&elf.syms, &elf.strtab, arm, &|_, n| n, &mut candidates, &mut skipped);
    collect_symbols(
        &elf.dynsyms,
        &elf.dynstrtab,
        arm,
        &|i, n| versioned.get(&i).map_or(n, String::as_str),
        &mut candidates,
        &mut skipped,
    );

    let mut functions = group_functions(path, bytes.len() as u64, &elf, candidates, &mut skipped, names_only)?;
    let go_entries = add_go_functions(&elf, bytes, &mut functions);
    let go_version = section(&elf, bytes, ".go.buildinfo").and_then(super::gopclntab::build_version);
    if stripped && machine == crate::arch::native::MACHINE {
        add_unnamed_functions(&elf, bytes, &mut functions);
    }

    // A name can be both a function and a skipped symbol (the zero-size end
    // label of a function, a local object named like a function elsewhere);
    // the function is what the user meant, so no note for it.
    let function_names: HashSet<&str> =
        functions.iter().flat_map(|f| f.names.iter().map(|n| super::strip_version(n))).collect();
    // One note per name: `printf` (.dynsym) and `printf@GLIBC_2.2.5` (.symtab)
    // are the same import; the unversioned spelling sorts first and is kept.
    skipped.sort_unstable_by(|&(a, ra), &(b, rb)| {
        (super::strip_version(a), ra, a.len()).cmp(&(super::strip_version(b), rb, b.len()))
    });
    skipped.dedup_by(|b, a| super::strip_version(a.0) == super::strip_version(b.0) && a.1 == b.1);
    let skipped: Vec<Skipped> = skipped
        .into_iter()
        .filter(|(name, _)| !function_names.contains(super::strip_version(name)))
        .map(|(name, reason)| Skipped { name: name.to_string(), reason })
        .collect();

    // The embedded blob's start label (a zero-size text symbol).
    let v8_builtins = skipped.iter().any(|s: &Skipped| s.name == "v8_Default_embedded_blob_code_")
        || functions.iter().any(|f| f.names.iter().any(|n| n == "v8_Default_embedded_blob_code_"));
    let info = elf.dynamic.as_ref().map(|d| &d.info);
    let markers = markers(&elf, bytes);
    Ok(Module {
        path: path.to_path_buf(),
        soname: elf.soname.map(str::to_string),
        kind,
        machine,
        needed: elf.libraries.iter().map(|s| s.to_string()).collect(),
        runpath: split_paths(&elf.runpaths),
        rpath: split_paths(&elf.rpaths),
        functions,
        skipped,
        stripped,
        entry: elf.header.e_entry,
        v8_builtins,
        markers,
        file_offsets: elf
            .program_headers
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .map(|p| (p.p_vaddr, p.p_filesz, p.p_offset))
            .collect(),
        reopened: Default::default(),
        bytes: Default::default(),
        sites: Default::default(),
        ra_saved: Default::default(),
        lines: Default::default(),
        debug: Default::default(),
        hops: Default::default(),
        class64: bytes.get(EI_CLASS) == Some(&ELFCLASS64),
        little_endian: elf.little_endian,
        nodeflib: info.is_some_and(|i| i.flags_1 & DF_1_NODEFLIB != 0),
        go_entries,
        go_version,
    })
}

/// The bytes of the section named `name`, when the file holds them.
fn section<'a>(elf: &Elf<'_>, bytes: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let sh = elf.section_headers.iter().find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(name))?;
    let at = usize::try_from(sh.sh_offset).ok()?;
    bytes.get(at..at.checked_add(usize::try_from(sh.sh_size).ok()?)?)
}

/// The loadable segments: (address, size in the file, file offset).
fn load_segments(elf: &Elf<'_>) -> Vec<(u64, u64, u64)> {
    elf.program_headers.iter().filter(|p| p.p_type == PT_LOAD).map(|p| (p.p_vaddr, p.p_filesz, p.p_offset)).collect()
}

/// The file offset of link-time address `a`, if a segment holds it.
fn offset_in(segments: &[(u64, u64, u64)], a: u64) -> Option<u64> {
    segments.iter().find(|&&(v, n, _)| a >= v && a < v + n).map(|&(v, _, o)| a - v + o)
}

/// Whether a function of `f` (sorted by address) covers address `a`.
fn covers(f: &[Function], a: u64) -> bool {
    let i = f.partition_point(|g| g.addr <= a);
    i > 0 && a < f[i - 1].addr + f[i - 1].size.max(1)
}

/// A Go binary's functions from its `.gopclntab` (`gopclntab`), stripped
/// or not: those no symbol covers get their Go names (`main.main`,
/// `net/http.(*conn).serve`). Returns the entries of every Go function
/// (sorted).
fn add_go_functions(elf: &Elf<'_>, bytes: &[u8], functions: &mut Vec<Function>) -> Vec<u64> {
    let Some((tab, text)) = go_table(elf, bytes) else { return Vec::new() };
    let segments = load_segments(elf);
    let mut added = Vec::new();
    let go = super::gopclntab::functions(tab, text);
    let mut entries: Vec<u64> = go.iter().map(|g| g.addr).collect();
    entries.sort_unstable();
    for g in go {
        if g.size == 0 || covers(functions, g.addr) {
            continue;
        }
        let Some(file_offset) = offset_in(&segments, g.addr) else {
            continue;
        };
        added.push(Function {
            names: vec![g.name],
            lazy: Default::default(),
            addr: g.addr,
            size: g.size,
            file_offset,
            ifunc: false,
            global: true,
        });
    }
    functions.extend(added);
    functions.sort_by_key(|f| f.addr);
    entries
}

/// A Go binary's `.gopclntab` and, in a position-independent one, its
/// text's link-time address (the header's own word is 0 in the file: a
/// relocation's addend fills it, pcHeader.textStart, the third word after
/// 8 bytes).
pub(crate) fn go_table<'a>(elf: &Elf<'_>, bytes: &'a [u8]) -> Option<(&'a [u8], Option<u64>)> {
    let sh = elf.section_headers.iter().find(|sh| {
        elf.shdr_strtab.get_at(sh.sh_name).is_some_and(|n| n == ".gopclntab" || n.ends_with(".gopclntab"))
    })?;
    let at = usize::try_from(sh.sh_offset).ok()?;
    let tab = bytes.get(at..at.checked_add(usize::try_from(sh.sh_size).ok()?)?)?;
    let ptr = u64::from(tab.get(7).copied().unwrap_or(8));
    let text_word = sh.sh_addr + 8 + 2 * ptr;
    let text = elf.dynrelas.iter().find(|r| r.r_offset == text_word).and_then(|r| r.r_addend).map(|a| a as u64);
    Some((tab, text))
}

/// A stripped file keeps names only for what it exports; every function
/// still has an unwind entry (FDE). Those no symbol covers become
/// `sub_<file offset in hex>` (the disassemblers' convention), so
/// `function("*")` reaches them.
fn add_unnamed_functions(elf: &Elf<'_>, bytes: &[u8], functions: &mut Vec<Function>) {
    let fdes = super::unwind::fde_functions(elf, bytes);
    if fdes.is_empty() {
        return;
    }
    let segments = load_segments(elf);
    let mut added = Vec::new();
    for (start, size) in fdes {
        if covers(functions, start) {
            continue;
        }
        let Some(file_offset) = offset_in(&segments, start) else {
            continue;
        };
        added.push(Function {
            names: vec![format!("sub_{file_offset:x}")],
            lazy: Default::default(),
            addr: start,
            size,
            file_offset,
            ifunc: false,
            global: false,
        });
    }
    functions.extend(added);
    functions.sort_by_key(|f| f.addr);
}

/// The SDT markers of `.note.stapsdt` (`sdt`).
fn markers(elf: &Elf<'_>, bytes: &[u8]) -> Vec<super::sdt::Marker> {
    let base = elf
        .section_headers
        .iter()
        .find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(".stapsdt.base"))
        .map(|sh| sh.sh_addr);
    let mut descs: Vec<&[u8]> = Vec::new();
    if let Some(notes) = elf.iter_note_sections(bytes, Some(".note.stapsdt")) {
        for n in notes.flatten() {
            if n.name == "stapsdt" && n.n_type == 3 {
                descs.push(n.desc);
            }
        }
    }
    super::sdt::parse_notes(&descs, base, elf.little_endian)
}

/// `DT_RUNPATH`/`DT_RPATH` strings are colon-separated lists; an empty entry
/// is kept (the loader reads it as the current directory).
fn split_paths(values: &[&str]) -> Vec<String> {
    values.iter().flat_map(|v| v.split(':')).map(str::to_string).collect()
}

/// The defined .dynsym symbols whose version is not the default one
/// (hidden in `.gnu.version`), by index: `name@VERSION`.
fn versioned_dynamic_names(elf: &Elf<'_>) -> std::collections::HashMap<usize, String> {
    let mut out = std::collections::HashMap::new();
    let (Some(versym), Some(verdef)) = (&elf.versym, &elf.verdef) else { return out };
    let names: std::collections::HashMap<u16, &str> =
        verdef.iter().filter_map(|d| Some((d.vd_ndx, elf.dynstrtab.get_at(d.iter().next()?.vda_name)?))).collect();
    for (i, sym) in elf.dynsyms.iter().enumerate() {
        let Some(v) = versym.get_at(i) else { continue };
        if !v.is_hidden() || sym.st_shndx == SHN_UNDEF as usize {
            continue;
        }
        let (Some(name), Some(ver)) = (elf.dynstrtab.get_at(sym.st_name), names.get(&v.version())) else { continue };
        out.insert(i, format!("{name}@{ver}"));
    }
    out
}

fn collect_symbols<'a, 'n>(
    symtab: &Symtab<'a>,
    strtab: &Strtab<'a>,
    arm: bool,
    rename: &dyn Fn(usize, &'a str) -> &'n str,
    candidates: &mut Vec<Candidate<'n>>,
    skipped: &mut Vec<(&'n str, SkipReason)>,
) where
    'a: 'n,
{
    for (i, sym) in symtab.iter().enumerate() {
        let Some(name) = strtab.get_at(sym.st_name) else { continue };
        let name = rename(i, name);
        let typ = sym.st_type();
        // Section and file symbols are not names anyone probes; `$x`/`$d` are
        // ARM mapping symbols marking code and data inside sections.
        if name.is_empty() || typ == STT_SECTION || typ == STT_FILE || (arm && name.starts_with('$')) {
            continue;
        }
        if sym.st_shndx == SHN_UNDEF as usize {
            skipped.push((name, SkipReason::Undefined));
        } else if typ != STT_FUNC && typ != STT_GNU_IFUNC {
            skipped.push((name, SkipReason::NotAFunction));
        } else if sym.st_size == 0 {
            skipped.push((name, SkipReason::ZeroSize));
        } else if name.ends_with(".cold") || name.contains(".cold.") {
            skipped.push((name, SkipReason::ColdPart));
        } else {
            let rank = match sym.st_bind() {
                STB_GLOBAL | STB_GNU_UNIQUE => 0,
                STB_WEAK => 1,
                _ => 2,
            };
            candidates.push(Candidate {
                addr: sym.st_value,
                size: sym.st_size,
                name,
                rank,
                ifunc: typ == STT_GNU_IFUNC,
                shndx: sym.st_shndx,
            });
        }
    }
}

/// One [`Function`] per address, every name at that address kept, best first.
fn group_functions<'a>(
    path: &Path,
    file_len: u64,
    elf: &Elf,
    mut candidates: Vec<Candidate<'a>>,
    skipped: &mut Vec<(&'a str, SkipReason)>,
    names_only: bool,
) -> Result<Vec<Function>, ElfError> {
    candidates.sort_unstable_by_key(|c| c.addr);
    let mut functions = Vec::with_capacity(candidates.len());
    for group in candidates.chunk_by_mut(|a, b| a.addr == b.addr) {
        // The same name often comes from both .symtab and .dynsym: keep the
        // better binding, then order the names best first.
        group.sort_unstable_by(|a, b| a.name.cmp(b.name).then(a.rank.cmp(&b.rank)));
        let mut names: Vec<(u8, &'a str)> = Vec::with_capacity(group.len());
        for c in group.iter() {
            if names.last().map(|&(_, n)| n) != Some(c.name) {
                names.push((c.rank, c.name));
            }
        }
        names.sort_unstable_by_key(|&(rank, name)| name_key(rank, name));

        let first = &group[0];
        let addr = first.addr;
        let size = group.iter().map(|c| c.size).max().unwrap_or(first.size);
        let file_offset = if names_only { Some(0) } else { file_offset(elf, addr, first.shndx) };
        let Some(file_offset) = file_offset else {
            // No bytes in the file (an absolute symbol, or one in .bss): there
            // is nothing to patch. Rare enough not to need its own reason.
            skipped.extend(names.iter().map(|&(_, name)| (name, SkipReason::NotAFunction)));
            continue;
        };
        if file_offset.checked_add(size).is_none_or(|end| end > file_len) {
            return Err(ElfError::Malformed {
                path: path.to_path_buf(),
                what: format!(
                    "function {} at {:#x} (file offset {:#x}, {} bytes) extends past the end of the file ({} bytes); is it truncated?",
                    names[0].1, addr, file_offset, size, file_len
                ),
            });
        }

        // Names are demangled on first need (Function::demangled): most
        // queries never need most of them.
        functions.push(Function::new(
            names.iter().map(|&(_, name)| name.to_string()).collect(),
            addr,
            size,
            file_offset,
            group.iter().any(|c| c.ifunc),
            names.iter().any(|&(rank, _)| rank < 2),
        ));
    }
    Ok(functions)
}

/// Sort key for the names at one address: global over weak over local,
/// `memcpy` over `memcpy@@GLIBC_2.14`, `malloc` over `__libc_malloc`, then
/// shorter, then alphabetical (so the order does not depend on the symbol tables).
fn name_key(rank: u8, name: &str) -> (u8, bool, usize, usize, &str) {
    let underscores = name.len() - name.trim_start_matches('_').len();
    (rank, name.contains('@'), underscores, name.len(), name)
}

/// The file offset of a link-time address: through the `PT_LOAD` segment that
/// maps it from the file, else through the symbol's own section.
fn file_offset(elf: &Elf, addr: u64, shndx: usize) -> Option<u64> {
    for ph in &elf.program_headers {
        if ph.p_type == PT_LOAD && addr >= ph.p_vaddr && addr - ph.p_vaddr < ph.p_filesz {
            return ph.p_offset.checked_add(addr - ph.p_vaddr);
        }
    }
    let sh = elf.section_headers.get(shndx)?;
    if sh.sh_type != SHT_NOBITS && addr >= sh.sh_addr && addr - sh.sh_addr < sh.sh_size {
        return sh.sh_offset.checked_add(addr - sh.sh_addr);
    }
    None
}
