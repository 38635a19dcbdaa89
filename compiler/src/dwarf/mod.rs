//! DWARF debugging information (via gimli): the variables of the probed
//! program by their source names, their types and where they live at a
//! probe's address, for `$name`, `$p->field`, `$$parms`, `@var` and
//! `@cast` (pass 2: `elaborate::dwarf_vars` turns what this module finds
//! into expressions over the probe's saved registers and fault-safe
//! memory reads).
//!
//! **Invariant:** reads files only (INTERNALS.md, invariant 4); every
//! file is user input: malformed DWARF is an error string or a variable
//! that is "not accessible", never a panic.
//!
//! Layout: [`Debug::load`] finds the DWARF of a module (its own
//! `.debug_*` sections, or a separate debug file by build-id or
//! `.gnu_debuglink`: [`file`]), decompressing `SHF_COMPRESSED` sections;
//! nothing is parsed until a script asks (`elf::Module::debug` is a
//! `OnceLock`). [`Debug::scope`] finds the function around an address
//! (`.debug_aranges`, else every unit's ranges; each unit parsed once)
//! and collects its parameters, the locals of the lexical blocks holding
//! the address and the globals ([`Var`]); [`expr`] turns a location
//! expression at that address into a [`expr::Location`] over registers,
//! the CFA (computed from `.eh_frame`) and link-time addresses; [`types`]
//! reads types on demand, by DIE offset; [`lines`] reads the line tables
//! (`.statement("func@file.c:LINE")`). The file's bytes and sections are
//! `image`'s.

pub mod expr;
mod file;
pub mod lines;
pub mod types;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use gimli::{AttributeValue, DebugInfoOffset, Reader};

pub use expr::{Location, Sym};
pub(crate) use file::build_id as file_build_id;
pub use file::by_build_id as debug_file_by_build_id;
pub use types::{Type, TypeRef};

/// The reader every parsed piece of DWARF uses: owned bytes, so units and
/// types can be cached without borrowing the file.
pub type R = gimli::EndianArcSlice<gimli::LittleEndian>;

/// A module's debugging information.
pub struct Debug {
    /// The file the DWARF was read from (the module or its debug file).
    pub path: PathBuf,
    dwarf: gimli::Dwarf<R>,
    /// Every unit's header offset, in order; each unit parsed on first need.
    units: Vec<(DebugInfoOffset, OnceLock<Option<Arc<gimli::Unit<R>>>>)>,
    /// Address ranges to units (index into `units`), sorted by start.
    ranges: OnceLock<Vec<(u64, u64, usize)>>,
    /// Types read so far, by `.debug_info` offset.
    types: Mutex<HashMap<u64, Arc<Type>>>,
    /// Structure definitions by name, for declarations (`struct foo;`).
    definitions: OnceLock<HashMap<String, TypeRef>>,
    /// Global variables by name: their DIEs (unit index, offset).
    globals: OnceLock<HashMap<String, Vec<(usize, gimli::UnitOffset)>>>,
    /// `@cast` type names already looked up.
    named: Mutex<HashMap<String, Option<TypeRef>>>,
    /// Call sites by the name of the function they call.
    call_sites: OnceLock<HashMap<String, Vec<CallSite>>>,
}

/// A direct, not tail, call of a named function (`DW_TAG_call_site`, or
/// GNU's before DWARF 5): its return address (link-time) and, per
/// argument register (DWARF numbering), where its value was at the call
/// (`DW_AT_call_value`, evaluated in the caller's frame).
#[derive(Clone, Debug)]
pub struct CallSite {
    pub return_pc: u64,
    pub params: Vec<(u16, Location)>,
}

impl std::fmt::Debug for Debug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Debug").field("path", &self.path).field("units", &self.units.len()).finish()
    }
}

/// What a variable is to the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarKind {
    Param,
    Local,
    Global,
}

/// A variable visible at an address.
#[derive(Clone, Debug)]
pub struct Var {
    pub name: String,
    pub kind: VarKind,
    /// None: `void` (never for a real variable) or a type we could not read.
    pub ty: Option<TypeRef>,
    /// Where it is at the address.
    pub loc: Location,
    /// The location is one expression for the whole scope (not a list):
    /// at -O0, a parameter's stack slot, which the prologue fills.
    pub whole_scope: bool,
}

/// The function around an address and what it can see there.
#[derive(Clone, Debug)]
pub struct Scope {
    pub function: String,
    /// Where the function starts (link-time).
    pub low_pc: u64,
    /// Its return type (None: `void`).
    pub ret: Option<TypeRef>,
    /// What a name finds here: locals (innermost block first), then
    /// parameters; a name an inner block shadows is left out.
    pub vars: Vec<Var>,
    /// Every parameter in order, unnamed ones too (named ""): where the
    /// calling convention passes each depends on those before it.
    pub all_params: Vec<Var>,
    /// The unit is Rust's (its own calling convention for aggregates).
    pub rust: bool,
    /// Where the frame base is (`DW_AT_frame_base`), as a location.
    pub frame_base: Option<Location>,
    /// The compiler gave the function a calling convention of its own
    /// (`DW_CC_nocall`: parameters dropped or moved), so the platform ABI
    /// does not say where its parameters arrive.
    pub nocall: bool,
    /// The unit's index (for globals of that unit first).
    unit: usize,
}

impl Scope {
    pub fn var(&self, name: &str) -> Option<&Var> {
        self.vars.iter().find(|v| v.name == name)
    }
    pub fn params(&self) -> impl Iterator<Item = &Var> {
        self.all_params.iter()
    }
    pub fn locals(&self) -> impl Iterator<Item = &Var> {
        self.vars.iter().filter(|v| v.kind == VarKind::Local)
    }
    /// What `$$vars` and `-L` show: the visible parameters in order, then
    /// the locals.
    pub fn in_order(&self) -> Vec<&Var> {
        let mut out: Vec<&Var> = self.vars.iter().filter(|v| v.kind == VarKind::Param).collect();
        out.sort_by_key(|v| self.all_params.iter().position(|p| p.name == v.name));
        out.extend(self.locals());
        out
    }
}

fn err(e: gimli::Error) -> String {
    format!("malformed DWARF: {e}")
}

impl Debug {
    /// The DWARF of the module whose bytes are `bytes` (parsed as `elf`),
    /// at `path`: None if it has none and no separate debug file was found.
    pub fn load(
        path: &std::path::Path,
        elf: &goblin::elf::Elf<'_>,
        bytes: &crate::image::Image,
    ) -> Result<Option<Debug>, String> {
        let own = file::sections(elf, bytes)?;
        let (path, file, sections) = if own.contains_key(".debug_info") {
            match bytes {
                crate::image::Image::Read(whole) => (path.to_path_buf(), whole.clone(), own),
                // Bytes the caller holds (a running process's file): the
                // DWARF sections copied, not the whole file.
                crate::image::Image::Given(_) => (path.to_path_buf(), Arc::from(&[][..]), file::owned(own, bytes)),
            }
        } else {
            match file::separate(path, elf, bytes)? {
                Some(found) => found,
                None => return Ok(None),
            }
        };
        Debug::from_sections(path, file, sections).map(Some)
    }

    /// The sections are slices of `file` (no copy) or inflated bytes.
    fn from_sections(
        path: PathBuf,
        file: Arc<[u8]>,
        mut sections: HashMap<String, file::Data>,
    ) -> Result<Debug, String> {
        let mut take = |id: gimli::SectionId| -> Result<R, gimli::Error> {
            Ok(match sections.remove(id.name()) {
                Some(file::Data::Range(at, len)) => {
                    let mut r = R::new(file.clone(), gimli::LittleEndian);
                    r.skip(at)?;
                    r.truncate(len)?;
                    r
                }
                Some(file::Data::Owned(v)) => R::new(v.into(), gimli::LittleEndian),
                None => R::new(Arc::from(&[][..]), gimli::LittleEndian),
            })
        };
        let dwarf = gimli::Dwarf::load(&mut take).map_err(err)?;
        let mut units = Vec::new();
        let mut headers = dwarf.units();
        while let Some(h) = headers.next().map_err(err)? {
            if let Some(o) = h.debug_info_offset() {
                units.push((o, OnceLock::new()));
            }
        }
        Ok(Debug {
            path,
            dwarf,
            units,
            ranges: OnceLock::new(),
            types: Mutex::new(HashMap::new()),
            definitions: OnceLock::new(),
            globals: OnceLock::new(),
            call_sites: OnceLock::new(),
            named: Mutex::new(HashMap::new()),
        })
    }

    /// The DWARF sections, for readers of other parts ([`lines`]).
    pub(crate) fn dwarf(&self) -> &gimli::Dwarf<R> {
        &self.dwarf
    }

    /// Every unit that parses, in order (each parsed once).
    pub(crate) fn units(&self) -> impl Iterator<Item = Arc<gimli::Unit<R>>> + '_ {
        (0..self.units.len()).filter_map(|u| self.unit(u))
    }

    fn unit(&self, i: usize) -> Option<Arc<gimli::Unit<R>>> {
        let (off, cell) = self.units.get(i)?;
        cell.get_or_init(|| {
            let header = self.dwarf.debug_info.header_from_offset(*off).ok()?;
            self.dwarf.unit(header).ok().map(Arc::new)
        })
        .clone()
    }

    /// The unit holding `.debug_info` offset `off`.
    fn unit_of(&self, off: u64) -> Option<usize> {
        let i = self.units.partition_point(|(o, _)| o.0 as u64 <= off);
        i.checked_sub(1)
    }

    fn address_ranges(&self) -> &[(u64, u64, usize)] {
        self.ranges.get_or_init(|| {
            let mut out = Vec::new();
            let mut headers = self.dwarf.debug_aranges.headers();
            while let Ok(Some(h)) = headers.next() {
                let Some(u) = self.units.iter().position(|(o, _)| *o == h.debug_info_offset()) else { continue };
                let mut entries = h.entries();
                while let Ok(Some(e)) = entries.next() {
                    let r = e.range();
                    if r.end > r.begin {
                        out.push((r.begin, r.end, u));
                    }
                }
            }
            // Units aranges left out (clang emits none by default).
            let covered: std::collections::HashSet<usize> = out.iter().map(|r| r.2).collect();
            for i in 0..self.units.len() {
                if covered.contains(&i) {
                    continue;
                }
                let Some(unit) = self.unit(i) else { continue };
                let Ok(mut rs) = self.dwarf.unit_ranges(&unit) else { continue };
                while let Ok(Some(r)) = rs.next() {
                    if r.end > r.begin {
                        out.push((r.begin, r.end, i));
                    }
                }
            }
            out.sort_unstable();
            out
        })
    }

    /// The units whose code covers `pc`.
    fn units_at(&self, pc: u64) -> Vec<usize> {
        let mut v: Vec<usize> =
            self.address_ranges().iter().filter(|&&(b, e, _)| pc >= b && pc < e).map(|r| r.2).collect();
        v.dedup();
        v
    }

    /// The function (not inlined) whose code holds `pc`, and what it sees
    /// there. `Err` says why none was found.
    pub fn scope(&self, pc: u64) -> Result<Scope, String> {
        for u in self.units_at(pc) {
            let Some(unit) = self.unit(u) else { continue };
            let mut tree = unit.entries_tree(None).map_err(err)?;
            let root = tree.root().map_err(err)?;
            if let Some(s) = self.find_function(&unit, u, root, pc, 0)? {
                return Ok(s);
            }
        }
        Err(format!("no DWARF function covers address {pc:#x}"))
    }

    fn covers(&self, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>, pc: u64) -> bool {
        let Ok(mut rs) = self.dwarf.die_ranges(unit, e) else { return false };
        while let Ok(Some(r)) = rs.next() {
            if pc >= r.begin && pc < r.end {
                return true;
            }
        }
        false
    }

    fn low_pc(&self, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>) -> Option<u64> {
        match e.attr_value(gimli::DW_AT_low_pc)? {
            AttributeValue::Addr(a) => Some(a),
            AttributeValue::DebugAddrIndex(i) => self.dwarf.address(unit, i).ok(),
            _ => {
                let mut rs = self.dwarf.die_ranges(unit, e).ok()?;
                let r = rs.next().ok()??;
                Some(r.begin)
            }
        }
    }

    fn find_function(
        &self,
        unit: &gimli::Unit<R>,
        u: usize,
        node: gimli::EntriesTreeNode<'_, '_, R>,
        pc: u64,
        depth: u32,
    ) -> Result<Option<Scope>, String> {
        if depth > 32 {
            return Ok(None);
        }
        let mut children = node.children();
        while let Some(child) = children.next().map_err(err)? {
            let e = child.entry();
            match e.tag() {
                gimli::DW_TAG_subprogram if self.covers(unit, e, pc) => {
                    return self.function_scope(unit, u, child, pc).map(Some);
                }
                // C++ namespaces and classes hold member functions.
                gimli::DW_TAG_namespace
                | gimli::DW_TAG_structure_type
                | gimli::DW_TAG_class_type
                | gimli::DW_TAG_union_type
                | gimli::DW_TAG_module => {
                    if let Some(s) = self.find_function(unit, u, child, pc, depth + 1)? {
                        return Ok(Some(s));
                    }
                }
                _ => {}
            }
        }
        Ok(None)
    }

    fn function_scope(
        &self,
        unit: &gimli::Unit<R>,
        u: usize,
        node: gimli::EntriesTreeNode<'_, '_, R>,
        pc: u64,
    ) -> Result<Scope, String> {
        let e = node.entry().clone();
        let name = self.name(unit, &e).unwrap_or_else(|| "?".into());
        let low_pc = self.low_pc(unit, &e).unwrap_or(pc);
        let ret = self.type_of(unit, &e);
        let frame_base = match e.attr_value(gimli::DW_AT_frame_base) {
            Some(AttributeValue::Exprloc(x)) => {
                Some(expr::evaluate(&x, unit.encoding(), None, &|i| self.dwarf.address(unit, i).ok()))
            }
            _ => None,
        };
        let nocall = matches!(e.attr_value(gimli::DW_AT_calling_convention), Some(AttributeValue::CallingConvention(c)) if c == gimli::DW_CC_nocall);
        let rust = unit
            .entry(gimli::UnitOffset(unit.header.header_size()))
            .ok()
            .and_then(|root| root.attr_value(gimli::DW_AT_language))
            .is_some_and(|l| matches!(l, AttributeValue::Language(gimli::DW_LANG_Rust)));
        let mut scope = Scope {
            function: name,
            low_pc,
            ret,
            vars: Vec::new(),
            all_params: Vec::new(),
            rust,
            frame_base,
            nocall,
            unit: u,
        };
        let mut blocks = Vec::new();
        self.collect(unit, node, pc, &mut scope, 0, false, &mut blocks)?;
        // Innermost first; a parameter only where no local hides it.
        blocks.sort_by_key(|(depth, _)| std::cmp::Reverse(*depth));
        let params: Vec<Var> = scope.all_params.iter().filter(|p| !p.name.is_empty()).cloned().collect();
        for v in blocks.into_iter().map(|(_, v)| v).chain(params) {
            if !scope.vars.iter().any(|w| w.name == v.name) {
                scope.vars.push(v);
            }
        }
        Ok(scope)
    }

    /// Parameters (depth 0) go straight into the scope; locals of blocks
    /// holding `pc` into `locals` with their depth. The parameters and
    /// locals of a function inlined at `pc` (`inlined`) are locals there,
    /// deeper than the caller's, as SystemTap sees them.
    #[allow(clippy::too_many_arguments)]
    fn collect(
        &self,
        unit: &gimli::Unit<R>,
        node: gimli::EntriesTreeNode<'_, '_, R>,
        pc: u64,
        scope: &mut Scope,
        depth: u32,
        inlined: bool,
        locals: &mut Vec<(u32, Var)>,
    ) -> Result<(), String> {
        if depth > 64 {
            return Ok(());
        }
        let mut children = node.children();
        while let Some(child) = children.next().map_err(err)? {
            let e = child.entry().clone();
            match e.tag() {
                gimli::DW_TAG_formal_parameter if depth == 0 => {
                    if let Some(v) = self.var(unit, &e, VarKind::Param, pc, scope.frame_base.as_ref()) {
                        scope.all_params.push(v);
                    }
                }
                gimli::DW_TAG_formal_parameter if inlined => {
                    if let Some(v) = self.var(unit, &e, VarKind::Param, pc, scope.frame_base.as_ref()) {
                        if !v.name.is_empty() {
                            locals.push((depth, v));
                        }
                    }
                }
                // A block's `extern int g;` names a global elsewhere.
                gimli::DW_TAG_variable if e.attr_value(gimli::DW_AT_declaration).is_some() => {}
                gimli::DW_TAG_variable => {
                    if let Some(v) = self.var(unit, &e, VarKind::Local, pc, scope.frame_base.as_ref()) {
                        locals.push((depth, v));
                    }
                }
                gimli::DW_TAG_lexical_block if self.covers(unit, &e, pc) || !has_ranges(&e) => {
                    self.collect(unit, child, pc, scope, depth + 1, false, locals)?;
                }
                // A function inlined here: its parameters and locals, and
                // those only its abstract instance describes (a constant,
                // DW_AT_const_value, or a variable optimised out).
                gimli::DW_TAG_inlined_subroutine if self.covers(unit, &e, pc) => {
                    let before = locals.len();
                    self.collect(unit, child, pc, scope, depth + 1, true, locals)?;
                    if let Some(AttributeValue::UnitRef(origin)) = e.attr_value(gimli::DW_AT_abstract_origin) {
                        let mut tree = unit.entries_tree(Some(origin)).map_err(err)?;
                        let root = tree.root().map_err(err)?;
                        let mut kids = root.children();
                        while let Some(k) = kids.next().map_err(err)? {
                            let a = k.entry();
                            let kind = match a.tag() {
                                gimli::DW_TAG_variable if a.attr_value(gimli::DW_AT_declaration).is_none() => {
                                    VarKind::Local
                                }
                                gimli::DW_TAG_formal_parameter => VarKind::Param,
                                _ => continue,
                            };
                            let Some(v) = self.var(unit, a, kind, pc, scope.frame_base.as_ref()) else { continue };
                            if !v.name.is_empty() && !locals[before..].iter().any(|(_, w)| w.name == v.name) {
                                locals.push((depth + 1, v));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A variable or parameter DIE: its name (through its abstract
    /// origin), type and location at `pc`.
    fn var(
        &self,
        unit: &gimli::Unit<R>,
        e: &gimli::DebuggingInformationEntry<R>,
        kind: VarKind,
        pc: u64,
        frame_base: Option<&Location>,
    ) -> Option<Var> {
        // An unnamed parameter still takes its place in the calling
        // convention.
        let name = match self.name(unit, e) {
            Some(n) => n,
            None if kind == VarKind::Param => String::new(),
            None => return None,
        };
        let ty = self.type_of(unit, e);
        let encoding = unit.encoding();
        let address = |i| self.dwarf.address(unit, i).ok();
        let (loc, whole_scope) = match e.attr_value(gimli::DW_AT_location) {
            Some(AttributeValue::Exprloc(x)) => (expr::evaluate(&x, encoding, frame_base, &address), true),
            Some(
                v @ (AttributeValue::LocationListsRef(_)
                | AttributeValue::SecOffset(_)
                | AttributeValue::DebugLocListsIndex(_)),
            ) => {
                // The entry covering pc; a default location (DWARF 5's
                // DW_LLE_default_location, read as the whole address
                // space) only where no other entry does.
                let (mut found, mut default) = (None, None);
                if let Ok(Some(mut list)) = self.dwarf.attr_locations(unit, v) {
                    for _ in 0..100_000 {
                        let Ok(Some(entry)) = list.next() else { break };
                        if pc >= entry.range.begin && pc < entry.range.end {
                            if entry.range.begin == 0 && entry.range.end == u64::MAX {
                                default.get_or_insert(entry.data);
                            } else {
                                found = Some(entry.data);
                                break;
                            }
                        }
                    }
                }
                match found.or(default) {
                    Some(x) => (expr::evaluate(&x, encoding, frame_base, &address), false),
                    None => (Location::Unavailable, false),
                }
            }
            _ => match self.origin_attr(unit, e, gimli::DW_AT_const_value) {
                Some((_, c)) => (const_location(c), true),
                None => (Location::Unavailable, false),
            },
        };
        Some(Var { name, kind, ty, loc, whole_scope })
    }

    /// An attribute of a DIE or of what it completes (`DW_AT_abstract_origin`,
    /// `DW_AT_specification`), a few levels deep.
    fn origin_attr(
        &self,
        unit: &gimli::Unit<R>,
        e: &gimli::DebuggingInformationEntry<R>,
        at: gimli::DwAt,
    ) -> Option<(Option<Arc<gimli::Unit<R>>>, AttributeValue<R>)> {
        if let Some(v) = e.attr_value(at) {
            return Some((None, v));
        }
        let mut cur = e.clone();
        let mut unit_idx: Option<usize> = None;
        for _ in 0..4 {
            let next =
                cur.attr_value(gimli::DW_AT_abstract_origin).or_else(|| cur.attr_value(gimli::DW_AT_specification))?;
            let (u, die) = match unit_idx {
                None => self.follow(unit, next)?,
                Some(i) => self.follow(&*self.unit(i)?, next)?,
            };
            let owner = self.unit(u)?;
            if let Some(v) = die.attr_value(at) {
                // A value only meaningful in its own unit (a string
                // offset, a type reference) is made global here.
                return Some((Some(owner.clone()), globalize(&owner, v)));
            }
            cur = die;
            unit_idx = Some(u);
        }
        None
    }

    /// The DIE a reference attribute points to, with its unit's index.
    fn follow(
        &self,
        unit: &gimli::Unit<R>,
        v: AttributeValue<R>,
    ) -> Option<(usize, gimli::DebuggingInformationEntry<R>)> {
        let global = match v {
            AttributeValue::UnitRef(o) => o.to_debug_info_offset(&unit.header)?.0 as u64,
            AttributeValue::DebugInfoRef(o) => o.0 as u64,
            _ => return None,
        };
        let u = self.unit_of(global)?;
        let owner = self.unit(u)?;
        let local = DebugInfoOffset(global as usize).to_unit_offset(&owner.header)?;
        owner.entry(local).ok().map(|d| (u, d))
    }

    /// A DIE's name (through its origin).
    pub(crate) fn name(&self, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>) -> Option<String> {
        let (owner, v) = self.origin_attr(unit, e, gimli::DW_AT_name)?;
        let s = match v {
            AttributeValue::String(s) => s,
            other => self.dwarf.attr_string(owner.as_deref().unwrap_or(unit), other).ok()?,
        };
        Some(String::from_utf8_lossy(&s.to_slice().ok()?).into_owned())
    }

    /// A DIE's type (through its origin), as a global reference.
    pub(crate) fn type_of(&self, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>) -> Option<TypeRef> {
        match self.origin_attr(unit, e, gimli::DW_AT_type)?.1 {
            AttributeValue::UnitRef(o) => Some(TypeRef(o.to_debug_info_offset(&unit.header)?.0 as u64)),
            AttributeValue::DebugInfoRef(o) => Some(TypeRef(o.0 as u64)),
            _ => None,
        }
    }

    /// A global variable by name, the unit of `near` first; `file` (a path
    /// suffix) restricts it to units of that source file.
    pub fn global(&self, name: &str, near: Option<&Scope>, file: Option<&str>) -> Option<Var> {
        let index = self.globals.get_or_init(|| self.index_globals());
        let candidates = index.get(name)?;
        let mut order: Vec<&(usize, gimli::UnitOffset)> = candidates.iter().collect();
        // The probe's own file first, unless one is named (then the
        // files in order, as SystemTap takes `name@file*.c`).
        if let (Some(s), None) = (near, file) {
            order.sort_by_key(|(u, _)| *u != s.unit);
        }
        for (u, off) in order {
            let unit = self.unit(*u)?;
            if let Some(f) = file {
                let cu_name = self.unit_name(&unit).unwrap_or_default();
                if !lines::file_matches(&cu_name, f) {
                    continue;
                }
            }
            let e = unit.entry(*off).ok()?;
            let v = self.var(&unit, &e, VarKind::Global, 0, None)?;
            if !matches!(v.loc, Location::Unavailable) {
                return Some(v);
            }
        }
        None
    }

    /// Every global (or file-static) variable `name` with a place or a
    /// value, with the address ranges of the code of its unit: the
    /// candidates a script function's `@var` chooses from by the calling
    /// probe's address.
    pub fn globals_with_units(&self, name: &str) -> Vec<(Var, Vec<(u64, u64)>)> {
        let index = self.globals.get_or_init(|| self.index_globals());
        let Some(candidates) = index.get(name) else { return Vec::new() };
        let mut out = Vec::new();
        for &(u, off) in candidates {
            let Some(unit) = self.unit(u) else { continue };
            let Ok(e) = unit.entry(off) else { continue };
            let Some(v) = self.var(&unit, &e, VarKind::Global, 0, None) else { continue };
            if matches!(v.loc, Location::Unavailable) {
                continue;
            }
            let ranges = self.address_ranges().iter().filter(|r| r.2 == u).map(|r| (r.0, r.1)).collect();
            out.push((v, ranges));
        }
        out
    }

    fn unit_name(&self, unit: &gimli::Unit<R>) -> Option<String> {
        let n = unit.name.clone()?;
        let n = String::from_utf8_lossy(&n.to_slice().ok()?).into_owned();
        if n.starts_with('/') {
            return Some(n);
        }
        let dir =
            unit.comp_dir.clone().and_then(|d| d.to_slice().ok().map(|s| String::from_utf8_lossy(&s[..]).into_owned()));
        Some(match dir {
            Some(d) => format!("{d}/{n}"),
            None => n,
        })
    }

    /// The labels (`DW_TAG_label` with an address) named as `label` (a
    /// glob) in the functions named as `func` (a glob), out-of-line or
    /// inlined (a label of an inlined copy is named by the function it is
    /// inlined from): (function, label, link-time address), by address.
    pub fn labels(&self, func: &str, label: &str) -> Vec<(String, String, u64)> {
        let mut out = Vec::new();
        for u in 0..self.units.len() {
            let Some(unit) = self.unit(u) else { continue };
            let mut cursor = unit.entries();
            // The enclosing functions: (depth, name).
            let mut within: Vec<(isize, String)> = Vec::new();
            while let Ok(Some(e)) = cursor.next_dfs() {
                let depth = e.depth();
                while within.last().is_some_and(|&(d, _)| d >= depth) {
                    within.pop();
                }
                match e.tag() {
                    gimli::DW_TAG_subprogram | gimli::DW_TAG_inlined_subroutine => {
                        within.push((depth, self.name(&unit, e).unwrap_or_default()));
                    }
                    gimli::DW_TAG_label => {
                        let (Some(at), Some((_, f))) = (self.low_pc(&unit, e), within.last()) else { continue };
                        let Some(name) = self.name(&unit, e) else { continue };
                        if crate::glob::glob_match(func, f) && crate::glob::glob_match(label, &name) {
                            out.push((f.clone(), name, at));
                        }
                    }
                    _ => {}
                }
            }
        }
        out.sort_by_key(|x| x.2);
        out.dedup_by_key(|x| x.2);
        out
    }

    /// The direct calls of function `name` (not tail calls) the DWARF
    /// describes, with their argument values where it gives them.
    pub fn call_sites(&self, name: &str) -> &[CallSite] {
        self.call_sites.get_or_init(|| self.index_call_sites()).get(name).map_or(&[], Vec::as_slice)
    }

    fn index_call_sites(&self) -> HashMap<String, Vec<CallSite>> {
        const DW_AT_GNU_CALL_SITE_VALUE: gimli::DwAt = gimli::DwAt(0x2111);
        const DW_AT_GNU_TAIL_CALL: gimli::DwAt = gimli::DwAt(0x2115);
        let mut out: HashMap<String, Vec<CallSite>> = HashMap::new();
        for u in 0..self.units.len() {
            let Some(unit) = self.unit(u) else { continue };
            let encoding = unit.encoding();
            let address = |i| self.dwarf.address(&unit, i).ok();
            let mut cursor = unit.entries();
            // The call site being read: its callee's name and itself.
            let mut open: Option<(isize, String, CallSite)> = None;
            while let Ok(Some(e)) = cursor.next_dfs() {
                let depth = e.depth();
                if open.as_ref().is_some_and(|(d, _, _)| depth <= *d) {
                    if let Some((_, name, site)) = open.take() {
                        out.entry(name).or_default().push(site);
                    }
                }
                match e.tag() {
                    gimli::DW_TAG_call_site | gimli::DW_TAG_GNU_call_site => {
                        let tail = e.attr_value(gimli::DW_AT_call_tail_call).is_some()
                            || e.attr_value(DW_AT_GNU_TAIL_CALL).is_some();
                        let ret = match e
                            .attr_value(gimli::DW_AT_call_return_pc)
                            .or_else(|| e.attr_value(gimli::DW_AT_low_pc))
                        {
                            Some(AttributeValue::Addr(a)) => Some(a),
                            Some(AttributeValue::DebugAddrIndex(i)) => address(i),
                            _ => None,
                        };
                        let origin = e
                            .attr_value(gimli::DW_AT_call_origin)
                            .or_else(|| e.attr_value(gimli::DW_AT_abstract_origin));
                        let callee = match origin {
                            Some(AttributeValue::UnitRef(o)) => unit.entry(o).ok().and_then(|c| self.name(&unit, &c)),
                            _ => None,
                        };
                        if let (false, Some(return_pc), Some(callee)) = (tail, ret, callee) {
                            open = Some((depth, callee, CallSite { return_pc, params: Vec::new() }));
                        }
                    }
                    gimli::DW_TAG_call_site_parameter | gimli::DW_TAG_GNU_call_site_parameter => {
                        let Some((_, _, site)) = open.as_mut() else { continue };
                        let reg = match e.attr_value(gimli::DW_AT_location) {
                            Some(AttributeValue::Exprloc(x)) => {
                                let mut ops = x.operations(encoding);
                                match (ops.next(), ops.next()) {
                                    (Ok(Some(gimli::Operation::Register { register })), Ok(None)) => Some(register.0),
                                    _ => None,
                                }
                            }
                            _ => None,
                        };
                        let value =
                            e.attr_value(gimli::DW_AT_call_value).or_else(|| e.attr_value(DW_AT_GNU_CALL_SITE_VALUE));
                        if let (Some(reg), Some(AttributeValue::Exprloc(x))) = (reg, value) {
                            site.params.push((reg, expr::evaluate(&x, encoding, None, &address)));
                        }
                    }
                    _ => {}
                }
            }
            if let Some((_, name, site)) = open.take() {
                out.entry(name).or_default().push(site);
            }
        }
        out
    }

    /// Globals: variables at a unit's top level (and in namespaces) that
    /// have a location or a specification's definition.
    fn index_globals(&self) -> HashMap<String, Vec<(usize, gimli::UnitOffset)>> {
        let mut out: HashMap<String, Vec<(usize, gimli::UnitOffset)>> = HashMap::new();
        for u in 0..self.units.len() {
            let Some(unit) = self.unit(u) else { continue };
            let mut cursor = unit.entries();
            let mut ns_depth: Vec<isize> = Vec::new();
            while let Ok(Some(e)) = cursor.next_dfs() {
                let depth = e.depth();
                while ns_depth.last().is_some_and(|&d| d >= depth) {
                    ns_depth.pop();
                }
                let top = depth == 1 || ns_depth.last() == Some(&(depth - 1));
                match e.tag() {
                    gimli::DW_TAG_namespace => ns_depth.push(depth),
                    // With a place, or a value the compiler kept (an
                    // unused `static` optimised away: DW_AT_const_value).
                    gimli::DW_TAG_variable
                        if top
                            && (e.attr_value(gimli::DW_AT_location).is_some()
                                || e.attr_value(gimli::DW_AT_const_value).is_some()) =>
                    {
                        if let Some(n) = self.name(&unit, e) {
                            out.entry(n).or_default().push((u, e.offset()));
                        }
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// The type at a reference (read once).
    pub fn ty(&self, r: TypeRef) -> Option<Arc<Type>> {
        if let Some(t) = self.types.lock().ok()?.get(&r.0) {
            return Some(t.clone());
        }
        let u = self.unit_of(r.0)?;
        let unit = self.unit(u)?;
        let local = DebugInfoOffset(r.0 as usize).to_unit_offset(&unit.header)?;
        let e = unit.entry(local).ok()?;
        let t = Arc::new(types::read(self, &unit, &e));
        self.types.lock().ok()?.insert(r.0, t.clone());
        Some(t)
    }

    /// The full definition of a structure, union, class or enumeration
    /// declared by name only.
    pub fn definition(&self, kind: types::Aggregate, name: &str) -> Option<TypeRef> {
        let defs = self.definitions.get_or_init(|| self.index_definitions());
        defs.get(&format!("{} {name}", kind.keyword())).copied()
    }

    fn index_definitions(&self) -> HashMap<String, TypeRef> {
        let mut out = HashMap::new();
        for u in 0..self.units.len() {
            let Some(unit) = self.unit(u) else { continue };
            let mut cursor = unit.entries();
            while let Ok(Some(e)) = cursor.next_dfs() {
                let Some(kind) = types::Aggregate::of(e.tag()) else { continue };
                if e.attr_value(gimli::DW_AT_declaration).is_some() {
                    continue;
                }
                let Some(name) = self.name(&unit, e) else { continue };
                let Some(off) = e.offset().to_debug_info_offset(&unit.header) else { continue };
                out.entry(format!("{} {name}", kind.keyword())).or_insert(TypeRef(off.0 as u64));
            }
        }
        out
    }

    /// A type by its C name (`struct foo`, `union u`, `enum e`, `class
    /// c`, or a typedef's or base type's name), for `@cast`.
    /// A pointer to type `to`, made here (a reference no DIE offset can
    /// have, kept in the type cache) for types DWARF describes otherwise
    /// (`types::resolve`).
    pub fn pointer_to(&self, to: TypeRef) -> TypeRef {
        let r = TypeRef((1 << 63) | (1 << 62) | (to.0 & ((1 << 62) - 1)));
        if let Ok(mut cache) = self.types.lock() {
            cache
                .entry(r.0)
                .or_insert_with(|| std::sync::Arc::new(types::Type::Pointer { to: Some(to), reference: false }));
        }
        r
    }

    pub fn type_named(&self, text: &str) -> Option<TypeRef> {
        if let Some(r) = self.named.lock().ok().and_then(|m| m.get(text).copied()) {
            return r;
        }
        let r = self.find_type_named(text);
        if let Ok(mut m) = self.named.lock() {
            m.insert(text.to_string(), r);
        }
        r
    }

    fn find_type_named(&self, text: &str) -> Option<TypeRef> {
        let text = text.trim();
        for kind in [types::Aggregate::Struct, types::Aggregate::Union, types::Aggregate::Class, types::Aggregate::Enum]
        {
            if let Some(rest) = text.strip_prefix(kind.keyword()).and_then(|r| r.strip_prefix(' ')) {
                return self.definition(kind, rest.trim());
            }
        }
        // A typedef or base type: the first with that name. C++ classes
        // are found by their bare name too.
        for u in 0..self.units.len() {
            let Some(unit) = self.unit(u) else { continue };
            let mut cursor = unit.entries();
            while let Ok(Some(e)) = cursor.next_dfs() {
                let named = matches!(
                    e.tag(),
                    gimli::DW_TAG_typedef
                        | gimli::DW_TAG_base_type
                        | gimli::DW_TAG_structure_type
                        | gimli::DW_TAG_class_type
                        | gimli::DW_TAG_union_type
                );
                if named
                    && e.attr_value(gimli::DW_AT_declaration).is_none()
                    && self.name(&unit, e).as_deref() == Some(text)
                {
                    let off = e.offset().to_debug_info_offset(&unit.header)?;
                    return Some(TypeRef(off.0 as u64));
                }
            }
        }
        None
    }
}

fn has_ranges(e: &gimli::DebuggingInformationEntry<R>) -> bool {
    e.attr_value(gimli::DW_AT_low_pc).is_some() || e.attr_value(gimli::DW_AT_ranges).is_some()
}

/// A reference or string offset valid in `unit`, made independent of it.
fn globalize(unit: &gimli::Unit<R>, v: AttributeValue<R>) -> AttributeValue<R> {
    match v {
        AttributeValue::UnitRef(o) => match o.to_debug_info_offset(&unit.header) {
            Some(g) => AttributeValue::DebugInfoRef(g),
            None => AttributeValue::UnitRef(o),
        },
        other => other,
    }
}

fn const_location(v: AttributeValue<R>) -> Location {
    match v {
        AttributeValue::Sdata(x) => Location::Value(Sym::Const(x)),
        AttributeValue::Udata(x) => Location::Value(Sym::Const(x as i64)),
        AttributeValue::Data1(x) => Location::Value(Sym::Const(i64::from(x))),
        AttributeValue::Data2(x) => Location::Value(Sym::Const(i64::from(x))),
        AttributeValue::Data4(x) => Location::Value(Sym::Const(i64::from(x))),
        AttributeValue::Data8(x) => Location::Value(Sym::Const(x as i64)),
        // A block (a struct's or an array's bytes, target order): pieces
        // of up to 8 bytes, each its value.
        AttributeValue::Block(b) => {
            let bytes = b.to_slice().map(|s| s.to_vec()).unwrap_or_default();
            if bytes.is_empty() || bytes.len() > 4096 {
                return Location::Unavailable;
            }
            let pieces = bytes
                .chunks(8)
                .map(|c| {
                    let mut w = [0u8; 8];
                    w[..c.len()].copy_from_slice(c);
                    (c.len() as u64, Location::Value(Sym::Const(i64::from_le_bytes(w))))
                })
                .collect();
            Location::Pieces(pieces)
        }
        _ => Location::Unavailable,
    }
}
