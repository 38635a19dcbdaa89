//! SystemTap's warnings about the script's own variables.

use crate::diag::Diagnostic;
use crate::program::visit::global_use;
use crate::program::*;
use crate::span::SourceMap;

/// SystemTap's warnings about the script's own variables (not the
/// tapsets'): a variable read but never assigned (always 0 or ""), and a
/// global never used at all.
pub fn variable_warnings(program: &Program, sources: &SourceMap, unoptimized: bool) -> Vec<Diagnostic> {
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
        if !read[i] && !written[i] && !unoptimized {
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
                    crate::program::visit::visit_expr(value, &mut |x| scan(x, assigned, used));
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
            crate::program::visit::visit_stmt(st, &mut |e| scan(e, &mut assigned, &mut used));
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
