//! Finding programs and libraries, as the shell and the dynamic loader do.
//!
//! The library search follows glibc's `_dl_map_object`: a name with a slash
//! is a path; otherwise `DT_RPATH` (of the object that needs the library, then
//! of the objects that loaded it, up to the executable; only while they have
//! no `DT_RUNPATH`), `LD_LIBRARY_PATH`, `DT_RUNPATH` (of the needing object
//! only), `/etc/ld.so.cache`, then the default directories (these two not for
//! an object linked with `-z nodefaultlib`). A candidate whose ELF class, byte
//! order or machine differs from the needing object's is skipped, as the
//! loader skips it.
//!
//! Known differences from glibc: `$ORIGIN` is the directory of the canonical
//! path (glibc uses the path the object was found by, before resolving
//! symlinks); the cache's `glibc-hwcaps` entries are used only when no
//! baseline entry fits (glibc picks them when the CPU supports them); secure
//! (setuid) mode is not modelled.

use std::cell::OnceCell;
use std::env;
use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::ldcache::LdCache;
use super::{ElfError, Module};

const LD_SO_CACHE: &str = "/etc/ld.so.cache";

/// The ELF identity a library must have to be loaded next to another module.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ident {
    pub class64: bool,
    pub little_endian: bool,
    pub machine: u16,
}

impl Ident {
    /// The host's own identity, for a search with no module to go by.
    fn host() -> Ident {
        let machine = if cfg!(target_arch = "x86_64") {
            goblin::elf::header::EM_X86_64
        } else if cfg!(target_arch = "aarch64") {
            goblin::elf::header::EM_AARCH64
        } else {
            goblin::elf::header::EM_NONE
        };
        Ident { class64: cfg!(target_pointer_width = "64"), little_endian: cfg!(target_endian = "little"), machine }
    }

    /// True if `path` is an ELF file of this class, byte order and machine.
    /// Only the first 20 bytes are read.
    fn accepts(&self, path: &Path) -> bool {
        let mut head = [0u8; 20];
        let read = crate::image::open_regular(path).and_then(|mut f| f.read_exact(&mut head));
        if read.is_err() || !head.starts_with(b"\x7fELF") {
            return false;
        }
        let class64 = head[4] == goblin::elf::header::ELFCLASS64;
        let little_endian = head[5] == goblin::elf::header::ELFDATA2LSB;
        let bytes = [head[18], head[19]];
        let machine = if little_endian { u16::from_le_bytes(bytes) } else { u16::from_be_bytes(bytes) };
        class64 == self.class64
            && little_endian == self.little_endian
            && (machine == self.machine || self.machine == goblin::elf::header::EM_NONE)
    }

    /// The multiarch triplet directory name Debian-style systems use.
    fn triplet(&self) -> Option<&'static str> {
        match (self.machine, self.class64) {
            (goblin::elf::header::EM_X86_64, true) => Some("x86_64-linux-gnu"),
            (goblin::elf::header::EM_AARCH64, true) => Some("aarch64-linux-gnu"),
            _ => None,
        }
    }

    /// What `$LIB` expands to: glibc's library directory, `lib/<triplet>` on
    /// multiarch systems, `lib64` on others (for 64-bit objects).
    fn lib(&self) -> String {
        if let Some(t) = self.triplet() {
            if Path::new("/lib").join(t).is_dir() {
                return format!("lib/{t}");
            }
        }
        if self.class64 { "lib64" } else { "lib" }.to_string()
    }

    /// What `$PLATFORM` expands to (`AT_PLATFORM`), if we know it.
    fn platform(&self) -> Option<&'static str> {
        match self.machine {
            goblin::elf::header::EM_X86_64 if self.class64 => Some("x86_64"),
            goblin::elf::header::EM_AARCH64 => Some("aarch64"),
            _ => None,
        }
    }

    /// The loader's built-in directories: the multiarch ones first, as
    /// Debian's loader has them, then the classic ones.
    fn default_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(t) = self.triplet() {
            dirs.push(Path::new("/lib").join(t));
            dirs.push(Path::new("/usr/lib").join(t));
        }
        if self.class64 {
            dirs.push(PathBuf::from("/lib64"));
            dirs.push(PathBuf::from("/usr/lib64"));
        }
        dirs.push(PathBuf::from("/lib"));
        dirs.push(PathBuf::from("/usr/lib"));
        dirs
    }
}

/// Like `which`: the first executable file named `program` in `$PATH`
/// (`/usr/local/bin:/usr/bin:/bin` if unset). A name with a `/` is a path and
/// is returned as given if it is an executable file.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    if program.is_empty() {
        return None;
    }
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_executable_file(&p).then_some(p);
    }
    let path = env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    env::split_paths(&path).find_map(|dir| {
        // An empty entry is the current directory, as in the shell.
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let candidate = dir.join(program);
        is_executable_file(&candidate).then_some(candidate)
    })
}

fn is_executable_file(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Resolve a library name (`libc.so.6`) needed by `needed_by`, as the dynamic
/// loader would: see the module documentation for the order. Returns the path
/// as found (not canonicalised). Only `needed_by`'s own `DT_RPATH` is used;
/// [`load_closure`] also searches the `DT_RPATH` of the objects that loaded it.
pub fn resolve_library(name: &str, needed_by: &Module) -> Option<PathBuf> {
    let cache = OnceCell::new();
    let search = Search { ident: needed_by.ident(), needed_by: Some(needed_by), loaders: Vec::new() };
    search.resolve(name, &cache)
}

/// One library search.
struct Search<'a> {
    ident: Ident,
    /// The object whose `DT_NEEDED` names the library (`None`: a lookup by
    /// name with nothing loaded, which only has the cache and the defaults).
    needed_by: Option<&'a Module>,
    /// The objects that loaded `needed_by`, nearest first, ending with the executable.
    loaders: Vec<&'a Module>,
}

impl Search<'_> {
    fn resolve(&self, name: &str, cache: &OnceCell<Option<LdCache>>) -> Option<PathBuf> {
        if name.is_empty() {
            return None;
        }
        if name.contains('/') {
            let path = PathBuf::from(self.expand(name, self.needed_by)?);
            return self.ident.accepts(&path).then_some(path);
        }
        // DT_RPATH: only if the needing object has no DT_RUNPATH; then the
        // chain of loaders, each one's DT_RPATH unless it has a DT_RUNPATH.
        if self.needed_by.is_none_or(|m| m.runpath.is_empty()) {
            for m in self.needed_by.iter().chain(&self.loaders) {
                if m.runpath.is_empty() {
                    if let Some(p) = self.in_dirs(name, &m.rpath, Some(m)) {
                        return Some(p);
                    }
                }
            }
        }
        if let Some(value) = env::var("LD_LIBRARY_PATH").ok().filter(|v| !v.is_empty()) {
            let dirs: Vec<String> = value.split([':', ';']).map(str::to_string).collect();
            // glibc expands $ORIGIN here relative to the executable.
            let exe = self.loaders.last().copied().or(self.needed_by);
            if let Some(p) = self.in_dirs(name, &dirs, exe) {
                return Some(p);
            }
        }
        if let Some(m) = self.needed_by {
            if let Some(p) = self.in_dirs(name, &m.runpath, Some(m)) {
                return Some(p);
            }
            if m.nodeflib {
                return None;
            }
        }
        if let Some(p) = self.in_cache(cache, |key| key == name) {
            return Some(p);
        }
        self.ident.default_dirs().into_iter().map(|d| d.join(name)).find(|p| self.ident.accepts(p))
    }

    /// The first `dir/name` among `dirs` (each expanded for `origin`'s
    /// dynamic string tokens) that is a loadable ELF file.
    fn in_dirs(&self, name: &str, dirs: &[String], origin: Option<&Module>) -> Option<PathBuf> {
        dirs.iter().find_map(|dir| {
            let dir = self.expand(dir, origin)?;
            // An empty entry is the current directory, as for the loader.
            let dir = if dir.is_empty() { ".".to_string() } else { dir };
            let candidate = Path::new(&dir).join(name);
            self.ident.accepts(&candidate).then_some(candidate)
        })
    }

    /// The first cache entry whose key passes `key_matches` and whose file is
    /// loadable; entries for the baseline CPU before `glibc-hwcaps` ones.
    fn in_cache(&self, cache: &OnceCell<Option<LdCache>>, key_matches: impl Fn(&str) -> bool) -> Option<PathBuf> {
        let cache = cache.get_or_init(|| LdCache::read(Path::new(LD_SO_CACHE))).as_ref()?;
        for baseline in [true, false] {
            let found = cache
                .entries()
                .filter(|e| (e.hwcap == 0) == baseline && key_matches(e.key))
                .map(|e| PathBuf::from(e.value))
                .find(|p| self.ident.accepts(p));
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Expand `$ORIGIN`, `$LIB` and `$PLATFORM` (also in `${...}` form).
    /// `None` if a token cannot be expanded: the loader drops such entries.
    /// Unknown `$NAME`s stay as written, as in glibc.
    fn expand(&self, s: &str, origin: Option<&Module>) -> Option<String> {
        if !s.contains('$') {
            return Some(s.to_string());
        }
        let mut out = String::with_capacity(s.len() + 32);
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            rest = &rest[i + 1..];
            let (token, len) = dst_token(rest);
            match token {
                Some("ORIGIN") => {
                    let dir = origin?.path.parent()?;
                    out.push_str(dir.to_str()?);
                }
                Some("LIB") => out.push_str(&self.ident.lib()),
                Some("PLATFORM") => out.push_str(self.ident.platform()?),
                _ => out.push('$'),
            }
            rest = &rest[len..];
        }
        out.push_str(rest);
        Some(out)
    }
}

/// The dynamic string token at the start of `s` (just after a `$`) and how
/// many bytes it spans: `ORIGIN` or `{ORIGIN}`, if it is one of ours and is
/// not followed by more name characters (`$ORIGINAL` is not `$ORIGIN`).
fn dst_token(s: &str) -> (Option<&'static str>, usize) {
    for token in ["ORIGIN", "LIB", "PLATFORM"] {
        if let Some(after) = s.strip_prefix(token) {
            if !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                return (Some(token), token.len());
            }
        }
        if s.strip_prefix('{').and_then(|r| r.strip_prefix(token)).is_some_and(|r| r.starts_with('}')) {
            return (Some(token), token.len() + 2);
        }
    }
    (None, 0)
}

/// The executable and every library it needs, transitively, in load order
/// (breadth first, each module once), as the dynamic loader maps them at
/// startup. A library that cannot be found is an error, as it is for the loader.
pub fn load_closure(executable: &Path) -> Result<Vec<Module>, ElfError> {
    let mut modules = vec![Module::load(executable)?];
    // For each module, the index of the module whose DT_NEEDED loaded it.
    let mut parent: Vec<Option<usize>> = vec![None];
    // Every name a module is known by (the DT_NEEDED strings that found it and
    // its soname): the loader does not load a name twice.
    let mut known: Vec<(String, usize)> = Vec::new();
    if let Some(soname) = &modules[0].soname {
        known.push((soname.clone(), 0));
    }
    let cache = OnceCell::new();
    let mut i = 0;
    while i < modules.len() {
        for n in 0..modules[i].needed.len() {
            let name = modules[i].needed[n].clone();
            if known.iter().any(|(k, _)| *k == name) {
                continue;
            }
            let found = {
                let mut loaders = Vec::new();
                let mut at = parent[i];
                while let Some(p) = at {
                    loaders.push(&modules[p]);
                    at = parent[p];
                }
                let search = Search { ident: modules[i].ident(), needed_by: Some(&modules[i]), loaders };
                search.resolve(&name, &cache)
            };
            let Some(path) = found else {
                return Err(ElfError::LibraryNotFound { name, needed_by: modules[i].path.clone() });
            };
            let canonical = fs::canonicalize(&path).map_err(|source| ElfError::Io { path: path.clone(), source })?;
            if let Some(j) = modules.iter().position(|m| m.path == canonical) {
                known.push((name, j));
                continue;
            }
            let module = Module::load(&canonical)?;
            let index = modules.len();
            if let Some(soname) = &module.soname {
                known.push((soname.clone(), index));
            }
            known.push((name, index));
            modules.push(module);
            parent.push(Some(i));
        }
        i += 1;
    }
    Ok(modules)
}

/// Find the file for `process("NAME")`:
/// 1. a name with a `/` is a path (absolute or relative to the current directory);
/// 2. a module of `loaded` whose soname or file name is `name`;
/// 3. a program on `$PATH` (unless the name looks like a library, `*.so`, `*.so.*`);
/// 4. the loader's search as if the first of `loaded` needed it (with nothing
///    loaded: `LD_LIBRARY_PATH`, `/etc/ld.so.cache` and the default directories);
/// 5. for an unversioned name (`libm.so`), the versioned one (`libm.so.6`)
///    among `loaded`, then in the cache (`libm.so` itself is often a linker
///    script or absent without the development package);
/// 6. a file of that name in the current directory.
///
/// Returns a canonical path.
pub fn find_module(name: &str, loaded: &[Module]) -> Result<PathBuf, ElfError> {
    let not_found = |what: String| ElfError::ModuleNotFound { name: name.to_string(), what };
    let canonical = |p: &Path| fs::canonicalize(p).map_err(|e| not_found(format!("{}: {e}", p.display())));
    if name.is_empty() {
        return Err(not_found("the name is empty".to_string()));
    }
    if name.contains('/') {
        return canonical(Path::new(name));
    }
    let file_name = |m: &Module| m.path.file_name().and_then(|f| f.to_str()).map(str::to_string);
    if let Some(m) = loaded.iter().find(|m| m.soname.as_deref() == Some(name) || file_name(m).as_deref() == Some(name))
    {
        return Ok(m.path.clone());
    }
    let library = name.ends_with(".so") || name.contains(".so.");
    if !library {
        if let Some(p) = find_on_path(name) {
            return canonical(&p);
        }
    }
    let cache = OnceCell::new();
    let search = match loaded.first() {
        Some(m) => Search { ident: m.ident(), needed_by: Some(m), loaders: Vec::new() },
        None => Search { ident: Ident::host(), needed_by: None, loaders: Vec::new() },
    };
    if let Some(p) = search.resolve(name, &cache) {
        return canonical(&p);
    }
    let versioned = |candidate: &str| {
        candidate
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
    };
    if let Some(m) = loaded.iter().find(|m| m.soname.as_deref().is_some_and(versioned)) {
        return Ok(m.path.clone());
    }
    if let Some(p) = search.in_cache(&cache, versioned) {
        return canonical(&p);
    }
    if Path::new(name).is_file() {
        return canonical(Path::new(name));
    }
    Err(not_found(
        "it is not a loaded module, not a program on $PATH, and the dynamic loader's search \
         (LD_LIBRARY_PATH, /etc/ld.so.cache, default directories) does not find it"
            .to_string(),
    ))
}
