//! Passes 3 and 4: the typed program to Cranelift IR ([`translate`]), then
//! to one linked, position-independent blob with its probe table, data
//! layout and format table ([`codegen`]): a `telco_abi::artifact::Artifact`.

pub mod layout;
pub mod link;
pub mod rt;
pub mod translate;

use crate::diag::Diagnostic;
use crate::elaborate::show::point_name;
use crate::program::{Point, Program};
use crate::span::SourceMap;
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use telco_abi::artifact::Limits;

pub use link::{codegen, disassemble};
pub use translate::Translated;

/// The ISA handlers are compiled for: x86_64, position independent, frame
/// pointers kept (ubacktrace walks them), no probestack (a libcall).
pub fn isa() -> Result<OwnedTargetIsa, String> {
    let mut fb = settings::builder();
    for (k, v) in [
        ("opt_level", "speed"),
        ("is_pic", "true"),
        ("preserve_frame_pointers", "true"),
        ("unwind_info", "false"),
        ("enable_probestack", "false"),
        ("enable_verifier", "true"),
    ] {
        fb.set(k, v).map_err(|e| format!("cranelift setting {k}: {e}"))?;
    }
    let flags = settings::Flags::new(fb);
    let triple: target_lexicon::Triple =
        "x86_64-unknown-linux-gnu".parse().map_err(|e| format!("target triple: {e:?}"))?;
    let mut ib = cranelift_codegen::isa::lookup(triple).map_err(|e| format!("cranelift ISA: {e}"))?;
    // SSE4.1 keeps Cranelift from calling libm for rounding; nothing here
    // uses vector registers.
    ib.set("has_sse41", "true").map_err(|e| format!("cranelift ISA flag: {e}"))?;
    ib.finish(flags).map_err(|e| format!("cranelift ISA: {e}"))
}

/// Pass 3.
pub fn translate(program: &Program, sources: &SourceMap, limits: Limits) -> Result<Translated, Vec<Diagnostic>> {
    let hists = translate::collect_hists(program);
    let nprobes: u64 = program.probes.iter().map(|p| p.points.len() as u64).sum();
    let returns = program.probes.iter().any(|p| p.points.iter().any(|pt| matches!(pt, Point::Function(f) if f.ret)));
    let entry_save =
        program.probes.iter().map(|p| translate::entry_save_size(p, limits.maxstringlen)).max().unwrap_or(0);
    let (sharded, stats) = sharded_globals(program);
    let mut layout = layout::Layout::new(program, limits, &hists, nprobes, returns, entry_save, &sharded);
    layout.shard_stats(&stats);
    // The probe table: pp() and probefunc() strings per probe entry.
    let mut row = 0u64;
    let mut rows = Vec::new();
    for p in &program.probes {
        for pt in &p.points {
            let (pp, func) = match &p.lifecycle {
                Some(name) => (name.clone(), String::new()),
                None => (point_name(pt), function_of(pt)),
            };
            let pp = layout.string(pp.as_bytes());
            let func = layout.string(func.as_bytes());
            rows.push((layout.probes_off + 16 * row, pp, func));
            row += 1;
        }
    }
    for (at, pp, func) in rows {
        let mut b = pp.to_le_bytes().to_vec();
        b.extend_from_slice(&func.to_le_bytes());
        layout.init.push((at, b));
    }
    let isa =
        isa().map_err(|e| vec![Diagnostic::error(crate::diag::Code::Unsupported, crate::span::Span::default(), e)])?;
    let mut t = translate::translate(program, sources, layout, &*isa)?;
    t.display = displayed_globals(program, sources);
    Ok(t)
}

/// Which globals the program reads and which it writes (by index):
/// `n++` does both, `foreach` reads, `delete` writes.
pub fn global_use(program: &Program) -> (Vec<bool>, Vec<bool>) {
    use crate::program::{Expr, ExprKind, StmtKind};
    let n = program.globals.len();
    let mut read = vec![false; n];
    let mut written = vec![false; n];
    fn global_of(e: &Expr) -> Option<usize> {
        match &e.kind {
            ExprKind::Global(g) | ExprKind::Index { array: g, .. } => Some(g.0 as usize),
            _ => None,
        }
    }
    // An assignment's value may assign too (`a = b = 3`).
    fn on_expr(e: &Expr, read: &mut [bool], written: &mut [bool]) -> bool {
        match &e.kind {
            ExprKind::Assign { target, value, .. } => {
                if let Some(g) = global_of(target) {
                    written[g] = true;
                }
                if let ExprKind::Index { keys, .. } = &target.kind {
                    for k in keys {
                        translate::visit_expr(k, &mut |x| on_expr(x, read, written));
                    }
                }
                translate::visit_expr(value, &mut |x| on_expr(x, read, written));
                return false;
            }
            ExprKind::IncDec { target, .. } => {
                // `n++` reads n, as in SystemTap.
                if let Some(g) = global_of(target) {
                    written[g] = true;
                    read[g] = true;
                }
            }
            _ => {}
        }
        mark_read(e, read)
    }
    fn mark_read(e: &Expr, read: &mut [bool]) -> bool {
        match &e.kind {
            ExprKind::Global(g) | ExprKind::Index { array: g, .. } | ExprKind::In { array: g, .. } => {
                read[g.0 as usize] = true
            }
            ExprKind::Aggregate { stat, .. } | ExprKind::HistLog { stat } | ExprKind::HistLinear { stat, .. } => {
                if let ExprKind::Global(g) | ExprKind::Index { array: g, .. } = &stat.kind {
                    read[g.0 as usize] = true;
                }
            }
            _ => {}
        }
        true
    }
    fn stmts(
        ss: &[crate::program::Stmt],
        f: &mut dyn FnMut(&Expr) -> bool,
        read: &mut Vec<bool>,
        written: &mut Vec<bool>,
    ) {
        for s in ss {
            match &s.kind {
                StmtKind::Foreach { array, .. } => read[array.0 as usize] = true,
                StmtKind::DeleteGlobal(g) | StmtKind::DeleteElement { array: g, .. } => written[g.0 as usize] = true,
                _ => {}
            }
            match &s.kind {
                StmtKind::Block(b) => stmts(b, f, read, written),
                StmtKind::If { then, els, .. } => {
                    stmts(std::slice::from_ref(then), f, read, written);
                    if let Some(e) = els {
                        stmts(std::slice::from_ref(e), f, read, written);
                    }
                }
                StmtKind::While { body, .. } | StmtKind::For { body, .. } | StmtKind::Foreach { body, .. } => {
                    stmts(std::slice::from_ref(body), f, read, written)
                }
                StmtKind::Try { body, handler, .. } => {
                    stmts(body, f, read, written);
                    stmts(handler, f, read, written);
                }
                _ => {}
            }
        }
    }
    let bodies: Vec<&Vec<crate::program::Stmt>> =
        program.functions.iter().map(|f| &f.body).chain(program.probes.iter().map(|p| &p.body)).collect();
    for b in &bodies {
        for s in b.iter() {
            translate::visit_stmt(s, &mut |e| on_expr(e, &mut read, &mut written));
        }
    }
    for p in &program.probes {
        if let Some(c) = &p.condition {
            translate::visit_expr(c, &mut |x| mark_read(x, &mut read));
        }
    }
    let (mut r2, mut w2) = (read.clone(), written.clone());
    for b in &bodies {
        stmts(b, &mut |_| true, &mut r2, &mut w2);
    }
    (r2, w2)
}

/// The globals SystemTap prints at the end of a session: those of the user's
/// script (not tapsets) that are written and never read.
pub fn displayed_globals(program: &Program, sources: &SourceMap) -> Vec<u32> {
    let (r2, w2) = global_use(program);
    let n = program.globals.len();
    let script = program.files.first().cloned().unwrap_or_default();
    (0..n)
        .filter(|&g| w2[g] && !r2[g] && sources.get(program.globals[g].span.file).name == script)
        .map(|g| g as u32)
        .collect()
}

/// SystemTap's warnings about the script's own variables (not the
/// tapsets'): a variable read but never assigned (always 0 or ""), and a
/// global never used at all.
pub fn variable_warnings(program: &Program, sources: &SourceMap) -> Vec<Diagnostic> {
    use crate::diag::Code;
    use crate::program::{ExprKind, Stmt, StmtKind};
    let script = program.files.first().cloned().unwrap_or_default();
    let in_script = |span: crate::span::Span| sources.get(span.file).name == script;
    let mut out = Vec::new();
    let (read, written) = global_use(program);
    for (i, g) in program.globals.iter().enumerate() {
        if !in_script(g.span) {
            continue;
        }
        if !read[i] && !written[i] {
            out.push(
                Diagnostic::warning(Code::Undefined, g.span, format!("Eliding unused variable '{}'", g.name))
                    .with_label("never used"),
            );
        } else if read[i] && !written[i] && g.init.is_none() {
            out.push(
                Diagnostic::warning(Code::Undefined, g.span, format!("never-assigned global variable '{}'", g.name))
                    .with_label("read, but nothing assigns it: always 0 or \"\""),
            );
        }
    }
    // Locals: per probe and function body.
    fn bind(ss: &[Stmt], assigned: &mut [bool]) {
        for s in ss {
            match &s.kind {
                StmtKind::Foreach { keys, value, body, .. } => {
                    for k in keys.iter().chain(value.iter()) {
                        assigned[k.0 as usize] = true;
                    }
                    bind(std::slice::from_ref(body), assigned);
                }
                StmtKind::Try { body, var, handler } => {
                    if let Some(v) = var {
                        assigned[v.0 as usize] = true;
                    }
                    bind(body, assigned);
                    bind(handler, assigned);
                }
                StmtKind::Block(b) => bind(b, assigned),
                StmtKind::If { then, els, .. } => {
                    bind(std::slice::from_ref(then), assigned);
                    if let Some(e) = els {
                        bind(std::slice::from_ref(e), assigned);
                    }
                }
                StmtKind::While { body, .. } | StmtKind::For { body, .. } => bind(std::slice::from_ref(body), assigned),
                _ => {}
            }
        }
    }
    // Marks what `e` assigns and reads; false: its parts are done.
    fn scan(e: &crate::program::Expr, assigned: &mut [bool], used: &mut [bool]) -> bool {
        match &e.kind {
            ExprKind::Assign { target, value, op } => {
                if let ExprKind::Local(l) = &target.kind {
                    assigned[l.0 as usize] = true;
                    if *op != crate::ast::AssignOp::Assign {
                        used[l.0 as usize] = true;
                    }
                    translate::visit_expr(value, &mut |x| scan(x, assigned, used));
                    return false;
                }
            }
            ExprKind::IncDec { target, .. } => {
                if let ExprKind::Local(l) = &target.kind {
                    assigned[l.0 as usize] = true;
                }
            }
            ExprKind::Local(l) => used[l.0 as usize] = true,
            _ => {}
        }
        true
    }
    let bodies = program
        .probes
        .iter()
        .map(|p| (&p.locals, &p.body, 0usize))
        .chain(program.functions.iter().map(|f| (&f.locals, &f.body, f.params as usize)));
    for (locals, body, params) in bodies {
        let n = locals.len();
        let (mut assigned, mut used) = (vec![false; n], vec![false; n]);
        assigned.iter_mut().take(params).for_each(|a| *a = true);
        bind(body, &mut assigned);
        for st in body {
            translate::visit_stmt(st, &mut |e| scan(e, &mut assigned, &mut used));
        }
        for (i, l) in locals.iter().enumerate() {
            if used[i] && !assigned[i] && in_script(l.span) && !l.name.starts_with("__") {
                out.push(
                    Diagnostic::warning(Code::Undefined, l.span, format!("never-assigned local variable '{}'", l.name))
                        .with_label("read, but nothing assigns it: always 0 or \"\""),
                );
            }
        }
    }
    out
}

/// Counters and statistics that get per-thread shards: scalar globals that
/// code which can run in a target (function probes and script functions)
/// only changes by statement-level `g++`, `g--`, `g += e`, `g -= e` (longs)
/// or `g <<< e` (statistics), never reads. Such an update is a plain add into
/// the thread's own copy; readers (begin, end, timer probes) sum or merge
/// the copies. Returns (counters, statistics).
pub fn sharded_globals(program: &Program) -> (Vec<u32>, Vec<u32>) {
    use crate::program::{Expr, ExprKind, GlobalKind, Stmt, StmtKind, Ty};
    use std::collections::BTreeSet;
    fn additive(e: &Expr) -> Option<(u32, Option<&Expr>)> {
        match &e.kind {
            ExprKind::IncDec { target, .. } => match target.kind {
                ExprKind::Global(g) => Some((g.0, None)),
                _ => None,
            },
            ExprKind::Assign {
                op: crate::ast::AssignOp::Add | crate::ast::AssignOp::Sub | crate::ast::AssignOp::Aggregate,
                target,
                value,
            } => match target.kind {
                ExprKind::Global(g) => Some((g.0, Some(&**value))),
                _ => None,
            },
            _ => None,
        }
    }
    fn mark(e: &Expr, bad: &mut BTreeSet<u32>) {
        translate::visit_expr(e, &mut |x| {
            if let ExprKind::Global(g) = x.kind {
                bad.insert(g.0);
            }
            true
        });
    }
    fn walk(ss: &[Stmt], bad: &mut BTreeSet<u32>, used: &mut BTreeSet<u32>) {
        for s in ss {
            match &s.kind {
                StmtKind::Expr(e) => match additive(e) {
                    Some((g, value)) => {
                        used.insert(g);
                        if let Some(v) = value {
                            mark(v, bad);
                        }
                    }
                    None => mark(e, bad),
                },
                StmtKind::Block(b) => walk(b, bad, used),
                StmtKind::If { cond, then, els } => {
                    mark(cond, bad);
                    walk(std::slice::from_ref(then), bad, used);
                    if let Some(e) = els {
                        walk(std::slice::from_ref(e), bad, used);
                    }
                }
                StmtKind::While { cond, body } => {
                    mark(cond, bad);
                    walk(std::slice::from_ref(body), bad, used);
                }
                StmtKind::For { init, cond, step, body } => {
                    for e in [init, cond, step].into_iter().flatten() {
                        mark(e, bad);
                    }
                    walk(std::slice::from_ref(body), bad, used);
                }
                StmtKind::Foreach { limit, body, .. } => {
                    if let Some(l) = limit {
                        mark(l, bad);
                    }
                    walk(std::slice::from_ref(body), bad, used);
                }
                StmtKind::Return(Some(e)) => mark(e, bad),
                StmtKind::DeleteGlobal(g) => {
                    bad.insert(g.0);
                }
                StmtKind::DeleteElement { keys, .. } => keys.iter().for_each(|k| mark(k, bad)),
                StmtKind::Try { body, handler, .. } => {
                    walk(body, bad, used);
                    walk(handler, bad, used);
                }
                _ => {}
            }
        }
    }
    let mut bad = BTreeSet::new();
    let mut used = BTreeSet::new();
    for p in &program.probes {
        let in_target = p.points.iter().any(|pt| {
            !matches!(pt, Point::Begin { .. } | Point::End { .. } | Point::Error { .. } | Point::Timer { .. })
        });
        if !in_target {
            continue;
        }
        if let Some(c) = &p.condition {
            mark(c, &mut bad);
        }
        walk(&p.body, &mut bad, &mut used);
    }
    for f in &program.functions {
        walk(&f.body, &mut bad, &mut used);
    }
    let good: Vec<u32> = used.into_iter().filter(|g| !bad.contains(g)).collect();
    let of = |ty: Ty| -> Vec<u32> {
        good.iter().copied().filter(|&g| program.globals[g as usize].kind == GlobalKind::Scalar(ty)).collect()
    };
    (of(Ty::Long), of(Ty::Stat))
}

/// Passes 1–4 on a script that needs no target (begin/end/error/timer
/// probes): for tests and benchmarks that run compiled handlers directly.
/// Errors come back as the one-line diagnostic summary.
pub fn compile_text(name: &str, text: &str) -> Result<telco_abi::artifact::Artifact, String> {
    use crate::elaborate::{self, NoProcesses, TargetSpec};
    let pcfg = crate::ParseConfig::default();
    let mut sources = SourceMap::new();
    let id = sources.add(name, text);
    let (script, ds) = crate::parse(&sources, id, &pcfg);
    let mut diags = crate::Diagnostics::new();
    diags.extend(ds);
    let cfg = elaborate::Config {
        parse: &pcfg,
        tapsets: elaborate::tapsets::builtin(),
        target: TargetSpec::default(),
        query: &NoProcesses,
        args: &[],
        guru: false,
    };
    let mut ds = Vec::new();
    let program =
        if diags.has_errors() { None } else { elaborate::elaborate(&mut sources, id, &script, &cfg, &mut ds) };
    diags.extend(ds);
    let Some(program) = program.filter(|_| !diags.has_errors()) else { return Err(diags.summary(&sources)) };
    let t = translate(&program, &sources, Limits::default()).map_err(|d| {
        let mut all = crate::Diagnostics::new();
        all.extend(d);
        all.summary(&sources)
    })?;
    codegen(t, &program)
}

/// `probefunc()` of a point.
pub fn function_of(p: &Point) -> String {
    match p {
        Point::Function(f) => f.demangled.clone().unwrap_or_else(|| f.symbol.clone()),
        Point::Statement { function, .. } => function.clone().unwrap_or_default(),
        Point::Mark(m) => m.function.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

/// `--last-pass 3`: the CLIF of every function.
pub fn print_clif(t: &Translated) -> String {
    let mut out = String::new();
    for f in &t.functions {
        out.push_str(&format!("; {}\n{}\n", f.name, f.func.display()));
    }
    out
}

/// `gettimeofday_ns() - @entry(gettimeofday_ns())`, the duration of a
/// call, becomes `__telco_ticks_ns(__telco_ticks() -
/// @entry(__telco_ticks()))`: the same duration (up to the rounding of a
/// nanosecond), taken in TSC ticks on both sides and converted once. The
/// entry save is then a bare clock read, which trampolines do inline
/// (`ProbeEntry::latency`, `link::latency_of`). Run before pass 3.
pub fn durations_in_ticks(program: &mut Program) {
    use crate::ast::BinOp;
    use crate::elaborate::builtins::Builtin;
    use crate::program::{Expr, ExprKind};
    fn is_now(e: &Expr) -> bool {
        matches!(&e.kind, ExprKind::Builtin { func: Builtin::GettimeofdayNs, .. })
    }
    fn rewrite(e: &mut Expr) {
        if let ExprKind::Binary { op: BinOp::Sub, lhs, rhs } = &mut e.kind {
            if is_now(lhs) && matches!(&rhs.kind, ExprKind::Entry(x) if is_now(x)) {
                let ticks = |span| Expr {
                    kind: ExprKind::Builtin { func: Builtin::TraceTicks, args: Vec::new() },
                    ty: e.ty,
                    span,
                };
                let d = Expr {
                    kind: ExprKind::Binary {
                        op: BinOp::Sub,
                        lhs: Box::new(ticks(lhs.span)),
                        rhs: Box::new(Expr { kind: ExprKind::Entry(Box::new(ticks(rhs.span))), ..(**rhs).clone() }),
                    },
                    ty: e.ty,
                    span: e.span,
                };
                e.kind = ExprKind::Builtin { func: Builtin::TicksNs, args: vec![d] };
                return;
            }
        }
        translate::children_mut(e, &mut rewrite);
    }
    for p in &mut program.probes {
        for s in &mut p.body {
            translate::stmt_exprs_mut(s, &mut rewrite);
        }
    }
}
