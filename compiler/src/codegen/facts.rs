//! What pass 3 learns about the program before it translates anything:
//! which globals are sharded per thread, which histograms each statistic
//! collects, what a return probe saves at entry, which globals are printed
//! at the end (written, never read, as SystemTap prints them), and which
//! probe bodies cannot reach MAXACTION (those are not charged per
//! statement).
//!
//! *Sharded counters and statistics* ([`sharded_globals`]): a counter or a
//! statistic that target-side code only adds to, at statement level, gets a
//! copy per thread row, so an update is a plain add into the thread's own
//! copy instead of an atomic on a shared line. The row is the thread
//! slot's `index`: counters live at `Header::shards_off` (one `i64` per
//! counter per row), statistics in rows laid out by `Layout::shard_stats`. A
//! statistic whose histograms are all logarithmic is updated inline
//! (`stat_add_inline` in `translate/storage.rs`), others by
//! `rt_stat_add_local`. Readers in the tracer sum or merge the copies
//! (`rt_shard_sum`, `rt_stat_merge`); an assignment from the tracer
//! (`rt_shard_set`) may lose adds made meanwhile.

use super::layout::HistKey;
use crate::program::visit::{global_use, visit_expr, visit_stmt};
use crate::program::*;
use crate::span::SourceMap;
use std::collections::HashMap;
use telco_abi::artifact::Runs;

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
        crate::program::visit::visit_expr(e, &mut |x| {
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
                StmtKind::Foreach { limit, slice, body, .. } => {
                    for e in limit.iter().chain(slice.iter().flatten()) {
                        mark(e, bad);
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
        let in_target = p.points.iter().any(|pt| pt.runs_in() == Runs::Target);
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

/// How code that can run in a target (function probes and script
/// functions, as for [`sharded_globals`]) changes each global: only by
/// adds (`++`, `--`, `+=`, `-=`, `<<<` on the global or an element), by
/// anything else (assignments, `delete`), or not at all. The tracer folds
/// the regions of processes of other trust domains into the session's by
/// it (`Artifact::globals`).
pub fn merge_kinds(program: &Program) -> Vec<telco_abi::artifact::Merge> {
    use crate::ast::AssignOp;
    use telco_abi::artifact::Merge;
    fn global_of(e: &Expr) -> Option<usize> {
        match &e.kind {
            ExprKind::Global(g) | ExprKind::Index { array: g, .. } => Some(g.0 as usize),
            _ => None,
        }
    }
    fn on_stmts(ss: &[crate::program::Stmt], add: &mut [bool], other: &mut [bool]) {
        for s in ss {
            match &s.kind {
                crate::program::StmtKind::DeleteGlobal(g)
                | crate::program::StmtKind::DeleteElement { array: g, .. } => other[g.0 as usize] = true,
                crate::program::StmtKind::Block(b) => on_stmts(b, add, other),
                crate::program::StmtKind::If { then, els, .. } => {
                    on_stmts(std::slice::from_ref(then), add, other);
                    if let Some(e) = els {
                        on_stmts(std::slice::from_ref(e), add, other);
                    }
                }
                crate::program::StmtKind::While { body, .. }
                | crate::program::StmtKind::For { body, .. }
                | crate::program::StmtKind::Foreach { body, .. } => on_stmts(std::slice::from_ref(body), add, other),
                crate::program::StmtKind::Try { body, handler, .. } => {
                    on_stmts(body, add, other);
                    on_stmts(handler, add, other);
                }
                _ => {}
            }
            visit_stmt(s, &mut |e| {
                match &e.kind {
                    ExprKind::IncDec { target, .. } => {
                        if let Some(g) = global_of(target) {
                            add[g] = true;
                        }
                    }
                    ExprKind::Assign { op, target, .. } => {
                        if let Some(g) = global_of(target) {
                            match op {
                                AssignOp::Add | AssignOp::Sub | AssignOp::Aggregate => add[g] = true,
                                _ => other[g] = true,
                            }
                        }
                    }
                    _ => {}
                }
                true
            });
        }
    }
    let n = program.globals.len();
    let (mut add, mut other) = (vec![false; n], vec![false; n]);
    for p in &program.probes {
        if p.points.iter().any(|pt| pt.runs_in() == Runs::Target) {
            on_stmts(&p.body, &mut add, &mut other);
        }
    }
    for f in &program.functions {
        on_stmts(&f.body, &mut add, &mut other);
    }
    (0..n)
        .map(|g| {
            if other[g] {
                Merge::Assign
            } else if add[g] {
                Merge::Add
            } else {
                Merge::Untouched
            }
        })
        .collect()
}

/// Bytes a probe's `@entry(...)` values take in its save area.
pub fn entry_save_size(p: &Probe, cap: u32) -> u32 {
    collect_entries(p).iter().map(|e| if e.ty == Ty::String { cap } else { 8 }).sum()
}

/// The `@entry(...)` expressions of a probe, in order of appearance.
pub(super) fn collect_entries(p: &Probe) -> Vec<&Expr> {
    let mut out = Vec::new();
    for s in &p.body {
        visit_stmt(s, &mut |e| {
            if let ExprKind::Entry(inner) = &e.kind {
                out.push(&**inner);
                false
            } else {
                true
            }
        });
    }
    out
}

/// The histograms each statistic global needs, from its `@hist_*` uses.
pub fn collect_hists(program: &Program) -> HashMap<u32, Vec<HistKey>> {
    let mut out: HashMap<u32, Vec<HistKey>> = HashMap::new();
    let mut add = |e: &Expr| {
        let (stat, key) = match &e.kind {
            ExprKind::HistLog { stat } => (stat, HistKey::Log),
            ExprKind::HistLinear { stat, lo, hi, step } => (stat, HistKey::Linear { lo: *lo, hi: *hi, step: *step }),
            ExprKind::Aggregate { op: crate::program::AggOp::Variance, stat, shift } => {
                (stat, HistKey::Variance(*shift))
            }
            _ => return true,
        };
        let g = match &stat.kind {
            ExprKind::Global(g) | ExprKind::Index { array: g, .. } => g.0,
            _ => return true,
        };
        let v = out.entry(g).or_default();
        // One bit shift per statistic: the first given (SystemTap refuses
        // two different ones).
        let shifted =
            matches!(key, HistKey::Variance(_)) && v.iter().any(|k| matches!(k, HistKey::Variance(s) if *s != 0));
        if !v.contains(&key) && !shifted {
            v.retain(|k| !matches!((k, key), (HistKey::Variance(0), HistKey::Variance(_))));
            v.push(key);
        }
        true
    };
    let bodies = program.functions.iter().map(|f| &f.body).chain(program.probes.iter().map(|p| &p.body));
    for body in bodies {
        for s in body {
            visit_stmt(s, &mut add);
        }
    }
    // `Variance` after the histograms: their positions are their indices.
    for v in out.values_mut() {
        v.sort_by_key(|k| matches!(k, HistKey::Variance(_)));
    }
    out
}

/// An upper bound of the actions a probe body charges, when it has no
/// loops and calls no script function (None otherwise).
pub(super) fn static_action_bound(p: &Probe) -> Option<u64> {
    /// Whether what `visit` walks calls a script function.
    fn calls<'e>(visit: impl FnOnce(&mut dyn FnMut(&'e Expr) -> bool)) -> bool {
        let mut calls = false;
        visit(&mut |e| {
            calls |= matches!(e.kind, ExprKind::Call { .. });
            !calls
        });
        calls
    }
    fn stmt(s: &Stmt) -> Option<u64> {
        if calls(|f| visit_stmt(s, f)) {
            return None;
        }
        Some(match &s.kind {
            StmtKind::While { .. } | StmtKind::For { .. } | StmtKind::Foreach { .. } => return None,
            StmtKind::Block(b) => b.iter().map(stmt).sum::<Option<u64>>()?,
            StmtKind::If { then, els, .. } => 1 + stmt(then)? + els.as_deref().map_or(Some(0), stmt)?,
            StmtKind::Try { body, handler, .. } => {
                2 + body.iter().map(stmt).sum::<Option<u64>>()? + handler.iter().map(stmt).sum::<Option<u64>>()?
            }
            _ => 1,
        })
    }
    if p.condition.as_ref().is_some_and(|c| calls(|f| visit_expr(c, f))) {
        return None;
    }
    p.body.iter().map(stmt).sum()
}
