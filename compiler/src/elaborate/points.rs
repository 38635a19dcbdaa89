//! Probe points to concrete locations.
//!
//! Session points (`begin`, `end`, `error`, `timer.*`) need nothing;
//! `process(...)` points are resolved against ELF files: the module named by
//! the point (a path, a program on `$PATH`, or a library soname looked up
//! among the target's modules), then its symbols by glob.

use super::alias::Expanded;
use super::lower::BodyKind;
use crate::ast::{Component, ExprKind as A};
use crate::diag::{Code, Diagnostic};
use crate::elf::{self, Image, Module};
use crate::program::{FunctionPoint, Point};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

/// Facts about running processes, supplied by the caller: the compiler
/// never inspects a live process itself (INTERNALS.md, invariant 4).
pub trait TargetQuery {
    /// The executable of a running process.
    fn executable(&self, pid: u32) -> Result<PathBuf, String>;
    /// The files mapped into a running process (its executable and libraries).
    fn mapped_files(&self, pid: u32) -> Result<Vec<PathBuf>, String>;
    /// The bytes of `path`, a file of process `pid` as [`executable`] or
    /// [`mapped_files`] named it, opened as the process maps it: the path
    /// is the process's to choose and names a file of its own mount
    /// namespace (or one deleted since), so such a file is never read by
    /// it. An error when it could not be opened so; None for a path the
    /// query did not name (read as any other).
    ///
    /// [`executable`]: TargetQuery::executable
    /// [`mapped_files`]: TargetQuery::mapped_files
    fn image(&self, _pid: u32, _path: &std::path::Path) -> Option<Result<Image, String>> {
        None
    }
}

/// A query for when there is no running process: every question fails.
pub struct NoProcesses;

impl TargetQuery for NoProcesses {
    fn executable(&self, pid: u32) -> Result<PathBuf, String> {
        Err(format!("no process information available for pid {pid}"))
    }
    fn mapped_files(&self, pid: u32) -> Result<Vec<PathBuf>, String> {
        Err(format!("no process information available for pid {pid}"))
    }
}

/// What the command line says the target is.
#[derive(Clone, Debug, Default)]
pub struct TargetSpec {
    /// `-p PID`.
    pub pid: Option<u32>,
    /// `-c CMD`: the program (as found on `$PATH`).
    pub command: Option<PathBuf>,
}

pub struct Resolver<'q> {
    spec: TargetSpec,
    query: &'q dyn TargetQuery,
    modules: HashMap<PathBuf, Rc<Module>>,
    /// The target's modules (its executable first), loaded on first need.
    target: Option<Result<Vec<Rc<Module>>, String>>,
    /// `-l`/`-L`: what a point names, though a probe there would be
    /// refused (Go functions).
    pub listing: bool,
}

/// The outcome for one expanded point.
pub struct Resolved {
    pub points: Vec<Point>,
    pub kind: BodyKind,
}

impl<'q> Resolver<'q> {
    pub fn new(spec: TargetSpec, query: &'q dyn TargetQuery) -> Resolver<'q> {
        Resolver { spec, query, modules: HashMap::new(), target: None, listing: false }
    }

    /// The module at `path`, loaded once per session.
    pub fn module(&mut self, path: &std::path::Path) -> Result<Rc<Module>, String> {
        self.load(path)
    }

    fn load(&mut self, path: &std::path::Path) -> Result<Rc<Module>, String> {
        self.load_of(self.spec.pid, path)
    }

    /// The module at `path`; a file of running process `pid` (as the
    /// query named it) from the bytes the query gives, as the process
    /// maps it.
    fn load_of(&mut self, pid: Option<u32>, path: &std::path::Path) -> Result<Rc<Module>, String> {
        if let Some(m) = self.modules.get(path) {
            return Ok(m.clone());
        }
        let m = match pid.and_then(|pid| self.query.image(pid, path)) {
            Some(image) => Module::from_image(path, image?),
            None => Module::load(path),
        };
        let m = Rc::new(m.map_err(|e| e.to_string())?);
        self.modules.insert(path.to_path_buf(), m.clone());
        Ok(m)
    }

    /// The target's executable path, from `-p` or `-c`.
    pub(crate) fn target_executable(&self) -> Option<Result<PathBuf, String>> {
        if let Some(pid) = self.spec.pid {
            return Some(self.query.executable(pid));
        }
        self.spec.command.clone().map(Ok)
    }

    /// A module named in a script (`@cast(..., "libfoo.so")`): a path, or
    /// the file or SONAME of one of the target's modules.
    pub fn module_named(&mut self, name: &str) -> Result<Rc<Module>, String> {
        if name.contains('/') {
            return self.module(std::path::Path::new(name));
        }
        let file = |m: &Module| m.path.file_name().and_then(|f| f.to_str()).map(str::to_string);
        self.target_modules()?
            .into_iter()
            .find(|m| m.soname.as_deref() == Some(name) || file(m).as_deref() == Some(name))
            .ok_or_else(|| format!("no module of the target is called `{name}` (name it by its path)"))
    }

    pub(crate) fn target_modules(&mut self) -> Result<Vec<Rc<Module>>, String> {
        if self.target.is_none() {
            let r = self.load_target();
            self.target = Some(r);
        }
        self.target.clone().unwrap_or_else(|| Ok(Vec::new()))
    }

    fn load_target(&mut self) -> Result<Vec<Rc<Module>>, String> {
        if let Some(pid) = self.spec.pid {
            let exe = self.query.executable(pid)?;
            let mut out = vec![self.load_of(Some(pid), &exe)?];
            for f in self.query.mapped_files(pid)? {
                if f != exe {
                    // Mapped files that are not ELF (locale archives, fonts) are not modules.
                    if let Ok(m) = self.load_of(Some(pid), &f) {
                        out.push(m);
                    }
                }
            }
            return Ok(out);
        }
        if let Some(cmd) = self.spec.command.clone() {
            let closure = elf::load_closure(&cmd).map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            for m in closure {
                let rc = Rc::new(m);
                self.modules.insert(rc.path.clone(), rc.clone());
                out.push(rc);
            }
            return Ok(out);
        }
        Ok(Vec::new())
    }

    /// Function `symbol` of the C library that program `exe` (None: the
    /// target) loads, as a probe point: where lifecycle probes hook
    /// (`elaborate::lifecycle`).
    /// None without a target (nothing to hook: pass 5 needs one).
    pub fn libc_function(
        &mut self,
        exe: Option<&std::path::Path>,
        symbol: &str,
        ret: bool,
    ) -> Result<Option<FunctionPoint>, String> {
        if exe.is_none() && self.spec.pid.is_none() && self.spec.command.is_none() {
            return Ok(None);
        }
        let modules: Vec<Rc<Module>> = match exe {
            Some(path) => {
                let closure = elf::load_closure(path).map_err(|e| e.to_string())?;
                closure.into_iter().map(Rc::new).collect()
            }
            None => self.target_modules()?,
        };
        let Some(libc) = modules.iter().find(|m| module_is(m, "libc.so.6")) else {
            let what = exe.map_or("the target".to_string(), |p| p.display().to_string());
            return Err(format!("{what} does not load the GNU C library (libc.so.6)"));
        };
        let (found, _) = libc.match_functions(symbol);
        let Some(f) = found.into_iter().find(|f| !f.ifunc && f.names.iter().any(|n| n == symbol)) else {
            return Err(format!(
                "{} has no function `{symbol}` (GNU C library 2.34 or later is needed)",
                libc.path.display()
            ));
        };
        Ok(Some(FunctionPoint {
            module: libc.path.clone(),
            symbol: symbol.to_string(),
            demangled: None,
            addr: f.addr,
            size: f.size,
            file_offset: f.file_offset,
            ret,
            itrace: false,
            only_exe: exe.map(|p| p.to_path_buf()),
            hop: None,
            ra_saved: if ret { libc.return_address_saved(f) } else { None },
            trap: false,
            go: None,
        }))
    }

    /// The module a `process(...)` component names.
    fn module_for(&mut self, c: &Component) -> Result<Rc<Module>, Diagnostic> {
        let fail = |msg: String, label: &str| {
            Diagnostic::error(Code::ModuleNotFound, c.span, msg).with_label(label.to_string())
        };
        // The process whose file it is, when it is one (read as mapped).
        let mut of = None;
        let path = match c.arg.as_deref().map(|a| &a.kind) {
            None => match self.target_executable() {
                Some(Ok(p)) => {
                    of = self.spec.pid;
                    p
                }
                Some(Err(e)) => {
                    return Err(fail(format!("cannot find the target's executable: {e}"), "for this point"))
                }
                None => {
                    return Err(fail("`process` without a name needs a target".into(), "which process?")
                        .with_help("run with -p PID or -c CMD, or name the program: process(\"/usr/bin/prog\")"))
                }
            },
            Some(A::Int(pid)) => match u32::try_from(*pid).ok().map(|p| (p, self.query.executable(p))) {
                Some((n, Ok(p))) => {
                    of = Some(n);
                    p
                }
                Some((_, Err(e))) => {
                    return Err(fail(format!("process {pid}: {e}"), "cannot find this process's executable"))
                }
                None => return Err(fail(format!("`{pid}` is not a process id"), "not a pid")),
            },
            Some(A::Str(name)) => {
                let name = String::from_utf8_lossy(name).into_owned();
                let target = match self.target_modules() {
                    Ok(t) => t,
                    // The target's libraries decide which `libc.so.6` is
                    // meant; guessing from the system search would be wrong.
                    Err(e) => {
                        return Err(fail(
                            format!("cannot load the target's modules: {e}"),
                            "needed to find this library",
                        ))
                    }
                };
                let loaded: Vec<Module> = Vec::new();
                // find_module wants owned modules; search ours by name first.
                if let Some(m) = target.iter().find(|m| module_is(m, &name)) {
                    return Ok(m.clone());
                }
                match elf::find_module(&name, &loaded) {
                    Ok(p) => p,
                    Err(e) => {
                        let searched = if target.is_empty() {
                            "the program search path and the library search path".to_string()
                        } else {
                            format!("the target's {} modules and the search paths", target.len())
                        };
                        return Err(fail(e.to_string(), "no such program or library").with_help(format!(
                            "searched {searched}; give a path, a program on $PATH or a library soname"
                        )));
                    }
                }
            }
            Some(_) => return Err(fail("`process` takes a path, a library name or a pid".into(), "not understood")),
        };
        self.load_of(of, &path).map_err(|e| fail(e, "cannot read this module"))
    }

    pub fn resolve(&mut self, ex: &Expanded<'_>, diags: &mut Vec<Diagnostic>) -> Resolved {
        let comps = &ex.point.components;
        let names: Vec<&str> = comps.iter().map(|c| c.name.name.as_str()).collect();
        let num = |c: &Component| match c.arg.as_deref().map(|a| &a.kind) {
            Some(A::Int(n)) => Some(*n),
            _ => None,
        };
        let session = |points| Resolved { points, kind: BodyKind::Session };
        let order = comps.first().and_then(num).unwrap_or(0);
        match names.as_slice() {
            ["begin"] => return session(vec![Point::Begin { order }]),
            ["end"] => return session(vec![Point::End { order }]),
            ["error"] => return session(vec![Point::Error { order }]),
            ["timer", "profile", rest @ ..] => {
                let hz = match rest {
                    ["hz"] => num(&comps[2]).unwrap_or(0),
                    _ => 99,
                };
                if !(1..=10_000).contains(&hz) {
                    diags.push(
                        Diagnostic::error(Code::BadValue, ex.point.span, "profiling rate is out of range")
                            .with_label(format!("{hz} samples a second"))
                            .with_help("sample between 1 and 10000 times a second, e.g. timer.profile.hz(999)"),
                    );
                }
                let period_ns = 1_000_000_000 / hz.clamp(1, 10_000) as u64;
                return Resolved { points: vec![Point::Profile { period_ns }], kind: BodyKind::Sample };
            }
            ["process", "blocked"] => {
                if comps[0].arg.is_some() {
                    diags.push(
                        Diagnostic::error(Code::BadValue, ex.point.span, "`process.blocked` takes no program")
                            .with_label("the waits of every traced process")
                            .with_help("name the processes with -p PID or -c CMD, and filter on execname() or pid()"),
                    );
                }
                return Resolved { points: vec![Point::Blocked], kind: BodyKind::Blocked };
            }
            ["timer", unit, rest @ ..] => {
                let n = num(&comps[1]).unwrap_or(0).max(0) as u64;
                let ns_per = match *unit {
                    "s" | "sec" => Some(1_000_000_000u64),
                    "ms" | "msec" => Some(1_000_000),
                    "us" | "usec" => Some(1_000),
                    "ns" | "nsec" => Some(1),
                    "jiffies" => Some(4_000_000), // HZ=250, as SystemTap assumes when it cannot ask
                    _ => None,
                };
                let period_ns = match (*unit, ns_per) {
                    ("hz", _) if n > 0 => 1_000_000_000 / n,
                    (_, Some(k)) => n.saturating_mul(k),
                    _ => 0,
                };
                let randomize_ns = match rest {
                    ["randomize"] => (num(&comps[2]).unwrap_or(0).max(0) as u64).saturating_mul(ns_per.unwrap_or(1)),
                    _ => 0,
                };
                if period_ns == 0 || period_ns < 10_000 {
                    diags.push(
                        Diagnostic::error(Code::BadValue, ex.point.span, "timer period is too short")
                            .with_label(format!("{period_ns} ns"))
                            .with_help("timers run in the tracer; use at least 10 us"),
                    );
                }
                if randomize_ns >= period_ns && period_ns > 0 {
                    diags.push(
                        Diagnostic::error(Code::BadValue, ex.point.span, "timer randomization is out of range")
                            .with_label(format!(
                                "spread {randomize_ns} ns is not smaller than the period {period_ns} ns"
                            ))
                            .with_help("randomize by less than the period, e.g. timer.ms(100).randomize(20)"),
                    );
                }
                return session(vec![Point::Timer { period_ns, randomize_ns }]);
            }
            _ => {}
        }
        // `process.library("libfoo*")`: every library of the target whose
        // soname or file name matches, as SystemTap's library globs.
        if let ["process", "library", ..] = names.as_slice() {
            if let Some(A::Str(g)) = comps[1].arg.as_deref().map(|a| &a.kind) {
                let glob = String::from_utf8_lossy(g).into_owned();
                if glob.contains(['*', '?', '[']) {
                    return self.resolve_library_glob(ex, &glob, diags);
                }
            }
        }
        // process[(X)][.library(L)] ...
        let (module_comp, rest) = match names.as_slice() {
            ["process", "library", ..] => (&comps[1], &comps[2..]),
            ["process", ..] => (&comps[0], &comps[1..]),
            _ => return session(Vec::new()), // pass 1 reported the shape
        };
        let rest_names: Vec<&str> = rest.iter().map(|c| c.name.name.as_str()).collect();
        let module_path = |m: &Module| m.path.clone();
        match rest_names.as_slice() {
            ["begin"] | ["end"] | ["thread", "begin"] | ["thread", "end"] => {
                let module = match module_comp.arg {
                    None => None,
                    Some(_) => match self.module_for(module_comp) {
                        Ok(m) => Some(module_path(&m)),
                        Err(d) => {
                            diags.push(d);
                            return session(Vec::new());
                        }
                    },
                };
                let p = match rest_names.as_slice() {
                    ["begin"] => Point::ProcessBegin { module },
                    ["end"] => Point::ProcessEnd { module },
                    ["thread", "begin"] => Point::ThreadBegin { module },
                    _ => Point::ThreadEnd { module },
                };
                if rest_names.as_slice() == ["end"] {
                    // `$status` exists there.
                    return Resolved { points: vec![p], kind: BodyKind::ProcessEnd };
                }
                session(vec![p])
            }
            ["mark"] | ["provider", "mark"] => {
                let module = match self.module_for(module_comp) {
                    Ok(m) => m,
                    Err(d) => {
                        if !ex.point.optional {
                            diags.push(d);
                        }
                        return Resolved { points: Vec::new(), kind: BodyKind::Mark };
                    }
                };
                let provider = match rest_names.as_slice() {
                    ["provider", _] => match rest[0].arg.as_deref().map(|a| &a.kind) {
                        Some(A::Str(p)) => Some((String::from_utf8_lossy(p).into_owned(), rest[0].span)),
                        _ => {
                            diags.push(
                                Diagnostic::error(Code::BadValue, rest[0].span, "`provider` needs a name string")
                                    .with_label("no provider to match"),
                            );
                            return Resolved { points: Vec::new(), kind: BodyKind::Mark };
                        }
                    },
                    _ => None,
                };
                let name_comp = &rest[rest.len() - 1];
                let points =
                    self.marks(&module, provider.as_ref().map(|(p, s)| (p.as_str(), *s)), name_comp, ex, diags);
                Resolved { points, kind: BodyKind::Mark }
            }
            ["statement", ..] => {
                let module = match self.module_for(module_comp) {
                    Ok(m) => m,
                    Err(d) => {
                        diags.push(d);
                        return session(Vec::new());
                    }
                };
                let nearest = rest.len() > 1;
                let points = self.statement(&module, &rest[0], nearest, ex, diags);
                Resolved { points, kind: BodyKind::Function }
            }
            ["function", suffix @ ..] => {
                let module = match self.module_for(module_comp) {
                    Ok(m) => m,
                    Err(d) => {
                        if !ex.point.optional {
                            diags.push(d);
                        }
                        return Resolved { points: Vec::new(), kind: BodyKind::FunctionEntry };
                    }
                };
                let ret = suffix == ["return"];
                let itrace = suffix == ["itrace"];
                let exported_only = suffix == ["exported"];
                let kind = if ret { BodyKind::FunctionReturn } else { BodyKind::FunctionEntry };
                if suffix == ["inline"] {
                    if !ex.point.optional {
                        diags.push(
                            Diagnostic::error(Code::NoMatch, rest[1].span, "inlined instances need debug information")
                                .with_label("telco-stap reads symbol tables only")
                                .with_help(
                                    "probe the function's out-of-line copy with `.function(\"name\")` or `.call`",
                                ),
                        );
                    }
                    return Resolved { points: Vec::new(), kind };
                }
                if suffix == ["label"] {
                    let points = self.labels(&module, &rest[0], &rest[1], ex, diags);
                    return Resolved { points, kind: BodyKind::Function };
                }
                let mut points = self.functions(&module, &rest[0], ret, itrace, exported_only, ex, diags);
                // `process("P").library("L")`: L as P loads it, in the
                // processes running P only (by path, the program's).
                if let (["process", "library", ..], Some(_)) = (names.as_slice(), &comps[0].arg) {
                    if let Ok(exe) = self.module_for(&comps[0]) {
                        for p in &mut points {
                            if let Point::Function(f) = p {
                                f.only_exe = Some(exe.path.clone());
                            }
                        }
                    }
                }
                Resolved { points, kind }
            }
            _ => session(Vec::new()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn functions(
        &mut self,
        module: &Module,
        comp: &Component,
        ret: bool,
        itrace: bool,
        exported_only: bool,
        ex: &Expanded<'_>,
        diags: &mut Vec<Diagnostic>,
    ) -> Vec<Point> {
        let pattern = match comp.arg.as_deref().map(|a| &a.kind) {
            Some(A::Str(s)) => String::from_utf8_lossy(s).into_owned(),
            // Pass 1 checked the argument's shape; a script argument that
            // could not be substituted was reported. Never resolve silently
            // to nothing.
            _ => {
                diags.push(
                    Diagnostic::error(Code::BadValue, comp.span, "`function` needs a pattern string")
                        .with_label("no pattern to match"),
                );
                return Vec::new();
            }
        };
        let (found, skipped) = module.match_functions(&pattern);
        let wildcard = pattern.contains(['*', '?', '[']);
        let mut points = Vec::new();
        let mut ifuncs = Vec::new();
        // Return probes refused: (name, why).
        let mut no_return = Vec::new();
        // Entries no jump can take safely: (name, why).
        let mut unhookable: Vec<(String, String)> = Vec::new();
        // Go functions no probe can take safely: (name, why).
        let mut go: Vec<(String, String)> = Vec::new();
        for f in found {
            if exported_only && !f.global {
                continue;
            }
            let go_site = if module.go_function(f.addr) && !self.listing {
                let site = if itrace {
                    Err("`.itrace` follows a thread, and goroutines move between threads".to_string())
                } else {
                    module.go_entry(f, ret)
                };
                match site {
                    Ok(site) => Some(site),
                    Err(why) => {
                        go.push((f.display_name().to_string(), why));
                        continue;
                    }
                }
            } else {
                None
            };
            if f.ifunc && go_site.is_none() {
                ifuncs.push(f);
                continue;
            }
            if ret && go_site.is_none() {
                if let Some(why) = module.no_return_address(f) {
                    no_return.push((f.display_name().to_string(), why));
                    continue;
                }
            }
            // No jump fits, nor a hop: a trap where one fits. (A Go
            // function's jump displaces its stack check, which fits.)
            let (hop, trap) = match go_site.as_ref().map_or_else(|| module.short_hop(f), |_| Ok(None)) {
                Ok(h) => (h, false),
                Err(why) => match module.entry_trap(f) {
                    Ok(()) => (None, true),
                    Err(no) => {
                        unhookable.push((f.display_name().to_string(), format!("{why}; nor does a trap fit ({no})")));
                        continue;
                    }
                },
            };
            let (symbol, demangled) = module.matched_name(&pattern, f);
            points.push(Point::Function(FunctionPoint {
                module: module.path.clone(),
                symbol,
                demangled,
                addr: f.addr,
                size: f.size,
                file_offset: f.file_offset,
                ret,
                itrace,
                only_exe: None,
                hop,
                ra_saved: if ret && go_site.is_none() { module.return_address_saved(f) } else { None },
                trap,
                go: go_site,
            }));
        }
        if !go.is_empty() {
            let names: Vec<&str> = go.iter().map(|(n, _)| n.as_str()).collect();
            let msg = format!(
                "cannot probe Go function{} {}: {}",
                if names.len() == 1 { "" } else { "s" },
                list_names(&names),
                go[0].1
            );
            let d = if ex.point.optional || (wildcard && !points.is_empty()) {
                Diagnostic::warning(Code::Unsupported, comp.span, format!("skipped: {msg}"))
            } else {
                Diagnostic::error(Code::Unsupported, comp.span, msg)
            };
            diags.push(
                d.with_label("a Go function (the module's .gopclntab lists it)")
                    .with_help("`timer.profile` profiles Go programs, named by their Go functions"),
            );
        }
        if !unhookable.is_empty() {
            let names: Vec<&str> = unhookable.iter().map(|(n, _)| n.as_str()).collect();
            let msg = format!("cannot probe {}: {}", list_names(&names), unhookable[0].1);
            let d = if wildcard && !points.is_empty() {
                Diagnostic::warning(Code::Unsupported, comp.span, format!("skipped: {msg}"))
            } else {
                Diagnostic::error(Code::Unsupported, comp.span, msg)
            };
            diags.push(d.with_label("not probed"));
        }
        if !ifuncs.is_empty() {
            let names: Vec<&str> = ifuncs.iter().map(|f| f.display_name()).collect();
            let candidates: Vec<String> = ifuncs
                .iter()
                .flat_map(|f| module.ifunc_candidates(f))
                .map(|c| c.display_name().to_string())
                .take(6)
                .collect();
            let help = if candidates.is_empty() && module.stripped {
                format!(
                    "{} has no symbol table (it is stripped), so its implementations have no names to probe; \
                     probe the callers instead, or install the library's debug symbols",
                    module.path.display()
                )
            } else if candidates.is_empty() {
                "probe the implementation the ifunc selects instead".to_string()
            } else {
                format!(
                    "probe an implementation instead, e.g. {}",
                    candidates.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
                )
            };
            let msg = format!(
                "{} {}: the implementation is chosen when the library loads, so {} not the code that runs",
                list_names(&names),
                if names.len() == 1 { "is an ifunc" } else { "are ifuncs" },
                if names.len() == 1 { "its symbol is" } else { "their symbols are" }
            );
            // Named exactly, it is an error; caught by a wildcard, a warning.
            let d = if ex.point.optional || (wildcard && !points.is_empty()) {
                Diagnostic::warning(Code::Ifunc, comp.span, format!("skipped: {msg}"))
            } else {
                Diagnostic::error(Code::Ifunc, comp.span, msg)
            };
            diags.push(d.with_label("not probed").with_help(help));
        }
        if !no_return.is_empty() {
            // A return probe here would take over a word that is not a
            // return address: the target would crash. Named exactly, the
            // probe point is an error; caught by a wildcard, a warning.
            let (name, why) = &no_return[0];
            let msg = if no_return.len() == 1 {
                format!("no return probe on `{name}`: {why}")
            } else {
                // One example per reason, the rest counted.
                let names: Vec<&str> = no_return.iter().map(|(n, _)| n.as_str()).collect();
                let mut reasons: Vec<(
                    std::mem::Discriminant<crate::arch::native::entry::NoReturnAddress>,
                    &str,
                    String,
                    usize,
                )> = Vec::new();
                for (n, w) in &no_return {
                    match reasons.iter_mut().find(|r| r.0 == std::mem::discriminant(w)) {
                        Some(r) => r.3 += 1,
                        None => reasons.push((std::mem::discriminant(w), n, w.to_string(), 1)),
                    }
                }
                let why: Vec<String> = reasons
                    .iter()
                    .map(|(_, n, w, count)| match count {
                        1 => format!("`{n}`: {w}"),
                        c => format!("{c} like `{n}`: {w}"),
                    })
                    .collect();
                format!(
                    "no return probe on {} functions that a return probe would break: {} ({})",
                    no_return.len(),
                    list_names(&names),
                    why.join("; ")
                )
            };
            let d = if ex.point.optional || wildcard {
                Diagnostic::warning(Code::NoReturn, comp.span, format!("skipped: {msg}"))
            } else {
                Diagnostic::error(Code::NoReturn, comp.span, msg)
            };
            diags.push(
                d.with_label("not probed on return")
                    .with_help("probe its entry instead (`.function(\"NAME\")` without `.return`)"),
            );
        }
        if !skipped.is_empty() && !wildcard {
            for s in skipped.iter().take(3) {
                diags.push(
                    Diagnostic::note(Code::NoMatch, comp.span, format!("`{}` is not probeable: {}", s.name, s.reason))
                        .with_label("skipped"),
                );
            }
        }
        if points.is_empty() && ifuncs.is_empty() && no_return.is_empty() && go.is_empty() && !ex.point.optional {
            let mut d = Diagnostic::error(
                Code::NoMatch,
                comp.span,
                format!("no function matches `{pattern}` in {}", module.path.display()),
            )
            .with_label(if module.stripped {
                "searched the dynamic symbols (the file is stripped)"
            } else {
                "searched the symbol table"
            });
            if !wildcard {
                let names = module.functions.iter().flat_map(|f| f.names.iter().map(String::as_str));
                if let Some(s) = crate::suggest::closest(&pattern, names) {
                    d = d.with_help(format!("did you mean `{s}`?"));
                }
            }
            if !skipped.is_empty() {
                d = d.with_help(format!("{} symbol(s) matched but are not functions with a size", skipped.len()));
            }
            diags.push(d.with_secondary(ex.point.span, "in this probe point"));
        }
        points
    }

    /// `.function("F").label("L")`: each label matching L (DWARF's
    /// `DW_TAG_label`) in the functions matching F, out-of-line or inlined,
    /// probed as a statement at its address.
    fn labels(
        &mut self,
        module: &Module,
        func: &Component,
        label: &Component,
        ex: &Expanded<'_>,
        diags: &mut Vec<Diagnostic>,
    ) -> Vec<Point> {
        let text = |c: &Component| match c.arg.as_deref().map(|a| &a.kind) {
            Some(A::Str(s)) => String::from_utf8_lossy(s).into_owned(),
            _ => "*".to_string(),
        };
        let (f, l) = (text(func), text(label));
        // A function named with its file (`f@file.c`): the name is enough
        // to find its labels.
        let f = f.split_once('@').map_or(f.as_str(), |(n, _)| n).to_string();
        let found = match module.debug() {
            Ok(Some(d)) => d.labels(&f, &l),
            Ok(None) => {
                diags.push(
                    Diagnostic::error(
                        Code::NoMatch,
                        label.span,
                        format!("labels need debug information ({})", module.path.display()),
                    )
                    .with_label("the module has no DWARF")
                    .with_help("build it with -g, or install its debug file"),
                );
                return Vec::new();
            }
            Err(why) => {
                diags.push(Diagnostic::error(Code::NoMatch, label.span, why).with_label("reading the DWARF"));
                return Vec::new();
            }
        };
        if found.is_empty() {
            if !ex.point.optional {
                diags.push(
                    Diagnostic::error(
                        Code::NoMatch,
                        label.span,
                        format!("no label matching `{l}` in a function matching `{f}`"),
                    )
                    .with_label("for this label"),
                );
            }
            return Vec::new();
        }
        let sites = found
            .into_iter()
            .map(|(function, name, addr)| (format!("label {name} in {function}"), addr, function, Some(name)));
        statements_at(module, sites, label.span, diags)
    }

    /// `func@file:FIRST-LAST` and `func@file:*`: each line with code in
    /// that range, at its first instruction in each matching function. A
    /// line where no jump can be written is skipped with a warning (as a
    /// marker's site by wildcard); none found, or none placed, is an error.
    #[allow(clippy::too_many_arguments)]
    fn statement_lines(
        &mut self,
        module: &Module,
        comp: &Component,
        func: &str,
        file: &str,
        (lo, hi): (u64, u64),
        ex: &Expanded<'_>,
        diags: &mut Vec<Diagnostic>,
    ) -> Vec<Point> {
        // (0, 0): each function's first line only.
        let entries = (lo, hi) == (0, 0);
        let lines = match (lo, hi) {
            (0, 0) => "its first line".to_string(),
            (_, u64::MAX) => "any line".to_string(),
            _ => format!("lines {lo}-{hi}"),
        };
        let found = match module.line_range_addresses(
            func,
            file,
            if entries { 0 } else { lo },
            if entries { u64::MAX } else { hi },
        ) {
            Ok(found) if entries && !found.is_empty() => {
                // The lowest address of each function.
                let mut first: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
                for (line, addr, name) in found {
                    let e = first.entry(name).or_insert((line, addr));
                    if addr < e.1 {
                        *e = (line, addr);
                    }
                }
                first.into_iter().map(|(name, (line, addr))| (line, addr, name)).collect()
            }
            Ok(found) if !found.is_empty() => found,
            Ok(_) => {
                if !ex.point.optional {
                    diags.push(
                        Diagnostic::error(
                            Code::NoMatch,
                            comp.span,
                            format!("no function matching `{func}` has code on {lines} of `{file}`"),
                        )
                        .with_label("for this statement"),
                    );
                }
                return Vec::new();
            }
            Err(why) => {
                if !ex.point.optional {
                    diags.push(Diagnostic::error(Code::NoMatch, comp.span, why).with_label("for this statement"));
                }
                return Vec::new();
            }
        };
        let sites = found
            .into_iter()
            .map(|(line, addr, name)| (format!("line {line} of `{file}` in {name}"), addr, name, None));
        statements_at(module, sites, comp.span, diags)
    }

    fn statement(
        &mut self,
        module: &Module,
        comp: &Component,
        nearest: bool,
        ex: &Expanded<'_>,
        diags: &mut Vec<Diagnostic>,
    ) -> Vec<Point> {
        // "func@file.c:LINE": the line's first instruction in each matching
        // function (DWARF line tables).
        if let Some(A::Str(s)) = comp.arg.as_deref().map(|a| &a.kind) {
            let s = String::from_utf8_lossy(s).into_owned();
            if let Some((func, place)) = s.split_once('@') {
                // Lines by range or all of them: `func@file:N-M`, `func@file:*`.
                let range = place.rsplit_once(':').and_then(|(f, l)| match l.trim() {
                    "*" => Some((f, 0, u64::MAX)),
                    l => {
                        let (a, b) = l.split_once('-')?;
                        let (a, b) = (a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?);
                        (a <= b).then_some((f, a, b))
                    }
                });
                if let Some((file, lo, hi)) = range {
                    let func = if func.is_empty() { "*" } else { func };
                    return self.statement_lines(module, comp, func, file, (lo, hi), ex, diags);
                }
                // `func@file` without a line: each matching function of
                // the file, at its first instruction (SystemTap's
                // statement at a function).
                if !place.contains(':') {
                    let func = if func.is_empty() { "*" } else { func };
                    return self.statement_lines(module, comp, func, place, (0, 0), ex, diags);
                }
                let Some((file, line)) =
                    place.rsplit_once(':').and_then(|(f, l)| Some((f, l.trim().parse::<u64>().ok()?)))
                else {
                    diags.push(
                        Diagnostic::error(Code::BadValue, comp.span, format!("cannot read a line number in `{s}`"))
                            .with_label("expected \"function@file.c:LINE\", \":FIRST-LAST\" or \":*\""),
                    );
                    return Vec::new();
                };
                let func = if func.is_empty() { "*" } else { func };
                let found = match module.line_addresses(func, file, line, nearest) {
                    Ok((_, found)) if !found.is_empty() => found,
                    Ok(_) => {
                        if !ex.point.optional {
                            diags.push(
                                Diagnostic::error(
                                    Code::NoMatch,
                                    comp.span,
                                    format!("no function matching `{func}` has code for line {line} of `{file}`"),
                                )
                                .with_label("for this statement"),
                            );
                        }
                        return Vec::new();
                    }
                    Err(why) => {
                        if !ex.point.optional {
                            diags.push(
                                Diagnostic::error(Code::NoMatch, comp.span, why).with_label("for this statement"),
                            );
                        }
                        return Vec::new();
                    }
                };
                let mut points = Vec::new();
                for (addr, name) in found {
                    match module.plan_site(addr) {
                        Ok((patch, _)) => points.push(Point::Statement {
                            module: module.path.clone(),
                            addr,
                            function: Some(name),
                            site: site_of(&patch),
                            label: None,
                        }),
                        Err(why) => diags.push(
                            Diagnostic::error(
                                Code::Unsupported,
                                comp.span,
                                format!("cannot probe line {line} of `{file}` in {name} (at {addr:#x}): {why}"),
                            )
                            .with_label("no safe place for the jump here"),
                        ),
                    }
                }
                return points;
            }
        }
        let (addr, function) = match comp.arg.as_deref().map(|a| &a.kind) {
            Some(A::Int(a)) => {
                let a = *a as u64;
                (a, module.function_at(a).map(|f| f.display_name().to_string()))
            }
            Some(A::Str(s)) => {
                // "function+offset"
                let s = String::from_utf8_lossy(s).into_owned();
                let (name, off) = match s.split_once('+') {
                    Some((n, o)) => (n.trim().to_string(), crate::lexer::parse_int(o.trim()).ok()),
                    None => (s.trim().to_string(), Some(0)),
                };
                let Some(off) = off.filter(|o| *o >= 0) else {
                    diags.push(
                        Diagnostic::error(Code::BadValue, comp.span, format!("cannot read the offset in `{s}`"))
                            .with_label("expected \"function+offset\""),
                    );
                    return Vec::new();
                };
                let (found, _) = module.match_functions(&name);
                let Some(f) = found.first() else {
                    if !ex.point.optional {
                        diags.push(
                            Diagnostic::error(
                                Code::NoMatch,
                                comp.span,
                                format!("no function `{name}` in {}", module.path.display()),
                            )
                            .with_label("for this statement"),
                        );
                    }
                    return Vec::new();
                };
                if off as u64 >= f.size {
                    diags.push(
                        Diagnostic::error(
                            Code::BadValue,
                            comp.span,
                            format!("offset {off} is past the end of `{name}` ({} bytes)", f.size),
                        )
                        .with_label("outside the function"),
                    );
                    return Vec::new();
                }
                (f.addr + off as u64, Some(f.display_name().to_string()))
            }
            _ => return Vec::new(),
        };
        let (patch, name) = match module.plan_site(addr) {
            Ok(p) => p,
            Err(why) => {
                diags.push(
                    Diagnostic::error(
                        Code::Unsupported,
                        comp.span,
                        format!("cannot probe {addr:#x} in {}: {why}", module.path.display()),
                    )
                    .with_label("no safe place for the jump here")
                    .with_help(
                        "use a module-relative address of an instruction inside a function (as `objdump -d` shows), \
                         or \"function+offset\"",
                    ),
                );
                return Vec::new();
            }
        };
        let site = site_of(&patch);
        vec![Point::Statement { module: module.path.clone(), addr, function: function.or(name), site, label: None }]
    }

    /// `.mark("NAME")` (with `provider`, `.provider("PROV")`): the module's
    /// SDT markers whose names match the globs.
    fn marks(
        &mut self,
        module: &Module,
        provider: Option<(&str, crate::span::Span)>,
        name_comp: &Component,
        ex: &Expanded<'_>,
        diags: &mut Vec<Diagnostic>,
    ) -> Vec<Point> {
        let Some(A::Str(pattern)) = name_comp.arg.as_deref().map(|a| &a.kind) else {
            diags.push(
                Diagnostic::error(Code::BadValue, name_comp.span, "`mark` needs a name string")
                    .with_label("no marker name to match"),
            );
            return Vec::new();
        };
        let pattern = String::from_utf8_lossy(pattern).into_owned();
        let wildcard = pattern.contains(['*', '?', '[']);
        let mut points: Vec<Point> = Vec::new();
        // Sites that cannot be probed: (name, where, why).
        let mut refused: Vec<(String, String, String)> = Vec::new();
        for m in &module.markers {
            if provider.is_some_and(|(p, _)| !crate::glob::glob_match(p, &m.provider))
                || !crate::glob::glob_match(&pattern, &m.name)
                || points.iter().any(|p| matches!(p, Point::Mark(q) if q.addr == m.addr))
            {
                continue;
            }
            // Said once every site is looked at (`refused`).
            let refuse = |refused: &mut Vec<(String, String, String)>, why: String| {
                refused.push((m.name.clone(), format!("{}:{} at {:#x}", m.provider, m.name, m.addr), why));
            };
            let mut args = match crate::elf::sdt::parse_args(&m.args) {
                Ok(a) => a,
                Err(why) => {
                    refuse(&mut refused, format!("its argument {why}"));
                    continue;
                }
            };
            // Symbolic operands: the symbols of the marker's module.
            let mut unknown = None;
            for a in &mut args {
                if let crate::arch::ArgLoc::Symbol { name, offset } = &a.loc {
                    match module.symbol_address(name) {
                        Some(at) => a.loc = crate::arch::ArgLoc::Link(at.wrapping_add(*offset as u64)),
                        None => unknown = Some(name.clone()),
                    }
                }
            }
            if let Some(name) = unknown {
                refuse(
                    &mut refused,
                    format!("its argument names `{name}`, which is not in the module's symbol tables"),
                );
                continue;
            }
            let (patch, function) = match module.plan_site(m.addr) {
                Ok(p) => p,
                Err(why) => {
                    refuse(&mut refused, why);
                    continue;
                }
            };
            points.push(Point::Mark(crate::program::MarkPoint {
                module: module.path.clone(),
                provider: m.provider.clone(),
                name: m.name.clone(),
                addr: m.addr,
                semaphore: (m.semaphore != 0).then_some(m.semaphore),
                args,
                args_text: m.args.clone(),
                pie: module.kind == crate::elf::ModuleKind::PositionIndependent,
                function,
                site: site_of(&patch),
            }));
        }
        // A site that cannot be probed is skipped with a warning when the
        // pattern is a wildcard or other sites of the marker are probed
        // (a marker at several places in the code: those that can be),
        // and refused when it is the only one of its name.
        for (name, at, why) in refused {
            let others = points.iter().filter(|p| matches!(p, Point::Mark(q) if q.name == name)).count();
            let d = if wildcard || others > 0 {
                let also = if !wildcard { format!(" (its {others} other site(s) are probed)") } else { String::new() };
                Diagnostic::warning(
                    Code::Unsupported,
                    name_comp.span,
                    format!("marker `{name}` skipped at one site{also}: {why}"),
                )
            } else {
                Diagnostic::error(Code::Unsupported, name_comp.span, format!("cannot probe marker `{name}`: {why}"))
            };
            diags.push(d.with_label(at));
        }
        if points.is_empty() && !ex.point.optional && !diags.iter().any(|d| d.span == name_comp.span) {
            let mut names: Vec<String> = module.markers.iter().map(|m| format!("{}:{}", m.provider, m.name)).collect();
            names.sort();
            names.dedup();
            let help = if names.is_empty() {
                format!("{} has no SDT markers (no .note.stapsdt section)", module.path.display())
            } else {
                let shown: Vec<&str> = names.iter().map(String::as_str).collect();
                format!("its markers: {}", list_names(&shown))
            };
            let what = match provider {
                Some((p, _)) => format!("provider `{p}`, marker `{pattern}`"),
                None => format!("marker `{pattern}`"),
            };
            diags.push(
                Diagnostic::error(Code::NoMatch, name_comp.span, format!("no {what} in {}", module.path.display()))
                    .with_label("matches no SDT marker")
                    .with_help(help),
            );
        }
        points
    }
}

impl Resolver<'_> {
    /// [`Resolver::resolve`] once per library of the target matching
    /// `glob` (its soname or file name), the points together.
    fn resolve_library_glob(&mut self, ex: &Expanded<'_>, glob: &str, diags: &mut Vec<Diagnostic>) -> Resolved {
        let span = ex.point.components[1].span;
        let libs: Vec<Rc<Module>> = match self.target_modules() {
            Ok(t) => t.into_iter().skip(1).collect(),
            Err(e) => {
                diags.push(
                    Diagnostic::error(Code::ModuleNotFound, span, format!("cannot load the target's modules: {e}"))
                        .with_label("needed to match this library glob"),
                );
                return Resolved { points: Vec::new(), kind: BodyKind::Session };
            }
        };
        let matching: Vec<Rc<Module>> = libs
            .iter()
            .filter(|m| {
                let file = m.path.file_name().and_then(|f| f.to_str()).unwrap_or("");
                crate::glob::glob_match(glob, file)
                    || m.soname.as_deref().is_some_and(|s| crate::glob::glob_match(glob, s))
            })
            .cloned()
            .collect();
        let mut all = Resolved { points: Vec::new(), kind: BodyKind::Session };
        for m in &matching {
            let mut one = ex.clone();
            let path = m.path.display().to_string();
            if let Some(arg) = one.point.components[1].arg.as_mut() {
                arg.kind = A::Str(path.into_bytes());
            }
            // Each library without the point (no such function) is quiet:
            // the glob as a whole must match somewhere.
            one.point.optional = true;
            let r = self.resolve(&one, diags);
            all.kind = r.kind;
            all.points.extend(r.points);
        }
        if all.points.is_empty() && !ex.point.optional {
            let names: Vec<&str> = libs.iter().filter_map(|m| m.path.file_name().and_then(|f| f.to_str())).collect();
            let what = if matching.is_empty() {
                format!("no library of the target matches `{glob}`")
            } else {
                format!("the {} libraries matching `{glob}` have no such point", matching.len())
            };
            diags.push(
                Diagnostic::error(Code::ModuleNotFound, span, what)
                    .with_label("library glob")
                    .with_help(format!("the target's libraries: {}", list_names(&names))),
            );
        }
        all
    }
}

/// Statement points at `sites` ((what, address, function)), each where
/// pass 2 finds a jump or a trap; the others skipped with a warning, or an
/// error when none is left.
fn statements_at(
    module: &Module,
    sites: impl Iterator<Item = (String, u64, String, Option<String>)>,
    span: crate::Span,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Point> {
    let mut points = Vec::new();
    let mut refused = Vec::new();
    for (what, addr, function, label) in sites {
        match module.plan_site(addr) {
            Ok((patch, _)) => points.push(Point::Statement {
                module: module.path.clone(),
                addr,
                function: Some(function),
                site: site_of(&patch),
                label,
            }),
            Err(why) => refused.push(format!("{what} (at {addr:#x}): {why}")),
        }
    }
    for why in &refused {
        let d = if points.is_empty() {
            Diagnostic::error(Code::Unsupported, span, format!("cannot probe {why}"))
        } else {
            Diagnostic::warning(Code::Unsupported, span, format!("skipped {why}"))
        };
        diags.push(d.with_label("no safe place for a probe here"));
    }
    points
}

fn module_is(m: &Module, name: &str) -> bool {
    if m.soname.as_deref() == Some(name) {
        return true;
    }
    // A glob (`process("/lib*/libc.so.*")`, as SystemTap's: `*` crosses
    // `/`): the module's path, also as the path before /usr was merged
    // (`/lib/…` for `/usr/lib/…`), or its file name.
    if name.contains(['*', '?', '[']) {
        let path = m.path.to_string_lossy();
        let unmerged = path.strip_prefix("/usr").filter(|p| p.starts_with("/lib") || p.starts_with("/bin"));
        let file = m.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        return crate::glob::glob_match(name, &path)
            || unmerged.is_some_and(|p| crate::glob::glob_match(name, p))
            || (!name.contains('/') && crate::glob::glob_match(name, &file));
    }
    let file = m.path.file_name().and_then(|f| f.to_str()).unwrap_or("");
    file == name || (name.contains('/') && m.path == std::path::Path::new(name))
}

fn list_names(names: &[&str]) -> String {
    let shown: Vec<String> = names.iter().take(4).map(|n| format!("`{n}`")).collect();
    if names.len() > 4 {
        format!("{} and {} more", shown.join(", "), names.len() - 4)
    } else {
        shown.join(", ")
    }
}

/// Where pass 2 planned a site's jump, as the program keeps it.
fn site_of(p: &crate::arch::native::sites::Patch) -> crate::program::Site {
    crate::program::Site {
        file_offset: p.file_offset,
        displaced: p.displaced,
        lead: p.lead,
        call: p.call,
        pad: p.pad,
        trap: p.trap,
    }
}
