//! Walking the program IR: read-only visitors (`visit_stmt`,
//! `visit_expr`) for the analyses of passes 2 and 3, and in-place ones
//! (`stmt_exprs_mut`, `children_mut`) for rewrites.

use super::*;

/// Calls `f` on every expression, outermost first; `f` returns whether to
/// descend into the expression's children.
pub fn visit_stmt<'e>(s: &'e Stmt, f: &mut dyn FnMut(&'e Expr) -> bool) {
    match &s.kind {
        StmtKind::Expr(e) => visit_expr(e, f),
        StmtKind::Block(b) => b.iter().for_each(|s| visit_stmt(s, f)),
        StmtKind::If { cond, then, els } => {
            visit_expr(cond, f);
            visit_stmt(then, f);
            if let Some(e) = els {
                visit_stmt(e, f);
            }
        }
        StmtKind::While { cond, body } => {
            visit_expr(cond, f);
            visit_stmt(body, f);
        }
        StmtKind::For { init, cond, step, body } => {
            for e in [init, cond, step].into_iter().flatten() {
                visit_expr(e, f);
            }
            visit_stmt(body, f);
        }
        StmtKind::Foreach { limit, slice, body, .. } => {
            for e in limit.iter().chain(slice.iter().flatten()) {
                visit_expr(e, f);
            }
            visit_stmt(body, f);
        }
        StmtKind::Return(Some(e)) => visit_expr(e, f),
        StmtKind::DeleteElement { keys, .. } => keys.iter().for_each(|k| visit_expr(k, f)),
        StmtKind::Try { body, handler, .. } => {
            body.iter().for_each(|s| visit_stmt(s, f));
            handler.iter().for_each(|s| visit_stmt(s, f));
        }
        _ => {}
    }
}

pub fn visit_expr<'e>(e: &'e Expr, f: &mut dyn FnMut(&'e Expr) -> bool) {
    if !f(e) {
        return;
    }
    match &e.kind {
        ExprKind::Index { keys, .. } | ExprKind::In { keys, .. } => keys.iter().for_each(|k| visit_expr(k, f)),
        ExprKind::Call { args, .. } | ExprKind::Builtin { args, .. } => args.iter().for_each(|a| visit_expr(a, f)),
        ExprKind::Unary { operand, .. } => visit_expr(operand, f),
        ExprKind::Binary { lhs, rhs, .. } => {
            visit_expr(lhs, f);
            visit_expr(rhs, f);
        }
        ExprKind::Assign { target, value, .. } => {
            visit_expr(target, f);
            visit_expr(value, f);
        }
        ExprKind::IncDec { target, .. } => visit_expr(target, f),
        ExprKind::Ternary { cond, then, els } => {
            visit_expr(cond, f);
            visit_expr(then, f);
            visit_expr(els, f);
        }
        ExprKind::Entry(x) => visit_expr(x, f),
        ExprKind::Aggregate { stat, .. } | ExprKind::HistLog { stat } | ExprKind::HistLinear { stat, .. } => {
            visit_expr(stat, f)
        }
        ExprKind::HistBucket { hist, index } => {
            visit_expr(hist, f);
            visit_expr(index, f);
        }
        _ => {}
    }
}

/// Calls `f` on each expression directly in `s` (and its nested
/// statements); `f` descends itself, with [`children_mut`].
pub fn stmt_exprs_mut(s: &mut Stmt, f: &mut dyn FnMut(&mut Expr)) {
    match &mut s.kind {
        StmtKind::Expr(e) | StmtKind::Return(Some(e)) => f(e),
        StmtKind::Block(b) => b.iter_mut().for_each(|s| stmt_exprs_mut(s, f)),
        StmtKind::If { cond, then, els } => {
            f(cond);
            stmt_exprs_mut(then, f);
            if let Some(e) = els {
                stmt_exprs_mut(e, f);
            }
        }
        StmtKind::While { cond, body } => {
            f(cond);
            stmt_exprs_mut(body, f);
        }
        StmtKind::For { init, cond, step, body } => {
            for e in [init, cond, step].into_iter().flatten() {
                f(e);
            }
            stmt_exprs_mut(body, f);
        }
        StmtKind::Foreach { limit, slice, body, .. } => {
            for e in limit.iter_mut().chain(slice.iter_mut().flatten()) {
                f(e);
            }
            stmt_exprs_mut(body, f);
        }
        StmtKind::DeleteElement { keys, .. } => keys.iter_mut().for_each(f),
        StmtKind::Try { body, handler, .. } => {
            body.iter_mut().chain(handler.iter_mut()).for_each(|s| stmt_exprs_mut(s, f));
        }
        _ => {}
    }
}

/// Calls `f` on each direct operand of `e`.
pub fn children_mut(e: &mut Expr, f: &mut dyn FnMut(&mut Expr)) {
    match &mut e.kind {
        ExprKind::Index { keys, .. } | ExprKind::In { keys, .. } => keys.iter_mut().for_each(f),
        ExprKind::Call { args, .. } | ExprKind::Builtin { args, .. } => args.iter_mut().for_each(f),
        ExprKind::Unary { operand: x, .. }
        | ExprKind::IncDec { target: x, .. }
        | ExprKind::Entry(x)
        | ExprKind::Aggregate { stat: x, .. }
        | ExprKind::HistLog { stat: x }
        | ExprKind::HistLinear { stat: x, .. } => f(x),
        ExprKind::Binary { lhs: a, rhs: b, .. }
        | ExprKind::Assign { target: a, value: b, .. }
        | ExprKind::HistBucket { hist: a, index: b } => {
            f(a);
            f(b);
        }
        ExprKind::Ternary { cond, then, els } => {
            f(cond);
            f(then);
            f(els);
        }
        _ => {}
    }
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
                        crate::program::visit::visit_expr(k, &mut |x| on_expr(x, read, written));
                    }
                }
                crate::program::visit::visit_expr(value, &mut |x| on_expr(x, read, written));
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
            crate::program::visit::visit_stmt(s, &mut |e| on_expr(e, &mut read, &mut written));
        }
    }
    for p in &program.probes {
        if let Some(c) = &p.condition {
            crate::program::visit::visit_expr(c, &mut |x| mark_read(x, &mut read));
        }
    }
    let (mut r2, mut w2) = (read.clone(), written.clone());
    for b in &bodies {
        stmts(b, &mut |_| true, &mut r2, &mut w2);
    }
    (r2, w2)
}
