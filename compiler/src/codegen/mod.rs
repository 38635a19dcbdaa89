//! Passes 3 and 4: the typed program to Cranelift IR ([`translate`]), then
//! to one linked, position-independent blob with its probe table, data
//! layout and format table ([`codegen`]): a `telco_abi::artifact::Artifact`.
//!
//! Before pass 3: [`facts`] analyses the program (sharded globals,
//! histograms, `@entry` saves, displayed globals, MAXACTION bounds) and
//! [`layout`] places everything in the shared region; `Layout::storage` is
//! the one answer to "where does this global live". [`rt`] lists the
//! runtime library's functions (compiler/rt/rt.c) that compiled code calls.
//!
//! *Durations in ticks.* The driver runs [`durations_in_ticks`] before pass
//! 3: `gettimeofday_ns() - @entry(gettimeofday_ns())` becomes
//! `__telco_ticks_ns(__telco_ticks() - @entry(__telco_ticks()))`, TSC ticks
//! on both sides converted once (`Header::tsc_mult`, the fixed
//! `TSC_SHIFT`). A return probe whose whole body is `S <<<` that duration,
//! S a statistic with per-thread copies and at most a log histogram, gets
//! `ProbeEntry::latency` (`link::latency_of`: where S's copy is): a
//! function with only that probe gets trampolines that add the duration to
//! the thread's copy themselves (the runtime's `trampoline::StatInline`,
//! the update `stat_add_inline` compiles), and off their common path its
//! handlers do the same from the same tick saves.

pub mod facts;
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

/// The ISA handlers are compiled for (`crate::arch::native::TARGET`),
/// position independent, frame pointers kept (ubacktrace walks them), no
/// probestack (a libcall).
pub fn isa() -> Result<OwnedTargetIsa, String> {
    let target = &crate::arch::native::TARGET;
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
    let triple: target_lexicon::Triple = target.triple.parse().map_err(|e| format!("target triple: {e:?}"))?;
    let mut ib = cranelift_codegen::isa::lookup(triple).map_err(|e| format!("cranelift ISA: {e}"))?;
    for (k, v) in target.isa_flags {
        ib.set(k, v).map_err(|e| format!("cranelift ISA flag {k}: {e}"))?;
    }
    ib.finish(flags).map_err(|e| format!("cranelift ISA: {e}"))
}

/// Pass 3.
pub fn translate(program: &Program, sources: &SourceMap, limits: Limits) -> Result<Translated, Vec<Diagnostic>> {
    let hists = facts::collect_hists(program);
    let nprobes: u64 = program.probes.iter().map(|p| p.points.len() as u64).sum();
    // Return probes, and statements probed at a call's return
    // (`Site::call`), use the shadow stacks.
    let returns = program.probes.iter().any(|p| {
        p.points.iter().any(|pt| match pt {
            Point::Function(f) => f.ret,
            Point::Statement { site, .. } => site.call,
            Point::Mark(m) => m.site.call,
            _ => false,
        })
    });
    let entry_save = program.probes.iter().map(|p| facts::entry_save_size(p, limits.maxstringlen)).max().unwrap_or(0);
    let (sharded, stats) = facts::sharded_globals(program);
    let mut layout = layout::Layout::new(program, limits, &hists, nprobes, returns, entry_save, &sharded);
    layout.shard_stats(&stats);
    // The probe table: pp() and probefunc() strings per probe entry, its
    // link-time address and the index of its module among those `@var`
    // names in script functions (`rt_module_bias`).
    let row_size = telco_abi::region::PROBE_ROW_SIZE as u64;
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
            let (module, link) = match pt {
                Point::Function(f) => (Some(&f.module), f.addr),
                Point::Statement { module, addr, .. } => (Some(module), *addr),
                Point::Mark(m) => (Some(&m.module), m.addr),
                _ => (None, 0),
            };
            let index =
                module.and_then(|m| program.var_modules.iter().position(|v| v == m)).map_or(u32::MAX, |i| i as u32);
            rows.push((layout.probes_off + row_size * row, pp, func, link, index));
            row += 1;
        }
    }
    for (at, pp, func, link, index) in rows {
        let mut b = pp.to_le_bytes().to_vec();
        b.extend_from_slice(&func.to_le_bytes());
        b.extend_from_slice(&link.to_le_bytes());
        b.extend_from_slice(&index.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        layout.init.push((at, b));
    }
    let isa =
        isa().map_err(|e| vec![Diagnostic::error(crate::diag::Code::Unsupported, crate::span::Span::default(), e)])?;
    let mut t = translate::translate(program, sources, layout, &*isa)?;
    t.display = facts::displayed_globals(program, sources);
    t.merges = facts::merge_kinds(program);
    Ok(t)
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
        skip_badvars: false,
        unoptimized: false,
        set_globals: &[],
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
    use crate::program::builtins::Builtin;
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
        crate::program::visit::children_mut(e, &mut rewrite);
    }
    for p in &mut program.probes {
        for s in &mut p.body {
            crate::program::visit::stmt_exprs_mut(s, &mut rewrite);
        }
    }
}
