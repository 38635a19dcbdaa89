//! Pass 2: elaboration. The parsed script plus the tapsets it uses become a
//! resolved, typed [`Program`]: aliases expanded, names resolved, types
//! inferred over the whole program, probe points resolved to modules and
//! addresses.
//!
//! Entry point: [`elaborate`]. It never touches a live process; facts about
//! running processes come through [`points::TargetQuery`].

pub mod alias;
pub mod dwarf_vars;
pub mod lifecycle;
pub mod lower;
pub mod points;
mod private;
pub mod show;
pub mod tapsets;
pub mod walk;
mod warnings;

use crate::ast::{Item, Script};
use crate::diag::Diagnostic;
use crate::parse::{parse, ParseConfig};
use crate::program::Program;
use crate::span::{FileId, SourceMap};
use lower::{BodyKind, Lowerer, ProbeBody};
pub use points::{NoProcesses, TargetQuery, TargetSpec};
pub use tapsets::TapsetSource;

/// Everything pass 2 needs besides the parsed script.
pub struct Config<'a> {
    pub parse: &'a ParseConfig,
    /// Tapset sources: the built-in ones and those from `-I` directories.
    pub tapsets: Vec<TapsetSource>,
    pub target: TargetSpec,
    pub query: &'a dyn TargetQuery,
    /// Script arguments (`$1`, `@1`, ...).
    pub args: &'a [String],
    /// `-g`: probes may write target state.
    pub guru: bool,
    /// `--skip-badvars`: context variables that cannot be found or read
    /// are 0 (with a warning).
    pub skip_badvars: bool,
    /// `-u`: every function of the script is compiled, called or not, and
    /// nothing is said elided.
    pub unoptimized: bool,
    /// `-G NAME=VALUE`: the initial values of globals, as given.
    pub set_globals: &'a [(String, String)],
}

/// Parse every tapset; a broken tapset is reported like a broken script.
fn parse_tapsets(sources: &mut SourceMap, cfg: &Config<'_>, diags: &mut Vec<Diagnostic>) -> Vec<(FileId, Script)> {
    let mut out = Vec::with_capacity(cfg.tapsets.len());
    for t in &cfg.tapsets {
        let id = sources.add(t.name.clone(), t.text.clone());
        let (s, ds) = parse(sources, id, cfg.parse);
        diags.extend(ds);
        out.push((id, s));
    }
    out
}

/// Run pass 2. Returns the program if there were no errors; every
/// diagnostic goes to `diags` either way.
pub fn elaborate(
    sources: &mut SourceMap,
    script_file: FileId,
    script: &Script,
    cfg: &Config<'_>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Program> {
    // Each file's private names renamed apart first.
    let tapset_scripts: Vec<(FileId, Script)> = parse_tapsets(sources, cfg, diags)
        .into_iter()
        .map(|(id, s)| (id, private::privatize(&s, id).unwrap_or(s)))
        .collect();
    let own = private::privatize(script, script_file);
    let script = own.as_ref().unwrap_or(script);
    let mut all: Vec<(FileId, &Script)> = vec![(script_file, script)];
    all.extend(tapset_scripts.iter().map(|(id, s)| (*id, s)));
    let chosen: Vec<(FileId, &Script)> = tapsets::select(&all).into_iter().map(|i| all[i]).collect();
    let errors_before = diags.iter().filter(|d| d.severity == crate::diag::Severity::Error).count();
    diags.extend(tapsets::duplicates(&chosen));

    // Functions nothing calls are not compiled (as in SystemTap); the
    // script's own get a warning, unused tapset functions go quietly.
    let used = used_functions(&chosen);

    // Declarations.
    let mut lowerer = Lowerer::new(cfg.args, cfg.guru);
    lowerer.skip_badvars = cfg.skip_badvars;
    lowerer.script_file = Some(script_file);
    lowerer.set_globals = cfg.set_globals;
    let mut alias_defs = Vec::new();
    for (file, s) in &chosen {
        for item in &s.items {
            match item {
                Item::Global(g) => g.vars.iter().for_each(|v| lowerer.declare_global(v, diags)),
                Item::Function(f)
                    if used.contains(f.name.name.as_str()) || (cfg.unoptimized && *file == script_file) =>
                {
                    lowerer.know_function(&f.name.name);
                    lowerer.declare_function(f, diags)
                }
                Item::Function(f) => {
                    lowerer.know_function(&f.name.name);
                    if *file == script_file {
                        diags.push(
                            Diagnostic::warning(
                                crate::diag::Code::Undefined,
                                f.name.span,
                                format!("function `{}` is never called; it is not compiled", f.name.name),
                            )
                            .with_label("unused"),
                        );
                    }
                }
                Item::Alias(a) => alias_defs.push(a.as_ref()),
                Item::Probe(_) => {}
            }
        }
    }
    for (name, _) in cfg.set_globals {
        if !lowerer.has_global(name) {
            diags.push(Diagnostic::error(
                crate::diag::Code::Undefined,
                crate::span::Span::default(),
                format!("-G {name}=...: the script has no global `{name}`"),
            ));
        }
    }
    let every_alias = tapset_scripts.iter().flat_map(|(_, s)| s.items.iter()).filter_map(|i| match i {
        Item::Alias(a) => Some(a.name.shape()),
        _ => None,
    });
    let aliases = alias::Aliases::new(alias_defs).with_suggestions(every_alias);

    // Probes: expand aliases, resolve points; each expanded point is one
    // handler with its own scope (prologues, the body, epilogues).
    let mut resolver = points::Resolver::new(cfg.target.clone(), cfg.query);
    let mut bodies: Vec<ProbeBody<'_>> = Vec::new();
    let mut shells = Vec::new();
    for (_, s) in &chosen {
        for item in &s.items {
            let Item::Probe(p) = item else { continue };
            // Two names of one function (`open` and `open64` in glibc) must
            // not make one call fire the probe twice.
            let mut seen = std::collections::HashSet::new();
            for written in &p.points {
                let mut resolved_any = false;
                let via_alias = written.components.first().is_some_and(|c| !alias::is_builtin_family(&c.name.name));
                for mut ex in aliases.expand(written, diags) {
                    if !substitute_script_args(&mut ex.point, cfg.args, diags) {
                        continue;
                    }
                    if via_alias {
                        // Pass 1 checked what was written; check what it became.
                        let before = diags.len();
                        crate::validate::check_probe_point(&ex.point, diags);
                        if diags.len() > before {
                            for d in &mut diags[before..] {
                                d.secondary.push(crate::diag::Label {
                                    span: written.span,
                                    message: format!("`{}` expands to this", written.shape()),
                                });
                            }
                            continue;
                        }
                    }
                    let errors = diags.iter().filter(|d| d.severity == crate::diag::Severity::Error).count();
                    let mut r = resolver.resolve(&ex, diags);
                    resolved_any |= !r.points.is_empty();
                    // A point that failed to resolve: its body, lowered for
                    // no kind of point, would only add follow-on errors
                    // (`@entry` outside a return probe, ...).
                    let failed = diags.iter().filter(|d| d.severity == crate::diag::Severity::Error).count() > errors;
                    if r.points.is_empty() && failed {
                        continue;
                    }
                    r.points.retain(|pt| match pt {
                        crate::program::Point::Function(f) => seen.insert((f.module.clone(), f.addr, f.ret, f.itrace)),
                        _ => true,
                    });
                    let mut blocks = ex.before.clone();
                    blocks.push(&p.body);
                    blocks.extend(ex.after.iter().copied());
                    // The alias's own conditions are merged into the point.
                    let condition = ex.point.condition.as_deref().cloned();
                    if r.kind == BodyKind::Mark && !r.points.is_empty() {
                        // One body per marker: each reads its own arguments,
                        // and the variables the debugging information says
                        // are visible at the marker (`$name`, as a
                        // statement probe there would).
                        let debug = blocks.iter().any(|b| walk::uses_debug_info(b));
                        let named = if debug { walk::modules_named(&blocks, cfg.args) } else { Vec::new() };
                        for pt in r.points {
                            let mark = match &pt {
                                crate::program::Point::Mark(m) => Some(m.clone()),
                                _ => None,
                            };
                            let site =
                                if debug { debug_site(&mut resolver, &pt, &named).map(std::rc::Rc::new) } else { None };
                            bodies.push(ProbeBody {
                                blocks: blocks.clone(),
                                condition: condition.clone(),
                                kind: r.kind,
                                locals: Default::default(),
                                mark,
                                site,
                            });
                            shells.push((vec![pt], ex.written.clone(), p.span));
                        }
                        continue;
                    }
                    let debug_points = r.kind.at_function();
                    // `$return` alone is typed too where that costs no
                    // extra handler (one point).
                    let typed_return = r.points.len() == 1
                        && r.kind == BodyKind::FunctionReturn
                        && blocks.iter().any(|b| walk::uses_return(b));
                    if debug_points && (typed_return || blocks.iter().any(|b| walk::uses_debug_info(b))) {
                        // One body per site: each reads its variables where
                        // that function's debugging information says.
                        let named = walk::modules_named(&blocks, cfg.args);
                        for pt in r.points {
                            let site = debug_site(&mut resolver, &pt, &named).map(std::rc::Rc::new);
                            bodies.push(ProbeBody {
                                blocks: blocks.clone(),
                                condition: condition.clone(),
                                kind: r.kind,
                                locals: Default::default(),
                                mark: None,
                                site,
                            });
                            shells.push((vec![pt], ex.written.clone(), p.span));
                        }
                        continue;
                    }
                    bodies.push(ProbeBody {
                        blocks,
                        condition,
                        kind: r.kind,
                        locals: Default::default(),
                        mark: None,
                        site: None,
                    });
                    shells.push((r.points, ex.written.clone(), p.span));
                }
                // `!`: once this point matches, the later ones are not tried.
                if written.sufficient && resolved_any {
                    break;
                }
            }
        }
    }
    let (fn_sites, var_modules) = function_sites(&mut resolver, &lowerer.function_blocks(), cfg.args);
    lowerer.fn_sites = fn_sites;
    let (globals, functions, lowered, ds) = lowerer.run(&mut bodies);
    diags.extend(ds);
    let probes: Vec<crate::program::Probe> = shells
        .into_iter()
        .zip(lowered)
        // A point that resolved to nothing (an optional one) has no handler.
        .filter(|((points, _, _), _)| !points.is_empty())
        .map(|((points, written, span), (body, condition, locals))| crate::program::Probe {
            points,
            written,
            condition,
            locals,
            body,
            span,
            lifecycle: None,
        })
        .collect();
    let probes = lifecycle::hooks(probes, &mut resolver, diags);
    let mut errors_after = diags.iter().filter(|d| d.severity == crate::diag::Severity::Error).count();
    if errors_after == errors_before && probes.is_empty() {
        diags.push(
            Diagnostic::error(
                crate::diag::Code::NoMatch,
                crate::span::Span::new(script_file, 0, 0),
                "no probes found: nothing in this script would run",
            )
            .with_label("the script's probe points matched nothing, or it has none")
            .with_help("add a probe (`probe begin { ... }`), or check the optional `?` points"),
        );
        errors_after += 1;
    }
    if errors_after > errors_before {
        return None;
    }
    let files = chosen.iter().map(|(id, _)| sources.get(*id).name.clone()).collect();
    let symbols = symbols_for(&probes, &functions, &mut resolver);
    let legacy_pointer_format = cfg.parse.pp.legacy_pointer_format();
    let program = Program {
        globals,
        functions,
        probes,
        files,
        span_min_ns: 0,
        flight_size: 0,
        symbols,
        legacy_pointer_format,
        var_modules,
    };
    diags.extend(warnings::variable_warnings(&program, sources, cfg.unoptimized));
    Some(program)
}

/// The debugging-information site of a function or statement point.
pub fn debug_site(
    resolver: &mut points::Resolver<'_>,
    pt: &crate::program::Point,
    modules: &[String],
) -> Option<dwarf_vars::Site> {
    use crate::program::Point;
    let (module, pc, entry, ret) = match pt {
        Point::Function(f) => (f.module.clone(), f.addr, true, f.ret),
        Point::Statement { module, addr, .. } => (module.clone(), *addr, false, false),
        Point::Mark(m) => (m.module.clone(), m.addr, false, false),
        _ => return None,
    };
    let m = resolver.module(&module).ok()?;
    let debug = match m.debug() {
        Ok(Some(d)) => Ok(d),
        Ok(None) => Err(format!("{} has no DWARF and no separate debug file was found", module.display())),
        Err(e) => Err(format!("{}: {e}", module.display())),
    };
    let scope = match &debug {
        Ok(d) => d.scope(pc),
        Err(e) => Err(e.clone()),
    };
    let at_entry = entry || scope.as_ref().is_ok_and(|s| s.low_pc == pc);
    // Modules `@cast` and `@var` name, with their debugging information.
    let others = modules
        .iter()
        .map(|name| {
            let d = resolver.module_named(name).and_then(|m| match m.debug() {
                Ok(Some(d)) => Ok(d),
                Ok(None) => Err(format!("{} has no DWARF and no separate debug file was found", m.path.display())),
                Err(e) => Err(format!("{}: {e}", m.path.display())),
            });
            (name.clone(), d)
        })
        .collect();
    Some(dwarf_vars::Site {
        pie: m.kind == crate::elf::ModuleKind::PositionIndependent,
        cfa: m.cfa_at(pc),
        module,
        debug,
        scope,
        pc,
        at_entry,
        ret,
        others,
        bias_from: None,
    })
}

/// The sites of the modules that `@var(..., "module")` and `@cast(...,
/// "module")` name in script functions (no probe's site there): their
/// debugging information, and the index each gets in the probe table
/// (`Program::var_modules`).
fn function_sites(
    resolver: &mut points::Resolver<'_>,
    blocks: &[&crate::ast::Block],
    args: &[String],
) -> (std::collections::HashMap<String, std::rc::Rc<dwarf_vars::Site>>, Vec<std::path::PathBuf>) {
    let mut sites = std::collections::HashMap::new();
    let mut modules: Vec<std::path::PathBuf> = Vec::new();
    for name in walk::modules_named(blocks, args) {
        let Ok(m) = resolver.module_named(&name) else { continue };
        let debug = match m.debug() {
            Ok(Some(d)) => Ok(d),
            Ok(None) => Err(format!("{} has no DWARF and no separate debug file was found", m.path.display())),
            Err(e) => Err(format!("{}: {e}", m.path.display())),
        };
        let index = match modules.iter().position(|p| *p == m.path) {
            Some(i) => i,
            None => {
                modules.push(m.path.clone());
                modules.len() - 1
            }
        };
        let site = dwarf_vars::Site {
            module: m.path.clone(),
            debug,
            scope: Err("a script function is no probe's site".into()),
            pc: 0,
            at_entry: false,
            ret: false,
            pie: m.kind == crate::elf::ModuleKind::PositionIndependent,
            cfa: None,
            others: Default::default(),
            bias_from: Some(index as u32),
        };
        sites.insert(name, std::rc::Rc::new(site));
    }
    (sites, modules)
}

/// Names of the functions reachable from probes, alias bodies and probe
/// conditions, through calls.
fn used_functions(files: &[(FileId, &Script)]) -> std::collections::BTreeSet<String> {
    let mut used = std::collections::BTreeSet::new();
    let mut bodies: std::collections::HashMap<&str, &crate::ast::Block> = std::collections::HashMap::new();
    for (_, s) in files {
        for item in &s.items {
            match item {
                Item::Probe(p) => {
                    walk::calls_in_block(&p.body, &mut used);
                    for c in p.points.iter().filter_map(|pt| pt.condition.as_deref()) {
                        walk::calls_in_expr(c, &mut used);
                    }
                }
                Item::Alias(a) => {
                    walk::calls_in_block(&a.body, &mut used);
                    for c in a.points.iter().filter_map(|pt| pt.condition.as_deref()) {
                        walk::calls_in_expr(c, &mut used);
                    }
                }
                Item::Function(f) => {
                    bodies.insert(f.name.name.as_str(), &f.body);
                }
                Item::Global(_) => {}
            }
        }
    }
    let mut work: Vec<String> = used.iter().cloned().collect();
    while let Some(name) = work.pop() {
        if let Some(body) = bodies.get(name.as_str()) {
            let mut calls = std::collections::BTreeSet::new();
            walk::calls_in_block(body, &mut calls);
            for c in calls {
                if used.insert(c.clone()) {
                    work.push(c);
                }
            }
        }
    }
    used
}

/// Probe point arguments may be script arguments (`process(@1)`,
/// `function(@2)`, `timer.ms($1)`): replace them by their values.
fn substitute_script_args(p: &mut crate::ast::ProbePoint, args: &[String], diags: &mut Vec<Diagnostic>) -> bool {
    use crate::ast::ExprKind as A;
    let mut ok = true;
    for c in &mut p.components {
        let Some(arg) = c.arg.as_deref_mut() else { continue };
        let A::ScriptArg { index, as_string } = arg.kind else { continue };
        let n = args.len();
        let Some(value) = (index as usize).checked_sub(1).and_then(|i| args.get(i)) else {
            diags.push(
                Diagnostic::error(
                    crate::diag::Code::ScriptArgument,
                    arg.span,
                    format!(
                        "script argument {index} is not given ({n} argument{} given)",
                        if n == 1 { "" } else { "s" }
                    ),
                )
                .with_label("this probe point needs it")
                .with_help("script arguments follow the script: `telco-stap script.tp ARG1 ARG2`"),
            );
            ok = false;
            continue;
        };
        arg.kind = if as_string {
            A::Str(value.as_bytes().to_vec())
        } else {
            match crate::lexer::parse_int(value.trim()).or_else(|_| value.trim().parse::<i64>()) {
                Ok(v) => A::Int(v),
                Err(_) => {
                    ok = false;
                    diags.push(
                        Diagnostic::error(
                            crate::diag::Code::ScriptArgument,
                            arg.span,
                            format!("script argument ${index} is `{value}`, not a number"),
                        )
                        .with_label("used as a number here")
                        .with_help(format!("use `@{index}` for the argument as a string")),
                    );
                    continue;
                }
            }
        };
    }
    ok
}

/// `-l POINT` / `-L POINT`: the lines SystemTap would print, sorted. The
/// script holds one probe with the point(s) to list. Alias names are listed
/// as themselves (with the variables their prologues define for `-L`);
/// built-in points are resolved and listed concretely.
pub fn list(
    sources: &mut SourceMap,
    script: &Script,
    cfg: &Config<'_>,
    with_vars: bool,
    diags: &mut Vec<Diagnostic>,
) -> Vec<String> {
    let tapset_scripts = parse_tapsets(sources, cfg, diags);
    let all_aliases: Vec<&crate::ast::ProbeAlias> = tapset_scripts
        .iter()
        .map(|(_, s)| s)
        .chain(std::iter::once(script))
        .flat_map(|s| s.items.iter())
        .filter_map(|i| if let Item::Alias(a) = i { Some(a.as_ref()) } else { None })
        .collect();
    let aliases = alias::Aliases::new(all_aliases.iter().copied());
    // Script and tapset functions declared to return a string.
    let string_functions: std::collections::BTreeSet<String> = tapset_scripts
        .iter()
        .map(|(_, s)| s)
        .chain(std::iter::once(script))
        .flat_map(|s| s.items.iter())
        .filter_map(|i| match i {
            Item::Function(f) if f.ret.as_ref().is_some_and(|t| t.ty == crate::ast::Type::String) => {
                Some(f.name.name.to_string())
            }
            _ => None,
        })
        .collect();
    let mut resolver = points::Resolver::new(cfg.target.clone(), cfg.query);
    resolver.listing = true;
    let mut lines = std::collections::BTreeSet::new();
    for item in &script.items {
        let Item::Probe(p) = item else { continue };
        for written in &p.points {
            let dotted = written.shape();
            let first = written.components.first().map(|c| c.name.name.as_str()).unwrap_or("");
            let alias_named = |a: &&&crate::ast::ProbeAlias| crate::glob::glob_match(&dotted, &a.name.shape());
            // An alias use with a suffix (`pthread.mutex_unlock.return`) that
            // no alias is named: list what it expands to, as a script would.
            let suffix_use = !all_aliases.iter().any(|a| alias_named(&a)) && !dotted.contains(['*', '?', '[']);
            if !alias::is_builtin_family(first) && !suffix_use {
                // Alias names, possibly with wildcards: `-l 'libc.*'`.
                let matching: Vec<&&crate::ast::ProbeAlias> = all_aliases.iter().filter(alias_named).collect();
                if matching.is_empty() && !written.optional {
                    let mut d = Diagnostic::error(
                        crate::diag::Code::UnknownProbePoint,
                        written.span,
                        format!("no probe alias matches `{dotted}`"),
                    )
                    .with_label("not a built-in probe point or a tapset alias");
                    let names: Vec<String> = all_aliases.iter().map(|a| a.name.shape()).collect();
                    if let Some(s) = crate::suggest::closest(&dotted, names.iter().map(String::as_str)) {
                        d = d.with_help(format!("did you mean `{s}`?"));
                    }
                    diags.push(d);
                }
                for a in matching {
                    let mut line = a.name.shape();
                    if with_vars {
                        let mut vars = std::collections::BTreeSet::new();
                        walk::assigned_locals(&a.body, &string_functions, &mut vars);
                        for v in vars {
                            line.push(' ');
                            line.push_str(&v);
                        }
                    }
                    lines.insert(line);
                }
                continue;
            }
            for mut ex in aliases.expand(written, diags) {
                if !substitute_script_args(&mut ex.point, cfg.args, diags) {
                    continue;
                }
                let before = diags.len();
                crate::validate::check_probe_point(&ex.point, diags);
                if diags.len() > before {
                    continue;
                }
                let r = resolver.resolve(&ex, diags);
                for pt in &r.points {
                    let mut line = show::point_name(pt);
                    if with_vars {
                        // Names and types from the debugging information
                        // where there is some (as `stap -L`), else by position.
                        let named = debug_site(&mut resolver, pt, &[]).map(|s| s.listing()).unwrap_or_default();
                        let vars = if named.is_empty() { show::point_variables(pt) } else { named };
                        for v in vars {
                            line.push(' ');
                            line.push_str(&v);
                        }
                    }
                    lines.insert(line);
                }
            }
        }
    }
    lines.into_iter().collect()
}

/// The function symbols `usymname()` and the backtraces name addresses
/// with, and the unwind rows `ubacktrace()` walks with: every module a
/// function probe point is in, the target's program and the libraries it
/// loads at start, when some probe or function calls one of them.
fn symbols_for(
    probes: &[crate::program::Probe],
    functions: &[crate::program::Function],
    resolver: &mut points::Resolver,
) -> Vec<crate::program::ModuleSymbols> {
    use crate::program::builtins::Builtin;
    use crate::program::{visit::visit_stmt, ExprKind, Point};
    let mut wanted = false;
    let bodies = probes.iter().map(|p| &p.body).chain(functions.iter().map(|f| &f.body));
    for s in bodies.flatten() {
        visit_stmt(s, &mut |e| {
            wanted |= matches!(
                e.kind,
                ExprKind::Builtin {
                    func: Builtin::Usymname
                        | Builtin::Umodname
                        | Builtin::Ubacktrace
                        | Builtin::Ucallers
                        | Builtin::PrintUbacktrace
                        | Builtin::SprintUbacktrace
                        | Builtin::SprintUsyms
                        | Builtin::PrintUsyms,
                    ..
                }
            );
            !wanted
        });
    }
    if !wanted {
        return Vec::new();
    }
    let mut paths: Vec<std::path::PathBuf> = Vec::new();
    for pt in probes.iter().flat_map(|p| &p.points) {
        if let Point::Function(f) = pt {
            if !paths.contains(&f.module) {
                paths.push(f.module.clone());
            }
        }
    }
    // And the target's program, probed or not: where a probe in a library
    // is called from (a leak's allocating function, a backtrace's frames).
    if let Some(Ok(exe)) = resolver.target_executable() {
        if !paths.contains(&exe) {
            paths.push(exe);
        }
    }
    // A stack goes through any of them, and a sample lands anywhere: every
    // library the target loads at start (names, and the CFI to unwind
    // through them).
    {
        if let Ok(ms) = resolver.target_modules() {
            for m in ms {
                if !paths.contains(&m.path) {
                    paths.push(m.path.clone());
                }
            }
        }
    }
    let mut out = Vec::new();
    for path in paths {
        let path = path.as_path();
        // Resolution loaded it already; one that cannot be read now simply
        // has no names.
        let Ok(m) = resolver.module(path) else { continue };
        out.extend(module_symbols(&m, path));
    }
    // The vDSO: the kernel maps one image into every process (the
    // tracer's own is the target's), where a sample often lands
    // (`__vdso_clock_gettime`); its names, for `usymname()` and
    // backtraces (its rows: the image is not a file pass 2 can re-read).
    if let Some(bytes) = own_vdso() {
        let path = std::path::Path::new("[vdso]");
        if let Ok(m) = crate::elf::Module::from_bytes(path, &bytes) {
            out.extend(symbols_of(&m, path, &Default::default(), Vec::new()));
        }
    }
    out
}

/// A module's names and unwind rows for the symbol table (`path` as the
/// target names it); None without functions. Also what the tracer adds for
/// a library loaded later (`telco_runtime::symtab`).
pub fn module_symbols(m: &crate::elf::Module, path: &std::path::Path) -> Option<crate::program::ModuleSymbols> {
    // A stripped library's unnamed functions take their names from its
    // debug file, when installed (`__libc_start_call_main`, not
    // `sub_271d0`).
    let better: std::collections::HashMap<u64, String> = m.debug_names().into_iter().collect();
    symbols_of(m, path, &better, m.unwind_rows())
}

/// A module's functions (named from `better` where it names them) with
/// `unwind`, anchored at its first function; None without functions.
fn symbols_of(
    m: &crate::elf::Module,
    path: &std::path::Path,
    better: &std::collections::HashMap<u64, String>,
    unwind: Vec<(u64, u32)>,
) -> Option<crate::program::ModuleSymbols> {
    let anchor = m.functions.first()?;
    let mut functions: Vec<(u64, u64, String)> = m
        .functions
        .iter()
        .map(|f| (f.addr, f.size, better.get(&f.addr).cloned().unwrap_or_else(|| f.display_name().to_string())))
        .collect();
    functions.sort_by_key(|f| f.0);
    Some(crate::program::ModuleSymbols {
        unwind,
        module: telco_abi::artifact::SymModule {
            path: path.to_path_buf(),
            anchor_addr: anchor.addr,
            anchor_offset: anchor.file_offset,
        },
        functions,
    })
}

/// This process's vDSO image (/proc/self/maps and /proc/self/mem).
fn own_vdso() -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (lo, hi) = line.split_whitespace().next()?.split_once('-')?;
    let (lo, hi) = (u64::from_str_radix(lo, 16).ok()?, u64::from_str_radix(hi, 16).ok()?);
    let mut bytes = vec![0u8; usize::try_from(hi.checked_sub(lo)?).ok()?.min(1 << 20)];
    std::fs::File::open("/proc/self/mem").ok()?.read_exact_at(&mut bytes, lo).ok()?;
    Some(bytes)
}
