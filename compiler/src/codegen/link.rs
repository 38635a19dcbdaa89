//! Pass 4: compile every function with Cranelift and link them, with the
//! runtime library, into one blob. Our own linker: functions are placed one
//! after another (16-byte aligned) behind the runtime library, and every
//! `call rel32` is patched. Any other relocation is refused: the blob must
//! run at any address, in the tracer and in every target.
//!
//! The probe table it builds carries, per probe, what pass 5 needs to
//! choose trampolines: `ProbeEntry::full_ctx`, `empty`, `span` and
//! `latency` (`latency_of`). [`disassemble`] is `--last-pass 4`.

use super::layout::Storage;
use super::rt::{self, Rt};
use super::translate::{Translated, NS_FUNC, NS_RT};
use crate::elaborate::show::point_name;
use crate::program::{Point, Program};
use cranelift_codegen::ir::{ExternalName, UserExternalName};
use cranelift_codegen::{Context, FinalizedRelocTarget};
use std::collections::HashMap;
use telco_abi::artifact::{Artifact, Attach, Display, DisplayKind, Global, LifeEvent, Merge, ProbeEntry, Symbol};

pub fn codegen(t: Translated, program: &Program) -> Result<Artifact, String> {
    let isa = super::isa()?;
    let target = &crate::arch::native::TARGET;
    let mut code = rt::RT_CODE.to_vec();
    let mut symbols: Vec<Symbol> =
        rt::RT_SYMBOLS.iter().map(|(n, o, s)| Symbol { name: n.to_string(), offset: *o, size: *s }).collect();
    let mut offsets = Vec::with_capacity(t.functions.len());
    // (position of the rel32 field, target, addend)
    let mut fixups: Vec<(usize, UserExternalName, i64)> = Vec::new();
    let mut ctx = Context::new();
    for f in &t.functions {
        while code.len() % 16 != 0 {
            code.push(target.padding);
        }
        let start = code.len();
        ctx.func = f.func.clone();
        let names = ctx.func.params.user_named_funcs().clone();
        let compiled = ctx
            .compile(&*isa, &mut cranelift_codegen::control::ControlPlane::default())
            .map_err(|e| format!("internal error: Cranelift rejected {}: {:?}", f.name, e.inner))?;
        code.extend_from_slice(compiled.code_buffer());
        for r in compiled.buffer.relocs() {
            let callee = match (&r.target, r.kind) {
                (FinalizedRelocTarget::ExternalName(ExternalName::User(nr)), kind) if kind == target.call_reloc => {
                    names[*nr].clone()
                }
                (other, kind) => {
                    return Err(format!(
                    "internal error: {} needs relocation {kind:?} to {other:?}; only calls within the blob are allowed",
                    f.name
                ))
                }
            };
            fixups.push((start + r.offset as usize, callee, r.addend));
        }
        symbols.push(Symbol { name: f.name.clone(), offset: start as u32, size: (code.len() - start) as u32 });
        offsets.push(start as u32);
        ctx.clear();
    }
    let rt_offsets: HashMap<u32, u32> = rt::ALL
        .iter()
        .map(|f| Ok((*f as u32, rt::offset(f.name()).ok_or_else(|| format!("internal error: {} missing", f.name()))?)))
        .collect::<Result<_, String>>()?;
    for (at, callee, addend) in fixups {
        let dest = match callee.namespace {
            NS_FUNC => offsets.get(callee.index as usize).copied(),
            NS_RT => rt_offsets.get(&callee.index).copied(),
            _ => None,
        }
        .ok_or_else(|| format!("internal error: call to unknown function {callee:?}"))?;
        (target.patch_call)(&mut code, at, dest, addend)?;
    }
    let format_fn = rt::offset(Rt::Format.name()).ok_or("internal error: rt_format missing")?;

    let nfuncs = program.functions.len();
    let mut probes = Vec::new();
    for (i, p) in program.probes.iter().enumerate() {
        let (handler_idx, entry) = t.probes[i];
        debug_assert!(handler_idx >= nfuncs);
        for pt in &p.points {
            probes.push(ProbeEntry {
                handler: offsets[handler_idx],
                attach: attach_of(pt),
                name: p.lifecycle.clone().unwrap_or_else(|| point_name(pt)),
                body: i as u32,
                entry_handler: entry.map(|(idx, _)| offsets[idx]),
                entry_size: entry.map_or(0, |(_, s)| s),
                function: if p.lifecycle.is_some() { String::new() } else { super::function_of(pt) },
                full_ctx: t.functions[handler_idx].full_ctx || entry.is_some_and(|(idx, _)| t.functions[idx].full_ctx),
                empty: p.body.is_empty() && p.condition.is_none(),
                span: p.is_chrome_span(),
                latency: latency_of(p, &t.layout),
            });
        }
    }
    let layout = t.layout;
    // Every global: where it is and what it holds.
    let globals: Vec<Global> = (0..layout.globals.len().min(program.globals.len()))
        .map(|g| {
            let (offset, kind, desc) = match layout.storage(g as u32) {
                Storage::Long { off } => (off, DisplayKind::Long, 0),
                Storage::ShardedLong { off, col, .. } => (off, DisplayKind::ShardedLong(col), 0),
                Storage::Str { off } => (off, DisplayKind::String, 0),
                Storage::Stat { off, desc, .. } => (off, DisplayKind::Stat, desc),
                Storage::ShardedStat { off, copies, row, desc, .. } => {
                    (off, DisplayKind::ShardedStat { shards: copies, row }, desc)
                }
                Storage::Table(tab) => (tab.off, DisplayKind::Array, tab.desc),
            };
            let merge = t.merges.get(g).copied().unwrap_or(Merge::Assign);
            Global { name: program.globals[g].name.clone(), offset, kind, desc, merge }
        })
        .collect();
    let display = t
        .display
        .iter()
        .filter_map(|&g| {
            let g = globals.get(g as usize)?;
            Some(Display { name: g.name.clone(), offset: g.offset, kind: g.kind.clone() })
        })
        .collect();
    let tables = (0..layout.globals.len())
        .filter_map(|g| match layout.storage(g as u32) {
            Storage::Table(tab) => Some((program.globals.get(g)?.name.clone(), tab.off)),
            _ => None,
        })
        .collect();
    let mut init = layout.init.clone();
    init.push((layout.consts_off, layout.consts.clone()));
    let cap = layout.limits.maxstringlen;
    if layout.region_size() > telco_abi::region::MIRROR_GAP {
        return Err(format!(
            "the shared region would take {} MiB, more than the {} MiB its trusted mirror allows: \
             lower -D MAXMAPENTRIES, MAXSTRINGLEN or the ring's size",
            layout.region_size() >> 20,
            telco_abi::region::MIRROR_GAP >> 20
        ));
    }
    Ok(Artifact {
        code,
        symbols,
        format_fn,
        probes,
        region_size: layout.region_size(),
        ring_off: layout.ring_off,
        ring_size: layout.ring_size,
        nthreads: layout.nthreads,
        frame_size: layout.frame_size,
        shadow_depth: layout.shadow_depth,
        shards_off: layout.shards_off,
        nshards: layout.shards.len() as u32,
        indent_off: layout.indent_off,
        row_owners_off: layout.row_owners_off,
        probes_off: layout.probes_off,
        itrace_off: layout.itrace_off,
        itrace_slots: layout.itrace_slots,
        spans_off: layout.spans_off,
        span_batch: layout.span_batch,
        span_stride: layout.span_stride,
        flight_off: layout.flight_off,
        flight_chunks: layout.flight_chunks,
        flight_stride: layout.flight_stride,
        span_min_ns: program.span_min_ns,
        symtab_off: layout.symtab_off,
        symtab_modules: layout.symtab_modules.clone(),
        symtab_late: if layout.late_syms_size > 0 { (layout.late_syms_off(), layout.late_syms_size) } else { (0, 0) },
        init,
        formats: t.formats.iter().map(|f| f.0).collect(),
        format_args: t.formats.iter().map(|f| f.1.clone()).collect(),
        locations: t.locations,
        display,
        tables,
        globals,
        limits: layout.limits,
        ctx_size: super::translate::ctx_size(cap),
    })
}

/// `ProbeEntry::latency`: the probe's body is exactly `S <<<
/// __telco_ticks_ns(__telco_ticks() - @entry(__telco_ticks()))` (what
/// `durations_in_ticks` made of the duration idiom), with no condition,
/// on return points only, and S is updated inline in per-thread copies.
fn latency_of(p: &crate::program::Probe, layout: &super::layout::Layout) -> Option<telco_abi::artifact::Latency> {
    use super::layout::HistKey;
    use crate::ast::{AssignOp, BinOp};
    use crate::program::builtins::Builtin;
    use crate::program::{Expr, ExprKind, StmtKind};
    let is_ticks = |e: &Expr| matches!(&e.kind, ExprKind::Builtin { func: Builtin::TraceTicks, .. });
    if p.condition.is_some() || !p.points.iter().all(|pt| matches!(pt, Point::Function(f) if f.ret && !f.itrace)) {
        return None;
    }
    let [stmt] = p.body.as_slice() else { return None };
    let StmtKind::Expr(e) = &stmt.kind else { return None };
    let ExprKind::Assign { op: AssignOp::Aggregate, target, value } = &e.kind else { return None };
    let ExprKind::Global(g) = &target.kind else { return None };
    let ExprKind::Builtin { func: Builtin::TicksNs, args } = &value.kind else { return None };
    let [d] = args.as_slice() else { return None };
    let ExprKind::Binary { op: BinOp::Sub, lhs, rhs } = &d.kind else { return None };
    // The only `@entry` of the body: the first save.
    if !is_ticks(lhs) || !matches!(&rhs.kind, ExprKind::Entry(x) if is_ticks(x)) {
        return None;
    }
    let Storage::ShardedStat { hists, copies, row, .. } = layout.storage(g.0) else { return None };
    if !hists.iter().all(|h| matches!(h, HistKey::Log)) || hists.len() > 1 {
        return None;
    }
    let desc = super::layout::stat_desc(&hists);
    Some(telco_abi::artifact::Latency {
        copy: copies,
        row,
        hist: desc.hists.iter().take(desc.nhists as usize).map(|h| h.offset).next(),
    })
}

fn attach_of(p: &Point) -> Attach {
    match p {
        Point::Begin { order } => Attach::Begin { order: *order },
        Point::End { order } => Attach::End { order: *order },
        Point::Error { order } => Attach::Error { order: *order },
        Point::Timer { period_ns, randomize_ns } => {
            Attach::Timer { period_ns: *period_ns, randomize_ns: *randomize_ns }
        }
        Point::Profile { period_ns } => Attach::Profile { period_ns: *period_ns },
        Point::Blocked => Attach::Blocked,
        Point::Function(f) => Attach::Function {
            module: f.module.clone(),
            symbol: f.symbol.clone(),
            addr: f.addr,
            size: f.size,
            file_offset: f.file_offset,
            ret: f.ret,
            itrace: f.itrace,
            only_exe: f.only_exe.clone(),
            hop: f.hop,
            ra_saved: f.ra_saved,
            trap: f.trap,
            go: f.go.clone(),
        },
        Point::Statement { module, addr, site, .. } => Attach::Statement {
            module: module.clone(),
            addr: *addr,
            file_offset: site.file_offset,
            displaced: site.displaced,
            lead: site.lead,
            lead_call: site.call,
            pad: site.pad,
            trap: site.trap,
            semaphore: None,
        },
        Point::Mark(m) => Attach::Statement {
            module: m.module.clone(),
            addr: m.addr,
            file_offset: m.site.file_offset,
            displaced: m.site.displaced,
            lead: m.site.lead,
            lead_call: m.site.call,
            pad: m.site.pad,
            trap: m.site.trap,
            semaphore: m.semaphore,
        },
        Point::ProcessBegin { module } => {
            Attach::Lifecycle { what: point_name(p), event: LifeEvent::ProcessBegin, module: module.clone() }
        }
        Point::ProcessEnd { module } => {
            Attach::Lifecycle { what: point_name(p), event: LifeEvent::ProcessEnd, module: module.clone() }
        }
        Point::ThreadBegin { module } => {
            Attach::Lifecycle { what: point_name(p), event: LifeEvent::ThreadBegin, module: module.clone() }
        }
        Point::ThreadEnd { module } => {
            Attach::Lifecycle { what: point_name(p), event: LifeEvent::ThreadEnd, module: module.clone() }
        }
    }
}

/// `--last-pass 4`: the disassembly of the compiled functions (the runtime
/// library is listed by name only).
pub fn disassemble(a: &Artifact) -> String {
    let mut out = String::new();
    let names: HashMap<u32, &str> = a.symbols.iter().map(|s| (s.offset, s.name.as_str())).collect();
    out.push_str(&format!(
        "; blob: {} bytes, region: {} bytes, {} probe(s)\n; runtime library: {} bytes, {} functions\n",
        a.code.len(),
        a.region_size,
        a.probes.len(),
        rt::RT_CODE.len(),
        rt::RT_SYMBOLS.len()
    ));
    for s in a.symbols.iter().filter(|s| s.offset as usize >= rt::RT_CODE.len()) {
        out.push_str(&format!("\n{}:\n", s.name));
        let bytes = &a.code[s.offset as usize..(s.offset + s.size) as usize];
        (crate::arch::native::TARGET.disassemble)(bytes, s.offset, &names, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{FunctionPoint, MarkPoint, Site};
    use std::path::PathBuf;

    /// One point of each kind. `kind` matches every kind by name, so a new
    /// kind does not compile here until it has its point below.
    fn one_of_each() -> Vec<Point> {
        fn kind(p: &Point) -> usize {
            match p {
                Point::Begin { .. } => 0,
                Point::End { .. } => 1,
                Point::Error { .. } => 2,
                Point::Timer { .. } => 3,
                Point::Profile { .. } => 4,
                Point::Function(_) => 5,
                Point::Statement { .. } => 6,
                Point::Mark(_) => 7,
                Point::ProcessBegin { .. } => 8,
                Point::ProcessEnd { .. } => 9,
                Point::ThreadBegin { .. } => 10,
                Point::ThreadEnd { .. } => 11,
                Point::Blocked => 12,
            }
        }
        let module = PathBuf::from("/usr/bin/true");
        let site = Site { file_offset: 0x1004, displaced: 5, lead: 0, call: false, pad: 0, trap: false };
        let function = FunctionPoint {
            module: module.clone(),
            symbol: "main".into(),
            demangled: None,
            addr: 0x1000,
            size: 32,
            file_offset: 0x1000,
            ret: true,
            itrace: false,
            only_exe: None,
            hop: None,
            ra_saved: None,
            trap: false,
            go: None,
        };
        let mark = MarkPoint {
            module: module.clone(),
            provider: "p".into(),
            name: "m".into(),
            addr: 0x1004,
            semaphore: None,
            args: Vec::new(),
            args_text: String::new(),
            pie: true,
            function: Some("main".into()),
            site,
        };
        let points = vec![
            Point::Begin { order: 0 },
            Point::End { order: 0 },
            Point::Error { order: 0 },
            Point::Timer { period_ns: 1_000_000, randomize_ns: 0 },
            Point::Profile { period_ns: 1_000_000 },
            Point::Function(function),
            Point::Statement { module: module.clone(), addr: 0x1004, function: Some("main".into()), site, label: None },
            Point::Mark(mark),
            Point::ProcessBegin { module: Some(module.clone()) },
            Point::ProcessEnd { module: None },
            Point::ThreadBegin { module: None },
            Point::ThreadEnd { module: Some(module) },
            Point::Blocked,
        ];
        let mut kinds: Vec<usize> = points.iter().map(kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds, (0..13).collect::<Vec<_>>(), "one point of each kind");
        points
    }

    #[test]
    fn a_point_runs_where_its_attach_runs() {
        for p in one_of_each() {
            let a = attach_of(&p);
            assert_eq!(p.runs_in(), a.runs_in(), "{p:?}");
            assert_eq!(p.interruptible(), a.interruptible(), "{p:?}");
        }
    }
}
